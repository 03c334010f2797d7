//! perftest's out-of-band exchange, both roles (`lat`/`bw --perftest`): so that stock
//! `ib_write_lat`, `ib_send_bw`, ... and these tools run against each other. The facts are
//! perftest's (linux-rdma/perftest `src/perftest_communication.c`, `perftest_parameters.c`,
//! `perftest_resources.c` and the programs' `main`s; version 4.5-0.17 = 6.06, which Debian 12
//! ships, and the current release 26.04.17 = 6.29); the code is this crate's own.
//!
//! One TCP connection carries it all (perftest's client writes each part first, its server
//! reads first):
//!
//! 1. the prelude ([`prelude`]): versions (16 bytes), the cycle buffer and the cache line size
//!    (4 bytes each, the larger of each side's is used), the MTU (2 bytes, the smaller is used),
//!    and between peers of 6.28 and later the parameter negotiation (320 bytes), which stops
//!    both ends when their runs differ;
//! 2. per QP an endpoint message ([`wire::Dest`]: LID, outstanding reads, QPN, PSN, rkey,
//!    address, GID, SRQN as colon-separated hex text, 108 bytes on RoCE), the connect, and
//!    synchronising handshakes, in each program's order ([`script()`]);
//! 3. the runs, the bandwidth reports of `ib_*_bw` (5 fields of 8 bytes) and the closing
//!    handshake.
//!
//! [`Driver`] walks a run's steps over a [`Session`]. What the exchange cannot say is refused
//! before anything waits (`docs/perftest.md`): the UDP address of a software ConnectX in another
//! process (its frames travel over UDP, which perftest has no field for: use `--tap`).

pub mod connect;
pub mod script;
pub mod session;
pub mod wire;
pub mod xrc;

pub use connect::Driver;
pub use script::{script, Program, Shape, Step};
pub use session::Session;

use crate::args::{AtomicArg, Test};
use crate::{Error, Result};
use mlx5_connect::{Endpoint, RemoteBuffer};
use mlx5_hw::{Gid, LinkLayer, Mtu, QpType};
use std::time::Duration;
use wire::{DeviceSummary, Negotiation, PeerVersion, NEGOTIATE_FROM};

/// The cycle buffer this side announces: one page, perftest's `DEF_PAGE_SIZE` and what
/// `sysconf(_SC_PAGESIZE)` gives on x86_64 and most arm64 kernels. A peer may place messages
/// anywhere in the first `max(ours, its own)` bytes of the buffer it is given
/// (`increase_rem_addr`), so every buffer announced holds at least that.
pub const CYCLE_BUFFER: u32 = 4096;
/// The cache line size this side announces (perftest `DEF_CACHE_LINE_SIZE`).
pub const CACHE_LINE: u32 = 64;
/// perftest's largest message of `-a` (`MAX_SIZE`, 8 MiB), the size a negotiation names.
pub const MAX_SIZE: u64 = 1 << 23;
/// The duration a negotiation names when there is no `-D` (`DEF_DURATION`).
pub const DEF_DURATION: u32 = 5;

/// What this side brings to the prelude.
#[derive(Clone, Debug)]
pub struct Ours {
    /// `--dont_xchg_versions`: no versions, system data or MTU are exchanged (and hence no
    /// negotiation), as perftest's flag says.
    pub dont_xchg_versions: bool,
    /// The port's MTU in bytes (capped by `-m`).
    pub mtu: u32,
    /// The run, for a peer that negotiates.
    pub facts: RunFacts,
    /// This side's device, for a peer that negotiates.
    pub device: DeviceSummary,
}

/// What the prelude settled.
#[derive(Clone, Debug)]
pub struct Agreed {
    /// The peer's version (`None` with `--dont_xchg_versions`).
    pub peer_version: Option<PeerVersion>,
    /// The larger cycle buffer of the two: every announced buffer holds at least this.
    pub cycle_buffer: u32,
    /// The path MTU both use, bytes.
    pub mtu: u32,
    /// The peer's negotiation (peers of 6.28 and later).
    pub peer: Option<Negotiation>,
}

