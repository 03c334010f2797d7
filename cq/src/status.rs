//! Error syndromes and work-completion status.
//!
//! Syndrome values: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_CQE_SYNDROME_*`); mapping to
//! `ibv_wc_status`: rdma-core `providers/mlx5/cq.c` `mlx5_handle_error_cqe`; numeric status
//! values: `infiniband/verbs.h` `enum ibv_wc_status`.

/// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`
pub const SYNDROME_LOCAL_LENGTH_ERR: u8 = 0x01;
/// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`
pub const SYNDROME_LOCAL_QP_OP_ERR: u8 = 0x02;
/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`
pub const SYNDROME_LOCAL_PROT_ERR: u8 = 0x04;
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`
pub const SYNDROME_WR_FLUSH_ERR: u8 = 0x05;
/// `MLX5_CQE_SYNDROME_MW_BIND_ERR`
pub const SYNDROME_MW_BIND_ERR: u8 = 0x06;
/// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`
pub const SYNDROME_BAD_RESP_ERR: u8 = 0x10;
/// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`
pub const SYNDROME_LOCAL_ACCESS_ERR: u8 = 0x11;
/// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`
pub const SYNDROME_REMOTE_INVAL_REQ_ERR: u8 = 0x12;
/// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`
pub const SYNDROME_REMOTE_ACCESS_ERR: u8 = 0x13;
/// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`
pub const SYNDROME_REMOTE_OP_ERR: u8 = 0x14;
/// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`
pub const SYNDROME_TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
/// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`
pub const SYNDROME_RNR_RETRY_EXC_ERR: u8 = 0x16;
/// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`
pub const SYNDROME_REMOTE_ABORTED_ERR: u8 = 0x22;

/// Vendor syndrome rdma-core treats as an ODP page fault on an SRQ (with syndrome 0x22).
pub const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;
/// Vendor syndrome for a PSN error (UCX `UCT_IB_MLX5_CQE_VENDOR_SYND_PSN`).
pub const VENDOR_SYNDROME_PSN: u8 = 0x99;

/// Work-completion status (`enum ibv_wc_status`, verbs.h; values are the enum's numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`
    Success = 0,
    /// `IBV_WC_LOC_LEN_ERR`
    LocLenErr = 1,
    /// `IBV_WC_LOC_QP_OP_ERR`
    LocQpOpErr = 2,
    /// `IBV_WC_LOC_EEC_OP_ERR`
    LocEecOpErr = 3,
    /// `IBV_WC_LOC_PROT_ERR`
    LocProtErr = 4,
    /// `IBV_WC_WR_FLUSH_ERR`
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR`
    MwBindErr = 6,
    /// `IBV_WC_BAD_RESP_ERR`
    BadRespErr = 7,
    /// `IBV_WC_LOC_ACCESS_ERR`
    LocAccessErr = 8,
    /// `IBV_WC_REM_INV_REQ_ERR`
    RemInvReqErr = 9,
    /// `IBV_WC_REM_ACCESS_ERR`
    RemAccessErr = 10,
    /// `IBV_WC_REM_OP_ERR`
    RemOpErr = 11,
    /// `IBV_WC_RETRY_EXC_ERR`
    RetryExcErr = 12,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`
    RnrRetryExcErr = 13,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`
    LocRddViolErr = 14,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`
    RemInvRdReqErr = 15,
    /// `IBV_WC_REM_ABORT_ERR`
    RemAbortErr = 16,
    /// `IBV_WC_INV_EECN_ERR`
    InvEecnErr = 17,
    /// `IBV_WC_INV_EEC_STATE_ERR`
    InvEecStateErr = 18,
    /// `IBV_WC_FATAL_ERR`
    FatalErr = 19,
    /// `IBV_WC_RESP_TIMEOUT_ERR`
    RespTimeoutErr = 20,
    /// `IBV_WC_GENERAL_ERR`
    GeneralErr = 21,
}

impl WcStatus {
    /// Every status, in numeric order (`ALL[n] as u8 == n`).
    pub const ALL: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// The status with the given `ibv_wc_status` number.
    pub const fn from_u8(v: u8) -> Option<WcStatus> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// The status for an mlx5 error syndrome (rdma-core `mlx5_handle_error_cqe`); unknown
    /// syndromes are `IBV_WC_GENERAL_ERR`.
    #[inline]
    pub const fn from_syndrome(s: u8) -> WcStatus {
        match s {
            SYNDROME_LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
            SYNDROME_LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
            SYNDROME_LOCAL_PROT_ERR => WcStatus::LocProtErr,
            SYNDROME_WR_FLUSH_ERR => WcStatus::WrFlushErr,
            SYNDROME_MW_BIND_ERR => WcStatus::MwBindErr,
            SYNDROME_BAD_RESP_ERR => WcStatus::BadRespErr,
            SYNDROME_LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
            SYNDROME_REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
            SYNDROME_REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
            SYNDROME_REMOTE_OP_ERR => WcStatus::RemOpErr,
            SYNDROME_TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            SYNDROME_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            SYNDROME_REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
            _ => WcStatus::GeneralErr,
        }
    }

