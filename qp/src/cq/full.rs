//! The full path of [`Cq::poll`]: every CQE the fast loop (`fast.rs`) declines — an error,
//! inline scatter, an uncommon WQE, a QP the table does not know — read whole after its
//! owner test and handed to its queue ([`Cq::handle`]), CQE by CQE; runs of common CQEs
//! behind it go back to the run functions of `runs.rs`.

use super::*;

impl Cq {
    /// The rest of a [`Cq::poll`] call from its first uncommon CQE: `n` completions are in
    /// `wcs` already, `start` is the consumer index the call began at.
    /// Returns the completions written; an error (reported only as the first CQE of a call)
    /// goes to `error`.
    #[inline(never)]
    pub(super) fn poll_uncommon<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        mut n: usize,
        start: u32,
        error: &mut Option<Error>,
    ) -> usize {
        // Read once: the stores into `wcs` and the queues would make the compiler reload them.
        let (cqe0, cqe_cnt, size_shift) = (self.cqe0, self.cqe_cnt, self.size_shift);
        let mut err = None;
        while n < wcs.len() {
            let ci = self.ci;
            let idx = (ci & (cqe_cnt - 1)) as usize;
            // SAFETY: idx < cqe_cnt, so the 64-byte CQE (at +0 or +64 of its slot) is inside
            // the buffer.
            let cqe_ptr = unsafe { cqe0.add(idx << size_shift) };
            // SAFETY: op_own is the last byte of the CQE; volatile, the device writes it.
            let op_own = unsafe { core::ptr::read_volatile(cqe_ptr.add(63)) };
            // The common case in one test (UCX `uct_ib_mlx5_poll_cq` tests error, invalid
            // and compressed CQEs with one mask, `docs/sources.md` §8): opcode REQ (bits 7:4 = 0),
            // no inline scatter and not compressed (format, bits 3:2 = 0), owner bit (bit 0)
            // equal to the lap parity (rdma-core `get_sw_cqe`). SE (bit 1) is ignored.
            let parity = ((ci & cqe_cnt) != 0) as u8;
            if (op_own ^ parity) & 0xfd == 0 {
                mmio::from_device_barrier();
                // SAFETY: the CQE is software-owned; bytes 56..64 (sop_drop_qpn, wqe_counter,
                // signature, op_own) and 44..48 (byte_cnt) read after the barrier.
                // Whole-word volatile loads (8-byte aligned in a 64-byte aligned CQE), one
                // instruction each; the bytes are taken apart in registers.
                let (tail, byte_cnt) = unsafe {
                    (
                        core::ptr::read_volatile(cqe_ptr.add(56) as *const u64).to_ne_bytes(),
                        core::ptr::read_volatile(cqe_ptr.add(44) as *const u32).to_ne_bytes(),
                    )
                };
                let qpn = u32::from_be_bytes([0, tail[1], tail[2], tail[3]]);
                let wqe_counter = u16::from_be_bytes([tail[4], tail[5]]);
                if let Some(qp) = table.qp(qpn) {
                    if qp.complete_send_success(
                        wqe_counter,
                        tail[0],
                        qpn,
                        u32::from_be_bytes(byte_cnt),
                        &mut wcs[n],
                    ) {
                        #[cfg(test)]
                        paths::served(3, 1);
                        n += 1;
                        self.ci = ci.wrapping_add(1);
                        continue;
                    }
                }
            } else if !sw_owned(op_own, ci, cqe_cnt) {
                break;
            }
            match self.poll_uncommon_one(cqe_ptr, table, &mut wcs[n..], n == 0) {
                Ok(Consumed::Yes(k)) => {
                    #[cfg(test)]
                    paths::served(3, k);
                    n += k;
                    self.ci = self.ci.wrapping_add(1);
                }
                Ok(Consumed::NotYet(k)) => {
                    #[cfg(test)]
                    paths::served(3, k);
                    n += k;
                    break;
                }
                Err(e) => {
                    if n == 0 {
                        // A CQE the table cannot place (another QP's, an SRQ not in the
                        // table) stays in the CQ for a poll with a table that can; a receive
                        // out of order stays too: the next call delivers it.
                        if !e.leaves_cqe() {
                            self.ci = self.ci.wrapping_add(1);
                        }
                        err = Some(e);
                    }
                    break;
                }
            }
        }
        if self.ci != start {
            self.update_ci();
        }
        if let Some(e) = err {
            *error = Some(self.report(e));
        }
        n
    }

    /// [`Cq::poll_uncommon`] as a `Result`: the error it stashed, else the completions. Inline,
    /// so that the fast paths' callers see their own `Ok` in registers, not a result the
    /// out-of-line call wrote to memory.
    #[inline(always)]
    pub(super) fn poll_uncommon_from<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        n: usize,
        start: u32,
    ) -> Result<usize> {
        let mut error = None;
        let n = self.poll_uncommon(table, wcs, n, start, &mut error);
        match error {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// Log a CQE that was consumed without a completion (out of line: errors are rare).
    #[cold]
    #[inline(never)]
    pub(super) fn report(&self, e: Error) -> Error {
        tracing::warn!(cqn = self.cqn, error = %e, "CQE ignored");
        e
    }

    /// Every CQE the fast test in [`Cq::poll`] does not finish: read it whole (after the
    /// ownership test and its barrier) and hand it to its queue. A CQE naming no outstanding
    /// WQE comes back as [`Error::BadCqe`].
    #[inline(never)]
    pub(super) fn poll_uncommon_one<R: Resolve + ?Sized>(
        &mut self,
        cqe_ptr: *mut u8,
        table: &mut R,
        out: &mut [Wc],
        first: bool,
    ) -> Result<Consumed> {
        mmio::from_device_barrier();
        // SAFETY: the CQE is software-owned (checked by the caller); read all 64 bytes after
        // the barrier.
        let cqe = unsafe { read_line(cqe_ptr) };
        let cqe = Cqe64::from_bytes(&cqe);
        // SAFETY: the slot starts `cqe_off` bytes before its 64-byte CQE.
        let slot = unsafe { cqe_ptr.sub(self.cqe_off) };
        match self.handle(&cqe, slot, table, out, first)? {
            Progress::Done(k) => Ok(Consumed::Yes(k)),
            Progress::Partial(k) => Ok(Consumed::NotYet(k)),
            Progress::Bad(why) => Err(Error::BadCqe {
                cqn: self.cqn,
                qpn: cqe.qpn(),
                wqe_counter: cqe.wqe_counter(),
                why,
            }),
        }
    }

    /// Hand one software-owned CQE, read whole, to the queue it names in `table`: what a
    /// completion does to its QP is asked of the QP (`crate::qp::completion`).
    #[inline(always)]
    pub(super) fn handle<R: Resolve + ?Sized>(
        &mut self,
        cqe: &Cqe64,
        slot: *mut u8,
        table: &mut R,
        out: &mut [Wc],
        first: bool,
    ) -> Result<Progress> {
        let opcode = cqe.opcode();
        let format = cqe.format();
        let unsupported = || Error::UnsupportedCqe {
            cqn: self.cqn,
            opcode,
            name: cqe_opcode_name(opcode),
            format,
        };
        if format == CQE_FORMAT_COMPRESSED {
            return Err(unsupported());
        }
        let front: [u8; 64];
        let inline: Option<&[u8]> = match format {
            CQE_FORMAT_INLINE32 => Some(&cqe.as_bytes()[..32]),
            CQE_FORMAT_INLINE64 if self.cqe_size == 128 => {
                // SAFETY: the first half of a 128-byte slot, inside the buffer, read after the
                // ownership check and its barrier.
                front = unsafe { read_line(slot) };
                Some(&front[..])
            }
            _ => None,
        };
        let qpn = cqe.qpn();
        match opcode {
            CQE_REQ | CQE_REQ_ERR => {
                let (status, syndrome, vendor_err) = if opcode == CQE_REQ_ERR {
                    let e = cqe.as_err();
                    (
                        WcStatus::from_syndrome(e.syndrome),
                        e.syndrome,
                        e.vendor_err_synd,
                    )
                } else {
                    (WcStatus::Success, 0, 0)
                };
                let info = CqeInfo {
                    qpn,
                    send_opcode: cqe.send_opcode(),
                    status,
                    syndrome,
                    vendor_err,
                    byte_cnt: cqe.byte_cnt(),
                };
                let cqn = self.cqn;
                let qp = table.qp(qpn).ok_or(Error::UnknownQpn { cqn, qpn })?;
                // An error moves the QP out of RTS, but a late flush of an error period it
                // was recovered from does not move it back.
                if status != WcStatus::Success
                    && !qp.sq_error_of_recovered_period(cqe.wqe_counter())
                {
                    qp.follow_error_completion(true);
                }
                if let (Some(data), WcStatus::Success) = (inline, status) {
                    // Requester scatter-to-CQE: a READ or atomic reply (rdma-core `mlx5_parse_cqe`:
                    // `mlx5_copy_to_send_wqe` for a requester CQE with inline scatter).
                    let mut segs = [DataSeg::default(); 16];
                    let k = qp.reply_sges(cqe.wqe_counter(), &mut segs);
                    let len = (cqe.byte_cnt() as usize).min(data.len());
                    // SAFETY: the WQE is outstanding: its local segments are the caller's
                    // buffers, valid until this completion (post contract).
                    unsafe { crate::scatter::scatter(&data[..len], &segs[..k]) };
                }
                Ok(qp.complete_send(cqe.wqe_counter(), &info, out))
            }
            CQE_RESP_SEND | CQE_RESP_SEND_IMM | CQE_RESP_SEND_INV | CQE_RESP_WR_IMM
            | CQE_RESP_ERR => {
                let wc = if opcode == CQE_RESP_ERR {
                    let e = cqe.as_err();
                    Wc::new(&WcFields {
                        qp_num: qpn,
                        opcode: WcOpcode::Recv,
                        status: WcStatus::from_syndrome(e.syndrome),
                        syndrome: e.syndrome,
                        vendor_err: e.vendor_err_synd,
                        ..WcFields::default()
                    })
                } else {
                    Wc::responder(cqe)
                };
                let cqn = self.cqn;
                let Some(qp) = table.qp(qpn) else {
                    // An XRC target has no data path: its receives belong to the XRC SRQ.
                    return complete_on_srq(table, cqe, wc, inline, out, cqn);
                };
                match qp.srqn() {
                    None => {
                        if !wc.is_ok() {
                            qp.follow_error_completion(false);
                        }
                        qp.complete_recv(cqe.wqe_counter(), wc, inline, out, first)
                            .map_err(|expected| Error::RecvOutOfOrder {
                                cqn,
                                qpn,
                                wqe_counter: cqe.wqe_counter(),
                                expected,
                            })
                    }
                    Some(srqn) => {
                        // The SRQ first: a CQE it cannot place changes nothing (it stays in
                        // the CQ, `Cq::poll_uncommon`), not even the QP's state.
                        let srq = table.srq(srqn).ok_or(Error::UnknownSrqn { cqn, srqn })?;
                        let p = srq.complete(cqe.wqe_counter(), wc, inline, out);
                        if !wc.is_ok() {
                            if let Some(qp) = table.qp(qpn) {
                                qp.follow_error_completion(false);
                            }
                        }
                        Ok(p)
                    }
                }
            }
            _ => Err(unsupported()),
        }
    }
}

/// A responder CQE whose QPN is no QP of the table: the receive of an XRC target QP, found
/// by what the CQE carries for its XRC SRQ in `srqn_uidx` (the SRQN, or with CQE version 1 the
/// SRQ's user index, [`crate::Srq::cqe_index`]; rdma-core `get_resp_ctx_v1` / `get_srq_ctx`).
/// Neither known: [`Error::UnknownQpn`].
#[cold]
#[inline(never)]
pub(crate) fn complete_on_srq<R: Resolve + ?Sized>(
    table: &mut R,
    cqe: &Cqe64,
    wc: Wc,
    inline: Option<&[u8]>,
    out: &mut [Wc],
    cqn: u32,
) -> Result<Progress> {
    // A user index may be 0 (libmlx5 hands out the lowest free one, `mlx5_store_uidx`); no
    // SRQ number is, so a CQE of version 0 carrying 0 matches no SRQ.
    let (qpn, index) = (cqe.qpn(), cqe.srqn());
    match table.xrc_srq(index) {
        Some(srq) => Ok(srq.complete(cqe.wqe_counter(), wc, inline, out)),
        None => Err(Error::UnknownQpn { cqn, qpn }),
    }
}
