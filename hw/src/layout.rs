//! What a device hands the data path: the rings, doorbell records and UAR registers of a QP,
//! CQ or SRQ, exactly as `mlx5dv_init_obj` describes them (`struct mlx5dv_qp`, `mlx5dv_cq`,
//! `mlx5dv_srq` in rdma-core's `mlx5dv.h`).
//!
//! These records hold raw pointers into memory shared with the device. Creating a data-path
//! object from them is `unsafe` in the `qp` crate: the device guarantees that the memory stays
//! mapped until the object is destroyed.

use crate::attr::QpType;

/// One work queue (SQ or RQ) of a QP (`mlx5dv_qp.sq` / `.rq`).
#[derive(Clone, Copy, Debug)]
pub struct WqLayout {
    /// Ring base.
    pub buf: *mut u8,
    /// Entries in the ring: 64-byte basic blocks for the SQ, WQEs for the RQ; a power of two.
    pub wqe_cnt: u32,
    /// Bytes per entry: always 64 for the SQ; a power of two ≥ 16 for the RQ.
    pub stride: u32,
}

/// A BlueFlame register (`mlx5dv_qp.bf`).
#[derive(Clone, Copy, Debug)]
pub struct BfLayout {
    /// Base of this QP's bfreg inside a UAR page (for example UAR + 0x800).
    pub reg: *mut u8,
    /// Size of one half (256), or 0 when the register does not support BlueFlame
    /// (use the 8-byte doorbell only). rdma-core `mlx5dv_get_qp`.
    pub size: u32,
    /// Whether other QPs may ring this register too. rdma-core gives a context a few
    /// dedicated (low-latency) bfregs, `MLX5_NUM_LOW_LAT_UUARS` (default 4) of
    /// `MLX5_TOTAL_UUARS` (default 16), and the kernel (`alloc_bfreg`,
    /// `drivers/infiniband/hw/mlx5/qp.c`) then puts further QPs on the shared medium-class
    /// register with the fewest QPs, which rdma-core copies into under a per-register lock
    /// (`providers/mlx5` `struct mlx5_bf`, `need_lock`); two unserialised BlueFlame copies into
    /// one register interleave their 64-byte lines and the NIC executes a corrupt WQE
    /// (Mellanox/libxlio issue #123). The data path rings a shared register with the 8-byte
    /// doorbell only (`mlx5_qp::DoorbellMode::Db`), which needs no lock: an 8-byte store is
    /// one write (cost and reasoning: `docs/software-connectx.md`, "BlueFlame registers").
    /// The software ConnectX sets it for the QPs past its `dedicated_bfregs` and reports
    /// interleaved copies as a driver bug; the verbs backend creates every QP on a thread
    /// domain, whose register is dedicated (`docs/hardware.md`), and leaves it `false`.
    pub shared: bool,
}

/// Everything the data path needs to post on a QP.
#[derive(Clone, Copy, Debug)]
pub struct QpLayout {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Transport type.
    pub qp_type: QpType,
    /// The QP's doorbell record: `dbrec[0]` RQ counter, `dbrec[1]` SQ counter, both BE32
    /// (rdma-core `MLX5_RCV_DBR` = 0, `MLX5_SND_DBR` = 1).
    pub dbrec: *mut u32,
    /// Send queue (64-byte basic blocks).
    pub sq: WqLayout,
    /// Receive queue (`wqe_cnt` 0 when the QP uses an SRQ).
    pub rq: WqLayout,
    /// BlueFlame / doorbell register.
    pub bf: BfLayout,
    /// Largest inline payload the SQ was sized for.
    pub max_inline_data: u32,
    /// Largest number of gather entries per send WQE the SQ was sized for.
    pub max_send_sge: u32,
    /// Largest number of scatter entries per receive WQE.
    pub max_recv_sge: u32,
    /// Whether every send WQE must request a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Whether the receive side uses a shared receive queue.
    pub uses_srq: bool,
}

