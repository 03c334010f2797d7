//! The post and poll paths as one function each, for reading their machine code on an
//! architecture this machine cannot run: `tests/it/mmio_fences.rs` (root crate) compiles this
//! program for aarch64 to assembly only (`--emit asm`, no linker needed) and checks that each
//! function holds its barriers (`dmb oshst` before the doorbell record, `dsb st` before and
//! after write-combining stores, DGH after a BlueFlame line, `dmb oshld` after a CQE's owner
//! byte; rdma-core `util/udma_barrier.h`). The names are unmangled so the assembly can be
//! searched for them. A library example: nothing to run.

use mlx5_qp::{Cq, Qp, SendWr, Sge, Wc};
use mlx5_ram_rings::{PAYLOAD, REMOTE};

/// An inline 8-byte RDMA WRITE, every doorbell mode inlined (BlueFlame with or without the
/// flush, the 8-byte doorbell).
#[no_mangle]
#[inline(never)]
pub fn fence_probe_post(qp: &mut Qp, wr_id: u64) -> bool {
    let wr = SendWr::write(wr_id, REMOTE).inline(&PAYLOAD).signaled();
    qp.post(&wr).is_ok()
}

/// A 1-SGE RDMA WRITE (the 8-byte doorbell when the QP has no BlueFlame).
#[no_mangle]
#[inline(never)]
pub fn fence_probe_post_sge(qp: &mut Qp, wr_id: u64) -> bool {
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 7,
    }];
    qp.post(&SendWr::write(wr_id, REMOTE).sges(&sge).signaled())
        .is_ok()
}

/// The general poll.
#[no_mangle]
#[inline(never)]
pub fn fence_probe_poll(cq: &mut Cq, qp: &mut Qp, wcs: &mut [Wc; 16]) -> usize {
    cq.poll(qp, wcs).unwrap_or(0)
}

/// The lean send-completion poll.
#[no_mangle]
#[inline(never)]
pub fn fence_probe_poll_send(cq: &mut Cq, qp: &mut Qp, ids: &mut [u64; 16]) -> usize {
    cq.poll_send(qp, ids, |_| {}).unwrap_or(0)
}
