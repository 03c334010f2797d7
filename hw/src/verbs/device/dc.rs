//! DC through mlx5dv: DC initiators and targets created with `mlx5dv_create_qp`,
//! `IBV_QPT_DRIVER` and `MLX5DV_QP_INIT_ATTR_MASK_DC` (rdma-core `providers/mlx5/mlx5dv.h`
//! `struct mlx5dv_dc_init_attr`; `providers/mlx5/verbs.c` `mlx5_create_qp`, `create_dct`).
//!
//! - A DCI is an ordinary mlx5 QP for the library: a send queue, its own doorbell record and
//!   BlueFlame register (created, like every QP here, on a parent domain with a thread domain
//!   of its own, [`super::mlx5::create_qp_dv`]); its rings come from `mlx5dv_init_obj`.
//! - A DCT has no queue, no doorbell record and no UAR: rdma-core's `create_dct` allocates none
//!   (so `mlx5dv_init_obj` must not be asked about it: `mlx5dv_get_qp` reads the QP's
//!   BlueFlame register, which a DCT has not). Its `create_dct` accepts only
//!   `IBV_QP_INIT_ATTR_PD` in `comp_mask` and only the DC and create-flag bits in the mlx5dv
//!   mask. It gets its number at RTR (`modify_dct` copies `resp.dctn` into `ibv_qp.qp_num`).
//! - The kernel answers `ibv_query_qp` on a DCT only in RTR and only for a few attributes
//!   (`drivers/infiniband/hw/mlx5/qp.c` `mlx5_ib_dct_query_qp`), so the state the modifies
//!   are checked against is kept here for a DCT ([`QpEntry::dct_state`]) instead of asked for.

use super::*;
use crate::device::DcInit;

/// What `ibv_query_qp` may ask of a DCT (kernel `mlx5_ib_dct_query_qp`, `supported_mask`).
pub(super) const DCT_QUERY_MASK: AttrMask = AttrMask::STATE
    .union(AttrMask::ACCESS_FLAGS)
    .union(AttrMask::PORT)
    .union(AttrMask::MIN_RNR_TIMER)
    .union(AttrMask::AV)
    .union(AttrMask::PATH_MTU)
    .union(AttrMask::PKEY_INDEX);

