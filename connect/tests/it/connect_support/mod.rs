//! Shared setup for the connect and recovery tests on the software ConnectX: one side = a
//! device, a PD, a CQ, a QP (Reset) with its data path, and a registered buffer. Connecting is
//! left to `mlx5_connect`, which is what these tests exercise.
#![allow(dead_code)]

use mlx5_connect::{
    self as connect, ConnectParams, Connection, PairSide, QpLink, QpRef, RebuildReport,
    RemoteBuffer,
};
use mlx5_hw::{CqInitAttr, Device, PdId, QpCap, QpInfo, QpInitAttr, QpType};
use mlx5_qp::{Cq, Qp, RemoteAddr, Sge, Wc, WcStatus};
use mlx5_sim::{DeviceConfig, Fabric, SimDevice};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use mlx5_testkit::buf::{all_access, Buf};

/// A test buffer as the connect exchange announces it.
pub trait Announced {
    /// Address, rkey and length for `ConnectParams::with_buffer`.
    fn remote_buffer(&self) -> RemoteBuffer;
}

impl Announced for Buf {
    fn remote_buffer(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.mr.rkey,
            len: self.mr.length,
        }
    }
}

/// The default params with a 10 s I/O timeout, so a stuck handshake fails the test.
pub fn params() -> ConnectParams {
    {
        let mut p = ConnectParams::default();
        p.io_timeout = Duration::from_secs(10);
        p
    }
}

/// The remote address `off` bytes into a buffer the peer announced.
pub fn remote(b: &RemoteBuffer, off: u64) -> RemoteAddr {
    RemoteAddr::new(b.addr + off, b.rkey)
}

/// One side: everything a QP needs, in Reset.
pub struct Side {
    pub dev: SimDevice,
    pub pd: PdId,
    pub cq: Cq,
    pub info: QpInfo,
    pub qp: Qp,
    pub buf: Buf,
    /// How many receives `post_receives` posts (0: the receiver never posts, for RNR).
    pub recv_count: Arc<AtomicU32>,
}

pub const RECV_SLOT: usize = 256;
pub const RECV_BASE: usize = 1 << 15;

impl Side {
    pub fn new(dev: &SimDevice, qp_type: QpType) -> Side {
        let pd = dev.alloc_pd().unwrap();
        let cqi = dev
            .create_cq(&CqInitAttr {
                cqe: 256,
                cqe_size: 64,
                ignore_overrun: false,
                channel: None,
            })
            .unwrap();
        // SAFETY: the CQ lives as long as the device; it is never destroyed in these tests.
        let cq = unsafe { Cq::from_layout(&cqi.layout) }.unwrap();
        let info = dev
            .create_qp(
                pd,
                &QpInitAttr {
                    qp_type,
                    send_cq: cqi.id,
                    recv_cq: cqi.id,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 128,
                    },
                    sq_sig_all: false,
                },
            )
            .unwrap();
        // SAFETY: the QP is never destroyed while this `Qp` exists.
        let qp = unsafe { Qp::from_layout(&info.layout, None) }.unwrap();
        let buf = Buf::new(dev, pd, 1 << 16, all_access());
        Side {
            dev: dev.clone(),
            pd,
            cq,
            info,
            qp,
            buf,
            recv_count: Arc::new(AtomicU32::new(8)),
        }
    }

    pub fn qp_ref(&self) -> QpRef {
        QpRef::new(&self.info, self.pd)
    }

    /// Params that announce this side's buffer.
    pub fn params(&self, base: &ConnectParams) -> ConnectParams {
        base.clone().with_buffer(self.buf.remote_buffer())
    }

    /// The data-path link: receives of RECV_SLOT bytes in the upper half of the buffer
    /// (wr_id = 1000 + slot).
    pub fn link(&mut self) -> QpLink<'_, impl FnMut(&mut Qp) -> mlx5_qp::Result<()>> {
        let n = self.recv_count.load(Ordering::SeqCst);
        let sges: Vec<Sge> = (0..n as usize)
            .map(|i| self.buf.sge(RECV_BASE + i * RECV_SLOT, RECV_SLOT as u32))
            .collect();
        QpLink::new(&mut self.qp, &mut self.cq, move |qp: &mut Qp| {
            for (i, s) in sges.iter().enumerate() {
                qp.post_recv(1000 + i as u64, std::slice::from_ref(s))?;
            }
            Ok(())
        })
    }

    /// The bytes of receive slot `i`.
    pub fn slot(&self, i: usize, len: usize) -> &[u8] {
        &self.buf.bytes()[RECV_BASE + i * RECV_SLOT..][..len]
    }

    /// Step the fabric until idle, then poll everything available.
    pub fn pump(&mut self, f: &Fabric) -> Vec<Wc> {
        f.run_until_idle();
        let mut out = Vec::new();
        let mut wcs = [Wc::default(); 32];
        loop {
            let n = self.cq.poll(&mut self.qp, &mut wcs).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&wcs[..n]);
        }
    }
}

