//! Atomic operations of a WQE: plain 8-byte CmpSwap / FetchAdd and the masked (extended)
//! ones on 4 or 8 bytes, their segments and what they compute.

use mlx5_wqe::{
    OPCODE_ATOMIC_CS, OPCODE_ATOMIC_FA, OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA,
    OPMOD_EXT_ATOMIC_32, OPMOD_EXT_ATOMIC_64,
};

use super::segments::Reader;
use super::{be32, be64, op_err, Ctrl, WqeFault};

/// An atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// 8-byte compare and swap.
    Cas {
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch and add.
    Faa {
        /// Addend.
        add: u64,
    },
    /// Masked compare and swap on 4 or 8 bytes.
    MaskedCs {
        /// Operand size (4 or 8).
        size: u8,
        /// Compare value.
        compare: u64,
        /// Compare mask.
        compare_mask: u64,
        /// Swap value.
        swap: u64,
        /// Swap mask.
        swap_mask: u64,
    },
    /// Masked fetch and add on 4 or 8 bytes.
    MaskedFa {
        /// Operand size (4 or 8).
        size: u8,
        /// Addend.
        add: u64,
        /// Field boundary bits.
        boundary: u64,
    },
}

impl AtomicOp {
    /// Operand size in bytes.
    pub fn size(&self) -> u8 {
        match self {
            AtomicOp::Cas { .. } | AtomicOp::Faa { .. } => 8,
            AtomicOp::MaskedCs { size, .. } | AtomicOp::MaskedFa { size, .. } => *size,
        }
    }

    /// Whether this is a masked (extended) atomic.
    pub fn is_masked(&self) -> bool {
        matches!(self, AtomicOp::MaskedCs { .. } | AtomicOp::MaskedFa { .. })
    }

    /// Apply the operation to `old`, returning the new value (operands of `size` bytes).
    pub fn apply(&self, old: u64) -> u64 {
        let mask = if self.size() == 4 {
            0xffff_ffff
        } else {
            u64::MAX
        };
        let new = match *self {
            AtomicOp::Cas { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::Faa { add } => old.wrapping_add(add),
            AtomicOp::MaskedCs {
                compare,
                compare_mask,
                swap,
                swap_mask,
                ..
            } => {
                if (old & compare_mask) == (compare & compare_mask) {
                    (old & !swap_mask) | (swap & swap_mask)
                } else {
                    old
                }
            }
            AtomicOp::MaskedFa {
                size,
                add,
                boundary,
            } => field_add(old, add, boundary, size),
        };
        new & mask
    }
}

/// The byte order a device's atomics use for the operand in the target's memory and for the
/// original value written into the requester's buffer (the wire fields, AtomicETH and
/// AtomicAckETH, are big-endian whatever the mode, IBTA Vol 1 §9.3.4, §9.3.6).
///
/// An mlx5 device offers the 8-byte requester modes big-endian (0) and host endianness (1) in
/// `atomic_caps.supported_atomic_req_8B_endianness_mode_1`, and `mlx5_core` sets
/// `atomic_req_8B_endianness_mode` to host endianness whenever it is offered (kernel
/// `drivers/net/ethernet/mellanox/mlx5/core/main.c` `handle_hca_cap_atomic`); `mlx5_ib` reports
/// `IB_ATOMIC_HCA` only then (`IB_ATOMIC_NONE` otherwise). Linux rxe runs atomics on a native
/// `u64` as well (`drivers/infiniband/sw/rxe/rxe_resp.c`). The mode covers 8-byte plain and
/// 64-bit masked atomics; 32-bit masked atomics always reply big-endian (UCX
/// `src/uct/ib/mlx5/dv/ib_mlx5dv_md.c`: `atomic_arg_sizes_be` holds 8 only in mode 0,
/// `ext_atomic_arg_sizes_be` loses 8 but keeps 4 in mode 1). A 32-bit masked atomic operates on
/// a host-order word in host mode (UCX posts its 32-bit ADD/AND/OR/XOR as masked atomics on
/// host integers, `uct_rc_mlx5_ep_atomic_op_post`), which is this model's reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AtomicEndianness {
    /// `MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS`: targets and 8-byte replies in host order (little
    /// endian on x86 and arm64 Linux); what Linux sets when the device supports it.
    #[default]
    Host,
    /// `atomic_req_8B_endianness_mode` 0 (a device without the host-endianness capability):
    /// targets and replies big-endian.
    Big,
}

