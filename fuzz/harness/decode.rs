//! Fuzz harness `decode`: arbitrary bytes through the WQE/CQE decoder of `wqe-dump`
//! (`mlx5_decode::decode`), every kind and option. The first byte picks the kind, the QP type,
//! the CQE size, the scatter count and the compressed-CQE layout; the rest is decoded.
//! Nothing may panic; a report renders as text. Shared by `fuzz/fuzz_targets/decode.rs` and
//! the stable replay of its corpus (`tools/tests/it/fuzz_replay.rs`).

use mlx5_decode::{decode, Kind, Options, QpType, Zip};

/// Run one input.
pub fn run(data: &[u8]) {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let kind = [Kind::Send, Kind::Recv, Kind::Srq, Kind::Cqe, Kind::Cq][(sel % 5) as usize];
    let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Xrc][((sel >> 3) % 4) as usize];
    let opts = Options {
        qp_type,
        cqe_size: if sel & 0x20 != 0 { 128 } else { 64 },
        sges: (sel & 0x40 != 0).then_some((sel as usize >> 1) % 5),
        zip: if sel & 0x80 != 0 {
            Zip::Enhanced
        } else {
            Zip::Basic
        },
    };
    if let Ok(report) = decode(kind, bytes, &opts) {
        let text = report.to_string();
        assert!(!text.is_empty(), "an empty report");
    }
}
