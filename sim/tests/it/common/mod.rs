//! A small driver for the tests: builds WQEs with `mlx5_wqe`, writes the doorbell records and
//! rings doorbells with `mlx5_hw::mmio` exactly as rdma-core's `post_send_db` does, and polls
//! CQEs with the ownership rule. It deliberately does not use the `qp` crate.
#![allow(dead_code)]

use mlx5_cq::{sw_owned, ArmCmd, Cqe64};
use mlx5_hw::mmio;
use mlx5_hw::{
    AccessFlags, AhAttr, AttrMask, ChannelId, CqInfo, CqInitAttr, Device, GlobalRoute, MrInfo, Mtu,
    PdId, QpAttr, QpCap, QpInfo, QpInitAttr, QpState, QpType, SrqInfo, SrqInitAttr,
};
use mlx5_sim::{AtomicEndianness, DeviceConfig, Fabric, SimDevice};
use mlx5_wqe::recv::{write_scatter, Sge};
use mlx5_wqe::{CtrlSeg, CtrlSegBuilder, DataSeg, SqRing, WqeWriter};

pub mod ops;

/// Registered test memory (8-byte aligned).
pub struct Mem {
    buf: Box<[u64]>,
    pub mr: MrInfo,
}

impl Mem {
    pub fn new(dev: &SimDevice, pd: PdId, len: usize, access: AccessFlags) -> Mem {
        let mut buf = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        let ptr = buf.as_mut_ptr() as *mut u8;
        // SAFETY: `buf` lives as long as the Mem; tests deregister nothing they still use.
        let mr = unsafe { dev.reg_mr(pd, ptr, len, access) }.expect("reg_mr");
        Mem { buf, mr }
    }
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.mr.length as usize);
        let p = self.buf.as_ptr() as *mut u8;
        for (i, b) in data.iter().enumerate() {
            // SAFETY: bounds asserted above.
            unsafe { core::ptr::write_volatile(p.add(off + i), *b) };
        }
    }
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let p = self.buf.as_ptr() as *const u8;
        // SAFETY: within the buffer (callers stay in bounds).
        (0..len)
            .map(|i| unsafe { core::ptr::read_volatile(p.add(off + i)) })
            .collect()
    }
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.lkey(),
        }
    }
}

/// A CQ with its consumer index, arm sequence number and (own) completion channel.
pub struct Cq {
    pub info: CqInfo,
    pub ci: u32,
    pub sn: u32,
    pub ch: Option<ChannelId>,
}

impl Cq {
    /// A CQ; with `channel`, on a completion channel of its own.
    pub fn new(dev: &SimDevice, cqe: u32, cqe_size: u32, channel: bool) -> Cq {
        let ch = channel.then(|| dev.create_comp_channel().expect("create_comp_channel"));
        Cq::on(dev, cqe, cqe_size, ch)
    }

    /// A CQ reporting to `ch` (which other CQs may share).
    pub fn on(dev: &SimDevice, cqe: u32, cqe_size: u32, ch: Option<ChannelId>) -> Cq {
        let info = dev
            .create_cq(&CqInitAttr {
                cqe,
                cqe_size,
                ignore_overrun: false,
                channel: ch,
            })
            .expect("create_cq");
        Cq {
            info,
            ci: 0,
            sn: 0,
            ch,
        }
    }

    /// Whether the CQE at free-running index `idx` (at or past the consumer index) has been
    /// written, without consuming it: `Some(solicited)` where solicited means the SE bit or
    /// an error CQE (what fires a solicited-only arm).
    pub fn peek(&self, idx: u32) -> Option<bool> {
        let l = &self.info.layout;
        let slot = (idx & (l.cqe_cnt - 1)) as usize * l.cqe_size as usize
            + if l.cqe_size == 128 { 64 } else { 0 };
        // SAFETY: the slot is inside the CQ buffer.
        let op_own = unsafe { core::ptr::read_volatile(l.buf.add(slot + 63)) };
        if !sw_owned(op_own, idx, l.cqe_cnt) {
            return None;
        }
        let opcode = op_own >> 4;
        Some(op_own & 2 != 0 || opcode == mlx5_cq::CQE_REQ_ERR || opcode == mlx5_cq::CQE_RESP_ERR)
    }

