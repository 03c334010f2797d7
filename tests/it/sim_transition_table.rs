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
//! `hw/tests/qp_state_table.rs` (which checks the library alone), in its newest version (Linux
//! 7.2, the kernel the software ConnectX follows). Around the table the expectation models, as
//! the kernel and an mlx5 device answer from user space: undefined mask bits refused first
//! (EOPNOTSUPP, uverbs); `IB_QP_PORT` added to an `IB_QP_AV` outside INIT->RTR (uverbs
//! `modify_qp`); `IB_QP_ALT_PATH` refused on the RoCE port (EINVAL, `_ib_modify_qp`); and
//! `IB_QP_RATE_LIMIT`, which the 7.2 table passes through, refused by the device (EOPNOTSUPP,
//! `__mlx5_ib_modify_qp`) except in RESET->RESET, which the driver answers before looking, and
//! refused before the table when it is the whole mask outside RTS (7.2's deferred rate limit).
//! Every refusal's errno class is checked.

use mlx5_direct::datapath::{Qp, SendWr, Sge, UdDest};
use mlx5_direct::hw::qp_state::KernelVersion;
use mlx5_direct::hw::{
    AccessFlags, AhAttr, AttrMask, CqInitAttr, Device, Gid, GlobalRoute, MigState, Mtu, PdId,
    QpAttr, QpCap, QpInfo, QpInitAttr, QpState, QpType,
};
use mlx5_direct::sim::{DeviceConfig, Fabric, SimDevice};
use std::collections::HashMap;

include!("../../hw/tests/data/kernel_qp_state_table.rs");

const STATE: u32 = 1;
const CUR_STATE: u32 = 1 << 1;
const PORT: u32 = 1 << 5;
const AV: u32 = 1 << 7;
const ALT_PATH: u32 = 1 << 14;
const RATE_LIMIT: u32 = 1 << 25;
const EINVAL: i32 = 22;
const EOPNOTSUPP: i32 = 95;
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
    /// Refused with this errno; the message contains each of these.
    Refused(i32, Vec<String>),
}

/// The transcribed kernel the software ConnectX follows: the newest.
fn sim_kernel() -> Kernel {
    let k = *KERNELS.last().expect("kernels");
    assert_eq!(k, Kernel::V7_2);
    assert_eq!(KernelVersion::DEFAULT, KernelVersion::Linux7_2);
    k
}

