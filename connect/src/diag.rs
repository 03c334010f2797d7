//! Readable dumps for diagnosis (`docs/sources.md` §20): a QP (what `query_qp` reports, what
//! the data path holds), the device counters, and an error completion with its likely causes,
//! what to check and which counters to read. `docs/troubleshooting.md` is the long form of the
//! same table ([`advice`]).

use super::error::Result;
use super::session::QpRef;
use mlx5_cq::WcStatus;
use mlx5_hw::{Counter, Device, QpAttr, QpState, QpType};
use mlx5_qp::{Qp, Wc};
use std::fmt;

/// What to look at for one completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advice {
    /// What to check, in order.
    pub check: &'static str,
    /// The mlx5 `hw_counters` (and port counters) that move with this error, on this side
    /// (requester) or the peer's (responder) as noted in [`Advice::check`].
    pub counters: &'static [&'static str],
}

/// The checks and counters for a completion status. The causes are
/// [`WcStatus::causes`] (mlx5-cq); this adds what to verify and what to read.
pub fn advice(status: WcStatus) -> Advice {
    use WcStatus::*;
    let (check, counters): (&'static str, &'static [&'static str]) = match status {
        Success => ("nothing: the work request completed", &[]),
        LocLenErr => (
            "on a receive: the posted receive buffer is smaller than the incoming message (the \
             sender's SEND or WRITE-with-immediate length); on a send: SGE lengths, \
             max_inline_data and max_send_sge the QP was created with; UD: payload above the \
             path MTU",
            &["resp_local_length_error", "req_cqe_error", "resp_cqe_error"],
        ),
        LocQpOpErr => (
            "the opcode is legal for the QP type (UC: SEND/WRITE only, UD: SEND only), the WQE \
             is well formed (DS count, QPN in the ctrl segment, inline length), the QP was in \
             RTS when posted",
            &["req_cqe_error"],
        ),
        LocProtErr => (
            "the lkey belongs to a live MR in the QP's PD, every SGE lies inside its MR, and MRs \
             that are written locally (receive buffers, READ/atomic results) have LOCAL_WRITE",
            &["req_cqe_error", "resp_cqe_error"],
        ),
        WrFlushErr => (
            "not a cause: the QP is in Error (query_qp). Find the first completion that is not \
             a flush, the async events (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR), or whether the \
             peer tore the connection down; then rebuild",
            &["req_cqe_flush_error", "resp_cqe_flush_error"],
        ),
        MwBindErr => (
            "the memory window and its MR: MW_BIND access on the MR, the window inside the MR",
            &["req_cqe_error"],
        ),
        BadRespErr => (
            "the responder's reply did not fit the request: PSNs of both sides (sq_psn / \
             rq_psn crossed), a peer QP that was rebuilt without telling this side",
            &["packet_seq_err", "implied_nak_seq_err", "out_of_sequence"],
        ),
        LocAccessErr => (
            "the local buffer of a READ or atomic (its MR needs LOCAL_WRITE and must still be \
             registered)",
            &["req_cqe_error"],
        ),
        RemInvReqErr => (
            "the peer QP allows the operation: READ/atomic need max_dest_rd_atomic > 0 at the \
             peer and the matching access flag on its QP (IBV_QP_ACCESS_FLAGS at Init); a SEND \
             needs a posted receive large enough for the message; UC cannot serve READ/atomic",
            &[
                "req_remote_invalid_request",
                "resp_local_length_error (peer)",
            ],
        ),
        RemAccessErr => (
            "the remote address, length and rkey against the buffer the peer announced; the \
             peer's MR rights (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC) and its QP access \
             flags; atomics 8-byte aligned",
            &[
                "req_remote_access_errors",
                "resp_remote_access_errors (peer)",
            ],
        ),
        RemOpErr => (
            "the peer's side of the operation: its receive WQE (lkey, length, LOCAL_WRITE) and \
             its own error completion",
            &["req_cqe_error", "resp_cqe_error (peer)"],
        ),
        RetryExcErr => (
            "the peer QP exists and is in RTR or RTS (query it); dest_qp_num and the PSNs cross \
             (this sq_psn = peer rq_psn and back); the path: GID and gid_index (RoCE v1 vs v2), \
             LID, path MTU not above either port's; the link is up; timeout long enough for \
             the round trip (4.096 us x 2^timeout); packet loss on the fabric",
            &[
                "local_ack_timeout_err",
                "packet_seq_err",
                "implied_nak_seq_err",
                "out_of_sequence (peer)",
                "duplicate_request (peer)",
                "port_rcv_errors (peer)",
                "port_xmit_discards",
            ],
        ),
        RnrRetryExcErr => (
            "the peer posts receives before this side sends (the READY handshake), its RQ or \
             SRQ is deep enough for the burst, its min_rnr_timer and this side's rnr_retry \
             (7 = retry forever)",
            &["rnr_nak_retry_err", "out_of_buffer (peer)"],
        ),
        RemAbortErr => (
            "the peer aborted the operation (an ODP page fault on its SRQ, or its QP was \
             destroyed or reset during the transfer)",
            &["resp_cqe_error (peer)"],
        ),
        FatalErr | RespTimeoutErr | GeneralErr => (
            "the vendor syndrome, async events (device fatal, port error), the firmware log \
             (dmesg); read all counters",
            &["req_cqe_error", "resp_cqe_error"],
        ),
        LocEecOpErr | LocRddViolErr | RemInvRdReqErr | InvEecnErr | InvEecStateErr => (
            "reliable-datagram statuses: mlx5 does not implement RD; a CQE decoding error is \
             more likely than this status",
            &[],
        ),
        // A status a later version of mlx5-cq names (the enum is #[non_exhaustive]).
        _ => (
            "the status's name and the vendor syndrome in the CQE (wqe-dump cqe); read all \
             counters",
            &["req_cqe_error", "resp_cqe_error"],
        ),
    };
    Advice { check, counters }
}

/// What an mlx5 `hw_counters` or port counter counts (`None` for names this table does not
/// know). Meanings: NVIDIA "Understanding mlx5 Linux Counters and Status Parameters"; names:
/// Linux `drivers/infiniband/hw/mlx5/counters.c`.
pub fn counter_meaning(name: &str) -> Option<&'static str> {
    Some(match name {
        "out_of_sequence" => "responder: requests received out of PSN sequence (a lost packet)",
        "packet_seq_err" => "requester: NAKs received for a PSN sequence error",
        "local_ack_timeout_err" => "requester: the ACK timer expired (then a retransmission)",
        "rnr_nak_retry_err" => {
            "requester: RNR NAKs received (the peer had no receive posted), retried within rnr_retry"
        }
        "duplicate_request" => "responder: duplicate requests received (retransmissions)",
        "implied_nak_seq_err" => {
            "requester: a READ/atomic response with a later PSN implied lost responses"
        }
        "out_of_buffer" => "responder: no receive WQE when a SEND arrived (RNR NAK sent, or UD drop)",
        "req_remote_access_errors" => "requester: remote access errors (NAK) received",
        "req_remote_invalid_request" => "requester: remote invalid request errors (NAK) received",
        "resp_remote_access_errors" => "responder: requests refused for an access violation",
        "resp_local_length_error" => "responder: a message longer than the receive buffer",
        "req_cqe_error" => "requester: error completions",
        "resp_cqe_error" => "responder: error completions",
        "req_cqe_flush_error" => "requester: completions flushed by a QP in Error",
        "resp_cqe_flush_error" => "responder: completions flushed by a QP in Error",
        "rx_write_requests" => "responder: RDMA WRITE requests received",
        "rx_read_requests" => "responder: RDMA READ requests received",
        "rx_atomic_requests" => "responder: atomic requests received",
        "port_rcv_errors" => "port: packets received with errors (bad headers, wrong QPN, P_Key)",
        "port_xmit_discards" => "port: outbound packets discarded (link down, congestion)",
        "port_rcv_packets" => "port: packets received",
        "port_xmit_packets" => "port: packets transmitted",
        _ => return None,
    })
}

