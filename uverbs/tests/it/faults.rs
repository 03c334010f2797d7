//! Faults and capture for an unmodified program: the rules of `--faults` (`MLX5SIM_FAULTS`) and
//! of the control file act on the frames the device sends, the report counts what they did,
//! and `--pcap` writes a capture tshark decodes as RoCE.

use std::process::Command;

use crate::pingpong::pair;
use crate::support::Scratch;

fn n(r: &std::collections::BTreeMap<String, String>, k: &str) -> u64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} in {r:?}"))
}

/// A counted rule: exactly the first ten data packets the server sends are lost, and RC
/// delivers everything anyway.
#[test]
fn a_counted_loss_rule_drops_exactly_its_frames() {
    let p = pair(
        "faults-count",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "40", "-e"],
        &["--faults", "only=data times=10 loss=100%"],
    );
    assert_eq!(
        n(&p.server_report, "fault_dropped"),
        10,
        "{:?}",
        p.server_report
    );
    assert_eq!(
        n(&p.client_report, "fault_dropped"),
        10,
        "{:?}",
        p.client_report
    );
    assert!(
        p.client.stdout.contains("40 iters in"),
        "{}",
        p.client.stdout
    );
}

/// Duplication, reordering and corruption together: the receiver drops the corrupted frames
/// on their ICRC and the duplicates as duplicates, and the ping-pong completes.
#[test]
fn duplication_reordering_and_corruption() {
    let p = pair(
        "faults-mix",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "100", "-e", "-s", "2048"],
        &["--faults", "seed=11,dup=5%,reorder=30us,corrupt=2%"],
    );
    let (s, c) = (&p.server_report, &p.client_report);
    assert!(n(s, "fault_duplicated") + n(c, "fault_duplicated") > 0);
    assert!(n(s, "fault_delayed") + n(c, "fault_delayed") > 0);
    let corrupted = n(s, "fault_corrupted") + n(c, "fault_corrupted");
    assert!(corrupted > 0);
    // A corrupted frame that reaches the other end fails its ICRC check (one sent after the
    // other end finished reaches nobody).
    let icrc = n(s, "rx_icrc_encapsulated") + n(c, "rx_icrc_encapsulated");
    assert!(icrc > 0 && icrc <= corrupted, "{s:?} {c:?}");
    assert!(n(s, "duplicate_request") + n(c, "duplicate_request") > 0);
}

/// The control file's rules apply as well (read when the device starts and whenever it
/// changes).
#[test]
fn the_control_file_sets_the_rules() {
    let s = Scratch::new("faults-control");
    let ctl = s.path("control");
    std::fs::write(
        &ctl,
        "# five data packets lost\nonly=data\ntimes=5 loss=100%\n",
    )
    .unwrap();
    let p = pair(
        "faults-control-run",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "20", "-e"],
        &["--control", ctl.to_str().unwrap()],
    );
    assert_eq!(
        n(&p.server_report, "fault_dropped"),
        5,
        "{:?}",
        p.server_report
    );
}

/// The capture holds the RoCE v2 frames the device sent, as tshark reads them.
#[test]
fn the_capture_decodes_as_roce() {
    let s = Scratch::new("pcap");
    let cap = s.path("server-%p.pcap");
    let p = pair(
        "pcap-run",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "10", "-e"],
        &["--pcap", cap.to_str().unwrap()],
    );
    let files: Vec<_> = std::fs::read_dir(&s.0)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|f| f.extension().is_some_and(|x| x == "pcap"))
        .collect();
    assert_eq!(files.len(), 2, "one capture per process (%p): {files:?}");
    let sent = n(&p.server_report, "port_xmit_packets") + n(&p.client_report, "port_xmit_packets");
    let mut frames = 0;
    for f in &files {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(f)
            .args(["-T", "fields", "-e", "infiniband.bth.opcode"])
            .output()
            .expect("tshark (Debian: tshark)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        // Every frame decodes as InfiniBand over UDP: SEND (0..5) and ACK (17) opcodes.
        for l in text.lines() {
            let op: u32 = l
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("not RoCE: '{l}'"));
            assert!(op <= 5 || op == 17, "opcode {op}");
            frames += 1;
        }
    }
    assert_eq!(frames as u64, sent, "every frame sent is in a capture");
}

/// RNR rules act on the requests the device receives: the first five SENDs that reach each end
/// find its receive queue looking empty (with receives posted), each end answers RNR NAK, the
/// other waits its RNR timer and resends, and the ping-pong completes. Each end counts the
/// refusals (`fault_rnr`, `out_of_buffer`) and the other end the RNR NAKs it got
/// (`rnr_nak_retry_err`).
#[test]
fn rnr_rules_make_each_receiver_answer_rnr_naks() {
    let p = pair(
        "faults-rnr",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "40"],
        &["--faults", "times=5 rnr=100%"],
    );
    let (s, c) = (&p.server_report, &p.client_report);
    for r in [s, c] {
        assert_eq!(n(r, "fault_rnr"), 5, "{r:?}");
        assert_eq!(n(r, "out_of_buffer"), 5, "{r:?}");
        assert_eq!(n(r, "rnr_nak_retry_err"), 5, "{r:?}");
        assert_eq!(n(r, "req_rnr_retries_exceeded"), 0, "{r:?}");
    }
    assert!(
        p.client.stdout.contains("40 iters in"),
        "{}",
        p.client.stdout
    );
}

/// A receiver behind for a while (`rnr-for=`, from the first request that needs a receive
/// WQE), set through the control file: the first SEND is refused until the time is over, every
/// refusal is one RNR NAK the other end got, and the ping-pong completes.
#[test]
fn a_receiver_behind_for_a_while_through_the_control_file() {
    let s = Scratch::new("faults-rnr-for");
    let ctl = s.path("control");
    // The window is long against the RNR timer (0.64 ms) and against how late a descheduled
    // process resends (over 100 ms on a loaded machine, `docs/software-connectx.md`): at
    // least two refusals whatever the scheduler does.
    std::fs::write(&ctl, "# 300 ms of empty receive queues\nrnr-for=300ms\n").unwrap();
    let p = pair(
        "faults-rnr-for-run",
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "20", "-e"],
        &["--control", ctl.to_str().unwrap()],
    );
    let (s, c) = (&p.server_report, &p.client_report);
    for (r, other) in [(s, c), (c, s)] {
        // ibv_rc_pingpong's min_rnr_timer 12 is 0.64 ms (IBTA Vol 1 Table 45): several waits.
        assert!(n(r, "fault_rnr") >= 2, "{r:?}");
        assert_eq!(n(r, "out_of_buffer"), n(r, "fault_rnr"), "{r:?}");
        assert_eq!(
            n(other, "rnr_nak_retry_err"),
            n(r, "fault_rnr"),
            "{r:?} {other:?}"
        );
    }
    assert!(
        p.client.stdout.contains("20 iters in"),
        "{}",
        p.client.stdout
    );
}
