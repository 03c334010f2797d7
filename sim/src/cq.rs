//! Completion queues: the CQE ring, the doorbell record, the arm doorbell and the completion
//! event.
//!
//! What a ConnectX does, and the sources:
//! - CQEs are 64 bytes, or 128 with the 64-byte CQE in the second half (rdma-core `cq.c`
//!   `get_cqe`); the buffer starts with every `op_own = 0xF0` (`mlx5_alloc_cq_buf`).
//! - The owner bit of the CQE written at producer index `pi` is the lap parity
//!   `(pi >> log2(cqe_cnt)) & 1`, and `op_own` is written last (rdma-core `get_sw_cqe`).
//! - `dbrec[0]` is the 24-bit consumer index (set_ci); a CQE that would land on an entry the
//!   consumer has not released is an overrun, unless the CQ was created with
//!   `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (`docs/sources.md` §10).
//!
//! CQ overrun. A program provokes it by giving a CQ fewer entries than the completions its
//! QPs have outstanding and polling too late; it is device behaviour with a defined report,
//! not a driver mistake, and is modelled as a ConnectX does it:
//! - The CQ enters its error state and the device raises the CQ error event once: IBTA Vol 1
//!   §11.6.3 (affiliated asynchronous errors: "CQ Error", caused by a CQ overrun or a CQ
//!   protection error; CQEs can no longer be written to the CQ); mlx5 reports it as an EQE of
//!   type `MLX5_EVENT_TYPE_CQ_ERROR` (kernel `drivers/net/ethernet/mellanox/mlx5/core/eq.c`
//!   `cq_err_event_notifier`: "CQ error on CQN ..."), which `mlx5_ib_cq_event`
//!   (`drivers/infiniband/hw/mlx5/cq.c`) passes on as `IB_EVENT_CQ_ERR`, and rdma-core as
//!   `IBV_EVENT_CQ_ERR` ("CQ is in error (CQ overrun)", `ibv_get_async_event(3)`); mlx5
//!   counts it in its `cq_overrun` debug counter ("number of times CQ entered an error state
//!   due to an overflow", kernel commit 3e94e61bd44d).
//! - The CQE that overran, and every later one, is not written; the CQEs already in the ring
//!   stay there and can still be polled (IBTA only says they may not be: the software
//!   ConnectX keeps them). No completion event fires any more.
//! - A QP whose work queue then has a completion for the CQ (the one that overran it
//!   included) cannot report it: IBTA's "Local Work Queue Catastrophic Error" (§11.6.3),
//!   `IBV_EVENT_QP_FATAL`, and the QP moves to Error (`crate::ctx::qp_cqe`). Its flush CQEs
//!   for the dead CQ are lost too; those for a healthy CQ (the other of its two) are written.
//!   A QP that completes nothing into the CQ stays as it is until it does.
//!
//! What a program sees, on a ConnectX and here alike: `IBV_EVENT_CQ_ERR` for the CQ, then
//! `IBV_EVENT_QP_FATAL` for each QP as it next completes into it, `ibv_query_qp` answering
//! `IBV_QPS_ERR`, and no completion at all for the WRs whose CQEs were lost: those it retires
//! itself (`mlx5_qp::Qp::flush_outstanding` for a QP in Error); `docs/troubleshooting.md`.
//! - Arming: `dbrec[1] = sn << 28 | cmd | ci`, then the same word and the CQN as a 64-bit write
//!   at UAR + 0x20 (rdma-core `mlx5_arm_cq`, kernel `mlx5_cq_arm`). `cmd` is `REQ_NOT` (0,
//!   any completion) or `REQ_NOT_SOL` (1 << 24); bits 31:30 and 27:25 are not used by either
//!   and a word with them set is reported ([`DriverBugKind::CqArmMismatch`]).
//! - Firing: an armed CQ raises one completion event on the next CQE, or for `REQ_NOT_SOL` on
//!   the next *solicited* CQE (a receive completion of a message with the SE bit) or *error*
//!   CQE (man ibv_req_notify_cq: "A CQE is solicited if it is a receive completion for a
//!   message with the Solicited Event header bit set, or if the status is not successful"),
//!   and is disarmed until armed again (one shot, same man page).
//! - Arming with CQEs already past the armed consumer index fires at once (the arm doorbell
//!   carries the consumer index for exactly this; ConnectX PRM "CQ arming"): that rule makes
//!   "poll, arm, poll again, then sleep" race-free. For `REQ_NOT_SOL` the software ConnectX
//!   fires at once only if one of those CQEs is solicited or an error (its own choice: the
//!   sources say nothing either way, and this is the stricter one, with no spurious event).
//! - Repeated arms before an event merge: a request for the next completion takes precedence
//!   over one for the next solicited completion (IBTA Vol. 1 §11.4.2.2 Request Completion
//!   Notification, for repeated requests before an event).
//! - The event goes to the CQ's completion channel ([`crate::notify::CompChannel`]); a CQ
//!   without one is still disarmed and the event is lost, as the kernel drops it
//!   (`ib_uverbs_comp_handler` with no event file).
//!
//! The arm sequence number. rdma-core and the kernel both send `arm_sn & 3` and advance
//! `arm_sn` once per completion event: the kernel when the event's EQE arrives
//! (`mlx5_eq_comp_int`), rdma-core when the program takes it (`ibv_get_cq_event` calls
//! `mlx5_cq_event`). How a ConnectX uses the number is not public, so the software ConnectX
//! does not act on it; it checks that the driver keeps it like rdma-core: the `sn` of an arm
//! must be the number of events taken from the CQ so far, modulo 4, or the arm is reported
//! ([`DriverBugKind::CqArmSequence`]) and then executed anyway. To compare against the count
//! at the time the arm was written, taking an event first lets the device see any arm
//! doorbell already written ([`Cq::scan_arm`] from `get_cq_event`): on a ConnectX the
//! doorbell arrives long before the program's next system call.
//!
//! rdma-core points every CQ at a shared UAR page (`cq_uar`); the software ConnectX gives each
//! CQ its own page, because it sees RAM and not a register: arm writes of two CQs to one page
//! between two steps would overwrite each other. The arm word is poisoned (CQN 0xffffffff)
//! after each read, like the BlueFlame halves.

