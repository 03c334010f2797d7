//! `-c XRC`: `lat` and `bw` over eXtended Reliable Connections (IBTA Vol. 1 Annex A14), laid
//! out as perftest lays them out in its latency and bidirectional runs (`src/perftest_resources.c`
//! `ctx_xrcd_create`, `ctx_xrc_srq_create`, `ctx_xrc_qp_create`): each end opens an XRC domain
//! and one XRC SRQ on its CQ, and per QP (`-q`) an initiator (`IBV_QPT_XRC_SEND`) and a target
//! (`IBV_QPT_XRC_RECV`); initiator `q` is connected to the peer's target `q` and every WR it
//! posts names the peer's XRC SRQ (`ctx_set_send_reg_wqes`: `qp_type.xrc.remote_srqn`), so
//! SENDs land in the peer's SRQ and WRITE, READ and atomics run against the peer's buffer
//! through its target.
//!
//! Between these tools the run's RC QPs connect first, as for `-c RC` (the control connection,
//! the hello, the remote buffer and the path MTU come from them), and then carry the XRC
//! addresses, one SEND each way on QP 0 ([`XrcEnd::announce`], [`XrcEnd::collect`]), as `-c DC`
//! does (`crate::dc`): after that the RC QPs are idle. Each end then moves its initiators and
//! targets through Init, RTR and RTS by hand with the kernel table's XRC masks (as
//! `mlx5_ctx::connect_xrc` does in one process), towards the port the RC connection reached
//! (its address vector and path MTU). With perftest's exchange, whose endpoint messages carry the
//! SRQN, there are no RC carriers: `crate::perftest::connect` `Driver::connect_xrc` connects an
//! end of [`XrcEnd::with_roles`] in perftest's layout (`crate::perftest::xrc`).
//!
//! One record per QP, 24 bytes, big-endian, past the buffer's halves (`2 × half`, outgoing
//! first, incoming after):
//!
//! ```text
//!  0..4   initiator QPN (24 bits)
//!  4..8   initiator's first PSN
//!  8..12  target QPN (24 bits)
//! 12..16  target's first PSN
//! 16..20  XRC SRQ number (24 bits), the same in every record of an end
//! 20..22  index of the QP (0, 1, ...)
//! 22      READ/atomic requests the target serves at once
//! 23      0
//! ```

use std::time::{Duration, Instant};

use crate::path::{send_wr, DataPath, Done, Post, SharedCq};
use crate::resources::{Resources, ResourcesCfg};
use crate::run::RunPlan;
use crate::{Error, Result};
use mlx5_connect::Connection;
use mlx5_ctx::{Cq, Mr, Qp, QpInit, XrcSrq, XrcTarget, Xrcd};
use mlx5_hw::{AttrMask, QpAttr, QpState, QpType};
use mlx5_qp::Wc;

/// Bytes of one QP's record in the exchange.
pub const RECORD: usize = 24;
/// The WR id of the exchange's SEND and receive (the test's receives count from 0).
const EXCHANGE_WR: u64 = u64::MAX;

/// Bytes the exchange needs past the buffer's halves for `qps` QPs: their records out and in.
pub fn exchange_bytes(qps: u32) -> usize {
    2 * RECORD * qps.max(1) as usize
}

/// The RC QPs that connect a `-c XRC` run and carry its XRC addresses: the run's shape on RC,
/// each with one receive (QP 0's takes the peer's records), the CQ sized for the initiators'
/// sends and every receive of the XRC SRQ too, the exchange's bytes after the buffer's halves.
pub fn carrier_cfg(mut cfg: ResourcesCfg, run: &RunPlan) -> ResourcesCfg {
    let receives = if run.test == crate::args::Test::Send {
        run.rx_depth
    } else {
        0
    };
    cfg.qp_type = QpType::Rc;
    // Room in the CQ (`ResourcesCfg::cqe`: (sq + rq) per QP) for each QP's initiator sends and
    // its share of the XRC SRQ's receives; the RC receive queues hold that much, unused.
    cfg.rq_depth = receives.saturating_add(1);
    cfg.srq = None;
    cfg.buf_len = cfg.buf_len.saturating_add(exchange_bytes(cfg.qps));
    cfg
}

