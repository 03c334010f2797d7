//! `ibv_rc_pingpong`'s endpoint exchange, so that `rc_pingpong` runs against the stock
//! program (rdma-core `libibverbs/examples/rc_pingpong.c`, `pp_client_exch_dest`,
//! `pp_server_exch_dest`, `pp_connect_ctx`; `pingpong.c` `gid_to_wire_gid`; rdma-core v44,
//! what Debian 12 ships). The facts; the code is this crate's own.
//!
//! One TCP connection, closed after the exchange:
//!
//! 1. the client writes its address message: `sprintf("%04x:%06x:%06x:%s", lid, qpn, psn,
//!    gid)` in a buffer of `sizeof "0000:000000:000000:" + 32 hex digits`, 52 bytes with the
//!    NUL, all of it written with one `write`. The GID is its 16 bytes in order as 32 lowercase
//!    hex digits (`gid_to_wire_gid`: four `htobe32(u32)` as `%08x`), all zero without `-g`;
//! 2. the server reads exactly those 52 bytes with one `read` (any other count: "Couldn't read
//!    remote address"), brings its QP to RTR and RTS (`pp_connect_ctx`), then writes its own
//!    message;
//! 3. the client reads the 52 bytes, writes `"done"` and its NUL (5 bytes), closes and connects
//!    its QP; the server reads the 5 bytes and closes.
//!
//! `pp_connect_ctx` addresses the peer with a GRH (hop limit 1, the local `-g` index) only when
//! the peer's GID has a non-zero interface ID, and sets `max_dest_rd_atomic` and
//! `max_rd_atomic` 1, `min_rnr_timer` 12, `timeout` 14, `retry_cnt` and `rnr_retry` 7. The
//! path MTU is each side's `-m` (default 1024): the message carries none, so both ends must be
//! started with the same one.

use crate::rendezvous::Rendezvous;
use crate::{Error, Result};
use mlx5_connect::{ConnectParams, Connection, Endpoint, Link, QpRef};
use mlx5_hw::{Device, Gid};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Bytes of an address message, NUL included (`sizeof msg`).
pub const MSG_LEN: usize = 52;
/// The client's closing word, NUL included (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";

/// What an address message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbvDest {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// The first PSN the side sends (24 bits).
    pub psn: u32,
    /// The port GID of the side's `-g` index; all zero without one.
    pub gid: [u8; 16],
}

impl IbvDest {
    /// The 52-byte message: `%04x:%06x:%06x:` and the GID's 32 hex digits, then NULs.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        for b in self.gid {
            text.push_str(&format!("{b:02x}"));
        }
        let mut m = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        m[..n].copy_from_slice(&text.as_bytes()[..n]);
        m
    }

    /// Read a peer's message: the text up to the first NUL, four fields separated by `:`,
    /// each hex of its width (LID 16 bits, QPN and PSN 24, GID 32 digits); anything else is an
    /// error that quotes what came.
    pub fn decode(m: &[u8]) -> std::result::Result<IbvDest, String> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let text = std::str::from_utf8(&m[..end])
            .map_err(|_| format!("not text: {:02x?}", &m[..end.min(16)]))?;
        let bad = |why: &str| format!("{why} in {text:?} (ibv_rc_pingpong sends LID:QPN:PSN:GID)");
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 4 {
            return Err(bad("not four fields"));
        }
        let hex = |s: &str, bits: u32, what: &str| -> std::result::Result<u32, String> {
            let v =
                u32::from_str_radix(s, 16).map_err(|_| bad(&format!("the {what} is not hex")))?;
            if s.is_empty() || u64::from(v) >> bits != 0 {
                return Err(bad(&format!("the {what} is not {bits} bits")));
            }
            Ok(v)
        };
        let lid = hex(f[0], 16, "LID")? as u16;
        let qpn = hex(f[1], 24, "QPN")?;
        let psn = hex(f[2], 24, "PSN")?;
        let g = f[3];
        if g.len() != 32 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the GID is not 32 hex digits"));
        }
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * k..2 * k + 2], 16).map_err(|_| bad("the GID"))?;
        }
        Ok(IbvDest { lid, qpn, psn, gid })
    }

    /// Whether the peer asks for a GRH (`pp_connect_ctx`: a non-zero interface ID).
    pub fn global(&self) -> bool {
        self.gid[8..].iter().any(|&b| b != 0)
    }
}

fn net(during: &str, e: std::io::Error) -> Error {
    Error::Net {
        during: during.into(),
        source: e,
    }
}

fn read_exact(s: &mut TcpStream, buf: &mut [u8], what: &str, timeout: Duration) -> Result<()> {
    s.set_read_timeout(Some(timeout))
        .map_err(|e| net("configure the exchange connection", e))?;
    s.read_exact(buf).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                "the peer closed the connection first (is it ibv_rc_pingpong or rc_pingpong \
                 --exchange ibv? Another exchange's peer fails here)"
                    .to_string()
            }
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("nothing within {timeout:?}")
            }
            _ => e.to_string(),
        };
        Error::Check(format!("ibv_rc_pingpong's exchange: {what}: {why}"))
    })
}

