//! Shared receive queues in the linked-list topology of verbs-created mlx5 SRQs.
//!
//! Layout (rdma-core `providers/mlx5/srq.c` `mlx5_alloc_srq_buf`, `mlx5_post_srq_recv`;
//! `docs/sources.md` §7): each WQE is a 16-byte next segment (`next_wqe_index` BE16 at byte 2)
//! followed by data segments; at creation WQE i links to i + 1 (the last back to 0), head = 0,
//! tail = the last WQE. The driver posts at its head and follows the link; the device mirrors
//! that: it consumes the WQE at its own head, reads the link to find the next one, and knows
//! how many WQEs were posted from the doorbell record (BE32, 16-bit count of WQEs ever posted).
//! The responder CQE's `wqe_counter` is the WQE index.

use mlx5_wqe::INVALID_LKEY;

use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
use crate::sizing::SrqGeometry;

/// One scatter entry of a receive WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// Parse up to `max` data segments at `off` in `buf`, stopping at the `MLX5_INVALID_LKEY`
/// terminator (rdma-core `mlx5_post_recv`).
pub fn read_scatter(buf: &DmaBuf, off: usize, max: u32) -> Vec<Sge> {
    let mut v = Vec::new();
    for i in 0..max as usize {
        let mut d = [0u8; 16];
        if !buf.read(off + i * 16, &mut d) {
            break;
        }
        let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let lkey = u32::from_be_bytes([d[4], d[5], d[6], d[7]]);
        if lkey == INVALID_LKEY {
            break;
        }
        let addr = u64::from_be_bytes([d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]]);
        v.push(Sge { addr, len, lkey });
    }
    v
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// SRQ number.
    pub srqn: u32,
    /// Protection domain.
    pub pd: u32,
    /// WQE buffer.
    pub buf: DmaBuf,
    /// Doorbell record.
    pub dbrec: DmaBuf,
    /// Geometry.
    pub geom: SrqGeometry,
    /// Index of the next WQE the device consumes.
    pub head: u16,
    /// WQEs consumed so far (16-bit, compared with the doorbell record).
    pub consumed: u16,
    /// Armed limit (0 = disarmed).
    pub limit: u32,
    /// QPs attached.
    pub users: u32,
    /// XRC SRQ: its XRC domain and the CQ its receive completions go to.
    pub xrc: Option<(u32, u32)>,
    /// A catastrophic error was injected ([`crate::faults::Faults::srq_error`]): the SRQ hands
    /// out no more WQEs.
    pub error: bool,
}

impl Srq {
    /// Create the SRQ's memory with the initial free list.
    pub fn new(srqn: u32, pd: u32, geom: SrqGeometry, limit: u32) -> Option<Srq> {
        let buf = DmaBuf::new((geom.wqe_cnt * geom.stride) as usize)?;
        for i in 0..geom.wqe_cnt {
            let next = ((i + 1) & (geom.wqe_cnt - 1)) as u16;
            buf.write((i * geom.stride) as usize + 2, &next.to_be_bytes());
        }
        let dbrec = DmaBuf::new(8)?;
        Some(Srq {
            srqn,
            pd,
            buf,
            dbrec,
            geom,
            head: 0,
            consumed: 0,
            limit,
            users: 0,
            xrc: None,
            error: false,
        })
    }

    /// WQEs posted and not yet consumed (none once the SRQ is in error: it hands out nothing,
    /// as rxe's `get_srq_wqe` answers RNR for an SRQ marked in error).
    pub fn available(&self, dev: &str, bugs: &mut BugLog) -> u32 {
        if self.error {
            return 0;
        }
        let posted = self.dbrec.read_be32(0) as u16;
        let n = posted.wrapping_sub(self.consumed) as u32;
        if n >= self.geom.wqe_cnt {
            bugs.report(
                dev,
                self.srqn,
                DriverBugKind::DbrOverflow,
                format!(
                "SRQ doorbell record {posted} is {n} WQEs ahead of the device, the SRQ holds {}",
                self.geom.wqe_cnt - 1),
            );
            return 0;
        }
        n
    }

    /// Take the next posted WQE: (index, scatter list). The caller checked `available`.
    pub fn take(&mut self) -> (u16, Vec<Sge>) {
        let idx = self.head & (self.geom.wqe_cnt as u16 - 1);
        let off = idx as usize * self.geom.stride as usize;
        let mut next = [0u8; 2];
        self.buf.read(off + 2, &mut next);
        self.head = u16::from_be_bytes(next) & (self.geom.wqe_cnt as u16 - 1);
        self.consumed = self.consumed.wrapping_add(1);
        (idx, read_scatter(&self.buf, off + 16, self.geom.max_sge))
    }
}
