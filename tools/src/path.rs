//! The post/poll path a run measures, behind one small interface ([`DataPath`]) so that `lat`
//! and `bw` drive this library's data path ([`Direct`]) and libibverbs' ([`Verbs`],
//! `--path verbs`) with the same loops: post one WR of an [`Op`], post a receive,
//! poll completions as [`Done`]s.

use crate::{Error, Result};
use mlx5_connect::UdPeer;
use mlx5_qp::{RemoteAddr, SendWr, Sge, UdDest, Wc, WcFlags};

/// What one send WR does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE to this remote address.
    Write(RemoteAddr),
    /// SEND (UD: to the QP's peer, [`DataPath::set_ud_peer`]).
    Send,
    /// RDMA READ from this remote address into the local SGE.
    Read(RemoteAddr),
    /// 64-bit compare and swap at this remote address; the original value lands in the
    /// local SGE (8 bytes).
    CompSwap {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Compare operand.
        compare: u64,
        /// Swap operand.
        swap: u64,
    },
    /// 64-bit fetch and add at this remote address; the original value lands in the local
    /// SGE (8 bytes).
    FetchAdd {
        /// Target (8-byte aligned).
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
}

/// One send WR to post.
#[derive(Clone, Copy, Debug)]
pub struct Post<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: Op,
    /// The local buffer: what is sent, or where a READ or atomic result lands.
    pub sge: Sge,
    /// The same bytes, when they go inline (copied into the WQE).
    pub inline: Option<&'a [u8]>,
    /// Ask for a completion.
    pub signaled: bool,
}

/// A completion as the tools see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Index of the QP in the path's table.
    pub qp: usize,
    /// The WR's id.
    pub wr_id: u64,
    /// A receive (of the peer's SEND), else a send-side completion.
    pub recv: bool,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// The completion's raw device timestamp (CQE bytes 48–55; convert with
    /// `mlx5_hw::ClockInfo`), on a CQ created with completion timestamps; else 0.
    pub ts: u64,
}

/// The post/poll path under measurement.
pub trait DataPath {
    /// Post `p` on QP `q`.
    fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()>;
    /// Post one receive on QP `q`.
    fn post_recv(&mut self, q: usize, wr_id: u64, sge: Sge) -> Result<()>;
    /// Poll ready completions; an error completion is an error.
    fn poll(&mut self, out: &mut [Done]) -> Result<usize>;
    /// UD: where QP `q`'s SENDs go.
    fn set_ud_peer(&mut self, q: usize, peer: &UdPeer);
}

/// This library's data path over owning QPs and their CQ.
pub struct Direct<'a> {
    qps: &'a mut [mlx5_ctx::Qp],
    cq: &'a mut mlx5_ctx::Cq,
    /// The SRQ the QPs receive through (`--use-srq`): receives are posted there.
    srq: Option<&'a mut mlx5_ctx::Srq>,
    ud: Vec<Option<UdDest>>,
    wcs: [Wc; 32],
    /// Poll with `poll_timestamped` into `ts` ([`Direct::timestamped`]).
    stamped: bool,
    ts: [u64; 32],
}

impl<'a> Direct<'a> {
    /// The data path of `qps`, all completing on `cq`.
    pub fn new(qps: &'a mut [mlx5_ctx::Qp], cq: &'a mut mlx5_ctx::Cq) -> Self {
        let n = qps.len();
        Direct {
            qps,
            cq,
            srq: None,
            ud: vec![None; n],
            wcs: [Wc::default(); 32],
            stamped: false,
            ts: [0; 32],
        }
    }

    /// Receive through `srq` (`--use-srq`; `None`: each QP's own receive queue).
    pub fn with_srq(mut self, srq: Option<&'a mut mlx5_ctx::Srq>) -> Self {
        self.srq = srq;
        self
    }

    /// Read each completion's CQE timestamp into [`Done::ts`] (the CQ must have been
    /// created with completion timestamps: `Context::create_cq_with_timestamps`).
    pub fn timestamped(mut self) -> Self {
        self.stamped = true;
        self
    }
}

/// The data-path WR of `p` (UD: to `ud`).
#[inline]
pub(crate) fn send_wr<'a>(p: &Post<'a>, sges: &'a [Sge], ud: Option<&'a UdDest>) -> SendWr<'a> {
    let wr = match p.op {
        Op::Write(to) => SendWr::write(p.wr_id, to),
        Op::Send => SendWr::send(p.wr_id),
        Op::Read(from) => SendWr::read(p.wr_id, from),
        Op::CompSwap {
            remote,
            compare,
            swap,
        } => SendWr::comp_swap(p.wr_id, remote, p.sge, compare, swap),
        Op::FetchAdd { remote, add } => SendWr::fetch_add(p.wr_id, remote, p.sge, add),
    };
    let wr = if p.signaled { wr.signaled() } else { wr };
    let wr = match ud {
        Some(d) => wr.ud(d),
        None => wr,
    };
    match (p.op, p.inline) {
        (Op::CompSwap { .. } | Op::FetchAdd { .. }, _) => wr,
        (_, Some(bytes)) => wr.inline(bytes),
        (_, None) => wr.sges(sges),
    }
}