impl AtomicEndianness {
    /// The value of a 4- or 8-byte atomic target (`b`) as the device reads it.
    pub fn load(self, b: &[u8]) -> u64 {
        let n = b.len().min(8);
        let mut w = [0u8; 8];
        if self.target_big() {
            w[8 - n..].copy_from_slice(&b[..n]);
            u64::from_be_bytes(w)
        } else {
            w[..n].copy_from_slice(&b[..n]);
            u64::from_le_bytes(w)
        }
    }

    /// The `size` bytes (4 or 8) of `v` as the device stores them in the target.
    pub fn store(self, v: u64, size: u8) -> Vec<u8> {
        bytes(v, size, self.target_big())
    }

    /// The `size` bytes (4 or 8) of the original value as the requester writes them into its
    /// buffer: 8-byte replies per the mode, 4-byte (masked) replies always big-endian.
    pub fn reply(self, orig: u64, size: u8) -> Vec<u8> {
        bytes(orig, size, size == 4 || self.target_big())
    }

    /// Whether targets are big-endian in memory (host order on a big-endian host, too).
    fn target_big(self) -> bool {
        self == AtomicEndianness::Big || cfg!(target_endian = "big")
    }
}

/// The low `size` bytes of `v`, big-endian or little-endian.
fn bytes(v: u64, size: u8, big: bool) -> Vec<u8> {
    let n = (size as usize).min(8);
    if big {
        v.to_be_bytes()[8 - n..].to_vec()
    } else {
        v.to_le_bytes()[..n].to_vec()
    }
}

/// Add `a + b` bit by bit, dropping the carry out of every bit set in `boundary` (each set bit
/// ends a field; UCX `uct_ib_mlx5_atomic_masked_fadd*`, mlx5 extended atomics).
fn field_add(a: u64, b: u64, boundary: u64, size: u8) -> u64 {
    let bits = size as u32 * 8;
    let mut r = 0u64;
    let mut carry = 0u64;
    for i in 0..bits {
        let s = ((a >> i) & 1) + ((b >> i) & 1) + carry;
        r |= (s & 1) << i;
        carry = s >> 1;
        if (boundary >> i) & 1 == 1 {
            carry = 0;
        }
    }
    r
}

/// The atomic segment after the remote address (rdma-core `mlx5dv.h` `struct
/// mlx5_wqe_atomic_seg`: swap/add then compare, 16 bytes) or the masked one (UCX
/// `uct_ib_mlx5_atomic_masked_cswap*_seg` / `fadd*_seg`: 32 bytes for an 8-byte masked CmpSwap,
/// 16 otherwise; opmod 0x08 for 4-byte and 0x09 for 8-byte operands); `None` for any other
/// opcode.
pub(super) fn segment(r: &mut Reader, ctrl: &Ctrl) -> Result<Option<AtomicOp>, WqeFault> {
    let (b, off) = (r.b, r.off);
    let op = match ctrl.opcode {
        OPCODE_ATOMIC_CS => {
            r.need(16, "atomic")?;
            AtomicOp::Cas {
                swap: be64(b, off),
                compare: be64(b, off + 8),
            }
        }
        OPCODE_ATOMIC_FA => {
            r.need(16, "atomic")?;
            AtomicOp::Faa { add: be64(b, off) }
        }
        OPCODE_ATOMIC_MASKED_CS | OPCODE_ATOMIC_MASKED_FA => {
            masked(r, ctrl.opmod, ctrl.opcode == OPCODE_ATOMIC_MASKED_CS)?
        }
        _ => return Ok(None),
    };
    r.off += if matches!(op, AtomicOp::MaskedCs { size: 8, .. }) {
        32
    } else {
        16
    };
    Ok(Some(op))
}

