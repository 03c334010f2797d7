//! Running an example or tool as a process and watching its output: what the tests that start
//! a server process and then its client need (the facade's `tests/it/pingpong.rs`, the tools'
//! `tools/tests/it/tools_lat_bw.rs`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running example process whose stdout is read line by line as it comes. Dropping it kills
/// the process if it still runs, so a failing test leaves nothing behind.
pub struct Proc {
    what: String,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Proc {
    /// Start `exe` with `args`.
    pub fn spawn(exe: &Path, args: &[&str]) -> Proc {
        let name = exe.file_name().map_or_else(
            || exe.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the example");
        let out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Proc {
            what: format!("{name} {args:?}"),
            child,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// The rest of the first stdout line that contains `tag`, after it.
    pub fn wait_line(&mut self, tag: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if let Some(at) = l.find(tag) {
                        return l[at + tag.len()..].to_string();
                    }
                }
                Err(e) => panic!(
                    "{}: no line with {tag:?} ({e}); it printed:\n{}",
                    self.what,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Wait for the process to exit within `timeout`, require status 0, return its stdout.
    pub fn finish(mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait().expect("wait for the example") {
                Some(st) => break st,
                None if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("{} still running after {timeout:?}", self.what);
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        // The reader ends at EOF, which the exit brings.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let out = self.seen.join("\n");
        assert!(
            status.success(),
            "{} failed: {status}\n{out}\n{stderr}",
            self.what
        );
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A server and its client as two processes of `exe`: the server is started with `-p 0` (it
/// picks a free TCP port) and `args`; once it printed `ready` followed by the port, the client
/// is started with that port, `args` and the address 127.0.0.1. Both must exit 0 within
/// `timeout`. Returns (server, client) stdout.
pub fn two_processes(
    exe: &Path,
    args: &[&str],
    ready: &str,
    timeout: Duration,
) -> (String, String) {
    let mut server = Proc::spawn(exe, &[&["-p", "0"], args].concat());
    let rest = server.wait_line(ready);
    let port = rest
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        port.parse::<u16>().is_ok_and(|p| p > 0),
        "no port after {ready:?}: {rest:?}"
    );
    let client = Proc::spawn(
        exe,
        &[&["-p", port.as_str()], args, &["127.0.0.1"]].concat(),
    );
    let c = client.finish(timeout);
    let s = server.finish(timeout);
    (s, c)
}

/// The example program `name` of package `package`, next to the running test binary
/// (`target/<profile>/examples/`, where `cargo test` builds examples beside the tests). When
/// it is not there (a test run alone), it is built first with `cargo` (the caller's
/// `env!("CARGO")`) in `manifest_dir`, in the test's profile.
pub fn example(cargo: &str, manifest_dir: &str, package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    if !bin.is_file() {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", package, "--example", name])
            .current_dir(manifest_dir);
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo");
        assert!(st.success(), "building example {name} failed");
    }
    bin
}

/// Run `exe args` with no standard input and no `RUST_LOG`, for at most `limit`: its exit code
/// (`None`: ended by a signal) and standard error, or an error saying it still ran at the limit
/// (it is killed: a hang).
pub fn run_bounded(
    exe: &Path,
    args: &[String],
    limit: Duration,
) -> Result<(Option<i32>, String), String> {
    let mut child = Command::new(exe)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let mut err = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{} {args:?} still runs after {limit:?} (a hang)",
                exe.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((status.code(), reader.join().unwrap_or_default()))
}

/// The preload library of `uverbs/` (`libmlx5sim.so`, the kernel side of an mlx5 device played
/// in user space on the software ConnectX), built from the current sources for the running
/// test binary's profile and target directory: cargo builds a package's binaries for
/// integration tests but never a `cdylib`, so the first caller builds it with `cargo`
/// (the caller's `env!("CARGO")`: `cargo build -p mlx5-sim-uverbs --lib`, quick when it is
/// current). A program started with it in `LD_PRELOAD` finds the device `mlx5_0` through
/// unmodified libibverbs and libmlx5 (docs/rdma-core-on-the-software-connectx.md).
pub fn preload_library(cargo: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test path");
            // target/<profile>/deps/<test> (integration tests) or target/<profile>/<bin>.
            let mut profile_dir = exe.parent().expect("the test's directory");
            if profile_dir.ends_with("deps") {
                profile_dir = profile_dir.parent().expect("target/<profile>");
            }
            let profile = profile_dir
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a profile directory");
            let target = profile_dir.parent().expect("the target directory");
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "mlx5-sim-uverbs", "--lib"])
                .arg("--target-dir")
                .arg(target);
            match profile {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                p => {
                    cmd.args(["--profile", p]);
                }
            }
            let st = cmd.status().expect("cargo to build libmlx5sim.so");
            assert!(st.success(), "cargo build -p mlx5-sim-uverbs --lib failed");
            let lib = profile_dir.join("libmlx5sim.so");
            assert!(lib.is_file(), "{} was not built", lib.display());
            lib
        })
        .clone()
}
