//! A queue pair's device-side state: the memory handed to the driver (one buffer with the RQ
//! first and the SQ after it, the 8-byte doorbell record, a BlueFlame register: a dedicated
//! UAR page with the halves at 0x800/0x900, or a register shared with other QPs of the device,
//! [`crate::doorbell::shared`]), its attributes and state, and the transport state machines
//! (requester and responder).
//!
//! Layout sources: rdma-core `providers/mlx5/verbs.c` `mlx5_calc_wq_size` (RQ at offset 0, SQ
//! at the RQ size), `mlx5.c` `mlx5dv_get_qp` (`dbrec`, `bf.reg`, `bf.size`), `docs/sources.md` §5
//! (bfreg 0 of a UAR at 0x800, halves of 256 bytes), §3.4 (a thread domain gives the QP a
//! dedicated UAR).

use mlx5_hw::{QpAttr, QpState, QpType};

use std::sync::Arc;

use crate::bugs::{BugLog, DriverBugKind};
use crate::mem::DmaBuf;
use crate::sizing::QpGeometry;
use crate::srq::{read_scatter, Sge, Srq};

pub mod db;
pub mod dc;
pub mod path;
pub mod requester;
pub mod responder;

use db::{BfClass, DoorbellState, BF_HALF, BF_OFFSET};
use path::Path;
use requester::Requester;
use responder::Responder;

/// A receive WQE taken from an RQ or SRQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWqe {
    /// CQE `wqe_counter`: RQ WQE counter or SRQ WQE index.
    pub counter: u16,
    /// The SRQ it came from.
    pub srqn: Option<u32>,
    /// Scatter list.
    pub sges: Vec<Sge>,
}

/// Device-side QP.
#[derive(Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Transport type.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: u32,
    /// Send CQ number.
    pub send_cq: u32,
    /// Receive CQ number.
    pub recv_cq: u32,
    /// SRQ number.
    pub srq: Option<u32>,
    /// Created with `sq_sig_all`.
    pub sq_sig_all: bool,
    /// RQ + SQ buffer.
    pub buf: DmaBuf,
    /// Doorbell record: `dbrec[0]` RQ, `dbrec[1]` SQ.
    pub dbrec: DmaBuf,
    /// The UAR page of its BlueFlame register: its own, or one shared with other QPs.
    pub uar: Arc<DmaBuf>,
    /// Offset of its BlueFlame register in `uar` (0x800 on a page of its own).
    pub bf_off: usize,
    /// `bf.size`: 256, or 0 for a register without BlueFlame.
    pub bf_size: u32,
    /// Which register it is ([`crate::doorbell::shared`]).
    pub bf_class: BfClass,
    /// Geometry.
    pub geom: QpGeometry,
    /// Attributes as set by modify (and the current state).
    pub attr: QpAttr,
    /// Resolved primary path (RC/UC, from RTR).
    pub path: Option<Path>,
    /// Doorbell detection state.
    pub db: DoorbellState,
    /// Next SQ basic block the device fetches (16-bit counter, like the WQE index).
    pub sq_ci: u16,
    /// RQ WQEs consumed (16-bit counter, compared with `dbrec[0]`).
    pub rq_ci: u16,
    /// Requester state machine.
    pub req: Requester,
    /// Responder state machine.
    pub resp: Responder,
    /// SQD: an SQ-drained event is owed when the SQ empties.
    pub sqd_notify: bool,
    /// The last-WQE-reached event was raised (QP on an SRQ in Error).
    pub last_wqe_sent: bool,
    /// The communication-established event was raised in this stay in RTR.
    pub comm_est: bool,
    /// XRC target: its XRC domain ([`crate::transport::xrc`]).
    pub xrcd: Option<u32>,
    /// DC initiator or target: its own state ([`crate::transport::dc`]).
    pub dc: Option<dc::DcState>,
}

