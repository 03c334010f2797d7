//! Rings in ordinary memory standing in for a device: an aligned SQ/RQ buffer, doorbell
//! records, a RAM page for the UAR, a CQ buffer initialised as rdma-core leaves it, and a
//! CQE writer that plays the device's side of the ownership rule.
#![allow(dead_code)]

use mlx5_cq::{Cqe64, CQE_INITIAL_OP_OWN, U16, U32};
use mlx5_hw::{BfLayout, CqLayout, QpLayout, QpType, SrqLayout, WqLayout};
use mlx5_wqe::seg::SrqNextSeg;

/// A zeroed buffer of the software ConnectX's device memory (`mlx5_sim::mem::DmaBuf`): it
/// ends exactly at an inaccessible guard page, so a data path that reads or writes past a
/// ring or CQ buffer faults the test at once. 64-byte aligned, page-aligned when `len` is
/// whole pages (`align` above 64 asks for that; checked).
pub struct Mem {
    buf: mlx5_sim::mem::DmaBuf,
}

impl Mem {
    pub fn new(len: usize, align: usize) -> Mem {
        let buf = mlx5_sim::mem::DmaBuf::new(len.max(1)).unwrap();
        assert_eq!(
            buf.as_ptr() as usize % align.min(4096),
            0,
            "a {len}-byte buffer cannot be {align}-aligned and end at its guard page"
        );
        Mem { buf }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of live device memory.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), self.buf.len()) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes the slice unique on the test's side.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr(), self.buf.len()) }
    }
    pub fn be32(&self, off: usize) -> u32 {
        u32::from_be_bytes(self.bytes()[off..off + 4].try_into().unwrap())
    }
}

/// Offset of the QP's bfreg in the fake UAR page.
pub const BF_OFF: usize = 0x800;

/// A QP's memory.
pub struct FakeQp {
    pub sq: Mem,
    pub rq: Mem,
    pub dbrec: Mem,
    pub uar: Mem,
    pub layout: QpLayout,
}

pub struct QpCfg {
    pub qp_type: QpType,
    pub qpn: u32,
    pub sq_bbs: u32,
    pub rq_cnt: u32,
    pub rq_stride: u32,
    pub bf_size: u32,
    pub max_inline: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub sig_all: bool,
    pub uses_srq: bool,
    /// The layout's `bf.shared`.
    pub bf_shared: bool,
}

impl Default for QpCfg {
    fn default() -> Self {
        QpCfg {
            qp_type: QpType::Rc,
            qpn: 0x1234,
            sq_bbs: 16,
            rq_cnt: 8,
            rq_stride: 64,
            bf_size: 256,
            max_inline: 220,
            max_send_sge: 4,
            max_recv_sge: 4,
            sig_all: false,
            uses_srq: false,
            bf_shared: false,
        }
    }
}

