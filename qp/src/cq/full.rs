//! The full path of [`Cq::poll`]: every CQE the fast loop ([`Cq::poll_batch`], the one-entry
//! [`Cq::poll_one`]) declines — an error, inline scatter, an uncommon WQE, a QP the table does
//! not know, a compressed CQE — read whole after its owner test and handed to its queue
//! ([`Cq::handle`]), CQE by CQE, to the end of the call. [`Cq::poll_timestamped`] is this loop
//! with the timestamps. A CQE of a QP the table does not know that a CQ tracking destroyed QPs
//! finds on its list ([`Cq::track_destroyed`]) is settled here too.

use super::*;

impl Cq {
    /// The rest of a [`Cq::poll`] call from its first uncommon CQE (or the whole of a
    /// [`Cq::poll_timestamped`] call): `n` completions are in `wcs` already, `start` is the
    /// consumer index the call began at; with `ts`, each completion's CQE timestamp goes to the
    /// same index of `ts` (at least as long as `wcs`). Returns the completions written, or
    /// [`SLOW_ERROR`] with the error in `error` (reported only as the first CQE of a call).
    #[inline(never)]
    pub(super) fn poll_uncommon<R: Resolve + ?Sized>(
        &mut self,
        table: &mut R,
        wcs: &mut [Wc],
        mut n: usize,
        start: u32,
        mut ts: Option<&mut [u64]>,
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
            if !sw_owned(op_own, ci, cqe_cnt) {
                break;
            }
            mmio::from_device_barrier();
            // The device clock of a good CQE (`struct mlx5_cqe64.timestamp`, bytes 48..56,
            // big-endian; rdma-core `mlx5_cq_read_wc_completion_ts`); an error CQE has none.
            let stamp = if ts.is_some() && !matches!(op_own >> 4, CQE_REQ_ERR | CQE_RESP_ERR) {
                // SAFETY: the CQE is software-owned; bytes 48..56 read after the barrier
                // (8-byte aligned in a 64-byte aligned CQE).
                u64::from_be(unsafe { core::ptr::read_volatile(cqe_ptr.add(48) as *const u64) })
            } else {
                0
            };
            let own = ((ci & cqe_cnt) != 0) as u8;
            if error_of_lap(op_own, own) && runs_on() {
                // An error CQE: when it is a flush of the oldest WQE of a queue the runs may
                // retire from (a queue's first flush among them), a run of one through
                // `flush_run` — the full path's completion, without reading the CQE whole.
                // SAFETY: the CQE is software-owned (its owner test passed); the barrier
                // is passed again.
                let (tail, qp) = unsafe { owned_cqe(table, cqe_ptr) };
                // SAFETY: a software-owned error CQE of this lap, `tail` its bytes 56..64;
                // one entry of `wcs`, and a run of one reads no other CQE, so the CQE size
                // (its `SHIFT`) does not matter to it.
                let k = qp.map_or(0, |qp| unsafe {
                    flush_run::<6>(qp, cqe_ptr, tail, op_own, 1, &mut wcs[n])
                });
                if k == 1 {
                    #[cfg(test)]
                    paths::served(2, 1);
                    if let Some(ts) = ts.as_deref_mut() {
                        ts[n] = 0;
                    }
                    n += 1;
                    self.ci = ci.wrapping_add(1);
                    continue;
                }
            }
            let got = if (op_own ^ own) & 0xfd == 0 {
                // The common case in one test (UCX `uct_ib_mlx5_poll_cq` tests error, invalid
                // and compressed CQEs with one mask, `docs/sources.md` §8): opcode REQ (bits
                // 7:4 = 0), no inline scatter and not compressed (format, bits 3:2 = 0), owner
                // bit (bit 0) equal to the lap parity (rdma-core `get_sw_cqe`). SE (bit 1) is
                // ignored. A success naming the oldest WQE is written straight from the CQE's
                // last bytes; anything else is read whole.
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
                let done = table.qp(qpn).is_some_and(|qp| {
                    let byte_cnt = u32::from_be_bytes(byte_cnt);
                    qp.send_queue().complete_success(
                        wqe_counter,
                        tail[0],
                        qpn,
                        byte_cnt,
                        &mut wcs[n],
                    )
                });
                if done {
                    Ok(Progress::Done(1))
                } else {
                    self.handle(cqe_ptr, table, &mut wcs[n..], n == 0)
                }
            } else {
                self.handle(cqe_ptr, table, &mut wcs[n..], n == 0)
            };
            let got = match got {
                Ok(Progress::Bad(why)) => {
                    // SAFETY: as above: the CQE's bytes 56..64, read after the barrier.
                    let tail = unsafe { core::ptr::read_volatile(cqe_ptr.add(56) as *const u64) };
                    let b = tail.to_ne_bytes();
                    Err(Error::BadCqe {
                        cqn: self.cqn,
                        qpn: u32::from_be_bytes([0, b[1], b[2], b[3]]),
                        wqe_counter: u16::from_be_bytes([b[4], b[5]]),
                        why,
                    })
                }
                r => r,
            };
            let k = match got {
                Ok(Progress::Done(k)) => {
                    self.ci = ci.wrapping_add(1);
                    k
                }
                // The output filled first: the CQE stays for the next poll.
                Ok(Progress::Partial(k)) => k,
                // Made an error above.
                Ok(Progress::Bad(_)) => 0,
                Err(e) => {
                    if n == 0 {
                        // A CQE the table cannot place (another QP's, an SRQ not in the
                        // table) stays in the CQ for a poll with a table that can; a receive
                        // out of order stays too: the next call delivers it. Anything else
                        // (one naming no outstanding WQE, an unsupported kind) is consumed.
                        if !e.leaves_cqe() {
                            self.ci = ci.wrapping_add(1);
                        }
                        err = Some(e);
                    }
                    break;
                }
            };
            #[cfg(test)]
            paths::served(3, k);
            if let Some(ts) = ts.as_deref_mut() {
                ts[n..n + k].fill(stamp);
            }
            n += k;
            if self.ci == ci {
                // The output filled first: the CQE stays for the next poll.
                break;
            }
        }
        if self.ci != start {
            self.update_ci();
        }
        match err {
            Some(e) => {
                self.error = Some(self.report(e));
                SLOW_ERROR
            }
            None => n,
        }
    }

    /// A count from an out-of-line path as the `Result` of a poll: the error it left in
    /// `error` for [`SLOW_ERROR`], else the completions.
    #[inline(always)]
    pub(super) fn result(&self, n: usize) -> Result<usize> {
        match n {
            SLOW_ERROR => Err(self.take_error()),
            n => Ok(n),
        }
    }

    /// Log a CQE that was consumed without a completion (out of line: errors are rare).
    #[cold]
    #[inline(never)]
    pub(super) fn report(&self, e: Error) -> Error {
        tracing::warn!(cqn = self.cqn, error = %e, "CQE ignored");
        e
    }

    /// One software-owned CQE the fast paths do not finish (`cqe_ptr` its 64-byte CQE, its
    /// owner test and the load barrier passed): read it whole and hand it to the queue it
    /// names in `table`. What a completion does to its QP is asked of the QP
    /// (`crate::qp::completion`).
    #[inline(never)]
    pub(super) fn handle<R: Resolve + ?Sized>(
        &mut self,
        cqe_ptr: *mut u8,
        table: &mut R,
        out: &mut [Wc],
        first: bool,
    ) -> Result<Progress> {
        // SAFETY: the CQE is software-owned (checked by the caller); all 64 bytes read after
        // the barrier.
        let bytes = unsafe { read_line(cqe_ptr) };
        let cqe = &Cqe64::from_bytes(&bytes);
        // SAFETY: the slot starts `cqe_off` bytes before its 64-byte CQE.
        let slot = unsafe { cqe_ptr.sub(self.cqe_off) };
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
                let Some(qp) = table.qp(qpn) else {
                    // A destroyed QP's send: its WR went with it.
                    return match self.destroyed_qp(qpn) {
                        Some(_) => Ok(self.consumed_stale(cqe)),
                        None => Err(Error::UnknownQpn { cqn, qpn }),
                    };
                };
                if let (Some(data), WcStatus::Success) = (inline, status) {
                    // Requester scatter-to-CQE: a READ or atomic reply (rdma-core `mlx5_parse_cqe`:
                    // `mlx5_copy_to_send_wqe` for a requester CQE with inline scatter).
                    let mut segs = [DataSeg::default(); 16];
                    let k = qp.send_queue().reply_sges(cqe.wqe_counter(), &mut segs);
                    let len = (cqe.byte_cnt() as usize).min(data.len());
                    // SAFETY: the WQE is outstanding: its local segments are the caller's
                    // buffers, valid until this completion (post contract).
                    unsafe { crate::scatter::scatter(&data[..len], &segs[..k]) };
                }
                // The QP follows an error there (`Qp::complete_send`).
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
                    return match complete_on_srq(table, cqe, wc, inline, out, cqn) {
                        Err(Error::UnknownQpn { .. }) => {
                            self.untabled_recv(table, cqe, wc, inline, out)
                        }
                        r => r,
                    };
                };
                match qp.srqn() {
                    None => {
                        // (An error moves the QP to Error there.)
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

impl Cq {
    /// A receive CQE naming a QP no table holds and whose `srqn_uidx` names no SRQ of the
    /// table: a DC target's ([`Cq::track_dc_targets`]) completes on its SRQ; a destroyed QP's
    /// ([`Cq::track_destroyed`]) completes on the SRQ it received through (the WR is the SRQ's,
    /// with the destroyed QP's number), or is consumed when it had a receive queue of its own
    /// (gone with it). Through an SRQ `table` does not hold: [`Error::UnknownSrqn`], left in
    /// the CQ; a QP neither list names: [`Error::UnknownQpn`].
    #[cold]
    #[inline(never)]
    fn untabled_recv<R: Resolve + ?Sized>(
        &self,
        table: &mut R,
        cqe: &Cqe64,
        wc: Wc,
        inline: Option<&[u8]>,
        out: &mut [Wc],
    ) -> Result<Progress> {
        let (cqn, qpn) = (self.cqn, cqe.qpn());
        let srqn = match self.dc_target_srq(qpn) {
            Some(srqn) => srqn,
            None => match self.destroyed_qp(qpn) {
                Some(DestroyedQp {
                    srqn: Some(srqn), ..
                }) => srqn,
                Some(_) => return Ok(self.consumed_stale(cqe)),
                None => return Err(Error::UnknownQpn { cqn, qpn }),
            },
        };
        let srq = table.srq(srqn).ok_or(Error::UnknownSrqn { cqn, srqn })?;
        Ok(srq.complete(cqe.wqe_counter(), wc, inline, out))
    }

    /// A destroyed QP's CQE consumed without a completion (its WR went with the QP).
    #[cold]
    #[inline(never)]
    fn consumed_stale(&self, cqe: &Cqe64) -> Progress {
        tracing::debug!(
            cqn = self.cqn,
            qpn = cqe.qpn(),
            opcode = cqe.opcode(),
            wqe_counter = cqe.wqe_counter(),
            "CQE of a destroyed QP consumed"
        );
        Progress::Done(0)
    }
}

/// Whether the full path may hand a flush to `flush_run`: always, but in the crate's unit
/// tests with the fast paths off (`paths::FAST_OFF`), whose full path is the reference.
#[inline(always)]
fn runs_on() -> bool {
    #[cfg(test)]
    return !paths::FAST_OFF.with(|f| f.get());
    #[cfg(not(test))]
    true
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
