//! `modify_qp` and `query_qp` as the kernel driver and the firmware carry them out.
//!
//! Every modify is first checked by the one state table of the project,
//! `mlx5_hw::qp_state::validate_with_limits` under the default kernel
//! (`KernelVersion::DEFAULT`, Linux 7.2: the kernel's `qp_state_table` and
//! `ib_modify_qp_is_ok`, what uverbs and `_ib_modify_qp` check before them — undefined mask
//! bits, the `IBV_QP_PORT` uverbs adds to an `IBV_QP_AV`, a RoCE address without a GRH,
//! `IBV_QP_ALT_PATH` on RoCE — plus the device's limits). Then, as the 7.2 `mlx5_ib_modify_qp`
//! does with `IBV_QP_RATE_LIMIT`, which the 7.2 table lets through (kernel commit
//! 8b0c66fa058b34015fcc7cafc9dea86dd91d8db9): mlx5 paces raw-packet QPs, and UD/UC QPs only
//! where the device reports `packet_pacing_req_ud`/`_uc` (`drivers/infiniband/hw/mlx5/qp.c`
//! `qp_rl_parse`, commit 29e0a014ddfbdbd6b02684304dddbcf9161034ae "RDMA/mlx5: Add support for
//! rate limit in UD and UC QPs"); the software ConnectX has neither, so the driver answers
//! EOPNOTSUPP — for a mask of `IBV_QP_RATE_LIMIT` alone on a QP not in RTS at once, before the
//! state table (the deferred rate limit of commit 915bbc8578e3f784b35bd9e5fa06a3b0720eb292
//! "RDMA/mlx5: Support deferred rate limit configuration"), otherwise in
//! `__mlx5_ib_modify_qp`, which a Reset→Reset modify never reaches (`mlx5_ib_modify_qp`
//! returns 0 for it first, so it succeeds); the attributes in the mask — and the port uverbs added — are stored
//! (query returns what was set; the alternate path and the path-migration state too, on an
//! InfiniBand port, though the device never migrates); Reset zeroes the
//! doorbell record and the ring indexes (rdma-core `mlx5_modify_qp`); RTR resolves the path's
//! destination MAC from the GID (the kernel resolves it through the neighbour table; here,
//! through the fabric: an unknown GID refuses the modify) and loads the expected PSN; RTS
//! loads the send PSN and the retry counters; SQD arms the SQ-drained event when asked; Error
//! flushes (no async event: the application asked for it).

use mlx5_hw::qp_state::{uverbs_view, validate_with_limits, DeviceLimits, KernelVersion};
use mlx5_hw::{AttrMask, Error, LinkLayer, ModifyError, QpAttr, QpState, QpType, Result};

use crate::engine::flush;
use crate::transport::{flow_label_of_qpns, flow_label_to_udp_sport, Path};
use crate::wire::{Addressing, Psn};
use crate::world::World;

/// Largest `max_rd_atomic` / `max_dest_rd_atomic` (ConnectX reports 16).
pub const MAX_RD_ATOMIC: u32 = 16;

fn copy_masked(dst: &mut QpAttr, src: &QpAttr, mask: AttrMask) {
    if mask.contains(AttrMask::ACCESS_FLAGS) {
        dst.qp_access_flags = src.qp_access_flags;
    }
    if mask.contains(AttrMask::PKEY_INDEX) {
        dst.pkey_index = src.pkey_index;
    }
    if mask.contains(AttrMask::PORT) {
        dst.port_num = src.port_num;
    }
    if mask.contains(AttrMask::QKEY) {
        dst.qkey = src.qkey;
    }
    if mask.contains(AttrMask::AV) {
        dst.ah_attr = src.ah_attr;
    }
    if mask.contains(AttrMask::ALT_PATH) {
        dst.alt_ah_attr = src.alt_ah_attr;
        dst.alt_pkey_index = src.alt_pkey_index;
        dst.alt_port_num = src.alt_port_num;
        dst.alt_timeout = src.alt_timeout;
    }
    if mask.contains(AttrMask::PATH_MIG_STATE) {
        dst.path_mig_state = src.path_mig_state;
    }
    if mask.contains(AttrMask::RATE_LIMIT) {
        dst.rate_limit = src.rate_limit;
    }
    if mask.contains(AttrMask::PATH_MTU) {
        dst.path_mtu = src.path_mtu;
    }
    if mask.contains(AttrMask::TIMEOUT) {
        dst.timeout = src.timeout;
    }
    if mask.contains(AttrMask::RETRY_CNT) {
        dst.retry_cnt = src.retry_cnt;
    }
    if mask.contains(AttrMask::RNR_RETRY) {
        dst.rnr_retry = src.rnr_retry;
    }
    if mask.contains(AttrMask::RQ_PSN) {
        dst.rq_psn = src.rq_psn;
    }
    if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) {
        dst.max_rd_atomic = src.max_rd_atomic;
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) {
        dst.min_rnr_timer = src.min_rnr_timer;
    }
    if mask.contains(AttrMask::SQ_PSN) {
        dst.sq_psn = src.sq_psn;
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
        dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
    }
    if mask.contains(AttrMask::DEST_QPN) {
        dst.dest_qp_num = src.dest_qp_num;
    }
    if mask.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        dst.en_sqd_async_notify = src.en_sqd_async_notify;
    }
}

