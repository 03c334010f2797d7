//! Shared setup for the data-path tests on the software ConnectX: devices on a fabric, a
//! registered buffer per side, CQs, QPs brought to RTS with full attribute masks, and a
//! pump that steps the fabric and polls.
#![allow(dead_code)]

use mlx5_hw::{
    AhAttr, AttrMask, ChannelId, CqId, CqInitAttr, Device, GlobalRoute, Mtu, PdId, QpAttr, QpCap,
    QpInfo, QpInitAttr, QpState, QpType, SrqId,
};
use mlx5_qp::{Cq, Qp, Resolve, Wc};
use mlx5_sim::{DeviceConfig, Fabric, SimDevice};

pub use mlx5_testkit::buf::{all_access, Buf};

/// One side of a connection.
pub struct Side {
    pub dev: SimDevice,
    pub pd: PdId,
    pub cq: Cq,
    pub cq_id: CqId,
    /// The CQ's completion channel (`Opts::channel`).
    pub channel: Option<ChannelId>,
    pub info: QpInfo,
    pub qp: Qp,
    pub buf: Buf,
}

/// Options for [`pair`].
#[derive(Clone, Copy)]
pub struct Opts {
    pub qp_type: QpType,
    pub cap: QpCap,
    pub cqe: u32,
    pub cqe_size: u32,
    pub buf_len: usize,
    pub sig_all: bool,
    pub channel: bool,
    /// The CQ is created with completion timestamps.
    pub timestamps: bool,
    /// QP creation flags (`create_qp_ex`).
    pub create_flags: mlx5_hw::QpCreateFlags,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            },
            cqe: 256,
            cqe_size: 64,
            buf_len: 1 << 16,
            sig_all: false,
            channel: false,
            timestamps: false,
            create_flags: mlx5_hw::QpCreateFlags::empty(),
        }
    }
}

pub fn fabric2() -> (Fabric, SimDevice, SimDevice) {
    let f = Fabric::new();
    let a = f.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let b = f.add_device(DeviceConfig::new([10, 0, 0, 2]));
    (f, a, b)
}

pub fn make_cq(dev: &SimDevice, cqe: u32, cqe_size: u32) -> Cq {
    let c = dev
        .create_cq(&CqInitAttr {
            cqe,
            cqe_size,
            ignore_overrun: false,
            channel: None,
        })
        .unwrap();
    // SAFETY: the CQ is never destroyed while the test runs.
    unsafe { Cq::from_layout(&c.layout) }.unwrap()
}

/// Create a QP on `dev` whose send and receive completions go to a new CQ.
pub fn side(dev: &SimDevice, o: &Opts, srq: Option<(SrqId, u32)>) -> Side {
    let pd = dev.alloc_pd().unwrap();
    let channel = o.channel.then(|| dev.create_comp_channel().unwrap());
    let cq_attr = CqInitAttr {
        cqe: o.cqe,
        cqe_size: o.cqe_size,
        ignore_overrun: false,
        channel,
    };
    let cq_info = if o.timestamps {
        dev.create_cq_with_timestamps(&cq_attr).unwrap()
    } else {
        dev.create_cq(&cq_attr).unwrap()
    };
    // SAFETY: the CQ lives as long as the device (never destroyed in tests).
    let cq = unsafe { Cq::from_layout(&cq_info.layout) }.unwrap();
    let info = dev
        .create_qp_ex(
            pd,
            &QpInitAttr {
                qp_type: o.qp_type,
                send_cq: cq_info.id,
                recv_cq: cq_info.id,
                srq: srq.map(|s| s.0),
                cap: o.cap,
                sq_sig_all: o.sig_all,
            },
            &mlx5_hw::QpInitEx {
                create_flags: o.create_flags,
                ..Default::default()
            },
        )
        .unwrap();
    // SAFETY: the QP is never destroyed while its `Qp` exists.
    let qp = unsafe { Qp::from_layout(&info.layout, srq.map(|s| s.1)) }.unwrap();
    let buf = Buf::new(dev, pd, o.buf_len, all_access());
    Side {
        dev: dev.clone(),
        pd,
        cq,
        cq_id: cq_info.id,
        channel,
        info,
        qp,
        buf,
    }
}

