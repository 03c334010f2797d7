//! What a caller may choose about a connection, with perftest's defaults.

use super::wire::RemoteBuffer;
use mlx5_hw::{AccessFlags, Mtu, QpType};
use std::time::Duration;

/// Local ACK timeout exponent perftest uses: 4.096 µs × 2^14 ≈ 67 ms (perftest
/// `perftest_parameters.h` `DEF_QP_TIME`).
pub const DEFAULT_TIMEOUT: u8 = 14;
/// Transport retries perftest uses (perftest `src/perftest_resources.c`, RTS attributes:
/// `retry_cnt = 7`).
pub const DEFAULT_RETRY_CNT: u8 = 7;
/// RNR retries perftest uses (same place, `rnr_retry = 7`): 7 = retry forever (IBTA §9.7.5.2.8).
pub const DEFAULT_RNR_RETRY: u8 = 7;
/// RNR NAK timer code perftest uses (`MIN_RNR_TIMER 12`: 0.64 ms, IBTA vol. 1 table 45).
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;
/// READ/atomic depth asked for when the caller does not choose one; clamped to the device's
/// `max_qp_init_rd_atom` / `max_qp_rd_atom` (16 on ConnectX-4 and later).
pub const DEFAULT_RD_ATOMIC: u8 = 16;
/// Q_Key perftest (`perftest_parameters.h` `DEF_QKEY`) and qperf use for UD (`0x11111111`;
/// bit 31 clear, so not a controlled key).
pub const DEFAULT_QKEY: u32 = 0x1111_1111;
/// Hop limit of the GRH on RoCE (perftest `src/perftest_resources.c` sets `grh.hop_limit = 0xFF`).
pub const DEFAULT_HOP_LIMIT: u8 = 0xff;

/// Connection parameters. `ConnectParams::default()` is what perftest does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a builder does nothing until it is passed on"]
pub struct ConnectParams {
    /// Local port, 1-based.
    pub port: u8,
    /// P_Key index (both sides must resolve to the same P_Key or packets are dropped).
    pub pkey_index: u16,
    /// Source GID index, used when the path has a GRH (always on RoCE).
    pub gid_index: u8,
    /// Put a GRH on an InfiniBand path too (it is always there on RoCE).
    pub force_grh: bool,
    /// Service level (RoCE: the priority).
    pub sl: u8,
    /// GRH traffic class (RoCE: DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// Remote access rights for RC/UC (`None`: RC READ|WRITE|ATOMIC, UC WRITE).
    pub access: Option<AccessFlags>,
    /// An upper bound for the path MTU (`None`: the smaller of both ports' active MTU).
    pub max_mtu: Option<Mtu>,
    /// The first PSN this QP sends (24 bits; the peer's `rq_psn`). `None`: a fresh random PSN
    /// on every connect and rebuild, as perftest and rdma-core's examples pick them (a PSN
    /// must not repeat across reconnects, or stale packets of the old connection could be
    /// taken for new ones; IBTA Vol. 1 §9.7.1). Set it to test PSN wrap or to reproduce a run.
    pub psn: Option<u32>,
    /// RC local ACK timeout exponent (4.096 µs × 2^timeout; 0 = wait forever).
    pub timeout: u8,
    /// RC transport retries (0..=7).
    pub retry_cnt: u8,
    /// RC RNR retries (0..=7, 7 = forever).
    pub rnr_retry: u8,
    /// RC RNR NAK timer code this side asks senders to wait (0..=31).
    pub min_rnr_timer: u8,
    /// RC READ/atomic requests in flight as initiator (`None`: [`DEFAULT_RD_ATOMIC`] clamped to
    /// the device). The effective value is also capped by the peer's `max_dest_rd_atomic`.
    pub max_rd_atomic: Option<u8>,
    /// RC READ/atomic requests served at once as responder (`None`: [`DEFAULT_RD_ATOMIC`]
    /// clamped to the device).
    pub max_dest_rd_atomic: Option<u8>,
    /// UD: the Q_Key this QP accepts (and announces to the peer).
    pub qkey: u32,
    /// A buffer to announce to the peer for RDMA.
    pub buffer: Option<RemoteBuffer>,
    /// How long each control-channel step (accept, connect, each message) may take.
    pub io_timeout: Duration,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            port: 1,
            pkey_index: 0,
            gid_index: 0,
            force_grh: false,
            sl: 0,
            traffic_class: 0,
            hop_limit: DEFAULT_HOP_LIMIT,
            access: None,
            max_mtu: None,
            psn: None,
            timeout: DEFAULT_TIMEOUT,
            retry_cnt: DEFAULT_RETRY_CNT,
            rnr_retry: DEFAULT_RNR_RETRY,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            max_rd_atomic: None,
            max_dest_rd_atomic: None,
            qkey: DEFAULT_QKEY,
            buffer: None,
            io_timeout: Duration::from_secs(10),
        }
    }
}

impl ConnectParams {
    /// The access flags for a QP type: the explicit choice, or RC READ|WRITE|ATOMIC and UC
    /// WRITE (UC has no READ or atomics, IBTA §9.4; the kernel table accepts only
    /// `IBV_ACCESS_REMOTE_WRITE` usefully for UC).
    pub fn access_for(&self, qp_type: QpType) -> AccessFlags {
        self.access.unwrap_or(match qp_type {
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC
            }
            QpType::Uc => AccessFlags::REMOTE_WRITE,
            QpType::Ud => AccessFlags::empty(),
            // DC: what RC takes (a DCT's access flags are set at Init, as an RC QP's).
            _ => AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        })
    }

    /// Builder: send from PSN `psn` (24 bits) instead of a random one.
    pub fn with_psn(mut self, psn: u32) -> Self {
        self.psn = Some(psn);
        self
    }

    /// Builder: announce `buffer` to the peer.
    pub fn with_buffer(mut self, buffer: RemoteBuffer) -> Self {
        self.buffer = Some(buffer);
        self
    }
}