impl Qp {
    /// Create the QP's memory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        qpn: u32,
        qp_type: QpType,
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        srq: Option<u32>,
        sq_sig_all: bool,
        geom: QpGeometry,
    ) -> Option<Qp> {
        let buf = DmaBuf::new(geom.buf_size.max(64) as usize)?;
        let dbrec = DmaBuf::new(8)?;
        let uar = Arc::new(DmaBuf::new(4096)?);
        let attr = QpAttr {
            cap: geom.cap,
            ..Default::default()
        };
        let qp = Qp {
            qpn,
            qp_type,
            pd,
            send_cq,
            recv_cq,
            srq,
            sq_sig_all,
            buf,
            dbrec,
            uar,
            bf_off: BF_OFFSET,
            bf_size: BF_HALF as u32,
            bf_class: BfClass::Own,
            geom,
            attr,
            path: None,
            db: DoorbellState::default(),
            sq_ci: 0,
            rq_ci: 0,
            req: Requester::default(),
            resp: Responder::default(),
            sqd_notify: false,
            last_wqe_sent: false,
            comm_est: false,
            xrcd: None,
            dc: None,
        };
        qp.db.poison(&qp.uar);
        Some(qp)
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Address of the BlueFlame register.
    pub fn bf_reg(&self) -> *mut u8 {
        // The UAR page is 4096 bytes; every register's two halves fit inside it.
        self.uar.as_ptr().wrapping_add(self.bf_off)
    }

    /// Ring register `off` of the shared page `page` (`bf.size` `size`) instead of a page of
    /// its own.
    pub fn use_register(&mut self, class: BfClass, page: Arc<DmaBuf>, off: usize, size: u32) {
        self.uar = page;
        self.bf_off = off;
        self.bf_size = size;
        self.bf_class = class;
    }

    /// Whether other QPs ring its register too.
    pub fn bf_shared(&self) -> bool {
        matches!(self.bf_class, BfClass::Shared(_))
    }

    /// SQ doorbell record value (16 bits).
    pub fn sq_dbr(&self) -> u16 {
        self.dbrec.read_be32(4) as u16
    }

    /// RQ doorbell record value (16 bits).
    pub fn rq_dbr(&self) -> u16 {
        self.dbrec.read_be32(0) as u16
    }

    /// Offset of the SQ in the buffer.
    pub fn sq_off(&self) -> usize {
        self.geom.sq_offset as usize
    }

    /// Whether packets addressed to this QP are accepted (IBTA Vol 1 §10.3.1: RTR, RTS, SQD and
    /// SQE receive; Reset, Init and Error drop inbound packets).
    pub fn can_receive(&self) -> bool {
        matches!(
            self.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Back to the state of a fresh QP (modify to Reset): the kernel driver zeroes the doorbell
    /// record and the ring indexes (rdma-core `mlx5_modify_qp` → `mlx5_init_qp_indices`).
    pub fn reset_queues(&mut self) {
        self.dbrec.write_be32(0, 0);
        self.dbrec.write_be32(4, 0);
        self.sq_ci = 0;
        self.rq_ci = 0;
        self.db = DoorbellState::default();
        if !self.bf_shared() {
            // A shared register's halves belong to every QP on it; the device poisons them
            // as it reads them ([`crate::doorbell::shared`]).
            self.db.poison(&self.uar);
        }
        self.req = Requester::default();
        self.resp = Responder::default();
        self.path = None;
        if let Some(dci) = self.dc.as_mut().and_then(|s| s.dci()) {
            // A reset DCI starts unconnected; its target learns of it from the next connect.
            dci.conn = None;
        }
        self.sqd_notify = false;
        self.last_wqe_sent = false;
        self.comm_est = false;
    }

    /// RQ WQEs posted and not consumed (0 with a driver-bug report if the record is garbage).
    pub fn rq_available(&self, dev: &str, bugs: &mut BugLog) -> u32 {
        let n = self.rq_dbr().wrapping_sub(self.rq_ci) as u32;
        if n > self.geom.rq_wqe_cnt {
            bugs.report(
                dev,
                self.qpn,
                DriverBugKind::DbrOverflow,
                format!(
                    "RQ doorbell record {} is {n} WQEs ahead of the device; the RQ holds {}",
                    self.rq_dbr(),
                    self.geom.rq_wqe_cnt
                ),
            );
            return 0;
        }
        n
    }

    /// Take the next receive WQE from the RQ or the SRQ; `None` if none is posted.
    pub fn take_recv(
        &mut self,
        srq: Option<&mut Srq>,
        dev: &str,
        bugs: &mut BugLog,
    ) -> Option<RecvWqe> {
        if let Some(srq) = srq {
            if srq.available(dev, bugs) == 0 {
                return None;
            }
            let (idx, sges) = srq.take();
            return Some(RecvWqe {
                counter: idx,
                srqn: Some(srq.srqn),
                sges,
            });
        }
        if self.geom.rq_wqe_cnt == 0 || self.rq_available(dev, bugs) == 0 {
            return None;
        }
        let slot = (self.rq_ci as u32 & (self.geom.rq_wqe_cnt - 1)) * self.geom.rq_stride;
        let sges = read_scatter(&self.buf, slot as usize, self.geom.rq_stride / 16);
        let counter = self.rq_ci;
        self.rq_ci = self.rq_ci.wrapping_add(1);
        Some(RecvWqe {
            counter,
            srqn: None,
            sges,
        })
    }
}
