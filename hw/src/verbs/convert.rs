//! Conversions between the device-contract types ([`crate::attr`]) and libibverbs structs.
//!
//! The contract's enums carry verbs.h values (`enum ibv_qp_state`, `ibv_qp_type`, `ibv_mtu`,
//! `ibv_qp_attr_mask`, `ibv_access_flags`), so most fields pass through unchanged.

use super::ffi::ibv;
use crate::attr::{
    AccessFlags, AhAttr, Gid, GlobalRoute, MigState, Mtu, QpAttr, QpCap, QpState, QpType,
};
use crate::device::{LinkLayer, PortAttr, PortState};

/// `IBV_LINK_LAYER_ETHERNET` (verbs.h `enum { IBV_LINK_LAYER_UNSPECIFIED, _INFINIBAND, _ETHERNET }`).
const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// A zeroed `ibv_qp_attr`: every field is an integer, an enum number or a union of those, for
/// which all-zero is a valid value (and what C callers start from with `memset`).
pub(super) fn zeroed_qp_attr() -> ibv::ibv_qp_attr {
    // SAFETY: see above; `ibv_qp_attr` has no references, no `NonNull` and no Rust enums.
    unsafe { std::mem::zeroed() }
}

/// `ibv_ah_attr` of an [`AhAttr`].
pub(super) fn ah_to_ibv(a: &AhAttr) -> ibv::ibv_ah_attr {
    let grh = a.grh.unwrap_or_default();
    ibv::ibv_ah_attr {
        grh: ibv::ibv_global_route {
            dgid: ibv::ibv_gid { raw: grh.dgid.0 },
            flow_label: grh.flow_label,
            sgid_index: grh.sgid_index,
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.grh.is_some()),
        port_num: a.port_num,
    }
}

/// [`AhAttr`] of an `ibv_ah_attr`.
pub(super) fn ah_from_ibv(a: &ibv::ibv_ah_attr) -> AhAttr {
    // SAFETY: `raw` covers all 16 bytes of the union; any bit pattern is a valid [u8; 16].
    let dgid = Gid(unsafe { a.grh.dgid.raw });
    let grh = (a.is_global != 0).then_some(GlobalRoute {
        dgid,
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
    });
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh,
    }
}

/// `ibv_qp_attr` of a [`QpAttr`] (every field copied; the mask decides what the device reads).
pub(super) fn qp_attr_to_ibv(a: &QpAttr) -> ibv::ibv_qp_attr {
    let mut r = zeroed_qp_attr();
    r.qp_state = a.qp_state as u32;
    r.cur_qp_state = a.cur_qp_state as u32;
    r.path_mtu = a.path_mtu as u32;
    r.qkey = a.qkey;
    r.rq_psn = a.rq_psn;
    r.sq_psn = a.sq_psn;
    r.dest_qp_num = a.dest_qp_num;
    r.qp_access_flags = a.qp_access_flags.bits();
    r.cap = cap_to_ibv(&a.cap);
    r.ah_attr = ah_to_ibv(&a.ah_attr);
    r.pkey_index = a.pkey_index;
    r.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    r.min_rnr_timer = a.min_rnr_timer;
    r.port_num = a.port_num;
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    r.alt_ah_attr = ah_to_ibv(&a.alt_ah_attr);
    r.alt_pkey_index = a.alt_pkey_index;
    r.alt_port_num = a.alt_port_num;
    r.alt_timeout = a.alt_timeout;
    r.path_mig_state = a.path_mig_state as u32;
    r.rate_limit = a.rate_limit;
    r
}

/// [`QpAttr`] of an `ibv_qp_attr` filled by `ibv_query_qp`. Values outside the contract's
/// enums (a provider bug) fall back to the field's default rather than failing the query.
pub(super) fn qp_attr_from_ibv(r: &ibv::ibv_qp_attr) -> QpAttr {
    let state = |v: u32| {
        u8::try_from(v)
            .ok()
            .and_then(QpState::from_u8)
            .unwrap_or(QpState::Error)
    };
    QpAttr {
        qp_state: state(r.qp_state),
        cur_qp_state: state(r.cur_qp_state),
        path_mtu: u8::try_from(r.path_mtu)
            .ok()
            .and_then(Mtu::from_u8)
            .unwrap_or_default(),
        qkey: r.qkey,
        rq_psn: r.rq_psn,
        sq_psn: r.sq_psn,
        dest_qp_num: r.dest_qp_num,
        qp_access_flags: AccessFlags::from_bits_truncate(r.qp_access_flags),
        pkey_index: r.pkey_index,
        port_num: r.port_num,
        ah_attr: ah_from_ibv(&r.ah_attr),
        alt_ah_attr: ah_from_ibv(&r.alt_ah_attr),
        alt_pkey_index: r.alt_pkey_index,
        alt_port_num: r.alt_port_num,
        alt_timeout: r.alt_timeout,
        path_mig_state: u8::try_from(r.path_mig_state)
            .ok()
            .and_then(MigState::from_u8)
            .unwrap_or_default(),
        rate_limit: r.rate_limit,
        max_rd_atomic: r.max_rd_atomic,
        max_dest_rd_atomic: r.max_dest_rd_atomic,
        min_rnr_timer: r.min_rnr_timer,
        timeout: r.timeout,
        retry_cnt: r.retry_cnt,
        rnr_retry: r.rnr_retry,
        en_sqd_async_notify: r.en_sqd_async_notify != 0,
        sq_draining: r.sq_draining != 0,
        cap: cap_from_ibv(&r.cap),
    }
}

