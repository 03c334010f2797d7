//! The whole QP state table through the software ConnectX: for RC, UC and UD, a fresh QP is
//! brought to each source state (Reset, Init, RTR, RTS, SQD, SQE for UC/UD — reached the way the
//! hardware reaches it, a send WQE failing with a local protection error — and Error), and
//! `SimDevice::modify_qp` is called towards every target state with the required mask, the
//! required mask plus each optional bit, minus each required bit (`IBV_QP_STATE` included),
//! plus each bit the transition does not accept, and plus undefined bits. Each call must
//! succeed exactly when the Linux kernel's `qp_state_table` / `ib_modify_qp_is_ok`
//! (drivers/infiniband/core/verbs.c) allows it; a refusal must name the missing or forbidden
//! attribute or the illegal transition and leave the QP where it was; a success must leave
//! `query_qp` reporting the target state and every attribute the mask carried.
//!
//! The expected table is text, independent of `mlx5_hw::qp_state`: the transcription of the
//! kernel table in `hw/tests/data/kernel_qp_state_table.rs`, shared with
//! `hw/tests/qp_state_table.rs` (which checks the library alone).

use mlx5_direct::hw::{
    AccessFlags, AhAttr, AttrMask, CqInitAttr, Device, Gid, GlobalRoute, Mtu, PdId, QpAttr, QpCap,
    QpInfo, QpInitAttr, QpState, QpType,
};
use mlx5_direct::qp::{Qp, SendWr, Sge, UdDest};
use mlx5_direct::sim::{DeviceConfig, Fabric, SimDevice};
use std::collections::HashMap;

include!("../../hw/tests/data/kernel_qp_state_table.rs");

const STATE: u32 = 1;
const CUR_STATE: u32 = 1 << 1;
/// Bits verbs does not define (21..=24 are unused, 26 and up do not exist).
const UNDEFINED_BITS: [u32; 3] = [1 << 21, 1 << 24, 1 << 26];

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Error,
];
const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

/// The kernel's spelling of a state, as the error messages print it.
fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Error => "ERR",
    }
}

/// The verbs name of each bit in `mask` (`IBV_QP_SQ_PSN`, ...), as the refusals print them.
fn verbs_names(mask: u32) -> Vec<String> {
    KERNEL_BITS
        .iter()
        .filter(|(_, b)| mask & b != 0)
        .map(|(n, _)| n.replacen("IB_QP_", "IBV_QP_", 1))
        .collect()
}

/// What the kernel answers, and the words its refusal must contain.
#[derive(Debug)]
enum Expect {
    /// The modify succeeds and the QP reaches this state.
    Ok(QpState),
    /// Refused; the message contains each of these.
    Refused(Vec<String>),
}

/// The kernel's verdict on `mask` for a `ty` QP in `cur` asked to go to `next`: without
/// `IB_QP_STATE` the target is the current state (`mlx5_ib_modify_qp`); bits verbs does not
/// define are refused first, then a transition not in the table, then missing required bits,
/// then bits the transition does not accept — `IB_QP_CUR_STATE` among them unless the QP is in
/// RTR, RTS, SQD or SQE (`ib_modify_qp_is_ok`).
fn expect(
    t: &HashMap<Key, (u32, u32)>,
    cur: QpState,
    next: QpState,
    ty: QpType,
    mask: u32,
) -> Expect {
    let defined = KERNEL_BITS.iter().fold(0, |a, (_, b)| a | b);
    if mask & !defined != 0 {
        return Expect::Refused(vec!["attr_mask".into()]);
    }
    let next = if mask & STATE != 0 { next } else { cur };
    let Some(&(req, opt)) = t.get(&(cur, next, ty)) else {
        return Expect::Refused(vec![
            "illegal QP transition".into(),
            format!("{} -> {}", state_name(cur), state_name(next)),
        ]);
    };
    let missing = req & !mask;
    if missing != 0 {
        let mut words = verbs_names(missing);
        words.push("requires".into());
        return Expect::Refused(words);
    }
    let mut forbidden = mask & !(req | opt | STATE);
    if mask & CUR_STATE != 0
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        forbidden |= CUR_STATE;
    }
    if forbidden != 0 {
        let mut words = verbs_names(forbidden);
        words.push("does not accept".into());
        return Expect::Refused(words);
    }
    Expect::Ok(next)
}