use std::sync::Arc;

use mlx5_cq::{CQE_REQ_ERR, CQE_RESP_ERR, CQ_CI_MASK, CQ_DB_REQ_NOT_SOL, CQ_DOORBELL};

use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
use crate::notify::CompChannel;

/// Bits of the arm word that are neither the sequence number (29:28), the command (24) nor
/// the consumer index (23:0) (rdma-core `mlx5_arm_cq`, kernel `mlx5_cq_arm`).
const ARM_UNUSED_BITS: u32 = 0xc000_0000 | 0x0e00_0000;

/// The mark of an arm doorbell record (`dbrec[1]`, host order) a device took the arm from
/// (bit 31, one no arm sets): [`crate::cq_uar`] takes arms from the records of CQs that ring
/// on a shared page, and [`Cq::scan_arm`] compares a doorbell with the record without it.
pub const RECORD_TAKEN: u32 = 1 << 31;

/// The value the arm doorbell word is reset to after each write: it names CQN 0xffffffff,
/// which no CQ has, so a driver write always changes it.
const ARM_POISON: [u8; 8] = [0xff; 8];

/// What to put in one CQE (host-order values; see `mlx5_cq::Cqe64` for the layout).
#[derive(Clone, Copy, Debug, Default)]
pub struct CqeSpec {
    /// CQE opcode (`MLX5_CQE_*`).
    pub opcode: u8,
    /// Bytes transferred.
    pub byte_cnt: u32,
    /// Immediate, as the 4 network-order bytes.
    pub imm: [u8; 4],
    /// QPN of the QP the CQE belongs to.
    pub qpn: u32,
    /// Requester CQE: `MLX5_OPCODE_*` of the completed WQE (bits 31:24 of `sop_drop_qpn`).
    pub send_opcode: u8,
    /// WQE counter.
    pub wqe_counter: u16,
    /// `flags_rqpn`: source QPN (23:0) and flags.
    pub flags_rqpn: u32,
    /// SRQ number (responder on an SRQ).
    pub srqn: u32,
    /// Solicited event bit.
    pub se: bool,
    /// Error CQE: syndrome.
    pub syndrome: u8,
    /// Error CQE: vendor syndrome.
    pub vendor_syndrome: u8,
    /// Completion timestamp (raw device clock, CQE bytes 48–55; set by [`Cq::push_at`] on a
    /// CQ created with timestamps, 0 otherwise).
    pub timestamp: u64,
}

