//! The QP state machine: which `ibv_modify_qp` calls are legal.
//!
//! One table, in one place, used by every backend: the verbs backend validates each modify
//! before `ibv_modify_qp`, and the software ConnectX refuses exactly what the kernel refuses.
//!
//! The table reproduces, as data, the facts of the Linux kernel's `qp_state_table` and
//! `ib_modify_qp_is_ok` (drivers/infiniband/core/verbs.c) for RC, UC, UD and the two XRC types
//! (`IB_QPT_XRC_INI` = [`QpType::XrcSend`], `IB_QPT_XRC_TGT` = [`QpType::XrcRecv`]): for each of the
//! 7×7 state pairs, whether the transition exists, and per QP type the attribute bits it
//! requires and the ones it accepts. (The kernel is GPL; this is an independent encoding of the
//! same facts, not a copy of its code.)
//!
//! **Per kernel version** ([`KernelVersion`]). The RC/UC/UD cells differ between releases only
//! in `IBV_QP_RATE_LIMIT` (each commit is in Linus' tree through the rdma pull request of the
//! merge window named; `docs/state-machine.md` lists them with the driver changes around them):
//!
//! - [`KernelVersion::Linux6_1`] (6.1 up to 6.19): no RC/UC/UD cell lists it (only raw-packet
//!   QPs take it), so the table refuses it for every QP type here. Before the table, the
//!   drivers' own first check refuses it too, with EOPNOTSUPP: every driver but mlx5 (rxe,
//!   Soft-RoCE, included) starts `modify_qp` with `attr_mask & ~IB_QP_ATTR_STANDARD_BITS` →
//!   `-EOPNOTSUPP` (commit 26e990badde40b2fb824bfa3cb9d4288a79584bc "RDMA: Check attr_mask
//!   during modify_qp", 5.11; `drivers/infiniband/sw/rxe/rxe_verbs.c` `rxe_modify_qp`), and on
//!   Soft-RoCE rdma-core refuses it even before the kernel (its rxe provider sends the legacy
//!   command: `libibverbs/cmd.c` `ibv_cmd_modify_qp`, "Starting with IBV_QP_RATE_LIMIT the
//!   attribute must go through the _ex path", EOPNOTSUPP). So 6.1 answers EOPNOTSUPP, and so
//!   does [`validate_for`] under this version ([`KernelVersion::refused_before_table`]); the
//!   exception is mlx5, whose `mlx5_ib_modify_qp` admits the bit (`~(IB_QP_ATTR_STANDARD_BITS |
//!   IB_QP_RATE_LIMIT)`) and then fails the table with EINVAL.
//! - [`KernelVersion::Linux7_0`] (7.0, 7.1): optional for RC at Init→RTR, RTR→RTS and RTS→RTS
//!   (commit 42e3aac65c1c9eb36cdee0d8312a326196e0822f "IB/core: Extend rate limit support for
//!   RC QPs", `drivers/infiniband/core/verbs.c` `qp_state_table`; pull "RDMA v7.0 merge
//!   window");
//! - [`KernelVersion::Linux7_2`] (7.2 and later, the newest): no cell lists it and
//!   `ib_modify_qp_is_ok` lets it through on every legal transition, the driver deciding
//!   (commit 8b0c66fa058b34015fcc7cafc9dea86dd91d8db9 "IB/core: Delegate IB_QP_RATE_LIMIT
//!   validation to drivers", `drivers/infiniband/core/verbs.c` `qp_state_table` and
//!   `ib_modify_qp_is_ok`; pull "RDMA v7.2 merge window").
//!
//! **The project models Linux 7.2, the newest table ([`KernelVersion::DEFAULT`])**: [`rule`],
//! [`check_modify`], [`validate`] and [`DeviceLimits::from_attrs`] use it, and the software
//! ConnectX with it. The tables only ever grew, so a check against the newest never refuses
//! what an older kernel accepts; on an older kernel the kernel itself refuses the rest. The
//! `*_for` functions ([`rule_for`], [`check_modify_for`], [`validate_for`]) and
//! [`DeviceLimits::kernel`] take another version; [`KernelVersion::running`] names the one
//! this machine runs.
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
//! - Before the table, uverbs `modify_qp` (drivers/infiniband/core/uverbs_cmd.c) refuses
//!   attribute bits verbs does not define (EOPNOTSUPP, [`ModifyError::UnknownAttributes`]) and
//!   **adds `IBV_QP_PORT`** (with `port_num = ah_attr.port_num`) to a modify that carries
//!   `IBV_QP_AV` without it, unless the modify goes to RTR ([`uverbs_view`]): so a UC QP's
//!   SQD→SQD with `IBV_QP_AV`, whose cell does not accept `IB_QP_PORT`, is refused
//!   ([`ModifyError::PortAddedWithAv`]); an RC QP's is accepted.
//! - Before the table, `_ib_modify_qp` (verbs.c) refuses, on a RoCE port, an address without a
//!   GRH (`rdma_check_ah_attr`, [`ModifyError::MissingGrh`]) and any `IBV_QP_ALT_PATH`
//!   ([`ModifyError::AltPathOnRoce`]), both EINVAL ([`check_port_protocol`]).
//!
//! **The DC types** ([`QpType::Dci`], [`QpType::Dct`]) are not in the kernel's
//! `qp_state_table`: `mlx5_ib_modify_qp` (drivers/infiniband/hw/mlx5/qp.c) skips
//! `ib_modify_qp_is_ok` for them and checks its own rules, which this table carries as two
//! more columns:
//!
//! - a DCI (`modify_dci_qp_is_ok`): Reset→Init with `PKEY_INDEX | PORT`, Init→Init with those
//!   optional, Init→RTR with `PATH_MTU` and optionally `PKEY_INDEX | AV` (**no destination**:
//!   each WQE names its own), RTR→RTS with `TIMEOUT | RETRY_CNT | RNR_RETRY |
//!   MAX_QP_RD_ATOMIC | SQ_PSN` and optionally `MIN_RNR_TIMER`, RTS→RTS with
//!   `MIN_RNR_TIMER` optional, and any state to Reset, any state but Reset to Error, with
//!   `IBV_QP_STATE` only; nothing else (no SQD, no SQE, no access flags, no
//!   `IBV_QP_CUR_STATE`). This is the form since Linux 5.x; the first DCI support (4.15)
//!   had neither the optional address at RTR nor the way back to Reset.
//! - a DCT (`mlx5_ib_modify_dct`): Reset→Init with exactly `ACCESS_FLAGS | PKEY_INDEX | PORT`,
//!   Init→RTR with exactly `MIN_RNR_TIMER | AV | PATH_MTU` — the firmware object is created
//!   there and the DCT gets its number — and **no other transition** ("Modify DCT: Invalid
//!   transition"): a DCT stays in RTR until it is destroyed.
//!
//! `IBV_QP_RATE_LIMIT`'s pass-through ([`KernelVersion::passes_through`]) does not apply to
//! them (it is a rule of `ib_modify_qp_is_ok`, which they skip).
//!
//! Every refusal carries the errno class `ibv_modify_qp` returns for it
//! ([`ModifyError::errno`]: EINVAL, EOPNOTSUPP; ENOMEM comes from a device out of resources).
//!
//! Value ranges ([`check_values`]) come from the packet formats (IBTA vol. 1 §9.2 BTH: 24-bit
//! PSN and QPN) and the verbs definitions (`man ibv_modify_qp`); device-dependent limits (number
//! of ports, P_Key and GID table sizes, read/atomic depth, port MTU, link layer) are in
//! [`DeviceLimits`].

