//! Keeps `docs/troubleshooting.md` in step with the code: every mlx5 syndrome, every status
//! `diag::advice` covers and every counter it names has its row in the document.

use mlx5_connect::diag;
use mlx5_cq::{syndrome_name, WcStatus, ALL_SYNDROMES};

fn doc() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/troubleshooting.md");
    std::fs::read_to_string(p).expect("docs/troubleshooting.md is readable")
}

#[test]
fn every_syndrome_has_a_row() {
    let d = doc();
    for s in ALL_SYNDROMES {
        let row = format!("| {s:#04x} `{}` |", syndrome_name(s));
        assert!(d.contains(&row), "missing row {row}");
        assert!(d.contains(WcStatus::from_syndrome(s).name()));
    }
}

#[test]
fn every_counter_the_advice_names_is_explained() {
    let d = doc();
    for s in ALL_SYNDROMES {
        for c in diag::advice(WcStatus::from_syndrome(s)).counters {
            let name = c.split(' ').next().unwrap_or(c);
            assert!(
                d.contains(&format!("| `{name}` |")),
                "counter {name} has no row in section 4"
            );
        }
    }
}
