//! DC, the Dynamically Connected transport, on owning objects: a DC target ([`Dct`]) any peer
//! reaches by its address, number and access key ([`DcAddr`]), and a DC initiator ([`Dci`])
//! that posts to any of them, each WR naming its target ([`DcTarget`], `SendWr::dc`). A
//! process needs a few DCIs and one DCT whatever the number of its peers, where RC needs a QP
//! per peer.
//!
//! Both are created through `mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` on a verbs
//! context (`mlx5_hw::verbs`; rdma-core `mlx5dv.h` `struct mlx5dv_dc_init_attr`) and on the
//! software ConnectX alike, and taken through their state machines with the masks of the
//! project's state table (`mlx5_hw::qp_state`, its DCI and DCT columns; kernel
//! `drivers/infiniband/hw/mlx5/qp.c` `modify_dci_qp_is_ok`, `mlx5_ib_modify_dct`):
//!
//! - a DCT: Reset → Init with its remote access rights, P_Key index and port; Init → RTR with
//!   the minimal RNR NAK timer, the port's address (GID index, hop limit) and the path MTU.
//!   It gets its number at RTR and stays there until dropped.
//! - a DCI: Reset → Init with the P_Key index and port; Init → RTR with the path MTU only (no
//!   destination: each WQE names its own); RTR → RTS with the retry counts, the ACK timeout,
//!   the send PSN and the READ/atomic depth.
//!
//! A DCT's receives are its SRQ's: post them on the [`Srq`] it was created with and poll its
//! CQ with that SRQ in the table (`cq.poll(&mut (&mut none[..], std::slice::from_mut(&mut
//! srq)), ..)`); the completions carry the DCT's number as the QP number and the initiator's
//! QPN as the source.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use mlx5_hw::{
    AccessFlags, AhAttr, AttrMask, DcInit, DciStreams, Gid, GlobalRoute, Mtu, QpAttr, QpCap, QpId,
    QpInitAttr, QpInitEx, QpState, QpType,
};
use mlx5_qp::{DcDest, Resolve};

use crate::ah::Ah;
use crate::context::Context;
use crate::cq::{Cq, CqObj};
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::qp::{Qp, QpInit};
use crate::srq::{Srq, SrqObj};

/// What a peer needs to reach a DC target: its port's GID (and LID, for InfiniBand), its
/// number and its access key — the three things `mlx5dv_wr_set_dc_addr(qp, ah, dctn, key)`
/// takes (the address through an address handle). Exchange it as any endpoint address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcAddr {
    /// The GID of the target's port (RoCE: its IPv4-mapped address).
    pub gid: Gid,
    /// The LID of the target's port (0 on RoCE).
    pub lid: u16,
    /// The DCT number.
    pub dctn: u32,
    /// The DC access key.
    pub key: u64,
}

/// The minimal RNR NAK timer a DCT advertises (code 12 = 0.64 ms, perftest's and rdma-core's
/// examples' value; `ibv_modify_qp(3)`).
const DCT_MIN_RNR_TIMER: u8 = 12;

/// The port a DC QP uses, and its GID 0, LID and active MTU.
fn port_of(ctx: &Context) -> Result<(Gid, u16, Mtu)> {
    let dev = ctx.device();
    let port = dev.query_port(1)?;
    Ok((dev.query_gid(1, 0)?, port.lid, port.active_mtu))
}

/// An address of this port's GID 0 (what a DCT's RTR and a DCI's address handles carry).
fn route(gid: Gid, lid: u16) -> AhAttr {
    AhAttr {
        dlid: lid,
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: gid,
            hop_limit: 64,
            ..GlobalRoute::default()
        }),
        ..AhAttr::default()
    }
}

struct DctObj {
    id: QpId,
    dctn: u32,
    key: u64,
    gid: Gid,
    lid: u16,
    // The device QP is destroyed before these are released.
    pd: Pd,
    cq: Arc<CqObj>,
    _srq: Arc<SrqObj>,
    /// The SRQ's number, which the DCT's receive CQEs still queued at its destroy give back.
    srqn: u32,
}

impl Drop for DctObj {
    fn drop(&mut self) {
        if let Err(e) = self.pd.context().device().destroy_qp(self.id) {
            tracing::warn!(target: "mlx5_ctx", qp = self.id.0, error = %e, "destroy_qp (DCT) failed");
            return;
        }
        // As a QP's (`crate::qp`): the CQ's polls settle what it still holds of the DCT's
        // (a DCT that never reached RTR has no number and no CQE).
        if self.dctn != 0 {
            self.cq.dct_destroyed(self.dctn, self.srqn);
        }
    }
}

