//! `benches/count-instructions.sh` runs the post/poll program (the bench target
//! `benches/count_post_poll.rs`) under callgrind and ends with exactly two lines,
//! `instructions per post: N` and `instructions per poll: N`.

use std::path::PathBuf;
use std::process::Command;

/// The `count_post_poll` bench program (`benches/count_post_poll.rs`), built by cargo in the
/// profile of this test (a no-op when it is fresh); cargo's artifact report names the
/// executable, whose file name carries a hash (`target/<profile>/deps/count_post_poll-HASH`).
/// `None` when cargo reports none: then the script builds it itself (release).
fn built_bench() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let release = exe.parent()?.parent()?.ends_with("release");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "mlx5-direct", "--bench", "count_post_poll"])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "building the count_post_poll bench failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let path = &l[at..at + l[at..].find('"')?];
            path.contains("count_post_poll")
                .then(|| PathBuf::from(path))
        })
}

fn parse_line(line: &str, prefix: &str) -> u64 {
    let rest = line
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("expected a line starting with {prefix:?}, got {line:?}"));
    rest.trim()
        .parse()
        .unwrap_or_else(|e| panic!("not a count in {line:?}: {e}"))
}

#[test]
fn script_ends_with_per_post_and_per_poll_counts() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/count-instructions.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg("300");
    if let Some(bin) = built_bench() {
        cmd.env("COUNT_BIN", bin);
    }
    let out = cmd.output().expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "script failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= 2, "too few lines:\n{stdout}");
    let post = parse_line(lines[lines.len() - 2], "instructions per post: ");
    let poll = parse_line(lines[lines.len() - 1], "instructions per poll: ");
    // A post writes at least a ctrl segment, a remote-address segment, the inline data, the
    // doorbell record and a 64-byte BlueFlame copy: never a handful of instructions; a count
    // in the tens of thousands would mean the toggle caught the whole program.
    assert!(
        (20..20_000).contains(&post),
        "implausible post count {post}"
    );
    assert!((5..20_000).contains(&poll), "implausible poll count {poll}");
}

#[test]
fn script_rejects_a_bad_count() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/count-instructions.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("ten")
        .env("COUNT_BIN", "/nonexistent")
        .output()
        .expect("run bash");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("positive integer"));
}
