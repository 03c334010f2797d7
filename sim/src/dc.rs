//! DC objects on a device, the control path's side: creating DC initiators and targets as
//! `mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` creates them (rdma-core
//! `providers/mlx5/verbs.c` `create_qp` and `create_dct`; kernel
//! `drivers/infiniband/hw/mlx5/qp.c` `create_dci` / `create_dct`), a target's number once it
//! is in RTR, DCI stream caps, and what a target counted. The packet side is
//! [`crate::transport::dc`]; the state machine is the project's table
//! (`mlx5_hw::qp_state`, its DCI and DCT columns).
//!
//! This is the entry point an rdma-core emulation calls for `mlx5dv_create_qp` with DC
//! attributes: [`mlx5_hw::Device::create_qp_ex`] with [`mlx5_hw::QpInitEx::dc`] set, then
//! `modify_qp`, [`mlx5_hw::Device::dct_number`] for what `modify_dct` returns as `dctn` at
//! RTR, and [`DCI_STREAMS_CAPS`] for `mlx5dv_query_device`'s `dci_streams_caps`.

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
    let bad = |why: String| Err(Error::InvalidArgument(why));
    match (attr.qp_type, dc) {
        (QpType::Dci, Some(DcInit::Initiator { streams })) => {
            if attr.srq.is_some() || attr.cap.max_recv_wr > 0 {
                return bad(
                    "a DCI has no receive side (nothing can deliver to a DC initiator): no SRQ, \
                     max_recv_wr 0"
                        .into(),
                );
            }
            if let Some(s) = streams {
                let cap = DCI_STREAMS_CAPS;
                if s.log_num_concurent > cap.log_num_concurent
                    || s.log_num_errored > cap.log_num_errored
                {
                    // rdma-core `mlx5_create_qp`: EINVAL above `dci_streams_caps`.
                    return bad(format!(
                        "DCI streams log_num_concurent {} / log_num_errored {} exceed the \
                         device's caps {} / {} (mlx5dv_query_device dci_streams_caps)",
                        s.log_num_concurent,
                        s.log_num_errored,
                        cap.log_num_concurent,
                        cap.log_num_errored
                    ));
                }
            }
            Ok(())
        }
        (QpType::Dct, Some(DcInit::Target { .. })) => {
            if attr.srq.is_none() {
                return bad(
                    "a DCT receives through an SRQ (kernel create_dct takes its srqn): give one"
                        .into(),
                );
            }
            if attr.cap.max_send_wr > 0 || attr.cap.max_recv_wr > 0 {
                return bad("a DCT has no send queue and no receive queue: caps must be 0".into());
            }
            Ok(())
        }
        (QpType::Dci | QpType::Dct, None) => bad(format!(
            "a {} QP is created with create_qp_ex and its DC attributes (QpInitEx::dc; rdma-core \
             answers EINVAL for IBV_QPT_DRIVER without MLX5DV_QP_INIT_ATTR_MASK_DC)",
            attr.qp_type
        )),
        (t, Some(d)) => bad(format!(
            "DC attributes {d:?} do not fit a {t} QP (a DCI takes Initiator, a DCT Target)"
        )),
        (_, None) => Ok(()),
    }
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
