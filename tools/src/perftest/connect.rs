//! Walking a perftest run's steps ([`super::script()`]) over its [`Session`]: the endpoint
//! handshakes and the connect of every QP (the phases of `mlx5_connect`'s out-of-band
//! connect, with perftest's messages between them), then what the run does around its traffic.

use super::script::Step;
use super::session::Session;
use super::wire::{BwReport, Dest};
use super::{check_gid_families, dest_of, endpoint_of, Agreed};
use crate::args::Test;
use crate::connecting::{AhGuard, Connected, End, Links};
use crate::{Error, Result};
use mlx5_connect::{Connection, Endpoint, RemoteBuffer};
use mlx5_hw::{LinkLayer, Mtu};
use std::time::Duration;

/// A run's steps and where it is among them.
pub struct Driver {
    /// The control connection.
    pub session: Session,
    steps: Vec<Step>,
    at: usize,
    locals: Vec<Dest>,
    /// The peer's endpoint messages, per QP.
    pub peers: Vec<Dest>,
}

/// How this side announces itself ([`Driver::connect`]).
#[derive(Clone, Copy, Debug)]
pub struct Announce {
    /// The test (READ and atomics announce the outstanding reads they serve).
    pub test: Test,
    /// The buffer the peer writes, reads or runs atomics on.
    pub target: RemoteBuffer,
    /// The long form, with the GID (RoCE; InfiniBand with `-x`).
    pub gid: bool,
    /// How many bytes of the peer's buffer this side uses.
    pub uses: u64,
}

impl Driver {
    /// The steps `steps` over `session`.
    pub fn new(session: Session, steps: Vec<Step>) -> Driver {
        Driver {
            session,
            steps,
            at: 0,
            locals: Vec::new(),
            peers: Vec::new(),
        }
    }

    /// The steps left.
    pub fn remaining(&self) -> &[Step] {
        &self.steps[self.at..]
    }

    /// Connect every QP of `me` through `links`: each taken to Init with its receives posted,
    /// then the steps up to the connect and the handshakes after it (one per QP and one
    /// more), each within `timeout`.
    pub fn connect(
        &mut self,
        me: &End,
        links: &mut dyn Links,
        agreed: &Agreed,
        how: Announce,
        timeout: Duration,
    ) -> Result<Connected> {
        let dev = me.ctx.device();
        let n = me.qps.len();
        let mut locals: Vec<Endpoint> = Vec::with_capacity(n);
        for (q, &qp) in me.qps.iter().enumerate() {
            let r = {
                let mut link = links.link(q);
                Connection::prepare_out_of_band(dev, qp, &mut *link, &me.params)
            };
            locals.push(r.map_err(|e| links.cause(e.into()))?);
        }
        let port = dev.query_port(me.params.port)?;
        let mtu = Mtu::from_bytes(agreed.mtu).unwrap_or(port.active_mtu);
        self.locals = locals
            .iter()
            .map(|l| {
                let out_reads = agreed.out_reads(how.test, l.max_dest_rd_atomic);
                dest_of(l, how.target, out_reads, how.gid)
            })
            .collect();
        self.peers = vec![self.locals[0]; n];
        let mut out = Connected {
            conns: Vec::new(),
            peer: Vec::new(),
            udp: None,
            streams: Vec::new(),
            handles: Vec::new(),
        };
        let mut after = None;
        while let Some(&step) = self.steps.get(self.at) {
            match (step, after) {
                (Step::Keys { qp }, None) => {
                    let d = self.hand_shake(qp, "the peer's QP endpoint", timeout)?;
                    self.peers[qp] = d;
                }
                (Step::Connect, None) => {
                    check_gid_families(&self.locals[0], &self.peers[0])?;
                    for (q, &qp) in me.qps.iter().enumerate() {
                        let peer =
                            endpoint_of(&self.peers[q], qp.qp_type, port.link_layer, mtu, how.uses);
                        if port.link_layer == LinkLayer::Ethernet && self.peers[q].gid.is_none() {
                            return Err(Error::Usage(
                                "the peer sent no GID on a RoCE port: a perftest on RoCE always \
                                 does (is it on InfiniBand?)"
                                    .into(),
                            ));
                        }
                        let r = {
                            let mut link = links.link(q);
                            Connection::finish_out_of_band(
                                dev, qp, &mut *link, &me.params, locals[q], peer,
                            )
                        };
                        let c = r.map_err(|e| links.cause(e.into()))?;
                        out.handles.extend(AhGuard::of(&me.ctx, &c));
                        out.conns.push(c);
                    }
                    after = Some(0);
                }
                (Step::Sync { qp }, Some(k)) if k <= n => {
                    self.hand_shake(qp, "the handshake after the connect", timeout)?;
                    after = Some(k + 1);
                }
                _ => break,
            }
            self.at += 1;
        }
        if out.conns.len() != n {
            return Err(Error::Usage(format!(
                "the perftest script connected {} of {n} QPs",
                out.conns.len()
            )));
        }
        Ok(out)
    }

    fn hand_shake(&mut self, qp: usize, what: &'static str, timeout: Duration) -> Result<Dest> {
        let mine = *self.locals.get(qp).ok_or_else(|| {
            Error::Usage(format!("no endpoint of QP {qp} to announce: connect first"))
        })?;
        self.session.hand_shake(&mine, what, timeout)
    }

    /// The next step of the run, `None` at the end; the caller does it ([`Driver::sync`],
    /// [`Driver::reports`], [`Driver::close`], or its own run).
    pub fn next_step(&mut self) -> Option<Step> {
        let s = self.steps.get(self.at).copied();
        if s.is_some() {
            self.at += 1;
        }
        s
    }

    /// A synchronising handshake carrying QP `qp`'s endpoint, within `timeout` (the time the
    /// peer may spend before it comes there: its run, when it runs first).
    pub fn sync(&mut self, qp: usize, timeout: Duration) -> Result<()> {
        self.hand_shake(qp, "a handshake between the runs", timeout)
            .map(|_| ())
    }

    /// The bandwidth reports: `mine` for the peer's raw fields.
    pub fn reports(&mut self, mine: &BwReport, timeout: Duration) -> Result<[[u8; 8]; 5]> {
        self.session.reports(mine, timeout)
    }

    /// The closing handshake, within `timeout`.
    pub fn close(&mut self, timeout: Duration) -> Result<()> {
        let mine = *self
            .locals
            .first()
            .ok_or_else(|| Error::Usage("nothing to close: connect first".into()))?;
        self.session.close(&mine, timeout)
    }
}