/// A DC target, in RTR: receives from any DC initiator that names its number and key, into
/// its SRQ; remote writes, reads and atomics on the PD's memory as its access rights allow.
pub struct Dct {
    obj: Arc<DctObj>,
}

impl fmt::Debug for Dct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dct")
            .field("dctn", &format_args!("{:#x}", self.obj.dctn))
            .finish()
    }
}

impl Pd {
    /// Create a DC target whose receives complete on `cq` from `srq`, reached with
    /// `access_key`, and move it to RTR with every remote right (READ, WRITE, atomics):
    /// [`Pd::create_dct_with`] with them. Its receives are polled with a table that holds
    /// `srq` (no table holds a DCT): `cq` knows the target's number and finds the SRQ by it,
    /// whatever the CQE carries in `srqn_uidx` (`mlx5_qp::DcTargets`).
    pub fn create_dct(&self, cq: &Cq, srq: &Srq, access_key: u64) -> Result<Dct> {
        self.create_dct_with(cq, srq, access_key, crate::mr::all_access())
    }

    /// [`Pd::create_dct`] with the remote access rights `access` (`IBV_ACCESS_REMOTE_*`).
    pub fn create_dct_with(
        &self,
        cq: &Cq,
        srq: &Srq,
        access_key: u64,
        access: AccessFlags,
    ) -> Result<Dct> {
        let ctx = self.context();
        ctx.check_same(cq.context(), "the CQ")?;
        ctx.check_same(srq.pd().context(), "the SRQ")?;
        let dev = ctx.device();
        let info = dev.create_qp_ex(
            self.id(),
            &QpInitAttr {
                qp_type: QpType::Dct,
                send_cq: cq.id(),
                recv_cq: cq.id(),
                srq: Some(srq.id()),
                cap: QpCap::default(),
                sq_sig_all: false,
            },
            &QpInitEx {
                dc: Some(DcInit::Target { access_key }),
                ..QpInitEx::default()
            },
        )?;
        let (gid, lid, mtu) = port_of(ctx)?;
        let mut obj = DctObj {
            id: info.id,
            dctn: 0,
            key: access_key,
            gid,
            lid,
            pd: self.clone(),
            cq: cq.obj().clone(),
            _srq: srq.obj().clone(),
            srqn: srq.srqn(),
        };
        // On failure `obj` is dropped and destroys the DCT.
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: access,
            ..QpAttr::default()
        };
        dev.modify_qp(
            info.id,
            &a,
            AttrMask::STATE | AttrMask::ACCESS_FLAGS | AttrMask::PKEY_INDEX | AttrMask::PORT,
        )?;
        a.qp_state = QpState::Rtr;
        a.min_rnr_timer = DCT_MIN_RNR_TIMER;
        a.ah_attr = route(gid, lid);
        a.path_mtu = mtu;
        dev.modify_qp(
            info.id,
            &a,
            AttrMask::STATE | AttrMask::MIN_RNR_TIMER | AttrMask::AV | AttrMask::PATH_MTU,
        )?;
        obj.dctn = dev.dct_number(info.id)?;
        // Its receives name it, which no table holds: the CQ completes them on the SRQ.
        obj.cq.dct_created(obj.dctn, obj.srqn);
        tracing::info!(target: "mlx5_ctx", dctn = obj.dctn, "DCT in RTR");
        Ok(Dct { obj: Arc::new(obj) })
    }
}

impl Dct {
    /// The DCT number initiators name.
    pub fn number(&self) -> u32 {
        self.obj.dctn
    }
    /// The DC access key.
    pub fn key(&self) -> u64 {
        self.obj.key
    }
    /// Everything a peer needs to reach this target.
    pub fn addr(&self) -> DcAddr {
        DcAddr {
            gid: self.obj.gid,
            lid: self.obj.lid,
            dctn: self.obj.dctn,
            key: self.obj.key,
        }
    }
    /// The device handle.
    pub fn id(&self) -> QpId {
        self.obj.id
    }
    /// The context the target belongs to.
    pub fn context(&self) -> &Context {
        self.obj.pd.context()
    }
    /// The state the device reports (RTR, always, for a DCT that exists).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.context().device().query_qp(self.obj.id)?.qp_state)
    }
}