/// Everything the data path needs to poll and arm a CQ (`struct mlx5dv_cq`).
#[derive(Clone, Copy, Debug)]
pub struct CqLayout {
    /// CQE buffer: `cqe_cnt` entries of `cqe_size` bytes.
    pub buf: *mut u8,
    /// CQ doorbell record: `dbrec[0]` set_ci (24 bits), `dbrec[1]` arm, both BE32.
    pub dbrec: *mut u32,
    /// Entries, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: u32,
    /// The UAR page base; the arm doorbell is at +0x20 (`MLX5_CQ_DOORBELL`).
    pub cq_uar: *mut u8,
    /// CQ number (24 bits).
    pub cqn: u32,
    /// The CQ was created to ignore overrun: the device needs no consumer index (the data path
    /// writes it anyway, as rdma-core's `update_cons_index` does).
    pub ignore_overrun: bool,
}

/// Everything the data path needs to post on an SRQ (`struct mlx5dv_srq`, linked-list topology).
#[derive(Clone, Copy, Debug)]
pub struct SrqLayout {
    /// WQE buffer.
    pub buf: *mut u8,
    /// Doorbell record: one BE32, the 16-bit count of WQEs ever posted.
    pub dbrec: *mut u32,
    /// Bytes per WQE (a power of two ≥ 32: next segment + data segments).
    pub stride: u32,
    /// Number of WQEs in the buffer (`tail + 1`).
    pub wqe_cnt: u32,
    /// Index of the first free WQE (0 at creation).
    pub head: u32,
    /// Index of the last WQE of the free list.
    pub tail: u32,
    /// SRQ number (24 bits).
    pub srqn: u32,
    /// What a receive CQE of an XRC target QP carries in `srqn_uidx` for this SRQ, by which
    /// the data path finds the SRQ: its number with CQE version 0 (the software ConnectX's own
    /// CQs), the user index libmlx5 gave the XRC SRQ with version 1, which libmlx5 negotiates
    /// with mlx5_ib (rdma-core `providers/mlx5/cq.c` `get_resp_ctx_v1` → `mlx5_find_uidx`;
    /// kernel `drivers/infiniband/hw/mlx5/srq.c` `create_srq_user`, `uidx`). `srqn` for an SRQ
    /// that is not XRC: its CQEs name their QP, which names the SRQ.
    pub cqe_index: u32,
    /// Scatter entries per WQE.
    pub max_sge: u32,
}

// The layouts are plain descriptions of device-shared memory; they carry no thread affinity.
// Whoever dereferences the pointers (the `qp` crate, the sim) upholds the aliasing rules
// documented there.
// SAFETY: `WqLayout` is a ring base pointer and two counts into device-shared memory, with no
// thread affinity; nothing here dereferences the pointer.
unsafe impl Send for WqLayout {}
// SAFETY: as for `Send` above: a `&WqLayout` only reads the pointer value and the counts.
unsafe impl Sync for WqLayout {}
// SAFETY: as for WqLayout above: a plain pointer to a UAR register, no thread affinity; which
// threads may ring it is the `qp` crate's concern (`shared`).
unsafe impl Send for BfLayout {}
// SAFETY: as for WqLayout above: a `&BfLayout` only reads the pointer value and the flags.
unsafe impl Sync for BfLayout {}
// SAFETY: as for WqLayout above: plain pointers to device-shared memory (the doorbell record
// and the `WqLayout`/`BfLayout` fields), no thread affinity.
unsafe impl Send for QpLayout {}
// SAFETY: as for WqLayout above: a `&QpLayout` only reads pointer values and counts.
unsafe impl Sync for QpLayout {}
// SAFETY: as for WqLayout above: plain pointers to device-shared memory (CQE buffer, doorbell
// record, UAR page), no thread affinity.
unsafe impl Send for CqLayout {}
// SAFETY: as for WqLayout above: a `&CqLayout` only reads pointer values and counts.
unsafe impl Sync for CqLayout {}
// SAFETY: as for WqLayout above: plain pointers to device-shared memory (WQE buffer, doorbell
// record), no thread affinity.
unsafe impl Send for SrqLayout {}
// SAFETY: as for WqLayout above: a `&SrqLayout` only reads pointer values and indices.
unsafe impl Sync for SrqLayout {}
