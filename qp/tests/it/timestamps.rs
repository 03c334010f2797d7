//! CQE completion timestamps on the software ConnectX: a CQ created with timestamps carries
//! the device clock in every good CQE, `Cq::poll_timestamped` reports it next to each
//! completion, and the device's clock info turns it into the virtual time it was written at.

use std::time::Duration;

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::{Device, TimestampFormat};
use mlx5_qp::{SendWr, Wc, WcOpcode, WcStatus};

fn poll_ts(f: &mlx5_sim::Fabric, side: &mut Side) -> Vec<(Wc, u64)> {
    f.run_until_idle();
    let mut wcs = [Wc::default(); 8];
    let mut ts = [0u64; 8];
    let n = side
        .cq
        .poll_timestamped(&mut side.qp, &mut wcs, &mut ts)
        .unwrap();
    wcs[..n]
        .iter()
        .copied()
        .zip(ts[..n].iter().copied())
        .collect()
}

#[test]
fn send_and_receive_completions_carry_the_device_clock() {
    let o = Opts {
        timestamps: true,
        ..Opts::default()
    };
    let (f, mut a, mut b) = pair(&o);
    let clock = a.dev.query_clock().unwrap();
    assert_eq!(clock.format, TimestampFormat::FreeRunning);
    assert_eq!(clock.hca_core_clock_khz, mlx5_sim::cq::CORE_CLOCK_KHZ);

    f.advance(Duration::from_millis(3));
    b.qp.post_recv(7, &[b.buf.sge(0, 64)]).unwrap();
    a.qp.post(&SendWr::send(1).inline(b"stamped").signaled())
        .unwrap();
    let t0 = f.now();
    let sent = poll_ts(&f, &mut a);
    let got = poll_ts(&f, &mut b);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (sent[0].0.wr_id(), sent[0].0.status()),
        (1, WcStatus::Success)
    );
    assert_eq!((got[0].0.wr_id(), got[0].0.opcode()), (7, WcOpcode::Recv));
    for (_, raw) in sent.iter().chain(&got) {
        assert_eq!(*raw, mlx5_sim::cq::device_clock(t0.as_nanos() as u64));
        let ns = clock.to_ns(*raw).unwrap();
        // One tick is 6.4 ns: the conversion is exact to within a tick.
        assert!(t0.as_nanos() as u64 - ns < 7, "{ns} ns for {t0:?}");
    }

    // A millisecond later the clock has moved by a millisecond.
    f.advance(Duration::from_millis(1));
    a.qp.post(
        &SendWr::write(2, b.buf.remote(128))
            .inline(b"later")
            .signaled(),
    )
    .unwrap();
    let later = poll_ts(&f, &mut a);
    assert_eq!(later.len(), 1);
    let d = clock.delta_ns(sent[0].1, later[0].1).unwrap();
    assert!((999_993..=1_000_007).contains(&d), "{d} ns");
    no_driver_bugs(&f);
}

#[test]
fn a_cq_without_timestamps_reports_zero_and_poll_agrees() {
    let (f, mut a, b) = pair(&Opts::default());
    f.advance(Duration::from_millis(2));
    a.qp.post(&SendWr::write(5, b.buf.remote(0)).inline(b"x").signaled())
        .unwrap();
    let got = poll_ts(&f, &mut a);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.wr_id(), got[0].1), (5, 0));
    no_driver_bugs(&f);
}
