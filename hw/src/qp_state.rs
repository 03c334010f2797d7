//! The QP state machine: which `ibv_modify_qp` calls are legal.
//!
//! One table, in one place, used by every backend: the verbs backend validates each modify
//! before `ibv_modify_qp`, and the software ConnectX refuses exactly what the kernel refuses.
//!
//! The table reproduces, as data, the facts of the Linux kernel's `qp_state_table` and
//! `ib_modify_qp_is_ok` (drivers/infiniband/core/verbs.c) for RC, UC and UD QPs: for each of the
//! 7×7 state pairs, whether the transition exists, and per QP type the attribute bits it
//! requires and the ones it accepts. (The kernel is GPL; this is an independent encoding of the
//! same facts, not a copy of its code.)
//!
//! Rules beyond the table, as the kernel applies them:
//!
//! - `IBV_QP_STATE` is always accepted; without it the modify targets the current state
//!   (`mlx5_ib_modify_qp`: `new_state = mask & IB_QP_STATE ? attr->qp_state : cur_state`).
//! - `IBV_QP_CUR_STATE` is accepted only when the current state is RTR, RTS, SQD or SQE *and*
//!   the transition lists it (RTR→RTS, RTS→RTS, SQD→RTS and, for UC/UD, SQE→RTS). The kernel
//!   then *believes* the caller's `cur_qp_state`; [`validate`] instead checks it against the
//!   state the QP is actually in and refuses a mismatch ([`ModifyError::CurrentStateMismatch`]).
//! - Reset→Reset and Error→Error are legal no-ops; X→Reset and X→Error are legal with only
//!   `IBV_QP_STATE` from every state except that **Reset→Error is not in the kernel's table**
//!   (a fresh QP must go through Init first).
//! - `IBV_QP_RATE_LIMIT` is optional for RC at Init→RTR, RTR→RTS and RTS→RTS (kernel commit
//!   "IB/core: Extend rate limit support for RC QPs", 2026). Newer rdma-next trees remove the bit
//!   from the core table and let each driver decide ("IB/core: Delegate IB_QP_RATE_LIMIT
//!   validation to drivers"); see [`RATE_LIMIT_RC`].
//!
//! Value ranges ([`check_values`]) come from the packet formats (IBTA vol. 1 §9.2 BTH: 24-bit
//! PSN and QPN) and the verbs definitions (`man ibv_modify_qp`); device-dependent limits (number
//! of ports, P_Key and GID table sizes, read/atomic depth, port MTU) are in [`DeviceLimits`].

#![deny(missing_docs)]

use crate::attr::{AttrMask, Mtu, QpAttr, QpState, QpType};
use crate::device::{DeviceAttr, PortAttr};
use crate::error::ModifyError;

/// What one transition requires and accepts for one QP type.
///
/// `IBV_QP_STATE` is implied: it is in neither mask and always allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Rule {
    /// Bits that must be in the mask.
    pub required: AttrMask,
    /// Bits that may be in the mask.
    pub optional: AttrMask,
}

impl Rule {
    /// Every bit a modify may carry for this transition (`required | optional | STATE`).
    pub const fn allowed(&self) -> AttrMask {
        AttrMask::from_bits_retain(
            self.required.bits() | self.optional.bits() | AttrMask::STATE.bits(),
        )
    }
}

/// One cell of the table: the rule for each QP type, or `None` if the transition is illegal.
#[derive(Clone, Copy, Debug)]
struct Cell {
    rc: Rule,
    uc: Rule,
    ud: Rule,
}

impl Cell {
    const fn get(&self, t: QpType) -> Rule {
        match t {
            QpType::Rc => self.rc,
            QpType::Uc => self.uc,
            QpType::Ud => self.ud,
        }
    }
}

/// `IBV_QP_RATE_LIMIT` in the RC rules that accept it (Init→RTR, RTR→RTS, RTS→RTS).
///
/// Source: Linux drivers/infiniband/core/verbs.c `qp_state_table` after "IB/core: Extend rate
/// limit support for RC QPs". Set to `AttrMask::empty()` to model kernels before it.
pub const RATE_LIMIT_RC: AttrMask = AttrMask::RATE_LIMIT;

/// Builds an [`AttrMask`] from bit names in a `const` context.
macro_rules! m {
    () => { AttrMask::empty() };
    ($($b:ident)|+) => { AttrMask::from_bits_retain(0 $(| AttrMask::$b.bits())+) };
}