/// The client's part: write `mine`, read the server's message, write `done`; the server's
/// endpoint (the server has connected its QP by now).
pub fn client(s: &mut TcpStream, mine: &IbvDest, timeout: Duration) -> Result<IbvDest> {
    s.write_all(&mine.encode())
        .map_err(|e| net("send this side's address", e))?;
    let mut m = [0u8; MSG_LEN];
    read_exact(s, &mut m, "the server's address", timeout)?;
    let peer =
        IbvDest::decode(&m).map_err(|e| Error::Check(format!("the server's address: {e}")))?;
    s.write_all(DONE).map_err(|e| net("send done", e))?;
    Ok(peer)
}

/// The server's first part: the client's message.
pub fn server_read(s: &mut TcpStream, timeout: Duration) -> Result<IbvDest> {
    let mut m = [0u8; MSG_LEN];
    read_exact(s, &mut m, "the client's address", timeout)?;
    IbvDest::decode(&m).map_err(|e| Error::Check(format!("the client's address: {e}")))
}

/// The server's second part, once its QP is connected: write `mine`, read `done`.
pub fn server_finish(s: &mut TcpStream, mine: &IbvDest, timeout: Duration) -> Result<()> {
    s.write_all(&mine.encode())
        .map_err(|e| net("send this side's address", e))?;
    let mut d = [0u8; DONE.len()];
    read_exact(s, &mut d, "the client's done", timeout)
}

/// The QP attributes `pp_connect_ctx` sets, on `params` (port, GID index, MTU, SL kept).
pub fn params(params: &ConnectParams) -> ConnectParams {
    let mut p = params.clone();
    p.hop_limit = 1;
    p.timeout = 14;
    p.retry_cnt = 7;
    p.rnr_retry = 7;
    p.min_rnr_timer = 12;
    p.max_rd_atomic = Some(1);
    p.max_dest_rd_atomic = Some(1);
    p
}

/// Connect `qp` (its receives posted through `link` first) to the peer at the other end of
/// `rv` with `ibv_rc_pingpong`'s exchange, in its order: the client connects its QP after the
/// exchange, the server between reading the client's message and writing its own. Each wait
/// for the peer's bytes is bounded by `params.io_timeout` (the server's wait for a client is
/// not: as the stock program, it waits as long as it takes).
pub fn connect(
    rv: &Rendezvous,
    dev: &dyn Device,
    qp: QpRef,
    link: &mut dyn Link,
    params: &ConnectParams,
) -> Result<Connection> {
    let p = self::params(params);
    let local = Connection::prepare_out_of_band(dev, qp, link, &p)?;
    let mine = IbvDest {
        lid: local.lid,
        qpn: local.qpn,
        psn: local.psn,
        gid: local.gid.0,
    };
    // The peer as `pp_connect_ctx` sees it: RC, the path MTU capped by `-m`, one READ or
    // atomic each way.
    let peer_of = |d: &IbvDest| Endpoint {
        qpn: d.qpn,
        psn: d.psn,
        lid: d.lid,
        gid: Gid(d.gid),
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        qkey: 0,
        buffer: None,
        ..local
    };
    let (mut s, _) = rv.open_raw(p.io_timeout)?;
    if rv.is_client() {
        let d = client(&mut s, &mine, p.io_timeout)?;
        drop(s);
        Ok(Connection::finish_out_of_band(
            dev,
            qp,
            link,
            &p,
            local,
            peer_of(&d),
        )?)
    } else {
        let d = server_read(&mut s, p.io_timeout)?;
        let c = Connection::finish_out_of_band(dev, qp, link, &p, local, peer_of(&d))?;
        server_finish(&mut s, &mine, p.io_timeout)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_ibv_rc_pingpongs() {
        let d = IbvDest {
            lid: 0,
            qpn: 0x104,
            psn: 0x4a2b1c,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 77, 1, 2],
        };
        let m = d.encode();
        // What the stock program prints into its 52-byte buffer for this endpoint.
        assert_eq!(
            &m[..51],
            b"0000:000104:4a2b1c:00000000000000000000ffff7f4d0102"
        );
        assert_eq!(m[51], 0);
        assert_eq!(IbvDest::decode(&m), Ok(d));
        assert!(d.global());
        let local = IbvDest { gid: [0; 16], ..d };
        assert!(!local.global(), "without -g: LID addressing");
        let bad = |t: &[u8], needle: &str| {
            let e = IbvDest::decode(t).unwrap_err();
            assert!(e.contains(needle), "{t:?}: {e}");
        };
        bad(b"0000:000104:4a2b1c", "four fields");
        bad(
            b"0000:1000000:4a2b1c:00000000000000000000ffff7f4d0102",
            "QPN is not 24",
        );
        bad(
            b"0000:000104:zz:00000000000000000000ffff7f4d0102",
            "PSN is not hex",
        );
        bad(b"0000:000104:4a2b1c:00ff", "32 hex digits");
        bad(&[0xff, 0xfe, 0], "not text");
        bad(b"MX5S\0garbage", "four fields");
    }
}