/// Counters that only grow when something went wrong.
fn is_error_counter(name: &str) -> bool {
    !matches!(
        name,
        "rx_write_requests"
            | "rx_read_requests"
            | "rx_atomic_requests"
            | "port_rcv_packets"
            | "port_xmit_packets"
            | "port_rcv_data"
            | "port_xmit_data"
    ) && counter_meaning(name).is_some()
}

/// A completion, formatted for a log or a terminal: status, causes, syndrome, the failing WR
/// and what to check.
#[derive(Clone, Copy, Debug)]
pub struct WcReport<'a>(pub &'a Wc);

impl fmt::Display for WcReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.0;
        if w.is_ok() {
            return write!(
                f,
                "completion {} wr_id {:#x} opcode {} qp {:#x} byte_len {}",
                w.status().name(),
                w.wr_id(),
                w.opcode().name(),
                w.qp_num(),
                w.byte_len()
            );
        }
        writeln!(
            f,
            "error completion {} (status {})",
            w.status().name(),
            w.status() as u8
        )?;
        writeln!(f, "  wr_id     {:#x}", w.wr_id())?;
        writeln!(f, "  opcode    {}", w.opcode().name())?;
        writeln!(f, "  qp        {:#x}", w.qp_num())?;
        writeln!(
            f,
            "  syndrome  {:#04x} {}, vendor syndrome {:#04x}",
            w.syndrome(),
            mlx5_cq::syndrome_name(w.syndrome()),
            w.vendor_err()
        )?;
        writeln!(f, "  causes    {}", w.status().causes())?;
        let a = advice(w.status());
        write!(f, "  check     {}", a.check)?;
        if !a.counters.is_empty() {
            write!(f, "\n  counters  {}", a.counters.join(", "))?;
        }
        Ok(())
    }
}