impl CqeSpec {
    /// Whether this is an error CQE.
    pub fn is_error(&self) -> bool {
        matches!(self.opcode, CQE_REQ_ERR | CQE_RESP_ERR)
    }

    /// The 64 bytes of the CQE with owner bit `owner`.
    pub fn encode(&self, owner: u8) -> [u8; 64] {
        let mut b = [0u8; 64];
        if self.is_error() {
            // struct mlx5_err_cqe
            b[32..36].copy_from_slice(&(self.srqn & 0x00ff_ffff).to_be_bytes());
            b[54] = self.vendor_syndrome;
            b[55] = self.syndrome;
        } else {
            b[24..28].copy_from_slice(&self.flags_rqpn.to_be_bytes());
            b[32..36].copy_from_slice(&(self.srqn & 0x00ff_ffff).to_be_bytes());
            b[36..40].copy_from_slice(&self.imm);
            b[44..48].copy_from_slice(&self.byte_cnt.to_be_bytes());
            // struct mlx5_cqe64.timestamp (rdma-core `mlx5_cq_read_wc_completion_ts`).
            b[48..56].copy_from_slice(&self.timestamp.to_be_bytes());
        }
        let sop = (self.send_opcode as u32) << 24 | (self.qpn & 0x00ff_ffff);
        b[56..60].copy_from_slice(&sop.to_be_bytes());
        b[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[63] = (self.opcode << 4) | ((self.se as u8) << 1) | (owner & 1);
        b
    }
}

/// An armed request for a completion event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arm {
    /// 2-bit sequence number.
    pub sn: u32,
    /// Only solicited (and error) completions fire.
    pub solicited: bool,
    /// Consumer index at arm time.
    pub ci: u32,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// CQE buffer.
    pub buf: DmaBuf,
    /// Doorbell record (set_ci at 0, arm at 4).
    pub dbrec: DmaBuf,
    /// UAR page of this CQ (arm doorbell at 0x20).
    pub uar: DmaBuf,
    /// Entries.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// Created with ignore-overrun.
    pub ignore_overrun: bool,
    /// Producer index (free running).
    pub pi: u32,
    /// The CQ overran and is in its error state: it takes no more CQEs.
    pub errored: bool,
    /// The device is in its fatal state: it writes no CQE any more and fires no event
    /// ([`CqeOutcome::DeviceDead`]).
    pub device_dead: bool,
    /// Pending arm request.
    pub arm: Option<Arm>,
    /// The completion channel the CQ reports to: its handle and the channel.
    pub channel: Option<(u32, Arc<CompChannel>)>,
    /// Completion events fired (whether or not a channel received them).
    pub events_fired: u64,
    /// Completion events the driver took from the channel (`get_cq_event`); the driver's arm
    /// sequence number must equal this modulo 4.
    pub events_taken: u32,
    /// Events taken and not yet acknowledged (`ack_cq_events`); destroying the CQ is refused
    /// until this is 0.
    pub events_unacked: u32,
    /// Producer index just past the newest solicited or error CQE (`None` before the first).
    pub solicited_pi: Option<u32>,
    /// QPs using this CQ.
    pub users: u32,
    /// Created with completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): good CQEs
    /// carry the device clock ([`device_clock`]).
    pub timestamps: bool,
    /// CQE version 1: the user indexes written into `srqn_uidx` instead of the SRQN
    /// ([`crate::uidx`]); `None` for version 0 (the project's own contexts).
    pub user_index: Option<crate::uidx::UserIndex>,
}

/// Frequency of the software ConnectX's HCA core clock, in kHz as `hca_core_clock` reports it
/// (156.25 MHz, 6.4 ns per tick: the software ConnectX's own choice, so that a driver that
/// takes ticks for nanoseconds or the kHz for Hz fails a test).
pub const CORE_CLOCK_KHZ: u64 = 156_250;

/// The free-running device clock at virtual time `now_ns`, in ticks of [`CORE_CLOCK_KHZ`]
/// (64 valid bits).
pub fn device_clock(now_ns: u64) -> u64 {
    (now_ns as u128 * CORE_CLOCK_KHZ as u128 / 1_000_000) as u64
}