/// `ibv_qp_cap` of a [`QpCap`].
pub(super) fn cap_to_ibv(c: &QpCap) -> ibv::ibv_qp_cap {
    ibv::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// [`QpCap`] of an `ibv_qp_cap`.
pub(super) fn cap_from_ibv(c: &ibv::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `enum ibv_qp_type` value of a [`QpType`].
pub(super) fn qp_type_to_ibv(t: QpType) -> ibv::ibv_qp_type::Type {
    t.ibv_value()
}

/// [`PortAttr`] of an `ibv_port_attr`.
pub(super) fn port_from_ibv(p: &ibv::ibv_port_attr) -> PortAttr {
    let state = match p.state {
        ibv::ibv_port_state::IBV_PORT_INIT => PortState::Init,
        ibv::ibv_port_state::IBV_PORT_ARMED => PortState::Armed,
        ibv::ibv_port_state::IBV_PORT_ACTIVE | ibv::ibv_port_state::IBV_PORT_ACTIVE_DEFER => {
            PortState::Active
        }
        _ => PortState::Down,
    };
    let mtu = |v: u32| {
        u8::try_from(v)
            .ok()
            .and_then(Mtu::from_u8)
            .unwrap_or(Mtu::Mtu256)
    };
    PortAttr {
        state,
        max_mtu: mtu(p.max_mtu),
        active_mtu: mtu(p.active_mtu),
        lid: p.lid,
        link_layer: if p.link_layer == IBV_LINK_LAYER_ETHERNET {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        },
        gid_tbl_len: u32::try_from(p.gid_tbl_len).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::AttrMask;

    #[test]
    fn qp_attr_round_trips_through_ibv() {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            cur_qp_state: QpState::Init,
            path_mtu: Mtu::Mtu4096,
            qkey: 0x1111_1111,
            rq_psn: 0xabcdef,
            sq_psn: 0x123456,
            dest_qp_num: 0x00ff_ee11,
            qp_access_flags: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            pkey_index: 3,
            port_num: 1,
            ah_attr: AhAttr {
                dlid: 0,
                sl: 2,
                src_path_bits: 0,
                static_rate: 0,
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: Gid::from_ipv4([192, 0, 2, 2]),
                    flow_label: 0x12345,
                    sgid_index: 1,
                    hop_limit: 64,
                    traffic_class: 0x10,
                }),
            },
            alt_ah_attr: AhAttr {
                dlid: 0x33,
                sl: 5,
                src_path_bits: 1,
                static_rate: 3,
                port_num: 2,
                grh: None,
            },
            alt_pkey_index: 2,
            alt_port_num: 2,
            alt_timeout: 17,
            path_mig_state: MigState::Rearm,
            rate_limit: 100_000,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 8,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            en_sqd_async_notify: true,
            sq_draining: false,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 60,
            },
        };
        let r = qp_attr_to_ibv(&a);
        assert_eq!(r.qp_state, ibv::ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(r.path_mtu, ibv::ibv_mtu::IBV_MTU_4096);
        assert_eq!(r.ah_attr.is_global, 1);
        assert_eq!(r.alt_ah_attr.is_global, 0);
        assert_eq!(r.path_mig_state, ibv::ibv_mig_state::IBV_MIG_REARM);
        assert_eq!(qp_attr_from_ibv(&r), a);
    }

    #[test]
    fn contract_values_are_the_verbs_h_values() {
        // The pass-through above is only correct if these agree (verbs.h enums).
        assert_eq!(
            AttrMask::MIN_RNR_TIMER.bits(),
            ibv::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0
        );
        assert_eq!(
            AttrMask::DEST_QPN.bits(),
            ibv::ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
        );
        assert_eq!(
            AttrMask::RATE_LIMIT.bits(),
            ibv::ibv_qp_attr_mask::IBV_QP_RATE_LIMIT.0
        );
        assert_eq!(
            AccessFlags::REMOTE_ATOMIC.bits(),
            ibv::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
        );
        assert_eq!(qp_type_to_ibv(QpType::Ud), ibv::ibv_qp_type::IBV_QPT_UD);
        assert_eq!(QpState::Sqe as u32, ibv::ibv_qp_state::IBV_QPS_SQE);
        assert_eq!(Mtu::Mtu256 as u32, ibv::ibv_mtu::IBV_MTU_256);
        assert_eq!(MigState::Armed as u32, ibv::ibv_mig_state::IBV_MIG_ARMED);
    }

    #[test]
    fn ah_without_grh_is_not_global() {
        let a = AhAttr {
            dlid: 7,
            port_num: 1,
            ..AhAttr::default()
        };
        let r = ah_to_ibv(&a);
        assert_eq!(r.is_global, 0);
        assert_eq!(ah_from_ibv(&r), a);
    }
}
