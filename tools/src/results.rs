//! What the two ends of a bidirectional `bw` run (`-b`) across processes swap at the end: each
//! end's own figures, so that both print the sum of the two directions, as perftest does
//! (perftest `src/perftest_parameters.c` `print_full_bw_report` adds the remote report to the
//! local one; `src/perftest_communication.c` swaps them over the control socket).
//!
//! Wire format (big-endian), 48 bytes: `"MX5R"`, version 1, 3 bytes 0, message size (u64),
//! messages (u64), then the peak bandwidth, the average bandwidth (bytes per second) and the
//! message rate (per second) as IEEE 754 doubles.

use crate::stats::BwStats;
use crate::{Error, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MAGIC: [u8; 4] = *b"MX5R";
const VERSION: u8 = 1;
/// Bytes of one message.
pub const RESULTS_LEN: usize = 48;

/// The wire form of `s`.
pub fn encode(s: &BwStats) -> [u8; RESULTS_LEN] {
    let mut b = [0u8; RESULTS_LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    b[8..16].copy_from_slice(&s.bytes.to_be_bytes());
    b[16..24].copy_from_slice(&s.iterations.to_be_bytes());
    b[24..32].copy_from_slice(&s.peak_bps.to_be_bytes());
    b[32..40].copy_from_slice(&s.avg_bps.to_be_bytes());
    b[40..48].copy_from_slice(&s.msg_rate.to_be_bytes());
    b
}

/// The figures in `b`, or why they are not figures.
pub fn decode(b: &[u8; RESULTS_LEN]) -> std::result::Result<BwStats, String> {
    if b[..4] != MAGIC {
        return Err(format!("not a results message (starts {:02x?})", &b[..4]));
    }
    if b[4] != VERSION {
        return Err(format!(
            "results version {}, this build speaks {VERSION}: run the same build on both ends",
            b[4]
        ));
    }
    let u = |r: std::ops::Range<usize>| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[r]);
        a
    };
    let f = |r| {
        let v = f64::from_be_bytes(u(r));
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(format!("a figure of {v} in the peer's results"))
        }
    };
    Ok(BwStats {
        bytes: u64::from_be_bytes(u(8..16)),
        iterations: u64::from_be_bytes(u(16..24)),
        peak_bps: f(24..32)?,
        avg_bps: f(32..40)?,
        msg_rate: f(40..48)?,
    })
}

/// Send `mine` to the peer on `stream` and read the peer's, each way within `timeout`.
pub fn swap(stream: &mut TcpStream, mine: &BwStats, timeout: Duration) -> Result<BwStats> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "the peer".to_string(), |a| a.to_string());
    let net = |during: &str, source| Error::Net {
        during: format!("{during} ({peer})"),
        source,
    };
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|_| stream.set_read_timeout(Some(timeout)))
        .map_err(|e| net("set the control socket's timeouts", e))?;
    stream
        .write_all(&encode(mine))
        .map_err(|e| net("send this side's results", e))?;
    let mut b = [0u8; RESULTS_LEN];
    stream
        .read_exact(&mut b)
        .map_err(|e| net("read the peer's results", e))?;
    decode(&b).map_err(|why| Error::Peer { peer, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_and_bad_ones_are_refused() {
        let s = BwStats {
            bytes: 4096,
            iterations: 1000,
            peak_bps: 2.5e9,
            avg_bps: 2e9,
            msg_rate: 488281.25,
        };
        assert_eq!(decode(&encode(&s)).unwrap(), s);
        let mut b = encode(&s);
        b[4] = 9;
        assert!(decode(&b).unwrap_err().contains("version 9"));
        let mut b = encode(&s);
        b[0] = b'X';
        assert!(decode(&b).is_err());
        let mut b = encode(&s);
        b[24..32].copy_from_slice(&f64::NAN.to_be_bytes());
        assert!(decode(&b).unwrap_err().contains("NaN"));
    }
}