/// The verdict of the kernel (7.2) and an mlx5 device on `mask` for a `ty` QP in `cur` asked
/// to go to `next`, on a RoCE port, from user space:
/// undefined bits refused first (uverbs, EOPNOTSUPP); `IB_QP_ALT_PATH` refused on RoCE
/// (`_ib_modify_qp`, EINVAL); then the table (`ib_modify_qp_is_ok`, EINVAL) on the mask uverbs
/// hands it — `IB_QP_PORT` added to an `IB_QP_AV` outside INIT->RTR — with the target the
/// current state without `IB_QP_STATE` (`mlx5_ib_modify_qp`): a transition not in the table,
/// then missing required bits, then bits the transition does not accept (`IB_QP_CUR_STATE`
/// among them unless the QP is in RTR, RTS, SQD or SQE), `IB_QP_RATE_LIMIT` passed through;
/// last the device: `IB_QP_RATE_LIMIT` unsupported (EOPNOTSUPP) except in RESET->RESET.
fn expect(
    t: &HashMap<Key, (u32, u32)>,
    pass: u32,
    cur: QpState,
    next: QpState,
    ty: QpType,
    mask: u32,
) -> Expect {
    let defined = KERNEL_BITS.iter().fold(0, |a, (_, b)| a | b);
    if mask & !defined != 0 {
        return Expect::Refused(EOPNOTSUPP, vec!["attr_mask".into()]);
    }
    // 7.2 `mlx5_ib_modify_qp`: a rate limit alone outside RTS is parsed before the table
    // (commit 915bbc8578e3, "deferred rate limit"); this device paces no RC/UC/UD QP.
    if mask == RATE_LIMIT && cur != QpState::Rts {
        return Expect::Refused(
            EOPNOTSUPP,
            vec!["IBV_QP_RATE_LIMIT".into(), "not supported".into()],
        );
    }
    if mask & ALT_PATH != 0 {
        return Expect::Refused(EINVAL, vec!["IBV_QP_ALT_PATH".into(), "RoCE".into()]);
    }
    // `next` is also the `qp_state` the modify carries (`attrs`).
    let added =
        if mask & AV != 0 && mask & PORT == 0 && !(mask & STATE != 0 && next == QpState::Rtr) {
            PORT
        } else {
            0
        };
    let seen = mask | added;
    let next = if seen & STATE != 0 { next } else { cur };
    let Some(&(req, opt)) = t.get(&(cur, next, ty)) else {
        return Expect::Refused(
            EINVAL,
            vec![
                "illegal QP transition".into(),
                format!("{} -> {}", state_name(cur), state_name(next)),
            ],
        );
    };
    let missing = req & !seen;
    if missing != 0 {
        let mut words = verbs_names(missing);
        words.push("requires".into());
        return Expect::Refused(EINVAL, words);
    }
    let mut forbidden = seen & !(req | opt | STATE | pass);
    if seen & CUR_STATE != 0
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        forbidden |= CUR_STATE;
    }
    if forbidden == added && added != 0 {
        return Expect::Refused(
            EINVAL,
            vec!["IBV_QP_PORT".into(), "IBV_QP_AV".into(), "uverbs".into()],
        );
    }
    let forbidden = forbidden & !added;
    if forbidden != 0 {
        let mut words = verbs_names(forbidden);
        words.push("does not accept".into());
        return Expect::Refused(EINVAL, words);
    }
    if seen & RATE_LIMIT != 0 && !(cur == QpState::Reset && next == QpState::Reset) {
        return Expect::Refused(
            EOPNOTSUPP,
            vec!["IBV_QP_RATE_LIMIT".into(), "not supported".into()],
        );
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
        alt_ah_attr: AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: peer_gid,
                ..GlobalRoute::default()
            }),
            ..AhAttr::default()
        },
        alt_pkey_index: 0,
        alt_port_num: 1,
        alt_timeout: 14,
        path_mig_state: if v {
            MigState::Rearm
        } else {
            MigState::Migrated
        },
        rate_limit: if v { 10_000 } else { 0 },
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
/// (`IB_QP_STATE`, `CUR_STATE` and `CAP` are not compared; `ALT_PATH` and `RATE_LIMIT` never
/// succeed on this RoCE device outside RESET->RESET, after which nothing is kept; a `PORT` the
/// kernel added with `AV` is the address's port, which `attrs` makes the same).
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
    field!(PATH_MIG_STATE, path_mig_state);
    field!(ALT_PATH, alt_ah_attr);
    field!(ALT_PATH, alt_port_num);
    field!(RATE_LIMIT, rate_limit);
    if mask.contains(AttrMask::AV) {
        assert_eq!(
            got.port_num, want.ah_attr.port_num,
            "{what}: the port follows the address"
        );
    }
}

