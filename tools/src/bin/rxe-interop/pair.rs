//! What every case shares: the two devices ([`Env`]), one connected pair of QPs ([`Pair`],
//! [`connect`]) and the checks of what arrived.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx5_connect::{ConnectParams, Connection, ControlOnly, QpLink};
use mlx5_ctx::Context;
use mlx5_hw::verbs::baseline::{BaselineCq, BaselineQp, Completion, SendWr as VWr, Sge as VSge};
use mlx5_hw::verbs::VerbsDevice;
use mlx5_hw::QpType;
use mlx5_qp::{Qp, RemoteAddr, Sge, Wc};
use mlx5_sim::{Fabric, SimDevice};
use mlx5_tools::resources::{
    Resources as Side, ResourcesCfg as SideCfg, VerbsResources as VerbsSide,
};

pub(super) type R<T> = std::result::Result<T, String>;

pub(super) fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |x| format!("{what}: {x}")
}

/// How long a case waits for a completion (TCG is slow; nothing is timed).
pub(super) const WAIT: Duration = Duration::from_secs(30);
/// The buffer of each end.
pub(super) const BUF: usize = 1 << 17;
/// `IBV_WC_RNR_RETRY_EXC_ERR` (verbs.h).
pub(super) const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;

pub(super) struct Env {
    pub(super) sim: SimDevice,
    pub(super) fabric: Fabric,
    pub(super) sim_ctx: Context,
    pub(super) verbs_ctx: Context,
    pub(super) verbs: Arc<VerbsDevice>,
    pub(super) tap: String,
}

/// One connected pair.
pub(super) struct Pair<'v> {
    pub(super) s: Side,
    pub(super) sc: Connection,
    pub(super) v: VerbsSide,
    pub(super) vqp: BaselineQp<'v>,
    pub(super) vcq: BaselineCq<'v>,
    pub(super) vc: Connection,
}

#[derive(Clone, Copy)]
pub(super) struct Opts {
    pub(super) qp_type: QpType,
    pub(super) psn: Option<u32>,
    pub(super) sim_rnr_retry: u8,
    pub(super) rxe_rnr_retry: u8,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            qp_type: QpType::Rc,
            psn: None,
            sim_rnr_retry: 7,
            rxe_rnr_retry: 7,
        }
    }
}

pub(super) fn cfg(t: QpType) -> SideCfg {
    SideCfg {
        qp_type: t,
        qps: 1,
        sq_depth: 64,
        rq_depth: 64,
        inline: 0,
        buf_len: BUF,
        srq: None,
        events: false,
    }
}

pub(super) fn connect(env: &Env, o: Opts) -> R<Pair<'_>> {
    let mut s = Side::new(&env.sim_ctx, &cfg(o.qp_type)).map_err(e("sim side"))?;
    let v = VerbsSide::new(&env.verbs_ctx, env.verbs.clone(), &cfg(o.qp_type))
        .map_err(e("rxe side"))?;
    let mut sp = ConnectParams::default().with_buffer(s.remote_buffer());
    let mut vp = ConnectParams::default().with_buffer(v.remote_buffer());
    sp.rnr_retry = o.sim_rnr_retry;
    vp.rnr_retry = o.rxe_rnr_retry;
    sp.min_rnr_timer = 1;
    vp.min_rnr_timer = 1;
    sp.timeout = 14;
    vp.timeout = 14;
    sp.gid_index = 0;
    vp.gid_index = 1; // The RoCE v2 IPv4 GID of the TAP netdev.
    if let Some(p) = o.psn {
        sp = sp.with_psn(p);
        vp = vp.with_psn(p);
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(e("listen"))?;
    let addr = listener.local_addr().map_err(e("listen"))?;
    let vdev = v.context().device_arc();
    let vref = v.qp_ref(0);
    let (sc, vc) = std::thread::scope(|scope| {
        let h = scope.spawn(move || {
            Connection::connect(addr, &*vdev, vref, &mut ControlOnly, &vp)
                .map_err(|x| format!("rxe connect: {x}"))
        });
        let sref = s.qp_ref(0);
        let dev = s.context().device_arc();
        let sc = {
            let mut link = QpLink::new(&mut s.qps[0], &mut s.cq, |_: &mut Qp| Ok(()));
            Connection::accept(&listener, &*dev, sref, &mut link, &sp)
                .map_err(|x| format!("sim connect: {x}"))
        };
        let vc = h.join().map_err(|_| "rxe connect panicked".to_string())?;
        match (sc, vc) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            (a, b) => Err(format!(
                "{}; {}",
                a.err().unwrap_or_default(),
                b.err().unwrap_or_default()
            )),
        }
    })?;
    let vqp = BaselineQp::new(&env.verbs, v.qps[0].id).map_err(e("rxe qp"))?;
    let vcq = BaselineCq::new(&env.verbs, v.cq.id).map_err(e("rxe cq"))?;
    println!(
        "qpn sim {:#x} rxe {:#x} psn sim {:#x} rxe {:#x}",
        sc.local().qpn,
        vc.local().qpn,
        sc.local().psn,
        vc.local().psn
    );
    Ok(Pair {
        s,
        sc,
        v,
        vqp,
        vcq,
        vc,
    })
}