/// What a DC initiator is created with: its CQ, the size of its send queue, its inline
/// limit, its streams.
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until it is passed on"]
pub struct DciInit<'a> {
    /// CQ of the send completions.
    pub cq: &'a Cq,
    /// Send WRs the send queue must hold.
    pub max_send_wr: u32,
    /// Gather entries per send WR.
    pub max_send_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
    /// Concurrent streams (`mlx5dv_dci_streams`), `None` for one.
    pub streams: Option<DciStreams>,
    /// Every send WR generates a completion.
    pub sq_sig_all: bool,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout) of its requests.
    pub timeout: u8,
    /// Transport retries before `IBV_WC_RETRY_EXC_ERR`.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// Path MTU of its requests, `None` for the port's active MTU (a larger one is lowered to
    /// it).
    pub path_mtu: Option<Mtu>,
}

impl<'a> DciInit<'a> {
    /// A DCI on `cq` with room for 128 send WRs of one gather entry and 64 bytes of inline
    /// data, one stream, timeout 14 (67 ms), 7 retries, RNR retries forever.
    pub fn new(cq: &'a Cq) -> DciInit<'a> {
        DciInit {
            cq,
            max_send_wr: 128,
            max_send_sge: 1,
            max_inline_data: 64,
            streams: None,
            sq_sig_all: false,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            path_mtu: None,
        }
    }
}

/// A DC initiator in RTS. Dereferences to the data path ([`mlx5_qp::Qp`]): post with
/// `SendWr::dc(&target)` naming a [`DcTarget`] ([`Dci::target`]).
pub struct Dci {
    qp: Qp,
    streams: Option<DciStreams>,
    init: (u8, u8, u8),
    path_mtu: Option<Mtu>,
}

impl fmt::Debug for Dci {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dci")
            .field("qpn", &format_args!("{:#x}", self.qp.qpn()))
            .field("state", &self.qp.state())
            .finish()
    }
}

impl Deref for Dci {
    type Target = mlx5_qp::Qp;
    fn deref(&self) -> &mlx5_qp::Qp {
        &self.qp
    }
}

impl DerefMut for Dci {
    fn deref_mut(&mut self) -> &mut mlx5_qp::Qp {
        &mut self.qp
    }
}

/// Poll a CQ with one DCI as the table (`cq.poll(&mut dci, ..)`).
impl Resolve for Dci {
    #[inline(always)]
    fn qp(&mut self, qpn: u32) -> Option<&mut mlx5_qp::Qp> {
        Resolve::qp(&mut self.qp, qpn)
    }
    fn for_each_qp(&self, f: &mut dyn FnMut(&mlx5_qp::Qp)) {
        self.qp.for_each_qp(f)
    }
}

impl std::borrow::Borrow<mlx5_qp::Qp> for Dci {
    fn borrow(&self) -> &mlx5_qp::Qp {
        &self.qp
    }
}

impl std::borrow::BorrowMut<mlx5_qp::Qp> for Dci {
    fn borrow_mut(&mut self) -> &mut mlx5_qp::Qp {
        self.qp.data_path()
    }
}

/// The PSN every DCI sends from (each connection starts where the last ended; the target
/// learns it from the connect).
const DCI_PSN: u32 = 0;

impl Pd {
    /// Create a DC initiator as `init` asks and move it to RTS.
    pub fn create_dci(&self, init: &DciInit<'_>) -> Result<Dci> {
        let mut q = QpInit::new(QpType::Dci, init.cq)
            .max_send_wr(init.max_send_wr)
            .max_send_sge(init.max_send_sge)
            .max_inline_data(init.max_inline_data)
            .max_recv_wr(0)
            .max_recv_sge(0);
        if init.sq_sig_all {
            q = q.sig_all();
        }
        let qp = Qp::new_ex(
            self,
            &q,
            &QpInitEx {
                dc: Some(DcInit::Initiator {
                    streams: init.streams,
                }),
                ..QpInitEx::default()
            },
        )?;
        let mut dci = Dci {
            qp,
            streams: init.streams,
            init: (init.timeout, init.retry_cnt, init.rnr_retry),
            path_mtu: init.path_mtu,
        };
        dci.activate()?;
        Ok(dci)
    }
}

