//! Interop cases between the software ConnectX on a TAP link and the kernel's Soft-RoCE.
//!
//! ```text
//! rxe-interop --tap tap0 --ip 192.168.77.2 --rxe rxe_tap [--only NAME] [--delay-ms N]
//! ```
//!
//! One process holds both ends: a software ConnectX bound to the TAP interface (`--tap`, its
//! address `--ip`), driven through this project's direct data path, and the Soft-RoCE device
//! bound to the TAP netdev (`--rxe`), driven through libibverbs. For every case the two QPs
//! are connected over a TCP control connection on 127.0.0.1 with this project's handshake
//! (`mlx5_connect::Connection` on both ends), then the case posts on both sides and checks the
//! data and the completions on both. Each case prints `ok NAME` or `FAIL NAME: why`; `done` ends
//! the run. `--delay-ms` waits that long after opening the TAP interface (which gives the link
//! carrier) before the first case, for a capture to start on it. Runs inside the rxe-vm guest
//! (`tools/rxe-vm/run-interop-tests.sh`).
//!
//! Here: the command line and the run; beside it `pair` (the devices, one connected pair, the
//! checks) and `cases` (the cases and their order).

mod cases;
mod pair;

mod run {
    use std::process::ExitCode;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use mlx5_ctx::{Context, SimFabric};
    use mlx5_hw::verbs::VerbsDevice;
    use mlx5_sim::DeviceConfig;

    use super::cases;
    use super::pair::*;

    /// The command line: TAP name, sim address, rxe device, case filter, start delay (ms).
    type Args = (String, [u8; 4], String, Option<String>, u64);

    fn parse() -> R<Args> {
        let a: Vec<String> = std::env::args().skip(1).collect();
        let get = |k: &str| {
            a.iter()
                .position(|x| x == k)
                .and_then(|i| a.get(i + 1))
                .cloned()
        };
        let tap = get("--tap").ok_or("--tap NAME needed")?;
        let ip: std::net::Ipv4Addr = get("--ip")
            .ok_or("--ip ADDR needed")?
            .parse()
            .map_err(e("--ip"))?;
        let rxe = get("--rxe").ok_or("--rxe DEVICE needed")?;
        let delay = get("--delay-ms")
            .map_or(Ok(0), |d| d.parse::<u64>())
            .map_err(e("--delay-ms"))?;
        Ok((tap, ip.octets(), rxe, get("--only"), delay))
    }

    pub fn main() -> ExitCode {
        let (tap, ip, rxe, only, delay) = match parse() {
            Ok(v) => v,
            Err(x) => {
                eprintln!("rxe-interop: {x}");
                return ExitCode::from(2);
            }
        };
        let sim_fabric = match SimFabric::threaded() {
            Ok(f) => f,
            Err(x) => {
                eprintln!("rxe-interop: {x}");
                return ExitCode::from(2);
            }
        };
        let sim_ctx = sim_fabric.add_device_with(DeviceConfig::new(ip).name("sim-tap"));
        let Some(sim) = sim_ctx.sim_device().cloned() else {
            return ExitCode::from(2);
        };
        let fabric = sim_fabric.fabric().clone();
        if let Err(x) = sim.bind_tap(&tap) {
            eprintln!("rxe-interop: {x}");
            return ExitCode::from(2);
        }
        let verbs = match VerbsDevice::open(&rxe) {
            Ok(v) => Arc::new(v),
            Err(x) => {
                eprintln!("rxe-interop: open {rxe}: {x}");
                return ExitCode::from(2);
            }
        };
        // The link has carrier from now on: a capture on it may start.
        println!("tap open");
        std::thread::sleep(Duration::from_millis(delay));
        let env = Env {
            sim,
            fabric,
            sim_ctx,
            verbs_ctx: Context::from_device(verbs.clone()),
            verbs,
            tap,
        };
        let mut failed = 0;
        for (name, f) in cases::CASES {
            if only.as_deref().is_some_and(|o| !name.contains(o)) {
                continue;
            }
            let t = Instant::now();
            match f(&env) {
                Ok(()) => println!("ok {name} ({} ms)", t.elapsed().as_millis()),
                Err(x) => {
                    failed += 1;
                    println!("FAIL {name}: {x}");
                }
            }
        }
        let st = env.sim.tap_stats().unwrap_or_default();
        println!(
            "tap: {} RoCE frames received, {} sent, {} ARP replies, {} dropped",
            st.roce_rx, st.tx, st.arp_replies, st.dropped
        );
        let bugs = env.fabric.driver_bugs();
        for b in &bugs {
            println!("driver bug: {b}");
        }
        println!("done");
        if failed == 0 && bugs.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    run::main()
}
