//! `Cq::poll_until` returns the completions up to the accepted one, that one last, and leaves
//! the rest in the CQ for the next poll.

use std::time::Duration;

use crate::support::{drain, pair, Params};
use mlx5_qp::SendWr;

#[test]
fn poll_until_stops_at_the_accepted_completion_and_leaves_the_rest() {
    let (f, mut a, b) = pair(&Params::default());
    let dst = b.pd.alloc_mr(64).unwrap();
    for id in 0..4u64 {
        a.qp.post(
            &SendWr::write(id, dst.remote(0).unwrap())
                .inline(b"x")
                .signaled(),
        )
        .unwrap();
    }
    // All four completions are in the CQ before the wait starts.
    f.fabric().run_until_idle();
    let got =
        a.cq.poll_until(&mut a.qp, Duration::from_secs(5), |w| w.wr_id() == 1)
            .unwrap();
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id()).collect();
    assert_eq!(ids, [0, 1], "the accepted completion last");
    let rest: Vec<u64> = drain(&mut a).iter().map(|w| w.wr_id()).collect();
    assert_eq!(rest, [2, 3], "the ones after it stayed in the CQ");
}