/// Required/optional pair in a `const` context.
const fn r(required: AttrMask, optional: AttrMask) -> Rule {
    Rule { required, optional }
}

const fn or(a: AttrMask, b: AttrMask) -> AttrMask {
    AttrMask::from_bits_retain(a.bits() | b.bits())
}

/// Legal with `IBV_QP_STATE` only, for every QP type.
const STATE_ONLY: Option<Cell> = Some(Cell {
    rc: r(m!(), m!()),
    uc: r(m!(), m!()),
    ud: r(m!(), m!()),
});
/// Not a transition.
const NO: Option<Cell> = None;

// Row by row: the kernel's `qp_state_table[cur][next]` restricted to RC, UC and UD.

const RST2INIT: Option<Cell> = Some(Cell {
    rc: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    uc: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    ud: r(m!(PKEY_INDEX | PORT | QKEY), m!()),
});

const INIT2INIT: Option<Cell> = Some(Cell {
    rc: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    uc: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    ud: r(m!(), m!(PKEY_INDEX | PORT | QKEY)),
});

const INIT2RTR: Option<Cell> = Some(Cell {
    rc: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER),
        or(m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX), RATE_LIMIT_RC),
    ),
    uc: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN),
        m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    ),
    ud: r(m!(), m!(PKEY_INDEX | QKEY)),
});

const RTR2RTS: Option<Cell> = Some(Cell {
    rc: r(
        m!(TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
        or(
            m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
            RATE_LIMIT_RC,
        ),
    ),
    uc: r(
        m!(SQ_PSN),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    ),
    ud: r(m!(SQ_PSN), m!(CUR_STATE | QKEY)),
});

const RTS2RTS: Option<Cell> = Some(Cell {
    rc: r(
        m!(),
        or(
            m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER),
            RATE_LIMIT_RC,
        ),
    ),
    uc: r(
        m!(),
        m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
    ),
    ud: r(m!(), m!(CUR_STATE | QKEY)),
});

const RTS2SQD: Option<Cell> = Some(Cell {
    rc: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    uc: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    ud: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
});

const SQD2RTS: Option<Cell> = Some(Cell {
    rc: r(
        m!(),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    ),
    uc: r(
        m!(),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    ),
    ud: r(m!(), m!(CUR_STATE | QKEY)),
});

const SQD2SQD: Option<Cell> = Some(Cell {
    rc: r(
        m!(),
        m!(PORT
            | AV
            | TIMEOUT
            | RETRY_CNT
            | RNR_RETRY
            | MAX_QP_RD_ATOMIC
            | MAX_DEST_RD_ATOMIC
            | ALT_PATH
            | ACCESS_FLAGS
            | PKEY_INDEX
            | MIN_RNR_TIMER
            | PATH_MIG_STATE),
    ),
    uc: r(
        m!(),
        m!(AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE),
    ),
    ud: r(m!(), m!(PKEY_INDEX | QKEY)),
});

/// SQE→RTS. The kernel marks the cell valid for every type but lists parameters only for UC
/// and UD; an RC QP never enters SQE (its send errors take it to Error), so the RC rule — state
/// only — is unreachable in practice but reproduced as the kernel answers it.
const SQE2RTS: Option<Cell> = Some(Cell {
    rc: r(m!(), m!()),
    uc: r(m!(), m!(CUR_STATE | ACCESS_FLAGS)),
    ud: r(m!(), m!(CUR_STATE | QKEY)),
});

/// `TABLE[cur][next]`, states in `ibv_qp_state` order: RESET, INIT, RTR, RTS, SQD, SQE, ERR.
#[rustfmt::skip]
static TABLE: [[Option<Cell>; 7]; 7] = [
    //            RESET       INIT       RTR       RTS       SQD      SQE  ERR
    /* RESET */ [STATE_ONLY, RST2INIT,  NO,       NO,       NO,      NO,  NO        ],
    /* INIT  */ [STATE_ONLY, INIT2INIT, INIT2RTR, NO,       NO,      NO,  STATE_ONLY],
    /* RTR   */ [STATE_ONLY, NO,        NO,       RTR2RTS,  NO,      NO,  STATE_ONLY],
    /* RTS   */ [STATE_ONLY, NO,        NO,       RTS2RTS,  RTS2SQD, NO,  STATE_ONLY],
    /* SQD   */ [STATE_ONLY, NO,        NO,       SQD2RTS,  SQD2SQD, NO,  STATE_ONLY],
    /* SQE   */ [STATE_ONLY, NO,        NO,       SQE2RTS,  NO,      NO,  STATE_ONLY],
    /* ERR   */ [STATE_ONLY, NO,        NO,       NO,       NO,      NO,  STATE_ONLY],
];