/// A fabric with two RoCE devices (10.0.0.1 and 10.0.0.2).
pub fn fabric2() -> (Fabric, SimDevice, SimDevice) {
    let f = Fabric::new();
    let a = f.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let b = f.add_device(DeviceConfig::new([10, 0, 0, 2]));
    (f, a, b)
}

/// Fail on any driver bug the software ConnectX saw.
pub fn no_driver_bugs(f: &Fabric) {
    let bugs = f.driver_bugs();
    assert!(
        bugs.is_empty(),
        "driver bugs reported by the software ConnectX: {bugs:#?}"
    );
}

/// `connect::connect_pair` in process, `a` with params `pa` and `b` with `pb`, each side
/// posting its receives through `Side::link`.
pub fn try_connect_pair_with(
    a: &mut Side,
    pa: &ConnectParams,
    b: &mut Side,
    pb: &ConnectParams,
) -> connect::Result<(Connection, Connection)> {
    let (qa, qb) = (a.qp_ref(), b.qp_ref());
    let (da, db) = (a.dev.clone(), b.dev.clone());
    let (mut la, mut lb) = (a.link(), b.link());
    connect::connect_pair(
        PairSide {
            dev: &da,
            qp: qa,
            link: &mut la,
            params: pa,
        },
        PairSide {
            dev: &db,
            qp: qb,
            link: &mut lb,
            params: pb,
        },
    )
}

/// Connect `a` and `b` in process, each side announcing its buffer on top of `p`.
pub fn connect_pair(a: &mut Side, b: &mut Side, p: &ConnectParams) -> (Connection, Connection) {
    let (pa, pb) = (a.params(p), b.params(p));
    try_connect_pair_with(a, &pa, b, &pb).unwrap()
}

/// `connect::rebuild_pair` in process on two connected sides.
pub fn rebuild_pair(
    a: &mut Side,
    ca: &mut Connection,
    b: &mut Side,
    cb: &mut Connection,
    reason: WcStatus,
) -> (RebuildReport, RebuildReport) {
    let (da, db) = (a.dev.clone(), b.dev.clone());
    let (mut la, mut lb) = (a.link(), b.link());
    connect::rebuild_pair(&da, ca, &mut la, &db, cb, &mut lb, reason).unwrap()
}

/// The mlx5 device the owning-object tests run on instead of the software ConnectX
/// (`MLX5_TEST_DEVICE`, e.g. `mlx5_0`; `tools/rdma-core-suites.sh` runs them so on the software
/// ConnectX behind rdma-core), if any.
pub fn test_device() -> Option<String> {
    std::env::var("MLX5_TEST_DEVICE")
        .ok()
        .filter(|d| !d.is_empty())
}

/// `n` contexts whose QPs reach each other: `n` of the device under test (its loopback), or
/// `n` software ConnectX devices on one threaded fabric.
pub fn contexts<const N: usize>() -> [mlx5_ctx::Context; N] {
    match test_device() {
        Some(d) => std::array::from_fn(|_| {
            mlx5_ctx::Context::open(&d).unwrap_or_else(|e| panic!("open {d}: {e}"))
        }),
        None => {
            let f = mlx5_ctx::SimFabric::threaded().unwrap();
            std::array::from_fn(|_| f.add_device())
        }
    }
}