/// Valid values for every attribute. `variant` 0 is used to bring QPs to their source state,
/// 1 for the modify under test, so a query shows the tested modify's values, not leftovers
/// (the P_Key index and port have a single valid value on the software ConnectX: one port,
/// one P_Key).
fn attrs(ty: QpType, cur: QpState, next: QpState, peer_gid: Gid, variant: u8) -> QpAttr {
    let v = variant == 1;
    QpAttr {
        qp_state: next,
        cur_qp_state: cur,
        path_mtu: if v { Mtu::Mtu512 } else { Mtu::Mtu1024 },
        qkey: if v { 0x2222_2222 } else { 0x1111_1111 },
        rq_psn: if v { 0x00ab_cdef } else { 0x0012_3456 },
        sq_psn: if v { 0x0065_4321 } else { 0x0000_0777 },
        dest_qp_num: if v { 0x00fe_dcba } else { 0x0000_0abc },
        qp_access_flags: match (ty, v) {
            (QpType::Rc, true) => AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            (QpType::Rc, false) => AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            (_, true) => AccessFlags::REMOTE_WRITE,
            (_, false) => AccessFlags::LOCAL_WRITE,
        },
        pkey_index: 0,
        port_num: 1,
        ah_attr: AhAttr {
            dlid: 0,
            sl: if v { 3 } else { 0 },
            src_path_bits: 0,
            static_rate: 0,
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: peer_gid,
                flow_label: if v { 0x12345 } else { 0 },
                sgid_index: 0,
                hop_limit: if v { 32 } else { 64 },
                traffic_class: if v { 0x20 } else { 0 },
            }),
        },
        max_rd_atomic: if v { 4 } else { 1 },
        max_dest_rd_atomic: if v { 8 } else { 2 },
        min_rnr_timer: if v { 20 } else { 12 },
        timeout: if v { 18 } else { 14 },
        retry_cnt: if v { 5 } else { 7 },
        rnr_retry: if v { 6 } else { 7 },
        en_sqd_async_notify: v,
        sq_draining: false,
        cap: QpCap::default(),
    }
}

