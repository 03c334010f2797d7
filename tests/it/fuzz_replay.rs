//! The corpora of the fuzz targets `sim_wqe` (raw WQEs executed by the software ConnectX)
//! and `roce_frames` (arbitrary RoCEv2 frames delivered to live RC, UC and UD QPs), replayed
//! on the stable toolchain: each checked-in input (`fuzz/corpus/TARGET/seed-*`) runs through
//! the harness the cargo-fuzz target runs (`fuzz/harness/TARGET.rs`), so every seed and every
//! crash a fuzzer found (added as a seed) is a regression test (docs/testing.md).

#[path = "../../fuzz/harness/sim_world.rs"]
mod sim_world;

#[path = "../../fuzz/harness/roce_frames.rs"]
mod roce_frames;
#[path = "../../fuzz/harness/sim_wqe.rs"]
mod sim_wqe;

use mlx5_testkit::corpus::{corpus, replay};

#[test]
fn sim_wqe_corpus_replays() {
    replay("sim_wqe", sim_wqe::run);
}

#[test]
fn roce_frames_corpus_replays() {
    replay("roce_frames", roce_frames::run);
}

/// The harness's frames get past the link checks (Ethernet, IPv4, UDP, ICRC): the fuzzer
/// starts at the transport, not at the parser. Every hand-made seed (`fuzz/make-seeds.py`)
/// but the raw ones passes them; the fuzzer's own (`seed-cov-*`) may be anything.
#[test]
fn roce_frames_seeds_reach_the_transport() {
    for (name, bytes) in corpus("roce_frames") {
        if name.contains("raw") || name.starts_with("seed-cov-") {
            continue;
        }
        let w = roce_frames::run_world(&bytes);
        for s in &w.sides {
            let d = s.ctx.sim_device().expect("sim");
            assert_eq!(
                d.counter("port_rcv_errors"),
                0,
                "{name}: a frame failed the checks"
            );
        }
        assert_eq!(w.fabric.fabric().malformed_frames(), 0, "{name}");
    }
}

/// The responder takes a well-formed frame of the fuzzer: the seed SEND with the PSN B's RC QP
/// expects consumes one more of its receives than the same run without it.
#[test]
fn an_in_order_send_of_the_harness_reaches_the_responder() {
    let recvs = |w: &sim_world::World| {
        let qpn = w.sides[1].qps[0].qpn();
        w.done
            .iter()
            .filter(|(side, q, id)| *side == 1 && *q == qpn && (1000..2000).contains(id))
            .count()
    };
    let (_, seed) = corpus("roce_frames")
        .into_iter()
        .find(|(n, _)| n == "seed-rc-send-to-b")
        .expect("the seed");
    let with = recvs(&roce_frames::run_world(&seed));
    let without = recvs(&roce_frames::run_world(&[]));
    assert_eq!(
        with,
        without + 1,
        "receives completed: {with} with the frame, {without} without"
    );
}
