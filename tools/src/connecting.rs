//! Connecting the QPs of a run: every QP of this end to the matching QP of the other end, in
//! this process (`--loopback`, `mlx5_connect::connect_pair`) or across processes (one control
//! connection per QP through a [`Rendezvous`], `mlx5_connect::Connection::over`), whichever
//! data path drives them ([`Links`]: the direct path's [`DirectLinks`], or with the `verbs`
//! feature libibverbs' `VerbsLinks`). Receives are posted when each QP reaches Init, before
//! the peer hears it is ready.

use crate::args::Test;
use crate::devices::Devices;
use crate::hello::RunShape;
use crate::rendezvous::{Rendezvous, UdpLink};
use crate::{Error, Result};
use mlx5_connect::{
    connect_pair, ConnectParams, Connection, Link, PairSide, QpLink, QpRef, RemoteBuffer,
};
use mlx5_ctx::{Context, Mr};
use mlx5_hw::AhId;
use mlx5_qp::Sge;
use std::net::TcpStream;

/// Receives to post on each QP when it reaches Init: `depth` receives of `sge`, WR ids
/// `0..depth`.
#[derive(Clone, Copy, Debug)]
pub struct Receives {
    /// The receive buffer (every receive of the QP lands there).
    pub sge: Sge,
    /// How many.
    pub depth: u32,
}

impl Receives {
    /// What a run of `test` posts on each QP: for the SEND test `depth` receives into the
    /// buffer's receive half (`half` bytes of `mr` from offset `half`; sends start at 0), for
    /// the others none.
    pub fn for_test(test: Test, mr: &Mr, half: usize, depth: u32) -> Result<Option<Receives>> {
        if test != Test::Send {
            return Ok(None);
        }
        let length = u32::try_from(half)
            .map_err(|_| Error::Usage(format!("a receive buffer of {half} bytes is over 4 GiB")))?;
        Ok(Some(Receives {
            sge: mr.sge(half, length)?,
            depth,
        }))
    }
}

/// Hands out, one at a time, the [`Link`] of each local QP for its connect.
pub trait Links {
    /// QP `q`'s link.
    fn link(&mut self, q: usize) -> Box<dyn Link + '_>;
    /// The real cause of a failed connect, when the link knows it better than the connect
    /// did (a receive libibverbs refused).
    fn cause(&mut self, e: Error) -> Error {
        e
    }
}

/// The links of this library's data path over owning QPs.
pub struct DirectLinks<'a> {
    /// The QPs.
    pub qps: &'a mut [mlx5_ctx::Qp],
    /// Their CQ.
    pub cq: &'a mut mlx5_ctx::Cq,
    /// What to post when a QP reaches Init.
    pub recv: Option<Receives>,
    /// The shared receive queue the QPs receive through (`--use-srq`), its receives posted
    /// already.
    pub srq: Option<&'a mut mlx5_ctx::Srq>,
}

impl Links for DirectLinks<'_> {
    fn link(&mut self, q: usize) -> Box<dyn Link + '_> {
        let recv = self.recv;
        Box::new(QpLink::new(
            &mut self.qps[q],
            self.cq,
            move |qp: &mut mlx5_qp::Qp| {
                if let Some(r) = recv {
                    for i in 0..u64::from(r.depth) {
                        qp.post_recv(i, std::slice::from_ref(&r.sge))?;
                    }
                }
                Ok(())
            },
        ))
    }
}

/// One end as the control path sees it: its device, QPs and parameters
/// (`Resources::end`, `VerbsResources::end`).
pub struct End {
    /// The device.
    pub ctx: Context,
    /// The QPs, in order.
    pub qps: Vec<QpRef>,
    /// The parameters of every QP.
    pub params: ConnectParams,
}

impl End {
    /// The end of `qps` on `ctx`, with `params` announcing `buffer`.
    pub fn new(
        ctx: &Context,
        qps: Vec<QpRef>,
        params: &ConnectParams,
        buffer: RemoteBuffer,
    ) -> End {
        End {
            ctx: ctx.clone(),
            qps,
            params: params.clone().with_buffer(buffer),
        }
    }
}