/// Every attribute bit verbs defines (`IBV_QP_STATE` ... `IBV_QP_DEST_QPN`, `IBV_QP_RATE_LIMIT`).
pub const KNOWN_BITS: AttrMask = AttrMask::all();

/// States from which `IBV_QP_CUR_STATE` may be given (`ib_modify_qp_is_ok`).
pub const CUR_STATE_SOURCES: [QpState; 4] =
    [QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe];

/// The rule for `cur → next` on a `qp_type` QP, or `None` if the kernel has no such transition.
pub fn rule(cur: QpState, next: QpState, qp_type: QpType) -> Option<Rule> {
    TABLE[cur as usize][next as usize].map(|c| c.get(qp_type))
}

/// The states a `qp_type` QP in `cur` may be modified to (including `cur` itself where the
/// kernel allows a same-state modify).
pub fn legal_targets(cur: QpState, qp_type: QpType) -> impl Iterator<Item = QpState> {
    QpState::ALL
        .into_iter()
        .filter(move |&n| rule(cur, n, qp_type).is_some())
}

/// The state a modify leads to: `attr.qp_state` if the mask has `IBV_QP_STATE`, else `cur`.
pub fn target_state(cur: QpState, attr: &QpAttr, mask: AttrMask) -> QpState {
    if mask.contains(AttrMask::STATE) {
        attr.qp_state
    } else {
        cur
    }
}

/// Whether a modify with `mask` may take a `qp_type` QP from `cur` to `next`: the same answer as
/// the kernel's `ib_modify_qp_is_ok(cur, next, type, mask)`, with the reason when it is no.
///
/// `cur` is the state the modify starts from (what the kernel uses: `attr->cur_qp_state` if the
/// mask has `IBV_QP_CUR_STATE`, else the QP's state). The kernel derives `next` as
/// `attr->qp_state` when the mask has `IBV_QP_STATE` and as `cur` otherwise, so a call whose
/// mask lacks `IBV_QP_STATE` but names a different `next` is refused with
/// [`ModifyError::MissingAttributes`] naming `IBV_QP_STATE`.
///
/// Order of checks (which error you get when several apply): unknown bits, missing
/// `IBV_QP_STATE`, illegal transition, missing required bits, then forbidden bits (including
/// `IBV_QP_CUR_STATE` from a state that does not accept it).
pub fn check_modify(
    cur: QpState,
    next: QpState,
    qp_type: QpType,
    mask: AttrMask,
) -> Result<(), ModifyError> {
    let unknown = mask.bits() & !KNOWN_BITS.bits();
    if unknown != 0 {
        return Err(ModifyError::InvalidValue {
            attr: "attr_mask",
            why: format!(
                "bits {unknown:#x} are not ibv_qp_attr_mask attributes (verbs.h defines bits \
                 0..=20 and 25)"
            ),
        });
    }
    if next != cur && !mask.contains(AttrMask::STATE) {
        return Err(ModifyError::MissingAttributes {
            from: cur,
            to: next,
            qp_type,
            missing: AttrMask::STATE,
        });
    }
    let rule = rule(cur, next, qp_type).ok_or(ModifyError::IllegalTransition {
        from: cur,
        to: next,
        qp_type,
    })?;
    let missing = rule.required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttributes {
            from: cur,
            to: next,
            qp_type,
            missing,
        });
    }
    let mut forbidden = mask.difference(rule.allowed());
    if mask.contains(AttrMask::CUR_STATE) && !CUR_STATE_SOURCES.contains(&cur) {
        forbidden |= AttrMask::CUR_STATE;
    }
    if !forbidden.is_empty() {
        return Err(ModifyError::ForbiddenAttributes {
            from: cur,
            to: next,
            qp_type,
            forbidden,
        });
    }
    Ok(())
}

