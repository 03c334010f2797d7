//! The attribute computation every way of connecting shares: what this side announces
//! ([`local_endpoint`]), and which transition steps take its QP to RTS given the peer's
//! announcement ([`plan`]). Pure functions of their inputs, so the TCP handshake, the
//! in-process pair and the rebuild all compute exactly the same attributes.

use super::error::{ConnectError, Result};
use super::params::{ConnectParams, DEFAULT_RD_ATOMIC};
use super::wire::Endpoint;
use mlx5_hw::qp_state::{DeviceLimits, MAX_24BIT};
use mlx5_hw::transition::{PeerPath, Step, ToInit, ToRtr, ToRts};
use mlx5_hw::{AhAttr, Device, Gid, GlobalRoute, LinkLayer, Mtu, PortAttr, PortState, QpType};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

/// What this side's device and port say, gathered once per connect or rebuild.
#[derive(Clone, Debug)]
pub struct LocalPort {
    /// The port's attributes.
    pub port: PortAttr,
    /// The source GID (`params.gid_index`), or zero when the path has no GRH.
    pub gid: Gid,
    /// Device and port limits, for checking a step before it reaches the device.
    pub limits: DeviceLimits,
}

/// How long connecting waits for a port that is not yet Active.
pub const PORT_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl LocalPort {
    /// Queries the device for the port and GID `params` name. Fails if the port is not
    /// active (a modify to RTR would succeed, then every packet would be lost).
    pub fn query(dev: &dyn Device, params: &ConnectParams) -> Result<LocalPort> {
        let attr = dev.query_device()?;
        let mut port = dev.query_port(params.port)?;
        // A link that is coming up (a carrier just raised: a cable plugged in, a TAP interface
        // opened a moment ago) reaches Active within moments: wait for it a little, at most
        // PORT_UP_WAIT, before refusing.
        let until = std::time::Instant::now() + PORT_UP_WAIT;
        while port.state != PortState::Active && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
            port = dev.query_port(params.port)?;
        }
        if port.state != PortState::Active {
            return Err(ConnectError::Incompatible(format!(
                "port {} of {} is {:?}, not Active (waited {PORT_UP_WAIT:?}): check the link \
                 (ibv_devinfo, `ip link`) and, on InfiniBand, the subnet manager",
                params.port,
                dev.name(),
                port.state
            )));
        }
        let gid = if uses_grh(port.link_layer, params) {
            dev.query_gid(params.port, u32::from(params.gid_index))?
        } else {
            Gid::default()
        };
        let limits = DeviceLimits::from_attrs(&attr, &port);
        Ok(LocalPort { port, gid, limits })
    }
}

/// Whether the path carries a GRH: always on RoCE (rdma-core `mlx5_create_ah`,
/// providers/mlx5/verbs.c, refuses a RoCE address without `is_global`), on InfiniBand only when
/// asked.
pub fn uses_grh(link_layer: LinkLayer, params: &ConnectParams) -> bool {
    link_layer == LinkLayer::Ethernet || params.force_grh
}

/// A fresh random 24-bit PSN: a new connection (or a rebuilt one) then does not accept stale
/// packets of an old one (perftest draws `lrand48() & 0xffffff`, `src/perftest_communication.c`).
///
/// The PSN only has to differ from an old connection's, unpredictably enough that two processes
/// do not pick the same one; it is no secret. So it comes from the standard library rather than
/// a `rand` dependency: a fresh [`RandomState`] holds SipHash keys the standard library draws from
/// the operating system's random source (once per thread, then stepped for every new state), and
/// hashing a per-process counter with them gives a new, unpredictable value on every call.
pub fn random_psn() -> u32 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    (RandomState::new().hash_one(n) as u32) & MAX_24BIT
}

fn clamp_rd(v: Option<u8>, device_max: u32) -> u8 {
    let dev = u8::try_from(device_max).unwrap_or(u8::MAX);
    match v {
        Some(v) => v,
        None => DEFAULT_RD_ATOMIC.min(dev),
    }
}