impl DataPath for Direct<'_> {
    #[inline]
    fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()> {
        let sges = [p.sge];
        let ud = self.ud.get(q).and_then(Option::as_ref);
        let wr = send_wr(p, &sges, ud);
        self.qps[q].post(&wr)?;
        Ok(())
    }

    fn post_recv(&mut self, q: usize, wr_id: u64, sge: Sge) -> Result<()> {
        match &mut self.srq {
            Some(s) => s.post_recv(wr_id, std::slice::from_ref(&sge))?,
            None => self.qps[q].post_recv(wr_id, std::slice::from_ref(&sge))?,
        }
        Ok(())
    }

    #[inline]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
        let max = out.len().min(self.wcs.len());
        let n = match &mut self.srq {
            None => poll_on(
                self.cq,
                &mut *self.qps,
                &mut self.wcs[..max],
                self.stamped.then_some(&mut self.ts[..max]),
            )?,
            // A receive completion names the SRQ's WQE: the SRQ resolves its WR id.
            Some(s) => poll_on(
                self.cq,
                &mut (&mut *self.qps, std::slice::from_mut(&mut **s)),
                &mut self.wcs[..max],
                self.stamped.then_some(&mut self.ts[..max]),
            )?,
        };
        for (i, (o, wc)) in out.iter_mut().zip(&self.wcs[..n]).enumerate() {
            if !wc.is_ok() {
                return Err(Error::completion(wc));
            }
            let qp = if self.qps.len() == 1 {
                0
            } else {
                self.qps
                    .iter()
                    .position(|q| q.qpn() == wc.qp_num())
                    .unwrap_or(0)
            };
            *o = Done {
                qp,
                wr_id: wc.wr_id(),
                recv: wc.opcode().is_recv(),
                // The GRH a UD receive starts with is the device's, not the peer's message.
                byte_len: if wc.flags().contains(WcFlags::GRH) {
                    wc.byte_len().saturating_sub(GRH as u32)
                } else {
                    wc.byte_len()
                },
                ts: if self.stamped { self.ts[i] } else { 0 },
            };
        }
        Ok(n)
    }

    fn set_ud_peer(&mut self, q: usize, peer: &UdPeer) {
        if let Some(slot) = self.ud.get_mut(q) {
            *slot = Some(peer.dest());
        }
    }
}

/// Poll `cq` into `wcs`, the WR ids resolved by `table`: sleeping on the completion channel
/// when the CQ has one (`-e`: poll, arm, poll again, a bounded sleep on the channel's fd so the
/// caller's deadlines still run), reading CQE timestamps into `ts` when given.
#[inline]
fn poll_on<R: mlx5_qp::Resolve + ?Sized>(
    cq: &mut mlx5_ctx::Cq,
    table: &mut R,
    wcs: &mut [Wc],
    ts: Option<&mut [u64]>,
) -> Result<usize> {
    Ok(if cq.channel().is_some() {
        cq.poll_blocking(table, wcs, 0, std::time::Duration::from_millis(20))?
    } else if let Some(ts) = ts {
        cq.poll_timestamped(table, wcs, ts)?
    } else {
        cq.poll(table, wcs)?
    })
}

/// The completion side of a path whose QPs share one CQ with an SRQ (`-c DC`, `-c XRC`):
/// the completions the address exchange kept, the arrays one poll fills, and the QP numbers
/// sends and receives complete on, whose index in them is a completion's [`Done::qp`].
pub(crate) struct SharedCq<'a> {
    /// The exchange's leftovers with their stamps, last first.
    early: Vec<(Wc, u64)>,
    wcs: [Wc; 32],
    ts: [u64; 32],
    stamped: bool,
    send_qpns: &'a [u32],
    recv_qpns: &'a [u32],
}