/// What became of a CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeOutcome {
    /// Written.
    Written,
    /// Not written: the CQ overran now and entered its error state (the caller raises
    /// `IBV_EVENT_CQ_ERR`).
    Overrun,
    /// Not written: the CQ is in its error state since an earlier overrun.
    Dropped,
    /// Not written: the device is in its fatal state and writes nothing any more (a ConnectX
    /// in internal error writes no CQE: the kernel completes its own QPs' work in software,
    /// `drivers/infiniband/hw/mlx5/cq.c` `mlx5_ib_poll_cq` -> `mlx5_ib_poll_sw_comp` when
    /// `mdev->state == MLX5_DEVICE_STATE_INTERNAL_ERROR`, and rdma-core v44's libmlx5
    /// completes nothing for user QPs, `providers/mlx5/cq.c` `mlx5_poll_cq` reading the
    /// ring only). The QP is not failed for it: the device reports one event, its own.
    DeviceDead,
}

impl Cq {
    /// Create a CQ's memory: CQEs initialised with `op_own = 0xF0`, arm doorbell poisoned.
    pub fn new(
        cqn: u32,
        cqe_cnt: u32,
        cqe_size: u32,
        ignore_overrun: bool,
        channel: Option<(u32, Arc<CompChannel>)>,
    ) -> Option<Cq> {
        let buf = DmaBuf::new((cqe_cnt * cqe_size) as usize)?;
        for i in 0..cqe_cnt as usize {
            buf.write((i + 1) * cqe_size as usize - 1, &[0xf0]);
        }
        let dbrec = DmaBuf::new(8)?;
        let uar = DmaBuf::new(4096)?;
        uar.write(CQ_DOORBELL, &ARM_POISON);
        Some(Cq {
            cqn,
            buf,
            dbrec,
            uar,
            cqe_cnt,
            cqe_size,
            ignore_overrun,
            pi: 0,
            errored: false,
            device_dead: false,
            arm: None,
            channel,
            events_fired: 0,
            events_taken: 0,
            events_unacked: 0,
            solicited_pi: None,
            users: 0,
            timestamps: false,
            user_index: None,
        })
    }

    /// The consumer index the driver last published (`dbrec[0]`, 24 bits).
    pub fn consumer_index(&self) -> u32 {
        self.dbrec.read_be32(0) & CQ_CI_MASK
    }

    /// Write one CQE at virtual time `now_ns`: stamped with [`device_clock`] when the CQ was
    /// created with timestamps.
    pub fn push_at(&mut self, spec: &CqeSpec, now_ns: u64) -> CqeOutcome {
        if self.timestamps {
            let stamped = CqeSpec {
                timestamp: device_clock(now_ns),
                ..*spec
            };
            return self.push(&stamped);
        }
        self.push(spec)
    }

    /// Write one CQE.
    pub fn push(&mut self, spec: &CqeSpec) -> CqeOutcome {
        if self.device_dead {
            return CqeOutcome::DeviceDead;
        }
        if self.errored {
            return CqeOutcome::Dropped;
        }
        let used = self.pi.wrapping_sub(self.consumer_index()) & CQ_CI_MASK;
        if !self.ignore_overrun && used >= self.cqe_cnt {
            self.errored = true;
            return CqeOutcome::Overrun;
        }
        let slot = (self.pi & (self.cqe_cnt - 1)) as usize;
        let owner = ((self.pi & self.cqe_cnt) != 0) as u8;
        let bytes = match &self.user_index {
            Some(u) => CqeSpec {
                srqn: u.field(spec.qpn, spec.srqn),
                ..*spec
            }
            .encode(owner),
            None => spec.encode(owner),
        };
        let base = slot * self.cqe_size as usize + if self.cqe_size == 128 { 64 } else { 0 };
        if self.cqe_size == 128 {
            self.buf.fill(slot * 128, 64, 0);
        }
        // Everything but op_own first, then op_own: the entry becomes valid last.
        self.buf.write(base, &bytes[..63]);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.buf.write(base + 63, &bytes[63..]);
        self.pi = self.pi.wrapping_add(1);
        let solicited = spec.se || spec.is_error();
        if solicited {
            self.solicited_pi = Some(self.pi);
        }
        if let Some(arm) = self.arm {
            if !arm.solicited || solicited {
                self.fire();
            }
        }
        CqeOutcome::Written
    }

    /// Raise the completion event on the channel and disarm.
    fn fire(&mut self) {
        self.arm = None;
        self.events_fired += 1;
        if let Some((_, ch)) = &self.channel {
            ch.post(self.cqn);
        }
    }

    /// The handle of the completion channel the CQ reports to.
    pub fn channel_id(&self) -> Option<u32> {
        self.channel.as_ref().map(|(id, _)| *id)
    }

