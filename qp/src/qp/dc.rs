//! The lean DC post: an RDMA WRITE with inline data from a DCI to a DC target
//! ([`Qp::post_dc_write_inline`]), the shape a DC latency loop posts, with the checks, errors
//! and bytes of the generic path ([`Qp::post`], which dispatches to it for that shape) on the
//! lean path of the RC shapes (`lean.rs`): a gate of the send queue, the writer of
//! [`Qp::lean_writer`], [`Qp::lean_end`] and the same doorbell sequences. Its WQE is two
//! blocks: ctrl and the 48-byte address vector fill the first, the remote address and the
//! inline segment start the second (wrapped to the ring start when the first is the ring's
//! last; rdma-core qp.c `_mlx5_send_wr_rdma`, "In DC raddr_seg may overrun the SQ"). Anything
//! the gate does not cover takes the generic path.
//!
//! The RC lean gates stay closed on a DCI (an RC-shaped WQE there would lack its address
//! vector); this path has its own, `SendQueue::dc_fast` and `SendQueue::dc_other`, open on a
//! DCI only ([`Qp::update_dc_limits`]).

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
    /// Recompute the lean DC post's limit and open or close its gates (a DCI's state, limits
    /// or ring changed): open in the states the generic post takes (`Qp::check_send_state`)
    /// when payloads of [`LEAN_INLINE`] bytes keep its WQE within `wr_bbs` blocks and the
    /// QP's limits, as the RC gates are for their shapes.
    #[cold]
    #[inline(never)]
    pub(super) fn update_dc_limits(&mut self) {
        // ctrl + AV (one block), raddr + inline header + payload.
        let hdr = SEND_WQE_BB + DC_RADDR + 4;
        self.dc_inline = (self.max_inline as usize)
            .min((self.sq.wr_bbs() as usize * SEND_WQE_BB).saturating_sub(hdr))
            .min(self.max_wqe_bytes.saturating_sub(hdr));
        let postable = matches!(
            self.state,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Error
        ) && self.qp_type == QpType::Dci;
        self.sq
            .set_dc_open(postable && self.dc_inline >= LEAN_INLINE);
    }

    /// RDMA WRITE of `data` carried inline from this DCI to DC target `dest`, doorbell rung
    /// (BlueFlame when it fits): exactly `post(&SendWr::write(wr_id, remote).inline(data)
    /// .flags(flags).dc(dest))` — the same checks, errors, WQE, doorbell and completion — on
    /// the lean path: one comparison of the producer index with the send queue's DC gate
    /// (the QP's type, state, limits, a pending doorbell, the doorbell mode and the room for
    /// a WR and its blocks), one of the DCT number with its 24 bits, and for a payload of
    /// more than 12 bytes (the lean inline limit) one of its length. Falls back to the
    /// generic post for anything these do not cover (another QP type, state, a payload above
    /// the lean limit, a full queue), which returns the error.
    #[inline(always)]
    pub fn post_dc_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        dest: &DcDest,
        flags: SendFlags,
    ) -> Result<()> {
        if Self::inline_len_ok(data.len(), self.dc_inline) && dest.dctn() <= 0x00ff_ffff {
            if self.sq.lean_open(self.sq.dc_fast) {
                self.lean_dc_write_inline(wr_id, data, remote, dest, flags, LeanRing::BfPost);
                return Ok(());
            }
            if self.sq.lean_open(self.sq.dc_other) {
                self.lean_dc_write_inline(wr_id, data, remote, dest, flags, LeanRing::Any);
                return Ok(());
            }
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

    /// [`Qp::post_dc_write_inline`] past a shut gate: the gates refreshed (a lean retire
    /// does not move them, [`SendQueue::refresh_dc_gates`]) and the lean post tried again,
    /// else the generic post of the WR it stands for.
    #[cold]
    #[inline(never)]
    fn dc_slow(&mut self, w: &DcWr<'_>, r: &mut MaybeUninit<Result<()>>) {
        if Self::inline_len_ok(w.data.len(), self.dc_inline) && w.dest.dctn() <= 0x00ff_ffff {
            self.sq.refresh_dc_gates();
            for (gate, ring) in [
                (self.sq.dc_fast, LeanRing::BfPost),
                (self.sq.dc_other, LeanRing::Any),
            ] {
                if self.sq.lean_open(gate) {
                    self.lean_dc_write_inline(w.wr_id, w.data, w.remote, w.dest, w.flags, ring);
                    r.write(Ok(()));
                    return;
                }
            }
        }
        let wr = SendWr::write(w.wr_id, w.remote)
            .inline(w.data)
            .flags(w.flags)
            .dc(w.dest);
        r.write(self.post_planned(&wr));
    }

    /// The lean DC WRITE, once a DC gate let it through: the AV after the ctrl segment, then
    /// the RC WRITE's segments from the second block, and [`Qp::lean_end`] with the ctrl
    /// segment's words of the WRITE template (its DS count replaced) and of the target (its
    /// stream).
    #[inline(always)]
    fn lean_dc_write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        dest: &DcDest,
        flags: SendFlags,
        ring: LeanRing,
    ) {
        // ctrl + AV (one block, 4 DS), then raddr + inline header + payload.
        let (bbs, ds) = inline_shape(DC_RADDR, data.len());
        let (bbs, ds) = (bbs + 1, ds + 4);
        // First: the gate's value is at hand from the comparison that opened it.
        self.sq.dc_posted(ring == LeanRing::BfPost, bbs);
        let (slot, mut w) = self.lean_writer();
        // The second block: the ring's first when the first is its last.
        let b1 = self.sq.lean_next_block(slot);
        // SAFETY: the WQE's `bbs` blocks are free (the gate); the AV is the last 48 bytes of
        // the first block, then the second block `b1`: the raddr segment, the inline segment
        // 16 bytes into it.
        unsafe {
            w.put(*dest.av());
            w.wrap_to(b1);
            w.put(RaddrSeg::new(remote.addr, remote.rkey));
            w.put_inline(data);
        }
        let pi = self.sq.pi;
        let w0 = lean_w0(pi as u16, self.ctrl_write, WRITE_DS, ds);
        let w1 = dc_w1(dest, self.lean_fm(flags));
        self.lean_end(w, slot, wr_id, pi, (w0, w1), ds, bbs, Some(b1), ring);
    }
}