/// What the data path holds for a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingState {
    /// The state the data path was last told.
    pub state: QpState,
    /// Next send producer index.
    pub sq_pi: u16,
    /// Send-queue basic blocks posted and not retired.
    pub sq_outstanding_bbs: u32,
    /// Free send-queue basic blocks.
    pub sq_free_bbs: u32,
    /// Receive WRs posted and not completed.
    pub rq_outstanding: u32,
    /// The BlueFlame half the next doorbell uses.
    pub bf_offset: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl RingState {
    /// The data path's view of `qp`.
    pub fn of(qp: &Qp) -> RingState {
        RingState {
            state: qp.state(),
            sq_pi: qp.sq_pi(),
            sq_outstanding_bbs: qp.sq_outstanding_bbs(),
            sq_free_bbs: qp.sq_free_bbs(),
            rq_outstanding: qp.rq_outstanding(),
            bf_offset: qp.bf_offset(),
            max_inline_data: qp.max_inline_data(),
        }
    }
}

/// A QP as the device reports it, and as the data path holds it.
#[derive(Clone, Debug)]
pub struct QpReport {
    /// The QP.
    pub qp: QpRef,
    /// `query_qp`'s answer.
    pub attr: QpAttr,
    /// The data path, if given.
    pub ring: Option<RingState>,
}

/// Queries `qp` and builds its report; `data` adds the ring indices.
pub fn qp_report(dev: &dyn Device, qp: &QpRef, data: Option<&Qp>) -> Result<QpReport> {
    Ok(QpReport {
        qp: *qp,
        attr: dev.query_qp(qp.id)?,
        ring: data.map(RingState::of),
    })
}

/// The local ACK timeout in milliseconds (4.096 µs × 2^timeout; `None` = wait forever for 0;
/// IBTA vol. 1 §9.7.6.1.3, `ibv_modify_qp(3)`).
pub fn ack_timeout_ms(timeout: u8) -> Option<f64> {
    (timeout != 0).then(|| 4.096e-3 * f64::from(1u32 << timeout.min(31)))
}

/// The RNR NAK timer in milliseconds for a 5-bit code (IBTA vol. 1 table 45; code 0 is the
/// longest, 655.36 ms).
pub fn rnr_timer_ms(code: u8) -> f64 {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    f64::from(US[usize::from(code & 31)]) / 1000.0
}

impl QpReport {
    /// Inconsistencies worth a look: the data path disagreeing with the device, a QP in
    /// Error, settings that hide failures.
    pub fn warnings(&self) -> Vec<String> {
        let a = &self.attr;
        let mut w = Vec::new();
        if let Some(r) = &self.ring {
            if r.state != a.qp_state {
                w.push(format!(
                    "the data path believes the QP is in {} but the device reports {}: the \
                     control path did not call set_state",
                    r.state, a.qp_state
                ));
            }
        }
        if a.qp_state == QpState::Error {
            w.push(
                "the QP is in Error: drain its CQ, read the first non-flush completion, then \
                 rebuild (Error -> Reset -> Init -> RTR -> RTS)"
                    .into(),
            );
        }
        if self.qp.qp_type == QpType::Rc && matches!(a.qp_state, QpState::Rts | QpState::Sqd) {
            if a.timeout == 0 {
                w.push("timeout 0: the requester waits forever for a lost ACK".into());
            }
            if a.max_dest_rd_atomic == 0 {
                w.push(
                    "max_dest_rd_atomic 0: the peer's RDMA READ and atomics will fail with \
                     REM_INV_REQ_ERR"
                        .into(),
                );
            }
        }
        w
    }
}

