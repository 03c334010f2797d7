//! Registered memory the program unmaps before deregistering it stays the device's, as the
//! kernel's pinned pages do (`ib_umem_get`): `unmap_registered.c`, compiled here with gcc
//! against libibverbs, unmaps pages of a region, maps other memory over some of them, and has
//! the device write into, read from and send out of the unmapped pages through an RC QP; every
//! byte is the region's, the new mapping is untouched, and nothing faults. Without the kept
//! pages the device's thread would end the process with SIGSEGV at the first access.

use std::process::Command;
use std::time::Duration;

use crate::support::{report, run_path, Scratch};

#[test]
fn unmapped_registered_pages_stay_the_devices_until_deregistration() {
    let s = Scratch::new("unmap");
    let exe = s.path("unmap_registered");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/unmap_registered.c");
    let st = Command::new("gcc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-libverbs")
        .status()
        .expect("gcc (Debian: build-essential) and libibverbs-dev");
    assert!(st.success(), "unmap_registered.c does not compile");
    let rep = s.path("unmap.report");
    let o = run_path(
        &["--report", rep.to_str().unwrap(), "--log", "mlx5sim=info"],
        &exe,
        &[],
        Duration::from_secs(60),
    )
    .ok("unmap_registered");
    for line in [
        "RDMA WRITE into an unmapped page: ok",
        "the READ: every byte the region's",
        "the new mapping is untouched",
        "the WRITE: every byte the region's",
        "deregistered",
    ] {
        assert!(
            o.stdout.contains(line),
            "{line}:\n{}\n{}",
            o.stdout,
            o.stderr
        );
    }
    // Three runs kept (the middle pages, then the first and the last), freed at deregistration.
    let kept = o
        .stderr
        .matches("registered pages kept for the device")
        .count();
    assert_eq!(kept, 3, "{}", o.stderr);
    assert!(
        o.stderr.contains("kept registered pages freed"),
        "{}",
        o.stderr
    );
    assert_eq!(report(&rep)["driver_bugs"], "0");
}
