//! One end's RDMA resources, perftest's `pingpong_context`: a PD, a CQ, one or more QPs (in
//! Reset), maybe an SRQ, and one registered buffer — owning `mlx5-ctx` objects, so nothing
//! can be freed under the device: the buffer is a [`Mr`], which deregisters before it frees
//! its memory, whatever the run's outcome (a timeout, an error completion, a panic).
//!
//! Also the checks of what the device grants a run: [`Resources::with_inline`] (`-I`) and
//! [`Resources::set_doorbell_mode`] (`--doorbell`); and
//! [`VerbsResources`], one end on any verbs device (Soft-RoCE too) for the libibverbs data path.

use crate::args::DoorbellArg;
use crate::connecting::{DirectLinks, End, Receives};
use crate::inline::{self, InlineRequest};
use crate::{Error, Result};
use mlx5_connect::{qp_ref, ConnectParams, QpRef, RemoteBuffer};
use mlx5_ctx::{Context, Cq, Mr, Pd, Qp, QpInit, Srq};
use mlx5_hw::QpType;
use mlx5_qp::DoorbellMode;

/// The shape of one end.
#[derive(Clone, Copy, Debug)]
pub struct ResourcesCfg {
    /// Transport.
    pub qp_type: QpType,
    /// QPs sharing the CQ.
    pub qps: u32,
    /// Send WRs per QP.
    pub sq_depth: u32,
    /// Receive WRs per QP (ignored with an SRQ).
    pub rq_depth: u32,
    /// Inline bytes per WR.
    pub inline: u32,
    /// Buffer size.
    pub buf_len: usize,
    /// Receive through a shared receive queue of this many WRs.
    pub srq: Option<u32>,
    /// Complete on a CQ of its own completion channel, so that waits sleep on the channel's
    /// fd (`-e`, perftest's `--events`) instead of polling.
    pub events: bool,
}

impl ResourcesCfg {
    /// One RC QP with room for 128 sends and 128 receives, 220 bytes inline, a 64 KiB buffer.
    pub fn rc() -> ResourcesCfg {
        ResourcesCfg {
            qp_type: QpType::Rc,
            qps: 1,
            sq_depth: 128,
            rq_depth: 128,
            inline: 220,
            buf_len: 1 << 16,
            srq: None,
            events: false,
        }
    }

    /// The entries this end's CQ needs: every send and receive of every QP.
    pub fn cqe(&self) -> u32 {
        let per_qp = self.sq_depth.saturating_add(self.rq_depth);
        let n = per_qp
            .saturating_mul(self.qps.max(1))
            .saturating_add(self.srq.unwrap_or(0));
        n.max(64)
    }

    /// The creation attributes of each QP on `cq` (and `srq`), asking for `inline` bytes.
    fn init<'a>(&self, cq: &'a Cq, srq: Option<&'a Srq>, inline: u32) -> QpInit<'a> {
        let init = QpInit::new(self.qp_type, cq)
            .max_send_wr(self.sq_depth)
            .max_recv_wr(self.rq_depth)
            .max_inline_data(inline);
        match srq {
            Some(s) => init.srq(s),
            None => init,
        }
    }
}

/// One end: a PD, a CQ, one or more QPs (Reset), maybe an SRQ, and a registered buffer.
pub struct Resources {
    /// The QPs, in creation order (the data path through `Deref`).
    pub qps: Vec<Qp>,
    /// The CQ every QP (and the SRQ) completes on.
    pub cq: Cq,
    /// The shared receive queue, if configured.
    pub srq: Option<Srq>,
    /// The registered buffer.
    pub mr: Mr,
    /// Protection domain.
    pub pd: Pd,
}

impl Resources {
    /// Create everything on `ctx`.
    pub fn new(ctx: &Context, cfg: &ResourcesCfg) -> Result<Resources> {
        Self::build(ctx, cfg, false)
    }

