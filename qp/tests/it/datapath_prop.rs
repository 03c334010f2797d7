//! Random post/poll sequences on the software ConnectX: every posted WR is retired exactly
//! once — signaled successes and every WR from the first error on produce one completion,
//! unsignaled successes none — and the device reports no driver bug.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{QpCap, QpState};
use mlx5_qp::{Error, RemoteAddr, SendWr, Wc, WcStatus};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Step {
    Write {
        len: usize,
        signaled: bool,
        batch: bool,
    },
    Send {
        len: usize,
        signaled: bool,
    },
    Recv,
    Run(usize),
    PollA(usize),
    PollB(usize),
    BadRkey,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (1usize..120, any::<bool>(), any::<bool>())
            .prop_map(|(len, signaled, batch)| Step::Write { len, signaled, batch }),
        2 => (0usize..100, any::<bool>()).prop_map(|(len, signaled)| Step::Send { len, signaled }),
        2 => Just(Step::Recv),
        3 => (1usize..20).prop_map(Step::Run),
        3 => (1usize..9).prop_map(Step::PollA),
        2 => (1usize..9).prop_map(Step::PollB),
        1 => Just(Step::BadRkey),
    ]
}

fn run(steps: Vec<Step>) {
    let o = Opts {
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 128,
        },
        ..Opts::default()
    };
    let (f, mut a, mut b) = pair_with(&o, |attr| attr.rnr_retry = 7, |_| {});
    let mut posted: Vec<(u64, bool)> = Vec::new();
    let mut recvs = 0u64;
    let mut failed_at: Option<u64> = None;
    let mut got_a: HashMap<u64, WcStatus> = HashMap::new();
    let mut got_b: HashMap<u64, WcStatus> = HashMap::new();
    let mut sends = 0u64;
    let poll =
        |cq: &mut mlx5_qp::Cq, qp: &mut mlx5_qp::Qp, got: &mut HashMap<u64, WcStatus>, n: usize| {
            let mut wcs = vec![Wc::default(); n];
            let k = cq.poll(qp, &mut wcs).unwrap();
            for w in &wcs[..k] {
                assert!(
                    got.insert(w.wr_id(), w.status()).is_none(),
                    "wr_id {} twice",
                    w.wr_id()
                );
            }
        };
    for s in steps {
        let id = posted.len() as u64;
        let post = |a: &mut Side, wr: SendWr, signaled: bool, batch: bool| -> bool {
            let wr = if signaled { wr.signaled() } else { wr };
            let r = if batch {
                a.qp.batch().post(&wr)
            } else {
                a.qp.post(&wr)
            };
            match r {
                Ok(()) => true,
                Err(Error::SqFull { .. }) | Err(Error::WrongState { .. }) => false,
                Err(e) => panic!("{e}"),
            }
        };
        match s {
            Step::Write {
                len,
                signaled,
                batch,
            } => {
                let data = vec![id as u8; len];
                let wr =
                    SendWr::write(id, b.buf.remote((id as usize * 128) % 60_000)).inline(&data);
                if post(&mut a, wr, signaled, batch) {
                    posted.push((id, signaled));
                }
            }
            Step::Send { len, signaled } if sends < recvs => {
                let data = vec![0x33; len];
                if post(&mut a, SendWr::send(id).inline(&data), signaled, false) {
                    posted.push((id, signaled));
                    sends += 1;
                }
            }
            Step::Send { .. } => {}
            Step::Recv => {
                if b.qp.post_recv(recvs, &[b.buf.sge(0, 128)]).is_ok() {
                    recvs += 1;
                }
            }
            Step::Run(n) => {
                for _ in 0..n {
                    f.step();
                }
            }
            Step::PollA(n) => poll(&mut a.cq, &mut a.qp, &mut got_a, n),
            Step::PollB(n) => poll(&mut b.cq, &mut b.qp, &mut got_b, n),
            Step::BadRkey => {
                let wr = SendWr::write(id, RemoteAddr::new(b.buf.addr(), 0xbad)).inline(b"x");
                if failed_at.is_none() && post(&mut a, wr, false, false) {
                    posted.push((id, false));
                    failed_at = Some(id);
                }
            }
        }
    }
    // Drain: a final signaled WR retires trailing unsignaled ones when nothing failed.
    if failed_at.is_none() {
        loop {
            f.run_until_idle();
            poll(&mut a.cq, &mut a.qp, &mut got_a, 16);
            let id = posted.len() as u64;
            if a.qp
                .post(&SendWr::write(id, b.buf.remote(0)).inline(b"end").signaled())
                .is_ok()
            {
                posted.push((id, true));
                break;
            }
        }
    }
    for _ in 0..64 {
        f.run_until_idle();
        poll(&mut a.cq, &mut a.qp, &mut got_a, 16);
        poll(&mut b.cq, &mut b.qp, &mut got_b, 16);
    }
    if failed_at.is_some() {
        a.qp.set_state(QpState::Error);
        let mut wcs = [Wc::default(); 3];
        loop {
            let n = a.qp.flush_outstanding(&mut wcs).unwrap();
            if n == 0 {
                break;
            }
            for w in &wcs[..n] {
                assert!(
                    got_a.insert(w.wr_id(), w.status()).is_none(),
                    "wr_id {} twice",
                    w.wr_id()
                );
            }
        }
    }
    assert_eq!(a.qp.sq_outstanding_bbs(), 0);
    for &(id, signaled) in &posted {
        let st = got_a.get(&id).copied();
        match failed_at {
            Some(fid) if id == fid => assert_eq!(st, Some(WcStatus::RemAccessErr)),
            Some(fid) if id > fid => assert_eq!(st, Some(WcStatus::WrFlushErr), "WR {id}"),
            _ if signaled => assert_eq!(st, Some(WcStatus::Success), "WR {id}"),
            _ => assert_eq!(st, None, "unsignaled WR {id}"),
        }
    }
    assert_eq!(
        got_a.len(),
        posted
            .iter()
            .filter(|p| p.1 || failed_at.is_some_and(|f| p.0 >= f))
            .count()
    );
    // Every receive completed at most once; a successful send landed in one.
    if failed_at.is_none() {
        let ok = got_b.values().filter(|s| **s == WcStatus::Success).count() as u64;
        assert_eq!(ok, sends);
    }
    assert!(got_b.len() as u64 <= recvs);
    no_driver_bugs(&f);
}

/// 24 cases of a fixed seed by default; `DATAPATH_PROP_CASES=5000 DATAPATH_PROP_SEED=7` for a
/// soak run (`docs/testing.md`).
fn config() -> Config {
    fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
        std::env::var(name).ok().and_then(|v| v.parse().ok())
    }
    Config {
        cases: var("DATAPATH_PROP_CASES").unwrap_or(24),
        rng_seed: RngSeed::Fixed(var("DATAPATH_PROP_SEED").unwrap_or(0x6461_7461)),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_post_poll_on_the_software_connectx(steps in proptest::collection::vec(step(), 1..120)) {
        run(steps);
    }
}
