//! The kind of a completion ([`WcOpcode`]) and its flags ([`WcFlags`]).

use super::*;

/// The kind of work a completion reports (`enum ibv_wc_opcode`, verbs.h; the masked atomics
/// have no upstream verbs value and use 0x40/0x41).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[non_exhaustive]
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

    /// A send WQE opcode (`MLX5_OPCODE_*`) that completes as `self`
    /// ([`WcOpcode::from_send_opcode`] of it is `self`; NOP for [`WcOpcode::Other`]); for a
    /// receive opcode, SEND.
    pub const fn send_opcode(self) -> u8 {
        match self {
            WcOpcode::Send | WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => op::OPCODE_SEND,
            WcOpcode::RdmaWrite => op::OPCODE_RDMA_WRITE,
            WcOpcode::RdmaRead => op::OPCODE_RDMA_READ,
            WcOpcode::CompSwap => op::OPCODE_ATOMIC_CS,
            WcOpcode::FetchAdd => op::OPCODE_ATOMIC_FA,
            WcOpcode::MaskedCompSwap => op::OPCODE_ATOMIC_MASKED_CS,
            WcOpcode::MaskedFetchAdd => op::OPCODE_ATOMIC_MASKED_FA,
            WcOpcode::Other => op::OPCODE_NOP,
        }
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

/// The flags of a successful send completion of WQE opcode `opcode` (`MLX5_OPCODE_*`):
/// [`WcFlags::WITH_IMM`] for RDMA WRITE and SEND with immediate, as rdma-core's
/// `handle_good_req` sets them (the immediate itself is the responder's; [`Wc::imm_data`] of a
/// send completion is 0).
#[inline(always)]
pub(crate) const fn send_flags(opcode: u8) -> WcFlags {
    match opcode {
        op::OPCODE_RDMA_WRITE_IMM | op::OPCODE_SEND_IMM => WcFlags::WITH_IMM,
        _ => WcFlags::empty(),
    }
}

/// [`WcOpcode::from_send_opcode`] of every byte.
pub(super) static SEND_WC_OPCODE: [WcOpcode; 256] = {
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