/// What this side announces for QP `qpn` of type `qp_type` with first send PSN `psn`.
pub fn local_endpoint(
    port: &LocalPort,
    qpn: u32,
    qp_type: QpType,
    params: &ConnectParams,
    psn: u32,
) -> Endpoint {
    let mtu = match params.max_mtu {
        Some(m) => m.min(port.port.active_mtu),
        None => port.port.active_mtu,
    };
    let (rd, drd) = if qp_type == QpType::Rc {
        (
            clamp_rd(params.max_rd_atomic, port.limits.max_rd_atomic),
            clamp_rd(params.max_dest_rd_atomic, port.limits.max_dest_rd_atomic),
        )
    } else {
        (0, 0)
    };
    Endpoint {
        qp_type,
        link_layer: port.port.link_layer,
        mtu,
        qpn,
        psn,
        lid: port.port.lid,
        max_rd_atomic: rd,
        max_dest_rd_atomic: drd,
        gid: port.gid,
        qkey: if qp_type == QpType::Ud {
            params.qkey
        } else {
            0
        },
        buffer: params.buffer,
    }
}

/// The Reset→Init step for a QP type.
pub fn init_step(qp_type: QpType, params: &ConnectParams) -> Step {
    match qp_type {
        QpType::Ud => Step::Init(ToInit::Datagram {
            port: params.port,
            pkey_index: params.pkey_index,
            qkey: params.qkey,
        }),
        _ => Step::Init(ToInit::Connected {
            port: params.port,
            pkey_index: params.pkey_index,
            access: params.access_for(qp_type),
        }),
    }
}

/// The steps from Init to RTS and what they were computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Init→RTR.
    pub rtr: Step,
    /// RTR→RTS.
    pub rts: Step,
    /// Path MTU: the smaller of both ports' MTUs (and the caller's cap).
    pub path_mtu: Mtu,
    /// Address of the peer (the RTR address vector; the UD address handle).
    pub ah: AhAttr,
    /// `max_rd_atomic` after capping by the peer's `max_dest_rd_atomic` (RC; 0 otherwise).
    pub max_rd_atomic: u8,
}

