//! DC objects on a device, the control path's side: creating DC initiators and targets as
//! `mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` creates them (rdma-core
//! `providers/mlx5/verbs.c` `create_qp` and `create_dct`; kernel
//! `drivers/infiniband/hw/mlx5/qp.c` `create_dci` / `create_dct`), a target's number once it
//! is in RTR, DCI stream caps, and what a target counted. The packet side is
//! [`crate::transport::dc`]; the state machine is the project's table
//! (`mlx5_hw::qp_state`, its DCI and DCT columns).
//!
//! This is the entry point an rdma-core emulation calls for `mlx5dv_create_qp` with DC
//! attributes: [`mlx5_hw::Device::create_qp_ex`] with [`mlx5_hw::QpInitEx::dc`] set (a DCT:
//! no memory of the program's), or, for a DCI whose rings libmlx5 allocated, the QP created
//! on them with type [`QpType::Dci`] and then [`crate::SimDevice::make_dc`] ([`make_dc`]);
//! then `modify_qp`, [`mlx5_hw::Device::dct_number`] for what `modify_dct` returns as `dctn`
//! at RTR, and [`DCI_STREAMS_CAPS`] for `mlx5dv_query_device`'s `dci_streams_caps`.

use mlx5_hw::{DcInit, DciStreams, Error, QpInitAttr, QpType, Result};

use crate::qp::dc::{DcState, Dci, Dct};
use crate::world::Dev;

/// The DCI stream capabilities the software ConnectX reports (`struct
/// mlx5dv_dci_streams_caps`: `max_log_num_concurent`, `max_log_num_errored`). The values are
/// the model's own choice (16 concurrent streams, 16 errored); a ConnectX reports its own.
pub const DCI_STREAMS_CAPS: DciStreams = DciStreams {
    log_num_concurent: 4,
    log_num_errored: 4,
};

/// What `create_qp_ex` refuses of DC attributes before anything is made, as rdma-core
/// `mlx5_create_qp` and the kernel refuse it: DC attributes on another QP type, a DC type
/// without them, the wrong kind for the type, a DCI with a receive side, a DCT without an SRQ
/// or with a send or receive queue, streams above [`DCI_STREAMS_CAPS`].
pub fn check_create(attr: &QpInitAttr, dc: Option<DcInit>) -> Result<()> {
    DcInit::check_create(attr, dc, Some(DCI_STREAMS_CAPS))
}

/// Give the QP `qpn` just created its DC state. A target gets the device's responder
/// resources (a DCT has no `max_dest_rd_atomic` of its own; mlx5 sizes them) and raises no
/// communication-established event (it is not a connected QP).
pub fn adopt(d: &mut Dev, qpn: u32, dc: DcInit) {
    let Some(qp) = d.qps.get_mut(&qpn) else {
        return;
    };
    qp.dc = Some(match dc {
        DcInit::Initiator { streams } => DcState::Initiator(Dci {
            streams,
            ..Dci::default()
        }),
        DcInit::Target { access_key } => {
            qp.attr.max_dest_rd_atomic = crate::modify::MAX_RD_ATOMIC as u8;
            qp.comm_est = true;
            DcState::Target(Dct {
                key: access_key,
                ..Dct::default()
            })
        }
        // `check_create` refused any other kind.
        _ => return,
    });
}

/// Make QP `qpn`, created elsewhere (an rdma-core emulation's QP on the program's own memory),
/// the DC initiator or target `dc` says: it must be of the matching type ([`QpType::Dci`] /
/// [`QpType::Dct`]), in Reset, not DC yet, and have what [`check_create`] asks of its
/// attributes (a DCI no receive side, a DCT an SRQ and no queues).
pub fn make_dc(d: &mut Dev, qpn: u32, dc: DcInit) -> Result<()> {
    let qp = d.qps.get(&qpn).ok_or(Error::UnknownHandle {
        kind: "QP",
        id: qpn,
    })?;
    let attr = QpInitAttr {
        qp_type: qp.qp_type,
        send_cq: mlx5_hw::CqId(qp.send_cq),
        recv_cq: mlx5_hw::CqId(qp.recv_cq),
        srq: qp.srq.map(mlx5_hw::SrqId),
        cap: qp.geom.cap,
        sq_sig_all: qp.sq_sig_all,
    };
    check_create(&attr, Some(dc))?;
    if qp.dc.is_some() || qp.state() != mlx5_hw::QpState::Reset {
        return Err(Error::InvalidArgument(format!(
            "QP {qpn:#x} is already DC or has left Reset: DC attributes are given at creation"
        )));
    }
    adopt(d, qpn, dc);
    Ok(())
}

/// The number of DC target `qpn`: its QPN, once it is in RTR (before, the target has no
/// number: rdma-core reads `dctn` from the modify to RTR).
pub fn dct_number(d: &Dev, qpn: u32) -> Result<u32> {
    let qp = d.qps.get(&qpn).ok_or(Error::UnknownHandle {
        kind: "QP",
        id: qpn,
    })?;
    if qp.qp_type != QpType::Dct {
        return Err(Error::InvalidArgument(format!(
            "QP {qpn:#x} is a {} QP, not a DC target",
            qp.qp_type
        )));
    }
    if qp.state() != mlx5_hw::QpState::Rtr {
        return Err(Error::InvalidArgument(format!(
            "DCT {qpn:#x} is in {}: a DCT gets its number when it moves to RTR",
            qp.state()
        )));
    }
    Ok(qp.qpn)
}

/// What `query_qp` refuses of a DC target: any query outside RTR (kernel
/// `drivers/infiniband/hw/mlx5/qp.c` `mlx5_ib_dct_query_qp`: EINVAL unless the DCT is in RTR;
/// the DCT exists in the device only from RTR on).
pub fn check_query(d: &Dev, qpn: u32) -> Result<()> {
    match d.qps.get(&qpn) {
        Some(qp) if qp.qp_type == QpType::Dct && qp.state() != mlx5_hw::QpState::Rtr => {
            Err(Error::InvalidArgument(format!(
                "query_qp: DCT {qpn:#x} is in {}; a DCT can be queried in RTR only (mlx5 \
                 mlx5_ib_dct_query_qp)",
                qp.state()
            )))
        }
        _ => Ok(()),
    }
}

/// What a DC target or initiator counted ([`crate::SimDevice::dc_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DcStats {
    /// Connections opened.
    pub connects: u64,
    /// Connections closed.
    pub disconnects: u64,
    /// Target: connections open now; initiator: 1 while connected.
    pub open: usize,
    /// Target: requests dropped for a wrong access key.
    pub key_violations: u64,
    /// Initiator: WQEs that waited for the previous target's requests to be acknowledged.
    pub waits: u64,
}

/// [`DcStats`] of DC QP `qpn`.
pub fn stats(d: &mut Dev, qpn: u32) -> Result<DcStats> {
    let qp = d.qps.get_mut(&qpn).ok_or(Error::UnknownHandle {
        kind: "QP",
        id: qpn,
    })?;
    match qp.dc.as_mut() {
        Some(DcState::Initiator(i)) => Ok(DcStats {
            connects: i.connects,
            disconnects: i.disconnects,
            open: usize::from(i.conn.is_some()),
            key_violations: 0,
            waits: i.waits,
        }),
        Some(DcState::Target(t)) => Ok(DcStats {
            connects: t.connects,
            disconnects: t.disconnects,
            open: t.conns.len(),
            key_violations: t.key_violations,
            waits: 0,
        }),
        None => Err(Error::InvalidArgument(format!(
            "QP {qpn:#x} is a {} QP, not a DC one",
            qp.qp_type
        ))),
    }
}