impl FakeQp {
    pub fn new(c: &QpCfg) -> FakeQp {
        let sq = Mem::new(c.sq_bbs as usize * 64, 64);
        let rq = Mem::new((c.rq_cnt * c.rq_stride).max(64) as usize, 64);
        let dbrec = Mem::new(64, 64);
        let uar = Mem::new(4096, 4096);
        let layout = QpLayout {
            qpn: c.qpn,
            qp_type: c.qp_type,
            dbrec: dbrec.ptr() as *mut u32,
            sq: WqLayout {
                buf: sq.ptr(),
                wqe_cnt: c.sq_bbs,
                stride: 64,
            },
            rq: WqLayout {
                buf: rq.ptr(),
                wqe_cnt: if c.uses_srq { 0 } else { c.rq_cnt },
                stride: c.rq_stride,
            },
            bf: BfLayout {
                // SAFETY: `uar` is a 4 KiB allocation and BF_OFF (0x800) + 2 halves of 256 bytes
                // fit in it, so the offset pointer stays inside it.
                reg: unsafe { uar.ptr().add(BF_OFF) },
                size: c.bf_size,
                shared: c.bf_shared,
            },
            max_inline_data: c.max_inline,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            sq_sig_all: c.sig_all,
            uses_srq: c.uses_srq,
        };
        FakeQp {
            sq,
            rq,
            dbrec,
            uar,
            layout,
        }
    }
    /// SQ doorbell record (host order).
    pub fn sq_dbrec(&self) -> u32 {
        self.dbrec.be32(4)
    }
    /// RQ doorbell record.
    pub fn rq_dbrec(&self) -> u32 {
        self.dbrec.be32(0)
    }
    /// Bytes of basic block `i`.
    pub fn bb(&self, i: usize) -> &[u8] {
        &self.sq.bytes()[i * 64..i * 64 + 64]
    }
    /// What a one-block BlueFlame copy of block `i` writes: the block, except that a WQE of
    /// at most 3 DS pads the line with its bytes 32..48 (`mmio::bf_copy_bb_48`).
    pub fn bf_line(&self, i: usize) -> Vec<u8> {
        let b = self.bb(i);
        if b[7] & 0x3f <= 3 {
            [&b[..48], &b[32..48]].concat()
        } else {
            b.to_vec()
        }
    }
    /// The BF register region (both halves).
    pub fn bf(&self) -> &[u8] {
        &self.uar.bytes()[BF_OFF..BF_OFF + 512]
    }
    pub fn clear_bf(&mut self) {
        self.uar.bytes_mut()[BF_OFF..BF_OFF + 512].fill(0);
    }
    /// The WQE at producer index `pi` as the device reads it: `bbs` blocks, wrapping.
    pub fn wqe(&self, pi: u16, bbs: usize) -> Vec<u8> {
        let n = self.layout.sq.wqe_cnt as usize;
        (0..bbs)
            .flat_map(|k| self.bb((pi as usize + k) % n).to_vec())
            .collect()
    }
}

/// A CQ's memory and the device side of it.
pub struct FakeCq {
    pub buf: Mem,
    pub dbrec: Mem,
    pub uar: Mem,
    pub layout: CqLayout,
    /// Next CQE the "device" writes.
    pub hw_pi: u32,
}

impl FakeCq {
    pub fn new(cqe_cnt: u32, cqe_size: u32, ignore_overrun: bool) -> FakeCq {
        let mut buf = Mem::new((cqe_cnt * cqe_size) as usize, 64);
        for i in 0..cqe_cnt as usize {
            // rdma-core `mlx5_alloc_cq_buf`: every op_own = 0xF0.
            buf.bytes_mut()[i * cqe_size as usize + cqe_size as usize - 1] = CQE_INITIAL_OP_OWN;
        }
        let dbrec = Mem::new(64, 64);
        let uar = Mem::new(4096, 4096);
        let layout = CqLayout {
            buf: buf.ptr(),
            dbrec: dbrec.ptr() as *mut u32,
            cqe_cnt,
            cqe_size,
            cq_uar: uar.ptr(),
            cqn: 0x77,
            ignore_overrun,
        };
        FakeCq {
            buf,
            dbrec,
            uar,
            layout,
            hw_pi: 0,
        }
    }

    /// Write a CQE as the device does: every byte but `op_own` first, then `op_own` with the
    /// owner bit of the current lap. `front` fills the first half of a 128-byte slot.
    pub fn push_with(&mut self, cqe: Cqe64, front: Option<&[u8]>) {
        let size = self.layout.cqe_size as usize;
        let cnt = self.layout.cqe_cnt;
        let slot = (self.hw_pi & (cnt - 1)) as usize * size;
        let off = if size == 128 { 64 } else { 0 };
        let owner = ((self.hw_pi / cnt) & 1) as u8;
        let bytes = *cqe.as_bytes();
        let b = self.buf.bytes_mut();
        if let Some(f) = front {
            b[slot..slot + f.len()].copy_from_slice(f);
        }
        b[slot + off..slot + off + 63].copy_from_slice(&bytes[..63]);
        b[slot + off + 63] = (bytes[63] & 0xfe) | owner;
        self.hw_pi += 1;
    }
    pub fn push(&mut self, cqe: Cqe64) {
        self.push_with(cqe, None)
    }
    pub fn set_ci(&self) -> u32 {
        self.dbrec.be32(0)
    }
    pub fn arm_rec(&self) -> u32 {
        self.dbrec.be32(4)
    }
}