/// The attributes `mask` carries, as `query_qp` must report them after a successful modify
/// (`IB_QP_STATE`, `CUR_STATE` and the bits without a field in `QpAttr` — ALT_PATH,
/// PATH_MIG_STATE, CAP, RATE_LIMIT — are not compared).
fn check_attrs_set(got: &QpAttr, want: &QpAttr, mask: AttrMask, what: &str) {
    macro_rules! field {
        ($bit:ident, $f:ident) => {
            if mask.contains(AttrMask::$bit) {
                assert_eq!(
                    got.$f,
                    want.$f,
                    "{what}: IBV_QP_{} not stored",
                    stringify!($bit)
                );
            }
        };
    }
    field!(ACCESS_FLAGS, qp_access_flags);
    field!(PKEY_INDEX, pkey_index);
    field!(PORT, port_num);
    field!(QKEY, qkey);
    field!(AV, ah_attr);
    field!(PATH_MTU, path_mtu);
    field!(TIMEOUT, timeout);
    field!(RETRY_CNT, retry_cnt);
    field!(RNR_RETRY, rnr_retry);
    field!(RQ_PSN, rq_psn);
    field!(MAX_QP_RD_ATOMIC, max_rd_atomic);
    field!(MIN_RNR_TIMER, min_rnr_timer);
    field!(SQ_PSN, sq_psn);
    field!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    field!(DEST_QPN, dest_qp_num);
    field!(EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
}

/// A device under test, a peer whose GID the address vectors name, and QPs on demand.
struct Bench {
    fabric: Fabric,
    dev: SimDevice,
    pd: PdId,
    cq: mlx5_direct::hw::CqId,
    peer_gid: Gid,
    table: HashMap<Key, (u32, u32)>,
    /// One QP per (type, source state), replaced when a modify moved it elsewhere.
    pool: HashMap<(QpType, QpState), QpInfo>,
    created: usize,
    modifies: usize,
}

impl Bench {
    fn new() -> Bench {
        let fabric = Fabric::new();
        let dev = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]));
        let peer = fabric.add_device(DeviceConfig::new([10, 0, 0, 2]));
        let peer_gid = peer.query_gid(1, 0).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev
            .create_cq(&CqInitAttr {
                cqe: 1024,
                cqe_size: 64,
                ignore_overrun: true,
                channel: None,
            })
            .unwrap()
            .id;
        Bench {
            fabric,
            dev,
            pd,
            cq,
            peer_gid,
            table: expected_table(),
            pool: HashMap::new(),
            created: 0,
            modifies: 0,
        }
    }

    fn modify(&mut self, qp: &QpInfo, attr: &QpAttr, mask: u32) -> mlx5_direct::hw::Result<()> {
        self.modifies += 1;
        self.dev
            .modify_qp(qp.id, attr, AttrMask::from_bits_retain(mask))
    }

    /// Moves `qp` along the table's required attributes from `cur` to `next`.
    fn step(&mut self, qp: &QpInfo, ty: QpType, cur: QpState, next: QpState) {
        let (req, _) = self.table[&(cur, next, ty)];
        let a = attrs(ty, cur, next, self.peer_gid, 0);
        self.modify(qp, &a, req | STATE)
            .unwrap_or_else(|e| panic!("{ty} {cur} -> {next} while setting up: {e}"));
    }

    /// A QP of type `ty` in state `s`: the pooled one if it is still there, else a new one.
    fn qp(&mut self, ty: QpType, s: QpState) -> QpInfo {
        if let Some(qp) = self.pool.get(&(ty, s)).copied() {
            if self.dev.query_qp(qp.id).unwrap().qp_state == s {
                return qp;
            }
            self.dev.destroy_qp(qp.id).unwrap();
        }
        let qp = self.fresh(ty, s);
        self.pool.insert((ty, s), qp);
        qp
    }

    fn fresh(&mut self, ty: QpType, s: QpState) -> QpInfo {
        use QpState::*;
        self.created += 1;
        let qp = self
            .dev
            .create_qp(
                self.pd,
                &QpInitAttr {
                    qp_type: ty,
                    send_cq: self.cq,
                    recv_cq: self.cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 4,
                        max_recv_wr: 4,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .unwrap();
        let path: &[QpState] = match s {
            Reset => &[],
            Init => &[Init],
            Rtr => &[Init, Rtr],
            Rts | Sqe => &[Init, Rtr, Rts],
            Sqd => &[Init, Rtr, Rts, Sqd],
            Error => &[Init, Error],
        };
        let mut cur = Reset;
        for &next in path {
            self.step(&qp, ty, cur, next);
            cur = next;
        }
        if s == Sqe {
            self.fail_a_send(&qp, ty);
        }
        assert_eq!(
            self.dev.query_qp(qp.id).unwrap().qp_state,
            s,
            "{ty} QP set up in {s}"
        );
        qp
    }

    /// A send WQE whose lkey names no memory region: the device completes it with a local
    /// protection error and, the QP being UC or UD, moves it to SQE (IBTA vol. 1 §10.3.1).
    fn fail_a_send(&mut self, qp: &QpInfo, ty: QpType) {
        // SAFETY: the QP lives until the end of the test and this `Qp` is dropped at the end
        // of this function, before anything else could post to it.
        let mut dp = unsafe { Qp::from_layout(&qp.layout, None) }.unwrap();
        dp.set_state(QpState::Rts);
        let bad = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 0xdead_be00,
        }];
        let ah;
        let dest;
        let mut wr = SendWr::send(1).sges(&bad).signaled();
        if ty == QpType::Ud {
            let a = attrs(ty, QpState::Rts, QpState::Rts, self.peer_gid, 0);
            ah = self.dev.create_ah(self.pd, &a.ah_attr).unwrap();
            dest = UdDest::new(&ah.av, 0xabc, a.qkey);
            wr = wr.ud(&dest);
        }
        dp.post(&wr).unwrap();
        self.fabric.run_until_idle();
    }
}

