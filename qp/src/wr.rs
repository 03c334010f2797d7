//! Work requests: what a caller asks the QP to do, as small `Copy` values built without
//! allocation.
//!
//! A [`SendWr`] names an operation (its constructor), its data ([`SendWr::sges`] or
//! [`SendWr::inline`]), its flags and, on UD, its destination ([`SendWr::ud`]). Nothing is
//! checked here; [`crate::Qp::post`] validates the whole request against the QP before it writes
//! a byte.

use crate::dc::DcDest;
use mlx5_wqe::seg::AvSeg;

pub use mlx5_wqe::recv::Sge;

bitflags::bitflags! {
    /// Per-WR flags (`enum ibv_send_flags`, the subset mlx5 honours on these QP types).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u8 {
        /// Generate a completion for this WR (`IBV_SEND_SIGNALED`; ctrl CE = 2,
        /// `MLX5_WQE_CTRL_CQ_UPDATE`). Implied when the QP was created with `sq_sig_all`.
        const SIGNALED = 1 << 0;
        /// Wait for earlier READs and atomics before starting (`IBV_SEND_FENCE`; rdma-core
        /// `MLX5_WQE_CTRL_FENCE`, fence mode 4).
        const FENCE = 1 << 1;
        /// Ask the responder for a solicited event (`IBV_SEND_SOLICITED`;
        /// `MLX5_WQE_CTRL_SOLICITED`).
        const SOLICITED = 1 << 2;
    }
}

/// A remote buffer: its address in the peer's address space and the peer's rkey.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key of the region holding it.
    pub rkey: u32,
}

impl RemoteAddr {
    /// A remote buffer.
    #[inline(always)]
    pub const fn new(addr: u64, rkey: u32) -> RemoteAddr {
        RemoteAddr { addr, rkey }
    }
}

/// A UD destination: the address vector of an address handle plus the remote QPN and Q_Key.
///
/// Built once per destination and reused for every send to it; the WQE's datagram segment is
/// this AV with `dqp_dct` and `key` overwritten, as rdma-core `_set_datagram_seg` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    av: AvSeg,
    compact: bool,
}

impl UdDest {
    /// The full 48-byte AV (`MLX5_EXTENDED_UD_AV` set), as rdma-core always sends it.
    /// `av` is the address handle's `struct mlx5_wqe_av` (`mlx5_hw::AhInfo::av`).
    pub fn new(av: &[u8; 48], dest_qpn: u32, qkey: u32) -> UdDest {
        let mut seg = Self::parse(av);
        seg.set_extended(true);
        seg.set_ud_dest(dest_qpn, qkey);
        UdDest {
            av: seg,
            compact: false,
        }
    }

    /// The 16-byte compact AV (extended bit clear; UCX `uct_ib_mlx5_get_compact_av`): only the
    /// key, destination QPN, SL/rate and LID/UDP-port fields travel, so the WQE is 32 bytes
    /// shorter. Only valid where the device resolves the rest (InfiniBand without GRH).
    pub fn compact(av: &[u8; 48], dest_qpn: u32, qkey: u32) -> UdDest {
        let mut seg = Self::parse(av);
        seg.set_extended(false);
        seg.set_ud_dest(dest_qpn, qkey);
        UdDest {
            av: seg,
            compact: true,
        }
    }

    fn parse(av: &[u8; 48]) -> AvSeg {
        // 48 bytes, every byte pattern valid (checked by the macro).
        zerocopy::transmute!(*av)
    }

    /// The datagram segment as it goes into the WQE.
    #[inline(always)]
    pub fn av(&self) -> &AvSeg {
        &self.av
    }

    /// Whether the compact 16-byte form is used.
    #[inline(always)]
    pub fn is_compact(&self) -> bool {
        self.compact
    }

    /// Bytes the datagram segment takes in the WQE (16 or 48).
    #[inline(always)]
    pub fn wqe_bytes(&self) -> usize {
        if self.compact {
            AvSeg::COMPACT_SIZE
        } else {
            core::mem::size_of::<AvSeg>()
        }
    }
}

