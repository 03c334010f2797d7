//! The world the software-ConnectX fuzz harnesses (`sim_wqe`, `roce_frames`) run in: two
//! software ConnectX devices on a deterministic fabric (no thread: every run is the same),
//! with a connected RC pair, a connected UC pair and a UD pair (fixed PSNs: A sends from 0,
//! B from 0x100), registered memory on both sides and receives posted. [`World::settle`] lets the fabric run (retransmit timers
//! included) and drains every CQ, checking that no work request completes twice.

use mlx5_direct::connect::{connect_qps_with, ConnectParams, Connection};
use mlx5_direct::datapath::{SendWr, UdDest, Wc};
use mlx5_direct::{Context, Cq, Mr, Pd, Qp, QpInit, SimFabric};
use std::collections::HashSet;
use std::time::Duration;

/// Receives posted per QP (each names 256 bytes of the side's memory).
pub const RECVS: u64 = 8;

/// One side's objects, declared in drop order (QPs before their CQ and memory).
pub struct Side {
    /// RC, UC and UD QPs, in that order.
    pub qps: Vec<Qp>,
    /// Registered memory (4 KiB) every WR and remote address names.
    pub mr: Mr,
    /// The completion queue of all three QPs.
    pub cq: Cq,
    /// The protection domain (held: the QPs and memory belong to it).
    #[allow(dead_code)]
    pub pd: Pd,
    /// The device.
    #[allow(dead_code)]
    pub ctx: Context,
}

/// Two sides and their connections.
pub struct World {
    /// Connections first: they go before the QPs (held for the drop order).
    #[allow(dead_code)]
    pub conns: Vec<(Connection, Connection)>,
    /// The UD destination of B's UD QP, seen from A, and of A's, seen from B.
    pub ud_dest: [UdDest; 2],
    /// Side A (`sides[0]`) and B.
    pub sides: [Side; 2],
    /// The fabric.
    pub fabric: SimFabric,
    /// WR ids completed so far: (side, QPN, WR id).
    pub done: HashSet<(usize, u32, u64)>,
}

fn side(f: &SimFabric) -> Side {
    let ctx = f.add_device();
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(256).expect("cq");
    let mr = pd.alloc_mr(4096).expect("mr");
    let qps = vec![
        pd.create_qp(&QpInit::rc(&cq)).expect("rc"),
        pd.create_qp(&QpInit::uc(&cq)).expect("uc"),
        pd.create_qp(&QpInit::ud(&cq)).expect("ud"),
    ];
    Side {
        qps,
        mr,
        cq,
        pd,
        ctx,
    }
}

impl World {
    /// Build and connect everything, receives posted on every QP.
    pub fn new() -> World {
        let fabric = SimFabric::deterministic();
        let mut a = side(&fabric);
        let mut b = side(&fabric);
        // Fixed PSNs (the default is random): every run is the same, and an input can name
        // the PSN the responder expects (A sends from 0, B from 0x100).
        let (pa, pb) = (
            ConnectParams::default().with_psn(0),
            ConnectParams::default().with_psn(0x100),
        );
        let mut conns = Vec::new();
        for i in 0..3 {
            let (qa, qb) = (&mut a.qps[i], &mut b.qps[i]);
            conns.push(connect_qps_with((qa, &pa), (qb, &pb)).expect("connect"));
        }
        let ud_dest = [
            conns[2].0.ud_peer().expect("UD peer").dest(),
            conns[2].1.ud_peer().expect("UD peer").dest(),
        ];
        for s in [&mut a, &mut b] {
            for (k, qp) in s.qps.iter_mut().enumerate() {
                for r in 0..RECVS {
                    let sge = s.mr.sge((r as usize % 16) * 256, 256).expect("sge");
                    qp.post_recv(1000 * (k as u64 + 1) + r, &[sge])
                        .expect("recv");
                }
            }
        }
        World {
            conns,
            ud_dest,
            sides: [a, b],
            fabric,
            done: HashSet::new(),
        }
    }

    /// Ordinary traffic from A: on RC a WRITE, a READ and a SEND; a SEND on UC and on UD.
    /// Whatever fails to post (a full queue, a QP in error) is simply not posted.
    pub fn traffic(&mut self, base: u64) {
        let [a, b] = &mut self.sides;
        let sge = [a.mr.sge(0, 64).expect("sge")];
        let remote = b.mr.remote(512).expect("remote");
        let rc = &mut a.qps[0];
        let _ = rc.post(&SendWr::write(base, remote).sges(&sge).signaled());
        let _ = rc.post(&SendWr::read(base + 1, remote).sges(&sge).signaled());
        let _ = rc.post(&SendWr::send(base + 2).sges(&sge).signaled());
        let _ = a.qps[1].post(&SendWr::send(base + 3).sges(&sge).signaled());
        let dest = self.ud_dest[0];
        let _ = a.qps[2].post(&SendWr::send(base + 4).sges(&sge).ud(&dest).signaled());
    }

    /// Run the fabric until idle, let virtual time pass (retransmissions, timeouts), then
    /// drain both CQs; a WR completed twice panics.
    pub fn settle(&mut self) {
        let fabric = self.fabric.fabric();
        fabric.run_until_idle();
        fabric.advance(Duration::from_secs(5));
        fabric.run_until_idle();
        let mut wcs = [Wc::default(); 16];
        for (si, s) in self.sides.iter_mut().enumerate() {
            for _ in 0..64 {
                let mut got = 0;
                for qp in s.qps.iter_mut() {
                    let n = s.cq.poll(&mut **qp, &mut wcs).unwrap_or(0);
                    got += n;
                    for w in &wcs[..n] {
                        assert!(
                            self.done.insert((si, w.qp_num(), w.wr_id())),
                            "WR {} of QP {:#x} completed twice",
                            w.wr_id(),
                            w.qp_num()
                        );
                    }
                }
                if got == 0 {
                    break;
                }
            }
        }
    }
}