/// Computes the RTR and RTS steps for `local` talking to `peer`.
///
/// - Both sides must have the same QP type and link layer; an InfiniBand path without a GRH
///   needs a nonzero peer LID.
/// - Path MTU = min(local MTU, peer MTU, `params.max_mtu`): a larger one is refused at RTR or
///   drops every full-size packet (`docs/sources.md` §19).
/// - RC: `rq_psn` = the peer's send PSN, `sq_psn` = our own; `max_dest_rd_atomic` = our
///   responder resources; `max_rd_atomic` = min(ours, the peer's responder resources), the
///   negotiation RDMA CM does with `initiator_depth`/`responder_resources`, so a READ never
///   waits on a peer that cannot hold it (`docs/sources.md` §16).
pub fn plan(local: &Endpoint, peer: &Endpoint, params: &ConnectParams) -> Result<Plan> {
    if local.qp_type.is_xrc() {
        // An XRC initiator's peer is a target QP of the other type, with its own RTS mask
        // (`mlx5_ctx::xrc` connects them).
        return Err(ConnectError::Incompatible(format!(
            "{} QPs are connected with mlx5_ctx::xrc (initiator to target), not by this plan",
            local.qp_type
        )));
    }
    if local.qp_type != peer.qp_type {
        return Err(ConnectError::Incompatible(format!(
            "this side's QP is {} but the peer's is {}: both ends of a connection use the same \
             transport",
            local.qp_type, peer.qp_type
        )));
    }
    if local.link_layer != peer.link_layer {
        return Err(ConnectError::Incompatible(format!(
            "this port's link layer is {:?} but the peer's is {:?}: RoCE and InfiniBand ports \
             cannot reach each other",
            local.link_layer, peer.link_layer
        )));
    }
    let grh = uses_grh(local.link_layer, params);
    if !grh && peer.lid == 0 {
        return Err(ConnectError::Incompatible(
            "the peer announced LID 0 on an InfiniBand port: its port has no LID yet (is a \
             subnet manager running?), or set force_grh to route by GID"
                .into(),
        ));
    }
    let mut path_mtu = local.mtu.min(peer.mtu);
    if let Some(cap) = params.max_mtu {
        path_mtu = path_mtu.min(cap);
    }
    let ah = AhAttr {
        dlid: if grh && local.link_layer == LinkLayer::Ethernet {
            0
        } else {
            peer.lid
        },
        sl: params.sl,
        src_path_bits: 0,
        static_rate: 0,
        port_num: params.port,
        grh: grh.then_some(GlobalRoute {
            dgid: peer.gid,
            flow_label: 0,
            sgid_index: params.gid_index,
            hop_limit: params.hop_limit,
            traffic_class: params.traffic_class,
        }),
    };
    let path = PeerPath {
        path_mtu,
        dest_qpn: peer.qpn,
        rq_psn: peer.psn,
        ah,
    };
    let (rtr, rts, max_rd_atomic) = match local.qp_type {
        QpType::Rc => {
            let rd = local.max_rd_atomic.min(peer.max_dest_rd_atomic);
            if rd < local.max_rd_atomic {
                tracing::info!(
                    target: "mlx5_connect",
                    wanted = local.max_rd_atomic,
                    peer_max_dest_rd_atomic = peer.max_dest_rd_atomic,
                    max_rd_atomic = rd,
                    "max_rd_atomic capped by the peer's responder resources"
                );
            }
            (
                Step::Rtr(ToRtr::Rc {
                    path,
                    max_dest_rd_atomic: local.max_dest_rd_atomic,
                    min_rnr_timer: params.min_rnr_timer,
                }),
                Step::Rts(ToRts::Rc {
                    sq_psn: local.psn,
                    timeout: params.timeout,
                    retry_cnt: params.retry_cnt,
                    rnr_retry: params.rnr_retry,
                    max_rd_atomic: rd,
                }),
                rd,
            )
        }
        QpType::Uc => (
            Step::Rtr(ToRtr::Uc { path }),
            Step::Rts(ToRts::Unreliable { sq_psn: local.psn }),
            0,
        ),
        _ => (
            Step::Rtr(ToRtr::Ud),
            Step::Rts(ToRts::Unreliable { sq_psn: local.psn }),
            0,
        ),
    };
    Ok(Plan {
        rtr,
        rts,
        path_mtu,
        ah,
        max_rd_atomic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_hw::qp_state;
    use mlx5_hw::QpState;

    fn ep(qpn: u32, psn: u32, mtu: Mtu, drd: u8) -> Endpoint {
        Endpoint {
            qp_type: QpType::Rc,
            link_layer: LinkLayer::Ethernet,
            mtu,
            qpn,
            psn,
            lid: 0,
            max_rd_atomic: 16,
            max_dest_rd_atomic: drd,
            gid: Gid::from_ipv4([192, 168, 0, qpn as u8]),
            qkey: 0,
            buffer: None,
        }
    }

    #[test]
    fn rc_plan_crosses_psns_and_takes_the_smaller_mtu() {
        let p = ConnectParams::default();
        let a = ep(0x11, 0xaaaaaa, Mtu::Mtu4096, 16);
        let b = ep(0x22, 0xbbbbbb, Mtu::Mtu1024, 4);
        let pa = plan(&a, &b, &p).unwrap();
        let (attr, mask) = pa.rtr.build(QpState::Init, QpType::Rc).unwrap();
        assert_eq!(attr.dest_qp_num, 0x22);
        assert_eq!(attr.rq_psn, 0xbbbbbb);
        assert_eq!(attr.path_mtu, Mtu::Mtu1024);
        assert_eq!(attr.min_rnr_timer, 12);
        assert_eq!(attr.max_dest_rd_atomic, 16);
        assert_eq!(attr.ah_attr.grh.unwrap().dgid, b.gid);
        assert_eq!(attr.ah_attr.grh.unwrap().hop_limit, 0xff);
        qp_state::validate(QpState::Init, &attr, mask, QpType::Rc).unwrap();
        let (attr, mask) = pa.rts.build(QpState::Rtr, QpType::Rc).unwrap();
        assert_eq!(attr.sq_psn, 0xaaaaaa);
        assert_eq!((attr.timeout, attr.retry_cnt, attr.rnr_retry), (14, 7, 7));
        assert_eq!(
            attr.max_rd_atomic, 4,
            "capped by the peer's max_dest_rd_atomic"
        );
        qp_state::validate(QpState::Rtr, &attr, mask, QpType::Rc).unwrap();
        // The mirror image: b's plan uses a's values.
        let pb = plan(&b, &a, &p).unwrap();
        let (attr, _) = pb.rtr.build(QpState::Init, QpType::Rc).unwrap();
        assert_eq!((attr.dest_qp_num, attr.rq_psn), (0x11, 0xaaaaaa));
        assert_eq!(pb.path_mtu, pa.path_mtu);
    }

    #[test]
    fn mtu_cap_applies() {
        let p = ConnectParams {
            max_mtu: Some(Mtu::Mtu512),
            ..ConnectParams::default()
        };
        let a = ep(1, 1, Mtu::Mtu4096, 1);
        assert_eq!(plan(&a, &a, &p).unwrap().path_mtu, Mtu::Mtu512);
    }

    #[test]
    fn incompatible_endpoints_are_refused() {
        let p = ConnectParams::default();
        let a = ep(1, 1, Mtu::Mtu4096, 1);
        let ud = Endpoint {
            qp_type: QpType::Ud,
            qkey: 7,
            ..a
        };
        let e = plan(&a, &ud, &p).unwrap_err().to_string();
        assert!(e.contains("RC but the peer's is UD"), "{e}");
        let ib = Endpoint {
            link_layer: LinkLayer::InfiniBand,
            ..a
        };
        assert!(plan(&a, &ib, &p)
            .unwrap_err()
            .to_string()
            .contains("link layer"));
        let e = plan(&ib, &ib, &p).unwrap_err().to_string();
        assert!(e.contains("LID 0"), "{e}");
        let ib_lid = Endpoint { lid: 7, ..ib };
        let pl = plan(&ib_lid, &ib_lid, &p).unwrap();
        assert_eq!(pl.ah.dlid, 7);
        assert!(pl.ah.grh.is_none());
    }

    #[test]
    fn ud_and_uc_plans() {
        let p = ConnectParams::default();
        let a = Endpoint {
            qp_type: QpType::Ud,
            qkey: 0x1111_1111,
            ..ep(1, 5, Mtu::Mtu4096, 0)
        };
        let pl = plan(&a, &a, &p).unwrap();
        assert_eq!(pl.rtr, Step::Rtr(ToRtr::Ud));
        assert_eq!(pl.rts, Step::Rts(ToRts::Unreliable { sq_psn: 5 }));
        let u = Endpoint {
            qp_type: QpType::Uc,
            ..ep(1, 5, Mtu::Mtu4096, 0)
        };
        let pl = plan(&u, &u, &p).unwrap();
        assert!(matches!(pl.rtr, Step::Rtr(ToRtr::Uc { .. })));
        assert_eq!(
            init_step(QpType::Uc, &p),
            Step::Init(ToInit::Connected {
                port: 1,
                pkey_index: 0,
                access: mlx5_hw::AccessFlags::REMOTE_WRITE
            })
        );
    }

    #[test]
    fn random_psns_fit_24_bits_and_vary() {
        let v: Vec<u32> = (0..32).map(|_| random_psn()).collect();
        assert!(v.iter().all(|&p| p <= MAX_24BIT));
        assert!(v.iter().any(|&p| p != v[0]));
    }
}