impl<'a> SharedCq<'a> {
    /// `early`: what the address exchange polled past, oldest first; `stamped`: read each
    /// completion's device timestamp.
    pub(crate) fn new(
        mut early: Vec<(Wc, u64)>,
        stamped: bool,
        send_qpns: &'a [u32],
        recv_qpns: &'a [u32],
    ) -> SharedCq<'a> {
        early.reverse();
        SharedCq {
            early,
            wcs: [Wc::default(); 32],
            ts: [0; 32],
            stamped,
            send_qpns,
            recv_qpns,
        }
    }

    /// A completion as the tools see it; an error completion ends the run.
    fn done(&self, wc: &Wc, ts: u64) -> Result<Done> {
        if !wc.is_ok() {
            return Err(Error::completion(wc));
        }
        let recv = wc.opcode().is_recv();
        let qpns = if recv { self.recv_qpns } else { self.send_qpns };
        Ok(Done {
            qp: qpns.iter().position(|&n| n == wc.qp_num()).unwrap_or(0),
            wr_id: wc.wr_id(),
            recv,
            byte_len: wc.byte_len(),
            ts: if self.stamped { ts } else { 0 },
        })
    }

    /// The kept completions first; once they are all out, one poll of `cq` through `table`
    /// ([`poll_on`]).
    pub(crate) fn poll<R: mlx5_qp::Resolve + ?Sized>(
        &mut self,
        cq: &mut mlx5_ctx::Cq,
        table: &mut R,
        out: &mut [Done],
    ) -> Result<usize> {
        if !self.early.is_empty() {
            let mut n = 0;
            while n < out.len() {
                let Some((wc, ts)) = self.early.pop() else {
                    break;
                };
                out[n] = self.done(&wc, ts)?;
                n += 1;
            }
            return Ok(n);
        }
        let max = out.len().min(self.wcs.len());
        let ts = self.stamped.then_some(&mut self.ts[..max]);
        let n = poll_on(cq, table, &mut self.wcs[..max], ts)?;
        for (i, o) in out[..n].iter_mut().enumerate() {
            *o = self.done(&self.wcs[i], self.ts[i])?;
        }
        Ok(n)
    }
}

/// Bytes of the GRH in front of every UD receive on RoCE (IBTA Vol. 1 §11.4.1.2; rdma-core
/// `ibv_ud_pingpong` posts receives 40 bytes longer than the message).
pub const GRH: usize = 40;

pub use verbs::Verbs;

mod verbs {
    use super::*;
    use mlx5_hw::verbs::baseline::{
        BaselineCq, BaselineQp, BaselineSrq, Completion, SendOp, SendWr as VWr, Sge as VSge,
        UdDest as VUd,
    };

    /// `IBV_WC_RECV`: every receive opcode has this bit (rdma-core `libibverbs/verbs.h`,
    /// `enum ibv_wc_opcode`: "consumers can test if a completion is a receive by testing
    /// (opcode & IBV_WC_RECV)").
    const IBV_WC_RECV: u32 = 1 << 7;