pub(super) fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

impl Pair<'_> {
    pub(super) fn sim_wc(&mut self) -> R<Wc> {
        let mut wcs = [Wc::default(); 1];
        let end = Instant::now() + WAIT;
        loop {
            let n = self
                .s
                .cq
                .poll(&mut self.s.qps[..], &mut wcs)
                .map_err(e("sim poll"))?;
            if n == 1 {
                return Ok(wcs[0]);
            }
            if Instant::now() > end {
                return Err("no completion on the sim side".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    pub(super) fn sim_ok(&mut self, what: &str) -> R<Wc> {
        let w = self.sim_wc()?;
        if !w.is_ok() {
            return Err(format!(
                "{what}: sim completion {:?} {:?}",
                w.opcode(),
                w.status()
            ));
        }
        Ok(w)
    }
    pub(super) fn rxe_wc(&mut self) -> R<Completion> {
        let v = self.vcq.wait(1, WAIT).map_err(e("rxe poll"))?;
        v.first()
            .copied()
            .ok_or_else(|| "no completion on the rxe side".to_string())
    }
    pub(super) fn rxe_ok(&mut self, what: &str) -> R<Completion> {
        let c = self.rxe_wc()?;
        if !c.is_success() {
            return Err(format!("{what}: rxe completion {}", c.status_str()));
        }
        Ok(c)
    }
    /// Offsets here are the cases' own constants inside `BUF`; the device checks the
    /// bounds of every access anyway.
    pub(super) fn sim_sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.s.mr.addr() + off as u64,
            length: len,
            lkey: self.s.mr.lkey(),
        }
    }
    pub(super) fn rxe_sge(&self, off: usize, len: u32) -> VSge {
        VSge {
            addr: self.v.mr.addr() + off as u64,
            length: len,
            lkey: self.v.mr.lkey(),
        }
    }
    /// Where the sim writes into the rxe buffer.
    pub(super) fn rxe_remote(&self, off: u64) -> R<RemoteAddr> {
        let b = self.sc.remote_buffer().ok_or("no remote buffer")?;
        Ok(RemoteAddr::new(b.addr + off, b.rkey))
    }
    /// Where rxe writes into the sim buffer: (addr, rkey).
    pub(super) fn sim_remote(&self, off: u64) -> R<(u64, u32)> {
        let b = self.vc.remote_buffer().ok_or("no remote buffer")?;
        Ok((b.addr + off, b.rkey))
    }
    pub(super) fn vpost(&mut self, wr: &VWr) -> R<()> {
        self.vqp.post_send(wr).map_err(e("rxe post"))
    }
}

pub(super) fn check(what: &str, got: &[u8], want: &[u8]) -> R<()> {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("{what}: data differs at byte {at}"));
    }
    Ok(())
}

/// An atomic's outcome: it returned `got` (want `orig`) and left `now` at the target (want
/// `want`).
pub(super) fn atomic_result(got: u64, now: u64, orig: u64, want: u64) -> R<()> {
    if got != orig || now != want {
        return Err(format!(
            "returned {got:#x} (want {orig:#x}), target now {now:#x} (want {want:#x})"
        ));
    }
    Ok(())
}
