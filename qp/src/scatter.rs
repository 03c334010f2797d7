//! Scatter-to-CQE: small messages (and small READ/atomic replies) the device wrote into the
//! CQE instead of the buffer, copied to where the WR said they go.
//!
//! Format 1 (`MLX5_INLINE_SCATTER_32`) puts up to 32 bytes at the start of the 64-byte CQE
//! descriptor (byte 0 of a 64-byte CQE, byte 64 of a 128-byte one); format 2
//! (`MLX5_INLINE_SCATTER_64`) up to 64 bytes in the first half of a 128-byte CQE (byte 0)
//! (rdma-core `providers/mlx5/cq.c` `handle_responder`, `mlx5_copy_to_recv_wqe`;
//! `docs/sources.md` §8). The same offsets hold for a requester's READ or atomic reply
//! (`mlx5_parse_cqe`, `mlx5_copy_to_send_wqe`) since rdma-core commit 45184d2c87ee ("mlx5: Fix
//! inline-scatter source address on 128B CQE REQ completions", 2026, v64.0); before it libmlx5
//! read a 128-byte CQE's format-1 reply 64 bytes early. `qp/tests/it/scatter_cqe.rs` pins
//! both sizes and formats.

use mlx5_wqe::seg::DataSeg;

/// Copy `data` into the buffers of `segs` in order (stopping at a terminator), as rdma-core's
/// `copy_to_scat` does. Returns the bytes copied.
///
/// # Safety
/// Every buffer named by `segs` up to the terminator must be writable memory: the caller of
/// the post that wrote these segments promised it stays valid until the WR completes.
pub(crate) unsafe fn scatter(data: &[u8], segs: &[DataSeg]) -> usize {
    let mut done = 0;
    for s in segs {
        if done == data.len() || s.is_terminator() {
            break;
        }
        let n = (s.byte_count() as usize).min(data.len() - done);
        // SAFETY: the buffer holds `byte_count` bytes (caller contract); n ≤ byte_count.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr().add(done), s.addr() as usize as *mut u8, n)
        };
        done += n;
    }
    done
}