#![deny(missing_docs)]

use crate::attr::{AhAttr, AttrMask, Mtu, QpAttr, QpState, QpType};
use crate::device::{DeviceAttr, LinkLayer, PortAttr};
use crate::error::ModifyError;

/// The Linux kernel whose `qp_state_table` / `ib_modify_qp_is_ok` a check follows
/// (drivers/infiniband/core/verbs.c). For RC, UC and UD the releases differ only in
/// `IBV_QP_RATE_LIMIT`; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KernelVersion {
    /// Linux 6.1 up to 6.19: `IB_QP_RATE_LIMIT` is in no RC/UC/UD cell (the table lists it
    /// only for raw-packet QPs at RTR→RTS and RTS→RTS), and the drivers refuse it before the
    /// table with EOPNOTSUPP ([`KernelVersion::refused_before_table`]).
    Linux6_1,
    /// Linux 7.0 and 7.1: `IB_QP_RATE_LIMIT` optional for RC at Init→RTR, RTR→RTS and RTS→RTS
    /// (commit 42e3aac65c1c "IB/core: Extend rate limit support for RC QPs").
    Linux7_0,
    /// Linux 7.2 and later: `IB_QP_RATE_LIMIT` is in no cell and `ib_modify_qp_is_ok` accepts
    /// it on every legal transition, leaving the decision to the driver ("IB/core: Delegate
    /// IB_QP_RATE_LIMIT validation to drivers", commit 8b0c66fa058b). The newest table, and the default.
    Linux7_2,
}