/// Largest PSN and QPN: both are 24-bit fields of the BTH (IBTA vol. 1 §9.2).
pub const MAX_24BIT: u32 = 0x00ff_ffff;
/// Largest local ACK timeout exponent (5 bits, `ibv_qp_attr.timeout`, IBTA §11.2.4.2 / C9-141).
pub const MAX_TIMEOUT: u8 = 31;
/// Largest retry count (3 bits, `ibv_qp_attr.retry_cnt`).
pub const MAX_RETRY_CNT: u8 = 7;
/// Largest RNR retry count (3 bits; 7 means retry forever, `ibv_qp_attr.rnr_retry`).
pub const MAX_RNR_RETRY: u8 = 7;
/// Largest RNR NAK timer code (5 bits, IBTA table "RNR NAK timer field encodings").
pub const MAX_MIN_RNR_TIMER: u8 = 31;
/// Largest service level (4 bits, LRH SL, IBTA §7.7).
pub const MAX_SL: u8 = 15;
/// Largest GRH flow label (20 bits, IBTA §8.3).
pub const MAX_FLOW_LABEL: u32 = 0x000f_ffff;
/// Largest source path bits (at most 7 bits: LMC ≤ 7, IBTA §7.11.1).
pub const MAX_SRC_PATH_BITS: u8 = 0x7f;
/// The controlled-Q_Key bit: a Q_Key with it set may only be used by privileged processes
/// (`IB_QP_SET_QKEY`, include/rdma/ib_mad.h; uverbs `modify_qp` answers EPERM otherwise).
pub const CONTROLLED_QKEY_BIT: u32 = 0x8000_0000;

fn invalid(attr: &'static str, why: String) -> ModifyError {
    ModifyError::InvalidValue { attr, why }
}

fn at_most(
    attr: &'static str,
    field: &str,
    v: u32,
    max: u32,
    note: &str,
) -> Result<(), ModifyError> {
    if v > max {
        Err(invalid(
            attr,
            format!("{field} = {v} ({v:#x}) exceeds {max} ({max:#x}): {note}"),
        ))
    } else {
        Ok(())
    }
}