    /// The next CQE, advancing the consumer index and set_ci like rdma-core.
    pub fn poll(&mut self) -> Option<Cqe64> {
        let l = &self.info.layout;
        let slot = (self.ci & (l.cqe_cnt - 1)) as usize * l.cqe_size as usize
            + if l.cqe_size == 128 { 64 } else { 0 };
        let mut b = [0u8; 64];
        // The owner byte first, then (after the barrier) the rest, like rdma-core: read the
        // other way round, a CQE being written by the device thread could pair the new owner
        // byte with the previous lap's contents.
        // SAFETY: the slot is inside the CQ buffer.
        b[63] = unsafe { core::ptr::read_volatile(l.buf.add(slot + 63)) };
        if !sw_owned(b[63], self.ci, l.cqe_cnt) {
            return None;
        }
        mmio::from_device_barrier();
        for (i, x) in b.iter_mut().enumerate().take(63) {
            // SAFETY: the slot is inside the CQ buffer.
            *x = unsafe { core::ptr::read_volatile(l.buf.add(slot + i)) };
        }
        self.ci = self.ci.wrapping_add(1);
        // SAFETY: dbrec is the CQ's doorbell record.
        unsafe { mmio::write_dbrec(l.dbrec, self.ci & 0xff_ffff) };
        Some(Cqe64::from_bytes(&b))
    }

    pub fn drain(&mut self) -> Vec<Cqe64> {
        let mut v = Vec::new();
        while let Some(c) = self.poll() {
            v.push(c);
        }
        v
    }

    /// Arm like rdma-core `mlx5_arm_cq`.
    pub fn arm(&mut self, cmd: ArmCmd) {
        let l = &self.info.layout;
        let word = mlx5_cq::arm_value(self.sn, cmd, self.ci);
        // SAFETY: dbrec[1] is the arm record; the UAR page holds the doorbell at 0x20.
        unsafe {
            mmio::write_dbrec(l.dbrec.add(1), word);
            mmio::wc_start();
            let v = mlx5_cq::arm_uar_value(self.sn, cmd, self.ci, l.cqn);
            core::ptr::write_volatile(l.cq_uar.add(0x20) as *mut u64, v.to_be());
            mmio::flush_writes();
        }
    }
}

/// How send doorbells are rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// 8-byte doorbell.
    Db,
    /// BlueFlame copy when the WQE fits a half.
    Bf,
}

/// A QP and its posting state.
pub struct Qp {
    pub dev: SimDevice,
    pub info: QpInfo,
    pub pd: PdId,
    pub sq_pi: u16,
    pub rq_head: u16,
    pub bf_off: usize,
    pub mode: Ring,
}

impl Qp {
    pub fn qpn(&self) -> u32 {
        self.info.qpn
    }

    fn ring(&self) -> SqRing {
        // SAFETY: the layout describes the QP's SQ.
        unsafe { SqRing::new(self.info.layout.sq.buf, self.info.layout.sq.wqe_cnt) }
    }

    /// The ctrl segment of this QP's WQEs; `imm` is in network order, as `wr->imm_data` is.
    fn ctrl(&self, opcode: u8, opmod: u8, fm_ce_se: u8, imm: u32) -> CtrlSegBuilder {
        CtrlSeg::builder()
            .opcode(opcode)
            .opmod(opmod)
            .qpn(self.qpn())
            .fm_ce_se(fm_ce_se)
            .imm(u32::from_be(imm))
    }

    /// Build a WQE with `build`, then post it and ring. Returns the WQE index.
    pub fn post(
        &mut self,
        opcode: u8,
        opmod: u8,
        fm_ce_se: u8,
        imm: u32,
        build: impl FnOnce(&mut WqeWriter),
    ) -> u16 {
        let ring = self.ring();
        let pi = self.sq_pi;
        let mut w = WqeWriter::new(&ring, pi, 1008);
        build(&mut w);
        let (ds, bbs) = w.finish(self.ctrl(opcode, opmod, fm_ce_se, imm));
        self.sq_pi = pi.wrapping_add(bbs as u16);
        self.doorbell(pi, ds);
        pi
    }

    /// Write a WQE into the ring without touching the doorbell record or the register.
    /// Returns (index, ds).
    pub fn prepare(
        &mut self,
        opcode: u8,
        opmod: u8,
        fm_ce_se: u8,
        imm: u32,
        build: impl FnOnce(&mut WqeWriter),
    ) -> (u16, u32) {
        let ring = self.ring();
        let pi = self.sq_pi;
        let mut w = WqeWriter::new(&ring, pi, 1008);
        build(&mut w);
        let (ds, bbs) = w.finish(self.ctrl(opcode, opmod, fm_ce_se, imm));
        self.sq_pi = pi.wrapping_add(bbs as u16);
        (pi, ds)
    }