impl Dci {
    /// Reset → Init → RTR → RTS with the DCI masks of the state table, the data path told each
    /// state reached.
    fn activate(&mut self) -> Result<()> {
        let ctx = self.qp.context().clone();
        let dev = ctx.device();
        let id = self.qp.id();
        let (_, _, active) = port_of(&ctx)?;
        let mtu = self.path_mtu.map_or(active, |m| m.min(active));
        let rd = dev.query_device()?.max_qp_init_rd_atom.clamp(1, 16) as u8;
        let (timeout, retry_cnt, rnr_retry) = self.init;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            ..QpAttr::default()
        };
        let steps = [
            (
                QpState::Init,
                AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT,
            ),
            (QpState::Rtr, AttrMask::STATE | AttrMask::PATH_MTU),
            (
                QpState::Rts,
                AttrMask::STATE
                    | AttrMask::TIMEOUT
                    | AttrMask::RETRY_CNT
                    | AttrMask::RNR_RETRY
                    | AttrMask::MAX_QP_RD_ATOMIC
                    | AttrMask::SQ_PSN,
            ),
        ];
        a.path_mtu = mtu;
        a.timeout = timeout;
        a.retry_cnt = retry_cnt;
        a.rnr_retry = rnr_retry;
        a.max_rd_atomic = rd;
        a.sq_psn = DCI_PSN;
        for (state, mask) in steps {
            a.qp_state = state;
            dev.modify_qp(id, &a, mask)?;
            self.qp.data_path().set_state(state);
            tracing::info!(target: "mlx5_ctx", dci = self.qp.qpn(), %state, "DCI moved");
        }
        Ok(())
    }

    /// Bring a DCI that failed (an error completion moved it to Error) back to RTS: Reset,
    /// then Init → RTR → RTS again. WRs still outstanding are forgotten: poll the error and
    /// flush completions first (`mlx5_qp::Qp::flush_outstanding` reports what the data path
    /// still holds).
    pub fn recover(&mut self) -> Result<()> {
        let id = self.qp.id();
        let dev = self.qp.context().device();
        dev.modify_qp(
            id,
            &QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        )?;
        self.qp.data_path().set_state(QpState::Reset);
        self.activate()
    }

    /// Where WRs to the target `to` go: an address handle to its port and the DC
    /// destination built on it (`mlx5dv_wr_set_dc_addr(qp, ah, to.dctn, to.key)`); build it
    /// once per target and name it in every WR (`SendWr::dc`).
    pub fn target(&self, to: &DcAddr) -> Result<DcTarget> {
        let ah = self.qp.pd().create_ah(&route(to.gid, to.lid))?;
        let dest = DcDest::new(ah.av(), to.dctn, to.key);
        Ok(DcTarget { dest, _ah: ah })
    }

    /// [`Dci::target`] on DCI stream `stream` (`mlx5dv_wr_set_dc_addr_stream`): refused on a
    /// DCI created without streams, and for a stream beyond `2^log_num_concurent`.
    pub fn target_on_stream(&self, to: &DcAddr, stream: u16) -> Result<DcTarget> {
        match self.streams {
            Some(s) if u32::from(stream) < (1u32 << s.log_num_concurent.min(16)) => {
                let mut t = self.target(to)?;
                t.dest = t.dest.stream(stream);
                Ok(t)
            }
            Some(s) => Err(Error::Device(mlx5_hw::Error::InvalidArgument(format!(
                "stream {stream} is beyond the DCI's {} concurrent streams",
                1u32 << s.log_num_concurent.min(16)
            )))),
            None => Err(Error::Device(mlx5_hw::Error::InvalidArgument(
                "this DCI was created without streams (DciInit::streams)".into(),
            ))),
        }
    }

    /// The device handle.
    pub fn id(&self) -> QpId {
        self.qp.id()
    }

    /// The state the data path believes the DCI is in (an error completion moves it to Error).
    pub fn state(&self) -> QpState {
        self.qp.state()
    }

    /// The DCI's attributes as the device reports them.
    pub fn query(&self) -> Result<QpAttr> {
        self.qp.query()
    }

    /// The context the DCI belongs to.
    pub fn context(&self) -> &Context {
        self.qp.context()
    }
}

/// A DC target as a DCI's WRs name it ([`Dci::target`]): the DC destination (dereferences to
/// [`DcDest`]) and the address handle it was built from, kept alive with it.
pub struct DcTarget {
    dest: DcDest,
    _ah: Ah,
}

impl fmt::Debug for DcTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DcTarget")
            .field("dctn", &format_args!("{:#x}", self.dest.dctn()))
            .field("stream", &self.dest.stream_id())
            .finish()
    }
}

impl Deref for DcTarget {
    type Target = DcDest;
    fn deref(&self) -> &DcDest {
        &self.dest
    }
}
