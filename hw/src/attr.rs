//! Verbs-level attribute types shared by every device: QP states and types, attribute masks,
//! access flags, path MTU, path-migration state, address-handle attributes and the QP
//! attribute record.
//!
//! Numeric values are those of rdma-core's `infiniband/verbs.h` (`enum ibv_qp_state`,
//! `enum ibv_qp_type`, `enum ibv_qp_attr_mask`, `enum ibv_access_flags`, `enum ibv_mtu`,
//! `enum ibv_mig_state`), so that the verbs backend passes them through unchanged.

use bitflags::bitflags;

/// QP state (`enum ibv_qp_state`, verbs.h).
///
/// Not `#[non_exhaustive]`, on purpose: these are the seven states of the IB QP state machine
/// (IBTA Vol. 1 §10.3.1), which no release of the spec has changed; a match over them should
/// stay exhaustive so that every state is handled. (verbs.h's `IBV_QPS_UNKNOWN` is not a state
/// but the answer of a query that failed; this crate reports a failed query as an error.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QpState {
    /// `IBV_QPS_RESET`: freshly created or reset; nothing is processed.
    Reset = 0,
    /// `IBV_QPS_INIT`: receives may be posted; nothing is processed.
    Init = 1,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr = 2,
    /// `IBV_QPS_RTS`: ready to send.
    Rts = 3,
    /// `IBV_QPS_SQD`: send queue drain: no new send starts, posted ones finish.
    Sqd = 4,
    /// `IBV_QPS_SQE`: send queue error (UC/UD): the SQ failed, the RQ still receives.
    Sqe = 5,
    /// `IBV_QPS_ERR`: everything outstanding is flushed; only Reset leaves it.
    Error = 6,
}

impl QpState {
    /// All seven states in numeric order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ];

    /// The state with the given `ibv_qp_state` value.
    pub fn from_u8(v: u8) -> Option<QpState> {
        Self::ALL.get(v as usize).copied()
    }

    /// The short name used in logs (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`).
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Error => "ERR",
        }
    }
}

impl core::fmt::Display for QpState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// QP transport type (`enum ibv_qp_type`, verbs.h; the two DC types are mlx5's own).
///
/// The discriminants are the `ibv_qp_type` values, except for the two Dynamically Connected
/// types: verbs creates both as `IBV_QPT_DRIVER` (0xff) and tells them apart by
/// `mlx5dv_dc_init_attr.dc_type` (rdma-core `providers/mlx5/mlx5dv.h`, `MLX5DV_DCTYPE_DCI` /
/// `MLX5DV_DCTYPE_DCT`), so their discriminants here (0xf0, 0xf1) are this crate's own;
/// [`QpType::ibv_value`] gives the verbs value of every type.
///
/// `#[non_exhaustive]`: mlx5 has more QP types (raw packet, GSI) a later version may add.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpType {
    /// `IBV_QPT_RC`: reliable connected.
    Rc = 2,
    /// `IBV_QPT_UC`: unreliable connected.
    Uc = 3,
    /// `IBV_QPT_UD`: unreliable datagram.
    Ud = 4,
    /// `IBV_QPT_XRC_SEND` (kernel `IB_QPT_XRC_INI`): the send side of XRC, an initiator with
    /// no receive queue; each WQE names the remote XRC SRQ (`docs/wqe-layout.md`, XRC
    /// segment).
    XrcSend = 9,
    /// `IBV_QPT_XRC_RECV` (kernel `IB_QPT_XRC_TGT`): the receive side of XRC, a target with
    /// no send or receive queue of its own, in an XRC domain; it delivers into the XRC SRQ each
    /// request names.
    XrcRecv = 10,
    /// A DC initiator (`IBV_QPT_DRIVER` + `MLX5DV_DCTYPE_DCI`; kernel `MLX5_IB_QPT_DCI`): a
    /// reliable send queue whose WQEs each name their target — the address, the DCT number and
    /// the DC access key in the WQE's 48-byte address vector (rdma-core `qp.c`
    /// `mlx5_send_wr_set_dc_addr`); no receive side. It connects to one target at a time, in
    /// band, and disconnects when it moves on (`docs/software-connectx.md`, DC).
    Dci = 0xf0,
    /// A DC target (`IBV_QPT_DRIVER` + `MLX5DV_DCTYPE_DCT`; kernel `MLX5_IB_QPT_DCT`): a
    /// responder any initiator that knows its number and access key reaches; no send queue, it
    /// receives through an SRQ. It gets its number at RTR and stays there (kernel
    /// `drivers/infiniband/hw/mlx5/qp.c` `mlx5_ib_modify_dct`).
    Dct = 0xf1,
}

impl QpType {
    /// The QP types with a send and a receive side (what the typed transition steps,
    /// `mlx5_hw::transition`, and connection setup cover).
    pub const ALL: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    /// Every QP type the state table covers: [`QpType::ALL`] and the two XRC types.
    pub const WITH_XRC: [QpType; 5] = [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::XrcSend,
        QpType::XrcRecv,
    ];