    /// Write the SQ doorbell record with the producer index.
    pub fn write_sq_dbr(&self, v: u16) {
        mmio::to_device_barrier();
        // SAFETY: dbrec[1] is the SQ record.
        unsafe { mmio::write_dbrec(self.info.layout.dbrec.add(1), v as u32) };
    }

    /// Ring an 8-byte doorbell with the given 8 bytes.
    pub fn ring_raw(&mut self, bytes: [u8; 8]) {
        // SAFETY: the QP's BlueFlame register.
        unsafe {
            mmio::wc_start();
            core::ptr::write_volatile(
                self.info.layout.bf.reg.add(self.bf_off) as *mut u64,
                u64::from_ne_bytes(bytes),
            );
            mmio::flush_writes();
        }
        self.bf_off ^= self.info.layout.bf.size as usize;
    }

    /// The ring bytes of basic block `pi` (64 bytes).
    pub fn bb_ptr(&self, pi: u16) -> *mut u8 {
        self.ring().bb(pi)
    }

    /// Copy `blocks` blocks of the WQE at `pi` to the BlueFlame register.
    pub fn bf_copy(&mut self, pi: u16, blocks: usize) {
        let ring = self.ring();
        // SAFETY: the QP's register and ring.
        unsafe {
            mmio::wc_start();
            mmio::bf_copy(
                self.info.layout.bf.reg.add(self.bf_off),
                ring.bb(pi),
                blocks,
                ring.start(),
                ring.end(),
            );
            mmio::flush_writes();
        }
        self.bf_off ^= self.info.layout.bf.size as usize;
    }

    /// Write the SQ doorbell record and ring for the WQE at `pi` of `ds` units.
    pub fn doorbell(&mut self, pi: u16, ds: u32) {
        let ring = self.ring();
        let l = &self.info.layout;
        mmio::to_device_barrier();
        // SAFETY: dbrec[1] is the SQ record; the BF register and the ring are the QP's.
        unsafe {
            mmio::write_dbrec(l.dbrec.add(1), self.sq_pi as u32);
            mmio::wc_start();
            let reg = l.bf.reg.add(self.bf_off);
            let bbs = ds.div_ceil(4) as usize;
            if self.mode == Ring::Bf && ds > 1 && ds * 16 <= l.bf.size {
                mmio::bf_copy(reg, ring.bb(pi), bbs, ring.start(), ring.end());
            } else {
                mmio::ring_db64(reg, ring.bb(pi));
            }
            mmio::flush_writes();
        }
        self.bf_off ^= self.info.layout.bf.size as usize;
    }

    /// Post a receive WQE on the QP's RQ.
    pub fn post_recv(&mut self, sges: &[Sge]) {
        let l = &self.info.layout;
        let slots = (l.rq.stride / 16) as usize;
        let slot = (self.rq_head as u32 & (l.rq.wqe_cnt - 1)) as usize;
        // SAFETY: the slot is inside the RQ.
        let segs = unsafe {
            core::slice::from_raw_parts_mut(
                l.rq.buf.add(slot * l.rq.stride as usize) as *mut DataSeg,
                slots,
            )
        };
        write_scatter(segs, sges).expect("fits");
        self.rq_head = self.rq_head.wrapping_add(1);
        mmio::to_device_barrier();
        // SAFETY: dbrec[0] is the RQ record.
        unsafe { mmio::write_dbrec(l.dbrec, self.rq_head as u32) };
    }
}

/// An SRQ and its free list (rdma-core `mlx5_post_srq_recv`).
pub struct Srq {
    pub info: SrqInfo,
    pub head: u32,
    pub tail: u32,
    pub counter: u16,
}

