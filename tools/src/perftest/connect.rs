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

/// What `Driver::connect_xrc` connected: this end's first QP and the peer's first, as the
/// banner shows them, the path MTU, and per initiator the buffer the peer announced with the
/// target it sends to.
#[derive(Clone, Debug)]
pub struct XrcPeers {
    /// This side's first endpoint (its QPN: the first message's QP).
    pub local: Endpoint,
    /// The peer's endpoint this side's first QP talks to.
    pub peer: Endpoint,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// Per initiator, the peer's buffer (empty on a one-way server).
    pub remotes: Vec<RemoteBuffer>,
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

    /// `-c XRC`: announce `x`'s initiators and targets in perftest's XRC layout `layout`
    /// ([`super::xrc`]), each message with the XRC SRQ number and the buffer `how.target`,
    /// walk the steps up to the connect and the handshakes after it (each within `timeout`),
    /// and connect each initiator to the peer's target and each target to the peer's
    /// initiator, along the path `mlx5_connect::plan` computes for an RC pair of the same
    /// ports (an XRC pair's address vector and path MTU are an RC pair's: IBTA Vol. 1
    /// Annex A14). Returns, per initiator, the buffer the peer announced with its target.
    pub fn connect_xrc(
        &mut self,
        x: &mut crate::xrc::XrcEnd,
        ctx: &mlx5_ctx::Context,
        params: &mlx5_connect::ConnectParams,
        layout: super::xrc::Layout,
        how: Announce,
        (agreed, timeout): (&Agreed, Duration),
    ) -> Result<XrcPeers> {
        let dev = ctx.device();
        let port = mlx5_connect::LocalPort::query(dev, params)?;
        let link = port.port.link_layer;
        let out_reads = agreed.out_reads(how.test, x.rd_atomic());
        let n = layout.messages();
        let mut first = None;
        self.locals = (0..n)
            .map(|m| {
                let (q, ini) = layout.role_of(m);
                let (qpn, psn) = if ini { x.initiator(q) } else { x.target(q) }
                    .ok_or_else(|| Error::Usage(format!("-c XRC: no QP for message {m}")))?;
                let ep = mlx5_connect::local_endpoint(&port, qpn, mlx5_hw::QpType::Rc, params, psn);
                first.get_or_insert(ep);
                let mut d = dest_of(&ep, how.target, out_reads, how.gid);
                d.srqn = x.srq_num();
                Ok(d)
            })
            .collect::<Result<_>>()?;
        let local = first.ok_or_else(|| Error::Usage("-c XRC: no QP to announce".into()))?;
        self.peers = vec![self.locals[0]; n];
        let mtu = Mtu::from_bytes(agreed.mtu).unwrap_or(port.port.active_mtu);
        let mut out = None;
        let mut after = None;
        while let Some(&step) = self.steps.get(self.at) {
            match (step, after) {
                (Step::Keys { qp }, None) if qp < n => {
                    self.peers[qp] = self.hand_shake(qp, "the peer's XRC endpoint", timeout)?;
                }
                (Step::Connect, None) => {
                    check_gid_families(&self.locals[0], &self.peers[0])?;
                    if link == LinkLayer::Ethernet && self.peers.iter().any(|d| d.gid.is_none()) {
                        return Err(Error::Usage(
                            "the peer sent no GID on a RoCE port: a perftest on RoCE always \
                             does (is it on InfiniBand?)"
                                .into(),
                        ));
                    }
                    out = Some(self.xrc_pairs(x, &local, params, layout, (link, mtu), how)?);
                    after = Some(0);
                }
                (Step::Sync { qp }, Some(k)) if k <= n && qp < n => {
                    self.hand_shake(qp, "the handshake after the connect", timeout)?;
                    after = Some(k + 1);
                }
                _ => break,
            }
            self.at += 1;
        }
        out.ok_or_else(|| Error::Usage("the perftest script has no connect step".into()))
    }

    /// The connect of every pair of `x` to the peer's messages (`connect_xrc`).
    fn xrc_pairs(
        &self,
        x: &mut crate::xrc::XrcEnd,
        local: &Endpoint,
        params: &mlx5_connect::ConnectParams,
        layout: super::xrc::Layout,
        (link, mtu): (LinkLayer, Mtu),
        how: Announce,
    ) -> Result<XrcPeers> {
        let mut addrs = Vec::new();
        let mut remotes = Vec::new();
        let mut path = None;
        for q in 0..layout.pairs {
            let tgt = (layout.initiators() > q).then(|| self.peers[layout.peer_target(q)]);
            let ini = (layout.targets() > q).then(|| self.peers[layout.peer_initiator(q)]);
            let any = tgt.or(ini).unwrap_or(self.peers[0]);
            let peer = endpoint_of(&any, mlx5_hw::QpType::Rc, link, mtu, how.uses);
            let pl = mlx5_connect::plan(local, &peer, params)?;
            let a = crate::xrc::XrcAddr {
                ini: ini.map_or(0, |d| d.qpn),
                ini_psn: ini.map_or(0, |d| d.psn),
                tgt: tgt.map_or(0, |d| d.qpn),
                tgt_psn: tgt.map_or(0, |d| d.psn),
                srqn: tgt.map_or(0, |d| d.srqn),
                rd_atomic: u8::try_from(tgt.map_or(1, |d| d.out_reads)).unwrap_or(u8::MAX),
            };
            x.connect_to(q, &a, pl.ah, pl.path_mtu)?;
            addrs.push(a);
            if let Some(t) = tgt {
                remotes.push(RemoteBuffer {
                    addr: t.vaddr,
                    rkey: t.rkey,
                    len: how.uses,
                });
            }
            path.get_or_insert((peer, pl.path_mtu));
        }
        x.set_peer(addrs);
        let (peer, path_mtu) = path.ok_or_else(|| Error::Usage("-c XRC: no QP pair".into()))?;
        Ok(XrcPeers {
            local: *local,
            peer,
            path_mtu,
            remotes,
        })
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
