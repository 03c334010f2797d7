//! The plain libibverbs data path: `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`.
//!
//! This is what the direct path is measured against (perftest's `ib_write_lat` and friends use
//! the same calls), and the only data path on a device that is not mlx5 (Soft-RoCE). Posts and
//! polls allocate nothing and take no lock, except a UD send, which holds the device's table
//! lock so that its address handle cannot be destroyed mid-post.
//!
//! A QP or CQ has at most one baseline handle at a time ([`BaselineQp::new`] /
//! [`BaselineCq::new`] claim it), and the device refuses to destroy a claimed object, so the
//! raw pointers inside stay valid. Handles are `Send` (use them from any one thread) but not
//! `Sync`: QPs created on a thread domain have no lock in libmlx5 (rdma-core `mlx5_alloc_td`).

use std::ffi::{c_int, CStr};
use std::time::{Duration, Instant};

use super::device::VerbsDevice;
use super::ffi::{ibv, status_io_error, RdmaCore};
use crate::attr::QpType;
use crate::device::{AhId, CqId, QpId, SrqId};
use crate::error::{Error, Result};

/// Largest number of scatter/gather entries one baseline WR may carry (kept on the stack).
pub const MAX_SGE: usize = 16;

/// One scatter/gather entry (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address inside a registered region.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// What a send work request does (`enum ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`; the immediate in host order (converted to network order here).
    SendImm(u32),
    /// `IBV_WR_RDMA_WRITE`.
    Write {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    WriteImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate, host order.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ`.
    Read {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (8 bytes, 8-aligned remote address).
    CompareSwap {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value expected at the remote address.
        compare: u64,
        /// Value stored if it matches.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (8 bytes, 8-aligned remote address).
    FetchAdd {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
}

/// Destination of a UD send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Address handle of the remote port.
    pub ah: AhId,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`, one at a time).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Gather list (for READ and atomics: where the reply lands).
    pub sges: &'a [Sge],
    /// `IBV_SEND_SIGNALED`: ask for a completion.
    pub signaled: bool,
    /// `IBV_SEND_INLINE`: copy the payload into the WQE.
    pub inline: bool,
    /// `IBV_SEND_FENCE`: wait for earlier READs/atomics.
    pub fence: bool,
    /// `IBV_SEND_SOLICITED`: raise a solicited event at the receiver.
    pub solicited: bool,
    /// Destination, for UD QPs only.
    pub ud: Option<UdDest>,
    /// The remote XRC SRQ the request is for (`ibv_send_wr.qp_type.xrc.remote_srqn`), on XRC
    /// initiator (`IBV_QPT_XRC_SEND`) QPs only, where every request needs one (IBTA Vol. 1
    /// Annex A14.4.3, the XRCETH of every XRC request).
    pub xrc_srqn: Option<u32>,
}

impl<'a> SendWr<'a> {
    /// A signaled request with no special flags.
    pub fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            sges,
            signaled: true,
            inline: false,
            fence: false,
            solicited: false,
            ud: None,
            xrc_srqn: None,
        }
    }
}

fn sge_array(sges: &[Sge]) -> Result<([ibv::ibv_sge; MAX_SGE], c_int)> {
    if sges.len() > MAX_SGE {
        return Err(Error::InvalidArgument(format!(
            "{} scatter/gather entries, at most {MAX_SGE} per baseline work request",
            sges.len()
        )));
    }
    let mut a = [ibv::ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    }; MAX_SGE];
    for (d, s) in a.iter_mut().zip(sges) {
        *d = ibv::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok((a, sges.len() as c_int))
}

/// Posts on one QP through libibverbs.
pub struct BaselineQp<'d> {
    dev: &'d VerbsDevice,
    id: QpId,
    qp: *mut ibv::ibv_qp,
    qp_type: QpType,
}

// SAFETY: the QP may be driven from any thread, one at a time (`&mut self` for every post);
// the device keeps it alive while this handle exists (claim).
unsafe impl Send for BaselineQp<'_> {}