/// One QP's XRC addresses as the exchange carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XrcAddr {
    /// Initiator QPN.
    pub ini: u32,
    /// Initiator's first PSN.
    pub ini_psn: u32,
    /// Target QPN.
    pub tgt: u32,
    /// Target's first PSN.
    pub tgt_psn: u32,
    /// The XRC SRQ's number.
    pub srqn: u32,
    /// READ/atomic requests the target serves at once.
    pub rd_atomic: u8,
}

/// Encode `a`, the addresses of QP `index`.
pub fn encode(a: &XrcAddr, index: u16) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    for (i, v) in [a.ini, a.ini_psn, a.tgt, a.tgt_psn, a.srqn]
        .iter()
        .enumerate()
    {
        b[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
    }
    b[20..22].copy_from_slice(&index.to_be_bytes());
    b[22] = a.rd_atomic;
    b
}

/// Decode QP `index`'s record; another index, or a number over 24 bits, is the peer's error.
pub fn decode(b: &[u8], index: u16) -> std::result::Result<XrcAddr, String> {
    if b.len() != RECORD {
        return Err(format!("XRC addresses of {} bytes, not {RECORD}", b.len()));
    }
    let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let got = u16::from_be_bytes([b[20], b[21]]);
    if got != index {
        return Err(format!(
            "the XRC addresses of QP {got} where QP {index}'s were due"
        ));
    }
    let a = XrcAddr {
        ini: be32(0),
        ini_psn: be32(4),
        tgt: be32(8),
        tgt_psn: be32(12),
        srqn: be32(16),
        rd_atomic: b[22],
    };
    for (what, v) in [
        ("initiator QPN", a.ini),
        ("initiator PSN", a.ini_psn),
        ("target QPN", a.tgt),
        ("target PSN", a.tgt_psn),
        ("XRC SRQ number", a.srqn),
    ] {
        if v >> 24 != 0 {
            return Err(format!("{what} {v:#x} is over 24 bits"));
        }
    }
    Ok(a)
}

/// One end's XRC objects: its domain, SRQ, initiators and targets, and the peer's addresses
/// once they came.
pub struct XrcEnd {
    inis: Vec<Qp>,
    ini_qpns: Vec<u32>,
    targets: Vec<XrcTarget>,
    tgt_qpns: Vec<u32>,
    srq: XrcSrq,
    psns: Vec<(u32, u32)>,
    rd_atomic: u8,
    peer: Vec<XrcAddr>,
    run: (u8, u8, u8),
    /// Offset of the outgoing records; the incoming ones follow.
    tail: usize,
    /// Completions polled during the exchange that belong to the run.
    early: Vec<(Wc, u64)>,
    _xrcd: Xrcd,
}

impl std::fmt::Debug for XrcEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcEnd")
            .field("initiators", &self.ini_qpns)
            .field("targets", &self.tgt_qpns)
            .field("srqn", &self.srq.srq_num())
            .finish()
    }
}

impl XrcEnd {
    /// The XRC side of `r` (created with [`carrier_cfg`]): an XRC domain, an XRC SRQ of
    /// `rx_depth × qps` receives on `r`'s CQ (for the SEND test each QP's `rx_depth` posted
    /// now, in the buffer's receive half), and per QP an initiator of `sq_depth` WRs and
    /// `inline` bytes and a target.
    pub fn new(
        r: &mut Resources,
        run: &RunPlan,
        qps: u32,
        sq_depth: u32,
        inline: u32,
    ) -> Result<XrcEnd> {
        let qps = qps.max(1);
        let recv = run.receives_on_srq(&r.mr)?;
        let mut x = XrcEnd::with_roles(r, run, (qps, qps), sq_depth, inline, recv)?;
        x.tail = 2 * run.half;
        Ok(x)
    }

