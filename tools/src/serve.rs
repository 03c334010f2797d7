//! What both tools do at the edges of a run: print a line at once ([`say`]) and, on the
//! server, serve until every client has closed its control connection
//! ([`serve_until_closed`]).

use super::{Error, Result};
use mlx5_connect::{AbortCode, Connection, ControlEvent};
use std::io::Write;
use std::time::Duration;

/// Print a line and flush it now: a script or a test may be waiting for it.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The server's part once its QPs are connected: the client drives the run (a READ or WRITE
/// server only serves), so wait until every client has closed its control connection
/// (`AbortCode::Shutdown`). A client that aborts for another reason ends the run with it.
pub fn serve_until_closed(conns: &mut [Connection]) -> Result<()> {
    let mut open = vec![true; conns.len()];
    while open.iter().any(|&o| o) {
        for (conn, open) in conns.iter_mut().zip(open.iter_mut()) {
            if !*open {
                continue;
            }
            match conn.poll_control()? {
                Some(ControlEvent::PeerAborted(AbortCode::Shutdown)) => *open = false,
                Some(ControlEvent::PeerAborted(code)) => {
                    return Err(Error::Peer {
                        peer: "the client".into(),
                        why: format!("it aborted: {}", code.describe()),
                    })
                }
                // A rebuild request (or an event a later mlx5-connect adds) changes nothing
                // for a server waiting for its clients' goodbyes.
                Some(_) | None => {}
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// End the process now when a run failed, reporting `r`'s error as `tool: error: ...` (and
/// what the software ConnectX logged as driver bugs) with its exit status, without tearing the
/// run's resources down first — as perftest exits on a failure. The resources are still
/// registered when the process ends, so the device never touches freed memory; the orderly
/// teardown would only wait: the software ConnectX moves a whole message in one step under its
/// lock (a 1 GiB WRITE: tens of seconds in a debug build), and deregistering waits for that
/// step. On success `r` is returned as it is. After a timeout the driver bugs are not asked
/// for: asking takes the software ConnectX's lock, which the step that stalled the run may
/// hold for as long.
pub fn exit_on_failure<T>(tool: &str, devs: &crate::devices::Devices, r: Result<T>) -> Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("{tool}: error: {e}");
            if !matches!(e, crate::Error::Timeout { .. }) {
                devs.print_driver_bugs(tool);
            }
            std::process::exit(i32::from(e.exit_code()));
        }
    }
}