/// Resolve the path of a connected QP from its address vector.
fn resolve_path(w: &World, idx: usize, attr: &QpAttr, qpn: u32) -> Result<Path> {
    let me = &w.devs[idx].port;
    let ah = &attr.ah_attr;
    let (peer_ip, peer_mac) = match &ah.grh {
        Some(grh) => w.resolve_gid(idx, &grh.dgid).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "IBV_QP_AV: no device on the fabric (or UDP peer) has GID {} (the destination MAC cannot be resolved)",
                grh.dgid
            ))
        })?,
        // Only on an InfiniBand port: on RoCE an address without a GRH was refused before
        // (`qp_state::check_port_protocol`, as the kernel's `rdma_check_ah_attr`).
        None => w
            .devs
            .iter()
            .find(|d| d.port.lid == ah.dlid)
            .map(|d| (d.port.ip, d.port.mac))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "IBV_QP_AV: no port on the fabric has LID {} (an InfiniBand address without \
                     a GRH names the peer's port by its LID; is_global = 1 with the peer's GID \
                     reaches it through a GRH instead)",
                    ah.dlid
                ))
            })?,
    };
    let grh = ah.grh.unwrap_or_default();
    let fl = if grh.flow_label != 0 {
        grh.flow_label
    } else {
        flow_label_of_qpns(qpn, attr.dest_qp_num)
    };
    let mut addr = Addressing::new(
        me.mac,
        peer_mac,
        me.ip,
        peer_ip,
        flow_label_to_udp_sport(fl),
    );
    if grh.hop_limit != 0 {
        addr.ttl = grh.hop_limit;
    }
    addr.dscp = grh.traffic_class >> 2;
    Ok(Path {
        addr,
        dest_qpn: attr.dest_qp_num,
        mtu: attr.path_mtu.bytes(),
        foreign: ah.grh.as_ref().is_some_and(|g| w.through_tap(idx, &g.dgid)),
    })
}