    /// Whether a CQE an arm at consumer index `ci` would fire for was already written: any
    /// CQE past `ci`, or for a solicited-only arm a solicited or error one.
    fn fires_at_once(&self, arm: &Arm) -> bool {
        let written = self.pi.wrapping_sub(arm.ci) & CQ_CI_MASK;
        if !arm.solicited {
            return written != 0;
        }
        self.solicited_pi.is_some_and(|s| {
            let d = s.wrapping_sub(arm.ci) & CQ_CI_MASK;
            d != 0 && d <= written
        })
    }

    /// Look at the arm doorbell in the UAR page; returns whether anything happened.
    pub fn scan_arm(&mut self, dev: &str, bugs: &mut BugLog) -> bool {
        // One atomic read-and-poison: a byte-wise read racing the driver's 64-bit store could see
        // half an arm (threaded mode) and leave the CQ armed for the wrong kind of completion.
        let Some(v) = self.uar.swap8(CQ_DOORBELL, ARM_POISON) else {
            return false;
        };
        if v == ARM_POISON {
            return false;
        }
        let word = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        let cqn = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
        if cqn != self.cqn {
            bugs.report(
                dev,
                self.cqn,
                DriverBugKind::CqArmMismatch,
                format!(
                    "arm doorbell at UAR+0x20 names CQN {cqn:#x}, this CQ is {:#x}; ignored",
                    self.cqn
                ),
            );
            return true;
        }
        // Without the device's mark of a record it took (`crate::cq_uar`).
        let rec = self.dbrec.read_be32(4) & !RECORD_TAKEN;
        if rec != word {
            bugs.report(dev, self.cqn, DriverBugKind::CqArmMismatch, format!(
                "arm doorbell word {word:#010x} differs from the arm doorbell record dbrec[1] = {rec:#010x}"));
        }
        if word & ARM_UNUSED_BITS != 0 {
            bugs.report(
                dev,
                self.cqn,
                DriverBugKind::CqArmMismatch,
                format!(
                    "arm doorbell word {word:#010x} sets bits {:#010x}, which are neither the \
                     sequence number (29:28), the command (24) nor the consumer index (23:0)",
                    word & ARM_UNUSED_BITS
                ),
            );
        }
        let new = Arm {
            sn: (word >> 28) & 3,
            solicited: word & CQ_DB_REQ_NOT_SOL != 0,
            ci: word & CQ_CI_MASK,
        };
        let expected = self.events_taken & 3;
        if new.sn != expected {
            bugs.report(
                dev,
                self.cqn,
                DriverBugKind::CqArmSequence,
                format!(
                    "arm doorbell with sequence number {} after {} completion event(s) were \
                     taken from this CQ (expected {expected}): the driver must advance its arm \
                     sequence number once per event taken (rdma-core mlx5_cq_event)",
                    new.sn, self.events_taken
                ),
            );
        }
        // A pending request for the next completion is not narrowed by a solicited-only one.
        let arm = match self.arm {
            Some(old) => Arm {
                solicited: old.solicited && new.solicited,
                ..new
            },
            None => new,
        };
        self.arm = Some(arm);
        if self.fires_at_once(&arm) {
            self.fire();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_cq::{Cqe64, CQE_REQ};

    #[test]
    fn owner_flips_per_lap_and_overrun_stops() {
        let mut cq = Cq::new(5, 4, 64, false, None).unwrap();
        assert_eq!(cq.buf.read8(56)[7], 0xf0);
        let spec = CqeSpec {
            opcode: CQE_REQ,
            qpn: 9,
            wqe_counter: 3,
            ..Default::default()
        };
        for _ in 0..4 {
            assert_eq!(cq.push(&spec), CqeOutcome::Written);
        }
        assert_eq!(cq.push(&spec), CqeOutcome::Overrun);
        assert!(cq.errored);
        let mut cq = Cq::new(5, 4, 128, false, None).unwrap();
        for i in 0..6u32 {
            cq.dbrec.write_be32(0, i);
            cq.push(&spec);
        }
        let mut b = [0u8; 64];
        cq.buf.read(64, &mut b);
        let c = Cqe64::from_bytes(&b);
        assert_eq!(c.owner(), 1, "second lap");
        assert_eq!(c.qpn(), 9);
        assert_eq!(c.wqe_counter(), 3);
    }
}