    /// An end of `roles.0` initiators and `roles.1` targets (perftest's one-way bandwidth runs
    /// have only initiators on the client and only targets on the server:
    /// `src/perftest_resources.c` `ctx_xrc_qp_create`), its XRC SRQ of `rx_depth` receives per
    /// QP, each QP's `recv` posted now (the SEND test).
    pub fn with_roles(
        r: &mut Resources,
        run: &RunPlan,
        roles: (u32, u32),
        sq_depth: u32,
        inline: u32,
        recv: Option<crate::connecting::Receives>,
    ) -> Result<XrcEnd> {
        let qps = roles.0.max(roles.1).max(1);
        let ctx = r.context().clone();
        let xrcd = ctx.open_xrcd()?;
        let depth = run.rx_depth.max(1).saturating_mul(qps);
        let mut srq = r.pd.create_xrc_srq(&xrcd, &r.cq, depth, 1)?;
        if let Some(recv) = recv {
            for _ in 0..qps {
                for i in 0..u64::from(recv.depth) {
                    srq.post_recv(i, std::slice::from_ref(&recv.sge))?;
                }
            }
        }
        let rd = ctx.device().query_device()?.max_qp_rd_atom.clamp(1, 16) as u8;
        let (mut inis, mut targets) = (Vec::new(), Vec::new());
        for _ in 0..roles.0 {
            let mut ini = r.pd.create_qp(
                &QpInit::xrc_send(&r.cq)
                    .max_send_wr(sq_depth)
                    .max_inline_data(inline),
            )?;
            if let Some(mode) = run.doorbell {
                ini.set_doorbell_mode(mode)?;
            }
            inis.push(ini);
        }
        for _ in 0..roles.1 {
            targets.push(xrcd.create_target()?);
        }
        let psns = (0..qps)
            .map(|q| {
                let seed = u64::from(std::process::id()) ^ (u64::from(q) << 32);
                let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                ((x >> 8) as u32 & 0xff_ffff, (x >> 40) as u32 & 0xff_ffff)
            })
            .collect();
        Ok(XrcEnd {
            ini_qpns: inis.iter().map(|q| q.qpn()).collect(),
            inis,
            tgt_qpns: targets.iter().map(XrcTarget::qpn).collect(),
            targets,
            srq,
            psns,
            rd_atomic: rd,
            peer: Vec::new(),
            run: (
                run.params.timeout,
                run.params.retry_cnt,
                run.params.rnr_retry,
            ),
            tail: 0,
            early: Vec::new(),
            _xrcd: xrcd,
        })
    }

    /// The QPN and first PSN of initiator `q`, if this end has it.
    pub fn initiator(&self, q: usize) -> Option<(u32, u32)> {
        Some((*self.ini_qpns.get(q)?, self.psns.get(q)?.0))
    }

    /// The QPN and first PSN of target `q`, if this end has it.
    pub fn target(&self, q: usize) -> Option<(u32, u32)> {
        Some((*self.tgt_qpns.get(q)?, self.psns.get(q)?.1))
    }

    /// This end's XRC SRQ number.
    pub fn srq_num(&self) -> u32 {
        self.srq.srq_num()
    }

    /// READ/atomic requests each target serves at once.
    pub fn rd_atomic(&self) -> u8 {
        self.rd_atomic
    }

    /// The inline bytes every initiator was granted.
    pub fn max_inline(&self) -> u32 {
        self.inis
            .iter()
            .map(|q| q.max_inline_data())
            .min()
            .unwrap_or(0)
    }

    /// This end's addresses of QP `q`.
    fn addr(&self, q: usize) -> XrcAddr {
        XrcAddr {
            ini: self.ini_qpns[q],
            ini_psn: self.psns[q].0,
            tgt: self.tgt_qpns[q],
            tgt_psn: self.psns[q].1,
            srqn: self.srq.srq_num(),
            rd_atomic: self.rd_atomic,
        }
    }

    /// Send this end's XRC addresses to the peer on RC QP 0 of `qps`.
    pub fn announce(&mut self, qps: &mut [Qp], mr: &Mr) -> Result<()> {
        for q in 0..self.inis.len() {
            mr.write(self.tail + q * RECORD, &encode(&self.addr(q), q as u16))?;
        }
        let n = RECORD * self.inis.len();
        let qp = qps
            .first_mut()
            .ok_or_else(|| Error::Usage("-c XRC: no RC QP to carry the XRC addresses".into()))?;
        let sge = mr.sge(self.tail, n as u32)?;
        qp.post(&mlx5_qp::SendWr::send(EXCHANGE_WR).sges(&[sge]).signaled())?;
        Ok(())
    }

    /// The receive of the peer's records, to post on RC QP 0 when it reaches Init.
    pub fn exchange_receive(&self, mr: &Mr) -> Result<crate::connecting::Receives> {
        let n = RECORD * self.inis.len();
        Ok(crate::connecting::Receives {
            sge: mr.sge(self.tail + n, n as u32)?,
            depth: 1,
        })
    }