fn masked(r: &Reader, opmod: u8, cs: bool) -> Result<AtomicOp, WqeFault> {
    let (b, off) = (r.b, r.off);
    Ok(match (opmod, cs) {
        (OPMOD_EXT_ATOMIC_64, true) => {
            r.need(32, "masked atomic")?;
            AtomicOp::MaskedCs {
                size: 8,
                swap: be64(b, off),
                compare: be64(b, off + 8),
                swap_mask: be64(b, off + 16),
                compare_mask: be64(b, off + 24),
            }
        }
        (OPMOD_EXT_ATOMIC_64, false) => {
            r.need(16, "masked atomic")?;
            AtomicOp::MaskedFa {
                size: 8,
                add: be64(b, off),
                boundary: be64(b, off + 8),
            }
        }
        (OPMOD_EXT_ATOMIC_32, true) => {
            r.need(16, "masked atomic")?;
            AtomicOp::MaskedCs {
                size: 4,
                swap: be32(b, off) as u64,
                compare: be32(b, off + 4) as u64,
                swap_mask: be32(b, off + 8) as u64,
                compare_mask: be32(b, off + 12) as u64,
            }
        }
        (OPMOD_EXT_ATOMIC_32, false) => {
            r.need(16, "masked atomic")?;
            AtomicOp::MaskedFa {
                size: 4,
                add: be32(b, off) as u64,
                boundary: be32(b, off + 4) as u64,
            }
        }
        (m, _) => {
            return Err(op_err(format!(
                "masked atomic opmod {m:#04x} is neither 0x08 (4-byte) nor 0x09 (8-byte)"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_fetch_add_respects_field_boundaries() {
        // Two 8-bit fields in the low 16 bits: boundary bits at 7 and 15.
        let op = AtomicOp::MaskedFa {
            size: 4,
            add: 0x0101,
            boundary: 0x8080,
        };
        assert_eq!(op.apply(0x01ff), 0x0200);
        let plain = AtomicOp::MaskedFa {
            size: 4,
            add: 1,
            boundary: 0,
        };
        assert_eq!(plain.apply(0xffff_ffff), 0);
        let cs = AtomicOp::MaskedCs {
            size: 8,
            compare: 0xab00,
            compare_mask: 0xff00,
            swap: 0x12,
            swap_mask: 0xff,
        };
        assert_eq!(cs.apply(0xab34), 0xab12);
        assert_eq!(cs.apply(0xac34), 0xac34);
    }

    #[test]
    fn atomic_byte_orders() {
        let (h, b) = (AtomicEndianness::Host, AtomicEndianness::Big);
        let v = 0x0102_0304_0506_0708u64;
        assert_eq!(h.store(v, 8), v.to_ne_bytes());
        assert_eq!(b.store(v, 8), v.to_be_bytes());
        assert_eq!(h.load(&v.to_ne_bytes()), v);
        assert_eq!(b.load(&v.to_be_bytes()), v);
        assert_eq!(h.store(0x0a0b_0c0d, 4), 0x0a0b_0c0du32.to_ne_bytes());
        assert_eq!(h.load(&0x0a0b_0c0du32.to_ne_bytes()), 0x0a0b_0c0d);
        assert_eq!(b.load(&0x0a0b_0c0du32.to_be_bytes()), 0x0a0b_0c0d);
        // 8-byte replies follow the mode; 4-byte (masked) replies are always big-endian.
        assert_eq!(h.reply(v, 8), v.to_ne_bytes());
        assert_eq!(b.reply(v, 8), v.to_be_bytes());
        assert_eq!(h.reply(0x0a0b_0c0d, 4), 0x0a0b_0c0du32.to_be_bytes());
        assert_eq!(b.reply(0x0a0b_0c0d, 4), 0x0a0b_0c0du32.to_be_bytes());
    }
}