    /// The verbs name (`IBV_WC_RETRY_EXC_ERR`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
            WcStatus::RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            WcStatus::RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            WcStatus::InvEecnErr => "IBV_WC_INV_EECN_ERR",
            WcStatus::InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
            WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
            WcStatus::RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }

    /// The usual causes, in a sentence a user can act on (after `docs/sources.md` §19 and
    /// rdma-core's `ibv_wc_status_str`).
    pub const fn causes(self) -> &'static str {
        match self {
            WcStatus::Success => "the work request completed",
            WcStatus::LocLenErr => "a local length error: the receive buffer is smaller than the message, or a send SGE or inline length exceeds what the QP allows",
            WcStatus::LocQpOpErr => "a local QP operation error: an opcode the QP type does not allow, a malformed WQE (bad DS count, wrong QPN, bad inline length) or a WQE larger than the queue",
            WcStatus::LocEecOpErr => "a local EE context error (RD only)",
            WcStatus::LocProtErr => "a local protection error: an lkey that is invalid, in another PD, lacks LOCAL_WRITE for a receive/READ/atomic target, or an SGE outside its memory region",
            WcStatus::WrFlushErr => "flushed: the QP entered the Error state before this work request was processed; find the first non-flush error completion",
            WcStatus::MwBindErr => "a memory-window bind error",
            WcStatus::BadRespErr => "an unexpected transport response (bad opcode or length from the responder)",
            WcStatus::LocAccessErr => "a local access error on a READ or atomic response (the local buffer lost its rights)",
            WcStatus::RemInvReqErr => "the remote QP rejected the request: an operation it does not allow (READ/atomic with max_dest_rd_atomic 0, wrong QP type), a message longer than its receive buffer, or an invalid request",
            WcStatus::RemAccessErr => "a remote access error: wrong rkey, address outside the remote region, the region or QP lacks REMOTE_WRITE/READ/ATOMIC rights, or a misaligned atomic",
            WcStatus::RemOpErr => "the remote QP failed to complete the operation (its receive WQE was bad or its local memory check failed)",
            WcStatus::RetryExcErr => "transport retries exhausted: the path is down, the peer QP is gone or not in RTR, PSNs do not match, or the ACK timeout is too short",
            WcStatus::RnrRetryExcErr => "receiver-not-ready retries exhausted: the peer never posted a receive (or its SRQ was empty); post receives before the peer sends, raise rnr_retry (7 = infinite) or min_rnr_timer",
            WcStatus::LocRddViolErr => "a local RDD violation (RD only)",
            WcStatus::RemInvRdReqErr => "a remote invalid RD request (RD only)",
            WcStatus::RemAbortErr => "the remote side aborted the operation",
            WcStatus::InvEecnErr => "an invalid EE context number (RD only)",
            WcStatus::InvEecStateErr => "an invalid EE context state (RD only)",
            WcStatus::FatalErr => "a fatal device error",
            WcStatus::RespTimeoutErr => "a response timeout",
            WcStatus::GeneralErr => "a general error (an unknown syndrome); read the vendor syndrome and device counters",
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The rdma-core name of an mlx5 syndrome (`LOCAL_LENGTH_ERR`, ...).
pub const fn syndrome_name(s: u8) -> &'static str {
    match s {
        SYNDROME_LOCAL_LENGTH_ERR => "LOCAL_LENGTH_ERR",
        SYNDROME_LOCAL_QP_OP_ERR => "LOCAL_QP_OP_ERR",
        SYNDROME_LOCAL_PROT_ERR => "LOCAL_PROT_ERR",
        SYNDROME_WR_FLUSH_ERR => "WR_FLUSH_ERR",
        SYNDROME_MW_BIND_ERR => "MW_BIND_ERR",
        SYNDROME_BAD_RESP_ERR => "BAD_RESP_ERR",
        SYNDROME_LOCAL_ACCESS_ERR => "LOCAL_ACCESS_ERR",
        SYNDROME_REMOTE_INVAL_REQ_ERR => "REMOTE_INVAL_REQ_ERR",
        SYNDROME_REMOTE_ACCESS_ERR => "REMOTE_ACCESS_ERR",
        SYNDROME_REMOTE_OP_ERR => "REMOTE_OP_ERR",
        SYNDROME_TRANSPORT_RETRY_EXC_ERR => "TRANSPORT_RETRY_EXC_ERR",
        SYNDROME_RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
        SYNDROME_REMOTE_ABORTED_ERR => "REMOTE_ABORTED_ERR",
        _ => "UNKNOWN",
    }
}

/// Every syndrome with a name, for tests and tables.
pub const ALL_SYNDROMES: [u8; 13] = [
    SYNDROME_LOCAL_LENGTH_ERR,
    SYNDROME_LOCAL_QP_OP_ERR,
    SYNDROME_LOCAL_PROT_ERR,
    SYNDROME_WR_FLUSH_ERR,
    SYNDROME_MW_BIND_ERR,
    SYNDROME_BAD_RESP_ERR,
    SYNDROME_LOCAL_ACCESS_ERR,
    SYNDROME_REMOTE_INVAL_REQ_ERR,
    SYNDROME_REMOTE_ACCESS_ERR,
    SYNDROME_REMOTE_OP_ERR,
    SYNDROME_TRANSPORT_RETRY_EXC_ERR,
    SYNDROME_RNR_RETRY_EXC_ERR,
    SYNDROME_REMOTE_ABORTED_ERR,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_numeric_order() {
        for (n, s) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(*s as usize, n);
            assert_eq!(WcStatus::from_u8(n as u8), Some(*s));
        }
        assert_eq!(WcStatus::from_u8(22), None);
    }

    #[test]
    fn mapping_matches_rdma_core() {
        assert_eq!(WcStatus::from_syndrome(0x15) as u8, 12);
        assert_eq!(WcStatus::from_syndrome(0x16) as u8, 13);
        assert_eq!(WcStatus::from_syndrome(0x22) as u8, 16);
        assert_eq!(WcStatus::from_syndrome(0x77), WcStatus::GeneralErr);
    }
}
