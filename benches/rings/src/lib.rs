//! Rings in ordinary memory standing in for a device (`docs/sources.md` §21): a 64-byte aligned
//! send ring, a doorbell record, a RAM page in place of the UAR (the BlueFlame register at
//! +0x800, as rdma-core's first bfreg), and a CQ buffer initialised as rdma-core leaves it
//! (`op_own = 0xF0`, `mlx5_alloc_cq_buf`). The caller plays the device: it writes requester
//! CQEs with the right owner bit so that [`Cq::poll`] sees valid completions and the send queue
//! gets its credits back.
//!
//! Shared by the criterion benchmarks (`benches/post_poll.rs`), the instruction-count program
//! (`benches/count_post_poll.rs`) and `benches/thread_scaling.rs`. Not published: a test
//! device, whose `unsafe` (building the data path over memory this crate owns) lives here so
//! that the programs using it need none.
// A test device's helpers: `len` without `is_empty`, constructors without `Default`.
#![allow(clippy::len_without_is_empty, clippy::new_without_default)]

use mlx5_cq::{Cqe64, CQE_INITIAL_OP_OWN, CQE_REQ, CQE_RESP_SEND, U16, U32};
use mlx5_hw::{mmio, BfLayout, CqLayout, QpLayout, QpState, QpType, WqLayout};
use mlx5_qp::{Cq, DoorbellMode, Qp, RemoteAddr, Wc};
use mlx5_wqe::opcode as op;
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Offset of the QP's BlueFlame register in the UAR page (rdma-core `MLX5_BF_OFFSET`).
pub const BF_OFF: usize = 0x800;

/// A zeroed, aligned heap buffer that lives as long as the rings built on it.
pub struct Mem {
    ptr: *mut u8,
    layout: Layout,
}

impl Mem {
    /// `len` zero bytes aligned to `align`.
    pub fn new(len: usize, align: usize) -> Mem {
        let layout = Layout::from_size_align(len.max(1), align).expect("valid layout");
        // SAFETY: the size is non-zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Mem { ptr, layout }
    }