    /// Wait (at most `timeout`) for the SEND of [`XrcEnd::announce`] to complete and for the
    /// peer's records on `qps` (RC, on `cq`), then connect initiator `q` to the peer's target
    /// `q` and target `q` to the peer's initiator `q` along `rc`, the RC connection of QP 0.
    pub fn collect(
        &mut self,
        qps: &mut [Qp],
        cq: &mut Cq,
        mr: &Mr,
        rc: &Connection,
        timeout: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        let n = RECORD * self.inis.len();
        let (mut sent, mut got) = (false, None);
        let mut wcs = [Wc::default(); 16];
        while !sent || got.is_none() {
            cq.context().progress();
            let k = cq.poll(
                &mut (&mut *qps, std::slice::from_mut(&mut self.srq)),
                &mut wcs,
            )?;
            for wc in &wcs[..k] {
                if !wc.is_ok() {
                    return Err(Error::completion(wc));
                }
                match (wc.wr_id(), wc.opcode().is_recv()) {
                    (EXCHANGE_WR, false) => sent = true,
                    (0, true) if qps.iter().any(|q| q.qpn() == wc.qp_num()) => {
                        got = Some(wc.byte_len())
                    }
                    _ => self.early.push((*wc, 0)),
                }
            }
            if k == 0 {
                if start.elapsed() > timeout {
                    return Err(Error::stuck(
                        "the peer's XRC addresses",
                        timeout,
                        "one SEND of XRC addresses was outstanding each way on the RC QPs",
                        "the run's I/O timeout (a message of a few bytes)",
                    ));
                }
                std::thread::yield_now();
            }
        }
        let peer = |why: String| Error::Peer {
            peer: "the other end".into(),
            why,
        };
        if got != Some(n as u32) {
            return Err(peer(format!(
                "{} bytes of XRC addresses, {n} expected for {} QPs: are both ends run with the \
                 same -q?",
                got.unwrap_or(0),
                self.inis.len()
            )));
        }
        let bytes = mr.read(self.tail + n, n)?;
        for (q, rec) in bytes.chunks(RECORD).enumerate() {
            self.peer.push(decode(rec, q as u16).map_err(peer)?);
        }
        for q in 0..self.inis.len() {
            self.connect(q, rc)?;
        }
        Ok(())
    }

    /// Initiator `q` to the peer's target `q`, target `q` to the peer's initiator `q`: Reset →
    /// Init → RTR → RTS with the masks of the kernel table's XRC_INI and XRC_TGT columns
    /// (Linux `drivers/infiniband/core/verbs.c` `qp_state_table`): the initiator takes no
    /// responder attributes at RTR, the target no retry counts at RTS.
    fn connect(&mut self, q: usize, rc: &Connection) -> Result<()> {
        let plan = rc.plan();
        let peer = self.peer[q];
        self.connect_to(q, &peer, plan.ah, plan.path_mtu)
    }