/// The operation of a send WR and its operands (host order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendImm {
        /// The immediate, host order (travels big-endian).
        imm: u32,
    },
    /// RDMA WRITE.
    Write {
        /// Target.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate data (consumes a receive at the target).
    WriteImm {
        /// Target.
        remote: RemoteAddr,
        /// The immediate, host order.
        imm: u32,
    },
    /// RDMA READ into the WR's gather list.
    Read {
        /// Source.
        remote: RemoteAddr,
    },
    /// 64-bit compare and swap; the original value lands in `local`.
    CompSwap {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Local 8-byte buffer for the original value.
        local: Sge,
        /// Compare operand.
        compare: u64,
        /// Swap operand.
        swap: u64,
    },
    /// 64-bit fetch and add; the original value lands in `local`.
    FetchAdd {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Local 8-byte buffer for the original value.
        local: Sge,
        /// Addend.
        add: u64,
    },
    /// Masked compare and swap on 4 bytes (opcode 0x14, opmod 0x08).
    MaskedCompSwap32 {
        /// Target (4-byte aligned).
        remote: RemoteAddr,
        /// Local 4-byte buffer for the original value.
        local: Sge,
        /// Compare operand.
        compare: u32,
        /// Bits that take part in the compare.
        compare_mask: u32,
        /// Swap operand.
        swap: u32,
        /// Bits that are swapped.
        swap_mask: u32,
    },
    /// Masked compare and swap on 8 bytes (opcode 0x14, opmod 0x09).
    MaskedCompSwap64 {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Local 8-byte buffer for the original value.
        local: Sge,
        /// Compare operand.
        compare: u64,
        /// Bits that take part in the compare.
        compare_mask: u64,
        /// Swap operand.
        swap: u64,
        /// Bits that are swapped.
        swap_mask: u64,
    },
    /// Masked fetch and add on 4 bytes (opcode 0x15, opmod 0x08).
    MaskedFetchAdd32 {
        /// Target (4-byte aligned).
        remote: RemoteAddr,
        /// Local 4-byte buffer for the original value.
        local: Sge,
        /// Addend.
        add: u32,
        /// Field boundaries: a set bit ends a field, carries do not cross it.
        field_boundary: u32,
    },
    /// Masked fetch and add on 8 bytes (opcode 0x15, opmod 0x09).
    MaskedFetchAdd64 {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Local 8-byte buffer for the original value.
        local: Sge,
        /// Addend.
        add: u64,
        /// Field boundaries.
        field_boundary: u64,
    },
}

impl SendOp {
    /// A short name for errors and logs (`SEND`, `RDMA_WRITE`, `ATOMIC_MASKED_CS32`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendImm { .. } => "SEND_WITH_IMM",
            SendOp::Write { .. } => "RDMA_WRITE",
            SendOp::WriteImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Read { .. } => "RDMA_READ",
            SendOp::CompSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
            SendOp::MaskedCompSwap32 { .. } => "MASKED_ATOMIC_CMP_AND_SWP (32-bit)",
            SendOp::MaskedCompSwap64 { .. } => "MASKED_ATOMIC_CMP_AND_SWP (64-bit)",
            SendOp::MaskedFetchAdd32 { .. } => "MASKED_ATOMIC_FETCH_AND_ADD (32-bit)",
            SendOp::MaskedFetchAdd64 { .. } => "MASKED_ATOMIC_FETCH_AND_ADD (64-bit)",
        }
    }
}

/// The data a send WR carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendData<'a> {
    /// A gather list (SEND/WRITE) or scatter list (READ) of registered memory.
    Sges(&'a [Sge]),
    /// Bytes copied into the WQE itself; no lkey, the buffer is free as soon as `post` returns.
    Inline(&'a [u8]),
    /// Several byte slices copied back to back into one inline segment.
    InlineParts(&'a [&'a [u8]]),
}

/// A send work request (on a DCI, with its target: [`SendWr::dc`]).
///
/// ```
/// use mlx5_qp::{RemoteAddr, SendWr, Sge};
/// let sge = [Sge { addr: 0x1000, length: 64, lkey: 7 }];
/// let wr = SendWr::write(42, RemoteAddr::new(0x2000, 9)).sges(&sge).signaled();
/// assert_eq!(wr.wr_id(), 42);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a work request does nothing until it is posted"]
pub struct SendWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) data: SendData<'a>,
    pub(crate) flags: SendFlags,
    pub(crate) ud: Option<&'a UdDest>,
    pub(crate) xrc: Option<u32>,
    pub(crate) dc: Option<&'a DcDest>,
}