/// Apply `ibv_modify_qp` to QP `qpn` of device `idx`, whose port has link layer `link_layer`.
pub fn modify_qp(
    w: &mut World,
    idx: usize,
    qpn: u32,
    attr: &QpAttr,
    mask: AttrMask,
    link_layer: LinkLayer,
) -> Result<()> {
    let dev = w.devs.get(idx).ok_or(Error::UnknownHandle {
        kind: "device",
        id: idx as u32,
    })?;
    let qp = dev.qps.get(&qpn).ok_or(Error::UnknownHandle {
        kind: "QP",
        id: qpn,
    })?;
    let cur = qp.state();
    let limits = DeviceLimits {
        num_ports: 1,
        pkey_tbl_len: Some(1),
        gid_tbl_len: 1,
        max_mtu: dev.port.mtu,
        max_rd_atomic: MAX_RD_ATOMIC,
        max_dest_rd_atomic: MAX_RD_ATOMIC,
        privileged_qkey: false,
        link_layer,
        kernel: KernelVersion::DEFAULT,
    };
    // 7.2 `mlx5_ib_modify_qp`: a rate limit alone, outside RTS, is parsed (to be applied at the
    // next move to RTS) before the state table is asked; no QP of this device is paced.
    if mask == AttrMask::RATE_LIMIT && cur != QpState::Rts {
        return Err(ModifyError::Unsupported {
            attr: "IBV_QP_RATE_LIMIT",
            why: format!(
                "mlx5 paces raw-packet QPs, and UD/UC QPs only on devices that report \
                 packet_pacing_req_ud/_uc (Linux 7.2); this device paces none of its QPs, this \
                 {} QP included (a rate limit alone in {cur} is parsed for later by \
                 mlx5_ib_modify_qp, which answers EOPNOTSUPP)",
                qp.qp_type
            ),
        }
        .into());
    }
    let next = validate_with_limits(cur, attr, mask, qp.qp_type, &limits)?;
    // What uverbs hands the driver: IBV_QP_PORT added to an IBV_QP_AV outside Init->RTR.
    let (attr, mask) = uverbs_view(attr, mask);
    // uverbs `modify_qp`: at Init->RTR the address must use the port the QP was given at Init.
    if mask.contains(AttrMask::AV)
        && mask.contains(AttrMask::STATE)
        && attr.qp_state == QpState::Rtr
        && attr.ah_attr.port_num != qp.attr.port_num
    {
        return Err(ModifyError::InvalidValue {
            attr: "IBV_QP_AV",
            why: format!(
                "ah_attr.port_num = {} but the QP was bound to port {} at Init (uverbs modify_qp \
                 refuses the difference)",
                attr.ah_attr.port_num, qp.attr.port_num
            ),
        }
        .into());
    }
    // `mlx5_ib_modify_qp` returns 0 for Reset->Reset before `__mlx5_ib_modify_qp`, where the
    // rate limit is refused (rdma-core still resets the rings afterwards, below).
    let reset_to_reset = cur == QpState::Reset && next == QpState::Reset;
    if mask.contains(AttrMask::RATE_LIMIT) && !reset_to_reset {
        return Err(ModifyError::Unsupported {
            attr: "IBV_QP_RATE_LIMIT",
            why: format!(
                "mlx5 paces raw-packet QPs, and UD/UC QPs only on devices that report \
                 packet_pacing_req_ud/_uc (Linux 7.2); this device paces none of its QPs, this \
                 {} QP included (__mlx5_ib_modify_qp answers EOPNOTSUPP)",
                qp.qp_type
            ),
        }
        .into());
    }
    let mut new_attr = qp.attr;
    copy_masked(&mut new_attr, &attr, mask);
    // A DC QP has no fixed peer: a DCI takes its path from each WQE
    // (`crate::transport::dc`), a DCT answers each initiator where it came from.
    let path = if qp.qp_type != QpType::Ud
        && !qp.qp_type.is_dc()
        && (mask.contains(AttrMask::AV)
            || mask.contains(AttrMask::PATH_MTU)
            || mask.contains(AttrMask::DEST_QPN))
        && matches!(next, QpState::Rtr | QpState::Rts | QpState::Sqd)
    {
        Some(resolve_path(w, idx, &new_attr, qpn)?)
    } else {
        None
    };
    let now = w.now;
    let dev = &mut w.devs[idx];
    let mut out = Vec::new();
    dev.with_qp(qpn, now, &mut out, |qp, ctx| {
        if next == QpState::Reset {
            qp.reset_queues();
            qp.attr = QpAttr {
                cap: qp.geom.cap,
                ..Default::default()
            };
        } else {
            qp.attr = new_attr;
        }
        if let Some(p) = path {
            qp.path = Some(p);
        }
        match (cur, next) {
            (QpState::Init, QpState::Rtr) => {
                qp.resp.epsn = Psn::new(qp.attr.rq_psn);
            }
            (QpState::Rtr, QpState::Rts) => {
                qp.req.psn = Psn::new(qp.attr.sq_psn);
                qp.req.reset_retries(qp.attr.retry_cnt, qp.attr.rnr_retry);
            }
            (_, QpState::Sqd) if cur != QpState::Sqd => {
                qp.sqd_notify =
                    mask.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) && qp.attr.en_sqd_async_notify;
            }
            _ => {}
        }
        if mask.contains(AttrMask::SQ_PSN) && next != QpState::Reset {
            qp.req.psn = Psn::new(qp.attr.sq_psn);
        }
        if mask.contains(AttrMask::RETRY_CNT) || mask.contains(AttrMask::RNR_RETRY) {
            qp.req.reset_retries(qp.attr.retry_cnt, qp.attr.rnr_retry);
        }
        qp.attr.qp_state = next;
        qp.attr.cur_qp_state = next;
        // DEBUG: the one INFO line per modify is the control path's (`mlx5_hw::transition`).
        tracing::debug!(
            device = ctx.dev,
            qpn = qp.qpn,
            old = %cur,
            new = %next,
            dest_qpn = qp.attr.dest_qp_num,
            sq_psn = qp.attr.sq_psn,
            rq_psn = qp.attr.rq_psn,
            path = ?qp.path.map(|p| p.addr.dst_ip),
            "modify_qp"
        );
        if next == QpState::Error && cur != QpState::Error {
            flush(qp, ctx);
        }
    });
    w.transmit(idx, out);
    Ok(())
}

/// `ibv_query_qp`: the attributes as set, the current state, the capabilities.
pub fn query_qp(w: &World, idx: usize, qpn: u32) -> Result<QpAttr> {
    let dev = w.devs.get(idx).ok_or(Error::UnknownHandle {
        kind: "device",
        id: idx as u32,
    })?;
    let qp = dev.qps.get(&qpn).ok_or(Error::UnknownHandle {
        kind: "QP",
        id: qpn,
    })?;
    let mut a = qp.attr;
    a.cur_qp_state = a.qp_state;
    a.cap = qp.geom.cap;
    // The PSNs a query reports are the live ones, as on a ConnectX (the kernel's
    // `mlx5_ib_query_qp` reads `next_send_psn` / `next_rcv_psn` from the QP context) and on
    // rxe (`rxe_qp_to_attr`: `req.psn`, `resp.psn`): the next PSN to send once the QP has sent
    // (RTS and later), the next PSN expected once it receives (RTR and later).
    use QpState::{Error as Err_, Rtr, Rts, Sqd, Sqe};
    if matches!(a.qp_state, Rts | Sqd | Sqe | Err_) {
        a.sq_psn = qp.req.psn.get();
    }
    if matches!(a.qp_state, Rtr | Rts | Sqd | Sqe | Err_) {
        a.rq_psn = qp.resp.epsn.get();
    }
    a.sq_draining = a.qp_state == QpState::Sqd && !qp.req.outstanding.is_empty();
    Ok(a)
}
