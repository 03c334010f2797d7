//! Work completions: what [`crate::Cq::poll`] writes into the caller's array.

pub use mlx5_cq::WcStatus;
use mlx5_wqe::opcode as op;

/// The kind of work a completion reports (`enum ibv_wc_opcode`, verbs.h; the masked atomics
/// have no upstream verbs value and use 0x40/0x41).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` (SEND and SEND with immediate).
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE` (with or without immediate).
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd = 4,
    /// Masked compare and swap (32 or 64 bit).
    MaskedCompSwap = 0x40,
    /// Masked fetch and add (32 or 64 bit).
    MaskedFetchAdd = 0x41,
    /// A send WQE with another opcode, posted raw ([`crate::Qp::post_raw`]).
    Other = 0x7f,
    /// `IBV_WC_RECV`: a SEND (with or without immediate) arrived.
    Recv = 0x80,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: an RDMA WRITE with immediate consumed a receive.
    RecvRdmaWithImm = 0x81,
}

impl WcOpcode {
    /// The completion opcode of a send WQE opcode (`MLX5_OPCODE_*`; rdma-core
    /// `providers/mlx5/cq.c` `handle_good_req`).
    #[inline(always)]
    pub const fn from_send_opcode(opcode: u8) -> WcOpcode {
        match opcode {
            op::OPCODE_SEND | op::OPCODE_SEND_IMM | op::OPCODE_SEND_INVAL => WcOpcode::Send,
            op::OPCODE_RDMA_WRITE | op::OPCODE_RDMA_WRITE_IMM => WcOpcode::RdmaWrite,
            op::OPCODE_RDMA_READ => WcOpcode::RdmaRead,
            op::OPCODE_ATOMIC_CS => WcOpcode::CompSwap,
            op::OPCODE_ATOMIC_FA => WcOpcode::FetchAdd,
            op::OPCODE_ATOMIC_MASKED_CS => WcOpcode::MaskedCompSwap,
            op::OPCODE_ATOMIC_MASKED_FA => WcOpcode::MaskedFetchAdd,
            _ => WcOpcode::Other,
        }
    }

    /// [`WcOpcode::from_send_opcode`] as one table load (the completion paths look the
    /// opcode up in the WQE's ctrl segment for every CQE).
    #[inline(always)]
    pub(crate) fn of_send_opcode(opcode: u8) -> WcOpcode {
        SEND_WC_OPCODE[opcode as usize]
    }

    /// Whether this is a receive-side completion (`opcode & IBV_WC_RECV`).
    #[inline(always)]
    pub const fn is_recv(self) -> bool {
        self as u8 & 0x80 != 0
    }

    /// The verbs-style name (`IBV_WC_RDMA_WRITE`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            WcOpcode::Send => "IBV_WC_SEND",
            WcOpcode::RdmaWrite => "IBV_WC_RDMA_WRITE",
            WcOpcode::RdmaRead => "IBV_WC_RDMA_READ",
            WcOpcode::CompSwap => "IBV_WC_COMP_SWAP",
            WcOpcode::FetchAdd => "IBV_WC_FETCH_ADD",
            WcOpcode::MaskedCompSwap => "MASKED_COMP_SWAP",
            WcOpcode::MaskedFetchAdd => "MASKED_FETCH_ADD",
            WcOpcode::Other => "OTHER",
            WcOpcode::Recv => "IBV_WC_RECV",
            WcOpcode::RecvRdmaWithImm => "IBV_WC_RECV_RDMA_WITH_IMM",
        }
    }
}

/// [`WcOpcode::from_send_opcode`] of every byte.
static SEND_WC_OPCODE: [WcOpcode; 256] = {
    let mut t = [WcOpcode::Other; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = WcOpcode::from_send_opcode(i as u8);
        i += 1;
    }
    t
};

bitflags::bitflags! {
    /// Completion flags (`enum ibv_wc_flags`, verbs.h values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u8 {
        /// A GRH precedes the data (UD receive; `IBV_WC_GRH`).
        const GRH = 1 << 0;
        /// [`Wc::imm_data`] is valid (`IBV_WC_WITH_IMM`).
        const WITH_IMM = 1 << 1;
        /// [`Wc::imm_data`] holds an invalidated rkey (`IBV_WC_WITH_INV`).
        const WITH_INV = 1 << 3;
    }
}

/// One work completion.
///
/// Unsignaled send WRs that succeed produce none (verbs semantics); every other WR produces
/// exactly one (see [`crate::Cq::poll`] for how errors and flushes are accounted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// `repr(C)` in this order: what a send completion sets (WR id, byte count, QPN, status,
// opcode) comes first, the receive-only fields after it, so that the poll writes a send
// completion in a few wide stores.
#[repr(C)]
pub struct Wc {
    /// The WR's identifier, recovered from the CQE's `wqe_counter`.
    pub wr_id: u64,
    /// Bytes received (receives), read (READ), or the operand size (atomics); 0 otherwise.
    pub byte_len: u32,
    /// QPN of the local QP the WR was posted on.
    pub qp_num: u32,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. For errors this is the opcode that was posted (verbs leaves it
    /// undefined; here it is always the posted one).
    pub opcode: WcOpcode,
    /// Flags.
    pub flags: WcFlags,
    /// Service level the packet arrived with (`wc.sl`, 4 bits; the CQE's `flags_rqpn` bits
    /// 27:24, rdma-core `handle_responder`). Successful receives only; 0 otherwise.
    pub sl: u8,
    /// Immediate data in host order (it travels big-endian: the sender's value), or the
    /// invalidated rkey; valid when [`WcFlags::WITH_IMM`] / [`WcFlags::WITH_INV`] is set.
    pub imm_data: u32,
    /// Source QPN (UD receives).
    pub src_qp: u32,
    /// Source LID (InfiniBand UD receives).
    pub slid: u16,
    /// P_Key index of a receive (`wc.pkey_index`): filled as libmlx5 fills it, from the low 16
    /// bits of the CQE's `imm_inval_pkey` on every successful receive (rdma-core
    /// `handle_responder`). The CQE field is shared with the immediate and the invalidated
    /// rkey, so it is a P_Key index only when [`WcFlags::WITH_IMM`] and [`WcFlags::WITH_INV`]
    /// are clear (the P_Key index is meaningful for UD and GSI QPs). 0 on send and error
    /// completions.
    pub pkey_index: u16,
    /// Destination LID path bits of a receive (`wc.dlid_path_bits`, the CQE's `ml_path` bits
    /// 6:0; InfiniBand with LMC > 0, 0 on RoCE). Successful receives only; 0 otherwise.
    pub dlid_path_bits: u8,
    /// mlx5 vendor syndrome of an error CQE (`wc.vendor_err`).
    pub vendor_err: u8,
    /// mlx5 syndrome of an error CQE (`MLX5_CQE_SYNDROME_*`; 0 on success). A completion
    /// synthesised for a WR the device retired without a CQE of its own carries
    /// [`mlx5_cq::SYNDROME_WR_FLUSH_ERR`].
    pub syndrome: u8,
}

impl Default for Wc {
    fn default() -> Self {
        Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            flags: WcFlags::empty(),
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            slid: 0,
            pkey_index: 0,
            sl: 0,
            dlid_path_bits: 0,
            vendor_err: 0,
            syndrome: 0,
        }
    }
}

impl Wc {
    /// Whether the WR succeeded.
    #[inline(always)]
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }

    /// The mlx5 name of the syndrome (`REMOTE_ACCESS_ERR`, ...), `None` on success.
    pub fn syndrome_name(&self) -> Option<&'static str> {
        if self.is_ok() {
            None
        } else {
            Some(mlx5_cq::syndrome_name(self.syndrome))
        }
    }
}