impl<'a> SendWr<'a> {
    /// A WR for `op` with no data, no flags, no destination.
    #[inline(always)]
    pub const fn new(wr_id: u64, op: SendOp) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            data: SendData::Sges(&[]),
            flags: SendFlags::empty(),
            ud: None,
            xrc: None,
            dc: None,
        }
    }
    /// SEND.
    #[inline(always)]
    pub const fn send(wr_id: u64) -> SendWr<'a> {
        Self::new(wr_id, SendOp::Send)
    }
    /// SEND with immediate data `imm` (host order; it travels big-endian and the receiver's
    /// [`crate::Wc::imm_data`] shows the same value).
    #[inline(always)]
    pub const fn send_imm(wr_id: u64, imm: u32) -> SendWr<'a> {
        Self::new(wr_id, SendOp::SendImm { imm })
    }
    /// RDMA WRITE to `remote`.
    #[inline(always)]
    pub const fn write(wr_id: u64, remote: RemoteAddr) -> SendWr<'a> {
        Self::new(wr_id, SendOp::Write { remote })
    }
    /// RDMA WRITE with immediate data.
    #[inline(always)]
    pub const fn write_imm(wr_id: u64, remote: RemoteAddr, imm: u32) -> SendWr<'a> {
        Self::new(wr_id, SendOp::WriteImm { remote, imm })
    }
    /// RDMA READ from `remote` into the gather list ([`SendWr::sges`]).
    #[inline(always)]
    pub const fn read(wr_id: u64, remote: RemoteAddr) -> SendWr<'a> {
        Self::new(wr_id, SendOp::Read { remote })
    }
    /// 64-bit compare and swap: if `*remote == compare` then `*remote = swap`; the original
    /// value is written to `local` (big-endian unless the device says otherwise; see
    /// `docs/sources.md` §3).
    #[inline(always)]
    pub const fn comp_swap(
        wr_id: u64,
        remote: RemoteAddr,
        local: Sge,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        Self::new(
            wr_id,
            SendOp::CompSwap {
                remote,
                local,
                compare,
                swap,
            },
        )
    }
    /// 64-bit fetch and add.
    #[inline(always)]
    pub const fn fetch_add(wr_id: u64, remote: RemoteAddr, local: Sge, add: u64) -> SendWr<'a> {
        Self::new(wr_id, SendOp::FetchAdd { remote, local, add })
    }
    /// Masked compare and swap on 4 bytes: if `(*remote & compare_mask) == (compare &
    /// compare_mask)`, the `swap_mask` bits of `*remote` take those of `swap` (opcode 0x14,
    /// opmod 0x08; `docs/sources.md` §2–§3).
    #[inline(always)]
    pub const fn masked_comp_swap32(
        wr_id: u64,
        remote: RemoteAddr,
        local: Sge,
        compare: u32,
        compare_mask: u32,
        swap: u32,
        swap_mask: u32,
    ) -> SendWr<'a> {
        Self::new(
            wr_id,
            SendOp::MaskedCompSwap32 {
                remote,
                local,
                compare,
                compare_mask,
                swap,
                swap_mask,
            },
        )
    }
    /// Masked compare and swap on 8 bytes (opcode 0x14, opmod 0x09).
    #[inline(always)]
    pub const fn masked_comp_swap64(
        wr_id: u64,
        remote: RemoteAddr,
        local: Sge,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    ) -> SendWr<'a> {
        Self::new(
            wr_id,
            SendOp::MaskedCompSwap64 {
                remote,
                local,
                compare,
                compare_mask,
                swap,
                swap_mask,
            },
        )
    }
    /// Masked fetch and add on 4 bytes: `field_boundary` bits end fields so carries do not
    /// cross them (opcode 0x15, opmod 0x08).
    #[inline(always)]
    pub const fn masked_fetch_add32(
        wr_id: u64,
        remote: RemoteAddr,
        local: Sge,
        add: u32,
        field_boundary: u32,
    ) -> SendWr<'a> {
        Self::new(
            wr_id,
            SendOp::MaskedFetchAdd32 {
                remote,
                local,
                add,
                field_boundary,
            },
        )
    }
    /// Masked fetch and add on 8 bytes (opcode 0x15, opmod 0x09).
    #[inline(always)]
    pub const fn masked_fetch_add64(
        wr_id: u64,
        remote: RemoteAddr,
        local: Sge,
        add: u64,
        field_boundary: u64,
    ) -> SendWr<'a> {
        Self::new(
            wr_id,
            SendOp::MaskedFetchAdd64 {
                remote,
                local,
                add,
                field_boundary,
            },
        )
    }
    /// Gather (or, for READ, scatter) list.
    #[inline(always)]
    pub const fn sges(mut self, sges: &'a [Sge]) -> SendWr<'a> {
        self.data = SendData::Sges(sges);
        self
    }
    /// Inline payload.
    #[inline(always)]
    pub const fn inline(mut self, bytes: &'a [u8]) -> SendWr<'a> {
        self.data = SendData::Inline(bytes);
        self
    }
    /// Inline payload from several slices, concatenated.
    #[inline(always)]
    pub const fn inline_parts(mut self, parts: &'a [&'a [u8]]) -> SendWr<'a> {
        self.data = SendData::InlineParts(parts);
        self
    }
    /// Request a completion.
    #[inline(always)]
    pub const fn signaled(mut self) -> SendWr<'a> {
        self.flags = self.flags.union(SendFlags::SIGNALED);
        self
    }
    /// Fence behind earlier READs and atomics.
    #[inline(always)]
    pub const fn fence(mut self) -> SendWr<'a> {
        self.flags = self.flags.union(SendFlags::FENCE);
        self
    }
    /// Ask for a solicited event at the responder.
    #[inline(always)]
    pub const fn solicited(mut self) -> SendWr<'a> {
        self.flags = self.flags.union(SendFlags::SOLICITED);
        self
    }
    /// Replace the flags.
    #[inline(always)]
    pub const fn flags(mut self, flags: SendFlags) -> SendWr<'a> {
        self.flags = flags;
        self
    }
    /// UD destination.
    #[inline(always)]
    pub const fn ud(mut self, dest: &'a UdDest) -> SendWr<'a> {
        self.ud = Some(dest);
        self
    }
    /// The caller's identifier, returned in the completion.
    #[inline(always)]
    pub const fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The operation.
    #[inline(always)]
    pub const fn op(&self) -> &SendOp {
        &self.op
    }
}