impl VerbsDevice {
    /// Create a DCI or DCT of `attr` with the DC attributes `dc` (checked first as mlx5
    /// checks them, [`DcInit::check_create`]; the device checks the DCI streams against its
    /// `dci_streams_caps`).
    pub(super) fn create_dc(&self, pd: PdId, attr: &QpInitAttr, dc: DcInit) -> Result<QpInfo> {
        DcInit::check_create(attr, Some(dc), None)?;
        if !self.mlx5 {
            return Err(Error::Unsupported(format!(
                "{} QP on {}: DC is mlx5's (mlx5dv_create_qp with MLX5DV_QP_INIT_ATTR_MASK_DC)",
                attr.qp_type, self.name
            )));
        }
        let mut objs = self.lock();
        let pd_ptr = Self::pd_ptr(&objs, pd)?;
        // SAFETY: all-zero is a valid `ibv_qp_init_attr_ex` (integers and NULL pointers).
        let mut a: ibv::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.send_cq = Self::cq_ptr(&objs, attr.send_cq)?;
        a.recv_cq = Self::cq_ptr(&objs, attr.recv_cq)?;
        a.srq = match attr.srq {
            Some(s) => objs.srqs.get(s.0)?.srq,
            None => std::ptr::null_mut(),
        };
        a.cap = cap_to_ibv(&attr.cap);
        a.qp_type = qp_type_to_ibv(attr.qp_type);
        a.sq_sig_all = c_int::from(attr.sq_sig_all);
        a.comp_mask = ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        a.pd = pd_ptr;
        let mut d = dv::mlx5dv_qp_init_attr {
            comp_mask: dv::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS
                | dv::MLX5DV_QP_INIT_ATTR_MASK_DC,
            create_flags: dv::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
            ..Default::default()
        };
        let (qp, parent, td, dct) = match dc {
            DcInit::Initiator { streams } => {
                d.dc_init_attr.dc_type = dv::MLX5DV_DCTYPE_DCI;
                if let Some(s) = streams {
                    d.comp_mask |= dv::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
                    d.dc_init_attr.u.dci_streams = dv::mlx5dv_dci_streams {
                        log_num_concurent: s.log_num_concurent,
                        log_num_errored: s.log_num_errored,
                    };
                }
                let (qp, parent, td) =
                    mlx5::create_qp_dv(self.rdma, self.ctx, pd_ptr, &mut a, &mut d)?;
                (qp, parent, td, false)
            }
            DcInit::Target { access_key } => {
                d.dc_init_attr.dc_type = dv::MLX5DV_DCTYPE_DCT;
                d.dc_init_attr.u.dct_access_key = access_key;
                // SAFETY: `ctx` is open; `a` and `d` are valid for the call; the pointer types
                // are those of the same C structs.
                let qp = unsafe {
                    self.rdma.mlx5dv_create_qp(
                        self.ctx.cast::<dv::ibv_context>(),
                        (&mut a as *mut ibv::ibv_qp_init_attr_ex).cast::<dv::ibv_qp_init_attr_ex>(),
                        &mut d,
                    )
                };
                if qp.is_null() {
                    return Err(null_error("mlx5dv_create_qp(MLX5DV_DCTYPE_DCT)"));
                }
                (
                    qp.cast::<ibv::ibv_qp>(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    true,
                )
            }
        };
        let cap = cap_from_ibv(&a.cap);
        let layout = if dct {
            queueless_layout(QpType::Dct, 0)
        } else {
            match mlx5::qp_layout(self.rdma, qp, attr, &cap) {
                Ok(l) => l,
                Err(e) => {
                    // SAFETY: created above, not referenced elsewhere.
                    unsafe { destroy_qp_and_domains(self.rdma, qp, parent, td) };
                    return Err(e);
                }
            }
        };
        // SAFETY: `qp` is live. A DCT's reads 0 until RTR.
        let qpn = unsafe { (*qp).qp_num };
        let id = objs.qps.insert(QpEntry {
            qp,
            parent,
            td,
            qp_type: attr.qp_type,
            pd: Some(pd),
            send_cq: Some(attr.send_cq),
            recv_cq: Some(attr.recv_cq),
            srq: attr.srq,
            xrcd: None,
            claimed: false,
            dct_state: dct.then_some(QpState::Reset),
        });
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: created above, not referenced elsewhere.
                unsafe { destroy_qp_and_domains(self.rdma, qp, parent, td) };
                return Err(e);
            }
        };
        tracing::debug!(device = %self.name, qpn, qp_type = %attr.qp_type, "created DC QP");
        Ok(QpInfo {
            id: QpId(id),
            qpn,
            qp_type: attr.qp_type,
            cap,
            layout,
        })
    }

    /// The number of DCT `qp` in RTR: `ibv_qp.qp_num`, which rdma-core's `modify_dct` set from
    /// the kernel's `dctn` at RTR.
    pub(super) fn dct_number_verbs(&self, qp: QpId) -> Result<u32> {
        let objs = self.lock();
        let e = objs.qps.get(qp.0)?;
        match e.dct_state {
            // SAFETY: `e.qp` is live (the lock is held).
            Some(QpState::Rtr) => Ok(unsafe { (*e.qp).qp_num }),
            Some(s) => Err(Error::InvalidArgument(format!(
                "DCT {} is in {s}: a DCT gets its number when it moves to RTR",
                qp.0
            ))),
            None => Err(Error::InvalidArgument(format!(
                "QP {} is a {} QP, not a DC target",
                qp.0, e.qp_type
            ))),
        }
    }
}