    /// [`Resources::new`], or with `timestamps` on a CQ created with completion timestamps
    /// (`Context::create_cq_with_timestamps`; poll it with `poll_timestamped`). Timestamps
    /// and `cfg.events` are not offered together (the blocking poll reads no timestamps).
    fn build(ctx: &Context, cfg: &ResourcesCfg, timestamps: bool) -> Result<Resources> {
        let pd = ctx.alloc_pd()?;
        let cq = if timestamps {
            if cfg.events {
                return Err(Error::Usage(
                    "completion timestamps and -e (events) are not offered together".into(),
                ));
            }
            ctx.create_cq_with_timestamps(&mlx5_ctx::CqInit {
                attr: mlx5_hw::CqInitAttr {
                    cqe: cfg.cqe(),
                    ..mlx5_hw::CqInitAttr::default()
                },
            })?
        } else if cfg.events {
            // One channel per CQ: the wait in `path::Direct::poll` consumes its events.
            ctx.create_cq_on(cfg.cqe(), &ctx.create_comp_channel()?)?
        } else {
            ctx.create_cq(cfg.cqe())?
        };
        let srq = match cfg.srq {
            Some(n) => Some(pd.create_srq(n, 1)?),
            None => None,
        };
        let mut qps = Vec::new();
        for _ in 0..cfg.qps.max(1) {
            qps.push(pd.create_qp(&cfg.init(&cq, srq.as_ref(), cfg.inline))?);
        }
        let mr = pd.alloc_mr(cfg.buf_len)?;
        Ok(Resources {
            qps,
            cq,
            srq,
            mr,
            pd,
        })
    }

    /// [`Resources::new`] asking for the inline size of `req` (`cfg.inline` is replaced by it),
    /// and the inline size the run can use ([`InlineRequest::settle`]): an explicit `-I` the
    /// device does not grant is refused with the largest size it does grant.
    pub fn with_inline(
        ctx: &Context,
        cfg: &ResourcesCfg,
        req: InlineRequest,
    ) -> Result<(Resources, u32)> {
        Self::with_inline_on(ctx, cfg, req, false)
    }

    /// [`Resources::with_inline`] on a CQ with completion timestamps (`lat --timestamps`).
    pub fn with_inline_timestamped(
        ctx: &Context,
        cfg: &ResourcesCfg,
        req: InlineRequest,
    ) -> Result<(Resources, u32)> {
        Self::with_inline_on(ctx, cfg, req, true)
    }

    fn with_inline_on(
        ctx: &Context,
        cfg: &ResourcesCfg,
        req: InlineRequest,
        timestamps: bool,
    ) -> Result<(Resources, u32)> {
        let cfg = ResourcesCfg {
            inline: req.bytes,
            ..*cfg
        };
        match Resources::build(ctx, &cfg, timestamps) {
            Ok(r) => {
                let granted = r.qps.iter().map(|q| q.max_inline_data()).min().unwrap_or(0);
                let inline = req.settle(granted, ctx.name())?;
                Ok((r, inline))
            }
            Err(e) if req.explicit => Err(refuse_inline(e, ctx, &cfg, req.bytes)),
            Err(e) => Err(e),
        }
    }

    /// Ring every QP's doorbells in `mode` (`--doorbell`); a BlueFlame mode on a QP without
    /// BlueFlame registers is refused with the data path's reason.
    pub fn set_doorbell_mode(&mut self, mode: DoorbellMode) -> Result<()> {
        for qp in &mut self.qps {
            let name = qp.context().name().to_string();
            let qpn = qp.qpn();
            qp.set_doorbell_mode(mode).map_err(|e| {
                Error::Usage(format!(
                    "--doorbell {}: QP {qpn:#08x} on {name}: {e}; use --doorbell db, or leave \
                     --doorbell out",
                    DoorbellArg::of(mode).map_or("other", DoorbellArg::name),
                ))
            })?;
        }
        Ok(())
    }

    /// The doorbell mode of the QPs (the first one's; [`Resources::set_doorbell_mode`] sets
    /// them all alike).
    pub fn doorbell_mode(&self) -> Option<DoorbellMode> {
        self.qps.first().map(|q| q.doorbell_mode())
    }

    /// How many QPs ring in a mode other than the first QP's: those on BlueFlame registers
    /// shared with other QPs take the 8-byte doorbell (`mlx5_hw::BfLayout::shared`).
    pub fn other_doorbell_modes(&self) -> usize {
        let first = self.doorbell_mode();
        self.qps
            .iter()
            .filter(|q| Some(q.doorbell_mode()) != first)
            .count()
    }