impl Agreed {
    /// Outstanding READ/atomic requests this side announces (perftest: the device's
    /// `max_qp_rd_atom` for READ and atomics, 1 otherwise, lowered to the peer's
    /// `max_qp_rd_atom` when it negotiated: `compare_ibv_device`), from `ours`, what this
    /// side's QP serves at once.
    pub fn out_reads(&self, test: Test, ours: u8) -> u16 {
        if !matches!(test, Test::Read | Test::Atomic) {
            return 1;
        }
        let peer = self
            .peer
            .map_or(u32::MAX, |p| p.device.max_qp_rd_atom.max(1));
        u16::from(ours)
            .min(peer.min(u32::from(u16::MAX)) as u16)
            .max(1)
    }
}

/// The prelude on `s`, as every perftest program runs it before creating its resources
/// (`exchange_versions`, `check_version_compatibility`, `check_sys_data`, `check_mtu`,
/// `negotiate_params`), each step within `timeout`.
pub fn prelude(s: &mut Session, ours: &Ours, timeout: Duration) -> Result<Agreed> {
    let mut agreed = Agreed {
        peer_version: None,
        cycle_buffer: CYCLE_BUFFER,
        mtu: ours.mtu,
        peer: None,
    };
    if ours.dont_xchg_versions {
        return Ok(agreed);
    }
    // The greeting of the control connection (`crate::rendezvous::greet`) may have read the
    // version already.
    if s.peer_version.is_none() {
        s.versions(timeout)?;
    }
    agreed.peer_version = s.peer_version.clone();
    let (cycle, _cache) = s.sys_data(CYCLE_BUFFER, CACHE_LINE, timeout)?;
    if cycle > 1 << 30 {
        return Err(Error::Peer {
            peer: s.peer().to_string(),
            why: format!("it announced a cycle buffer of {cycle} bytes, more than 1 GiB"),
        });
    }
    agreed.cycle_buffer = CYCLE_BUFFER.max(cycle);
    agreed.mtu = ours.mtu.min(s.mtu(ours.mtu, timeout)?);
    if s.peer_value() >= NEGOTIATE_FROM {
        // perftest negotiates after check_mtu, with the size it may have lowered to the MTU.
        let mine = negotiation(&ours.facts, agreed.mtu, ours.device);
        agreed.peer = Some(s.negotiate(&mine, timeout)?);
    }
    Ok(agreed)
}

/// What a run is, in the words of perftest's negotiation.
#[derive(Clone, Copy, Debug)]
pub struct RunFacts {
    /// The program.
    pub program: Program,
    /// `-c`.
    pub conn: QpType,
    /// `-A` (atomic tests).
    pub atomic: AtomicArg,
    /// `-a`.
    pub all: bool,
    /// The message size (`-s` or the tool's default; 8 for atomics).
    pub size: u64,
    /// `-s` was given.
    pub size_given: bool,
    /// `-n` (`None` with `-D`).
    pub iters: Option<u64>,
    /// `-D` seconds.
    pub duration: Option<u64>,
    /// QPs (`-q`; 1 for latency).
    pub qps: u32,
    /// `--report_gbits`.
    pub gbits: bool,
}

/// perftest's `connection_type` of `conn` (RC 0, UC 1, UD 2, XRC 4, DC 5; a type perftest has no
/// number for gets `u32::MAX`, which its peer refuses as a mismatch).
pub fn connection_type(conn: QpType) -> u32 {
    match conn {
        QpType::Rc => 0,
        QpType::Uc => 1,
        QpType::Ud => 2,
        QpType::XrcSend | QpType::XrcRecv => 4,
        QpType::Dci | QpType::Dct => 5,
        _ => u32::MAX,
    }
}

