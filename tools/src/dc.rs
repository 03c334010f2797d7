//! `-c DC`: `lat` and `bw` over the Dynamically Connected transport, as perftest runs it
//! (`src/perftest_resources.c`): each end has as many DC initiators ([`Dci`]) and DC targets
//! ([`Dct`]) as the run has QPs, the targets receiving through one shared receive queue; DCI
//! `q` sends to the peer's DCT `q` (`mlx5dv_wr_set_dc_addr(qp, ah, dctn, DC_KEY)`), so every
//! figure is still per QP pair.
//!
//! What a DCT is reached by (its port's GID and LID, its number, the key) exists only once the
//! DCT is in RTR, after the endpoints were swapped; perftest swaps its endpoints a second time
//! for it (`write_lat.c`: "Set up connection one more time to send qpn properly for DC"). Here
//! the run's RC QPs are connected as for `-c RC` (the control connection, the hello, the
//! remote buffer and the path MTU all come from them), and then carry the DC addresses: one
//! SEND on QP 0 each way ([`DcEnd::announce`], [`DcEnd::collect`]). After that the RC QPs are
//! idle and every measured WR goes DCI → DCT ([`DcPath`]).
//!
//! The exchange's bytes live past the two halves of the buffer (`2 × half`), where no test
//! traffic goes, so a peer that starts its traffic early overwrites nothing: the outgoing
//! records first, the incoming ones after. One record per DCT, 32 bytes, big-endian:
//!
//! ```text
//!  0..4   DCT number (24 bits)
//!  4..12  DC access key
//! 12..14  LID of the DCT's port (0 on RoCE)
//! 14..16  index of the DCT (0, 1, ...)
//! 16..32  GID of the DCT's port
//! ```

use std::time::{Duration, Instant};

use crate::connecting::DirectLinks;
use crate::path::{send_wr, DataPath, Done, Post, SharedCq};
use crate::resources::{Resources, ResourcesCfg};
use crate::run::RunPlan;
use crate::{Error, Result};
use mlx5_ctx::{Cq, DcAddr, DcTarget, Dci, DciInit, Dct, Mr, Srq};
use mlx5_hw::{Gid, Mtu, QpType};
use mlx5_qp::{DoorbellMode, Wc};

/// perftest's DC access key (`src/perftest_resources.c`, `DC_KEY`).
pub const DC_KEY: u64 = 0xffee_ddcc;
/// Bytes of one DCT's record in the exchange.
pub const RECORD: usize = 32;
/// The WR id of the exchange's SEND and receive (the test's receives count from 0).
const EXCHANGE_WR: u64 = u64::MAX;

/// The inline bytes perftest asks a DCI for by default in the WRITE and SEND tests
/// (`src/perftest_parameters.h`, `DEF_INLINE_DC`).
pub const DEF_INLINE_DC: u32 = 150;

/// Bytes the exchange needs past the buffer's halves for `qps` DCTs: their records out and in.
pub fn exchange_bytes(qps: u32) -> usize {
    2 * RECORD * qps.max(1) as usize
}

/// The RC QPs that connect a `-c DC` run and carry its DC addresses: the run's shape on RC,
/// receiving through a shared receive queue that the DCTs share (room for the test's receives
/// of every DCT and the exchange's one), with the exchange's bytes after the buffer's halves.
pub fn carrier_cfg(mut cfg: ResourcesCfg, run: &RunPlan) -> ResourcesCfg {
    let qps = cfg.qps.max(1);
    let receives = if run.test == crate::args::Test::Send {
        run.rx_depth.saturating_mul(qps)
    } else {
        0
    };
    cfg.qp_type = QpType::Rc;
    // The RC QPs receive through the SRQ: their own receive queues stay empty, and the CQ is
    // sized for the DCIs' sends (`sq_depth` each) and every receive of the SRQ.
    cfg.rq_depth = 1;
    cfg.srq = Some(receives.saturating_add(1));
    cfg.buf_len = cfg.buf_len.saturating_add(exchange_bytes(qps));
    cfg
}

/// Encode `a`, the DCT of index `index`, as its exchange record.
pub fn encode(a: &DcAddr, index: u16) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[0..4].copy_from_slice(&a.dctn.to_be_bytes());
    b[4..12].copy_from_slice(&a.key.to_be_bytes());
    b[12..14].copy_from_slice(&a.lid.to_be_bytes());
    b[14..16].copy_from_slice(&index.to_be_bytes());
    b[16..32].copy_from_slice(&a.gid.0);
    b
}