    /// The control path's name for QP `i`.
    pub fn qp_ref(&self, i: usize) -> QpRef {
        qp_ref(&self.qps[i])
    }

    /// The device this end is on.
    pub fn context(&self) -> &Context {
        self.pd.context()
    }

    /// What to announce to the peer: the whole buffer.
    pub fn remote_buffer(&self) -> RemoteBuffer {
        remote_buffer(&self.mr)
    }

    /// This end as the control path sees it: every QP, with `params` announcing the whole
    /// buffer.
    pub fn end(&self, params: &ConnectParams) -> End {
        let qps = (0..self.qps.len()).map(|q| self.qp_ref(q)).collect();
        End::new(self.context(), qps, params, self.remote_buffer())
    }

    /// The QPs and the CQ as the links of their connect, posting `recv` on each QP when it
    /// reaches Init; beside them the buffer, for the data path the run builds after. With an
    /// SRQ, `recv` is posted to it now instead: each QP's share (`depth / qps`, at least one),
    /// as perftest's `ctx_set_recv_wqes` posts `rx_depth / num_of_qps` per QP into its SRQ.
    pub fn links(&mut self, recv: Option<Receives>) -> Result<(DirectLinks<'_>, &Mr)> {
        let Resources {
            qps, cq, mr, srq, ..
        } = self;
        let recv = match (srq.as_mut(), recv) {
            (Some(s), Some(r)) => {
                for i in 0..u64::from(srq_receives(r.depth, qps.len())) {
                    s.post_recv(i, std::slice::from_ref(&r.sge))?;
                }
                None
            }
            (_, r) => r,
        };
        Ok((
            DirectLinks {
                qps,
                cq,
                recv,
                srq: srq.as_mut(),
            },
            mr,
        ))
    }
}

/// The receives an SRQ of `depth` WRs shared by `qps` QPs holds at the start: each QP's share
/// `depth / qps` (perftest `size_per_qp`), at least one.
pub fn srq_receives(depth: u32, qps: usize) -> u32 {
    let qps = u32::try_from(qps.max(1)).unwrap_or(u32::MAX);
    (depth / qps).max(1).saturating_mul(qps).min(depth.max(1))
}

/// What to announce to a peer for `mr`: the whole region.
pub fn remote_buffer(mr: &Mr) -> RemoteBuffer {
    RemoteBuffer {
        addr: mr.addr(),
        rkey: mr.rkey(),
        len: mr.len() as u64,
    }
}

/// The error for an explicit `-I asked` after creating an end failed with `cause`: when a QP of
/// the same shape with less inline data can be created, [`inline::refused`] naming the largest
/// size the device grants ([`inline::largest_granted`], creating and dropping QPs); else
/// `cause`.
fn refuse_inline(cause: Error, ctx: &Context, cfg: &ResourcesCfg, asked: u32) -> Error {
    let probe = || -> Result<Option<u32>> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cfg.cqe())?;
        // No SRQ: the receive queue does not change the send WQE's size.
        Ok(inline::largest_granted(asked, |n| {
            let qp = pd.create_qp(&cfg.init(&cq, None, n)).ok()?;
            Some(qp.max_inline_data())
        }))
    };
    match probe() {
        Ok(Some(largest)) => inline::refused(asked, largest, ctx.name()),
        Ok(None) => cause,
        Err(e) => {
            tracing::debug!(%e, "could not look for the largest inline size");
            cause
        }
    }
}