impl KernelVersion {
    /// Every modelled version, oldest first.
    pub const ALL: [KernelVersion; 3] = [
        KernelVersion::Linux6_1,
        KernelVersion::Linux7_0,
        KernelVersion::Linux7_2,
    ];
    /// The newest table (Linux 7.2).
    pub const NEWEST: KernelVersion = KernelVersion::Linux7_2;
    /// The version the project models: the newest. A modify it accepts may still be refused
    /// by an older kernel (which then says so); it never refuses one an older kernel accepts.
    pub const DEFAULT: KernelVersion = KernelVersion::NEWEST;

    /// The short name (`Linux 6.1`, `Linux 7.0`, `Linux 7.2`).
    pub const fn name(self) -> &'static str {
        match self {
            KernelVersion::Linux6_1 => "Linux 6.1",
            KernelVersion::Linux7_0 => "Linux 7.0",
            KernelVersion::Linux7_2 => "Linux 7.2",
        }
    }

    /// The table a kernel release string (`uname -r`, e.g. `6.1.0-26-amd64`) follows: 7.2 and
    /// later → [`KernelVersion::Linux7_2`], 7.0 and 7.1 → [`KernelVersion::Linux7_0`], anything
    /// before 7.0 → [`KernelVersion::Linux6_1`] (the RC/UC/UD cells this project read in 6.1;
    /// releases before 6.1 are assumed, not checked, to have the same). `None` if the string
    /// does not start with `major.minor`.
    pub fn from_release(release: &str) -> Option<KernelVersion> {
        let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
        let major: u32 = it.next()?.parse().ok()?;
        let minor: u32 = it.next()?.parse().ok()?;
        Some(match (major, minor) {
            (0..=6, _) => KernelVersion::Linux6_1,
            (7, 0..=1) => KernelVersion::Linux7_0,
            _ => KernelVersion::Linux7_2,
        })
    }

    /// The table of the kernel this machine runs (`/proc/sys/kernel/osrelease`), if readable.
    pub fn running() -> Option<KernelVersion> {
        let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        KernelVersion::from_release(&r)
    }

    /// Bits `ib_modify_qp_is_ok` accepts on every legal transition whatever the cell says:
    /// `IBV_QP_RATE_LIMIT` from 7.2, nothing before.
    pub const fn passes_through(self) -> AttrMask {
        match self {
            KernelVersion::Linux7_2 => AttrMask::RATE_LIMIT,
            _ => AttrMask::empty(),
        }
    }

    /// Bits refused with EOPNOTSUPP before the table looks at them, on every transition:
    /// `IBV_QP_RATE_LIMIT` in 6.1, where the drivers' first check (`attr_mask &
    /// ~IB_QP_ATTR_STANDARD_BITS`, commit 26e990badde4, rxe `rxe_modify_qp`) and, on
    /// Soft-RoCE, rdma-core's legacy modify command (`libibverbs/cmd.c` `ibv_cmd_modify_qp`)
    /// refuse it (see the module documentation for the mlx5 exception); nothing from 7.0, where
    /// a driver that paces some QP (bnxt_re in 7.0, mlx5) lets it reach the table.
    pub const fn refused_before_table(self) -> AttrMask {
        match self {
            KernelVersion::Linux6_1 => AttrMask::RATE_LIMIT,
            _ => AttrMask::empty(),
        }
    }

    /// Extra optional bits of the `cur → next` cell for `qp_type` in this version: 7.0's
    /// `IBV_QP_RATE_LIMIT` for RC at Init→RTR, RTR→RTS and RTS→RTS.
    const fn extra_optional(self, cur: QpState, next: QpState, qp_type: QpType) -> AttrMask {
        let rc_rate_cell = matches!(
            (cur, next),
            (QpState::Init, QpState::Rtr)
                | (QpState::Rtr, QpState::Rts)
                | (QpState::Rts, QpState::Rts)
        );
        if matches!(self, KernelVersion::Linux7_0) && matches!(qp_type, QpType::Rc) && rc_rate_cell
        {
            AttrMask::RATE_LIMIT
        } else {
            AttrMask::empty()
        }
    }
}

impl Default for KernelVersion {
    fn default() -> Self {
        KernelVersion::DEFAULT
    }
}

impl core::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

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

/// One cell of the table: the rule for each QP type, or `None` if the transition is illegal
/// (for every type; the DC columns may also be `None` alone).
#[derive(Clone, Copy, Debug)]
struct Cell {
    rc: Rule,
    uc: Rule,
    ud: Rule,
    /// `IB_QPT_XRC_INI` (`IBV_QPT_XRC_SEND`).
    xi: Rule,
    /// `IB_QPT_XRC_TGT` (`IBV_QPT_XRC_RECV`).
    xt: Rule,
    /// `MLX5_IB_QPT_DCI` (mlx5 `modify_dci_qp_is_ok`).
    dci: Option<Rule>,
    /// `MLX5_IB_QPT_DCT` (mlx5 `mlx5_ib_modify_dct`).
    dct: Option<Rule>,
}

