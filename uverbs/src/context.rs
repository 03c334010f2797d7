//! A command descriptor and its user context: the objects the program made through it, by
//! handle, as the kernel's uverbs keeps them per file (`ib_uverbs_file`'s object table: one
//! handle space for every kind, handles from 0).

use std::collections::{BTreeMap, VecDeque};

use mlx5_hw::{AhId, MrId, PdId, QpType, XrcdId};

use crate::abi::AsyncEventDesc;
use crate::uar::Uars;

/// One open `/dev/infiniband/uverbs0`.
#[derive(Debug)]
pub struct Context {
    /// The descriptor (a memfd).
    pub fd: i32,
    /// The user context, once `GET_CONTEXT` made it.
    pub u: Option<Ucontext>,
}

/// A user context (`struct ib_ucontext`).
#[derive(Debug)]
pub struct Ucontext {
    /// UAR pages and registers.
    pub uars: Uars,
    /// The device's number for the page CQs arm on (UAR page 0).
    pub arm_page: u32,
    /// 0 or 1 ([`mlx5_sim::uidx`]).
    pub cqe_version: u8,
    /// The asynchronous event descriptor, while the program has it open.
    pub async_fd: Option<i32>,
    /// Objects by handle.
    pub objects: BTreeMap<u32, Object>,
    next_handle: u32,
}

impl Ucontext {
    /// A context with no objects.
    pub fn new(uars: Uars, arm_page: u32, cqe_version: u8, async_fd: i32) -> Ucontext {
        Ucontext {
            uars,
            arm_page,
            cqe_version,
            async_fd: Some(async_fd),
            objects: BTreeMap::new(),
            next_handle: 0,
        }
    }

    /// Store an object; its handle.
    pub fn insert(&mut self, o: Object) -> u32 {
        while self.objects.contains_key(&self.next_handle) {
            self.next_handle = self.next_handle.wrapping_add(1);
        }
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1);
        self.objects.insert(h, o);
        h
    }

    /// The object `h`, if it is of the kind `pick` selects; EINVAL otherwise (the kernel's
    /// `uobj_get_obj_read` on a wrong or stale handle).
    pub fn get<T>(&self, h: u32, pick: impl Fn(&Object) -> Option<&T>) -> Result<&T, i32> {
        self.objects.get(&h).and_then(pick).ok_or(libc::EINVAL)
    }

    /// As [`get`](Self::get), mutable.
    pub fn get_mut<T>(
        &mut self,
        h: u32,
        pick: impl Fn(&mut Object) -> Option<&mut T>,
    ) -> Result<&mut T, i32> {
        self.objects.get_mut(&h).and_then(pick).ok_or(libc::EINVAL)
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    /// The device's PD.
    pub id: PdId,
}

/// A memory region.
#[derive(Debug)]
pub struct Mr {
    /// The device's MR.
    pub id: MrId,
    /// The PD's handle.
    pub pd: u32,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// CQN (the device's id).
    pub cqn: u32,
    /// `user_handle` (the `ibv_cq` pointer), echoed in events.
    pub user_handle: u64,
    /// The completion channel's descriptor.
    pub channel_fd: Option<i32>,
    /// Completion events read from the channel.
    pub comp_reported: u32,
    /// Asynchronous events read.
    pub async_reported: u32,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    /// QPN (the device's id).
    pub qpn: u32,
    /// `user_handle` (the `ibv_qp` pointer).
    pub user_handle: u64,
    /// Its type.
    pub qp_type: QpType,
    /// Handles it holds: PD, send CQ, receive CQ, SRQ, XRC domain.
    pub pd: Option<u32>,
    /// Send CQ handle.
    pub send_cq: Option<u32>,
    /// Receive CQ handle.
    pub recv_cq: Option<u32>,
    /// SRQ handle.
    pub srq: Option<u32>,
    /// XRC domain handle (XRC target).
    pub xrcd: Option<u32>,
    /// The register it rings (kernel numbering), freed with it.
    pub bfreg: Option<u32>,
    /// The capabilities granted at creation (returned by `QUERY_QP`).
    pub cap: mlx5_hw::QpCap,
    /// Created with `sq_sig_all`.
    pub sq_sig_all: bool,
    /// Asynchronous events read.
    pub events_reported: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// SRQN (the device's id).
    pub srqn: u32,
    /// `user_handle` (the `ibv_srq` pointer).
    pub user_handle: u64,
    /// Its PD handle.
    pub pd: u32,
    /// XRC SRQ: its domain and CQ handles.
    pub xrc: Option<(u32, u32)>,
    /// `max_wr` and `max_sge` granted.
    pub max_wr: u32,
    /// Scatter entries.
    pub max_sge: u32,
    /// The armed limit.
    pub limit: u32,
    /// Asynchronous events read.
    pub events_reported: u32,
}

/// An address handle.
#[derive(Debug)]
pub struct Ah {
    /// The device's AH.
    pub id: AhId,
    /// Its PD handle.
    pub pd: u32,
}

/// An XRC domain.
#[derive(Debug)]
pub struct Xrcd {
    /// The device's domain.
    pub id: XrcdId,
    /// The inode it was opened by (`fd` of `OPEN_XRCD`), if any.
    pub inode: Option<(u64, u64)>,
}

/// Any object.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Object {
    Pd(Pd),
    Mr(Mr),
    Cq(Cq),
    Qp(Qp),
    Srq(Srq),
    Ah(Ah),
    Xrcd(Xrcd),
}

macro_rules! picks {
    ($($name:ident, $name_mut:ident => $variant:ident: $t:ty;)*) => {
        $(
            #[allow(dead_code)]
            /// The object as this kind.
            pub fn $name(o: &Object) -> Option<&$t> {
                match o { Object::$variant(x) => Some(x), _ => None }
            }
            /// The object as this kind, mutable.
            #[allow(dead_code)]
            pub fn $name_mut(o: &mut Object) -> Option<&mut $t> {
                match o { Object::$variant(x) => Some(x), _ => None }
            }
        )*
    };
}

picks! {
    pd, pd_mut => Pd: Pd;
    mr, mr_mut => Mr: Mr;
    cq, cq_mut => Cq: Cq;
    qp, qp_mut => Qp: Qp;
    srq, srq_mut => Srq: Srq;
    ah, ah_mut => Ah: Ah;
    xrcd, xrcd_mut => Xrcd: Xrcd;
}

/// What an object holds a reference to, for the kernel's "in use" refusals (EBUSY).
pub fn uses(o: &Object, h: u32) -> bool {
    match o {
        Object::Mr(m) => m.pd == h,
        Object::Qp(q) => [q.pd, q.send_cq, q.recv_cq, q.srq, q.xrcd].contains(&Some(h)),
        Object::Srq(s) => s.pd == h || s.xrc.is_some_and(|(x, c)| x == h || c == h),
        Object::Ah(a) => a.pd == h,
        _ => false,
    }
}

/// An asynchronous event waiting to be read, with the object it counts for.
#[derive(Clone, Copy, Debug)]
pub struct PendingAsync {
    /// The descriptor to hand out.
    pub desc: AsyncEventDesc,
    /// The object's handle (`None` for a port event).
    pub handle: Option<u32>,
}

/// A context's queue of asynchronous events.
pub type AsyncQueue = VecDeque<PendingAsync>;