/// The address of `dev`'s port 1 for a RoCE AH.
pub fn ah_to(dev: &SimDevice) -> AhAttr {
    AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: dev.gid(),
            hop_limit: 64,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    }
}

/// Reset -> Init -> RTR -> RTS with the full masks the kernel table asks for, then tell the
/// data path.
pub fn connect(me: &mut Side, peer_dev: &SimDevice, peer_qpn: u32) {
    connect_with(me, peer_dev, peer_qpn, |_| {})
}

/// [`connect`] with the attributes adjusted by `tweak` before every modify.
pub fn connect_with(
    me: &mut Side,
    peer_dev: &SimDevice,
    peer_qpn: u32,
    tweak: impl Fn(&mut QpAttr),
) {
    let t = me.info.layout.qp_type;
    let id = me.info.id;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: all_access(),
        qkey: 0x1111_1111,
        ..QpAttr::default()
    };
    let init_mask = match t {
        QpType::Ud => AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY,
        _ => AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    };
    tweak(&mut a);
    me.dev.modify_qp(id, &a, init_mask).unwrap();
    me.qp.set_state(QpState::Init);
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 0x100;
    a.ah_attr = ah_to(peer_dev);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    let rtr_mask = match t {
        QpType::Rc => {
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER
        }
        QpType::Uc => {
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
        }
        _ => AttrMask::STATE,
    };
    tweak(&mut a);
    me.dev.modify_qp(id, &a, rtr_mask).unwrap();
    me.qp.set_state(QpState::Rtr);
    a.qp_state = QpState::Rts;
    a.sq_psn = 0x100;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts_mask = match t {
        QpType::Rc => {
            AttrMask::STATE
                | AttrMask::SQ_PSN
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC
        }
        _ => AttrMask::STATE | AttrMask::SQ_PSN,
    };
    tweak(&mut a);
    me.dev.modify_qp(id, &a, rts_mask).unwrap();
    me.qp.set_state(QpState::Rts);
}

/// Two connected QPs of the same type on two devices.
pub fn pair(o: &Opts) -> (Fabric, Side, Side) {
    pair_with(o, |_| {}, |_| {})
}

/// [`pair`] with the attributes of each side adjusted.
pub fn pair_with(
    o: &Opts,
    ta: impl Fn(&mut QpAttr),
    tb: impl Fn(&mut QpAttr),
) -> (Fabric, Side, Side) {
    let (f, da, db) = fabric2();
    let mut a = side(&da, o, None);
    let mut b = side(&db, o, None);
    let (qa, qb) = (a.info.qpn, b.info.qpn);
    connect_with(&mut a, &db, qb, ta);
    connect_with(&mut b, &da, qa, tb);
    (f, a, b)
}

/// Poll `cq` until the fabric is idle and nothing more arrives; every completion in order.
pub fn drain<R: Resolve + ?Sized>(f: &Fabric, cq: &mut Cq, table: &mut R) -> Vec<Wc> {
    drain_room(f, cq, table, 7)
}

/// [`drain`] with room for `room` completions a poll.
pub fn drain_room<R: Resolve + ?Sized>(
    f: &Fabric,
    cq: &mut Cq,
    table: &mut R,
    room: usize,
) -> Vec<Wc> {
    let mut all = Vec::new();
    loop {
        let w = pump(f, cq, table, room);
        if w.is_empty() {
            return all;
        }
        all.extend(w);
    }
}

/// Step the fabric until idle, then poll `cq` once into a fresh array.
pub fn pump<R: Resolve + ?Sized>(f: &Fabric, cq: &mut Cq, table: &mut R, max: usize) -> Vec<Wc> {
    f.run_until_idle();
    let mut wcs = vec![Wc::default(); max];
    let n = cq.poll(table, &mut wcs).unwrap();
    wcs.truncate(n);
    wcs
}

/// Assert the fabric saw no driver bug.
pub fn no_driver_bugs(f: &Fabric) {
    let bugs = f.driver_bugs();
    assert!(
        bugs.is_empty(),
        "driver bugs reported by the software ConnectX: {bugs:#?}"
    );
}
