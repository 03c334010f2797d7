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
                Some(ControlEvent::RebuildRequested { .. }) | None => {}
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