impl Srq {
    pub fn new(dev: &SimDevice, pd: PdId, max_wr: u32, limit: u32) -> Srq {
        let info = dev
            .create_srq(
                pd,
                &SrqInitAttr {
                    max_wr,
                    max_sge: 1,
                    srq_limit: limit,
                },
            )
            .unwrap();
        Srq {
            head: info.layout.head,
            tail: info.layout.tail,
            info,
            counter: 0,
        }
    }
    fn wqe(&self, idx: u32) -> *mut u8 {
        self.info
            .layout
            .buf
            .wrapping_add((idx * self.info.layout.stride) as usize)
    }
    fn next_of(&self, idx: u32) -> u32 {
        let p = self.wqe(idx);
        // SAFETY: inside the SRQ buffer.
        unsafe { u16::from_be_bytes([*p.add(2), *p.add(3)]) as u32 }
    }
    pub fn post(&mut self, sges: &[Sge]) -> u32 {
        assert_ne!(self.head, self.tail, "SRQ full");
        let idx = self.head;
        self.head = self.next_of(idx);
        let slots = ((self.info.layout.stride - 16) / 16) as usize;
        // SAFETY: the data segments follow the 16-byte next segment.
        let segs = unsafe {
            core::slice::from_raw_parts_mut(self.wqe(idx).add(16) as *mut DataSeg, slots)
        };
        write_scatter(segs, sges).expect("fits");
        self.counter = self.counter.wrapping_add(1);
        mmio::to_device_barrier();
        // SAFETY: the SRQ doorbell record.
        unsafe { mmio::write_dbrec(self.info.layout.dbrec, self.counter as u32) };
        idx
    }
    /// Return a completed WQE to the free list.
    pub fn free(&mut self, idx: u32) {
        let p = self.wqe(self.tail);
        let b = (idx as u16).to_be_bytes();
        // SAFETY: inside the SRQ buffer.
        unsafe {
            *p.add(2) = b[0];
            *p.add(3) = b[1];
        }
        self.tail = idx;
    }
}

/// One side of a connection.
pub struct Side {
    pub dev: SimDevice,
    pub pd: PdId,
    pub scq: Cq,
    pub rcq: Cq,
    pub qp: Qp,
}

/// What to create.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    pub qp_type: QpType,
    pub cap: QpCap,
    pub cqe: u32,
    pub cqe_size: u32,
    pub mtu: Mtu,
    pub access: AccessFlags,
    pub mode: Ring,
    pub sq_sig_all: bool,
    pub rnr_retry: u8,
    pub retry_cnt: u8,
    pub timeout: u8,
    /// Both devices' atomic byte order.
    pub atomic_endianness: AtomicEndianness,
}

impl Opts {
    pub fn new(qp_type: QpType) -> Opts {
        Opts {
            qp_type,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            },
            cqe: 255,
            cqe_size: 64,
            mtu: Mtu::Mtu1024,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            mode: Ring::Db,
            sq_sig_all: false,
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            atomic_endianness: AtomicEndianness::Host,
        }
    }
}

pub fn side(dev: &SimDevice, o: &Opts, srq: Option<&Srq>) -> Side {
    let pd = dev.alloc_pd().unwrap();
    side_in(dev, pd, o, srq)
}

pub fn side_in(dev: &SimDevice, pd: PdId, o: &Opts, srq: Option<&Srq>) -> Side {
    let scq = Cq::new(dev, o.cqe, o.cqe_size, true);
    let rcq = Cq::new(dev, o.cqe, o.cqe_size, true);
    let info = dev
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type: o.qp_type,
                send_cq: scq.info.id,
                recv_cq: rcq.info.id,
                srq: srq.map(|s| s.info.id),
                cap: o.cap,
                sq_sig_all: o.sq_sig_all,
            },
        )
        .expect("create_qp");
    let qp = Qp {
        dev: dev.clone(),
        info,
        pd,
        sq_pi: 0,
        rq_head: 0,
        bf_off: 0,
        mode: o.mode,
    };
    Side {
        dev: dev.clone(),
        pd,
        scq,
        rcq,
        qp,
    }
}

pub fn init_attr(o: &Opts) -> (QpAttr, AttrMask) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        ..Default::default()
    };
    if o.qp_type == QpType::Ud {
        a.qkey = 0x1111_2222;
        (
            a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY,
        )
    } else {
        a.qp_access_flags = o.access;
        (
            a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        )
    }
}

pub fn rtr_attr(o: &Opts, dest_qpn: u32, dgid: mlx5_hw::Gid, rq_psn: u32) -> (QpAttr, AttrMask) {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        ..Default::default()
    };
    match o.qp_type {
        QpType::Ud => (a, AttrMask::STATE),
        t => {
            a.path_mtu = o.mtu;
            a.dest_qp_num = dest_qpn;
            a.rq_psn = rq_psn;
            a.ah_attr = AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid,
                    hop_limit: 64,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let mut m = AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN;
            if t == QpType::Rc {
                a.max_dest_rd_atomic = 4;
                a.min_rnr_timer = 1;
                m |= AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
            }
            (a, m)
        }
    }
}

