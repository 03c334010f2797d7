//! Running unmodified programs under the preload library: the launcher cargo built for this
//! test binary (`CARGO_BIN_EXE_mlx5sim`, with `libmlx5sim.so` next to it), every run bounded
//! by a timeout and killed past it, its output kept for the checks.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The launcher.
pub fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mlx5sim"))
}

/// The preload library next to it, built from the current sources: cargo builds a package's
/// binaries for its integration tests but not its `cdylib`, so the first caller builds it
/// (`cargo build -p mlx5-sim-uverbs --lib`, same profile and target directory; quick when it
/// is current) and every test then runs the library of the sources under test.
pub fn library() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = launcher();
            let profile_dir = exe.parent().expect("target/<profile>");
            let profile = profile_dir
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a profile directory");
            let target = profile_dir.parent().expect("the target directory");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args([
                "build",
                "--quiet",
                "-p",
                "mlx5-sim-uverbs",
                "--lib",
                "--target-dir",
            ])
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
            let lib = exe.with_file_name("libmlx5sim.so");
            let kept = profile_dir.join("deps/libmlx5sim.so");
            assert!(
                lib.is_file() || kept.is_file(),
                "{} was not built",
                lib.display()
            );
            lib
        })
        .clone()
}

/// Whether a program is installed (the tests need Debian's ibverbs-utils, perftest,
/// ucx-utils; tools/test.sh installs them). A missing one fails the test with a clear message.
pub fn need(program: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!("{program} is not installed (Debian: ibverbs-utils, perftest or ucx-utils; tools/test.sh installs them)");
}

/// A directory of its own for one test (reports, captures), removed by the caller's
/// `Scratch` drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory named after the test.
    pub fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("mlx5sim-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch directory");
        Scratch(d)
    }

    /// A path inside it.
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a finished run left.
#[derive(Debug)]
pub struct Output {
    /// Exit code (`None`: killed by a signal or by the timeout).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Killed at the timeout.
    pub timed_out: bool,
}

impl Output {
    /// Panic with everything unless the run exited 0.
    pub fn ok(self, what: &str) -> Output {
        assert!(
            self.code == Some(0) && !self.timed_out,
            "{what} failed ({:?}{}):\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            if self.timed_out { ", timed out" } else { "" },
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A program started under the launcher.
pub struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// Start `program args` under `mlx5sim` with extra environment `env` and launcher options
/// `opts`.
pub fn start(opts: &[&str], program: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    start_path(opts, &need(program), args, env)
}

/// [`start`] of a program named by its path.
pub fn start_path(opts: &[&str], prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let program = prog.display();
    library();
    let mut cmd = Command::new(launcher());
    cmd.args(opts)
        .arg("--")
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Run {
        child,
        lines,
        stdout: Vec::new(),
        stderr,
    }
}

impl Run {
    /// The program's process id (the launcher execs it).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the program has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait for the program to end, killing it after `limit`.
    pub fn finish(mut self, limit: Duration) -> Output {
        let end = Instant::now() + limit;
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= end => {
                    timed_out = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.stdout.push(l);
        }
        Output {
            code: status.and_then(|s| s.code()),
            stdout: self.stdout.join("\n"),
            stderr: self.stderr.join().unwrap_or_default(),
            timed_out,
        }
    }
}

/// Run a program to its end.
pub fn run(opts: &[&str], program: &str, args: &[&str], limit: Duration) -> Output {
    start(opts, program, args, &[]).finish(limit)
}

/// [`run`] of a program named by its path.
pub fn run_path(opts: &[&str], program: &Path, args: &[&str], limit: Duration) -> Output {
    start_path(opts, program, args, &[]).finish(limit)
}

/// Wait (at most `limit`) until something listens on TCP port `port` (the server's rendezvous:
/// its output is block-buffered into the pipe, so its lines come only at exit).
pub fn wait_listen(port: u16, limit: Duration) {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if listening(port) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on TCP port {port} after {limit:?}");
}

/// Whether something listens on TCP port `port`.
pub fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        let t = std::fs::read_to_string(f).unwrap_or_default();
        // sl local_address rem_address st ...: state 0A is LISTEN.
        t.lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && format!("{} ", c[1]).ends_with(&hex) && c[3] == "0A"
        })
    })
}

/// A TCP port no other test of this binary uses at the same time (the programs' own
/// rendezvous port).
pub fn tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("bound").port()
}

/// The `name value` pairs of a report file.
pub fn report(path: &Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no report at {}: {e}", path.display()));
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