    /// Every QP type: [`QpType::WITH_XRC`] and the two DC types.
    pub const EVERY: [QpType; 7] = [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::XrcSend,
        QpType::XrcRecv,
        QpType::Dci,
        QpType::Dct,
    ];

    /// The short name (`RC`, `UC`, `UD`, `XRC_SEND`, `XRC_RECV`, `DCI`, `DCT`).
    pub fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::XrcSend => "XRC_SEND",
            QpType::XrcRecv => "XRC_RECV",
            QpType::Dci => "DCI",
            QpType::Dct => "DCT",
        }
    }

    /// The `enum ibv_qp_type` value `ibv_create_qp_ex` takes for this type: the discriminant,
    /// and `IBV_QPT_DRIVER` (0xff) for both DC types.
    pub const fn ibv_value(self) -> u32 {
        match self {
            QpType::Dci | QpType::Dct => 0xff,
            t => t as u32,
        }
    }

    /// Whether the transport is reliable (acknowledged, retried: RC, both XRC types and both
    /// DC types; IBTA Annex A14 gives XRC the reliability protocol of RC, and a DC initiator
    /// and target run RC's between them for as long as they are connected).
    pub const fn is_reliable(self) -> bool {
        matches!(
            self,
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv | QpType::Dci | QpType::Dct
        )
    }

    /// Whether this is one of the two XRC types.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }

    /// Whether this is one of the two Dynamically Connected types.
    pub const fn is_dc(self) -> bool {
        matches!(self, QpType::Dci | QpType::Dct)
    }
}

impl core::fmt::Display for QpType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

bitflags! {
    /// Which fields of a [`QpAttr`] a modify carries (`enum ibv_qp_attr_mask`, verbs.h).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AttrMask: u32 {
        /// `IBV_QP_STATE`
        const STATE = 1 << 0;
        /// `IBV_QP_CUR_STATE`
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`
        const DEST_QPN = 1 << 20;
        /// `IBV_QP_RATE_LIMIT`
        const RATE_LIMIT = 1 << 25;
    }
}

impl AttrMask {
    /// The verbs name of each single bit, for error messages (`IBV_QP_MIN_RNR_TIMER`, ...).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.iter_names().map(|(n, _)| n)
    }
}

bitflags! {
    /// Memory-region and QP access rights (`enum ibv_access_flags`, verbs.h).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`
        const LOCAL_WRITE = 1 << 0;
        /// `IBV_ACCESS_REMOTE_WRITE`
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`
        const REMOTE_ATOMIC = 1 << 3;
        /// `IBV_ACCESS_MW_BIND`
        const MW_BIND = 1 << 4;
        /// `IBV_ACCESS_ZERO_BASED`
        const ZERO_BASED = 1 << 5;
        /// `IBV_ACCESS_ON_DEMAND`
        const ON_DEMAND = 1 << 6;
    }
}

/// Path MTU (`enum ibv_mtu`, verbs.h: 1 = 256 ... 5 = 4096).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes
    Mtu256 = 1,
    /// 512 bytes
    Mtu512 = 2,
    /// 1024 bytes
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes
    Mtu2048 = 4,
    /// 4096 bytes
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128u32 << (self as u8)
    }
    /// The enum value for a byte count (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(b: u32) -> Option<Mtu> {
        Some(match b {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The enum value for an `ibv_mtu` number.
    pub fn from_u8(v: u8) -> Option<Mtu> {
        Self::from_bytes(128u32.checked_shl(v as u32)?)
    }
}

/// Path-migration state of a connected QP (`enum ibv_mig_state`, verbs.h; IBTA vol. 1 §17.2.8
/// "Automatic Path Migration"). Set with `IBV_QP_PATH_MIG_STATE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum MigState {
    /// `IBV_MIG_MIGRATED`: the QP uses its primary path; no alternate path is armed.
    #[default]
    Migrated = 0,
    /// `IBV_MIG_REARM`: an alternate path was loaded; the QP and its peer are re-arming it.
    Rearm = 1,
    /// `IBV_MIG_ARMED`: the alternate path is armed; the device migrates to it on failure.
    Armed = 2,
}

impl MigState {
    /// The state with the given `ibv_mig_state` value.
    pub fn from_u8(v: u8) -> Option<MigState> {
        Some(match v {
            0 => MigState::Migrated,
            1 => MigState::Rearm,
            2 => MigState::Armed,
            _ => return None,
        })
    }

    /// The verbs name (`IBV_MIG_MIGRATED`, ...).
    pub fn name(self) -> &'static str {
        match self {
            MigState::Migrated => "IBV_MIG_MIGRATED",
            MigState::Rearm => "IBV_MIG_REARM",
            MigState::Armed => "IBV_MIG_ARMED",
        }
    }
}