/// Range checks on the attributes the mask carries, independent of any device: PSNs and the
/// destination QPN fit 24 bits, `timeout` and `min_rnr_timer` 5 bits, `retry_cnt` and
/// `rnr_retry` 3 bits, `port_num` ≥ 1, the address vector's port, SL, flow label and path
/// bits in range, and `IBV_QP_AV` + `IBV_QP_PORT` naming the same port. The error names the
/// attribute by its verbs name (`IBV_QP_SQ_PSN`, ...).
///
/// The kernel *masks* a PSN wider than 24 bits with a warning (`_ib_modify_qp`); this refuses
/// it, because a silently different PSN is a connection that never carries traffic.
/// `path_mtu` needs no check here: [`Mtu`] can only hold the five legal values; its limit
/// against the port is in [`check_limits`]. Which attributes a QP type may set at all (a UD QP
/// has no `IBV_QP_DEST_QPN`, a UC QP no `IBV_QP_TIMEOUT`) is the table's business
/// ([`check_modify`]); every range checked here is the same for RC, UC and UD, so the QP type
/// is taken only to keep the signature uniform with the other checks.
pub fn check_values(attr: &QpAttr, mask: AttrMask, _qp_type: QpType) -> Result<(), ModifyError> {
    if mask.contains(AttrMask::SQ_PSN) {
        at_most(
            "IBV_QP_SQ_PSN",
            "sq_psn",
            attr.sq_psn,
            MAX_24BIT,
            "PSNs are 24 bits",
        )?;
    }
    if mask.contains(AttrMask::RQ_PSN) {
        at_most(
            "IBV_QP_RQ_PSN",
            "rq_psn",
            attr.rq_psn,
            MAX_24BIT,
            "PSNs are 24 bits",
        )?;
    }
    if mask.contains(AttrMask::DEST_QPN) {
        at_most(
            "IBV_QP_DEST_QPN",
            "dest_qp_num",
            attr.dest_qp_num,
            MAX_24BIT,
            "QPNs are 24 bits",
        )?;
    }
    if mask.contains(AttrMask::TIMEOUT) {
        at_most(
            "IBV_QP_TIMEOUT",
            "timeout",
            attr.timeout.into(),
            MAX_TIMEOUT.into(),
            "the local ACK timeout is a 5-bit exponent (4.096 us * 2^timeout; 0 = infinite)",
        )?;
    }
    if mask.contains(AttrMask::RETRY_CNT) {
        at_most(
            "IBV_QP_RETRY_CNT",
            "retry_cnt",
            attr.retry_cnt.into(),
            MAX_RETRY_CNT.into(),
            "the retry count is 3 bits",
        )?;
    }
    if mask.contains(AttrMask::RNR_RETRY) {
        at_most(
            "IBV_QP_RNR_RETRY",
            "rnr_retry",
            attr.rnr_retry.into(),
            MAX_RNR_RETRY.into(),
            "the RNR retry count is 3 bits (7 = retry forever)",
        )?;
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) {
        at_most(
            "IBV_QP_MIN_RNR_TIMER",
            "min_rnr_timer",
            attr.min_rnr_timer.into(),
            MAX_MIN_RNR_TIMER.into(),
            "the RNR NAK timer is a 5-bit code",
        )?;
    }
    if mask.contains(AttrMask::PORT) && attr.port_num == 0 {
        return Err(invalid(
            "IBV_QP_PORT",
            "port_num = 0: ports are numbered from 1".into(),
        ));
    }
    if mask.contains(AttrMask::AV) {
        let ah = &attr.ah_attr;
        if ah.port_num == 0 {
            return Err(invalid(
                "IBV_QP_AV",
                "ah_attr.port_num = 0: ports are numbered from 1 (uverbs modify_qp checks it)"
                    .into(),
            ));
        }
        at_most(
            "IBV_QP_AV",
            "ah_attr.sl",
            ah.sl.into(),
            MAX_SL.into(),
            "the SL is 4 bits",
        )?;
        at_most(
            "IBV_QP_AV",
            "ah_attr.src_path_bits",
            ah.src_path_bits.into(),
            MAX_SRC_PATH_BITS.into(),
            "path bits are at most 7 bits (LMC <= 7)",
        )?;
        if let Some(grh) = &ah.grh {
            at_most(
                "IBV_QP_AV",
                "ah_attr.grh.flow_label",
                grh.flow_label,
                MAX_FLOW_LABEL,
                "the flow label is 20 bits",
            )?;
        }
        if mask.contains(AttrMask::PORT) && attr.port_num != ah.port_num {
            return Err(invalid(
                "IBV_QP_AV",
                format!(
                    "ah_attr.port_num = {} but port_num = {}: the primary path must use the QP's \
                     port (uverbs modify_qp refuses the difference)",
                    ah.port_num, attr.port_num
                ),
            ));
        }
    }
    Ok(())
}

/// Device- and port-dependent limits a modify must respect (what `mlx5_ib_modify_qp` and the
/// firmware check after the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Number of physical ports (`port_num` and `ah_attr.port_num` must be ≤ it).
    pub num_ports: u8,
    /// P_Key table length; `pkey_index` must be below it (`None`: unknown, not checked).
    pub pkey_tbl_len: Option<u16>,
    /// GID table length; `ah_attr.grh.sgid_index` must be below it.
    pub gid_tbl_len: u32,
    /// Largest path MTU the port accepts.
    pub max_mtu: Mtu,
    /// Largest `max_rd_atomic` (`max_qp_init_rd_atom`).
    pub max_rd_atomic: u32,
    /// Largest `max_dest_rd_atomic` (`max_qp_rd_atom`).
    pub max_dest_rd_atomic: u32,
    /// Whether the caller may set a controlled Q_Key (bit 31; needs CAP_NET_RAW or the
    /// `privileged_qkey` rdma netlink setting).
    pub privileged_qkey: bool,
}

impl DeviceLimits {
    /// The limits of a device and one of its ports, as `ibv_query_device`/`ibv_query_port`
    /// report them. The MTU limit is the port's *active* MTU: a larger path MTU is refused by
    /// the firmware or drops every full-size packet.
    pub fn from_attrs(dev: &DeviceAttr, port: &PortAttr) -> DeviceLimits {
        DeviceLimits {
            num_ports: dev.phys_port_cnt,
            pkey_tbl_len: None,
            gid_tbl_len: port.gid_tbl_len,
            max_mtu: port.active_mtu,
            max_rd_atomic: dev.max_qp_init_rd_atom,
            max_dest_rd_atomic: dev.max_qp_rd_atom,
            privileged_qkey: false,
        }
    }
}