/// Decode the record of the DCT of index `index`; a record for another index or with a DCT
/// number over 24 bits is the peer's error.
pub fn decode(b: &[u8], index: u16) -> std::result::Result<DcAddr, String> {
    if b.len() != RECORD {
        return Err(format!("a DC address of {} bytes, not {RECORD}", b.len()));
    }
    let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let dctn = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    if dctn >> 24 != 0 {
        return Err(format!("DCT number {dctn:#x} is over 24 bits"));
    }
    if be16(14) != index {
        return Err(format!(
            "the DC address of DCT {} where DCT {index}'s was due",
            be16(14)
        ));
    }
    let mut key = [0u8; 8];
    key.copy_from_slice(&b[4..12]);
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&b[16..32]);
    Ok(DcAddr {
        gid: Gid(raw),
        lid: be16(12),
        dctn,
        key: u64::from_be_bytes(key),
    })
}

/// What the DCIs are created with once the RC connect gave the path MTU.
#[derive(Clone, Copy, Debug)]
struct DciShape {
    sq_depth: u32,
    inline: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    doorbell: Option<DoorbellMode>,
}

/// One end's DC objects: its DCTs (on the SRQ the RC QPs share), its DCIs (made when the
/// addresses are announced) and, once the peer's addresses came, a target per DCI.
pub struct DcEnd {
    dcts: Vec<Dct>,
    dctns: Vec<u32>,
    srq: Srq,
    dcis: Vec<Dci>,
    dcins: Vec<u32>,
    targets: Vec<DcTarget>,
    peer: Vec<DcAddr>,
    shape: DciShape,
    /// Offset of the outgoing records; the incoming ones follow.
    tail: usize,
    /// Completions polled during the exchange that belong to the run: `(wc, timestamp)`.
    early: Vec<(Wc, u64)>,
}

impl std::fmt::Debug for DcEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcEnd")
            .field("dctns", &self.dctns)
            .field("dcis", &self.dcins)
            .finish()
    }
}

impl DcEnd {
    /// The DC side of `r` (created with [`carrier_cfg`]): `qps` DCTs on its PD, CQ and SRQ
    /// (taken from `r`), the exchange's receive posted first and then, for the SEND test,
    /// `rx_depth` receives per DCT in the buffer's receive half. The DCIs, of `sq_depth` WRs
    /// and `inline` bytes, come with [`DcEnd::announce`].
    pub fn new(
        r: &mut Resources,
        run: &RunPlan,
        qps: u32,
        sq_depth: u32,
        inline: u32,
    ) -> Result<DcEnd> {
        let qps = qps.max(1);
        let mut srq = r.srq.take().ok_or_else(|| {
            Error::Usage("-c DC: the end was created without a shared receive queue".into())
        })?;
        let tail = 2 * run.half;
        let n = RECORD * qps as usize;
        // First in the SRQ: the peer's addresses arrive before anything of its traffic.
        srq.post_recv(EXCHANGE_WR, &[r.mr.sge(tail + n, n as u32)?])?;
        let mut dcts = Vec::new();
        for _ in 0..qps {
            dcts.push(r.pd.create_dct(&r.cq, &srq, DC_KEY)?);
        }
        if let Some(recv) = run.receives_on_srq(&r.mr)? {
            for _ in 0..qps {
                for i in 0..u64::from(recv.depth) {
                    srq.post_recv(i, std::slice::from_ref(&recv.sge))?;
                }
            }
        }
        Ok(DcEnd {
            dctns: dcts.iter().map(Dct::number).collect(),
            dcts,
            srq,
            dcis: Vec::new(),
            dcins: Vec::new(),
            targets: Vec::new(),
            peer: Vec::new(),
            shape: DciShape {
                sq_depth,
                inline,
                timeout: run.params.timeout,
                retry_cnt: run.params.retry_cnt,
                rnr_retry: run.params.rnr_retry,
                doorbell: run.doorbell,
            },
            tail,
            early: Vec::new(),
        })
    }