/// A receive work request: where an incoming message (or the immediate of a WRITE_IMM) lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a work request does nothing until it is posted"]
pub struct RecvWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Scatter list; empty for a receive that only takes an immediate or a zero-byte message.
    pub sges: &'a [Sge],
}

// The transports' destinations: a DCI's target (`crate::dc`), an XRC initiator's remote SRQ
// (`crate::xrc`).
impl<'a> SendWr<'a> {
    /// Send to the DC target `dest` (`mlx5dv_wr_set_dc_addr`, or
    /// `mlx5dv_wr_set_dc_addr_stream` when its stream is not 0): required on a DCI, refused
    /// elsewhere.
    #[inline(always)]
    pub const fn dc(mut self, dest: &'a DcDest) -> SendWr<'a> {
        self.dc = Some(dest);
        self
    }

    /// The DC target this WR names, if any.
    #[inline(always)]
    pub const fn dc_dest(&self) -> Option<&'a DcDest> {
        self.dc
    }
}

impl<'a> SendWr<'a> {
    /// Send to the XRC SRQ `srqn` of the remote node (`wr.qp_type.xrc.remote_srqn`,
    /// `ibv_wr_set_xrc_srqn`): required on an XRC initiator, refused elsewhere.
    #[inline(always)]
    pub const fn xrc(mut self, srqn: u32) -> SendWr<'a> {
        self.xrc = Some(srqn);
        self
    }

    /// The remote XRC SRQ this WR names, if any.
    #[inline(always)]
    pub const fn xrc_srqn(&self) -> Option<u32> {
        self.xrc
    }
}