impl fmt::Display for QpReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.attr;
        let t = self.qp.qp_type;
        write!(f, "QP {:#x} ({t}) state {}", self.qp.qpn, a.qp_state)?;
        if let Some(r) = &self.ring {
            write!(f, " [data path: {}]", r.state)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "  port      {}  pkey_index {}  access {:?}",
            a.port_num, a.pkey_index, a.qp_access_flags
        )?;
        if t == QpType::Ud {
            writeln!(f, "  qkey      {:#010x}", a.qkey)?;
        } else {
            let ah = &a.ah_attr;
            write!(
                f,
                "  path      dest_qpn {:#x}  path_mtu {}  dlid {}  sl {}",
                a.dest_qp_num,
                a.path_mtu.bytes(),
                ah.dlid,
                ah.sl
            )?;
            if let Some(g) = &ah.grh {
                write!(
                    f,
                    "  dgid {}  sgid_index {}  hop_limit {}  tclass {}",
                    g.dgid, g.sgid_index, g.hop_limit, g.traffic_class
                )?;
            }
            writeln!(f)?;
        }
        writeln!(
            f,
            "  psn       sq_psn {:#08x}  rq_psn {:#08x}",
            a.sq_psn, a.rq_psn
        )?;
        if t == QpType::Rc {
            let to = ack_timeout_ms(a.timeout)
                .map_or("infinite".to_string(), |ms| format!("{ms:.1} ms"));
            let rnr = if a.rnr_retry == 7 {
                "7 (infinite)".to_string()
            } else {
                a.rnr_retry.to_string()
            };
            writeln!(
                f,
                "  rc        timeout {} ({to})  retry_cnt {}  rnr_retry {rnr}  min_rnr_timer {} ({:.2} ms)  max_rd_atomic {}  max_dest_rd_atomic {}",
                a.timeout,
                a.retry_cnt,
                a.min_rnr_timer,
                rnr_timer_ms(a.min_rnr_timer),
                a.max_rd_atomic,
                a.max_dest_rd_atomic
            )?;
        }
        let c = &a.cap;
        write!(
            f,
            "  cap       max_send_wr {}  max_recv_wr {}  max_send_sge {}  max_recv_sge {}  max_inline_data {}",
            c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
        )?;
        if let Some(r) = &self.ring {
            write!(
                f,
                "\n  rings     sq_pi {:#06x}  sq outstanding {} BBs, free {} BBs  rq outstanding {}  bf_offset {}",
                r.sq_pi, r.sq_outstanding_bbs, r.sq_free_bbs, r.rq_outstanding, r.bf_offset
            )?;
        }
        for w in self.warnings() {
            write!(f, "\n  warning   {w}")?;
        }
        Ok(())
    }
}

/// The counters of one port.
#[derive(Clone, Debug)]
pub struct CounterReport {
    /// Device name.
    pub device: String,
    /// Port.
    pub port: u8,
    /// The counters as the device reports them.
    pub counters: Vec<Counter>,
}

/// Reads the counters of `port`.
pub fn counter_report(dev: &dyn Device, port: u8) -> Result<CounterReport> {
    Ok(CounterReport {
        device: dev.name().to_string(),
        port,
        counters: dev.counters(port)?,
    })
}

impl CounterReport {
    /// The value of one counter.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
    }

    /// Counters that grew from `before` to `self` (a counter missing in `before` counts
    /// from 0), with the increase.
    pub fn delta(&self, before: &CounterReport) -> Vec<Counter> {
        self.counters
            .iter()
            .filter_map(|c| {
                let old = before.get(&c.name).unwrap_or(0);
                (c.value > old).then(|| Counter {
                    name: c.name.clone(),
                    value: c.value - old,
                })
            })
            .collect()
    }
}