/// A device under test, a peer whose GID the address vectors name, and QPs on demand.
struct Bench {
    fabric: Fabric,
    dev: SimDevice,
    pd: PdId,
    cq: mlx5_direct::hw::CqId,
    peer_gid: Gid,
    table: HashMap<Key, (u32, u32)>,
    /// Bits the table passes through on every legal transition.
    pass: u32,
    /// Refusals seen, by errno.
    refused: HashMap<i32, usize>,
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
            table: expected_table(sim_kernel()),
            pass: pass_through(sim_kernel()),
            refused: HashMap::new(),
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
            match (expect(&b.table, b.pass, cur, next, ty, mask), got) {
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
                (Expect::Refused(_, words), Ok(())) => {
                    panic!("{what}: the kernel refuses it ({words:?}), the sim allowed it")
                }
                (Expect::Refused(errno, words), Err(e)) => {
                    let msg = e.to_string();
                    for w in &words {
                        assert!(
                            msg.contains(w.as_str()),
                            "{what}: {msg:?} does not name {w}"
                        );
                    }
                    assert_eq!(e.errno(), errno, "{what}: errno of {msg:?}");
                    *b.refused.entry(errno).or_default() += 1;
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
    // Each legal cell succeeds once with its required set and once per optional bit the RoCE
    // device takes (not ALT_PATH; for UC SQD->SQD not AV, which brings IB_QP_PORT); count them
    // from the table so a skipped case fails the test.
    let want_oks: usize = b
        .table
        .iter()
        .filter(|((cur, _, ty), _)| {
            TYPES.contains(ty) && !(*ty == QpType::Rc && *cur == QpState::Sqe)
        })
        .map(|(&(_, next, _), &(req, opt))| {
            let refused = |bit: u32| {
                bit == ALT_PATH
                    || (bit == AV && req & PORT == 0 && opt & PORT == 0 && next != QpState::Rtr)
            };
            1 + (0..32)
                .map(|i| 1u32 << i)
                .filter(|&bit| opt & bit != 0 && !refused(bit))
                .count()
        })
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
    // Both classes were seen (undefined bits and the rate limit are EOPNOTSUPP).
    assert!(
        b.refused.get(&EINVAL).copied().unwrap_or(0) > 100,
        "{:?}",
        b.refused
    );
    assert!(
        b.refused.get(&EOPNOTSUPP).copied().unwrap_or(0) > 20,
        "{:?}",
        b.refused
    );
    eprintln!(
        "{cases} cases, {oks} accepted, refused by errno {:?}, {} QPs created, {} modifies",
        b.refused, b.created, b.modifies
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

/// The required attributes of `cur -> next` for `ty` (from the transcribed table) with `extra`.
fn required_with(b: &Bench, ty: QpType, cur: QpState, next: QpState, extra: u32) -> AttrMask {
    let (req, _) = b.table[&(cur, next, ty)];
    AttrMask::from_bits_retain(req | STATE | extra)
}

/// On the RoCE port an address without a GRH is refused before the device looks for a LID, and
/// the refusal says why (RoCE needs a GRH); on an InfiniBand port a LID nobody has is named.
#[test]
fn an_address_without_a_grh_is_refused_with_the_grh_hint() {
    let mut b = Bench::new();
    let qp = b.qp(QpType::Rc, QpState::Init);
    let mut a = attrs(QpType::Rc, QpState::Init, QpState::Rtr, b.peer_gid, 1);
    a.ah_attr.grh = None;
    a.ah_attr.dlid = 0;
    let m = required_with(&b, QpType::Rc, QpState::Init, QpState::Rtr, 0);
    let e = b.dev.modify_qp(qp.id, &a, m).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("GRH") && msg.contains("is_global = 1") && msg.contains("RoCE"),
        "{msg}"
    );
    assert!(!msg.contains("no port on the fabric"), "{msg}");
    assert_eq!(e.errno(), EINVAL);
    assert_eq!(b.dev.query_qp(qp.id).unwrap().qp_state, QpState::Init);

    let f = Fabric::new();
    let ib = DeviceConfig {
        lid: 0x11,
        link_layer: mlx5_direct::hw::LinkLayer::InfiniBand,
        ..DeviceConfig::new([10, 0, 1, 1])
    };
    let d = f.add_device(ib);
    let (_, qp) = ib_qp(&d, QpType::Rc);
    let e = d.modify_qp(qp.id, &a, m).unwrap_err().to_string();
    assert!(
        e.contains("no port on the fabric has LID 0") && e.contains("GRH"),
        "{e}"
    );
}

/// A `ty` QP of `d`, in Init (port 1, P_Key 0), with its PD.
fn ib_qp(d: &SimDevice, ty: QpType) -> (PdId, QpInfo) {
    let pd = d.alloc_pd().unwrap();
    let cq = d
        .create_cq(&CqInitAttr {
            cqe: 16,
            cqe_size: 64,
            ignore_overrun: true,
            channel: None,
        })
        .unwrap()
        .id;
    let qp = d
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type: ty,
                send_cq: cq,
                recv_cq: cq,
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
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..QpAttr::default()
    };
    d.modify_qp(
        qp.id,
        &init,
        AttrMask::STATE | AttrMask::PORT | AttrMask::PKEY_INDEX | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    (pd, qp)
}

/// `IBV_QP_ALT_PATH` is refused on the RoCE port (EINVAL, before the table) and kept on an
/// InfiniBand port, where `query_qp` returns the alternate path and the path-migration state.
#[test]
fn the_alternate_path_is_refused_on_roce_and_kept_on_infiniband() {
    let mut b = Bench::new();
    let qp = b.qp(QpType::Rc, QpState::Init);
    let a = attrs(QpType::Rc, QpState::Init, QpState::Rtr, b.peer_gid, 1);
    let m = required_with(&b, QpType::Rc, QpState::Init, QpState::Rtr, ALT_PATH);
    let e = b.dev.modify_qp(qp.id, &a, m).unwrap_err();
    assert!(e.to_string().contains("IBV_QP_ALT_PATH"), "{e}");
    assert_eq!(e.errno(), EINVAL);
    assert_eq!(b.dev.query_qp(qp.id).unwrap().qp_state, QpState::Init);

    let f = Fabric::new();
    let ib = |ip: [u8; 4], lid: u16| DeviceConfig {
        lid,
        link_layer: mlx5_direct::hw::LinkLayer::InfiniBand,
        ..DeviceConfig::new(ip)
    };
    let d = f.add_device(ib([10, 0, 1, 1], 0x11));
    let _peer = f.add_device(ib([10, 0, 1, 2], 0x22));
    let (_, qp) = ib_qp(&d, QpType::Rc);
    let path = AhAttr {
        dlid: 0x22,
        sl: 2,
        port_num: 1,
        ..AhAttr::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x77,
        rq_psn: 0x10,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: path,
        alt_ah_attr: AhAttr { sl: 5, ..path },
        alt_port_num: 1,
        alt_pkey_index: 0,
        alt_timeout: 17,
        ..QpAttr::default()
    };
    d.modify_qp(qp.id, &rtr, m).unwrap();
    let got = d.query_qp(qp.id).unwrap();
    assert_eq!(got.qp_state, QpState::Rtr);
    assert_eq!(
        (got.alt_ah_attr, got.alt_port_num, got.alt_timeout),
        (rtr.alt_ah_attr, 1, 17)
    );
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0x20,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        path_mig_state: MigState::Rearm,
        ..QpAttr::default()
    };
    let m = required_with(&b, QpType::Rc, QpState::Rtr, QpState::Rts, 1 << 18);
    d.modify_qp(qp.id, &rts, m).unwrap();
    let got = d.query_qp(qp.id).unwrap();
    assert_eq!(
        (got.qp_state, got.path_mig_state),
        (QpState::Rts, MigState::Rearm)
    );
    assert_eq!(got.alt_timeout, 17, "the alternate path stays");
    assert!(f.driver_bugs().is_empty());
}

/// uverbs adds `IBV_QP_PORT` to a modify carrying `IBV_QP_AV` outside Init→RTR: UC SQD→SQD does
/// not accept it (EINVAL), RC SQD→SQD does and the port follows the address.
#[test]
fn an_address_in_sqd_brings_the_port_uverbs_adds() {
    let mut b = Bench::new();
    let uc = b.qp(QpType::Uc, QpState::Sqd);
    let a = attrs(QpType::Uc, QpState::Sqd, QpState::Sqd, b.peer_gid, 1);
    for m in [AttrMask::STATE | AttrMask::AV, AttrMask::AV] {
        let e = b.dev.modify_qp(uc.id, &a, m).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("IBV_QP_PORT") && msg.contains("uverbs"),
            "{msg}"
        );
        assert_eq!(e.errno(), EINVAL);
    }
    let rc = b.qp(QpType::Rc, QpState::Sqd);
    let a = attrs(QpType::Rc, QpState::Sqd, QpState::Sqd, b.peer_gid, 1);
    b.dev
        .modify_qp(rc.id, &a, AttrMask::STATE | AttrMask::AV)
        .unwrap();
    let got = b.dev.query_qp(rc.id).unwrap();
    assert_eq!((got.ah_attr, got.port_num), (a.ah_attr, a.ah_attr.port_num));
}

/// The 7.2 table lets `IBV_QP_RATE_LIMIT` through; the device, which paces no RC/UC/UD QP,
/// refuses it with EOPNOTSUPP — but Reset→Reset succeeds before the driver looks.
#[test]
fn the_rate_limit_is_unsupported_by_the_device() {
    let mut b = Bench::new();
    for ty in TYPES {
        let qp = b.qp(ty, QpState::Rts);
        let a = attrs(ty, QpState::Rts, QpState::Rts, b.peer_gid, 1);
        let e = b
            .dev
            .modify_qp(qp.id, &a, AttrMask::STATE | AttrMask::RATE_LIMIT)
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("IBV_QP_RATE_LIMIT"), "{msg}");
        assert_eq!(e.errno(), EOPNOTSUPP, "{msg}");
        assert_eq!(b.dev.query_qp(qp.id).unwrap().qp_state, QpState::Rts);
        let fresh = b.qp(ty, QpState::Reset);
        let r = attrs(ty, QpState::Reset, QpState::Reset, b.peer_gid, 1);
        b.dev
            .modify_qp(fresh.id, &r, AttrMask::STATE | AttrMask::RATE_LIMIT)
            .unwrap();
        // Without IBV_QP_STATE the 7.2 driver takes a rate limit outside RTS as one to apply
        // later and parses it before anything else (commit 915bbc8578e3): EOPNOTSUPP here, in
        // Reset and in RTR alike (RTR→RTR is no transition at all, but the table is not asked).
        for s in [QpState::Reset, QpState::Rtr] {
            let q = b.qp(ty, s);
            let e = b
                .dev
                .modify_qp(q.id, &attrs(ty, s, s, b.peer_gid, 1), AttrMask::RATE_LIMIT)
                .unwrap_err();
            assert_eq!(e.errno(), EOPNOTSUPP, "{ty} {s}: {e}");
            assert!(e.to_string().contains("IBV_QP_RATE_LIMIT"), "{e}");
            assert_eq!(b.dev.query_qp(q.id).unwrap().qp_state, s);
        }
    }
}