    /// Base address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Shape of the QP under test.
#[derive(Clone, Copy, Debug)]
pub struct RigCfg {
    /// RC, UD or DCI.
    pub qp_type: QpType,
    /// Send ring size in 64-byte blocks.
    pub sq_bbs: u32,
    /// BlueFlame half size: 256 for the BlueFlame cases, 0 for the 8-byte doorbell.
    pub bf_size: u32,
    /// CQ entries.
    pub cqe_cnt: u32,
    /// The QP's doorbell mode, when not its default (`DoorbellMode::BfPost` with BlueFlame).
    pub doorbell: Option<DoorbellMode>,
    /// Receive ring size in WQEs (64-byte stride, 4 SGEs); 0 for no receive queue.
    pub rq_wqes: u32,
}

impl RigCfg {
    /// An RC QP with BlueFlame, a 1024-block send ring and a 1024-entry CQ.
    pub fn rc_bf() -> RigCfg {
        RigCfg {
            qp_type: QpType::Rc,
            sq_bbs: 1024,
            bf_size: 256,
            cqe_cnt: 1024,
            doorbell: None,
            rq_wqes: 0,
        }
    }
}

/// The payload of the inline cases.
pub const PAYLOAD: [u8; 8] = *b"8 bytes!";
/// The remote buffer every WR names.
pub const REMOTE: RemoteAddr = RemoteAddr::new(0x7f00_0000_1000, 0x0bad_cafe);

/// QPN of the QP under test.
pub const QPN: u32 = 0x1234;

/// The memory of one QP on RAM rings: send ring, receive ring (when asked for), doorbell
/// record and a UAR page. Drop it only after the `Qp` built on it.
pub struct QpRings {
    _sq: Mem,
    _rq: Mem,
    _dbrec: Mem,
    _uar: Mem,
}

impl QpRings {
    /// The send ring's first byte (`sq_bbs` × 64 bytes): for a test that reads back the WQEs
    /// the data path wrote (the conformance tests compare them with libmlx5's).
    pub fn sq(&self) -> *mut u8 {
        self._sq.ptr()
    }
}

/// Build a QP of `cfg`'s shape with number `qpn` on rings of its own, in RTS.
pub fn build_qp(cfg: &RigCfg, qpn: u32) -> (Qp, QpRings) {
    let sq = Mem::new(cfg.sq_bbs as usize * 64, 4096);
    let rq = Mem::new((cfg.rq_wqes as usize).max(1) * 64, 4096);
    let dbrec = Mem::new(64, 64);
    let uar = Mem::new(4096, 4096);
    let layout = QpLayout {
        qpn,
        qp_type: cfg.qp_type,
        dbrec: dbrec.ptr() as *mut u32,
        sq: WqLayout {
            buf: sq.ptr(),
            wqe_cnt: cfg.sq_bbs,
            stride: 64,
        },
        rq: WqLayout {
            buf: if cfg.rq_wqes == 0 {
                core::ptr::null_mut()
            } else {
                rq.ptr()
            },
            wqe_cnt: cfg.rq_wqes,
            stride: 64,
        },
        bf: BfLayout {
            // SAFETY: BF_OFF plus two 256-byte halves fit in the 4 KiB page.
            reg: unsafe { uar.ptr().add(BF_OFF) },
            size: cfg.bf_size,
            shared: false,
        },
        max_inline_data: 220,
        max_send_sge: 4,
        max_recv_sge: 4,
        sq_sig_all: false,
        uses_srq: false,
    };
    // SAFETY: every pointer in the layout names memory owned by the returned QpRings, which
    // the caller drops after the Qp; nothing else posts to these rings.
    let mut qp = unsafe { Qp::from_layout(&layout, None) }.expect("valid QP layout");
    qp.set_state(QpState::Rts);
    if let Some(mode) = cfg.doorbell {
        qp.set_doorbell_mode(mode)
            .expect("a doorbell mode the rig's QP supports");
    }
    (
        qp,
        QpRings {
            _sq: sq,
            _rq: rq,
            _dbrec: dbrec,
            _uar: uar,
        },
    )
}

/// A CQ on RAM rings with the caller as the device. Drop it only after the `Cq` built on it.
pub struct CqRings {
    cq_pi: u32,
    cqe_cnt: u32,
    cq_buf: Mem,
    _cq_dbrec: Mem,
    _cq_uar: Mem,
}

/// Build a CQ of `cqe_cnt` 64-byte entries on rings of its own.
pub fn build_cq(cqe_cnt: u32) -> (Cq, CqRings) {
    let cq_buf = Mem::new(cqe_cnt as usize * 64, 4096);
    for i in 0..cqe_cnt as usize {
        // SAFETY: the last byte of slot i is inside the buffer.
        unsafe { *cq_buf.ptr().add(i * 64 + 63) = CQE_INITIAL_OP_OWN };
    }
    let cq_dbrec = Mem::new(64, 64);
    let cq_uar = Mem::new(4096, 4096);
    let cq_layout = CqLayout {
        buf: cq_buf.ptr(),
        dbrec: cq_dbrec.ptr() as *mut u32,
        cqe_cnt,
        cqe_size: 64,
        cq_uar: cq_uar.ptr(),
        cqn: 0x77,
        ignore_overrun: false,
    };
    // SAFETY: the layout names memory owned by the returned CqRings, dropped after the Cq;
    // nothing else polls this CQ.
    let cq = unsafe { Cq::from_layout(&cq_layout) }.expect("valid CQ layout");
    (
        cq,
        CqRings {
            cq_pi: 0,
            cqe_cnt,
            cq_buf,
            _cq_dbrec: cq_dbrec,
            _cq_uar: cq_uar,
        },
    )
}

impl CqRings {
    /// Play the device: write `cqe` into the next CQ slot, every byte but `op_own` first,
    /// then `op_own` = `opcode << 4` with the lap's owner bit (rdma-core `get_sw_cqe`: owner
    /// = `!!(ci & cqe_cnt)`).
    pub fn push(&mut self, cqe: &Cqe64, opcode: u8) {
        let slot = (self.cq_pi & (self.cqe_cnt - 1)) as usize * 64;
        let owner = ((self.cq_pi & self.cqe_cnt) != 0) as u8;
        let bytes = cqe.as_bytes();
        // SAFETY: the slot is inside the CQ buffer; the Cq reads it only after op_own is valid.
        unsafe {
            let dst = self.cq_buf.ptr().add(slot);
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, 63);
            core::ptr::write_volatile(dst.add(63), (opcode << 4) | owner);
        }
        self.cq_pi = self.cq_pi.wrapping_add(1);
    }