    /// Initiator `q` (if this end has it) to the peer's target `peer.tgt`, target `q` (if
    /// any) to the peer's initiator `peer.ini`, along address vector `ah` and path MTU
    /// `path_mtu`: Reset → Init → RTR → RTS with the masks of the kernel table's XRC_INI and
    /// XRC_TGT columns (Linux `drivers/infiniband/core/verbs.c` `qp_state_table`): the initiator
    /// takes no responder attributes at RTR, the target no retry counts at RTS.
    pub fn connect_to(
        &mut self,
        q: usize,
        peer: &XrcAddr,
        ah: mlx5_hw::AhAttr,
        path_mtu: mlx5_hw::Mtu,
    ) -> Result<()> {
        let (ini_psn, tgt_psn) = *self.psns.get(q).ok_or_else(|| {
            Error::Usage(format!("-c XRC: this end has no initiator or target {q}"))
        })?;
        let (timeout, retry_cnt, rnr_retry) = self.run;
        let mut a = QpAttr {
            port_num: ah.port_num,
            qp_access_flags: mlx5_ctx::mr::all_access(),
            path_mtu,
            ah_attr: ah,
            max_dest_rd_atomic: self.rd_atomic,
            max_rd_atomic: self.rd_atomic.min(peer.rd_atomic).max(1),
            min_rnr_timer: 12,
            timeout,
            retry_cnt,
            rnr_retry,
            ..QpAttr::default()
        };
        let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
        let path = AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
        let ini_rts = AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC;
        let tgt_rtr = path | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
        let tgt_rts = AttrMask::STATE | AttrMask::TIMEOUT | AttrMask::SQ_PSN;
        let steps = [
            (QpState::Init, init, init),
            (
                QpState::Rtr,
                AttrMask::STATE | path,
                AttrMask::STATE | tgt_rtr,
            ),
            (QpState::Rts, ini_rts, tgt_rts),
        ];
        for (state, mi, mt) in steps {
            a.qp_state = state;
            if let Some(ini) = self.inis.get_mut(q) {
                // The initiator: towards the peer's target, whose responder expects our PSNs.
                a.dest_qp_num = peer.tgt;
                a.rq_psn = peer.tgt_psn;
                a.sq_psn = ini_psn;
                ini.context().device().modify_qp(ini.id(), &a, mi)?;
                ini.data_path().set_state(state);
            }
            if let Some(t) = self.targets.get(q) {
                // The target: answering the peer's initiator.
                a.dest_qp_num = peer.ini;
                a.rq_psn = peer.ini_psn;
                a.sq_psn = tgt_psn;
                t.xrcd().context().device().modify_qp(t.id(), &a, mt)?;
            }
        }
        tracing::info!(
            ini = ?self.ini_qpns.get(q),
            to = peer.tgt,
            tgt = ?self.tgt_qpns.get(q),
            srqn = peer.srqn,
            "XRC initiator and target connected"
        );
        Ok(())
    }

    /// Record the peer's addresses (one per QP, in order) before [`XrcEnd::connect_to`] and
    /// [`XrcEnd::path`].
    pub fn set_peer(&mut self, peer: Vec<XrcAddr>) {
        self.peer = peer;
    }

    /// The data path over the initiators and the XRC SRQ, completing on `cq` (the RC QPs'
    /// CQ the XRC objects were created on).
    pub fn path<'a>(&'a mut self, cq: &'a mut Cq) -> Result<XrcPath<'a>> {
        if self.peer.len() < self.inis.len() || self.peer.is_empty() {
            return Err(Error::Usage(
                "-c XRC: the XRC addresses were not exchanged before the run".into(),
            ));
        }
        let early = std::mem::take(&mut self.early);
        Ok(XrcPath {
            inis: &mut self.inis,
            srq: &mut self.srq,
            cq,
            srqns: self.peer.iter().map(|a| a.srqn).collect(),
            done: SharedCq::new(early, false, &self.ini_qpns, &self.tgt_qpns),
        })
    }

    /// The report's line about the XRC objects (the addresses carried over the run's RC QPs).
    pub fn describe(&self) -> String {
        self.describe_via("the RC QPs only carried the XRC addresses")
    }

    /// The report's line about the XRC objects, ending with how their addresses crossed.
    pub fn describe_via(&self, how: &str) -> String {
        let hex = |v: &mut dyn Iterator<Item = u32>| {
            let all: Vec<u32> = v.collect();
            let mut s: Vec<String> = all.iter().take(4).map(|n| format!("{n:#08x}")).collect();
            if all.len() > 4 {
                s.push(format!("... ({} in all)", all.len()));
            }
            s.join(" ")
        };
        // perftest's one-way runs have only initiators on one end and only targets on the other.
        let sending = if self.ini_qpns.is_empty() {
            "no initiator (the peer sends)".to_string()
        } else {
            format!(
                "initiator {} sending to the peer's target {} and its XRC SRQ {:#08x}",
                hex(&mut self.ini_qpns.iter().copied()),
                hex(&mut self.peer.iter().map(|a| a.tgt)),
                self.peer.first().map_or(0, |a| a.srqn),
            )
        };
        let receiving = if self.tgt_qpns.is_empty() {
            "no target (the peer receives)".to_string()
        } else {
            format!(
                "target {} receiving here into XRC SRQ {:#08x}",
                hex(&mut self.tgt_qpns.iter().copied()),
                self.srq.srq_num(),
            )
        };
        format!(" XRC: {sending}; {receiving}; {how}")
    }
}

