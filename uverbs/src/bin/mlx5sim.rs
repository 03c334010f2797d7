//! `mlx5sim`: run a program on its own software ConnectX.
//!
//! ```text
//! mlx5sim [--ip ADDR] [--faults SPEC] [--pcap FILE] [OPTIONS] -- PROGRAM ARGS...
//! ```
//!
//! The launcher puts `libmlx5sim.so` (found next to this executable, as cargo builds them into
//! one directory) in the program's `LD_PRELOAD`, turns its options into the library's
//! environment variables (`MLX5SIM_*`, the crate's `config` module lists them), checks them,
//! and executes the program in its place: its exit status is the program's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

#[path = "../faultspec.rs"]
#[allow(dead_code)]
mod faultspec;

/// The library's file name.
const LIB: &str = "libmlx5sim.so";

/// Run PROGRAM with unmodified rdma-core (libibverbs + libmlx5) on its own software ConnectX
/// (device mlx5_0, RoCE v2), through the preload library libmlx5sim.so.
#[derive(Parser, Debug)]
#[command(name = "mlx5sim", version, after_help = AFTER_HELP)]
struct Args {
    /// IPv4 address of the device's port (its RoCE v2 GID is ::ffff:ADDR); default a free
    /// 127.77.x.y. Across hosts, give the host's own address.
    #[arg(long, value_name = "ADDR")]
    ip: Option<std::net::Ipv4Addr>,
    /// UDP port every software ConnectX binds its socket to.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Fault rules, e.g. "loss=1%,dup=0.5%" on the frames the device transmits, "times=5,rnr=100%"
    /// on the requests it receives (or @FILE).
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// A file whose fault rules replace the current ones whenever it changes.
    #[arg(long, value_name = "FILE")]
    control: Option<PathBuf>,
    /// Capture every frame the device transmits to this pcap file (%p: the process id).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Write the run's report (driver bugs, counters) to this file at exit (%p: the process id).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Speak native RoCE v2 on this TAP interface (e.g. to Linux Soft-RoCE).
    #[arg(long, value_name = "NAME")]
    tap: Option<String>,
    /// Active MTU of the port (256, 512, 1024, 2048, 4096).
    #[arg(long, value_name = "BYTES")]
    mtu: Option<u32>,
    /// Least local ACK timeout of a QP whose peer is in another process, in ms (default 250;
    /// 0: the timer the QP's timeout attribute asks for, as on a ConnectX).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(0..=3_600_000))]
    ack_floor_ms: Option<u32>,
    /// The library's log filter (RUST_LOG syntax), on standard error.
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

const AFTER_HELP: &str = "\
Examples:
  mlx5sim -- ibv_devinfo -v
  mlx5sim -- ibv_rc_pingpong -g 0                      # server
  mlx5sim -- ibv_rc_pingpong -g 0 127.0.0.1            # client, another terminal
  mlx5sim --faults loss=1% -- ib_write_bw 127.0.0.1
Programs started another way: set LD_PRELOAD=/path/to/libmlx5sim.so and the MLX5SIM_*
variables (docs/rdma-core-on-the-software-connectx.md).";

/// `libmlx5sim.so` next to this executable. Started by `cargo run` (cargo builds a package's
/// binaries for it, not its `cdylib`), the launcher first has cargo build the library of the
/// same profile, so `cargo run --bin mlx5sim -- PROGRAM` always runs the current one.
fn library() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ours = std::env::var_os("CARGO_MANIFEST_DIR")
        .is_some_and(|m| Path::new(&m).join("src/bin/mlx5sim.rs").is_file());
    if let (Some(cargo), true, Some(target)) = (std::env::var_os("CARGO"), ours, dir.parent()) {
        let mut c = std::process::Command::new(cargo);
        c.args([
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
                c.arg("--release");
            }
            p => {
                c.args(["--profile", p]);
            }
        }
        if !c.status().map(|s| s.success()).unwrap_or(false) {
            return Err(format!("cargo could not build {LIB} (see above)"));
        }
    }
    let lib = dir.join(LIB);
    if lib.is_file() {
        return Ok(lib);
    }
    // Cargo keeps its own copy in deps/ (and copies it up only when it rebuilds it).
    let kept = dir.join("deps").join(LIB);
    if kept.is_file() {
        return Ok(kept);
    }
    let flag = if profile == "release" {
        " --release"
    } else {
        ""
    };
    Err(format!(
        "{} is missing (the launcher looks next to itself): build it with `cargo build{flag} -p \
         mlx5-sim-uverbs`",
        lib.display()
    ))
}

fn run(a: Args) -> Result<std::convert::Infallible, String> {
    let lib = library()?;
    if let Some(f) = &a.faults {
        let text = match f.strip_prefix('@') {
            Some(file) => {
                std::fs::read_to_string(file).map_err(|e| format!("--faults {f}: {e}"))?
            }
            None => f.clone(),
        };
        faultspec::parse(&text).map_err(|e| format!("--faults: {e}"))?;
    }
    if let Some(m) = a.mtu {
        if ![256, 512, 1024, 2048, 4096].contains(&m) {
            return Err(format!("--mtu {m}: 256, 512, 1024, 2048 or 4096"));
        }
    }
    let (prog, args) = a
        .command
        .split_first()
        .ok_or_else(|| "no program to run".to_string())?;
    let mut preload = OsString::from(&lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args).env("LD_PRELOAD", preload);
    let set = |c: &mut std::process::Command, k: &str, v: Option<String>| {
        if let Some(v) = v {
            c.env(k, v);
        }
    };
    set(&mut cmd, "MLX5SIM_IP", a.ip.map(|i| i.to_string()));
    set(&mut cmd, "MLX5SIM_PORT", a.port.map(|p| p.to_string()));
    set(&mut cmd, "MLX5SIM_FAULTS", a.faults);
    set(
        &mut cmd,
        "MLX5SIM_CONTROL",
        a.control.map(|p| p.display().to_string()),
    );
    set(
        &mut cmd,
        "MLX5SIM_PCAP",
        a.pcap.map(|p| p.display().to_string()),
    );
    set(
        &mut cmd,
        "MLX5SIM_REPORT",
        a.report.map(|p| p.display().to_string()),
    );
    set(&mut cmd, "MLX5SIM_TAP", a.tap);
    set(&mut cmd, "MLX5SIM_MTU", a.mtu.map(|m| m.to_string()));
    set(
        &mut cmd,
        "MLX5SIM_ACK_FLOOR_MS",
        a.ack_floor_ms.map(|m| m.to_string()),
    );
    set(&mut cmd, "MLX5SIM_LOG", a.log);
    let e = cmd.exec();
    Err(format!("cannot run {}: {e}", Path::new(prog).display()))
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(a) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("mlx5sim: {e}");
            ExitCode::from(127)
        }
    }
}