impl fmt::Display for CounterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "counters of {} port {}", self.device, self.port)?;
        let mut sorted: Vec<&Counter> = self.counters.iter().collect();
        // Nonzero error counters first, then the rest by name.
        sorted.sort_by_key(|c| (!(c.value != 0 && is_error_counter(&c.name)), c.name.clone()));
        for c in sorted {
            let flag = if c.value != 0 && is_error_counter(&c.name) {
                "!"
            } else {
                " "
            };
            write!(f, "\n {flag} {:<28} {:>12}", c.name, c.value)?;
            if let Some(m) = counter_meaning(&c.name) {
                write!(f, "  {m}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeDevice;
    use mlx5_hw::Mtu;
    use mlx5_qp::WcOpcode;

    #[test]
    fn error_completion_names_everything() {
        let wc = Wc::new(&mlx5_qp::WcFields {
            wr_id: 0x2a,
            status: WcStatus::RetryExcErr,
            opcode: WcOpcode::RdmaWrite,
            qp_num: 0x123,
            syndrome: mlx5_cq::SYNDROME_TRANSPORT_RETRY_EXC_ERR,
            vendor_err: 0x81,
            ..mlx5_qp::WcFields::default()
        });
        let s = WcReport(&wc).to_string();
        for want in [
            "IBV_WC_RETRY_EXC_ERR (status 12)",
            "wr_id     0x2a",
            "IBV_WC_RDMA_WRITE",
            "0x15 TRANSPORT_RETRY_EXC_ERR",
            "vendor syndrome 0x81",
            "transport retries exhausted",
            "local_ack_timeout_err",
            "dest_qp_num and the PSNs cross",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        let ok = WcReport(&Wc::default()).to_string();
        assert!(ok.starts_with("completion IBV_WC_SUCCESS"), "{ok}");
    }

    #[test]
    fn every_error_status_has_advice() {
        for v in 1u8..=21 {
            let s = WcStatus::from_u8(v).unwrap();
            assert!(!advice(s).check.is_empty());
        }
        assert!(advice(WcStatus::RnrRetryExcErr)
            .counters
            .contains(&"rnr_nak_retry_err"));
    }

    #[test]
    fn advice_counters_are_known_names() {
        for v in 0u8..=21 {
            let s = WcStatus::from_u8(v).unwrap();
            for c in advice(s).counters {
                let name = c.split(' ').next().unwrap_or(c);
                assert!(counter_meaning(name).is_some(), "{name} has no meaning");
            }
        }
    }

    #[test]
    fn qp_report_shows_attributes_and_disagreement() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let q = d.qp(QpType::Rc);
        d.force_state(q.id, QpState::Error);
        let r = qp_report(&d, &q, None).unwrap();
        let s = r.to_string();
        assert!(s.contains("state ERR"), "{s}");
        assert!(s.contains("rebuild"), "{s}");
        let mut r2 = r.clone();
        r2.ring = Some(RingState {
            state: QpState::Rts,
            sq_pi: 3,
            sq_outstanding_bbs: 2,
            sq_free_bbs: 62,
            rq_outstanding: 8,
            bf_offset: 256,
            max_inline_data: 64,
        });
        let s = r2.to_string();
        assert!(
            s.contains("[data path: RTS]") && s.contains("did not call set_state"),
            "{s}"
        );
        assert!(s.contains("rq outstanding 8"), "{s}");
    }

    #[test]
    fn timers_match_the_spec_tables() {
        assert_eq!(ack_timeout_ms(0), None);
        let t14 = ack_timeout_ms(14).unwrap();
        assert!((t14 - 67.108_864).abs() < 1e-6, "{t14}");
        assert!((rnr_timer_ms(12) - 0.64).abs() < 1e-9);
        assert!((rnr_timer_ms(0) - 655.36).abs() < 1e-9);
    }

    #[test]
    fn counters_flag_errors_and_compute_deltas() {
        let d = FakeDevice::new(Mtu::Mtu4096, 1);
        let after = counter_report(&d, 1).unwrap();
        let s = after.to_string();
        let first = s.lines().nth(1).unwrap();
        assert!(first.starts_with(" ! rnr_nak_retry_err"), "{s}");
        let before = CounterReport {
            counters: vec![Counter {
                name: "rnr_nak_retry_err".into(),
                value: 1,
            }],
            ..after.clone()
        };
        let dlt = after.delta(&before);
        assert_eq!(dlt.len(), 1);
        assert_eq!(
            (dlt[0].name.as_str(), dlt[0].value),
            ("rnr_nak_retry_err", 2)
        );
    }
}
