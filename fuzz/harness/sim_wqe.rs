//! Fuzz harness `sim_wqe`: raw WQE bytes executed by the software ConnectX. Each input is
//! cut into WQEs (one length byte in 16-byte units, 1–4 blocks, then the bytes) posted with
//! `Qp::post_raw` (rdma-core `mlx5dv_wr_raw_wqe`: the library sets only the WQE index, the
//! QPN and the DS count) on A's RC, UC or UD QP (the low bits of the length byte) while the
//! peer is live; the device decodes and executes them against registered memory. Nothing
//! may panic, no WR may complete twice, and ordinary traffic afterwards still runs. Shared by
//! `fuzz/fuzz_targets/sim_wqe.rs` and the stable replay in `tests/it/fuzz_replay.rs`.

use super::sim_world::World;

/// Run one input.
pub fn run(data: &[u8]) {
    let mut w = World::new();
    let mut rest = data;
    let mut id = 10_000u64;
    while let [sel, tail @ ..] = rest {
        let units = 1 + (*sel as usize >> 2) % 16;
        let n = (units * 16).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let mut wqe = body.to_vec();
        wqe.resize(units * 16, 0);
        // The DS count is the WQE's length (the one thing `post_raw` demands).
        wqe[7] = (wqe[7] & 0xc0) | units as u8;
        let q = (*sel & 3) as usize % 3;
        let _ = w.sides[0].qps[q].post_raw(id, &wqe);
        id += 1;
        if id > 10_016 {
            break;
        }
    }
    w.settle();
    w.traffic(1);
    w.settle();
}