/// A requester success CQE.
pub fn req(qpn: u32, wqe_counter: u16, send_opcode: u8) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: U32::new((send_opcode as u32) << 24 | qpn),
        wqe_counter: U16::new(wqe_counter),
        op_own: mlx5_cq::CQE_REQ << 4,
        ..Cqe64::default()
    }
}

/// A requester CQE carrying a byte count (READ).
pub fn req_bytes(qpn: u32, wqe_counter: u16, send_opcode: u8, byte_cnt: u32) -> Cqe64 {
    let mut c = req(qpn, wqe_counter, send_opcode);
    c.byte_cnt = U32::new(byte_cnt);
    c
}

/// An error CQE (`opcode` REQ_ERR or RESP_ERR).
pub fn err(opcode: u8, qpn: u32, wqe_counter: u16, syndrome: u8, vendor: u8) -> Cqe64 {
    let mut b = [0u8; 64];
    b[54] = vendor;
    b[55] = syndrome;
    b[56..60].copy_from_slice(&qpn.to_be_bytes());
    b[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    b[63] = opcode << 4;
    Cqe64::from_bytes(&b)
}

/// A requester error CQE as the device writes it: the failing (or flushed) WQE's
/// `MLX5_OPCODE_*` in `s_wqe_opcode` (bits 31:24 of the word before the WQE counter, where UCX's
/// `uct_ib_mlx5_cqe_err_opcode` reads it), its `wqe_counter`, `syndrome` and `vendor` syndrome.
pub fn req_err(qpn: u32, wqe_counter: u16, send_opcode: u8, syndrome: u8, vendor: u8) -> Cqe64 {
    err(
        mlx5_cq::CQE_REQ_ERR,
        (send_opcode as u32) << 24 | qpn,
        wqe_counter,
        syndrome,
        vendor,
    )
}

/// A responder CQE.
pub fn resp(opcode: u8, qpn: u32, wqe_counter: u16, byte_cnt: u32, imm: u32) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: U32::new(qpn),
        wqe_counter: U16::new(wqe_counter),
        byte_cnt: U32::new(byte_cnt),
        imm_inval_pkey: U32::new(imm),
        op_own: opcode << 4,
        ..Cqe64::default()
    }
}

/// An SRQ's memory: `cnt` WQEs of `stride` bytes linked 0 → 1 → … → cnt-1.
pub struct FakeSrq {
    pub buf: Mem,
    pub dbrec: Mem,
    pub layout: SrqLayout,
}

impl FakeSrq {
    pub fn new(cnt: u32, stride: u32, srqn: u32) -> FakeSrq {
        let mut buf = Mem::new((cnt * stride) as usize, 64);
        for i in 0..cnt {
            let mut next = SrqNextSeg::default();
            next.set_next(((i + 1) % cnt) as u16);
            let off = (i * stride) as usize;
            // SAFETY: SrqNextSeg is 16 bytes of POD.
            let b: [u8; 16] = unsafe { std::mem::transmute(next) };
            buf.bytes_mut()[off..off + 16].copy_from_slice(&b);
        }
        let dbrec = Mem::new(64, 64);
        let layout = SrqLayout {
            buf: buf.ptr(),
            dbrec: dbrec.ptr() as *mut u32,
            stride,
            wqe_cnt: cnt,
            head: 0,
            tail: cnt - 1,
            srqn,
            cqe_index: srqn,
            max_sge: (stride - 16) / 16,
        };
        FakeSrq { buf, dbrec, layout }
    }
    pub fn next_of(&self, idx: u32) -> u16 {
        let off = (idx * self.layout.stride) as usize;
        u16::from_be_bytes(self.buf.bytes()[off + 2..off + 4].try_into().unwrap())
    }
    pub fn dbrec(&self) -> u32 {
        self.dbrec.be32(0)
    }
}