/// One end on a verbs device, for the libibverbs data path (`--path verbs`): a PD, a CQ, one
/// or more RC/UC/UD QPs (Reset) created with `create_*_verbs`, which work on any provider
/// (Soft-RoCE included), and a registered buffer (an owning [`Mr`] of a context over the same
/// device). Posting and polling go through `mlx5_hw::verbs::baseline` handles claimed from it
/// ([`crate::path::Verbs::claim`]). The QPs and the CQ are destroyed when this is dropped, before
/// the PD goes.
pub struct VerbsResources {
    /// The QPs, in creation order, with the capabilities the device granted.
    pub qps: Vec<mlx5_hw::verbs::VerbsQp>,
    /// Their transport.
    pub qp_type: QpType,
    /// The CQ every QP completes on.
    pub cq: mlx5_hw::verbs::VerbsCq,
    /// The registered buffer.
    pub mr: Mr,
    /// Protection domain.
    pub pd: Pd,
    /// The device, as the verbs backend.
    pub verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
    /// `-e`: the completion channel the CQ reports to (`ibv_comp_channel`).
    pub channel: Option<mlx5_hw::ChannelId>,
    /// `--use-srq`: the shared receive queue every QP receives through (`ibv_create_srq`),
    /// posted to with `ibv_post_srq_recv` ([`crate::path::Verbs`]).
    pub srq: Option<mlx5_hw::SrqId>,
}

impl Drop for VerbsResources {
    fn drop(&mut self) {
        use mlx5_hw::Device;
        for q in &self.qps {
            if let Err(e) = self.verbs.destroy_qp(q.id) {
                tracing::warn!(qpn = q.qpn, error = %e, "destroy_qp failed");
            }
        }
        // The SRQ after the QPs that use it, before the CQ (libibverbs refuses to destroy an
        // SRQ a QP still uses: EBUSY).
        if let Some(srq) = self.srq {
            if let Err(e) = self.verbs.destroy_srq(srq) {
                tracing::warn!(srq = srq.0, error = %e, "destroy_srq failed");
            }
        }
        if let Err(e) = self.verbs.destroy_cq(self.cq.id) {
            tracing::warn!(error = %e, "destroy_cq failed");
        }
        // Every event was acknowledged as it was taken (`path::Verbs::poll`).
        if let Some(ch) = self.channel {
            if let Err(e) = self.verbs.destroy_comp_channel(ch) {
                tracing::warn!(error = %e, "destroy_comp_channel failed");
            }
        }
    }
}

impl VerbsResources {
    /// Create everything on `verbs` (whose context is `ctx`); with `cfg.srq` an SRQ of that
    /// many WRs (`ibv_create_srq`) that every QP receives through.
    pub fn new(
        ctx: &Context,
        verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &ResourcesCfg,
    ) -> Result<Self> {
        Self::build(ctx, verbs, cfg, false)
    }

    /// [`VerbsResources::new`], or with `timestamps` on a CQ created with completion
    /// timestamps (`VerbsDevice::create_cq_verbs_with_timestamps`; not with `cfg.events`).
    fn build(
        ctx: &Context,
        verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &ResourcesCfg,
        timestamps: bool,
    ) -> Result<Self> {
        use mlx5_hw::Device;
        use mlx5_hw::{CqInitAttr, QpCap, QpInitAttr, SrqInitAttr};
        if timestamps && cfg.events {
            return Err(Error::Usage(
                "completion timestamps and -e (events) are not offered together".into(),
            ));
        }
        let pd = ctx.alloc_pd()?;
        let channel = if cfg.events {
            Some(verbs.create_comp_channel()?)
        } else {
            None
        };
        let attr = CqInitAttr {
            cqe: cfg.cqe(),
            channel,
            ..CqInitAttr::default()
        };
        let created = if timestamps {
            verbs.create_cq_verbs_with_timestamps(&attr)
        } else {
            verbs.create_cq_verbs(&attr)
        };
        let cq = match created {
            Ok(cq) => cq,
            Err(e) => {
                if let Some(ch) = channel {
                    let _ = verbs.destroy_comp_channel(ch);
                }
                return Err(e.into());
            }
        };
        let mut r = VerbsResources {
            qps: Vec::new(),
            qp_type: cfg.qp_type,
            cq,
            mr: pd.alloc_mr(cfg.buf_len)?,
            pd,
            verbs,
            channel,
            srq: None,
        };
        if let Some(n) = cfg.srq {
            // On failure `r` is dropped and destroys what was made.
            let s = r.verbs.create_srq_verbs(
                r.pd.id(),
                &SrqInitAttr {
                    max_wr: n,
                    max_sge: 1,
                    srq_limit: 0,
                },
            )?;
            r.srq = Some(s.id);
        }
        // A QP on an SRQ has no receive queue of its own (libibverbs `ibv_create_qp`: the
        // receive capabilities are ignored with `srq` set).
        let (rq, rq_sge) = if r.srq.is_some() {
            (0, 0)
        } else {
            (cfg.rq_depth, 1)
        };
        for _ in 0..cfg.qps.max(1) {
            let attr = QpInitAttr {
                qp_type: cfg.qp_type,
                send_cq: r.cq.id,
                recv_cq: r.cq.id,
                srq: r.srq,
                cap: QpCap {
                    max_send_wr: cfg.sq_depth,
                    max_recv_wr: rq,
                    max_send_sge: 1,
                    max_recv_sge: rq_sge,
                    max_inline_data: cfg.inline,
                },
                sq_sig_all: false,
            };
            // On failure `r` is dropped and destroys what was made.
            let q = r.verbs.create_qp_verbs(r.pd.id(), &attr)?;
            r.qps.push(q);
        }
        Ok(r)
    }