impl Cell {
    const fn get(&self, t: QpType) -> Option<Rule> {
        match t {
            QpType::Rc => Some(self.rc),
            QpType::Uc => Some(self.uc),
            QpType::Ud => Some(self.ud),
            QpType::XrcSend => Some(self.xi),
            QpType::XrcRecv => Some(self.xt),
            QpType::Dci => self.dci,
            QpType::Dct => self.dct,
        }
    }
}

/// Builds an [`AttrMask`] from bit names in a `const` context.
macro_rules! m {
    () => { AttrMask::empty() };
    ($($b:ident)|+) => { AttrMask::from_bits_retain(0 $(| AttrMask::$b.bits())+) };
}

/// Required/optional pair in a `const` context.
const fn r(required: AttrMask, optional: AttrMask) -> Rule {
    Rule { required, optional }
}

/// Legal with `IBV_QP_STATE` only, for every QP type but a DCT (to Reset and to Error: a DCI
/// goes to Reset from any state and to Error from any but Reset, `modify_dci_qp_is_ok`; a DCT
/// never leaves RTR, `mlx5_ib_modify_dct`).
const STATE_ONLY: Option<Cell> = Some(Cell {
    rc: r(m!(), m!()),
    uc: r(m!(), m!()),
    ud: r(m!(), m!()),
    xi: r(m!(), m!()),
    xt: r(m!(), m!()),
    dci: Some(r(m!(), m!())),
    dct: None,
});
/// Not a transition.
const NO: Option<Cell> = None;

// Row by row: the kernel's `qp_state_table[cur][next]` restricted to RC, UC, UD, XRC_INI and
// XRC_TGT, as in
// Linux 6.1 (the other versions differ by `KernelVersion::extra_optional` and
// `KernelVersion::passes_through`).

const RST2INIT: Option<Cell> = Some(Cell {
    rc: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    uc: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    ud: r(m!(PKEY_INDEX | PORT | QKEY), m!()),
    xi: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    xt: r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!()),
    dci: Some(r(m!(PKEY_INDEX | PORT), m!())),
    dct: Some(r(m!(PKEY_INDEX | PORT | ACCESS_FLAGS), m!())),
});

const INIT2INIT: Option<Cell> = Some(Cell {
    rc: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    uc: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    ud: r(m!(), m!(PKEY_INDEX | PORT | QKEY)),
    xi: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    xt: r(m!(), m!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
    dci: Some(r(m!(), m!(PKEY_INDEX | PORT))),
    dct: None,
});

const INIT2RTR: Option<Cell> = Some(Cell {
    rc: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER),
        m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    ),
    uc: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN),
        m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    ),
    ud: r(m!(), m!(PKEY_INDEX | QKEY)),
    xi: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN),
        m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    ),
    xt: r(
        m!(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER),
        m!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    ),
    dci: Some(r(m!(PATH_MTU), m!(PKEY_INDEX | AV))),
    dct: Some(r(m!(MIN_RNR_TIMER | AV | PATH_MTU), m!())),
});

const RTR2RTS: Option<Cell> = Some(Cell {
    rc: r(
        m!(TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    ),
    uc: r(
        m!(SQ_PSN),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    ),
    ud: r(m!(SQ_PSN), m!(CUR_STATE | QKEY)),
    xi: r(
        m!(TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    ),
    xt: r(
        m!(TIMEOUT | SQ_PSN),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    ),
    dci: Some(r(
        m!(TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | SQ_PSN),
        m!(MIN_RNR_TIMER),
    )),
    dct: None,
});

const RTS2RTS: Option<Cell> = Some(Cell {
    rc: r(
        m!(),
        m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER),
    ),
    uc: r(
        m!(),
        m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
    ),
    ud: r(m!(), m!(CUR_STATE | QKEY)),
    xi: r(
        m!(),
        m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
    ),
    xt: r(
        m!(),
        m!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER),
    ),
    dci: Some(r(m!(), m!(MIN_RNR_TIMER))),
    dct: None,
});

const RTS2SQD: Option<Cell> = Some(Cell {
    rc: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    uc: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    ud: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    xi: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    xt: r(m!(), m!(EN_SQD_ASYNC_NOTIFY)),
    dci: None,
    dct: None,
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
    xi: r(
        m!(),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    ),
    xt: r(
        m!(),
        m!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    ),
    dci: None,
    dct: None,
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
    xi: r(
        m!(),
        m!(PORT
            | AV
            | TIMEOUT
            | RETRY_CNT
            | RNR_RETRY
            | MAX_QP_RD_ATOMIC
            | ALT_PATH
            | ACCESS_FLAGS
            | PKEY_INDEX
            | PATH_MIG_STATE),
    ),
    xt: r(
        m!(),
        m!(PORT
            | AV
            | TIMEOUT
            | MAX_DEST_RD_ATOMIC
            | ALT_PATH
            | ACCESS_FLAGS
            | PKEY_INDEX
            | MIN_RNR_TIMER
            | PATH_MIG_STATE),
    ),
    dci: None,
    dct: None,
});