impl<'d> BaselineQp<'d> {
    /// Claims `qp` for the baseline data path.
    pub fn new(dev: &'d VerbsDevice, qp: QpId) -> Result<BaselineQp<'d>> {
        let (ptr, qp_type) = dev.claim_qp(qp)?;
        Ok(BaselineQp {
            dev,
            id: qp,
            qp: ptr,
            qp_type,
        })
    }

    /// Posts one send work request (`ibv_post_send`).
    pub fn post_send(&mut self, wr: &SendWr<'_>) -> Result<()> {
        let (mut sg, n) = sge_array(wr.sges)?;
        // SAFETY: all-zero is a valid `ibv_send_wr` (integers, NULL pointers, unions of those).
        let mut w: ibv::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.next = std::ptr::null_mut();
        w.sg_list = sg.as_mut_ptr();
        w.num_sge = n;
        let mut flags = 0u32;
        if wr.signaled {
            flags |= ibv::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if wr.inline {
            flags |= ibv::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        if wr.fence {
            flags |= ibv::ibv_send_flags::IBV_SEND_FENCE.0;
        }
        if wr.solicited {
            flags |= ibv::ibv_send_flags::IBV_SEND_SOLICITED.0;
        }
        w.send_flags = flags;
        use ibv::ibv_wr_opcode as op;
        match wr.op {
            SendOp::Send => w.opcode = op::IBV_WR_SEND,
            SendOp::SendImm(imm) => {
                w.opcode = op::IBV_WR_SEND_WITH_IMM;
                w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Write { remote_addr, rkey } => {
                w.opcode = op::IBV_WR_RDMA_WRITE;
                w.wr.rdma = ibv::rdma_t { remote_addr, rkey };
            }
            SendOp::WriteImm {
                remote_addr,
                rkey,
                imm,
            } => {
                w.opcode = op::IBV_WR_RDMA_WRITE_WITH_IMM;
                w.wr.rdma = ibv::rdma_t { remote_addr, rkey };
                w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Read { remote_addr, rkey } => {
                w.opcode = op::IBV_WR_RDMA_READ;
                w.wr.rdma = ibv::rdma_t { remote_addr, rkey };
            }
            SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                w.opcode = op::IBV_WR_ATOMIC_CMP_AND_SWP;
                w.wr.atomic = ibv::atomic_t {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                w.opcode = op::IBV_WR_ATOMIC_FETCH_AND_ADD;
                w.wr.atomic = ibv::atomic_t {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
        }
        match (self.qp_type, wr.xrc_srqn) {
            (QpType::XrcSend, Some(n)) if n <= 0x00ff_ffff => {
                w.qp_type.xrc = ibv::xrc_t { remote_srqn: n };
            }
            (QpType::XrcSend, Some(n)) => {
                return Err(Error::InvalidArgument(format!(
                    "remote XRC SRQ number {n:#x} is over 24 bits"
                )))
            }
            (QpType::XrcSend, None) => {
                return Err(Error::InvalidArgument(
                    "a send on an XRC initiator needs the remote XRC SRQ (SendWr::xrc_srqn)".into(),
                ))
            }
            (_, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "SendWr::xrc_srqn is only for XRC initiator QPs; QP {} is {}",
                    self.id.0, self.qp_type
                )))
            }
            (_, None) => {}
        }
        let mut bad: *mut ibv::ibv_send_wr = std::ptr::null_mut();
        let ret = match (self.qp_type, wr.ud) {
            (QpType::Ud, Some(d)) => self.dev.with_ah(d.ah, |ah| {
                w.wr.ud = ibv::ud_t {
                    ah,
                    remote_qpn: d.remote_qpn,
                    remote_qkey: d.remote_qkey,
                };
                // SAFETY: the QP is claimed (alive); `w`, `sg` and the AH (lock held) outlive
                // the call, which copies the request into the send queue.
                unsafe { ibv::ibv_post_send(self.qp, &mut w, &mut bad) }
            })?,
            (QpType::Ud, None) => {
                return Err(Error::InvalidArgument(
                    "a send on a UD QP needs a destination (SendWr::ud)".into(),
                ))
            }
            (_, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "SendWr::ud is only for UD QPs; QP {} is {}",
                    self.id.0, self.qp_type
                )))
            }
            // SAFETY: as above, without an AH.
            (_, None) => unsafe { ibv::ibv_post_send(self.qp, &mut w, &mut bad) },
        };
        if ret != 0 {
            return Err(Error::Verbs {
                call: "ibv_post_send",
                source: status_io_error(ret),
            });
        }
        Ok(())
    }

    /// Posts one receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<()> {
        let qp = self.qp;
        post_one_recv("ibv_post_recv", wr_id, sges, |w, bad| {
            // SAFETY: the QP is claimed (alive); `w` and its gather list outlive the call.
            unsafe { ibv::ibv_post_recv(qp, w, bad) }
        })
    }
}

