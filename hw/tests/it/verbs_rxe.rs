//! The verbs backend against the real Linux kernel: Soft-RoCE (`rdma_rxe`) devices rxe0 and
//! rxe1 inside the project's VM (`tools/rxe-vm/`).
//!
//! Run them with `tools/rxe-vm/run-verbs-tests.sh`, which builds this binary, boots the VM once
//! and runs it there with `MLX5_HW_RXE_VM=1`. On the host they are `#[ignore]`d (so
//! `cargo test` reports them as ignored instead of passing silently); run with `--ignored`
//! outside the VM, they fail and say how to run them.
//!
//! What they check: device/port/GID queries and object lifecycles on a real kernel; every
//! transition through the typed steps ([`mlx5_hw::transition`]); that for a few hundred
//! state × mask × QP-type combinations the kernel's verdict on a raw `ibv_modify_qp`, errno
//! included, equals [`mlx5_hw::qp_state::validate_with_limits`] under the running kernel's
//! table (uverbs' added `IBV_QP_PORT` and the RoCE refusal of `IBV_QP_ALT_PATH` included), and
//! that rxe refuses `IBV_QP_RATE_LIMIT` with EOPNOTSUPP; SEND/WRITE/READ/atomics over RC, UC and UD through the
//! baseline data path between rxe0 and rxe1 (GID index 1, IPv4-mapped); UD multicast
//! (`ibv_attach_mcast`, a datagram to QPN 0xFFFFFF reaching the attached QPs once rxe1's
//! netdev has joined the IP group, none after `ibv_detach_mcast`); the Error → Reset → Init →
//! RTR → RTS recovery with traffic afterwards; that every XRC call is refused with an
//! error naming the verb (rxe has no XRC: `ibv_open_xrcd` answers EOPNOTSUPP); and the
//! asynchronous events rxe really raises: PORT_ERR and PORT_ACTIVE when its netdev goes down
//! and up (on a Soft-RoCE device and veth pair of the test's own), and no COMM_EST for a
//! message received in RTR.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use mlx5_hw::qp_state::{self, DeviceLimits, KernelVersion};
use mlx5_hw::transition::{self, Changes, PeerPath, Step, ToInit, ToRtr, ToRts};
use mlx5_hw::verbs::baseline::{BaselineCq, BaselineQp, Completion, SendOp, SendWr, Sge, UdDest};
use mlx5_hw::verbs::{list_devices, VerbsDevice, VerbsQp};
use mlx5_hw::{
    AccessFlags, AhAttr, AsyncEvent, AttrMask, ChannelId, CqId, CqInitAttr, Device, Error, Gid,
    GlobalRoute, LinkLayer, MrInfo, Mtu, PdId, PortState, QpAttr, QpCap, QpInitAttr, QpState,
    QpType,
};

/// Set by run-verbs-tests.sh inside the VM.
const IN_VM: &str = "MLX5_HW_RXE_VM";
const PORT: u8 = 1;
/// GID index of the IPv4-mapped address (RoCE v2) on each rxe port in the VM.
const GID_IPV4: u8 = 1;
const WAIT: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x1111_1111;

/// Fails loudly unless this runs inside the VM with both Soft-RoCE devices present.
fn require_vm() {
    if std::env::var_os(IN_VM).is_none() {
        panic!(
            "these tests run inside the Soft-RoCE VM against the real kernel; run \
             tools/rxe-vm/run-verbs-tests.sh (it sets {IN_VM}=1 inside the VM)"
        );
    }
    let names: Vec<String> = list_devices()
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert!(
        names.iter().any(|n| n == "rxe0") && names.iter().any(|n| n == "rxe1"),
        "{IN_VM} is set but rxe0/rxe1 are missing (found {names:?}): the VM's Soft-RoCE setup failed"
    );
}

/// Page-aligned memory the device may read and write. Accessed only through raw pointers:
/// after `reg_mr` the kernel writes into it behind the compiler's back.
struct Buf {
    ptr: *mut u8,
    len: usize,
}

impl Buf {
    fn new(len: usize) -> Buf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Buf { ptr, len }
    }
    fn addr(&self, off: usize) -> u64 {
        assert!(off <= self.len);
        self.ptr as u64 + off as u64
    }
    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds; no operation on this range is in flight when tests write.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
    }
    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        let mut v = vec![0u8; len];
        // SAFETY: in bounds; read after the completion of the operation that wrote it.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), v.as_mut_ptr(), len) };
        v
    }
    fn read_u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.read(off, 8).try_into().unwrap())
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `new` with this layout; every MR on it is deregistered first
        // (each test drops its device, which deregisters, before its buffers).
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// One side of a connection: device, PD, a registered buffer, CQ and QP.
struct Side {
    dev: VerbsDevice,
    pd: PdId,
    mr: MrInfo,
    cq: CqId,
    /// The CQ's completion channel, when asked for.
    ch: Option<ChannelId>,
    qp: VerbsQp,
    qp_type: QpType,
    gid: Gid,
    buf: Buf,
}

impl Side {
    fn new(name: &str, qp_type: QpType, with_channel: bool) -> Side {
        Self::build(name, qp_type, with_channel, false)
    }

    /// A side whose CQ is an `ibv_cq_ex` with `IBV_WC_STANDARD_FLAGS` (the extended poll).
    fn extended(name: &str, qp_type: QpType) -> Side {
        Self::build(name, qp_type, false, true)
    }

    fn build(name: &str, qp_type: QpType, with_channel: bool, extended: bool) -> Side {
        let dev = VerbsDevice::open(name).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let buf = Buf::new(1 << 16);
        // SAFETY: `buf` outlives the registration: `Side` declares `dev` before `buf`, so the
        // device (and with it the MR) is dropped first.
        let mr = unsafe { dev.reg_mr(pd, buf.ptr, buf.len, ALL_ACCESS) }.unwrap();
        let ch = with_channel.then(|| dev.create_comp_channel().unwrap());
        let attr = CqInitAttr {
            cqe: 128,
            channel: ch,
            ..CqInitAttr::default()
        };
        let cq = if extended {
            let c = dev.create_cq_verbs_extended(&attr).unwrap();
            assert!(c.extended && !c.timestamps, "{c:?}");
            c
        } else {
            dev.create_cq_verbs(&attr).unwrap()
        }
        .id;
        let qp = dev
            .create_qp_verbs(
                pd,
                &QpInitAttr {
                    qp_type,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                },
            )
            .unwrap();
        assert!(qp.layout.is_none(), "rxe has no mlx5 layout");
        let gid = dev.query_gid(PORT, GID_IPV4.into()).unwrap();
        Side {
            dev,
            pd,
            mr,
            cq,
            ch,
            qp,
            qp_type,
            gid,
            buf,
        }
    }

    fn state(&self) -> QpState {
        self.dev.query_qp(self.qp.id).unwrap().qp_state
    }

