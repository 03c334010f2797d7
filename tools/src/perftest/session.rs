//! One perftest control connection: every exchange as perftest makes it
//! (`src/perftest_communication.c` `ctx_xchg_data_ethernet`, `ctx_hand_shake`): the client
//! writes its part first and then reads the peer's, the server reads first and then writes, each
//! part in one `write` (perftest reads each with a single `read` of the exact size, so a part
//! must not be split). Every read has a deadline and every failure names the step and the peer.

use super::wire::{
    self, BwReport, Dest, Negotiation, PeerVersion, DONE, DONE_UNTIL, MIN_PEER_VERSION,
    NEGOTIATION_LEN, OUR_VERSION, VERSION_LEN,
};
use crate::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long [`Session::close`] waits for the `"done"` a peer before 6.17 writes right after
/// the closing handshake.
const DONE_WAIT: Duration = Duration::from_secs(1);

/// The control connection to a perftest peer.
pub struct Session {
    stream: TcpStream,
    client: bool,
    peer: String,
    /// The peer's version, once [`Session::versions`] has read it (`None` with
    /// `--dont_xchg_versions`).
    pub peer_version: Option<PeerVersion>,
}

impl Session {
    /// The session over `stream`; `client`: this side connected (it writes first).
    pub fn new(stream: TcpStream, client: bool) -> Session {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "the perftest peer".to_string(), |a| a.to_string());
        Session {
            stream,
            client,
            peer,
            peer_version: None,
        }
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// The peer's address, for messages.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    fn net(&self, during: &str, source: std::io::Error) -> Error {
        Error::Net {
            during: format!("{during} (perftest exchange with {})", self.peer),
            source,
        }
    }

    fn send(&mut self, b: &[u8], what: &'static str, timeout: Duration) -> Result<()> {
        self.stream
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| self.net("configure the control socket", e))?;
        self.stream.write_all(b).map_err(|e| match e.kind() {
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset => Error::Peer {
                peer: self.peer.clone(),
                why: format!(
                    "it closed the connection before this side could send {what}: see its \
                     output (perftest prints why it stopped)"
                ),
            },
            _ => self.net(&format!("send {what}"), e),
        })
    }

    fn recv(&mut self, b: &mut [u8], what: &'static str, timeout: Duration) -> Result<()> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| self.net("configure the control socket", e))?;
        self.stream.read_exact(b).map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout {
                what,
                secs: timeout.as_secs(),
                hint: format!(
                    "the perftest peer {} sent nothing in that time: is it stuck, or started \
                     for another test or with other flags (a perftest older than 6.28 does not \
                     say which)?",
                    self.peer
                ),
            },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => Error::Peer {
                peer: self.peer.clone(),
                why: format!(
                    "it closed the connection while this side waited for {what}: see its output \
                     (perftest prints why it stopped)"
                ),
            },
            _ => self.net(&format!("read {what}"), e),
        })
    }

    /// One exchange of equal-sized parts: `mine` for `theirs`, in perftest's order.
    pub fn xchg(
        &mut self,
        mine: &[u8],
        theirs: &mut [u8],
        what: &'static str,
        timeout: Duration,
    ) -> Result<()> {
        if self.client {
            self.send(mine, what, timeout)?;
            self.recv(theirs, what, timeout)
        } else {
            self.recv(theirs, what, timeout)?;
            self.send(mine, what, timeout)
        }
    }

    /// `exchange_versions` and `check_version_compatibility`: [`OUR_VERSION`] for the peer's,
    /// which must be perftest's and at least [`MIN_PEER_VERSION`].
    pub fn versions(&mut self, timeout: Duration) -> Result<PeerVersion> {
        let mut theirs = [0u8; VERSION_LEN];
        self.xchg(
            &wire::encode_version(OUR_VERSION),
            &mut theirs,
            "the peer's perftest version",
            timeout,
        )?;
        let v = wire::decode_version(&theirs).map_err(|why| Error::Peer {
            peer: self.peer.clone(),
            why,
        })?;
        if v.value < MIN_PEER_VERSION {
            return Err(Error::Peer {
                peer: self.peer.clone(),
                why: format!(
                    "it is perftest version {v}, older than {MIN_PEER_VERSION:.2}, whose \
                     exchange differs (perftest itself refuses it: check_version_compatibility)"
                ),
            });
        }
        self.peer_version = Some(v.clone());
        Ok(v)
    }

    /// The peer's version number (0 when versions were not exchanged, as perftest's `atof` of
    /// an empty string).
    pub fn peer_value(&self) -> f64 {
        self.peer_version.as_ref().map_or(0.0, |v| v.value)
    }

    /// `check_sys_data` (peers from 5.32 on): this side's cycle buffer and cache line size for
    /// the peer's, each in an exchange of its own.
    pub fn sys_data(&mut self, cycle: u32, cache: u32, timeout: Duration) -> Result<(u32, u32)> {
        let mut a = [0u8; 4];
        let mut b = [0u8; 4];
        self.xchg(
            &wire::encode_int(cycle),
            &mut a,
            "the peer's cycle buffer",
            timeout,
        )?;
        self.xchg(
            &wire::encode_int(cache),
            &mut b,
            "the peer's cache line size",
            timeout,
        )?;
        Ok((wire::decode_int(&a), wire::decode_int(&b)))
    }

    /// `check_mtu` (peers from 5.31 on): this side's MTU for the peer's, in bytes.
    pub fn mtu(&mut self, mtu: u32, timeout: Duration) -> Result<u32> {
        let mut theirs = [0u8; wire::MTU_LEN];
        self.xchg(
            &wire::encode_mtu(mtu),
            &mut theirs,
            "the peer's MTU",
            timeout,
        )?;
        wire::decode_mtu(&theirs).map_err(|why| Error::Peer {
            peer: self.peer.clone(),
            why,
        })
    }

    /// `negotiate_params` (peers from 6.28 on): this side's run for the peer's. The runs must
    /// agree ([`Negotiation::mismatches`]): the error names every field that differs, in
    /// perftest's words (the peer prints the same lines and stops too).
    pub fn negotiate(&mut self, ours: &Negotiation, timeout: Duration) -> Result<Negotiation> {
        let mut theirs = [0u8; NEGOTIATION_LEN];
        self.xchg(
            &ours.encode(),
            &mut theirs,
            "the peer's parameter negotiation",
            timeout,
        )?;
        let peer = Negotiation::decode(&theirs);
        let why = Negotiation::mismatches(ours, &peer);
        if !why.is_empty() {
            return Err(Error::Peer {
                peer: self.peer.clone(),
                why: format!(
                    "perftest's parameter negotiation: {} (local: this side, remote: the \
                     peer): start both with the same flags",
                    why.join("; ")
                ),
            });
        }
        Ok(peer)
    }

    /// `ctx_hand_shake`: `mine` for the peer's endpoint message of the same form.
    pub fn hand_shake(
        &mut self,
        mine: &Dest,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Dest> {
        let bytes = mine.encode().ok_or_else(|| {
            Error::Usage(format!(
                "QPN {:#x} or PSN {:#x} is wider than the 24 bits perftest's endpoint message \
                 carries",
                mine.qpn, mine.psn
            ))
        })?;
        let mut theirs = vec![0u8; bytes.len()];
        self.xchg(&bytes, &mut theirs, what, timeout)?;
        Dest::decode(&theirs).map_err(|why| Error::Peer {
            peer: self.peer.clone(),
            why: format!(
                "{why} (during {what}; a perftest on InfiniBand with -x on one side only sends \
                 the other form: give both ends the same -x)"
            ),
        })
    }

    /// `xchg_bw_reports`: this side's figures for the peer's raw fields (a passive server
    /// sends whatever its report holds: decode them with [`BwReport::decode`] only when the
    /// peer measured, as in a bidirectional run).
    pub fn reports(&mut self, mine: &BwReport, timeout: Duration) -> Result<[[u8; 8]; 5]> {
        let mut out = [[0u8; 8]; 5];
        for (m, t) in mine.encode().iter().zip(out.iter_mut()) {
            self.xchg(m, t, "the peer's bandwidth report", timeout)?;
        }
        Ok(out)
    }

    /// `ctx_close_connection`: a last handshake of `mine`, then with a peer before 6.17 the
    /// `"done"` each side writes after it. perftest never reads it; this side reads the peer's
    /// (so that closing with it unread does not reset the connection under the peer), and a
    /// failure to write or read it once the peer has closed is no error, as perftest's race
    /// fix (commit dbf395e) says.
    pub fn close(&mut self, mine: &Dest, timeout: Duration) -> Result<()> {
        self.hand_shake(mine, "the closing handshake", timeout)?;
        if self.peer_version.is_some() && self.peer_value() < DONE_UNTIL {
            let _ = self.stream.write_all(DONE);
            let mut done = [0u8; DONE.len()];
            let _ = self
                .stream
                .set_read_timeout(Some(DONE_WAIT))
                .and_then(|()| self.stream.read_exact(&mut done));
        }
        Ok(())
    }
}