/// Announce every end of `ends` (each with its RC QPs, CQ, buffer and QP 0's RC connection),
/// then collect each: both ends of a loopback run, or the one end of a process.
pub fn exchange(
    ends: &mut [(&mut XrcEnd, &mut [Qp], &mut Cq, &Mr, &Connection)],
    timeout: Duration,
) -> Result<()> {
    for (x, qps, _, mr, _) in ends.iter_mut() {
        x.announce(qps, mr)?;
    }
    for (x, qps, cq, mr, rc) in ends.iter_mut() {
        x.collect(qps, cq, mr, rc, timeout)?;
    }
    Ok(())
}

/// One end of a run's `-c XRC` set-up ([`connect_ends`]): its XRC objects, the RC QPs and CQ
/// that carry the addresses, its buffer and QP 0's RC connection.
pub type EndOfRun<'e, 'l> = (
    &'e mut XrcEnd,
    &'e mut crate::connecting::DirectLinks<'l>,
    &'e Mr,
    &'e Connection,
);

/// `-c XRC` in `lat` and `bw`, once the RC QPs are connected: every end's XRC addresses
/// swapped over its RC QPs ([`exchange`]), the first end's XRC QPs said on the run's output
/// ([`XrcEnd::describe`]), and the inline limit every end's initiators allow, at most
/// `inline`.
pub fn connect_ends(ends: &mut [EndOfRun<'_, '_>], run: &RunPlan, inline: u32) -> Result<u32> {
    let mut carried: Vec<_> = ends
        .iter_mut()
        .map(|(x, links, mr, rc)| (&mut **x, &mut *links.qps, &mut *links.cq, *mr, *rc))
        .collect();
    exchange(&mut carried, run.params.io_timeout)?;
    if let Some((x, ..)) = ends.first() {
        run.say(&x.describe());
    }
    Ok(ends.iter().fold(inline, |i, (x, ..)| i.min(x.max_inline())))
}

/// The receives each RC QP of end `r` posts when it reaches Init: the run's, or with `-c XRC`
/// (`x`) the one that takes the peer's XRC addresses ([`XrcEnd::exchange_receive`]).
pub fn receives(
    run: &RunPlan,
    r: &Resources,
    x: Option<&XrcEnd>,
) -> Result<Option<crate::connecting::Receives>> {
    match x {
        Some(x) => Ok(Some(x.exchange_receive(&r.mr)?)),
        None => run.receives(&r.mr),
    }
}

/// This library's data path over XRC: send WRs of QP `q` go on initiator `q`, naming the
/// peer's XRC SRQ; receives are posted on this end's XRC SRQ and reported for the target they
/// arrived at.
pub struct XrcPath<'a> {
    inis: &'a mut [Qp],
    srq: &'a mut XrcSrq,
    cq: &'a mut Cq,
    srqns: Vec<u32>,
    /// The completions: sends on the initiators, receives on the targets.
    done: SharedCq<'a>,
}

impl DataPath for XrcPath<'_> {
    #[inline]
    fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()> {
        let sges = [p.sge];
        let wr = send_wr(p, &sges, None).xrc(self.srqns[q]);
        self.inis[q].post(&wr)?;
        Ok(())
    }

    fn post_recv(&mut self, _q: usize, wr_id: u64, sge: mlx5_qp::Sge) -> Result<()> {
        self.srq.post_recv(wr_id, std::slice::from_ref(&sge))?;
        Ok(())
    }

    #[inline]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
        let mut table = (&mut *self.inis, std::slice::from_mut(&mut *self.srq));
        self.done.poll(self.cq, &mut table, out)
    }

    fn set_ud_peer(&mut self, _q: usize, _peer: &mlx5_connect::UdPeer) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_wrong_one_is_named() {
        let a = XrcAddr {
            ini: 0x10_0105,
            ini_psn: 0xab_cdef,
            tgt: 0x106,
            tgt_psn: 0x12_3456,
            srqn: 0x105,
            rd_atomic: 16,
        };
        let b = encode(&a, 2);
        assert_eq!(&b[16..20], &[0, 0, 1, 5]);
        assert_eq!(decode(&b, 2), Ok(a));
        assert!(decode(&b, 1).unwrap_err().contains("QP 2 where QP 1's"));
        assert!(decode(&b[..23], 2).unwrap_err().contains("23 bytes"));
        let mut big = b;
        big[16] = 1;
        assert!(decode(&big, 2)
            .unwrap_err()
            .contains("XRC SRQ number 0x1000105 is over 24 bits"));
    }
}