/// For one source state: every target × every mask of interest, on the sim, against the
/// kernel's answer. Returns (cases, successes).
fn run_source(b: &mut Bench, ty: QpType, cur: QpState) -> (usize, usize) {
    let (mut cases, mut oks) = (0, 0);
    let defined: Vec<u32> = KERNEL_BITS.iter().map(|(_, b)| *b).collect();
    for next in STATES {
        let (req, opt) = b.table.get(&(cur, next, ty)).copied().unwrap_or((0, 0));
        let base = req | STATE;
        let mut masks = vec![base];
        masks.extend(defined.iter().filter(|&&x| opt & x != 0).map(|x| base | x));
        masks.extend(
            defined
                .iter()
                .filter(|&&x| base & x != 0)
                .map(|x| base & !x),
        );
        masks.extend(
            defined
                .iter()
                .filter(|&&x| (base | opt) & x == 0)
                .map(|x| base | x),
        );
        masks.extend(UNDEFINED_BITS.iter().map(|x| base | x));
        masks.dedup();
        for mask in masks {
            cases += 1;
            let qp = b.qp(ty, cur);
            let attr = attrs(ty, cur, next, b.peer_gid, 1);
            let what = format!("{ty} {cur} -> {next} mask {mask:#x}");
            let got = b.modify(&qp, &attr, mask);
            let now = b.dev.query_qp(qp.id).unwrap();
            match (expect(&b.table, cur, next, ty, mask), got) {
                (Expect::Ok(reached), Ok(())) => {
                    oks += 1;
                    assert_eq!(now.qp_state, reached, "{what}: query_qp after success");
                    if reached != QpState::Reset {
                        check_attrs_set(&now, &attr, AttrMask::from_bits_retain(mask), &what);
                    }
                }
                (Expect::Ok(_), Err(e)) => {
                    panic!("{what}: the kernel allows it, the sim refused: {e}")
                }
                (Expect::Refused(words), Ok(())) => {
                    panic!("{what}: the kernel refuses it ({words:?}), the sim allowed it")
                }
                (Expect::Refused(words), Err(e)) => {
                    let msg = e.to_string();
                    for w in &words {
                        assert!(
                            msg.contains(w.as_str()),
                            "{what}: {msg:?} does not name {w}"
                        );
                    }
                    assert_eq!(now.qp_state, cur, "{what}: a refused modify moved the QP");
                }
            }
        }
    }
    (cases, oks)
}

#[test]
fn every_transition_mask_and_type_on_the_software_connectx() {
    let mut b = Bench::new();
    let (mut cases, mut oks) = (0, 0);
    for ty in TYPES {
        for cur in STATES {
            // An RC QP never enters SQE: its send errors take it to Error (IBTA vol. 1
            // §10.3.1; the kernel's SQE row is unreachable for RC).
            if ty == QpType::Rc && cur == QpState::Sqe {
                continue;
            }
            let (c, o) = run_source(&mut b, ty, cur);
            cases += c;
            oks += o;
        }
    }
    // Each legal cell succeeds once with its required set and once per optional bit; count
    // them from the table so a skipped case fails the test.
    let want_oks: usize = b
        .table
        .iter()
        .filter(|((cur, _, ty), _)| !(*ty == QpType::Rc && *cur == QpState::Sqe))
        .map(|(_, (_, opt))| 1 + opt.count_ones() as usize)
        .sum::<usize>();
    // Plus the masks without IB_QP_STATE that leave a QP where it is and are legal there.
    assert!(
        oks >= want_oks,
        "{oks} successes, at least {want_oks} expected"
    );
    assert!(cases > 20 * 7 * 25, "{cases} cases");
    assert!(b.modifies < 8000, "{} modifies: keep it cheap", b.modifies);
    let bugs = b.fabric.driver_bugs();
    assert!(bugs.is_empty(), "{bugs:#?}");
    eprintln!(
        "{cases} cases, {oks} accepted, {} QPs created, {} modifies",
        b.created, b.modifies
    );
}

/// `IBV_QP_CUR_STATE` naming a state the QP is not in is refused (the kernel would believe
/// it; the sim checks it, as `mlx5_hw::qp_state::validate` documents), and nothing moves.
#[test]
fn a_wrong_cur_state_is_refused_and_named() {
    let mut b = Bench::new();
    for ty in TYPES {
        let qp = b.qp(ty, QpState::Rts);
        let mut a = attrs(ty, QpState::Rtr, QpState::Rts, b.peer_gid, 1);
        a.cur_qp_state = QpState::Rtr;
        let e = b
            .modify(&qp, &a, STATE | CUR_STATE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("IBV_QP_CUR_STATE") && e.contains("RTR"), "{e}");
        assert_eq!(b.dev.query_qp(qp.id).unwrap().qp_state, QpState::Rts);
    }
}