    /// [`VerbsResources::new`] asking for the inline size of `req`, and the inline size the
    /// run can use: an explicit `-I` that `ibv_create_qp` does not grant is refused with the
    /// largest size it does grant, as [`Resources::with_inline`].
    pub fn with_inline(
        ctx: &Context,
        verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &ResourcesCfg,
        req: InlineRequest,
    ) -> Result<(Self, u32)> {
        Self::with_inline_on(ctx, verbs, cfg, req, false)
    }

    /// [`VerbsResources::with_inline`] on a CQ with completion timestamps
    /// (`lat --timestamps --path verbs`).
    pub fn with_inline_timestamped(
        ctx: &Context,
        verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &ResourcesCfg,
        req: InlineRequest,
    ) -> Result<(Self, u32)> {
        Self::with_inline_on(ctx, verbs, cfg, req, true)
    }

    fn with_inline_on(
        ctx: &Context,
        verbs: std::sync::Arc<mlx5_hw::verbs::VerbsDevice>,
        cfg: &ResourcesCfg,
        req: InlineRequest,
        timestamps: bool,
    ) -> Result<(Self, u32)> {
        let cfg = ResourcesCfg {
            inline: req.bytes,
            ..*cfg
        };
        match VerbsResources::build(ctx, verbs.clone(), &cfg, timestamps) {
            Ok(r) => {
                let inline = req.settle(r.max_inline(), ctx.name())?;
                Ok((r, inline))
            }
            Err(e) if req.explicit => {
                let largest = inline::largest_granted(req.bytes, |n| {
                    let probe = VerbsResources::new(
                        ctx,
                        verbs.clone(),
                        &ResourcesCfg {
                            inline: n,
                            qps: 1,
                            buf_len: 64,
                            ..cfg
                        },
                    )
                    .ok()?;
                    Some(probe.max_inline())
                });
                match largest {
                    Some(l) => Err(inline::refused(req.bytes, l, ctx.name())),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The control path's name for QP `i`.
    pub fn qp_ref(&self, i: usize) -> QpRef {
        let q = &self.qps[i];
        QpRef {
            id: q.id,
            qpn: q.qpn,
            qp_type: self.qp_type,
            pd: self.pd.id(),
        }
    }

    /// The inline bytes every QP was granted (the provider may round the request up).
    pub fn max_inline(&self) -> u32 {
        self.qps
            .iter()
            .map(|q| q.cap.max_inline_data)
            .min()
            .unwrap_or(0)
    }

    /// What to announce to the peer: the whole buffer.
    pub fn remote_buffer(&self) -> RemoteBuffer {
        remote_buffer(&self.mr)
    }

    /// The device this end is on.
    pub fn context(&self) -> &Context {
        self.pd.context()
    }

    /// This end as the control path sees it: every QP, with `params` announcing the whole
    /// buffer.
    pub fn end(&self, params: &ConnectParams) -> End {
        let qps = (0..self.qps.len()).map(|q| self.qp_ref(q)).collect();
        End::new(self.context(), qps, params, self.remote_buffer())
    }
}