    /// Create the DCIs (path MTU `mtu`, what the RC connect agreed on) and send this end's DC
    /// addresses to the peer on RC QP 0 of `links`.
    pub fn announce(&mut self, links: &mut DirectLinks<'_>, mr: &Mr, mtu: Mtu) -> Result<()> {
        let s = self.shape;
        for _ in 0..self.dcts.len() {
            let mut dci = mr.pd().create_dci(&DciInit {
                max_send_wr: s.sq_depth,
                max_inline_data: s.inline,
                timeout: s.timeout,
                retry_cnt: s.retry_cnt,
                rnr_retry: s.rnr_retry,
                path_mtu: Some(mtu),
                ..DciInit::new(links.cq)
            })?;
            if let Some(mode) = s.doorbell {
                dci.set_doorbell_mode(mode)?;
            }
            self.dcins.push(dci.qpn());
            self.dcis.push(dci);
        }
        for (i, d) in self.dcts.iter().enumerate() {
            mr.write(self.tail + i * RECORD, &encode(&d.addr(), i as u16))?;
        }
        let n = RECORD * self.dcts.len();
        let qp = links
            .qps
            .first_mut()
            .ok_or_else(|| Error::Usage("-c DC: no RC QP to carry the DC addresses".into()))?;
        let sge = mr.sge(self.tail, n as u32)?;
        qp.post(&mlx5_qp::SendWr::send(EXCHANGE_WR).sges(&[sge]).signaled())?;
        Ok(())
    }

    /// Wait (at most `timeout`) for the SEND of [`DcEnd::announce`] to complete and for the
    /// peer's addresses; then aim DCI `q` at the peer's DCT `q`. Completions of the run that
    /// come meanwhile (a peer that started first) are kept for [`DcPath::poll`].
    pub fn collect(
        &mut self,
        links: &mut DirectLinks<'_>,
        mr: &Mr,
        timeout: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        let n = RECORD * self.dcts.len();
        let (mut sent, mut got) = (false, None);
        let mut wcs = [Wc::default(); 16];
        let mut ts = [0u64; 16];
        while !sent || got.is_none() {
            links.cq.context().progress();
            let k = links.cq.poll_timestamped(
                &mut (&mut *links.qps, std::slice::from_mut(&mut self.srq)),
                &mut wcs,
                &mut ts,
            )?;
            for (wc, &t) in wcs[..k].iter().zip(&ts[..k]) {
                if !wc.is_ok() {
                    return Err(Error::completion(wc));
                }
                match (wc.wr_id(), wc.opcode().is_recv()) {
                    (EXCHANGE_WR, false) => sent = true,
                    (EXCHANGE_WR, true) => got = Some(wc.byte_len()),
                    _ => self.early.push((*wc, t)),
                }
            }
            if k == 0 {
                if start.elapsed() > timeout {
                    return Err(Error::stuck(
                        "the peer's DC addresses",
                        timeout,
                        "one SEND of DC addresses was outstanding each way on the RC QPs",
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
                "{} bytes of DC addresses, {n} expected for {} DCTs: are both ends run with \
                 the same -q?",
                got.unwrap_or(0),
                self.dcts.len()
            )));
        }
        let bytes = mr.read(self.tail + n, n)?;
        for (q, rec) in bytes.chunks(RECORD).enumerate() {
            let a = decode(rec, q as u16).map_err(peer)?;
            self.targets.push(self.dcis[q].target(&a)?);
            self.peer.push(a);
        }
        Ok(())
    }

    /// The data path over the DCIs and the DCTs' SRQ, completing on `cq` (the RC QPs' CQ the
    /// DC objects were created on); `stamped` reads each completion's timestamp.
    pub fn path<'a>(&'a mut self, cq: &'a mut Cq, stamped: bool) -> Result<DcPath<'a>> {
        if self.targets.len() != self.dcis.len() || self.dcis.is_empty() {
            return Err(Error::Usage(
                "-c DC: the DC addresses were not exchanged before the run".into(),
            ));
        }
        let early = std::mem::take(&mut self.early);
        Ok(DcPath {
            dcis: &mut self.dcis,
            srq: &mut self.srq,
            cq,
            targets: &self.targets,
            done: SharedCq::new(early, stamped, &self.dcins, &self.dctns),
        })
    }

    /// The report's line about the DC objects: this end's DCIs and DCTs, the peer's DCTs.
    pub fn describe(&self) -> String {
        let hex = |v: &[u32]| {
            let mut s: Vec<String> = v.iter().take(4).map(|n| format!("{n:#08x}")).collect();
            if v.len() > 4 {
                s.push(format!("... ({} in all)", v.len()));
            }
            s.join(" ")
        };
        let peer: Vec<u32> = self.peer.iter().map(|a| a.dctn).collect();
        format!(
            " DC: DCI {} sending to the peer's DCT {} (key {DC_KEY:#x}); DCT {} receiving \
             here through one SRQ; the RC QPs only carried the DC addresses",
            hex(&self.dcins),
            hex(&peer),
            hex(&self.dctns),
        )
    }
}

/// Announce every end of `ends` (each with its links and buffer, the path MTU of its RC
/// connect), then collect each: both ends of a loopback run, or the one end of a process.
pub fn exchange(
    ends: &mut [(&mut DcEnd, &mut DirectLinks<'_>, &Mr, Mtu)],
    timeout: Duration,
) -> Result<()> {
    for (dc, links, mr, mtu) in ends.iter_mut() {
        dc.announce(links, mr, *mtu)?;
    }
    for (dc, links, mr, _) in ends.iter_mut() {
        dc.collect(links, mr, timeout)?;
    }
    Ok(())
}

/// This library's data path over DC: send WRs of QP `q` go on DCI `q` to the peer's DCT `q`;
/// receives are posted on the DCTs' SRQ and reported for the DCT they arrived at.
pub struct DcPath<'a> {
    dcis: &'a mut [Dci],
    srq: &'a mut Srq,
    cq: &'a mut Cq,
    targets: &'a [DcTarget],
    /// The completions: sends on the DCIs, receives on the DCTs.
    done: SharedCq<'a>,
}

impl DataPath for DcPath<'_> {
    #[inline]
    fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()> {
        let sges = [p.sge];
        let wr = send_wr(p, &sges, None).dc(&self.targets[q]);
        self.dcis[q].post(&wr)?;
        Ok(())
    }

    fn post_recv(&mut self, _q: usize, wr_id: u64, sge: mlx5_qp::Sge) -> Result<()> {
        self.srq.post_recv(wr_id, std::slice::from_ref(&sge))?;
        Ok(())
    }

    #[inline]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
        let mut table = (&mut *self.dcis, std::slice::from_mut(&mut *self.srq));
        self.done.poll(self.cq, &mut table, out)
    }