/// What connecting gave.
pub struct Connected {
    /// This end's connections, one per QP.
    pub conns: Vec<Connection>,
    /// The peer's, in loopback.
    pub peer: Vec<Connection>,
    /// The UDP link of a software ConnectX across processes.
    pub udp: Option<UdpLink>,
    /// A second handle on each control connection (across processes), for
    /// [`crate::results`].
    pub streams: Vec<TcpStream>,
    /// The address handles the UD connections made for their peers, destroyed when this is
    /// dropped (a `Connection` leaves its UD peer's address handle to the caller).
    pub handles: Vec<AhGuard>,
}

/// An address handle a connection created, destroyed on drop.
pub struct AhGuard {
    ctx: Context,
    ah: AhId,
}

impl AhGuard {
    /// Take over the address handle `conn` made for its UD peer on `ctx`, if it made one.
    pub fn of(ctx: &Context, conn: &Connection) -> Option<AhGuard> {
        conn.ud_peer().map(|p| AhGuard {
            ctx: ctx.clone(),
            ah: p.ah.id,
        })
    }
}

impl Drop for AhGuard {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.device().destroy_ah(self.ah) {
            tracing::warn!(ah = self.ah.0, error = %e, "destroy_ah failed");
        }
    }
}

/// Connect every QP of `me` (through `links`): to the matching QP of `peer` in this process
/// (loopback), else to the peer process's through `rv`, one control connection per QP in QP
/// order on both sides, each first swapping the hello of a run of `shape`.
pub fn connect_all(
    devs: &Devices,
    me: &End,
    links: &mut dyn Links,
    peer: Option<(&End, &mut dyn Links)>,
    rv: Option<&Rendezvous>,
    shape: Option<&RunShape>,
) -> Result<Connected> {
    let mut out = Connected {
        conns: Vec::new(),
        peer: Vec::new(),
        udp: None,
        streams: Vec::new(),
        handles: Vec::new(),
    };
    match (peer, rv) {
        (Some((peer, peer_links)), _) => {
            for (q, &qp) in me.qps.iter().enumerate() {
                let r = {
                    let mut la = links.link(q);
                    let mut lb = peer_links.link(q);
                    connect_pair(
                        PairSide {
                            dev: me.ctx.device(),
                            qp,
                            link: &mut *la,
                            params: &me.params,
                        },
                        PairSide {
                            dev: peer.ctx.device(),
                            qp: peer.qps[q],
                            link: &mut *lb,
                            params: &peer.params,
                        },
                    )
                };
                let (a, b) = r.map_err(|e| peer_links.cause(links.cause(e.into())))?;
                out.handles.extend(AhGuard::of(&me.ctx, &a));
                out.handles.extend(AhGuard::of(&peer.ctx, &b));
                out.conns.push(a);
                out.peer.push(b);
            }
        }
        (None, Some(rv)) => {
            for (q, &qp) in me.qps.iter().enumerate() {
                let o = rv.control_for(devs, me.params.io_timeout, shape)?;
                out.udp = out.udp.or(o.udp);
                let r = {
                    let mut link = links.link(q);
                    Connection::over(o.control, me.ctx.device(), qp, &mut *link, &me.params)
                };
                let c = r.map_err(|e| links.cause(e.into()))?;
                out.handles.extend(AhGuard::of(&me.ctx, &c));
                out.conns.push(c);
                out.streams.push(o.stream);
            }
        }
        (None, None) => {
            return Err(Error::Usage(
                "nothing to connect to: neither --loopback nor a peer".into(),
            ))
        }
    }
    Ok(out)
}

pub use verbs::{connect_verbs, VerbsLinks};

mod verbs {
    use super::*;
    use crate::path::Verbs;
    use mlx5_hw::verbs::baseline::{BaselineQp, BaselineSrq, Sge as VSge};
    use mlx5_qp::Wc;

    /// Where a link posts the receives of its QP.
    enum Into<'q, 'd> {
        /// The QP's own receive queue (`ibv_post_recv`).
        Qp(&'q mut BaselineQp<'d>),
        /// The SRQ every QP receives through (`ibv_post_srq_recv`; `--use-srq`): the first QP
        /// to reach Init posts every QP's share there (and sets the flag), the others nothing.
        Srq(&'q mut BaselineSrq<'d>, &'q mut bool),
    }

    /// The control path's view of a verbs data path: receives are posted through
    /// `ibv_post_recv` (or `ibv_post_srq_recv`) when the QP reaches Init, so none is missing
    /// when the peer starts.
    struct VerbsLink<'q, 'd> {
        into: Into<'q, 'd>,
        recv: Option<Receives>,
        failed: &'q mut Option<mlx5_hw::Error>,
    }

