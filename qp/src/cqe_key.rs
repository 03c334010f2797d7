//! What names a QP in its CQEs, as the poll loads it: the QP computes these once from its QPN
//! (`Qp::from_layout`), the CQ compares them with one load of a CQE's last eight bytes. A
//! leaf module below both, so that neither `qp` nor `cq` takes a name from the other to agree
//! on them.
//!
//! The bytes are `struct mlx5_cqe64`'s last eight (rdma-core v44 `providers/mlx5/mlx5dv.h`):
//! bytes 56..60 `sop_drop_qpn` (BE32: opcode 31:24, QPN 23:0),
//! 60..62 `wqe_counter` (BE16), 62 `signature`, 63 `op_own`.

/// The QPN's part of [`expect`]: bytes 57..60 of a CQE's last-8 load (QPN 23:0, big-endian)
/// in a little-endian `u64`.
pub(crate) const fn qpn_key(qpn: u32) -> u64 {
    let b = (qpn & 0x00ff_ffff).to_be_bytes();
    u64::from_le_bytes([b[0], b[1], b[2], b[3], 0, 0, 0, 0])
}

/// The QPN's bytes of a CQE's `sop_drop_qpn` as a native `u32` load of it holds them, the
/// opcode byte 0 (what [`crate::Resolve::qp_of_cqe`] compares after masking the opcode off).
pub(crate) const fn sop_key(qpn: u32) -> u32 {
    let b = (qpn & 0x00ff_ffff).to_be_bytes();
    u32::from_ne_bytes([0, b[1], b[2], b[3]])
}

/// What a little-endian load of bytes 56..64 of a CQE of the QP whose [`qpn_key`] is
/// `qpn_key` naming WQE (or block) `counter` holds under the QPN and counter bytes:
/// `sop_drop_qpn` then `wqe_counter` (BE16).
#[inline(always)]
pub(crate) fn expect(qpn_key: u64, counter: u16) -> u64 {
    qpn_key | (u16::from_le_bytes(counter.to_be_bytes()) as u64) << 32
}