/// The negotiation of run `f` over path MTU `mtu` on `device` (perftest's values after its
/// parser and `check_mtu`: `-a` names `MAX_SIZE`, a UD size above the MTU is lowered to it
/// when `-a` or no `-s`, `-D` makes the iterations 0, `atomicType` is 0 outside atomics).
pub fn negotiation(f: &RunFacts, mtu: u32, device: DeviceSummary) -> Negotiation {
    let (verb, tst) = match f.program {
        Program::SendLat => (0, 0),
        Program::WriteLat => (2, 0),
        Program::ReadLat => (4, 0),
        Program::AtomicLat => (5, 0),
        Program::SendBw => (0, 1),
        Program::WriteBw => (2, 1),
        Program::ReadBw => (4, 1),
        Program::AtomicBw => (5, 1),
    };
    let atomic = matches!(f.program, Program::AtomicLat | Program::AtomicBw);
    let mut size = if f.all { MAX_SIZE } else { f.size };
    if f.conn == QpType::Ud && size > u64::from(mtu) && (f.all || !f.size_given) {
        size = u64::from(mtu);
    }
    Negotiation {
        test_method: u32::from(f.all),
        connection_type: connection_type(f.conn),
        verb,
        tst,
        atomic_type: match (atomic, f.atomic) {
            (false, _) => 0,
            (true, AtomicArg::CmpAndSwap) => 0,
            (true, AtomicArg::FetchAndAdd) => 1,
        },
        test_type: u32::from(f.duration.is_some()),
        report_fmt: if f.gbits { 0 } else { 1 },
        size,
        iters: f.iters.unwrap_or(0),
        num_of_qps: f.qps,
        duration: f
            .duration
            .map_or(DEF_DURATION, |d| u32::try_from(d).unwrap_or(u32::MAX)),
        device,
        ..Negotiation::default()
    }
}

/// What this side's device tells a negotiating peer.
pub fn device_summary(a: &mlx5_hw::DeviceAttr) -> DeviceSummary {
    DeviceSummary {
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        node_guid: a.node_guid,
        max_qp: a.max_qp,
        max_qp_wr: a.max_qp_wr,
        max_sge: a.max_sge,
        max_cq: a.max_cq,
        max_cqe: a.max_cqe,
        max_mr: a.max_mr,
        max_qp_rd_atom: a.max_qp_rd_atom,
        max_qp_init_rd_atom: a.max_qp_init_rd_atom,
        max_srq: a.max_srq,
        max_srq_wr: a.max_srq_wr,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// The endpoint message of this side's QP: `local` as the connect prepared it, the buffer the
/// peer is to use (`target`), the outstanding reads announced, and the GID in the long form
/// (`gid`: on RoCE, or on InfiniBand with `-x`, as perftest decides).
pub fn dest_of(local: &Endpoint, target: RemoteBuffer, out_reads: u16, gid: bool) -> wire::Dest {
    wire::Dest {
        lid: local.lid,
        out_reads,
        qpn: local.qpn,
        psn: local.psn,
        rkey: target.rkey,
        vaddr: target.addr,
        gid: gid.then_some(local.gid.0),
        srqn: 0,
    }
}

/// The peer's endpoint from its message `d`, on a port of `link_layer`, over path MTU `mtu`,
/// with QPs of `qp_type` (UD: perftest's Q_Key, `DEF_QKEY`); `len` bytes of its buffer are
/// used.
pub fn endpoint_of(
    d: &wire::Dest,
    qp_type: QpType,
    link_layer: LinkLayer,
    mtu: Mtu,
    len: u64,
) -> Endpoint {
    Endpoint {
        qp_type,
        link_layer,
        mtu,
        qpn: d.qpn,
        psn: d.psn,
        lid: d.lid,
        max_rd_atomic: 0,
        max_dest_rd_atomic: u8::try_from(d.out_reads).unwrap_or(u8::MAX),
        gid: Gid(d.gid.unwrap_or_default()),
        qkey: if qp_type == QpType::Ud {
            mlx5_connect::DEFAULT_QKEY
        } else {
            0
        },
        buffer: Some(RemoteBuffer {
            addr: d.vaddr,
            rkey: d.rkey,
            len,
        }),
    }
}

/// Whether `gid` is an IPv4-mapped address (perftest's `ipv6_addr_v4mapped`).
pub fn is_v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// perftest's `ctx_check_gid_compatibility`: both GIDs of one family.
pub fn check_gid_families(local: &wire::Dest, peer: &wire::Dest) -> Result<()> {
    if let (Some(a), Some(b)) = (local.gid, peer.gid) {
        if is_v4_mapped(&a) != is_v4_mapped(&b) {
            let fam = |g: &[u8; 16]| if is_v4_mapped(g) { "IPv4" } else { "IPv6" };
            return Err(Error::Usage(format!(
                "this side's GID {} is an {} address and the peer's {} an {} one (perftest: \
                 \"Found Incompatibility issue with GID types\"): choose GIDs of one family \
                 (-x, --ipv6)",
                std::net::Ipv6Addr::from(a),
                fam(&a),
                std::net::Ipv6Addr::from(b),
                fam(&b)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