impl Drop for BaselineQp<'_> {
    fn drop(&mut self) {
        self.dev.release_qp(self.id);
    }
}

/// Posts receives on one shared receive queue through libibverbs (`ibv_post_srq_recv`): an
/// SRQ of [`VerbsDevice::create_srq_verbs`], or an XRC SRQ.
pub struct BaselineSrq<'d> {
    dev: &'d VerbsDevice,
    id: SrqId,
    srq: *mut ibv::ibv_srq,
}

// SAFETY: the SRQ may be posted to from any thread, one at a time (`&mut self`); the device
// keeps it alive while this handle exists (claim).
unsafe impl Send for BaselineSrq<'_> {}

impl<'d> BaselineSrq<'d> {
    /// Claims `srq` for the baseline data path (the device refuses to destroy it meanwhile).
    pub fn new(dev: &'d VerbsDevice, srq: SrqId) -> Result<BaselineSrq<'d>> {
        let ptr = dev.claim_srq(srq)?;
        Ok(BaselineSrq {
            dev,
            id: srq,
            srq: ptr,
        })
    }

    /// Posts one receive work request (`ibv_post_srq_recv`, libibverbs `verbs.h`: the
    /// provider's `ops.post_srq_recv`, libmlx5 `mlx5_post_srq_recv`).
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<()> {
        let srq = self.srq;
        post_one_recv("ibv_post_srq_recv", wr_id, sges, |w, bad| {
            // SAFETY: the SRQ is claimed (alive); `w` and its gather list outlive the call.
            unsafe { ibv::ibv_post_srq_recv(srq, w, bad) }
        })
    }
}

/// One receive WR of `wr_id` and `sges` built as `struct ibv_recv_wr` and handed to `post`
/// (`ibv_post_recv` or `ibv_post_srq_recv`, named `call` in the error), its status mapped.
fn post_one_recv(
    call: &'static str,
    wr_id: u64,
    sges: &[Sge],
    post: impl FnOnce(&mut ibv::ibv_recv_wr, &mut *mut ibv::ibv_recv_wr) -> i32,
) -> Result<()> {
    let (mut sg, n) = sge_array(sges)?;
    let mut w = ibv::ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: sg.as_mut_ptr(),
        num_sge: n,
    };
    let mut bad: *mut ibv::ibv_recv_wr = std::ptr::null_mut();
    let ret = post(&mut w, &mut bad);
    if ret != 0 {
        return Err(Error::Verbs {
            call,
            source: status_io_error(ret),
        });
    }
    Ok(())
}

impl Drop for BaselineSrq<'_> {
    fn drop(&mut self) {
        self.dev.release_srq(self.id);
    }
}

/// One completion (`struct ibv_wc`, the fields a test or benchmark needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status` (0 = success).
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD receives).
    pub src_qp: u32,
    /// Immediate data, host order, when the completion carries one.
    pub imm: Option<u32>,
    /// Vendor error syndrome (error completions).
    pub vendor_err: u32,
}

impl Completion {
    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.status == ibv::ibv_wc_status::IBV_WC_SUCCESS
    }

    /// libibverbs' name of the status (`ibv_wc_status_str`: "success", "remote access error",
    /// ...). Without rdma-core (a completion built by hand on a host without it) the verbs.h
    /// name of the value (`IBV_WC_REM_ACCESS_ERR`), or its number.
    pub fn status_str(&self) -> String {
        let Ok(rdma) = RdmaCore::get() else {
            return ibv::ibv_wc_status::name(self.status)
                .map_or_else(|| format!("status {}", self.status), Into::into);
        };
        // SAFETY: returns a pointer to a static string for any value ("unknown" otherwise).
        let p = unsafe { rdma.ibv_wc_status_str(self.status) };
        if p.is_null() {
            return format!("status {}", self.status);
        }
        // SAFETY: static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The current completion of an extended poll batch, and its timestamp (0 for an error
/// completion, whose other fields but the vendor syndrome are undefined: man
/// ibv_create_cq_ex, "valid only if the status is IBV_WC_SUCCESS").
///
/// # Safety
/// `cq` is a live extended CQ created with `IBV_WC_STANDARD_FLAGS |
/// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, inside a batch with a current completion.
unsafe fn current_completion(cq: *mut ibv::ibv_cq_ex) -> (Completion, u64) {
    // SAFETY: the CQ is live and in a batch (caller); `status` and `wr_id` are the current
    // completion's.
    let (status, wr_id) = unsafe { ((*cq).status, (*cq).wr_id) };
    // SAFETY: as above; each reader reads the current completion (missing readers read 0).
    let vendor_err = unsafe { ibv::ibv_wc_read_vendor_err(cq) };
    let mut c = Completion {
        wr_id,
        status,
        vendor_err,
        // SAFETY: as above.
        qp_num: unsafe { ibv::ibv_wc_read_qp_num(cq) },
        ..Completion::default()
    };
    if status != ibv::ibv_wc_status::IBV_WC_SUCCESS {
        return (c, 0);
    }
    // SAFETY: as above, a successful completion.
    unsafe {
        c.opcode = ibv::ibv_wc_read_opcode(cq);
        c.byte_len = ibv::ibv_wc_read_byte_len(cq);
        c.src_qp = ibv::ibv_wc_read_src_qp(cq);
        let flags = ibv::ibv_wc_read_wc_flags(cq);
        if flags & ibv::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            c.imm = Some(u32::from_be(ibv::ibv_wc_read_imm_data(cq)));
        }
        (c, ibv::ibv_wc_read_completion_ts(cq))
    }
}