/// A 128-bit GID (for RoCE v2: an IPv6 or IPv4-mapped IPv6 address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The RoCE v2 GID of an IPv4 address: `::ffff:a.b.c.d` (IPv4-mapped IPv6).
    pub fn from_ipv4(ip: [u8; 4]) -> Gid {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        Gid(g)
    }
    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        if self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff {
            Some([self.0[12], self.0[13], self.0[14], self.0[15]])
        } else {
            None
        }
    }
}

impl core::fmt::Display for Gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// Global route header attributes of an address (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// 20-bit flow label.
    pub flow_label: u32,
    /// Index of the source GID in the local port's GID table.
    pub sgid_index: u8,
    /// IP TTL / hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP/ECN).
    pub traffic_class: u8,
}

/// Address-handle attributes (`struct ibv_ah_attr`): the path to a remote port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AhAttr {
    /// Destination LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate (0 = port rate).
    pub static_rate: u8,
    /// Local port number (1-based).
    pub port_num: u8,
    /// The GRH; required on RoCE (`is_global = 1`).
    pub grh: Option<GlobalRoute>,
}

/// QP capabilities (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    /// Send work requests the SQ must hold.
    pub max_send_wr: u32,
    /// Receive work requests the RQ must hold (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

/// The QP attribute record (`struct ibv_qp_attr`, the fields RC/UC/UD use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// Target state (`IBV_QP_STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (`IBV_QP_PATH_MTU`, set at RTR).
    pub path_mtu: Mtu,
    /// Q_Key (`IBV_QP_QKEY`, UD: set at Init).
    pub qkey: u32,
    /// Receive PSN, 24 bits (`IBV_QP_RQ_PSN`, set at RTR).
    pub rq_psn: u32,
    /// Send PSN, 24 bits (`IBV_QP_SQ_PSN`, set at RTS).
    pub sq_psn: u32,
    /// Remote QPN, 24 bits (`IBV_QP_DEST_QPN`, set at RTR).
    pub dest_qp_num: u32,
    /// Remote access rights (`IBV_QP_ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// P_Key index (`IBV_QP_PKEY_INDEX`).
    pub pkey_index: u16,
    /// Port number, 1-based (`IBV_QP_PORT`, set at Init).
    pub port_num: u8,
    /// Primary path (`IBV_QP_AV`, set at RTR).
    pub ah_attr: AhAttr,
    /// Alternate path (`IBV_QP_ALT_PATH`, with [`QpAttr::alt_port_num`],
    /// [`QpAttr::alt_pkey_index`] and [`QpAttr::alt_timeout`]). InfiniBand only: the kernel
    /// refuses `IBV_QP_ALT_PATH` on a RoCE port (drivers/infiniband/core/verbs.c
    /// `_ib_modify_qp`), and so does [`crate::qp_state::check_port_protocol`].
    pub alt_ah_attr: AhAttr,
    /// P_Key index of the alternate path (`IBV_QP_ALT_PATH`).
    pub alt_pkey_index: u16,
    /// Port of the alternate path, 1-based; must equal `alt_ah_attr.port_num` (uverbs
    /// `modify_qp`) (`IBV_QP_ALT_PATH`).
    pub alt_port_num: u8,
    /// Local ACK timeout exponent on the alternate path, 0..=31 (`IBV_QP_ALT_PATH`).
    pub alt_timeout: u8,
    /// Path-migration state (`IBV_QP_PATH_MIG_STATE`).
    pub path_mig_state: MigState,
    /// Send rate limit in kbit/s, 0 = unlimited (`IBV_QP_RATE_LIMIT`; which QP types and
    /// transitions accept it depends on the kernel and the device, see
    /// [`crate::qp_state::KernelVersion`]).
    pub rate_limit: u32,
    /// Outstanding READ/atomic requests as initiator (`IBV_QP_MAX_QP_RD_ATOMIC`, RTS).
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests as responder (`IBV_QP_MAX_DEST_RD_ATOMIC`, RTR).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code, 5 bits (`IBV_QP_MIN_RNR_TIMER`, RTR).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite (`IBV_QP_TIMEOUT`, RTS).
    pub timeout: u8,
    /// Transport retries, 3 bits (`IBV_QP_RETRY_CNT`, RTS).
    pub retry_cnt: u8,
    /// RNR retries, 3 bits, 7 = infinite (`IBV_QP_RNR_RETRY`, RTS).
    pub rnr_retry: u8,
    /// Ask for the SQ-drained async event (`IBV_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// Query only: the SQ is still draining in SQD.
    pub sq_draining: bool,
    /// Query only: the QP's capabilities.
    pub cap: QpCap,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::empty(),
            pkey_index: 0,
            port_num: 1,
            ah_attr: AhAttr::default(),
            alt_ah_attr: AhAttr::default(),
            alt_pkey_index: 0,
            alt_port_num: 0,
            alt_timeout: 0,
            path_mig_state: MigState::Migrated,
            rate_limit: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            cap: QpCap::default(),
        }
    }
}
