//! The poll's writers of a [`Wc`]: a completion from a CQE's bytes (16-byte copies of the
//! CQE's middle and tail, the WR id the queue gave back), used by every path of
//! [`crate::Cq::poll`]. The layout they write is [`Wc`]'s (`wc.rs`).

use super::*;

/// Copy 16 bytes from the software-owned CQE bytes at `src` (16-byte aligned, read after the
/// load barrier) to `dst`: one 16-byte load and one store on x86_64 (SSE2 is baseline).
///
/// # Safety
/// `src` is 16-byte aligned and names 16 readable bytes; `dst` names 16 writable bytes.
#[inline(always)]
unsafe fn copy16(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller's; volatile, as every read of the device-written ring.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::__m128i;
            let v = core::ptr::read_volatile(src as *const __m128i);
            core::ptr::write_unaligned(dst as *mut __m128i, v);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let a = core::ptr::read_volatile(src as *const u64);
            let b = core::ptr::read_volatile((src as *const u64).add(1));
            core::ptr::write_unaligned(dst as *mut u64, a);
            core::ptr::write_unaligned((dst as *mut u64).add(1), b);
        }
    }
}

impl Wc {
    /// The completion of a plain requester CQE (`op_own` opcode REQ): `wr_id`, the CQE's
    /// bytes 32..48 and `tail` (its bytes 56..64, as loaded). Three stores and a 16-byte load.
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc` and 8-byte aligned; `cqe` is a software-owned
    /// 64-byte CQE (64-byte aligned), read after the load barrier, and `tail` its bytes
    /// 56..64 read after it.
    #[inline(always)]
    pub(crate) unsafe fn write_req(out: *mut Wc, wr_id: u64, cqe: *const u8, tail: u64) {
        // SAFETY: the caller's.
        unsafe {
            Wc::write_wr_id(out, wr_id);
            Wc::write_req_cqe(out, cqe, tail);
        }
    }

    /// [`Wc::write_req`] but the WR id ([`Wc::write_wr_id`] completes it).
    ///
    /// # Safety
    /// As [`Wc::write_req`].
    #[inline(always)]
    pub(crate) unsafe fn write_req_cqe(out: *mut Wc, cqe: *const u8, tail: u64) {
        let o = out as *mut u8;
        // SAFETY: the caller's; every byte of a `Wc` is plain data (any value is a valid
        // `Wc`: the accessors decode whatever they find).
        unsafe {
            copy16(o.add(24), cqe.add(32));
            (o.add(40) as *mut u64).write(tail);
        }
    }

    /// Store the WR id of the completion at `out`.
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc` and 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn write_wr_id(out: *mut Wc, wr_id: u64) {
        // SAFETY: the caller's.
        unsafe { (out as *mut u64).write(wr_id) };
    }

    /// The completion of a plain responder CQE (a good RESP_* opcode): as [`Wc::write_req`],
    /// and CQE bytes 16..32 (the source QPN, SL, GRH flags, SLID and path bits).
    ///
    /// # Safety
    /// As [`Wc::write_req`].
    #[inline(always)]
    pub(crate) unsafe fn write_resp(out: *mut Wc, wr_id: u64, cqe: *const u8, tail: u64) {
        // SAFETY: the caller's.
        unsafe {
            copy16((out as *mut u8).add(8), cqe.add(16));
            Wc::write_req(out, wr_id, cqe, tail);
        }
    }

    /// [`Wc::write_resp`] but the WR id ([`Wc::write_wr_id`] completes it).
    ///
    /// # Safety
    /// As [`Wc::write_req`].
    #[inline(always)]
    pub(crate) unsafe fn write_resp_cqe(out: *mut Wc, cqe: *const u8, tail: u64) {
        // SAFETY: the caller's.
        unsafe {
            copy16((out as *mut u8).add(8), cqe.add(16));
            Wc::write_req_cqe(out, cqe, tail);
        }
    }

    /// The completion of an error CQE (`op_own` opcode REQ_ERR or RESP_ERR, format 0):
    /// `wr_id`, `err` (its bytes 48..56 as loaded: the syndromes, which make the status) and
    /// `tail` (its bytes 56..64). Three stores.
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc` and 8-byte aligned; `tail` has format 0.
    #[inline(always)]
    pub(crate) unsafe fn write_err(out: *mut Wc, wr_id: u64, err: u64, tail: u64) {
        let o = out as *mut u8;
        // SAFETY: the caller's; every byte of a `Wc` is plain data.
        unsafe {
            Wc::write_wr_id(out, wr_id);
            (o.add(32) as *mut u64).write(err);
            (o.add(40) as *mut u64).write(tail);
        }
    }

    /// The completion of a good responder CQE (`cqe`, any format: inline-scattered data is
    /// the caller's to copy), WR id not yet known ([`Wc::set_wr_id`]): what
    /// [`Wc::write_resp`] writes for it.
    pub(crate) fn responder(cqe: &mlx5_cq::Cqe64) -> Wc {
        let b = cqe.as_bytes();
        let mut wc = Wc {
            wr_id: 0,
            rx: [0; 16],
            mid: [0; 16],
            tail: [0; 8],
        };
        wc.rx.copy_from_slice(&b[16..32]);
        wc.mid.copy_from_slice(&b[32..48]);
        wc.tail.copy_from_slice(&b[56..64]);
        // The kind alone: format, solicited and owner bits are the CQ's business.
        wc.tail[7] = cqe.opcode() << 4;
        wc
    }

    /// Set the WR id.
    #[inline(always)]
    pub(crate) fn set_wr_id(&mut self, wr_id: u64) {
        self.wr_id = wr_id;
    }
}