    fn set_ud_peer(&mut self, _q: usize, _peer: &mlx5_connect::UdPeer) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_wrong_one_is_named() {
        let a = DcAddr {
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7]),
            lid: 0x1234,
            dctn: 0x00ab_cdef,
            key: DC_KEY,
        };
        let b = encode(&a, 3);
        assert_eq!(&b[0..4], &[0, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[4..12], &DC_KEY.to_be_bytes());
        assert_eq!(decode(&b, 3), Ok(a));
        assert!(decode(&b, 2).unwrap_err().contains("DCT 3 where DCT 2's"));
        assert!(decode(&b[..31], 3).unwrap_err().contains("31 bytes"));
        let mut big = b;
        big[0] = 1;
        assert!(decode(&big, 3).unwrap_err().contains("24 bits"));
    }

    #[test]
    fn the_carrier_makes_room_for_the_srq_and_the_exchange() {
        use crate::args::LatArgs;
        use clap::Parser;
        let a =
            LatArgs::try_parse_from(["lat", "send", "-c", "DC", "-s", "100", "-r", "7"]).unwrap();
        let c = &a.common;
        let sizes = c.sizes(a.test, 2).unwrap();
        let length = c.length(1000, 10_000, "the test's limit").unwrap();
        let p = RunPlan::new(c, crate::hello::Tool::Lat, a.test, sizes, length).unwrap();
        assert_eq!(p.conn, QpType::Dci);
        let cfg = p.cfg(3, 64);
        assert_eq!(cfg.qp_type, QpType::Rc);
        assert_eq!(cfg.srq, Some(3 * 7 + 1));
        assert_eq!(cfg.buf_len, 2 * 128 + 3 * 64);
        // Every DCI send and every receive of the SRQ fit in the CQ.
        assert!(cfg.cqe() > 3 * 64 + 3 * 7);
    }
}
