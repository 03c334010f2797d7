//! The lean DC post: an RDMA WRITE with inline data from a DCI to a DC target
//! ([`Qp::post_dc_write_inline`]), the shape a DC latency loop posts, with the checks, errors
//! and bytes of the generic path ([`Qp::post`], which dispatches to it for that shape) in a
//! few comparisons. Its WQE is two blocks: ctrl and the 48-byte address vector fill the first,
//! the remote address and the inline segment start the second (wrapped to the ring start when
//! the first is the ring's last; rdma-core qp.c `_mlx5_send_wr_rdma`, "In DC raddr_seg may
//! overrun the SQ"). Anything the checks do not cover takes the generic path.
//!
//! The RC lean gates stay closed on a DCI (an RC-shaped WQE there would lack its address
//! vector); this path has its own checks instead ([`Qp::dc_lean_ok`]).

use super::*;
use crate::dc::DcDest;

/// Bytes before the inline segment of a lean DC WRITE, counted from its second block (the
/// raddr segment).
const DC_RADDR: usize = SEND_WQE_DS;

/// The ctrl segment's bytes 8..16 of a DCI WQE without immediate, as a native `u64` of their
/// memory order: the target's (signature 0, the stream BE16, immediate 0) with `fm_ce_se`.
#[inline(always)]
fn dc_w1(dest: &DcDest, fm: u8) -> u64 {
    dest.ctrl_w1() | u64::from_ne_bytes([0, 0, 0, fm, 0, 0, 0, 0])
}

/// The WR the lean DC post stands for, handed to its out-of-line fallback by reference (one
/// argument instead of six keeps the fast path's frame small).
struct DcWr<'a> {
    wr_id: u64,
    data: &'a [u8],
    remote: RemoteAddr,
    dest: &'a DcDest,
    flags: SendFlags,
}

impl Qp {
    /// Recompute the lean DC post's limits (a DCI's state, limits or ring changed): open in
    /// RTS and SQD, for payloads that keep its WQE within `wr_bbs` blocks and the QP's limits.
    #[cold]
    #[inline(never)]
    pub(super) fn update_dc_limits(&mut self) {
        // ctrl + AV (one block), raddr + inline header + payload.
        let hdr = SEND_WQE_BB + DC_RADDR + 4;
        self.dc_inline = (self.max_inline as usize)
            .min((self.sq.wr_bbs() as usize * SEND_WQE_BB).saturating_sub(hdr))
            .min(self.max_wqe_bytes.saturating_sub(hdr));
        let n = self.sq.ring.wqe_cnt();
        self.dc_blocks = if matches!(self.state, QpState::Rts | QpState::Sqd) {
            (n - self.sq.wr_bbs() + 1) as u64
        } else {
            0
        };
    }

    /// Whether the lean DC path may post `len` inline bytes to `dest`: a DCI in RTS or SQD
    /// with room for a WQE of the lean size (one comparison of the outstanding blocks with
    /// `dc_blocks`, 0 on any other QP), a free WR, nothing pending, the payload within the
    /// lean limit, a 24-bit DCT number.
    #[inline(always)]
    fn dc_lean_ok(&self, len: usize, dest: &DcDest) -> bool {
        (self.sq.pi - self.sq.ci < self.dc_blocks)
            & (self.sq.free_wrs() != 0)
            & (len <= self.dc_inline)
            & (dest.dctn() <= 0x00ff_ffff)
            & (self.sq.pending() == 0)
    }

    /// RDMA WRITE of `data` carried inline from this DCI to DC target `dest`, doorbell rung
    /// (BlueFlame): exactly `post(&SendWr::write(wr_id, remote).inline(data).flags(flags)
    /// .dc(dest))` — the same checks, errors, WQE, doorbell and completion — on a path
    /// specialised for it. Falls back to the generic post for anything its checks do not
    /// cover (another QP type, state or doorbell mode, a payload above the lean limit, a full
    /// queue), which returns the error.
    #[inline(always)]
    pub fn post_dc_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        dest: &DcDest,
        flags: SendFlags,
    ) -> Result<()> {
        // ctrl + AV, then raddr + inline header + payload.
        let (bbs, ds) = inline_shape(DC_RADDR, data.len());
        let (bbs, ds) = (bbs + 1, ds + 4);
        if self.dc_lean_ok(data.len(), dest) {
            self.lean_dc_write_inline(wr_id, data, remote, dest, flags, bbs, ds);
            return Ok(());
        }
        // The result comes back through a pointer, as for the RC lean paths
        // (`Qp::lean_generic`): the hot path keeps no `Result` on its stack.
        let mut r = MaybeUninit::uninit();
        let wr = DcWr {
            wr_id,
            data,
            remote,
            dest,
            flags,
        };
        self.dc_slow(&wr, &mut r);
        // SAFETY: `dc_slow` always writes `r`.
        unsafe { r.assume_init() }
    }

    /// The generic post of the WR [`Qp::post_dc_write_inline`] stands for.
    #[cold]
    #[inline(never)]
    fn dc_slow(&mut self, w: &DcWr<'_>, r: &mut MaybeUninit<Result<()>>) {
        let wr = SendWr::write(w.wr_id, w.remote)
            .inline(w.data)
            .flags(w.flags)
            .dc(w.dest);
        r.write(self.post_planned(&wr));
    }

    /// The lean DC WRITE, once [`Qp::dc_lean_ok`] let it through.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn lean_dc_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        dest: &DcDest,
        flags: SendFlags,
        bbs: u32,
        ds: u32,
    ) {
        let (slot, mut w) = self.lean_writer();
        // SAFETY: the WQE's `bbs` blocks are free (checked); the AV is the last 48 bytes of
        // the first block, then (wrapped to the ring start when that block was the ring's
        // last) the second block: the raddr segment, the inline segment 16 bytes into it.
        let b1 = unsafe {
            w.put(*dest.av());
            w.wrap();
            let b1 = w.cursor();
            w.put(RaddrSeg::new(remote.addr, remote.rkey));
            w.put_inline(data);
            b1
        };
        let pi = self.sq.pi;
        let w0 = lean_w0(pi as u16, self.ctrl_write, WRITE_DS, ds);
        let w1 = dc_w1(dest, self.lean_fm(flags));
        let ctrl = w.ctrl_ptr();
        // SAFETY: `w` was made by `WqeWriter::reserved` for the blocks checked above.
        unsafe { w.finish_words(w0, w1) };
        self.sq.commit_lean(pi, slot, wr_id, bbs);
        if bbs == 2 && self.sq.bf_post_2bb_ok() {
            self.sq.ring_bf_post_2bb(ctrl, b1, pi + 2);
        } else {
            self.sq.ring_one(ctrl, bbs);
        }
    }
}
