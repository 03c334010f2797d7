//! What the tests share: the device under test, a deterministic pair of connected RC QPs on
//! two software ConnectX devices, and the steps that connect RC and UC QPs.
//!
//! The device under test: the tests that need no deterministic stepping take their two
//! contexts from [`contexts`], which opens `MLX5_TEST_DEVICE` twice when it is set (an mlx5
//! device through libibverbs and libmlx5: a ConnectX, or the software ConnectX behind
//! rdma-core with the preload library of `uverbs/`, as `tools/rdma-core-suites.sh` runs them)
//! and otherwise two software ConnectX devices on a threaded fabric.

use mlx5_ctx::{Context, Cq, Pd, Qp, QpInit, SimFabric};
use mlx5_hw::transition::{Changes, PeerPath, StateStep, Step, ToInit, ToRtr, ToRts};
use mlx5_hw::{AccessFlags, AhAttr, GlobalRoute, MigState, Mtu};
use mlx5_qp::Wc;

/// The mlx5 device the suite runs on instead of the software ConnectX (`MLX5_TEST_DEVICE`,
/// e.g. `mlx5_0`), if any.
pub fn test_device() -> Option<String> {
    std::env::var("MLX5_TEST_DEVICE")
        .ok()
        .filter(|d| !d.is_empty())
}

/// Two contexts whose QPs reach each other: two of the device under test (its loopback), or
/// two software ConnectX devices on a threaded fabric.
pub fn contexts() -> (Context, Context) {
    match test_device() {
        Some(d) => (
            Context::open(&d).unwrap_or_else(|e| panic!("open {d}: {e}")),
            Context::open(&d).unwrap_or_else(|e| panic!("open {d}: {e}")),
        ),
        None => Context::sim_pair().unwrap(),
    }
}

/// Kill the device under `ctx` (its fatal state: every QP to Error, `IBV_EVENT_DEVICE_FATAL`):
/// the software ConnectX's fault directly; through rdma-core, `fatal` written into the preload
/// library's control file (`MLX5SIM_CONTROL`, which it reads every 100 ms), the fault reaching
/// the device through the emulation as a firmware error reaches mlx5_ib.
pub fn kill(ctx: &Context) {
    if let (Some(f), Some(d)) = (ctx.sim_fabric(), ctx.sim_device()) {
        f.fabric().faults().device_fatal(d);
        return;
    }
    let path = std::env::var_os("MLX5SIM_CONTROL")
        .expect("MLX5SIM_CONTROL: the preload library's control file, through which the test kills the device");
    std::fs::write(&path, "fatal\n").expect("write the control file");
}

/// The driver bugs the software ConnectX under `ctx` saw, taken (none on another device: the
/// preload library reports its own at the exit of the process).
pub fn take_driver_bugs(ctx: &Context) -> Vec<String> {
    ctx.sim_fabric()
        .map(|f| {
            f.fabric()
                .take_driver_bugs()
                .iter()
                .map(|b| format!("{b:?}"))
                .collect()
        })
        .unwrap_or_default()
}

/// How `pair` connects the QPs (the tests of this crate do it with typed steps, not with
/// mlx5-connect, which depends on this crate).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// RC local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// The RNR NAK timer this QP asks of its peer (IBTA Vol. 1 §9.7.5.2.8 encoding: 1 is
    /// 0.01 ms, 0 is 655.36 ms).
    pub min_rnr_timer: u8,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
        }
    }
}

/// The address of `peer` on RoCE: port 1, a GRH to its GID 0.
pub fn peer_ah(peer: &Qp) -> AhAttr {
    AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: peer.context().device().query_gid(1, 0).unwrap(),
            hop_limit: 64,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    }
}

/// Reset→Init→RTR for a UC QP toward `peer` (REMOTE_WRITE granted), expecting PSN `rq_psn`.
pub fn uc_to_rtr(peer: &Qp, rq_psn: u32) -> [Step; 2] {
    [
        Step::Init(ToInit::Connected {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::REMOTE_WRITE,
        }),
        Step::Rtr(ToRtr::Uc {
            path: PeerPath {
                path_mtu: Mtu::Mtu1024,
                dest_qpn: peer.qpn(),
                rq_psn,
                ah: peer_ah(peer),
            },
        }),
    ]
}

/// Reset→Init→RTR→RTS for a UC QP toward `peer`: PSN `psn` out, `peer_psn` in.
pub fn connect_uc(qp: &mut Qp, peer: &Qp, psn: u32, peer_psn: u32) {
    qp.modify_all(&uc_to_rtr(peer, peer_psn)).unwrap();
    qp.modify(&Step::Rts(ToRts::Unreliable { sq_psn: psn }))
        .unwrap();
}

/// Reset→Init→RTR→RTS for an RC QP toward `peer`, with optional attributes at RTR (access
/// flags, P_Key index) and RTS (min_rnr_timer, migration state) as the kernel table allows.
pub fn connect_rc(qp: &mut Qp, peer: &Qp, p: &Params, psn: u32, peer_psn: u32) {
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    let ah = peer_ah(peer);
    let rtr = ToRtr::Rc {
        path: PeerPath {
            path_mtu: Mtu::Mtu1024,
            dest_qpn: peer.qpn(),
            rq_psn: peer_psn,
            ah,
        },
        max_dest_rd_atomic: 4,
        min_rnr_timer: p.min_rnr_timer,
    };
    let rts = ToRts::Rc {
        sq_psn: psn,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        max_rd_atomic: 4,
    };
    qp.modify_all(&[
        Step::Init(ToInit::Connected {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::empty(),
        }),
        Step::WithOptional(
            StateStep::Rtr(rtr),
            Changes {
                access: Some(access),
                pkey_index: Some(0),
                ..Changes::default()
            },
        ),
        Step::WithOptional(
            StateStep::Rts(rts),
            Changes {
                min_rnr_timer: Some(p.min_rnr_timer),
                path_mig_state: Some(MigState::Migrated),
                ..Changes::default()
            },
        ),
    ])
    .unwrap();
}

/// One end.
pub struct End {
    pub qp: Qp,
    pub cq: Cq,
    pub pd: Pd,
    pub ctx: Context,
}

/// Two RC QPs connected on a deterministic fabric (the test steps it).
pub fn pair(params: &Params) -> (SimFabric, End, End) {
    let f = SimFabric::deterministic();
    let mk = |ctx: Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256).unwrap();
        let qp = pd
            .create_qp(&QpInit::rc(&cq).max_send_wr(64).max_recv_wr(64))
            .unwrap();
        End { qp, cq, pd, ctx }
    };
    let (mut a, mut b) = (mk(f.add_device()), mk(f.add_device()));
    connect_rc(&mut a.qp, &b.qp, params, 0x10, 0x20);
    connect_rc(&mut b.qp, &a.qp, params, 0x20, 0x10);
    (f, a, b)
}

/// Everything `e`'s CQ holds now.
pub fn drain(e: &mut End) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wcs = [Wc::default(); 32];
    loop {
        let n = e.cq.poll(&mut e.qp, &mut wcs).unwrap();
        out.extend_from_slice(&wcs[..n]);
        if n == 0 {
            return out;
        }
    }
}

/// Connect two RC QPs to each other (PSNs 0x10 and 0x20).
pub fn connect_pair_rc(a: &mut Qp, b: &mut Qp) {
    connect_rc(a, b, &Params::default(), 0x10, 0x20);
    connect_rc(b, a, &Params::default(), 0x20, 0x10);
}