/// Checks the attributes the mask carries against a device's limits: port numbers, P_Key and
/// GID indexes, path MTU, read/atomic depths and the controlled Q_Key bit.
pub fn check_limits(attr: &QpAttr, mask: AttrMask, lim: &DeviceLimits) -> Result<(), ModifyError> {
    if mask.contains(AttrMask::PORT) && attr.port_num > lim.num_ports {
        return Err(invalid(
            "IBV_QP_PORT",
            format!(
                "port_num = {} but the device has {} port(s)",
                attr.port_num, lim.num_ports
            ),
        ));
    }
    if mask.contains(AttrMask::PKEY_INDEX) {
        if let Some(len) = lim.pkey_tbl_len {
            if attr.pkey_index >= len {
                return Err(invalid(
                    "IBV_QP_PKEY_INDEX",
                    format!(
                        "pkey_index = {} but the P_Key table has {len} entries",
                        attr.pkey_index
                    ),
                ));
            }
        }
    }
    if mask.contains(AttrMask::PATH_MTU) && attr.path_mtu > lim.max_mtu {
        return Err(invalid(
            "IBV_QP_PATH_MTU",
            format!(
                "path_mtu = {} bytes is above the port's MTU of {} bytes",
                attr.path_mtu.bytes(),
                lim.max_mtu.bytes()
            ),
        ));
    }
    if mask.contains(AttrMask::AV) {
        let ah = &attr.ah_attr;
        if ah.port_num > lim.num_ports {
            return Err(invalid(
                "IBV_QP_AV",
                format!(
                    "ah_attr.port_num = {} but the device has {} port(s)",
                    ah.port_num, lim.num_ports
                ),
            ));
        }
        if let Some(grh) = &ah.grh {
            if u32::from(grh.sgid_index) >= lim.gid_tbl_len {
                return Err(invalid(
                    "IBV_QP_AV",
                    format!(
                        "ah_attr.grh.sgid_index = {} but the port's GID table has {} entries",
                        grh.sgid_index, lim.gid_tbl_len
                    ),
                ));
            }
        }
    }
    if mask.contains(AttrMask::MAX_QP_RD_ATOMIC)
        && u32::from(attr.max_rd_atomic) > lim.max_rd_atomic
    {
        return Err(invalid(
            "IBV_QP_MAX_QP_RD_ATOMIC",
            format!(
                "max_rd_atomic = {} exceeds the device's max_qp_init_rd_atom = {}",
                attr.max_rd_atomic, lim.max_rd_atomic
            ),
        ));
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC)
        && u32::from(attr.max_dest_rd_atomic) > lim.max_dest_rd_atomic
    {
        return Err(invalid(
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            format!(
                "max_dest_rd_atomic = {} exceeds the device's max_qp_rd_atom = {}",
                attr.max_dest_rd_atomic, lim.max_dest_rd_atomic
            ),
        ));
    }
    if mask.contains(AttrMask::QKEY) && attr.qkey & CONTROLLED_QKEY_BIT != 0 && !lim.privileged_qkey
    {
        return Err(invalid(
            "IBV_QP_QKEY",
            format!(
                "qkey = {:#010x} has bit 31 set (a controlled Q_Key): only a privileged process \
                 (CAP_NET_RAW) may set it; use a Q_Key below 0x80000000",
                attr.qkey
            ),
        ));
    }
    Ok(())
}

/// Everything that can be checked before a modify reaches a device, for a QP now in `cur`:
/// `IBV_QP_CUR_STATE` (if given) must equal `cur`, the transition to
/// [`target_state`] must pass [`check_modify`], and the values [`check_values`].
/// Returns the state the modify leads to.
pub fn validate(
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    qp_type: QpType,
) -> Result<QpState, ModifyError> {
    if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(ModifyError::CurrentStateMismatch {
            claimed: attr.cur_qp_state,
            actual: cur,
        });
    }
    let next = target_state(cur, attr, mask);
    check_modify(cur, next, qp_type, mask)?;
    check_values(attr, mask, qp_type)?;
    Ok(next)
}

/// [`validate`] plus [`check_limits`] against a device's limits.
pub fn validate_with_limits(
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    qp_type: QpType,
    limits: &DeviceLimits,
) -> Result<QpState, ModifyError> {
    let next = validate(cur, attr, mask, qp_type)?;
    check_limits(attr, mask, limits)?;
    Ok(next)
}