    fn apply(&self, steps: &[Step]) -> QpAttr {
        transition::apply_all(
            &self.dev,
            self.qp.id,
            self.qp_type,
            self.qp.qpn,
            self.state(),
            steps,
        )
        .unwrap_or_else(|e| panic!("{} QP {:#x}: {e}", self.qp_type, self.qp.qpn))
    }

    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.buf.addr(off),
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

fn path_to(peer: &Side, psn: u32) -> PeerPath {
    PeerPath {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: peer.qp.qpn,
        rq_psn: psn,
        ah: ah_to(peer.gid),
    }
}

fn ah_to(gid: Gid) -> AhAttr {
    AhAttr {
        port_num: PORT,
        grh: Some(GlobalRoute {
            dgid: gid,
            sgid_index: GID_IPV4,
            hop_limit: 64,
            ..Default::default()
        }),
        ..AhAttr::default()
    }
}

fn init_step(t: QpType) -> Step {
    match t {
        QpType::Ud => Step::Init(ToInit::Datagram {
            port: PORT,
            pkey_index: 0,
            qkey: QKEY,
        }),
        _ => Step::Init(ToInit::Connected {
            port: PORT,
            pkey_index: 0,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }),
    }
}

/// Reset → Init → RTR → RTS for `a` talking to `b`; `a` sends from `psn_a`, `b` from `psn_b`.
fn connect_steps(a: &Side, b: &Side, psn_a: u32, psn_b: u32) -> Vec<Step> {
    let rtr = match a.qp_type {
        QpType::Rc => ToRtr::Rc {
            path: path_to(b, psn_b),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
        },
        QpType::Uc => ToRtr::Uc {
            path: path_to(b, psn_b),
        },
        QpType::Ud => ToRtr::Ud,
        _ => unreachable!("these tests use RC, UC and UD"),
    };
    let rts = match a.qp_type {
        QpType::Rc => ToRts::Rc {
            sq_psn: psn_a,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
        },
        _ => ToRts::Unreliable { sq_psn: psn_a },
    };
    vec![init_step(a.qp_type), Step::Rtr(rtr), Step::Rts(rts)]
}

fn connect(a: &Side, b: &Side, psn_a: u32, psn_b: u32) {
    let got = a.apply(&connect_steps(a, b, psn_a, psn_b));
    assert_eq!(got.qp_state, QpState::Rts);
    let got = b.apply(&connect_steps(b, a, psn_b, psn_a));
    assert_eq!(got.qp_state, QpState::Rts);
}

fn one(cq: &mut BaselineCq<'_>, what: &str) -> Completion {
    let c = cq.wait(1, WAIT).unwrap();
    assert_eq!(c.len(), 1, "no completion for {what} within {WAIT:?}");
    c[0]
}

fn ok(cq: &mut BaselineCq<'_>, what: &str) -> Completion {
    let c = one(cq, what);
    assert!(
        c.is_success(),
        "{what}: {} (vendor_err {:#x})",
        c.status_str(),
        c.vendor_err
    );
    c
}

// ------------------------------------------------------------------------------------------

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn devices_ports_gids_and_counters() {
    require_vm();
    let devs = list_devices().unwrap();
    assert!(devs.iter().all(|d| !d.mlx5), "rxe is not mlx5: {devs:?}");
    for (name, ip) in [("rxe0", [192, 0, 2, 1]), ("rxe1", [192, 0, 2, 2])] {
        let dev = VerbsDevice::open(name).unwrap();
        assert!(!dev.is_mlx5());
        let a = dev.query_device().unwrap();
        assert!(!a.direct_path && !a.blueflame, "{a:?}");
        assert_eq!(a.phys_port_cnt, 1);
        assert!(a.max_qp > 0 && a.max_cqe > 0 && a.max_qp_wr > 0, "{a:?}");
        let p = dev.query_port(PORT).unwrap();
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        assert!(p.gid_tbl_len > u32::from(GID_IPV4));
        assert_eq!(
            dev.query_gid(PORT, GID_IPV4.into()).unwrap(),
            Gid::from_ipv4(ip)
        );
        let e = dev.query_port(2).unwrap_err().to_string();
        assert!(e.contains("no port 2"), "{e}");
        let c = dev.counters(PORT).unwrap();
        assert!(c.iter().any(|c| c.name == "duplicate_request"), "{c:?}");
        assert!(dev.counters(9).is_err());
        assert!(dev.poll_async_event().is_none());
    }
    // inside the VM, the mlx5 error names the devices that exist
    match VerbsDevice::open("mlx5_0") {
        Err(Error::NoDevice { why, .. }) => assert!(why.contains("rxe0, rxe1"), "{why}"),
        other => panic!("expected NoDevice, got {other:?}"),
    }
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn object_lifecycle_and_direct_path_refusal() {
    require_vm();
    let dev = VerbsDevice::open("rxe0").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let buf = Buf::new(8192);
    // SAFETY: `buf` outlives the registration (deregistered below).
    let mr = unsafe {
        dev.reg_mr(
            pd,
            buf.ptr,
            buf.len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
    }
    .unwrap();
    assert_eq!((mr.addr, mr.length), (buf.ptr as u64, 8192));
    assert_ne!(mr.lkey, 0);
    // remote write without local write is refused by the kernel (IB spec o10-?; ib_check_mr_access)
    // SAFETY: as above.
    let bad = unsafe { dev.reg_mr(pd, buf.ptr, buf.len, AccessFlags::REMOTE_WRITE) };
    assert!(
        bad.is_err(),
        "REMOTE_WRITE without LOCAL_WRITE was accepted"
    );

    let ch = dev.create_comp_channel().unwrap();
    let cq = dev
        .create_cq_verbs(&CqInitAttr {
            cqe: 100,
            channel: Some(ch),
            ..Default::default()
        })
        .unwrap();
    assert!(cq.cqe >= 100 && cq.layout.is_none());
    assert!(dev.comp_channel_fd(ch).unwrap() >= 0);
    let cq2 = dev.create_cq_verbs(&CqInitAttr::default()).unwrap();
    assert_eq!(
        dev.wait_cq_event(ch, Duration::from_millis(20)).unwrap(),
        None,
        "no event expected"
    );
    let e = dev.destroy_comp_channel(ch).unwrap_err();
    assert!(
        matches!(e, Error::Busy(_)) && e.to_string().contains("attached"),
        "{e}"
    );
    let e = dev.ack_cq_events(cq.id, 1).unwrap_err().to_string();
    assert!(e.contains("only 0"), "{e}");
    // 128-byte CQEs mean nothing without mlx5
    let e = dev
        .create_cq_verbs(&CqInitAttr {
            cqe_size: 128,
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");

    let srq = dev
        .create_srq_verbs(
            pd,
            &mlx5_hw::SrqInitAttr {
                max_wr: 32,
                max_sge: 1,
                srq_limit: 4,
            },
        )
        .unwrap();
    assert!(srq.layout.is_none());
    dev.arm_srq_limit(srq.id, 8).unwrap();

    let mut qps = Vec::new();
    for t in QpType::ALL {
        let attr = QpInitAttr {
            qp_type: t,
            send_cq: cq.id,
            recv_cq: cq2.id,
            srq: (t == QpType::Rc).then_some(srq.id),
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        };
        let q = dev.create_qp_verbs(pd, &attr).unwrap();
        assert!(q.qpn > 1 && q.cap.max_send_wr >= 16, "{q:?}");
        assert_eq!(dev.query_qp(q.id).unwrap().qp_state, QpState::Reset);
        assert_eq!(dev.qp_type(q.id).unwrap(), t);
        // validation runs before ibv_modify_qp: an illegal modify never reaches the kernel
        let to_rts = QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        };
        match dev.modify_qp(q.id, &to_rts, AttrMask::STATE) {
            Err(Error::Modify(mlx5_hw::ModifyError::IllegalTransition { from, to, .. })) => {
                assert_eq!((from, to), (QpState::Reset, QpState::Rts))
            }
            other => panic!("Reset->RTS was not refused by the table: {other:?}"),
        }
        assert_eq!(dev.query_qp(q.id).unwrap().qp_state, QpState::Reset);
        // the contract's layout-returning calls say what is missing
        let e = dev.create_qp(pd, &attr).unwrap_err().to_string();
        assert!(
            e.contains("needs an mlx5 device") && e.contains("rxe0"),
            "{e}"
        );
        qps.push(q);
    }
    let ah = dev
        .create_ah_verbs(pd, &ah_to(Gid::from_ipv4([192, 0, 2, 2])))
        .unwrap();
    assert!(ah.av.is_none());
    // The contract's AH works on every provider (connection setup makes one for a UD peer);
    // without mlx5 it has no address vector to give.
    let info = dev
        .create_ah(pd, &ah_to(Gid::from_ipv4([192, 0, 2, 2])))
        .unwrap();
    assert_eq!(info.av, [0; 48]);
    dev.destroy_ah(info.id).unwrap();

    // objects in use cannot be destroyed out of order
    assert!(matches!(dev.dealloc_pd(pd), Err(Error::Busy(_))));
    assert!(matches!(dev.destroy_cq(cq.id), Err(Error::Busy(_))));
    assert!(matches!(dev.destroy_srq(srq.id), Err(Error::Busy(_))));
    {
        let _held = BaselineQp::new(&dev, qps[0].id).unwrap();
        assert!(
            BaselineQp::new(&dev, qps[0].id).is_err(),
            "two baseline handles on one QP"
        );
        assert!(matches!(dev.destroy_qp(qps[0].id), Err(Error::Busy(_))));
    }
    for q in &qps {
        dev.destroy_qp(q.id).unwrap();
    }
    assert!(matches!(
        dev.destroy_qp(qps[0].id),
        Err(Error::UnknownHandle { kind: "QP", .. })
    ));
    dev.destroy_ah(ah.id).unwrap();
    dev.destroy_srq(srq.id).unwrap();
    dev.destroy_cq(cq.id).unwrap();
    dev.destroy_cq(cq2.id).unwrap();
    dev.destroy_comp_channel(ch).unwrap();
    assert!(matches!(
        dev.get_cq_event(ch),
        Err(Error::UnknownHandle { .. })
    ));
    dev.dereg_mr(mr.id).unwrap();
    dev.dealloc_pd(pd).unwrap();
    // a second device object: leave things alive and let Drop tear them down in order
    let dev2 = VerbsDevice::open("rxe1").unwrap();
    let pd2 = dev2.alloc_pd().unwrap();
    let ch2 = dev2.create_comp_channel().unwrap();
    let cq3 = dev2
        .create_cq_verbs(&CqInitAttr {
            channel: Some(ch2),
            ..Default::default()
        })
        .unwrap();
    let attr = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq3.id,
        recv_cq: cq3.id,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    dev2.create_qp_verbs(pd2, &attr).unwrap();
    drop(dev2);
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn every_transition_through_the_typed_steps() {
    require_vm();
    for t in QpType::ALL {
        let a = Side::new("rxe0", t, false);
        let b = Side::new("rxe1", t, false);
        let mut steps = connect_steps(&a, &b, 0x10, 0x20);
        steps.push(Step::Drain { notify: false });
        let sqd = a.apply(&steps);
        assert_eq!(sqd.qp_state, QpState::Sqd, "{t}");
        wait_drained(&a);
        let change = match t {
            QpType::Ud => Step::SetQkey(0x2222),
            _ => Step::Change(Changes {
                access: Some(AccessFlags::REMOTE_WRITE),
                ..Default::default()
            }),
        };
        let got = a.apply(&[change]);
        assert_eq!(got.qp_state, QpState::Sqd);
        let got = a.apply(&[Step::Resume(Changes::default())]);
        assert_eq!(got.qp_state, QpState::Rts);
        let rts_change = match t {
            QpType::Ud => Step::SetQkey(0x3333),
            _ => Step::Change(Changes {
                access: Some(ALL_ACCESS.difference(AccessFlags::LOCAL_WRITE)),
                ..Default::default()
            }),
        };
        let got = a.apply(&[rts_change]);
        assert_eq!(got.qp_state, QpState::Rts);
        if t == QpType::Ud {
            assert_eq!(got.qkey, 0x3333);
        }
        let got = a.apply(&[Step::Error]);
        assert_eq!(got.qp_state, QpState::Error);
        let got = a.apply(&[Step::Reset]);
        assert_eq!(got.qp_state, QpState::Reset);
        // Init → Init change and Init → Error, Error → Reset
        let got = a.apply(&[init_step(t)]);
        assert_eq!(got.qp_state, QpState::Init);
        let got = a.apply(&[Step::Error, Step::Reset]);
        assert_eq!(got.qp_state, QpState::Reset);
        // an illegal step is refused before it reaches the kernel, with the reason
        let e = transition::apply(
            &a.dev,
            a.qp.id,
            t,
            a.qp.qpn,
            QpState::Reset,
            &connect_steps(&a, &b, 1, 2)[2],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("RESET") && e.contains("RTS"), "{e}");
        assert_eq!(a.state(), QpState::Reset);
    }
}

/// rxe refuses to leave SQD for anything but Error while the send queue is still draining
/// (`rxe_qp_chk_attr`), so wait for `sq_draining` to clear.
fn wait_drained(s: &Side) {
    let deadline = std::time::Instant::now() + WAIT;
    while s.dev.query_qp(s.qp.id).unwrap().sq_draining {
        assert!(std::time::Instant::now() < deadline, "SQ never drained");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The attribute bits sampled: everything the contract carries except CAP (never legal for
/// RC/UC/UD) and RATE_LIMIT (rxe refuses it whatever the table says; checked on its own).
const SAMPLED: [AttrMask; 20] = [
    AttrMask::STATE,
    AttrMask::CUR_STATE,
    AttrMask::EN_SQD_ASYNC_NOTIFY,
    AttrMask::ACCESS_FLAGS,
    AttrMask::PKEY_INDEX,
    AttrMask::PORT,
    AttrMask::QKEY,
    AttrMask::AV,
    AttrMask::PATH_MTU,
    AttrMask::TIMEOUT,
    AttrMask::RETRY_CNT,
    AttrMask::RNR_RETRY,
    AttrMask::RQ_PSN,
    AttrMask::MAX_QP_RD_ATOMIC,
    AttrMask::ALT_PATH,
    AttrMask::MIN_RNR_TIMER,
    AttrMask::SQ_PSN,
    AttrMask::MAX_DEST_RD_ATOMIC,
    AttrMask::PATH_MIG_STATE,
    AttrMask::DEST_QPN,
];

fn sampled_all() -> AttrMask {
    SAMPLED.iter().fold(AttrMask::empty(), |m, b| m | *b)
}

/// Typed steps from Reset to `s` (SQE cannot be entered by a modify).
fn steps_to(s: QpState, a: &Side, b: &Side) -> Vec<Step> {
    let c = connect_steps(a, b, 0x100, 0x200);
    match s {
        QpState::Reset => vec![],
        QpState::Init => c[..1].to_vec(),
        QpState::Rtr => c[..2].to_vec(),
        QpState::Rts => c,
        QpState::Sqd => [c, vec![Step::Drain { notify: false }]].concat(),
        QpState::Error => vec![c[0], Step::Error],
        QpState::Sqe => unreachable!("SQE is entered only by the device"),
    }
}

fn put_in(s: QpState, a: &Side, b: &Side) {
    let cur = a.state();
    if cur == QpState::Sqd {
        // rxe refuses any move but to Error while its SQ is still draining (EINVAL); a case
        // that left the QP in SQD may not have drained yet on a busy machine.
        wait_drained(a);
    }
    if cur != QpState::Reset {
        transition::apply(&a.dev, a.qp.id, a.qp_type, a.qp.qpn, cur, &Step::Reset).unwrap();
    }
    a.apply(&steps_to(s, a, b));
    if s == QpState::Sqd {
        wait_drained(a);
    }
    assert_eq!(a.state(), s);
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn kernel_verdicts_match_the_state_table() {
    require_vm();
    let reachable = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Error,
    ];
    // The VM runs Debian's 6.1; /proc names it (6.1's table if /proc cannot be read).
    let kernel = KernelVersion::running().unwrap_or_else(|| {
        eprintln!("/proc/sys/kernel/osrelease unreadable: assuming Linux 6.1's table");
        KernelVersion::Linux6_1
    });
    let mut compared = 0usize;
    let mut mismatches = Vec::new();
    let mut pick = 0usize; // rotates the extra bit chosen for "forbidden" masks
    for t in QpType::ALL {
        let a = Side::new("rxe0", t, false);
        let b = Side::new("rxe1", t, false);
        let mut limits = DeviceLimits::from_attrs(
            &a.dev.query_device().unwrap(),
            &a.dev.query_port(PORT).unwrap(),
        );
        assert_eq!(limits.link_layer, LinkLayer::Ethernet);
        limits.kernel = kernel;
        for cur in reachable {
            put_in(cur, &a, &b);
            for next in QpState::ALL {
                let mut masks = Vec::new();
                match qp_state::rule_for(kernel, cur, next, t) {
                    Some(rule) => {
                        let req = rule.required | AttrMask::STATE;
                        masks.push(req);
                        // Everything the cell accepts, but the alternate path (refused on
                        // RoCE), then the alternate path alone.
                        let all = rule.allowed() & sampled_all();
                        masks.push(all.difference(AttrMask::ALT_PATH) | AttrMask::STATE);
                        if all.contains(AttrMask::ALT_PATH) {
                            masks.push(req | AttrMask::ALT_PATH);
                        }
                        if let Some((_, bit)) = rule.required.iter_names().next() {
                            masks.push(req.difference(bit));
                        }
                        let extra: Vec<AttrMask> = SAMPLED
                            .iter()
                            .copied()
                            .filter(|b| !rule.allowed().contains(*b))
                            .collect();
                        if !extra.is_empty() {
                            masks.push(req | extra[pick % extra.len()]);
                            pick += 1;
                        }
                    }
                    None => {
                        // what the target state would typically carry, from a legal source
                        let typical = QpState::ALL
                            .iter()
                            .find_map(|&from| qp_state::rule_for(kernel, from, next, t))
                            .map(|r| r.required)
                            .unwrap_or_default();
                        masks.push(typical | AttrMask::STATE);
                    }
                }
                for mask in masks {
                    let attr = verdict_attr(next, cur, &b);
                    let ours = qp_state::validate_with_limits(cur, &attr, mask, t, &limits);
                    let kernel = a.dev.modify_qp_raw(a.qp.id, &attr, mask).unwrap();
                    compared += 1;
                    let agree = match (&ours, &kernel) {
                        (Ok(_), Ok(())) => true,
                        (Err(o), Err(k)) => k.raw_os_error() == Some(o.errno().raw()),
                        _ => false,
                    };
                    if !agree {
                        mismatches.push(format!(
                            "{t} {cur}->{next} mask {mask:?}: ours {:?}, kernel {:?}",
                            ours.as_ref().map_err(|e| format!("{e} ({})", e.errno())),
                            kernel.as_ref().map_err(|e| e.to_string())
                        ));
                    }
                    if kernel.is_ok() || a.state() != cur {
                        put_in(cur, &a, &b);
                    }
                }
            }
        }
        // IBV_QP_RATE_LIMIT: rxe refuses it before any table (rdma-core's rxe provider sends
        // the legacy modify command, which cannot carry bit 25, and rxe_modify_qp refuses bits
        // beyond IB_QP_ATTR_STANDARD_BITS): EOPNOTSUPP. Under 6.1 the library answers the same
        // (KernelVersion::refused_before_table); under 7.0 (RC) and 7.2 it lets it through.
        put_in(QpState::Rts, &a, &b);
        let attr = QpAttr {
            rate_limit: 1000,
            ..verdict_attr(QpState::Rts, QpState::Rts, &b)
        };
        let mask = AttrMask::STATE | AttrMask::RATE_LIMIT;
        let got = a.dev.modify_qp_raw(a.qp.id, &attr, mask).unwrap();
        compared += 1;
        assert_eq!(
            got.as_ref().map_err(|e| e.raw_os_error()),
            Err(Some(libc::EOPNOTSUPP)),
            "{t} RTS->RTS with IBV_QP_RATE_LIMIT on rxe"
        );
        let ours = qp_state::validate_with_limits(QpState::Rts, &attr, mask, t, &limits);
        assert_eq!(
            ours.is_ok(),
            kernel != KernelVersion::Linux6_1
                && (t == QpType::Rc || kernel == KernelVersion::Linux7_2),
            "{t} {kernel}: {ours:?}"
        );
        if kernel == KernelVersion::Linux6_1 {
            let e = ours.as_ref().unwrap_err();
            assert_eq!(e.errno().raw(), libc::EOPNOTSUPP, "{t}: {e}");
        }
        assert_eq!(a.state(), QpState::Rts);
    }
    eprintln!(
        "{kernel}: compared {compared} modifies with the kernel, {} mismatches",
        mismatches.len()
    );
    assert!(compared >= 200, "only {compared} combinations compared");
    assert!(
        mismatches.is_empty(),
        "kernel and library disagree:\n{}",
        mismatches.join("\n")
    );
}

/// Valid values for every attribute the verdict test samples, for a modify to `next` from
/// `cur` addressed to `peer` (the alternate path, refused on RoCE anyway, is valid too).
fn verdict_attr(next: QpState, cur: QpState, peer: &Side) -> QpAttr {
    QpAttr {
        qp_state: next,
        cur_qp_state: cur,
        path_mtu: Mtu::Mtu1024,
        qkey: QKEY,
        rq_psn: 0x300,
        sq_psn: 0x400,
        dest_qp_num: peer.qp.qpn,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        pkey_index: 0,
        port_num: PORT,
        ah_attr: ah_to(peer.gid),
        alt_ah_attr: ah_to(peer.gid),
        alt_port_num: PORT,
        alt_pkey_index: 0,
        alt_timeout: 14,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

// ------------------------------------------------------------------------------------------ data

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn rc_send_write_read_atomics_and_cq_events() {
    require_vm();
    let a = Side::new("rxe0", QpType::Rc, false);
    let b = Side::new("rxe1", QpType::Rc, true);
    connect(&a, &b, 0x1234, 0xabcd);
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();

    // SEND with immediate, waited for through b's completion channel
    a.buf.write(0, b"hello from rxe0");
    qb.post_recv(7, &[b.sge(0, 256)]).unwrap();
    cb.req_notify(false).unwrap();
    qa.post_send(&SendWr::new(
        1,
        SendOp::SendImm(0xfeed_beef),
        &[a.sge(0, 15)],
    ))
    .unwrap();
    assert_eq!(
        b.dev.wait_cq_event(b.ch.unwrap(), WAIT).unwrap(),
        Some(b.cq),
        "no completion event on rxe1"
    );
    b.dev.ack_cq_events(b.cq, 1).unwrap();
    let r = ok(&mut cb, "receive");
    assert_eq!((r.wr_id, r.byte_len, r.imm), (7, 15, Some(0xfeed_beef)));
    assert_eq!(r.qp_num, b.qp.qpn);
    assert_eq!(b.buf.read(0, 15), b"hello from rxe0");
    let s = ok(&mut ca, "send");
    assert_eq!(s.wr_id, 1);

    // RDMA WRITE (+ inline), then RDMA READ back
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    a.buf.write(4096, &pattern);
    let w = SendOp::Write {
        remote_addr: b.buf.addr(8192),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr::new(2, w, &[a.sge(4096, 4096)]))
        .unwrap();
    assert_eq!(ok(&mut ca, "write").wr_id, 2);
    assert_eq!(b.buf.read(8192, 4096), pattern);
    a.buf.write(100, b"inline!");
    let w = SendOp::Write {
        remote_addr: b.buf.addr(20000),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr {
        inline: true,
        ..SendWr::new(3, w, &[a.sge(100, 7)])
    })
    .unwrap();
    ok(&mut ca, "inline write");
    assert_eq!(b.buf.read(20000, 7), b"inline!");
    let rd = SendOp::Read {
        remote_addr: b.buf.addr(8192),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr::new(
        4,
        rd,
        &[a.sge(32768, 2048), a.sge(40960, 2048)],
    ))
    .unwrap();
    assert_eq!(ok(&mut ca, "read").wr_id, 4);
    assert_eq!(a.buf.read(32768, 2048), pattern[..2048]);
    assert_eq!(a.buf.read(40960, 2048), pattern[2048..]);

    // WRITE with immediate consumes a receive
    qb.post_recv(8, &[b.sge(0, 16)]).unwrap();
    let w = SendOp::WriteImm {
        remote_addr: b.buf.addr(24000),
        rkey: b.mr.rkey,
        imm: 42,
    };
    qa.post_send(&SendWr::new(5, w, &[a.sge(100, 7)])).unwrap();
    ok(&mut ca, "write imm");
    let r = ok(&mut cb, "write-imm receive");
    assert_eq!((r.wr_id, r.imm), (8, Some(42)));

    // atomics: rxe replies with the original value in host byte order
    b.buf.write(48000, &1000u64.to_ne_bytes());
    let fa = SendOp::FetchAdd {
        remote_addr: b.buf.addr(48000),
        rkey: b.mr.rkey,
        add: 5,
    };
    qa.post_send(&SendWr::new(6, fa, &[a.sge(50000, 8)]))
        .unwrap();
    ok(&mut ca, "fetch-add");
    assert_eq!(b.buf.read_u64(48000), 1005);
    assert_eq!(
        a.buf.read_u64(50000),
        1000,
        "fetch-add reply not in host order"
    );
    let cs = SendOp::CompareSwap {
        remote_addr: b.buf.addr(48000),
        rkey: b.mr.rkey,
        compare: 1005,
        swap: 77,
    };
    qa.post_send(&SendWr::new(7, cs, &[a.sge(50008, 8)]))
        .unwrap();
    ok(&mut ca, "compare-swap");
    assert_eq!(b.buf.read_u64(48000), 77);
    assert_eq!(a.buf.read_u64(50008), 1005);

    // a bad rkey is a remote access error, and the QP goes to Error
    let w = SendOp::Write {
        remote_addr: b.buf.addr(0),
        rkey: b.mr.rkey ^ 0x5a00,
    };
    qa.post_send(&SendWr::new(9, w, &[a.sge(0, 8)])).unwrap();
    let c = one(&mut ca, "bad-rkey write");
    assert!(!c.is_success(), "write with a wrong rkey succeeded");
    assert!(c.status_str().contains("access"), "{}", c.status_str());
    assert_eq!(a.state(), QpState::Error);
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn uc_write_and_send() {
    require_vm();
    let a = Side::new("rxe0", QpType::Uc, false);
    let b = Side::new("rxe1", QpType::Uc, false);
    connect(&a, &b, 0x77, 0x99);
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
    a.buf.write(0, &[0xab; 3000]);
    let w = SendOp::Write {
        remote_addr: b.buf.addr(4096),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr::new(1, w, &[a.sge(0, 3000)])).unwrap();
    ok(&mut ca, "UC write");
    // UC has no ACK: the local completion can precede placement at the peer
    let deadline = std::time::Instant::now() + WAIT;
    while b.buf.read(4096, 3000) != vec![0xab; 3000] {
        assert!(
            std::time::Instant::now() < deadline,
            "UC write never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    qb.post_recv(3, &[b.sge(0, 64)]).unwrap();
    qa.post_send(&SendWr::new(2, SendOp::Send, &[a.sge(0, 64)]))
        .unwrap();
    ok(&mut ca, "UC send");
    let r = ok(&mut cb, "UC receive");
    assert_eq!((r.wr_id, r.byte_len), (3, 64));
    // RDMA READ does not exist on UC: refused at post or as an error completion
    let rd = SendOp::Read {
        remote_addr: b.buf.addr(0),
        rkey: b.mr.rkey,
    };
    if qa.post_send(&SendWr::new(4, rd, &[a.sge(0, 8)])).is_ok() {
        assert!(
            !one(&mut ca, "UC read").is_success(),
            "READ on a UC QP succeeded"
        );
    }
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn ud_send_with_address_handle() {
    require_vm();
    let a = Side::new("rxe0", QpType::Ud, false);
    let b = Side::new("rxe1", QpType::Ud, false);
    connect(&a, &b, 0x1, 0x2);
    let ah = a.dev.create_ah_verbs(a.pd, &ah_to(b.gid)).unwrap();
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
    // a UD receive buffer starts with the 40-byte GRH (IBTA §11.4.1.2 ibv_post_recv)
    qb.post_recv(11, &[b.sge(0, 40 + 512)]).unwrap();
    a.buf.write(0, b"datagram");
    let dest = UdDest {
        ah: ah.id,
        remote_qpn: b.qp.qpn,
        remote_qkey: QKEY,
    };
    qa.post_send(&SendWr {
        ud: Some(dest),
        ..SendWr::new(10, SendOp::Send, &[a.sge(0, 8)])
    })
    .unwrap();
    ok(&mut ca, "UD send");
    let r = ok(&mut cb, "UD receive");
    assert_eq!((r.wr_id, r.byte_len, r.src_qp), (11, 48, a.qp.qpn));
    assert_eq!(b.buf.read(40, 8), b"datagram");
    // a UD send needs a destination; a connected-QP destination on UD is refused
    let e = qa
        .post_send(&SendWr::new(12, SendOp::Send, &[a.sge(0, 8)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("destination"), "{e}");
    // a wrong Q_Key is dropped by the receiver: no receive completion
    qb.post_recv(13, &[b.sge(0, 40 + 512)]).unwrap();
    let dest = UdDest {
        remote_qkey: QKEY ^ 1,
        ..dest
    };
    qa.post_send(&SendWr {
        ud: Some(dest),
        ..SendWr::new(14, SendOp::Send, &[a.sge(0, 8)])
    })
    .unwrap();
    ok(&mut ca, "UD send with a wrong Q_Key");
    assert!(
        cb.wait(1, Duration::from_millis(300)).unwrap().is_empty(),
        "wrong Q_Key delivered"
    );
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn error_flush_and_recovery_then_traffic_again() {
    require_vm();
    let a = Side::new("rxe0", QpType::Rc, false);
    let b = Side::new("rxe1", QpType::Rc, false);
    connect(&a, &b, 0x10, 0x20);
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
    {
        let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
        // traffic before the error
        a.buf.write(0, b"before");
        let w = SendOp::Write {
            remote_addr: b.buf.addr(0),
            rkey: b.mr.rkey,
        };
        qa.post_send(&SendWr::new(1, w, &[a.sge(0, 6)])).unwrap();
        ok(&mut ca, "write before error");
        // a posted receive is flushed when the QP enters Error: nothing is lost
        qa.post_recv(2, &[a.sge(1024, 64)]).unwrap();
        a.apply(&[Step::Error]);
        let f = one(&mut ca, "flushed receive");
        assert_eq!(f.wr_id, 2);
        assert!(
            !f.is_success() && f.status_str().to_lowercase().contains("flush"),
            "{}",
            f.status_str()
        );
        // a send posted in Error completes with a flush error too
        qa.post_send(&SendWr::new(3, SendOp::Send, &[a.sge(0, 4)]))
            .unwrap();
        let f = one(&mut ca, "send posted in Error");
        assert_eq!(f.wr_id, 3);
        assert!(!f.is_success());
    }
    // the rebuild after an error: Error → Reset → Init → RTR → RTS, on both sides with fresh PSNs
    b.apply(&[Step::Error, Step::Reset]);
    a.apply(&[Step::Reset]);
    connect(&a, &b, 0x5000, 0x6000);
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    a.buf.write(0, b"after recovery");
    qb.post_recv(20, &[b.sge(512, 64)]).unwrap();
    qa.post_send(&SendWr::new(21, SendOp::Send, &[a.sge(0, 14)]))
        .unwrap();
    ok(&mut ca, "send after recovery");
    let r = ok(&mut cb, "receive after recovery");
    assert_eq!((r.wr_id, r.byte_len), (20, 14));
    assert_eq!(b.buf.read(512, 14), b"after recovery");
    let w = SendOp::Write {
        remote_addr: b.buf.addr(2048),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr::new(22, w, &[a.sge(0, 14)])).unwrap();
    ok(&mut ca, "write after recovery");
    assert_eq!(b.buf.read(2048, 14), b"after recovery");
    let rts = a.dev.query_qp(a.qp.id).unwrap();
    assert_eq!((rts.qp_state, rts.dest_qp_num), (QpState::Rts, b.qp.qpn));
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn completion_channel_shared_by_two_cqs() {
    // rxe has no mlx5 arm doorbell: CQs are armed with ibv_req_notify_cq (the generic verbs
    // path, BaselineCq::req_notify); the channel, get, ack and destroy rules are the same.
    require_vm();
    let a = Side::new("rxe0", QpType::Rc, false);
    let dev = VerbsDevice::open("rxe1").unwrap();
    let pd = dev.alloc_pd().unwrap();
    let buf = Buf::new(1 << 12);
    // SAFETY: `buf` outlives the registration: `dev` is dropped first (declared after).
    let mr = unsafe { dev.reg_mr(pd, buf.ptr, buf.len, ALL_ACCESS) }.unwrap();
    let ch = dev.create_comp_channel().unwrap();
    let on_ch = CqInitAttr {
        cqe: 16,
        channel: Some(ch),
        ..CqInitAttr::default()
    };
    let (scq, rcq) = (
        dev.create_cq_verbs(&on_ch).unwrap().id,
        dev.create_cq_verbs(&on_ch).unwrap().id,
    );
    let qp = dev
        .create_qp_verbs(
            pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: scq,
                recv_cq: rcq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    let b = Side {
        gid: dev.query_gid(PORT, GID_IPV4.into()).unwrap(),
        dev,
        pd,
        mr,
        cq: rcq,
        ch: Some(ch),
        qp,
        qp_type: QpType::Rc,
        buf,
    };
    connect(&a, &b, 0x100, 0x200);
    let fd = b.dev.comp_channel_fd(ch).unwrap();
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cs = BaselineCq::new(&b.dev, scq).unwrap();
    let mut cr = BaselineCq::new(&b.dev, rcq).unwrap();
    let sge_a = [a.sge(0, 8)];
    let sge_b = [b.sge(0, 8)];

    // Solicited only: an unsolicited SEND completes without an event, a solicited one fires.
    cr.req_notify(true).unwrap();
    qb.post_recv(1, &sge_b).unwrap();
    qb.post_recv(2, &sge_b).unwrap();
    qa.post_send(&SendWr::new(10, SendOp::Send, &sge_a))
        .unwrap();
    assert_eq!(ok(&mut cr, "unsolicited receive").wr_id, 1);
    ok(&mut ca, "send");
    assert_eq!(b.dev.get_cq_event(ch).unwrap(), None);
    qa.post_send(&SendWr {
        solicited: true,
        ..SendWr::new(11, SendOp::Send, &sge_a)
    })
    .unwrap();
    assert_eq!(b.dev.wait_cq_event(ch, WAIT).unwrap(), Some(rcq));
    assert_eq!(ok(&mut cr, "solicited receive").wr_id, 2);
    ok(&mut ca, "send");

    // Both CQs armed: a receive and a send completion, two events on the one channel.
    cr.req_notify(false).unwrap();
    cs.req_notify(false).unwrap();
    qb.post_recv(3, &sge_b).unwrap();
    qa.post_recv(4, &sge_a).unwrap();
    qa.post_send(&SendWr::new(12, SendOp::Send, &sge_a))
        .unwrap();
    qb.post_send(&SendWr::new(13, SendOp::Send, &sge_b))
        .unwrap();
    let mut got = vec![
        b.dev.wait_cq_event(ch, WAIT).unwrap(),
        b.dev.wait_cq_event(ch, WAIT).unwrap(),
    ];
    got.sort();
    assert_eq!(got, vec![Some(scq.min(rcq)), Some(scq.max(rcq))]);
    assert_eq!(b.dev.get_cq_event(ch).unwrap(), None);
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid, writable pollfd (nfds 1), timeout 0: no blocking.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    assert_eq!(ready, 0, "fd readable with nothing queued");
    assert_eq!(ok(&mut cr, "receive").wr_id, 3);
    assert_eq!(ok(&mut cs, "send").wr_id, 13);
    ok(&mut ca, "send");
    ok(&mut ca, "receive");

    // Two events taken from the receive CQ, one from the send CQ: destroy is refused until
    // they are acknowledged, in one call each.
    drop((qb, cs, cr));
    b.dev.destroy_qp(b.qp.id).unwrap();
    let e = b.dev.destroy_cq(rcq).unwrap_err().to_string();
    assert!(e.contains("ack_cq_events(cq, 2)"), "{e}");
    assert!(b.dev.ack_cq_events(rcq, 3).is_err());
    b.dev.ack_cq_events(rcq, 2).unwrap();
    b.dev.ack_cq_events(scq, 1).unwrap();
    b.dev.destroy_cq(rcq).unwrap();
    assert!(
        b.dev.destroy_comp_channel(ch).is_err(),
        "the send CQ is attached"
    );
    b.dev.destroy_cq(scq).unwrap();
    b.dev.destroy_comp_channel(ch).unwrap();
    // The async event fd is non-blocking and empty.
    let afd = b.dev.async_event_fd().unwrap();
    // SAFETY: fcntl on an open descriptor (the context's async fd), reading its flags only.
    let flags = unsafe { libc::fcntl(afd, libc::F_GETFL) };
    assert_ne!(flags & libc::O_NONBLOCK, 0);
    assert_eq!(b.dev.poll_async_event(), None);
}

/// Why the IP-level join: `ibv_attach_mcast` on rxe only adds the group's MAC to the netdev's
/// filter (`rxe_mcast_add`, drivers/infiniband/sw/rxe/rxe_mcast.c). A RoCE v2 datagram to
/// 239.x arrives as IPv4 multicast, and IPv4 drops a multicast destination the receiving
/// netdev has not joined before UDP (hence rxe's UDP tunnel) sees it (`ip_route_input_rcu`,
/// net/ipv4/route.c: `ip_check_mc_rcu`). The RDMA CM joins the IP group itself for RoCE v2
/// (`cma_iboe_join_multicast` → `cma_igmp_send` → `ip_mc_inc_group`,
/// drivers/infiniband/core/cma.c); a bare verbs user has to do the same, here with a UDP
/// socket's IP_ADD_MEMBERSHIP on rxe1's address. Observed without it: rxe0's `sent_pkts`
/// counts the datagram, veth1 receives it, `IpInReceives` counts it, rxe1's `rcvd_pkts` does not.
#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn ud_multicast_attach_send_detach() {
    require_vm();
    let a = Side::new("rxe0", QpType::Ud, false);
    let b = Side::new("rxe1", QpType::Ud, false);
    let c = Side::new("rxe1", QpType::Ud, false);
    connect(&a, &b, 0x1, 0x2);
    assert_eq!(
        c.apply(&connect_steps(&c, &a, 0x3, 0x4)).qp_state,
        QpState::Rts
    );
    let group_ip = Ipv4Addr::new(239, 1, 2, 3);
    let group = Gid::from_ipv4(group_ip.octets());
    // The kernel refuses a unicast GID (EINVAL, ib_attach_mcast) and detaching a QP that is
    // not attached (uverbs ib_uverbs_detach_mcast).
    let refused = b.dev.attach_mcast(b.qp.id, &b.gid, 0).unwrap_err();
    assert_eq!(refused.errno(), libc::EINVAL, "{refused}");
    assert!(b.dev.detach_mcast(b.qp.id, &group, 0).is_err());
    // b first: rxe replicates a multicast packet to the attached QPs in attach order, in one
    // pass under its mcg lock (`rxe_attach_mcg` appends, `rxe_rcv_mcast_pkt` walks the list,
    // drivers/infiniband/sw/rxe/rxe_mcast.c and rxe_recv.c). So once c has a datagram, a copy
    // for b, had rxe made one, is already queued on b, ahead of anything sent to b later.
    b.dev.attach_mcast(b.qp.id, &group, 0).unwrap();
    c.dev.attach_mcast(c.qp.id, &group, 0).unwrap();
    let ah = a
        .dev
        .create_ah_verbs(
            a.pd,
            &AhAttr {
                grh: Some(GlobalRoute {
                    dgid: group,
                    sgid_index: GID_IPV4,
                    hop_limit: 1,
                    ..Default::default()
                }),
                ..ah_to(group)
            },
        )
        .unwrap();
    let ah_b = a.dev.create_ah_verbs(a.pd, &ah_to(b.gid)).unwrap();
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut qc = BaselineQp::new(&c.dev, c.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
    let mut cc = BaselineCq::new(&c.dev, c.cq).unwrap();
    let to_group = UdDest {
        ah: ah.id,
        remote_qpn: mlx5_hw::MULTICAST_QPN,
        remote_qkey: QKEY,
    };
    let to_b = UdDest {
        ah: ah_b.id,
        remote_qpn: b.qp.qpn,
        remote_qkey: QKEY,
    };
    for i in 0..3u64 {
        let off = 128 * i as usize;
        qb.post_recv(i + 1, &[b.sge(off, 40 + 64)]).unwrap();
        qc.post_recv(i + 1, &[c.sge(off, 40 + 64)]).unwrap();
    }
    a.buf.write(0, b"to the group");
    a.buf.write(64, b"to b alone");
    let mut send = |wr_id: u64, dest: UdDest, off: usize, len: u32, what: &str| {
        qa.post_send(&SendWr {
            ud: Some(dest),
            ..SendWr::new(wr_id, SendOp::Send, &[a.sge(off, len)])
        })
        .unwrap();
        // Each send completes before the next is posted, so the datagrams leave in order.
        assert_eq!(ok(&mut ca, what).wr_id, wr_id, "{what}");
    };
    let got = |cq: &mut BaselineCq<'_>, side: &Side, wr_id: u64, text: &[u8], who: &str| {
        let r = ok(cq, who);
        assert_eq!(
            (r.wr_id, r.byte_len, r.src_qp),
            (wr_id, 40 + text.len() as u32, a.qp.qpn),
            "{who}"
        );
        assert_eq!(
            side.buf.read(128 * (wr_id as usize - 1) + 40, text.len()),
            text,
            "{who}"
        );
    };

    // 1. Attached, but rxe1's netdev has not joined 239.1.2.3: IPv4 drops the datagram, so
    //    b's first receive is the unicast sent after it.
    send(10, to_group, 0, 12, "multicast send, no IP membership");
    send(11, to_b, 64, 10, "unicast marker to b");
    got(
        &mut cb,
        &b,
        1,
        b"to b alone",
        "b, after a datagram for an unjoined group",
    );
    assert_eq!(
        cc.poll(&mut [Completion::default()]).unwrap(),
        0,
        "c got the datagram of an unjoined group"
    );

    // 2. rxe1's address joins the group, as the RDMA CM does: both attached QPs get it.
    let member = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let ip_b = Ipv4Addr::from(b.gid.ipv4().unwrap());
    member.join_multicast_v4(&group_ip, &ip_b).unwrap();
    send(12, to_group, 0, 12, "multicast send");
    got(&mut cb, &b, 2, b"to the group", "receiver b");
    got(&mut cc, &c, 1, b"to the group", "receiver c");

    // 3. After b detaches, only c gets the next datagram: b's next completion is the unicast
    //    sent after c had it (see the attach order above).
    b.dev.detach_mcast(b.qp.id, &group, 0).unwrap();
    send(13, to_group, 0, 12, "second multicast send");
    got(
        &mut cc,
        &c,
        2,
        b"to the group",
        "receiver c, second datagram",
    );
    send(14, to_b, 64, 10, "unicast marker to b");
    got(
        &mut cb,
        &b,
        3,
        b"to b alone",
        "b, detached, after the second datagram",
    );
    assert_eq!(
        cc.poll(&mut [Completion::default()]).unwrap(),
        0,
        "c got more datagrams than were sent"
    );
    c.dev.detach_mcast(c.qp.id, &group, 0).unwrap();
    assert!(
        b.dev.detach_mcast(b.qp.id, &group, 0).is_err(),
        "the group is gone once its last QP detached"
    );
    drop(member);
}

/// XRC on Soft-RoCE: rxe has no XRC (its kernel driver no `alloc_xrcd`, its capability flags
/// no `IB_DEVICE_XRC`, its provider no `open_xrcd`, so libibverbs' dummy op answers
/// EOPNOTSUPP). Every XRC call of the backend must say which verb the device refuses, as an
/// `Unsupported` error, without creating anything: the PD and CQ it was given are free to go
/// afterwards (the kernel would refuse them with EBUSY if an XRC object had been left on them).
#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn xrc_is_refused_clearly_on_soft_roce() {
    require_vm();
    use mlx5_hw::{QpInitEx, SrqInitAttr, XrcSrqInitAttr, XrcdId};
    let dev = VerbsDevice::open("rxe0").unwrap();
    assert!(!dev.has_xrc(), "rxe0 reports IBV_DEVICE_XRC");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq_verbs(&CqInitAttr::default()).unwrap().id;
    let refused = |what: &str, r: mlx5_hw::Result<()>, call: &str| {
        let e = r.expect_err(what);
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Unsupported(_)) && msg.contains(call) && msg.contains("rxe0"),
            "{what}: expected Unsupported naming {call} on rxe0, got {e:?}"
        );
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{what}");
        msg
    };
    // The provider's own answer, not a check of ours: EOPNOTSUPP from ibv_open_xrcd.
    let msg = refused("open_xrcd", dev.open_xrcd().map(drop), "ibv_open_xrcd");
    assert!(
        msg.contains("os error 95"),
        "not the provider's EOPNOTSUPP: {msg}"
    );
    // The rest need a domain that cannot exist here; each names its verb.
    let x = XrcdId(1);
    refused(
        "create_srq_xrc",
        dev.create_srq_xrc(
            pd,
            &XrcSrqInitAttr {
                xrcd: x,
                cq,
                attr: SrqInitAttr {
                    max_wr: 16,
                    max_sge: 1,
                    srq_limit: 0,
                },
            },
        )
        .map(drop),
        "ibv_create_srq_ex(IBV_SRQT_XRC)",
    );
    let base = QpInitAttr {
        qp_type: QpType::XrcRecv,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    refused(
        "create_qp_ex(XRC_RECV)",
        dev.create_qp_ex(
            pd,
            &base,
            &QpInitEx {
                xrcd: Some(x),
                ..QpInitEx::default()
            },
        )
        .map(drop),
        "ibv_create_qp_ex(IBV_QPT_XRC_RECV)",
    );
    refused("open_qp", dev.open_qp(x, 0x42).map(drop), "ibv_open_qp");
    refused("close_xrcd", dev.close_xrcd(x), "ibv_close_xrcd");
    let ini = QpInitAttr {
        qp_type: QpType::XrcSend,
        cap: QpCap {
            max_send_wr: 16,
            max_send_sge: 1,
            ..QpCap::default()
        },
        ..base
    };
    refused(
        "create_qp_verbs(XRC_SEND)",
        dev.create_qp_verbs(pd, &ini).map(drop),
        "ibv_create_qp(IBV_QPT_XRC_SEND)",
    );
    // A target is created with create_qp_ex and a domain, never with plain create_qp.
    let e = dev.create_qp_verbs(pd, &base).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // Nothing was left behind on the PD or the CQ.
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
}

/// Completion timestamps on Soft-RoCE: what `ibv_create_cq_ex` with
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` and the device clock (`hca_core_clock` of
/// `ibv_query_device_ex`) give. rxe offers neither (its provider's `rxe_create_cq_ex` refuses
/// wc_flags outside the standard ones with EOPNOTSUPP, and the kernel reports no core clock):
/// each is refused with an `Unsupported` error naming the call and the device, and nothing is
/// left behind.
#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn completion_timestamps_are_refused_clearly_on_soft_roce() {
    require_vm();
    let dev = VerbsDevice::open("rxe0").unwrap();
    let e = dev
        .create_cq_verbs_with_timestamps(&CqInitAttr::default())
        .expect_err("rxe0 created a CQ with completion timestamps");
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Unsupported(_))
            && msg.contains("IBV_WC_EX_WITH_COMPLETION_TIMESTAMP")
            && msg.contains("rxe0")
            && msg.contains("not supported by this device"),
        "{e:?}"
    );
    let e = dev.query_clock().expect_err("rxe0 reported a core clock");
    assert!(
        matches!(e, Error::Unsupported(_)) && e.to_string().contains("rxe0"),
        "{e:?}"
    );
    // The Device method, too (it needs the mlx5 ring on top).
    let e = dev
        .create_cq_with_timestamps(&CqInitAttr::default())
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    // A plain CQ still works, and polling it for timestamps is refused, not misread.
    let cq = dev.create_cq_verbs(&CqInitAttr::default()).unwrap();
    assert!(!cq.timestamps);
    let mut bc = BaselineCq::new(&dev, cq.id).unwrap();
    let mut out = [Completion::default(); 4];
    let mut ts = [0u64; 4];
    let e = bc.poll_timestamped(&mut out, &mut ts).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    drop(bc);
    dev.destroy_cq(cq.id).unwrap();
}

/// The extended polling interface (`ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` and the
/// `ibv_wc_read_*` readers, what `lat --timestamps --path verbs` polls with) on real
/// completions: rxe's `ibv_create_cq_ex` with `IBV_WC_STANDARD_FLAGS` (no timestamps, which it
/// refuses). Receive with immediate, send and an error completion read as they should, the
/// timestamps of a CQ without them are 0, and nothing is skipped between the two interfaces.
#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn extended_poll_reads_real_completions_on_soft_roce() {
    require_vm();
    const IBV_WC_SEND: u32 = 0;
    const IBV_WC_RDMA_WRITE: u32 = 1;
    const IBV_WC_RECV: u32 = 1 << 7;
    const IBV_WC_REM_ACCESS_ERR: u32 = 10;
    let a = Side::extended("rxe0", QpType::Rc);
    let b = Side::extended("rxe1", QpType::Rc);
    connect(&a, &b, 0x77, 0x99);
    let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
    let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
    let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
    let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
    let ex_one = |cq: &mut BaselineCq<'_>, what: &str| -> (Completion, u64) {
        let deadline = std::time::Instant::now() + WAIT;
        let mut out = [Completion::default(); 2];
        let mut ts = [u64::MAX; 2];
        loop {
            let n = cq.poll_timestamped(&mut out, &mut ts).unwrap();
            assert!(n <= 1, "{what}: {n} completions, want 1: {out:?}");
            if n == 1 {
                return (out[0], ts[0]);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: no completion"
            );
            std::thread::yield_now();
        }
    };
    a.buf.write(0, b"extended poll!!");
    qb.post_recv(7, &[b.sge(0, 256)]).unwrap();
    qa.post_send(&SendWr::new(
        1,
        SendOp::SendImm(0xfeed_beef),
        &[a.sge(0, 15)],
    ))
    .unwrap();
    let (r, ts) = ex_one(&mut cb, "receive");
    assert!(r.is_success(), "{r:?}");
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm, r.qp_num),
        (7, IBV_WC_RECV, 15, Some(0xfeed_beef), b.qp.qpn),
        "{r:?}"
    );
    assert_eq!(ts, 0, "a CQ without timestamps");
    assert_eq!(b.buf.read(0, 15), b"extended poll!!");
    let (s, _) = ex_one(&mut ca, "send");
    assert_eq!(
        (s.wr_id, s.opcode, s.qp_num),
        (1, IBV_WC_SEND, a.qp.qpn),
        "{s:?}"
    );
    let w = SendOp::Write {
        remote_addr: b.buf.addr(4096),
        rkey: b.mr.rkey,
    };
    qa.post_send(&SendWr::new(2, w, &[a.sge(0, 15)])).unwrap();
    // The same CQ answers `ibv_poll_cq` too, after extended batches: rxe's `cq_next_poll`
    // ends a batch itself when the queue is empty, and an `ibv_end_poll` after it would step
    // past the entry of this WRITE, which then reads all zero (seen here before
    // `poll_timestamped` kept to batches of one).
    let c = ok(&mut ca, "write, ibv_poll_cq");
    assert_eq!(
        (c.wr_id, c.opcode, c.qp_num),
        (2, IBV_WC_RDMA_WRITE, a.qp.qpn),
        "{c:?}"
    );
    // An error completion: status and vendor syndrome, no timestamp.
    let bad = SendOp::Write {
        remote_addr: b.buf.addr(4096),
        rkey: b.mr.rkey ^ 0x5a5a_0000,
    };
    qa.post_send(&SendWr::new(3, bad, &[a.sge(0, 15)])).unwrap();
    let (e, ts) = ex_one(&mut ca, "write with a bad rkey");
    assert_eq!(
        (e.wr_id, e.status, ts),
        (3, IBV_WC_REM_ACCESS_ERR, 0),
        "{e:?}"
    );
    assert_eq!(e.qp_num, a.qp.qpn);
}

/// Every asynchronous event pending on `dev` after waiting up to `wait` for the first one
/// (then taking what followed within a short grace: rxe may raise two for one change).
fn events_within(dev: &VerbsDevice, wait: Duration) -> Vec<AsyncEvent> {
    let fd = dev.async_event_fd().unwrap();
    let mut got = Vec::new();
    if mlx5_hw::device::wait_readable(fd, wait).unwrap() {
        while mlx5_hw::device::wait_readable(fd, Duration::from_millis(200)).unwrap() {
            match dev.poll_async_event() {
                Some(e) => got.push(e),
                None => break,
            }
        }
    }
    got
}

/// Run `cmd` with `args` in the VM (as root, as the guest runs everything), failing on a
/// non-zero status.
fn sh(cmd: &str, args: &[&str]) {
    let st = std::process::Command::new(cmd).args(args).status().unwrap();
    assert!(st.success(), "{cmd} {args:?}: {st}");
}

/// A Soft-RoCE device of its own, on a veth pair of its own, so that taking its link down
/// disturbs no other test: removed (device, then link) when dropped.
struct OwnRxe;

impl OwnRxe {
    fn new() -> OwnRxe {
        sh(
            "ip",
            &[
                "link", "add", "vethev0", "type", "veth", "peer", "name", "vethev1",
            ],
        );
        sh("ip", &["link", "set", "vethev1", "up"]);
        sh("ip", &["link", "set", "vethev0", "up"]);
        sh(
            "rdma",
            &["link", "add", "rxeev", "type", "rxe", "netdev", "vethev0"],
        );
        OwnRxe
    }
}

impl Drop for OwnRxe {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rdma")
            .args(["link", "delete", "rxeev"])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", "vethev0"])
            .status();
    }
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn the_netdev_going_down_and_up_raises_port_err_and_port_active() {
    // rxe turns the netdev's state into port events (rxe_net.c `rxe_notify`: NETDEV_DOWN ->
    // `rxe_port_down`, IBV_EVENT_PORT_ERR; NETDEV_UP -> `rxe_port_up`, IBV_EVENT_PORT_ACTIVE;
    // a carrier change, NETDEV_CHANGE -> either), and uverbs queues them on every context.
    require_vm();
    let _own = OwnRxe::new();
    let dev = VerbsDevice::open("rxeev").unwrap();
    // What the device raised while it came up is not this test's.
    let _ = events_within(&dev, Duration::from_millis(200));
    assert_eq!(dev.query_port(PORT).unwrap().state, PortState::Active);
    sh("ip", &["link", "set", "vethev0", "down"]);
    let down = events_within(&dev, WAIT);
    assert_eq!(down, [AsyncEvent::PortError(PORT)], "link down");
    assert_eq!(dev.query_port(PORT).unwrap().state, PortState::Down);
    // Up: NETDEV_UP, then the carrier coming back (NETDEV_CHANGE) when the link watcher gets
    // to it: one or two PORT_ACTIVE (two, on Debian's 6.1 in the VM).
    sh("ip", &["link", "set", "vethev0", "up"]);
    let up = events_within(&dev, WAIT);
    assert!(
        !up.is_empty() && up.iter().all(|e| *e == AsyncEvent::PortActive(PORT)),
        "link up: {up:?}"
    );
    assert_eq!(dev.query_port(PORT).unwrap().state, PortState::Active);
}

#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn soft_roce_receives_in_rtr_without_comm_est() {
    // A ConnectX raises IBV_EVENT_COMM_EST for the first packet a QP receives in RTR (the
    // software ConnectX models it); rxe processes the packet (rxe_resp.c) and raises nothing:
    // what it really does, checked, so the difference is known.
    require_vm();
    for t in [QpType::Rc, QpType::Uc] {
        let a = Side::new("rxe0", t, false);
        let b = Side::new("rxe1", t, false);
        let steps = connect_steps(&b, &a, 0x20, 0x10);
        b.apply(&steps[..2]);
        assert_eq!(b.state(), QpState::Rtr);
        a.apply(&connect_steps(&a, &b, 0x10, 0x20));
        let mut qa = BaselineQp::new(&a.dev, a.qp.id).unwrap();
        let mut qb = BaselineQp::new(&b.dev, b.qp.id).unwrap();
        let mut ca = BaselineCq::new(&a.dev, a.cq).unwrap();
        let mut cb = BaselineCq::new(&b.dev, b.cq).unwrap();
        a.buf.write(0, b"in RTR");
        qb.post_recv(1, &[b.sge(0, 64)]).unwrap();
        qa.post_send(&SendWr::new(2, SendOp::Send, &[a.sge(0, 6)]))
            .unwrap();
        ok(&mut ca, "send to a QP in RTR");
        let r = ok(&mut cb, "receive in RTR");
        assert_eq!((r.wr_id, r.byte_len), (1, 6), "{t}");
        assert_eq!(b.buf.read(0, 6), b"in RTR");
        assert_eq!(
            events_within(&b.dev, Duration::from_millis(500)),
            [],
            "{t}: rxe raises no COMM_EST"
        );
        assert_eq!(b.state(), QpState::Rtr, "{t}: and leaves the QP in RTR");
    }
}

/// DC on Soft-RoCE: DC is mlx5's (`mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC`), so
/// a DCI or DCT asked of rxe is refused naming it, before any object is made; a DC type
/// without its DC attributes, and a DCT number of a QP that is no DCT, are refused on any
/// device.
#[test]
#[ignore = "needs Soft-RoCE: run tools/rxe-vm/run-verbs-tests.sh"]
fn dc_is_refused_clearly_on_soft_roce() {
    require_vm();
    let s = Side::new("rxe0", QpType::Rc, false);
    let srq = s
        .dev
        .create_srq_verbs(
            s.pd,
            &mlx5_hw::SrqInitAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap()
        .id;
    let attr = |qp_type, srq| QpInitAttr {
        qp_type,
        send_cq: s.cq,
        recv_cq: s.cq,
        srq,
        cap: QpCap {
            max_send_wr: if qp_type == QpType::Dci { 16 } else { 0 },
            max_send_sge: 1,
            ..QpCap::default()
        },
        sq_sig_all: false,
    };
    let dci = mlx5_hw::QpInitEx {
        dc: Some(mlx5_hw::DcInit::Initiator { streams: None }),
        ..Default::default()
    };
    match s.dev.create_qp_ex(s.pd, &attr(QpType::Dci, None), &dci) {
        Err(Error::Unsupported(m)) => assert!(m.contains("mlx5dv_create_qp"), "{m}"),
        other => panic!("a DCI on rxe: {other:?}"),
    }
    let dct = mlx5_hw::QpInitEx {
        dc: Some(mlx5_hw::DcInit::Target { access_key: 7 }),
        ..Default::default()
    };
    let r = s
        .dev
        .create_qp_ex(s.pd, &attr(QpType::Dct, Some(srq)), &dct);
    assert!(
        matches!(r, Err(Error::Unsupported(_))),
        "a DCT on rxe: {r:?}"
    );
    // A DCT without its SRQ is the caller's mistake on any device.
    let r = s.dev.create_qp_ex(s.pd, &attr(QpType::Dct, None), &dct);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    s.dev.destroy_srq(srq).unwrap();
    // Without DC attributes, or with the wrong kind: refused as rdma-core refuses them.
    let e = s
        .dev
        .create_qp_verbs(s.pd, &attr(QpType::Dci, None))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = s.dev.dct_number(s.qp.id).unwrap_err();
    assert!(e.to_string().contains("not a DC target"), "{e}");
}