pub fn rts_attr(o: &Opts, sq_psn: u32) -> (QpAttr, AttrMask) {
    let mut a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn,
        ..Default::default()
    };
    let mut m = AttrMask::STATE | AttrMask::SQ_PSN;
    if o.qp_type == QpType::Rc {
        a.timeout = o.timeout;
        a.retry_cnt = o.retry_cnt;
        a.rnr_retry = o.rnr_retry;
        a.max_rd_atomic = 4;
        m |= AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::MAX_QP_RD_ATOMIC;
    }
    (a, m)
}

pub fn modify(s: &Side, (a, m): (QpAttr, AttrMask)) {
    s.dev.modify_qp(s.qp.info.id, &a, m).expect("modify_qp");
}

/// Two devices on a fabric, one QP each, connected (RC/UC) or ready (UD), in RTS.
pub struct Pair {
    pub fabric: Fabric,
    pub a: Side,
    pub b: Side,
    pub opts: Opts,
}

impl Pair {
    pub fn new(o: Opts) -> Pair {
        let fabric = Fabric::new();
        let cfg = |ip| {
            DeviceConfig::new(ip)
                .mtu(Mtu::Mtu4096)
                .atomic_endianness(o.atomic_endianness)
        };
        let da = fabric.add_device(cfg([10, 0, 0, 1]));
        let db = fabric.add_device(cfg([10, 0, 0, 2]));
        let a = side(&da, &o, None);
        let b = side(&db, &o, None);
        let p = Pair {
            fabric,
            a,
            b,
            opts: o,
        };
        p.connect();
        p
    }

    pub fn connect(&self) {
        self.connect_psns(200, 100);
    }

    /// Connect with A sending from `a_sq_psn` and B from `b_sq_psn`.
    pub fn connect_psns(&self, a_sq_psn: u32, b_sq_psn: u32) {
        let o = &self.opts;
        for s in [&self.a, &self.b] {
            modify(s, init_attr(o));
        }
        modify(
            &self.a,
            rtr_attr(o, self.b.qp.qpn(), self.b.dev.gid(), b_sq_psn),
        );
        modify(
            &self.b,
            rtr_attr(o, self.a.qp.qpn(), self.a.dev.gid(), a_sq_psn),
        );
        modify(&self.a, rts_attr(o, a_sq_psn));
        modify(&self.b, rts_attr(o, b_sq_psn));
    }

    /// Two devices with QPs created but not connected.
    pub fn unconnected(o: Opts) -> Pair {
        let fabric = Fabric::new();
        let cfg = |ip| {
            DeviceConfig::new(ip)
                .mtu(Mtu::Mtu4096)
                .atomic_endianness(o.atomic_endianness)
        };
        let da = fabric.add_device(cfg([10, 0, 0, 1]));
        let db = fabric.add_device(cfg([10, 0, 0, 2]));
        let a = side(&da, &o, None);
        let b = side(&db, &o, None);
        Pair {
            fabric,
            a,
            b,
            opts: o,
        }
    }

    pub fn run(&self) {
        self.fabric.run_until_idle();
    }

    pub fn mem(&self, side_b: bool, len: usize) -> Mem {
        let s = if side_b { &self.b } else { &self.a };
        Mem::new(
            &s.dev,
            s.pd,
            len,
            self.opts.access | AccessFlags::LOCAL_WRITE,
        )
    }

    pub fn assert_no_bugs(&self) {
        let bugs = self.fabric.driver_bugs();
        assert!(bugs.is_empty(), "driver bugs: {bugs:#?}");
        assert_eq!(
            self.fabric.malformed_frames(),
            0,
            "every frame encodes and parses"
        );
    }
}

/// The UD address vector of side `to`, with destination QPN and Q_Key set.
pub fn ud_av(from: &Side, to: &Side, qkey: u32) -> mlx5_wqe::AvSeg {
    let ah = from
        .dev
        .create_ah(
            from.pd,
            &AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: to.dev.gid(),
                    hop_limit: 64,
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .expect("create_ah");
    // SAFETY: AvSeg is plain old data of 48 bytes.
    let mut av: mlx5_wqe::AvSeg = unsafe { core::ptr::read_unaligned(ah.av.as_ptr() as *const _) };
    av.set_ud_dest(to.qp.qpn(), qkey);
    av
}
