//! The device judges every doorbell a preloaded program rings: a program that plants a
//! corrupted WQE (its BlueFlame copy differs from the ring, `plant_bad_wqe.c`, compiled here
//! with gcc against libibverbs and libmlx5) is reported, at exit on standard error and in the
//! report; the same program with a faithful copy is not.

use std::process::Command;
use std::time::Duration;

use crate::support::{report, run_path, Scratch};

#[test]
fn a_corrupted_blueflame_copy_is_reported_and_a_faithful_one_is_not() {
    let s = Scratch::new("plant");
    let exe = s.path("plant_bad_wqe");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/plant_bad_wqe.c");
    let st = Command::new("gcc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-libverbs", "-lmlx5"])
        .status()
        .expect("gcc (Debian: build-essential) and libibverbs-dev");
    assert!(st.success(), "plant_bad_wqe.c does not compile");
    for (mode, bugs) in [("corrupt", 1), ("clean", 0)] {
        let rep = s.path(&format!("{mode}.report"));
        let o = run_path(
            &["--report", rep.to_str().unwrap()],
            &exe,
            &[mode],
            Duration::from_secs(60),
        )
        .ok(&format!("plant_bad_wqe {mode}"));
        assert!(
            o.stdout.contains("transport retry counter exceeded"),
            "{}",
            o.stdout
        );
        // The asynchronous event of the QP's fall into Error, read from the context's
        // descriptor; destroying the QP then waits for nothing (the event was acknowledged).
        assert!(
            o.stdout
                .contains("async event local work queue catastrophic error on the QP"),
            "{}",
            o.stdout
        );
        let r = report(&rep);
        assert_eq!(r["driver_bugs"], bugs.to_string(), "{mode}: {r:?}");
        if bugs > 0 {
            assert!(r["bug"].contains("BlueFlameMismatch"), "{r:?}");
            assert!(
                r["bug"].contains("differs from the ring at byte 36"),
                "{r:?}"
            );
            assert!(
                o.stderr.contains("saw 1 driver bug(s)") && o.stderr.contains("BlueFlameMismatch"),
                "stderr: {}",
                o.stderr
            );
        } else {
            assert!(!o.stderr.contains("driver bug"), "stderr: {}", o.stderr);
        }
    }
}