/// SQE→RTS. The kernel marks the cell valid for every type but lists parameters only for UC
/// and UD (none for RC and the XRC types); an RC QP never enters SQE (its send errors take it to Error), so the RC rule — state
/// only — is unreachable in practice but reproduced as the kernel answers it.
const SQE2RTS: Option<Cell> = Some(Cell {
    rc: r(m!(), m!()),
    uc: r(m!(), m!(CUR_STATE | ACCESS_FLAGS)),
    ud: r(m!(), m!(CUR_STATE | QKEY)),
    xi: r(m!(), m!()),
    xt: r(m!(), m!()),
    dci: None,
    dct: None,
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

/// The rule for `cur → next` on a `qp_type` QP in the default kernel
/// ([`KernelVersion::DEFAULT`]), or `None` if the kernel has no such transition.
pub fn rule(cur: QpState, next: QpState, qp_type: QpType) -> Option<Rule> {
    rule_for(KernelVersion::DEFAULT, cur, next, qp_type)
}

/// The `qp_state_table` cell for `cur → next` on a `qp_type` QP in `kernel`, or `None` if that
/// kernel has no such transition. (Bits a version accepts on every transition whatever the
/// cell says are [`KernelVersion::passes_through`], not part of the cell.)
pub fn rule_for(
    kernel: KernelVersion,
    cur: QpState,
    next: QpState,
    qp_type: QpType,
) -> Option<Rule> {
    TABLE[cur as usize][next as usize]
        .and_then(|c| c.get(qp_type))
        .map(|mut r| {
            r.optional |= kernel.extra_optional(cur, next, qp_type);
            r
        })
}

/// The states a `qp_type` QP in `cur` may be modified to (including `cur` itself where the
/// kernel allows a same-state modify). The same in every [`KernelVersion`].
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

/// Refuses attribute-mask bits no `ibv_qp_attr_mask` value defines, as uverbs does first of
/// all (`ib_uverbs_modify_qp`, `ib_uverbs_ex_modify_qp`: EOPNOTSUPP).
pub fn check_known_bits(mask: AttrMask) -> Result<(), ModifyError> {
    let unknown = mask.bits() & !KNOWN_BITS.bits();
    if unknown != 0 {
        return Err(ModifyError::UnknownAttributes { bits: unknown });
    }
    Ok(())
}

/// [`check_modify_for`] with the default kernel ([`KernelVersion::DEFAULT`]).
pub fn check_modify(
    cur: QpState,
    next: QpState,
    qp_type: QpType,
    mask: AttrMask,
) -> Result<(), ModifyError> {
    check_modify_for(KernelVersion::DEFAULT, cur, next, qp_type, mask)
}

/// Whether a modify with `mask` may take a `qp_type` QP from `cur` to `next` in `kernel`: the
/// same answer as that kernel's `ib_modify_qp_is_ok(cur, next, type, mask)`, with the reason
/// when it is no (every reason but undefined bits is EINVAL in the kernel).
///
/// `cur` is the state the modify starts from (what the kernel uses: `attr->cur_qp_state` if the
/// mask has `IBV_QP_CUR_STATE`, else the QP's state). The kernel derives `next` as
/// `attr->qp_state` when the mask has `IBV_QP_STATE` and as `cur` otherwise, so a call whose
/// mask lacks `IBV_QP_STATE` but names a different `next` is refused with
/// [`ModifyError::MissingAttributes`] naming `IBV_QP_STATE`. `mask` is what the table sees:
/// for a modify from user space, [`uverbs_view`] of the caller's mask.
///
/// Order of checks (which error you get when several apply): unknown bits (uverbs, before the
/// table: [`ModifyError::UnknownAttributes`], EOPNOTSUPP), missing `IBV_QP_STATE`, illegal
/// transition, missing required bits, then forbidden bits (including `IBV_QP_CUR_STATE` from
/// a state that does not accept it).
pub fn check_modify_for(
    kernel: KernelVersion,
    cur: QpState,
    next: QpState,
    qp_type: QpType,
    mask: AttrMask,
) -> Result<(), ModifyError> {
    check_known_bits(mask)?;
    if next != cur && !mask.contains(AttrMask::STATE) {
        return Err(ModifyError::MissingAttributes {
            from: cur,
            to: next,
            qp_type,
            missing: AttrMask::STATE,
        });
    }
    let rule = rule_for(kernel, cur, next, qp_type).ok_or(ModifyError::IllegalTransition {
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
    // The DC types skip `ib_modify_qp_is_ok`, and with it the pass-through.
    let passed = if qp_type.is_dc() {
        AttrMask::empty()
    } else {
        kernel.passes_through()
    };
    let mut forbidden = mask.difference(rule.allowed()).difference(passed);
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

/// Whether uverbs adds `IBV_QP_PORT` to this modify: it carries `IBV_QP_AV` but not
/// `IBV_QP_PORT`, and does not go to RTR (drivers/infiniband/core/uverbs_cmd.c `modify_qp`:
/// "if only IB_QP_AV was set, add in IB_QP_PORT as well", outside the Init→RTR case, where it
/// instead requires the address's port to be the QP's).
pub fn uverbs_adds_port(attr: &QpAttr, mask: AttrMask) -> bool {
    mask.contains(AttrMask::AV)
        && !mask.contains(AttrMask::PORT)
        && !(mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Rtr)
}

/// The attributes and mask the kernel's table and driver see for a modify from user space:
/// the caller's, plus `IBV_QP_PORT` with `port_num = ah_attr.port_num` when
/// [`uverbs_adds_port`] (the primary port follows the primary path).
pub fn uverbs_view(attr: &QpAttr, mask: AttrMask) -> (QpAttr, AttrMask) {
    let mut a = *attr;
    let mut m = mask;
    if uverbs_adds_port(attr, mask) {
        a.port_num = attr.ah_attr.port_num;
        m |= AttrMask::PORT;
    }
    (a, m)
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
/// bits in range, `IBV_QP_AV` + `IBV_QP_PORT` naming the same port, and for `IBV_QP_ALT_PATH`
/// the same of the alternate address plus `alt_port_num` ≥ 1, equal to the alternate
/// address's port (uverbs `modify_qp`), and `alt_timeout` ≤ 31 (rxe `rxe_qp_chk_attr`). The
/// error names the attribute by its verbs name (`IBV_QP_SQ_PSN`, ...).
///
/// The kernel *masks* a PSN wider than 24 bits with a warning (`_ib_modify_qp`); this refuses
/// it, because a silently different PSN is a connection that never carries traffic.
/// `path_mtu` and `path_mig_state` need no check here: [`Mtu`] and [`crate::MigState`] can
/// only hold legal values; the MTU's limit against the port is in [`check_limits`]. Which
/// attributes a QP type may set at all (a UD QP has no `IBV_QP_DEST_QPN`, a UC QP no
/// `IBV_QP_TIMEOUT`) is the table's business ([`check_modify`]); every range checked here is
/// the same for RC, UC and UD, so the QP type is taken only to keep the signature uniform with
/// the other checks. Give it the mask the kernel sees ([`uverbs_view`]) to check the port
/// uverbs adds as well.
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
        check_ah_values("IBV_QP_AV", "ah_attr", ah)?;
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
    if mask.contains(AttrMask::ALT_PATH) {
        if attr.alt_port_num == 0 {
            return Err(invalid(
                "IBV_QP_ALT_PATH",
                "alt_port_num = 0: ports are numbered from 1 (uverbs modify_qp checks it)".into(),
            ));
        }
        let ah = &attr.alt_ah_attr;
        check_ah_values("IBV_QP_ALT_PATH", "alt_ah_attr", ah)?;
        if attr.alt_port_num != ah.port_num {
            return Err(invalid(
                "IBV_QP_ALT_PATH",
                format!(
                    "alt_ah_attr.port_num = {} but alt_port_num = {}: the alternate path must \
                     use the alternate port (uverbs modify_qp refuses the difference)",
                    ah.port_num, attr.alt_port_num
                ),
            ));
        }
        at_most(
            "IBV_QP_ALT_PATH",
            "alt_timeout",
            attr.alt_timeout.into(),
            MAX_TIMEOUT.into(),
            "the local ACK timeout is a 5-bit exponent",
        )?;
    }
    Ok(())
}

/// The ranges of one address (`IBV_QP_AV`'s `ah_attr` or `IBV_QP_ALT_PATH`'s `alt_ah_attr`).
fn check_ah_values(attr: &'static str, field: &str, ah: &AhAttr) -> Result<(), ModifyError> {
    if ah.port_num == 0 {
        return Err(invalid(
            attr,
            format!("{field}.port_num = 0: ports are numbered from 1 (uverbs modify_qp checks it)"),
        ));
    }
    at_most(
        attr,
        &format!("{field}.sl"),
        ah.sl.into(),
        MAX_SL.into(),
        "the SL is 4 bits",
    )?;
    at_most(
        attr,
        &format!("{field}.src_path_bits"),
        ah.src_path_bits.into(),
        MAX_SRC_PATH_BITS.into(),
        "path bits are at most 7 bits (LMC <= 7)",
    )?;
    if let Some(grh) = &ah.grh {
        at_most(
            attr,
            &format!("{field}.grh.flow_label"),
            grh.flow_label,
            MAX_FLOW_LABEL,
            "the flow label is 20 bits",
        )?;
    }
    Ok(())
}

/// Device- and port-dependent limits a modify must respect (what `mlx5_ib_modify_qp` and the
/// firmware check after the table), the port's link layer (what `_ib_modify_qp` checks
/// before it) and the kernel whose table applies.
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
    /// Link layer of the QP's port: on Ethernet (RoCE) an address needs a GRH and
    /// `IBV_QP_ALT_PATH` is refused ([`check_port_protocol`]).
    pub link_layer: LinkLayer,
    /// The kernel whose state table [`validate_with_limits`] applies.
    pub kernel: KernelVersion,
}

impl DeviceLimits {
    /// The limits of a device and one of its ports, as `ibv_query_device`/`ibv_query_port`
    /// report them, with the default kernel ([`KernelVersion::DEFAULT`]; set
    /// [`DeviceLimits::kernel`] to [`KernelVersion::running`] to follow this machine's). The
    /// MTU limit is the port's *active* MTU: a larger path MTU is refused by the firmware or
    /// drops every full-size packet.
    pub fn from_attrs(dev: &DeviceAttr, port: &PortAttr) -> DeviceLimits {
        DeviceLimits {
            num_ports: dev.phys_port_cnt,
            pkey_tbl_len: None,
            gid_tbl_len: port.gid_tbl_len,
            max_mtu: port.active_mtu,
            max_rd_atomic: dev.max_qp_init_rd_atom,
            max_dest_rd_atomic: dev.max_qp_rd_atom,
            privileged_qkey: false,
            link_layer: port.link_layer,
            kernel: KernelVersion::DEFAULT,
        }
    }
}

/// What the port's link layer allows, as the kernel checks it before the table
/// (drivers/infiniband/core/verbs.c `_ib_modify_qp`): on a RoCE (Ethernet) port, an
/// `IBV_QP_AV` address without a GRH is refused (`rdma_check_ah_attr`: RoCE addresses carry a
/// GRH; [`ModifyError::MissingGrh`]) and so is every `IBV_QP_ALT_PATH` (alternate paths and
/// APM are InfiniBand only; [`ModifyError::AltPathOnRoce`]). Both EINVAL. On InfiniBand both
/// are accepted.
pub fn check_port_protocol(
    attr: &QpAttr,
    mask: AttrMask,
    lim: &DeviceLimits,
) -> Result<(), ModifyError> {
    if lim.link_layer != LinkLayer::Ethernet {
        return Ok(());
    }
    if mask.contains(AttrMask::AV) && attr.ah_attr.grh.is_none() {
        return Err(ModifyError::MissingGrh { attr: "IBV_QP_AV" });
    }
    if mask.contains(AttrMask::ALT_PATH) {
        return Err(ModifyError::AltPathOnRoce);
    }
    Ok(())
}

/// Checks the attributes the mask carries against a device's limits: the port's link layer
/// ([`check_port_protocol`]), port numbers, P_Key and GID indexes (of the primary and the
/// alternate path), path MTU, read/atomic depths and the controlled Q_Key bit.
pub fn check_limits(attr: &QpAttr, mask: AttrMask, lim: &DeviceLimits) -> Result<(), ModifyError> {
    check_port_protocol(attr, mask, lim)?;
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
        check_pkey_index("IBV_QP_PKEY_INDEX", "pkey_index", attr.pkey_index, lim)?;
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
        check_ah_limits("IBV_QP_AV", "ah_attr", &attr.ah_attr, lim)?;
    }
    if mask.contains(AttrMask::ALT_PATH) {
        if attr.alt_port_num > lim.num_ports {
            return Err(invalid(
                "IBV_QP_ALT_PATH",
                format!(
                    "alt_port_num = {} but the device has {} port(s)",
                    attr.alt_port_num, lim.num_ports
                ),
            ));
        }
        check_pkey_index(
            "IBV_QP_ALT_PATH",
            "alt_pkey_index",
            attr.alt_pkey_index,
            lim,
        )?;
        check_ah_limits("IBV_QP_ALT_PATH", "alt_ah_attr", &attr.alt_ah_attr, lim)?;
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
        return Err(ModifyError::PrivilegedQkey { qkey: attr.qkey });
    }
    Ok(())
}

fn check_pkey_index(
    attr: &'static str,
    field: &str,
    index: u16,
    lim: &DeviceLimits,
) -> Result<(), ModifyError> {
    match lim.pkey_tbl_len {
        Some(len) if index >= len => Err(invalid(
            attr,
            format!("{field} = {index} but the P_Key table has {len} entries"),
        )),
        _ => Ok(()),
    }
}

/// The limits of one address: its port exists, its GID index is in the port's table.
fn check_ah_limits(
    attr: &'static str,
    field: &str,
    ah: &AhAttr,
    lim: &DeviceLimits,
) -> Result<(), ModifyError> {
    if ah.port_num > lim.num_ports {
        return Err(invalid(
            attr,
            format!(
                "{field}.port_num = {} but the device has {} port(s)",
                ah.port_num, lim.num_ports
            ),
        ));
    }
    if let Some(grh) = &ah.grh {
        if u32::from(grh.sgid_index) >= lim.gid_tbl_len {
            return Err(invalid(
                attr,
                format!(
                    "{field}.grh.sgid_index = {} but the port's GID table has {} entries",
                    grh.sgid_index, lim.gid_tbl_len
                ),
            ));
        }
    }
    Ok(())
}

/// [`validate_for`] with the default kernel ([`KernelVersion::DEFAULT`]).
pub fn validate(
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    qp_type: QpType,
) -> Result<QpState, ModifyError> {
    validate_for(KernelVersion::DEFAULT, cur, attr, mask, qp_type)
}

/// Everything that can be checked before a modify reaches a device, for a QP now in `cur`,
/// under `kernel`'s table: undefined mask bits ([`check_known_bits`]), the bits that kernel
/// refuses before its table ([`KernelVersion::refused_before_table`], EOPNOTSUPP),
/// `IBV_QP_CUR_STATE` (if
/// given) equal to `cur`, the transition to [`target_state`] through [`check_modify_for`] with
/// the mask uverbs hands the table ([`uverbs_view`]: `IBV_QP_PORT` added to an `IBV_QP_AV`
/// outside Init→RTR), and the values through [`check_values`]. Returns the state the modify
/// leads to.
///
/// When the only bit the table refuses is the `IBV_QP_PORT` uverbs added, the error is
/// [`ModifyError::PortAddedWithAv`]; when it refuses others too, the added port is left out
/// of [`ModifyError::ForbiddenAttributes`] (the caller's bits are the cause).
pub fn validate_for(
    kernel: KernelVersion,
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    qp_type: QpType,
) -> Result<QpState, ModifyError> {
    check_known_bits(mask)?;
    if mask.intersects(kernel.refused_before_table()) {
        return Err(ModifyError::Unsupported {
            attr: "IBV_QP_RATE_LIMIT",
            why: format!(
                "{kernel} has no rate limit for {qp_type} QPs (only raw-packet QPs are paced); \
                 the driver refuses the attribute before its state table (`attr_mask & \
                 ~IB_QP_ATTR_STANDARD_BITS`, EOPNOTSUPP)"
            ),
        });
    }
    if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(ModifyError::CurrentStateMismatch {
            claimed: attr.cur_qp_state,
            actual: cur,
        });
    }
    let next = target_state(cur, attr, mask);
    let (seen, seen_mask) = uverbs_view(attr, mask);
    let added = seen_mask.difference(mask);
    match check_modify_for(kernel, cur, next, qp_type, seen_mask) {
        Err(ModifyError::ForbiddenAttributes {
            from,
            to,
            qp_type,
            forbidden,
        }) if forbidden.intersects(added) => {
            let own = forbidden.difference(added);
            return Err(if own.is_empty() {
                ModifyError::PortAddedWithAv { from, to, qp_type }
            } else {
                ModifyError::ForbiddenAttributes {
                    from,
                    to,
                    qp_type,
                    forbidden: own,
                }
            });
        }
        r => r?,
    }
    check_values(&seen, seen_mask, qp_type)?;
    Ok(next)
}

/// [`validate_for`] under the limits' kernel ([`DeviceLimits::kernel`]) plus the link-layer
/// checks ([`check_port_protocol`], which the kernel makes before the table, so they come
/// right after the undefined-bits check) and the device limits ([`check_limits`], on the
/// attributes uverbs hands the driver).
pub fn validate_with_limits(
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    qp_type: QpType,
    limits: &DeviceLimits,
) -> Result<QpState, ModifyError> {
    check_known_bits(mask)?;
    check_port_protocol(attr, mask, limits)?;
    let next = validate_for(limits.kernel, cur, attr, mask, qp_type)?;
    let (seen, seen_mask) = uverbs_view(attr, mask);
    check_limits(&seen, seen_mask, limits)?;
    Ok(next)
}
