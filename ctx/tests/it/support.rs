//! What the tests share: a deterministic pair of connected RC QPs on two software ConnectX
//! devices.

use mlx5_connect::{connect_qps, ConnectParams};
use mlx5_ctx::{Context, Cq, Pd, Qp, QpInit, SimFabric};
use mlx5_qp::Wc;

/// One end.
pub struct End {
    pub qp: Qp,
    pub cq: Cq,
    pub pd: Pd,
    pub ctx: Context,
}

/// Two RC QPs connected on a deterministic fabric (the test steps it).
pub fn pair(params: &ConnectParams) -> (SimFabric, End, End) {
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
    connect_qps(&mut a.qp, &mut b.qp, params).unwrap();
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