    /// A requester success CQE of QP `qpn` naming the WQE at `wqe_counter`.
    pub fn push_req(&mut self, qpn: u32, wqe_counter: u16, send_opcode: u8) {
        let cqe = Cqe64 {
            sop_drop_qpn: U32::new((send_opcode as u32) << 24 | qpn),
            wqe_counter: U16::new(wqe_counter),
            ..Cqe64::default()
        };
        self.push(&cqe, CQE_REQ);
    }

    /// A requester flush error CQE of QP `qpn` naming the WQE at `wqe_counter`, of send opcode
    /// `send_opcode`: `struct mlx5_err_cqe` (mlx5dv.h) with syndrome `WR_FLUSH_ERR` (0x05) at
    /// byte 55, `s_wqe_opcode_qpn` at 56, `wqe_counter` at 60, opcode REQ_ERR — what a device
    /// writes for each outstanding WQE of a QP gone to Error.
    pub fn push_flush(&mut self, qpn: u32, wqe_counter: u16, send_opcode: u8) {
        let mut b = [0u8; 64];
        b[55] = mlx5_cq::SYNDROME_WR_FLUSH_ERR;
        b[56..60].copy_from_slice(&((send_opcode as u32) << 24 | qpn).to_be_bytes());
        b[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
        self.push(&Cqe64::from_bytes(&b), mlx5_cq::CQE_REQ_ERR);
    }

    /// A responder flush error CQE of QP `qpn` naming receive WQE `wqe_counter`: as
    /// [`CqRings::push_flush`], opcode RESP_ERR (no send opcode) — what a device writes for
    /// each outstanding receive of a QP gone to Error.
    pub fn push_recv_flush(&mut self, qpn: u32, wqe_counter: u16) {
        let mut b = [0u8; 64];
        b[55] = mlx5_cq::SYNDROME_WR_FLUSH_ERR;
        b[56..60].copy_from_slice(&qpn.to_be_bytes());
        b[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
        self.push(&Cqe64::from_bytes(&b), mlx5_cq::CQE_RESP_ERR);
    }

    /// A responder success CQE (a SEND of `byte_cnt` bytes from QP `src_qpn` arrived) of QP
    /// `qpn` naming receive WQE `wqe_counter`.
    pub fn push_recv(&mut self, qpn: u32, wqe_counter: u16, byte_cnt: u32, src_qpn: u32) {
        let cqe = Cqe64 {
            sop_drop_qpn: U32::new(qpn),
            wqe_counter: U16::new(wqe_counter),
            byte_cnt: U32::new(byte_cnt),
            flags_rqpn: U32::new(src_qpn & 0x00ff_ffff),
            ..Cqe64::default()
        };
        self.push(&cqe, CQE_RESP_SEND);
    }
}

/// A QP and a CQ on RAM rings, in RTS, with the caller as the device.
pub struct Rig {
    // Field order matters: the data-path objects drop before the memory they point into.
    /// The QP under test.
    pub qp: Qp,
    /// Its send CQ.
    pub cq: Cq,
    /// Producer index of the last WQE posted (what the next requester CQE names).
    pub last_pi: u16,
    wcs: Vec<Wc>,
    _qp_rings: QpRings,
    /// The CQ's memory and producer side.
    pub cqr: CqRings,
}

impl Rig {
    /// Allocate the rings and build the data-path objects.
    pub fn new(cfg: RigCfg) -> Rig {
        let (qp, qp_rings) = build_qp(&cfg, QPN);
        let (cq, cqr) = build_cq(cfg.cqe_cnt);
        Rig {
            qp,
            cq,
            last_pi: 0,
            wcs: vec![Wc::default(); 64],
            _qp_rings: qp_rings,
            cqr,
        }
    }

    /// Play the device: a requester success CQE of the rig's QP naming the WQE at
    /// `wqe_counter` ([`CqRings::push_req`]).
    pub fn push_req_cqe(&mut self, wqe_counter: u16, send_opcode: u8) {
        self.cqr.push_req(QPN, wqe_counter, send_opcode);
    }

    /// Retire everything outstanding on the send queue: one CQE naming the last WQE, polled.
    pub fn retire(&mut self, send_opcode: u8) {
        if self.qp.sq_outstanding_bbs() == 0 {
            return;
        }
        self.push_req_cqe(self.last_pi, send_opcode);
        loop {
            let n = self
                .cq
                .poll(&mut self.qp, &mut self.wcs)
                .expect("poll of a valid CQE");
            if n == 0 {
                break;
            }
        }
        assert_eq!(self.qp.sq_outstanding_bbs(), 0, "the CQE retired the ring");
    }
}

/// The floor: the stores a post cannot avoid, written with the same `mmio` primitives the data
/// path uses and nothing else — a 64-byte WQE from a template (its `wqe_index` patched), the
/// store barrier, the SQ doorbell record, WC start, a 64-byte BlueFlame copy, the flush, and
/// the half toggle (rdma-core `post_send_db`).
pub struct Floor {
    ring: Mem,
    dbrec: Mem,
    uar: Mem,
    pi: u16,
    bf_offset: usize,
    template: [u64; 8],
}

const FLOOR_BBS: u16 = 1024;

impl Floor {
    /// A ring, doorbell record and UAR page of their own, and the WQE template.
    pub fn new() -> Floor {
        // ctrl: opmod 0 | wqe_index | opcode WRITE ; qpn << 8 | ds 3 ; CE ; imm 0
        let mut wqe = [0u8; 64];
        wqe[3] = op::OPCODE_RDMA_WRITE;
        wqe[4..8].copy_from_slice(&(QPN << 8 | 3).to_be_bytes());
        wqe[11] = op::CTRL_CQ_UPDATE;
        wqe[16..24].copy_from_slice(&REMOTE.addr.to_be_bytes());
        wqe[24..28].copy_from_slice(&REMOTE.rkey.to_be_bytes());
        wqe[32..36].copy_from_slice(&(8u32 | 0x8000_0000).to_be_bytes());
        wqe[36..44].copy_from_slice(&PAYLOAD);
        let mut template = [0u64; 8];
        for (i, w) in template.iter_mut().enumerate() {
            *w = u64::from_ne_bytes(wqe[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        }
        Floor {
            ring: Mem::new(FLOOR_BBS as usize * 64, 4096),
            dbrec: Mem::new(64, 64),
            uar: Mem::new(4096, 4096),
            pi: 0,
            bf_offset: 0,
            template,
        }
    }

    /// One post's worth of stores.
    #[inline(always)]
    pub fn post(&mut self) {
        let slot = (self.pi & (FLOOR_BBS - 1)) as usize * 64;
        let mut w = self.template;
        // Bytes 1..=2 of the ctrl segment: the big-endian wqe_index.
        let idx = self.pi.to_be_bytes();
        let mut b0 = w[0].to_ne_bytes();
        b0[1] = idx[0];
        b0[2] = idx[1];
        w[0] = u64::from_ne_bytes(b0);
        self.pi = self.pi.wrapping_add(1);
        // SAFETY: the slot is one 64-byte block inside the ring; the doorbell record is the
        // second BE32 of a live 64-byte buffer; the BlueFlame half (offset 0 or 256 past
        // BF_OFF) lies inside the 4 KiB RAM page; the source block is inside the ring.
        unsafe {
            let dst = self.ring.ptr().add(slot);
            core::ptr::write(dst as *mut [u64; 8], w);
            mmio::to_device_barrier();
            mmio::write_dbrec((self.dbrec.ptr() as *mut u32).add(1), self.pi as u32);
            mmio::wc_start();
            let ring_end = self.ring.ptr().add(self.ring.len());
            mmio::bf_copy(
                self.uar.ptr().add(BF_OFF + self.bf_offset),
                dst,
                1,
                self.ring.ptr(),
                ring_end,
            );
            mmio::flush_writes();
        }
        self.bf_offset ^= 256;
    }
}