    impl Link for VerbsLink<'_, '_> {
        fn set_state(&mut self, _state: mlx5_hw::QpState) {}
        fn post_receives(&mut self) -> mlx5_qp::Result<()> {
            let Some(r) = self.recv.take() else {
                return Ok(());
            };
            if let Into::Srq(_, filled) = &mut self.into {
                if **filled {
                    return Ok(());
                }
                **filled = true;
            }
            let sge = VSge {
                addr: r.sge.addr,
                length: r.sge.length,
                lkey: r.sge.lkey,
            };
            for i in 0..u64::from(r.depth) {
                let (posted, call) = match &mut self.into {
                    Into::Qp(qp) => (qp.post_recv(i, &[sge]), "ibv_post_recv refused a receive"),
                    Into::Srq(srq, _) => (
                        srq.post_recv(i, &[sge]),
                        "ibv_post_srq_recv refused a receive",
                    ),
                };
                if let Err(e) = posted {
                    *self.failed = Some(e);
                    return Err(mlx5_qp::Error::BadLayout(call));
                }
            }
            Ok(())
        }
        fn poll(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
        fn flush_outstanding(&mut self, _out: &mut [Wc]) -> mlx5_qp::Result<usize> {
            Ok(0)
        }
    }

    /// [`connect_all`] on libibverbs' data path: each end as the control path sees it, its
    /// QPs and CQ claimed ([`Verbs`]), and what to post on each QP when it reaches Init — to
    /// `peer` in this process, else through `rv` (a run of `shape`).
    pub fn connect_verbs(
        devs: &Devices,
        (me, verbs, recv): (&End, &mut Verbs<'_>, Option<Receives>),
        peer: Option<(&End, &mut Verbs<'_>, Option<Receives>)>,
        rv: Option<&Rendezvous>,
        shape: Option<&RunShape>,
    ) -> Result<Connected> {
        let mut links = VerbsLinks::new(verbs, recv);
        match peer {
            Some((peer, verbs, recv)) => {
                let mut peer_links = VerbsLinks::new(verbs, recv);
                connect_all(
                    devs,
                    me,
                    &mut links,
                    Some((peer, &mut peer_links)),
                    None,
                    None,
                )
            }
            None => connect_all(devs, me, &mut links, None, rv, shape),
        }
    }

    /// The links of libibverbs' data path, posting receives through the claimed QPs.
    pub struct VerbsLinks<'v, 'd> {
        /// The claimed QPs and CQ.
        pub verbs: &'v mut Verbs<'d>,
        /// What to post when a QP reaches Init.
        pub recv: Option<Receives>,
        /// Why posting a receive failed (the link's error type cannot carry it).
        pub failed: Option<mlx5_hw::Error>,
        /// With an SRQ: whether its receives were handed to a link already.
        srq_filled: bool,
    }

    impl<'v, 'd> VerbsLinks<'v, 'd> {
        /// The links of `verbs`' QPs, posting `recv` on each when it reaches Init; with an SRQ
        /// (`--use-srq`) the first QP to reach Init posts each QP's share (`depth / qps`, at
        /// least one: [`crate::resources::srq_receives`]) to the SRQ, as perftest's
        /// `ctx_set_recv_wqes` posts `rx_depth / num_of_qps` per QP with `ibv_post_srq_recv`.
        pub fn new(verbs: &'v mut Verbs<'d>, recv: Option<Receives>) -> VerbsLinks<'v, 'd> {
            VerbsLinks {
                verbs,
                recv,
                failed: None,
                srq_filled: false,
            }
        }
    }

    impl Links for VerbsLinks<'_, '_> {
        fn link(&mut self, q: usize) -> Box<dyn Link + '_> {
            let n = self.verbs.qp_count();
            let (qp, srq) = self.verbs.receive_side(q);
            let (into, recv) = match srq {
                None => (Into::Qp(qp), self.recv),
                Some(srq) => (
                    Into::Srq(srq, &mut self.srq_filled),
                    self.recv.map(|r| Receives {
                        depth: crate::resources::srq_receives(r.depth, n),
                        ..r
                    }),
                ),
            };
            Box::new(VerbsLink {
                into,
                recv,
                failed: &mut self.failed,
            })
        }
        fn cause(&mut self, e: Error) -> Error {
            self.failed.take().map_or(e, Error::from)
        }
    }
}