/// Completions per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

/// Polls one CQ through libibverbs.
pub struct BaselineCq<'d> {
    dev: &'d VerbsDevice,
    id: CqId,
    cq: *mut ibv::ibv_cq,
    wc: Box<[ibv::ibv_wc; POLL_BATCH]>,
    /// An `ibv_cq_ex` with the extended poll's readers (`IBV_WC_STANDARD_FLAGS`).
    extended: bool,
}

// SAFETY: the CQ may be polled from any thread, one at a time (`&mut self`); the device keeps
// it alive while this handle exists (claim).
unsafe impl Send for BaselineCq<'_> {}

impl<'d> BaselineCq<'d> {
    /// Claims `cq` for the baseline data path.
    pub fn new(dev: &'d VerbsDevice, cq: CqId) -> Result<BaselineCq<'d>> {
        let (ptr, extended) = dev.claim_cq(cq)?;
        // SAFETY: all-zero is a valid `ibv_wc` (integers and a union of integers).
        let wc = Box::new(unsafe { std::mem::zeroed::<[ibv::ibv_wc; POLL_BATCH]>() });
        Ok(BaselineCq {
            dev,
            id: cq,
            cq: ptr,
            wc,
            extended,
        })
    }

    /// Polls up to `min(out.len(), ts.len())` completions through the extended polling
    /// interface (`ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll`), writing each one's raw
    /// device clock (`ibv_wc_read_completion_ts`) to `ts` at the same index; error completions
    /// carry no timestamp and report 0, and so does every completion of a CQ without
    /// timestamps. For a CQ created with `VerbsDevice::create_cq_verbs_with_timestamps` or
    /// `create_cq_verbs_extended`; a plain one (no extended poll) is refused.
    pub fn poll_timestamped(&mut self, out: &mut [Completion], ts: &mut [u64]) -> Result<usize> {
        if !self.extended {
            return Err(Error::Unsupported(format!(
                "CQ {} was not created for the extended poll \
                 (VerbsDevice::create_cq_verbs_with_timestamps or create_cq_verbs_extended)",
                self.id.0
            )));
        }
        let max = out.len().min(ts.len());
        if max == 0 {
            return Ok(0);
        }
        let cq = self.cq.cast::<ibv::ibv_cq_ex>();
        // One completion per batch: `ibv_start_poll`, read, `ibv_end_poll`, never
        // `ibv_next_poll`. The man page has `ibv_end_poll` follow an `ibv_next_poll` that found
        // nothing (man ibv_create_cq_ex: "end_poll should still be called"), but Soft-RoCE's
        // `cq_next_poll` already ends the batch when the queue is empty (it stores the consumer
        // index and unlocks), so its `cq_end_poll` then steps past an entry not yet written:
        // the next completion reads all zero (seen in the VM). A batch of one is what the man
        // page allows on every provider.
        let mut n = 0;
        while n < max {
            // `struct ibv_poll_cq_attr` is one u32 comp_mask, 0 (verbs.h).
            let mut attr = 0u32;
            // SAFETY: the CQ is claimed (alive) and was created with `ibv_create_cq_ex` (so it
            // is an `ibv_cq_ex`, `ibv_cq_ex_to_cq` being a cast); `attr` is a valid attribute.
            let r = unsafe { ibv::ibv_start_poll(cq, (&mut attr as *mut u32).cast()) };
            if r == libc::ENOENT {
                break;
            }
            if r != 0 {
                if n > 0 {
                    break;
                }
                return Err(Error::Verbs {
                    call: "ibv_start_poll",
                    source: status_io_error(r),
                });
            }
            // SAFETY: inside the batch with a current completion (start_poll returned 0).
            let (c, stamp) = unsafe { current_completion(cq) };
            // SAFETY: the batch began with a successful `ibv_start_poll`.
            unsafe { ibv::ibv_end_poll(cq) };
            out[n] = c;
            ts[n] = stamp;
            n += 1;
        }
        Ok(n)
    }

    /// Polls up to `out.len()` completions (`ibv_poll_cq`); returns how many were written
    /// (also on a CQ created for the extended poll: libibverbs providers answer both).
    pub fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_BATCH);
            // SAFETY: the CQ is claimed (alive); `wc` has room for `want` entries.
            let n = unsafe { ibv::ibv_poll_cq(self.cq, want as c_int, self.wc.as_mut_ptr()) };
            if n < 0 {
                return Err(Error::Verbs {
                    call: "ibv_poll_cq",
                    source: status_io_error(n),
                });
            }
            let n = n as usize;
            for (o, w) in out[done..].iter_mut().zip(&self.wc[..n]) {
                let with_imm = w.wc_flags & ibv::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
                *o = Completion {
                    wr_id: w.wr_id,
                    status: w.status,
                    opcode: w.opcode,
                    byte_len: w.byte_len,
                    qp_num: w.qp_num,
                    src_qp: w.src_qp,
                    imm: with_imm.then(|| {
                        // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate (network
                        // order); both members are plain `u32`, so the read is of initialised
                        // memory either way.
                        let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
                        u32::from_be(imm)
                    }),
                    vendor_err: w.vendor_err,
                };
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Polls until `n` completions arrived or `timeout` passed; returns what arrived.
    ///
    /// A convenience for tests and examples: it allocates the result, and between empty polls
    /// yields the core for 50 µs, then sleeps with a backoff of 10 µs doubling to 1 ms (so a
    /// long wait costs little CPU, as `mlx5_ctx`'s waiting helpers do); latency loops call
    /// [`BaselineCq::poll`] directly.
    pub fn wait(&mut self, n: usize, timeout: Duration) -> Result<Vec<Completion>> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut got = vec![Completion::default(); n];
        let mut have = 0;
        let mut backoff = Duration::from_micros(10);
        while have < n {
            have += self.poll(&mut got[have..])?;
            if have < n {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                if now.duration_since(start) < Duration::from_micros(50) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(backoff.min(deadline - now));
                    backoff = (backoff * 2).min(Duration::from_millis(1));
                }
            }
        }
        got.truncate(have);
        Ok(got)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`).
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is claimed (alive).
        let ret = unsafe { ibv::ibv_req_notify_cq(self.cq, c_int::from(solicited_only)) };
        if ret != 0 {
            return Err(Error::Verbs {
                call: "ibv_req_notify_cq",
                source: status_io_error(ret),
            });
        }
        Ok(())
    }
}

impl Drop for BaselineCq<'_> {
    fn drop(&mut self) {
        self.dev.release_cq(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_sges_is_an_error_not_a_panic() {
        let s = [Sge {
            addr: 0,
            length: 1,
            lkey: 0,
        }; MAX_SGE + 1];
        let e = sge_array(&s)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("17") && e.contains("16"), "{e}");
        let Ok((a, n)) = sge_array(&s[..2]) else {
            panic!("two SGEs refused")
        };
        assert_eq!(n, 2);
        assert_eq!(a[1].length, 1);
    }

    #[test]
    fn status_strings_come_from_libibverbs() {
        let ok = Completion::default();
        assert!(ok.is_success());
        let e = Completion {
            status: ibv::ibv_wc_status::IBV_WC_REM_ACCESS_ERR,
            ..Default::default()
        };
        assert!(!e.is_success());
        let odd = Completion {
            status: 200,
            ..Default::default()
        };
        if RdmaCore::get().is_ok() {
            assert_eq!(ok.status_str(), "success");
            assert!(e.status_str().contains("access"), "{}", e.status_str());
        } else {
            // No rdma-core on this host: verbs.h's names.
            assert_eq!(ok.status_str(), "IBV_WC_SUCCESS");
            assert_eq!(e.status_str(), "IBV_WC_REM_ACCESS_ERR");
            assert_eq!(odd.status_str(), "status 200");
        }
    }
}