    /// libibverbs' `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq` on the same QPs and CQ,
    /// as perftest drives them.
    pub struct Verbs<'d> {
        qps: Vec<BaselineQp<'d>>,
        qpns: Vec<u32>,
        cq: BaselineCq<'d>,
        /// `--use-srq`: the SRQ every QP receives through (`ibv_post_srq_recv`).
        srq: Option<BaselineSrq<'d>>,
        ud: Vec<Option<VUd>>,
        /// UD receives start with a GRH on RoCE (the CQE's flag is not reported here).
        ud_grh: bool,
        done: Vec<Completion>,
        /// The CQ has completion timestamps: poll with `poll_timestamped` into `ts`.
        stamped: bool,
        ts: Vec<u64>,
        /// `-e`: the device, the CQ's completion channel and the CQ (to wait and acknowledge).
        events: Option<(
            &'d mlx5_hw::verbs::VerbsDevice,
            mlx5_hw::ChannelId,
            mlx5_hw::CqId,
        )>,
    }

    impl<'d> Verbs<'d> {
        /// Claim the QPs and the CQ of `r` for the libibverbs data path.
        pub fn claim(r: &'d crate::resources::VerbsResources) -> Result<Verbs<'d>> {
            let qps = r
                .qps
                .iter()
                .map(|q| BaselineQp::new(&r.verbs, q.id))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(Verbs {
                qps,
                qpns: r.qps.iter().map(|q| q.qpn).collect(),
                cq: BaselineCq::new(&r.verbs, r.cq.id)?,
                srq: r.srq.map(|s| BaselineSrq::new(&r.verbs, s)).transpose()?,
                ud: vec![None; r.qps.len()],
                ud_grh: r.qp_type == mlx5_hw::QpType::Ud,
                done: vec![Completion::default(); 32],
                stamped: r.cq.timestamps,
                ts: vec![0; 32],
                events: r.channel.map(|ch| (&*r.verbs, ch, r.cq.id)),
            })
        }

        /// QP `q`'s handle (to post the receives of a connect).
        pub fn qp_mut(&mut self, q: usize) -> &mut BaselineQp<'d> {
            &mut self.qps[q]
        }

        /// QP `q`'s handle and the SRQ the QPs receive through, if any (`--use-srq`: the
        /// receives of a connect go there).
        pub fn receive_side(
            &mut self,
            q: usize,
        ) -> (&mut BaselineQp<'d>, Option<&mut BaselineSrq<'d>>) {
            (&mut self.qps[q], self.srq.as_mut())
        }

        /// How many QPs the path drives.
        pub fn qp_count(&self) -> usize {
            self.qps.len()
        }
    }

    fn vsge(s: Sge) -> VSge {
        VSge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }
    }

    impl DataPath for Verbs<'_> {
        fn post(&mut self, q: usize, p: &Post<'_>) -> Result<()> {
            let op = match p.op {
                Op::Write(to) => SendOp::Write {
                    remote_addr: to.addr,
                    rkey: to.rkey,
                },
                Op::Send => SendOp::Send,
                Op::Read(from) => SendOp::Read {
                    remote_addr: from.addr,
                    rkey: from.rkey,
                },
                Op::CompSwap {
                    remote,
                    compare,
                    swap,
                } => SendOp::CompareSwap {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                    compare,
                    swap,
                },
                Op::FetchAdd { remote, add } => SendOp::FetchAdd {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                    add,
                },
            };
            // IBV_SEND_INLINE copies from the SGE's address: the bytes must be there.
            let sges = [match p.inline {
                Some(bytes) => VSge {
                    addr: bytes.as_ptr() as u64,
                    length: bytes.len() as u32,
                    lkey: p.sge.lkey,
                },
                None => vsge(p.sge),
            }];
            let mut wr = VWr::new(p.wr_id, op, &sges);
            wr.signaled = p.signaled;
            wr.inline = p.inline.is_some();
            wr.ud = self.ud.get(q).copied().flatten();
            self.qps[q].post_send(&wr)?;
            Ok(())
        }

        fn post_recv(&mut self, q: usize, wr_id: u64, sge: Sge) -> Result<()> {
            match &mut self.srq {
                Some(s) => s.post_recv(wr_id, &[vsge(sge)])?,
                None => self.qps[q].post_recv(wr_id, &[vsge(sge)])?,
            }
            Ok(())
        }

        fn poll(&mut self, out: &mut [Done]) -> Result<usize> {
            let max = out.len().min(self.done.len());
            let mut n = if self.stamped {
                self.cq
                    .poll_timestamped(&mut self.done[..max], &mut self.ts[..max])?
            } else {
                self.cq.poll(&mut self.done[..max])?
            };
            if let (0, Some((dev, ch, cq))) = (n, self.events) {
                // `-e`, as perftest's event loop: arm (`ibv_req_notify_cq`), poll again (a
                // completion that came before the arm raises no event), then sleep on the
                // channel's fd (bounded, so the caller's deadlines still run) and acknowledge.
                use mlx5_hw::Device;
                self.cq.req_notify(false)?;
                n = self.cq.poll(&mut self.done[..max])?;
                if n == 0 {
                    if let Some(fired) =
                        dev.wait_cq_event(ch, std::time::Duration::from_millis(20))?
                    {
                        dev.ack_cq_events(fired, 1)?;
                        debug_assert_eq!(fired, cq);
                    }
                    n = self.cq.poll(&mut self.done[..max])?;
                }
            }
            for (i, (o, c)) in out.iter_mut().zip(&self.done[..n]).enumerate() {
                if !c.is_success() {
                    return Err(Error::Completion {
                        wr_id: c.wr_id,
                        what: "verbs work request",
                        status: c.status_str(),
                        hint: format!("; vendor syndrome {:#x}", c.vendor_err),
                    });
                }
                let recv = c.opcode & IBV_WC_RECV != 0;
                *o = Done {
                    qp: self.qpns.iter().position(|&n| n == c.qp_num).unwrap_or(0),
                    wr_id: c.wr_id,
                    recv,
                    byte_len: if recv && self.ud_grh {
                        c.byte_len.saturating_sub(GRH as u32)
                    } else {
                        c.byte_len
                    },
                    ts: if self.stamped { self.ts[i] } else { 0 },
                };
            }
            Ok(n)
        }

        fn set_ud_peer(&mut self, q: usize, peer: &UdPeer) {
            if let Some(slot) = self.ud.get_mut(q) {
                *slot = Some(VUd {
                    ah: peer.ah.id,
                    remote_qpn: peer.qpn,
                    remote_qkey: peer.qkey,
                });
            }
        }
    }
}
