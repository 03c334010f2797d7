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

/// Word 2 of the successful completion of each send WQE opcode ([`Wc::send_word2`]).
static SEND_WC_WORD2: [u64; 256] = {
    let mut t = [0; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Wc::word2(
            WcStatus::Success,
            WcOpcode::from_send_opcode(i as u8),
            WcFlags::empty(),
            0,
            0,
        );
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
// `repr(C)` in this order, five 8-byte words (`Wc::WORDS`): the WR id; the QPN and byte count;
// status, opcode, flags, SL and the immediate; the receive-only fields after them — so that
// the poll writes a completion in whole words (`Wc::write_send_words`, `Wc::write_recv`): four
// stores for a send, five for a receive.
#[repr(C)]
pub struct Wc {
    /// The WR's identifier, recovered from the CQE's `wqe_counter`.
    pub wr_id: u64,
    /// QPN of the local QP the WR was posted on.
    pub qp_num: u32,
    /// Bytes received (receives), read (READ), or the operand size (atomics); 0 otherwise.
    pub byte_len: u32,
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

// The word layout `Wc::write_send_words` and `Wc::write_recv` store (padding after `syndrome`).
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Wc>() == 8 * Wc::WORDS && align_of::<Wc>() == 8);
    assert!(offset_of!(Wc, wr_id) == 0);
    assert!(offset_of!(Wc, qp_num) == 8 && offset_of!(Wc, byte_len) == 12);
    assert!(offset_of!(Wc, status) == 16 && offset_of!(Wc, opcode) == 17);
    assert!(offset_of!(Wc, flags) == 18 && offset_of!(Wc, sl) == 19);
    assert!(offset_of!(Wc, imm_data) == 20 && offset_of!(Wc, src_qp) == 24);
    assert!(offset_of!(Wc, slid) == 28 && offset_of!(Wc, pkey_index) == 30);
    assert!(offset_of!(Wc, dlid_path_bits) == 32 && offset_of!(Wc, vendor_err) == 33);
    assert!(offset_of!(Wc, syndrome) == 34);
};

/// Two 32-bit halves as the native 8-byte word that holds `lo` at its lower address.
#[inline(always)]
const fn pair(lo: u32, hi: u32) -> u64 {
    if cfg!(target_endian = "little") {
        lo as u64 | (hi as u64) << 32
    } else {
        (lo as u64) << 32 | hi as u64
    }
}

impl Wc {
    /// 8-byte words in a `Wc`.
    pub(crate) const WORDS: usize = 5;

    /// Word 2 of a completion (status, opcode, flags, SL, immediate) as the native word.
    #[inline(always)]
    const fn word2(status: WcStatus, opcode: WcOpcode, flags: WcFlags, sl: u8, imm: u32) -> u64 {
        let i = imm.to_ne_bytes();
        u64::from_ne_bytes([
            status as u8,
            opcode as u8,
            flags.bits(),
            sl,
            i[0],
            i[1],
            i[2],
            i[3],
        ])
    }

    /// Word 2 (status Success, the opcode, no flags) of the successful completion of a send
    /// WQE of opcode `send_opcode` (`MLX5_OPCODE_*`), one table load.
    #[inline(always)]
    pub(crate) fn send_word2(send_opcode: u8) -> u64 {
        SEND_WC_WORD2[send_opcode as usize]
    }

    /// [`Wc::send_word2`] of a READ: its completion carries the bytes read.
    pub(crate) const READ_WORD2: u64 = Wc::word2(
        WcStatus::Success,
        WcOpcode::RdmaRead,
        WcFlags::empty(),
        0,
        0,
    );

    /// Word 1 (QPN, byte count 0) of a send completion of QP `qp_num`.
    #[inline(always)]
    pub(crate) const fn send_word1(qp_num: u32) -> u64 {
        pair(qp_num, 0)
    }

    /// Write a successful send completion to `out` from its words: `word1` is
    /// [`Wc::send_word1`], `word2` [`Wc::send_word2`] (four stores).
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc` and 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn write_send_words(out: *mut Wc, wr_id: u64, word1: u64, word2: u64) {
        let w = out as *mut u64;
        // SAFETY: the caller's; the words are the fields' bytes in the layout checked above
        // (`send_word1`, `send_word2`; status Success, flags empty, the rest 0 as in
        // `Wc::default()`), the padding 0: every field gets a valid value.
        unsafe {
            w.write(wr_id);
            w.add(1).write(word1);
            w.add(2).write(word2);
            w.add(3).write(0);
            w.add(4).write(0);
        }
    }

    /// Set the byte count of the completion at `out`.
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc`.
    #[inline(always)]
    pub(crate) unsafe fn set_byte_len(out: *mut Wc, byte_len: u32) {
        // SAFETY: the caller's.
        unsafe { (*out).byte_len = byte_len };
    }

    /// `byte_len` in word 1 (ORed into [`Wc::send_word1`]).
    #[inline(always)]
    pub(crate) const fn byte_len_word1(byte_len: u32) -> u64 {
        pair(0, byte_len)
    }

    /// Word 2 of a successful receive: opcode `Recv`, `flags`, `sl`, no immediate.
    #[inline(always)]
    pub(crate) const fn recv_word2(flags: WcFlags, sl: u8) -> u64 {
        Wc::word2(WcStatus::Success, WcOpcode::Recv, flags, sl, 0)
    }

    /// Word 3: `src_qp`, `slid`, `pkey_index`.
    #[inline(always)]
    pub(crate) const fn recv_word3(src_qp: u32, slid: u16, pkey_index: u16) -> u64 {
        let hi = if cfg!(target_endian = "little") {
            slid as u32 | (pkey_index as u32) << 16
        } else {
            (slid as u32) << 16 | pkey_index as u32
        };
        pair(src_qp, hi)
    }

    /// Word 4: `dlid_path_bits`, no vendor syndrome, no syndrome (and the padding 0).
    #[inline(always)]
    pub(crate) const fn recv_word4(dlid_path_bits: u8) -> u64 {
        u64::from_ne_bytes([dlid_path_bits, 0, 0, 0, 0, 0, 0, 0])
    }

    /// Write a successful receive completion to `out` from its words (five stores): word 1
    /// is [`Wc::send_word1`] ORed with [`Wc::byte_len_word1`], then [`Wc::recv_word2`],
    /// [`Wc::recv_word3`], [`Wc::recv_word4`].
    ///
    /// # Safety
    /// `out` is valid for writes of a `Wc` and 8-byte aligned.
    #[inline(always)]
    pub(crate) unsafe fn write_recv_words(
        out: *mut Wc,
        wr_id: u64,
        word1: u64,
        word2: u64,
        word3: u64,
        word4: u64,
    ) {
        let w = out as *mut u64;
        // SAFETY: the caller's; the words are the fields' bytes in the layout checked above,
        // built from valid values (status Success, opcode Recv, flags from `WcFlags`), the
        // rest 0 as in `Wc::default()`, the padding 0.
        unsafe {
            w.write(wr_id);
            w.add(1).write(word1);
            w.add(2).write(word2);
            w.add(3).write(word3);
            w.add(4).write(word4);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::MaybeUninit;

    /// A `Wc` written in words by `write`, over bytes that start as `fill`.
    fn written(fill: u8, write: impl FnOnce(*mut Wc)) -> Wc {
        let mut m = MaybeUninit::<Wc>::uninit();
        // SAFETY: the test's own storage; `write` initialises every word of it.
        unsafe {
            core::ptr::write_bytes(m.as_mut_ptr() as *mut u8, fill, core::mem::size_of::<Wc>());
            write(m.as_mut_ptr());
            m.assume_init()
        }
    }

    #[test]
    fn send_words_are_the_send_completion() {
        for send_op in 0..=255u8 {
            for fill in [0u8, 0xff] {
                // SAFETY: `p` is the test's `Wc`-sized, aligned storage.
                let wc = written(fill, |p| unsafe {
                    Wc::write_send_words(
                        p,
                        0x1122_3344_5566_7788,
                        Wc::send_word1(0x00ab_cdef),
                        Wc::send_word2(send_op),
                    );
                });
                let want = Wc {
                    wr_id: 0x1122_3344_5566_7788,
                    qp_num: 0x00ab_cdef,
                    opcode: WcOpcode::from_send_opcode(send_op),
                    ..Wc::default()
                };
                assert_eq!(wc, want, "send opcode {send_op:#x}");
                assert_eq!(
                    Wc::send_word2(send_op) == Wc::READ_WORD2,
                    want.opcode == WcOpcode::RdmaRead
                );
            }
        }
    }

    #[test]
    fn receive_words_are_the_receive_completion() {
        for (flags, sl, path) in [(WcFlags::GRH, 0xf, 0x7f), (WcFlags::empty(), 3, 0)] {
            // SAFETY: `p` is the test's `Wc`-sized, aligned storage.
            let wc = written(0xff, |p| unsafe {
                Wc::write_recv_words(
                    p,
                    7,
                    Wc::send_word1(0x12_3456) | Wc::byte_len_word1(0xdead_beef),
                    Wc::recv_word2(flags, sl),
                    Wc::recv_word3(0x65_4321, 0xbeef, 0xcafe),
                    Wc::recv_word4(path),
                );
            });
            let want = Wc {
                wr_id: 7,
                qp_num: 0x12_3456,
                byte_len: 0xdead_beef,
                opcode: WcOpcode::Recv,
                flags,
                sl,
                src_qp: 0x65_4321,
                slid: 0xbeef,
                pkey_index: 0xcafe,
                dlid_path_bits: path,
                ..Wc::default()
            };
            assert_eq!(wc, want);
        }
    }
}
