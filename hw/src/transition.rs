//! Typed QP transitions: one [`Step`] per move of the state machine, each carrying exactly the
//! attributes that move needs for the QP type, and [`apply`], which validates a step against
//! [`crate::qp_state`], modifies the QP, logs one structured event and confirms the state reached
//! with `query_qp`.
//!
//! A step builds its `(QpAttr, AttrMask)` with the *full* mask of its transition: an RC
//! Init→RTR step cannot be written without `min_rnr_timer`, so the RNR NAK timer is never the
//! silent default 0, which encodes the longest wait, 655.36 ms (IBTA vol. 1 "RNR NAK timer field
//! encodings").
//!
//! | step | transition | RC | UC | UD |
//! |---|---|---|---|---|
//! | [`Step::Init`] | Reset→Init | port, pkey_index, access | port, pkey_index, access | port, pkey_index, qkey |
//! | [`Step::Rtr`] | Init→RTR | path_mtu, dest_qpn, rq_psn, av, max_dest_rd_atomic, min_rnr_timer | path_mtu, dest_qpn, rq_psn, av | — |
//! | [`Step::Rts`] | RTR→RTS | sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic | sq_psn | sq_psn |
//! | [`Step::Drain`] | RTS→SQD | (en_sqd_async_notify) | same | same |
//! | [`Step::Resume`] | SQD→RTS, SQE→RTS | the [`Changes`] given | same | same |
//! | [`Step::WithOptional`] | Init, RTR or RTS step | its required attributes + the optional [`Changes`] given | same | same |
//! | [`Step::Change`] | Init→Init, RTS→RTS, SQD→SQD | the [`Changes`] given | same | same |
//! | [`Step::SetQkey`] | UD: same-state Q_Key change | — | — | qkey |
//! | [`Step::Error`] | any but Reset → Error | state only | same | same |
//! | [`Step::Reset`] | any → Reset | state only | same | same |

#![deny(missing_docs)]

use crate::attr::{AccessFlags, AhAttr, AttrMask, MigState, Mtu, QpAttr, QpState, QpType};
use crate::device::{Device, QpId};
use crate::error::{ModifyError, Result};
use crate::qp_state;

/// Reset→Init attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToInit {
    /// RC or UC.
    Connected {
        /// Port, 1-based (`IBV_QP_PORT`).
        port: u8,
        /// P_Key index (`IBV_QP_PKEY_INDEX`).
        pkey_index: u16,
        /// Remote access rights granted to the peer (`IBV_QP_ACCESS_FLAGS`).
        access: AccessFlags,
    },
    /// UD.
    Datagram {
        /// Port, 1-based (`IBV_QP_PORT`).
        port: u8,
        /// P_Key index (`IBV_QP_PKEY_INDEX`).
        pkey_index: u16,
        /// Q_Key incoming datagrams must carry (`IBV_QP_QKEY`).
        qkey: u32,
    },
}

/// The path to the peer set at Init→RTR on connected QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerPath {
    /// Path MTU (`IBV_QP_PATH_MTU`); at most the port's active MTU.
    pub path_mtu: Mtu,
    /// The peer's QPN, 24 bits (`IBV_QP_DEST_QPN`).
    pub dest_qpn: u32,
    /// First PSN expected from the peer: the peer's `sq_psn` (`IBV_QP_RQ_PSN`).
    pub rq_psn: u32,
    /// Address of the peer (`IBV_QP_AV`): LID on InfiniBand, GRH with the GID on RoCE.
    pub ah: AhAttr,
}

/// Init→RTR attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToRtr {
    /// RC: the path plus the responder resources.
    Rc {
        /// Path to the peer.
        path: PeerPath,
        /// RDMA READ/atomic requests this QP serves at once (`IBV_QP_MAX_DEST_RD_ATOMIC`); plan
        /// it with the peer's `max_rd_atomic`.
        max_dest_rd_atomic: u8,
        /// RNR NAK timer code sent when no receive is posted (`IBV_QP_MIN_RNR_TIMER`, 0..=31).
        min_rnr_timer: u8,
    },
    /// UC: the path only.
    Uc {
        /// Path to the peer.
        path: PeerPath,
    },
    /// UD: nothing but the state.
    Ud,
}

/// RTR→RTS attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToRts {
    /// RC: send PSN and the requester's retry behaviour.
    Rc {
        /// First PSN this QP sends, 24 bits (`IBV_QP_SQ_PSN`).
        sq_psn: u32,
        /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite (`IBV_QP_TIMEOUT`).
        timeout: u8,
        /// Transport retries before RETRY_EXC_ERR, 0..=7 (`IBV_QP_RETRY_CNT`).
        retry_cnt: u8,
        /// RNR retries before RNR_RETRY_EXC_ERR, 0..=7, 7 = forever (`IBV_QP_RNR_RETRY`).
        rnr_retry: u8,
        /// RDMA READ/atomic requests in flight as initiator (`IBV_QP_MAX_QP_RD_ATOMIC`).
        max_rd_atomic: u8,
    },
    /// UC or UD: the send PSN only.
    Unreliable {
        /// First PSN this QP sends, 24 bits (`IBV_QP_SQ_PSN`).
        sq_psn: u32,
    },
}

/// Attributes changed in place (Init→Init, RTS→RTS, SQD→SQD) or on the way back to RTS
/// (SQD→RTS, SQE→RTS). Each `Some` field adds its bit to the mask; the table then decides
/// whether the transition accepts it for the QP type (the path, timeout and retry counts of an
/// RC QP change only in SQD→SQD; a UC QP's path not at all from user space, because uverbs adds
/// `IBV_QP_PORT` to an `IBV_QP_AV` there, which UC SQD→SQD refuses:
/// [`crate::ModifyError::PortAddedWithAv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Changes {
    /// `IBV_QP_ACCESS_FLAGS`
    pub access: Option<AccessFlags>,
    /// `IBV_QP_PKEY_INDEX`
    pub pkey_index: Option<u16>,
    /// `IBV_QP_PORT`
    pub port: Option<u8>,
    /// `IBV_QP_QKEY`
    pub qkey: Option<u32>,
    /// `IBV_QP_AV`
    pub ah: Option<AhAttr>,
    /// `IBV_QP_TIMEOUT`
    pub timeout: Option<u8>,
    /// `IBV_QP_RETRY_CNT`
    pub retry_cnt: Option<u8>,
    /// `IBV_QP_RNR_RETRY`
    pub rnr_retry: Option<u8>,
    /// `IBV_QP_MAX_QP_RD_ATOMIC`
    pub max_rd_atomic: Option<u8>,
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`
    pub max_dest_rd_atomic: Option<u8>,
    /// `IBV_QP_MIN_RNR_TIMER`
    pub min_rnr_timer: Option<u8>,
    /// `IBV_QP_ALT_PATH`: the alternate path (InfiniBand ports only; refused on RoCE).
    pub alt_path: Option<AltPath>,
    /// `IBV_QP_PATH_MIG_STATE`
    pub path_mig_state: Option<MigState>,
    /// `IBV_QP_RATE_LIMIT` (bytes per second; which transitions accept it depends on the
    /// kernel, `crate::qp_state::KernelVersion`).
    pub rate_limit: Option<u32>,
}

/// The alternate path of a QP (`IBV_QP_ALT_PATH`: `alt_ah_attr`, `alt_port_num`,
/// `alt_pkey_index`, `alt_timeout` of `struct ibv_qp_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AltPath {
    /// Address of the peer on the alternate path.
    pub ah: AhAttr,
    /// Local port of the alternate path, 1-based (must equal `ah.port_num`).
    pub port: u8,
    /// P_Key index on that port.
    pub pkey_index: u16,
    /// Local ACK timeout exponent on the alternate path.
    pub timeout: u8,
}

impl Changes {
    fn write(&self, attr: &mut QpAttr, mask: &mut AttrMask) {
        fn set<T: Copy>(v: Option<T>, bit: AttrMask, dst: &mut T, mask: &mut AttrMask) {
            if let Some(v) = v {
                *dst = v;
                *mask |= bit;
            }
        }
        set(
            self.access,
            AttrMask::ACCESS_FLAGS,
            &mut attr.qp_access_flags,
            mask,
        );
        set(
            self.pkey_index,
            AttrMask::PKEY_INDEX,
            &mut attr.pkey_index,
            mask,
        );
        set(self.port, AttrMask::PORT, &mut attr.port_num, mask);
        set(self.qkey, AttrMask::QKEY, &mut attr.qkey, mask);
        set(self.ah, AttrMask::AV, &mut attr.ah_attr, mask);
        set(self.timeout, AttrMask::TIMEOUT, &mut attr.timeout, mask);
        set(
            self.retry_cnt,
            AttrMask::RETRY_CNT,
            &mut attr.retry_cnt,
            mask,
        );
        set(
            self.rnr_retry,
            AttrMask::RNR_RETRY,
            &mut attr.rnr_retry,
            mask,
        );
        set(
            self.max_rd_atomic,
            AttrMask::MAX_QP_RD_ATOMIC,
            &mut attr.max_rd_atomic,
            mask,
        );
        set(
            self.max_dest_rd_atomic,
            AttrMask::MAX_DEST_RD_ATOMIC,
            &mut attr.max_dest_rd_atomic,
            mask,
        );
        set(
            self.min_rnr_timer,
            AttrMask::MIN_RNR_TIMER,
            &mut attr.min_rnr_timer,
            mask,
        );
        if let Some(alt) = self.alt_path {
            attr.alt_ah_attr = alt.ah;
            attr.alt_port_num = alt.port;
            attr.alt_pkey_index = alt.pkey_index;
            attr.alt_timeout = alt.timeout;
            *mask |= AttrMask::ALT_PATH;
        }
        set(
            self.path_mig_state,
            AttrMask::PATH_MIG_STATE,
            &mut attr.path_mig_state,
            mask,
        );
        set(
            self.rate_limit,
            AttrMask::RATE_LIMIT,
            &mut attr.rate_limit,
            mask,
        );
    }
}

/// One move of the QP state machine with its attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Reset→Init.
    Init(ToInit),
    /// Init→RTR.
    Rtr(ToRtr),
    /// RTR→RTS.
    Rts(ToRts),
    /// RTS→SQD: stop starting new sends; `notify` asks for `IBV_EVENT_SQ_DRAINED`
    /// (`IBV_QP_EN_SQD_ASYNC_NOTIFY`).
    Drain {
        /// Request the SQ-drained event.
        notify: bool,
    },
    /// SQD→RTS or SQE→RTS, changing the given attributes on the way.
    Resume(Changes),
    /// Same-state modify (Init→Init, RTS→RTS, SQD→SQD) changing the given attributes.
    Change(Changes),
    /// UD: change the Q_Key without changing state (legal in Init, RTS and SQD).
    SetQkey(u32),
    /// Any state but Reset → Error: flush everything outstanding.
    Error,
    /// Any state → Reset.
    Reset,
    /// A state step (Reset→Init, Init→RTR, RTR→RTS) with optional attributes of its
    /// transition on top of the required ones: the kernel table's optional column (access
    /// flags and P_Key index at Init→RTR, min_rnr_timer, path migration state or an alternate
    /// path at RTR→RTS, rate limit where the kernel takes it). The table refuses what the
    /// transition does not accept for the QP type, naming the attribute.
    WithOptional(StateStep, Changes),
}

/// The steps that move a QP forward through Init, RTR and RTS, for [`Step::WithOptional`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateStep {
    /// Reset→Init.
    Init(ToInit),
    /// Init→RTR.
    Rtr(ToRtr),
    /// RTR→RTS.
    Rts(ToRts),
}

impl StateStep {
    /// The plain step.
    pub fn step(self) -> Step {
        match self {
            StateStep::Init(s) => Step::Init(s),
            StateStep::Rtr(s) => Step::Rtr(s),
            StateStep::Rts(s) => Step::Rts(s),
        }
    }
}

impl Step {
    /// The state this step leads to from `from`.
    pub fn target(&self, from: QpState) -> QpState {
        match self {
            Step::Init(_) => QpState::Init,
            Step::Rtr(_) => QpState::Rtr,
            Step::Rts(_) | Step::Resume(_) => QpState::Rts,
            Step::Drain { .. } => QpState::Sqd,
            Step::Change(_) | Step::SetQkey(_) => from,
            Step::Error => QpState::Error,
            Step::Reset => QpState::Reset,
            Step::WithOptional(s, _) => s.step().target(from),
        }
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Init(ToInit::Connected { .. }) => "Reset->Init (RC/UC)",
            Step::Init(ToInit::Datagram { .. }) => "Reset->Init (UD)",
            Step::Rtr(ToRtr::Rc { .. }) => "Init->RTR (RC)",
            Step::Rtr(ToRtr::Uc { .. }) => "Init->RTR (UC)",
            Step::Rtr(ToRtr::Ud) => "Init->RTR (UD)",
            Step::Rts(ToRts::Rc { .. }) => "RTR->RTS (RC)",
            Step::Rts(ToRts::Unreliable { .. }) => "RTR->RTS (UC/UD)",
            Step::Drain { .. } => "RTS->SQD",
            Step::Resume(_) => "->RTS (resume)",
            Step::Change(_) => "same-state change",
            Step::SetQkey(_) => "Q_Key change (UD)",
            Step::Error => "->Error",
            Step::Reset => "->Reset",
            Step::WithOptional(s, _) => s.step().name(),
        }
    }

    /// The QP types this step is written for, or `None` if it applies to all.
    fn expected(&self) -> Option<(&'static str, &'static [QpType])> {
        const CONNECTED: &[QpType] = &[QpType::Rc, QpType::Uc];
        const UNRELIABLE: &[QpType] = &[QpType::Uc, QpType::Ud];
        match self {
            Step::Init(ToInit::Connected { .. }) => Some(("RC and UC", CONNECTED)),
            Step::Init(ToInit::Datagram { .. }) | Step::Rtr(ToRtr::Ud) | Step::SetQkey(_) => {
                Some(("UD", &[QpType::Ud]))
            }
            Step::Rtr(ToRtr::Rc { .. }) | Step::Rts(ToRts::Rc { .. }) => {
                Some(("RC", &[QpType::Rc]))
            }
            Step::Rtr(ToRtr::Uc { .. }) => Some(("UC", &[QpType::Uc])),
            Step::Rts(ToRts::Unreliable { .. }) => Some(("UC and UD", UNRELIABLE)),
            Step::WithOptional(s, _) => s.step().expected(),
            _ => None,
        }
    }

    /// The attributes and the full mask of this step for a `qp_type` QP now in `from`.
    ///
    /// The result is not yet checked against the table; [`apply`] does that, and
    /// [`qp_state::validate`] can be called directly.
    pub fn build(
        &self,
        from: QpState,
        qp_type: QpType,
    ) -> std::result::Result<(QpAttr, AttrMask), ModifyError> {
        if let Some((expected, types)) = self.expected() {
            if !types.contains(&qp_type) {
                return Err(ModifyError::WrongQpType {
                    step: self.name(),
                    expected,
                    qp_type,
                });
            }
        }
        let mut a = QpAttr {
            qp_state: self.target(from),
            cur_qp_state: from,
            ..QpAttr::default()
        };
        let mut m = AttrMask::STATE;
        match *self {
            Step::Init(ToInit::Connected {
                port,
                pkey_index,
                access,
            }) => {
                a.port_num = port;
                a.pkey_index = pkey_index;
                a.qp_access_flags = access;
                m |= AttrMask::PORT | AttrMask::PKEY_INDEX | AttrMask::ACCESS_FLAGS;
            }
            Step::Init(ToInit::Datagram {
                port,
                pkey_index,
                qkey,
            }) => {
                a.port_num = port;
                a.pkey_index = pkey_index;
                a.qkey = qkey;
                m |= AttrMask::PORT | AttrMask::PKEY_INDEX | AttrMask::QKEY;
            }
            Step::Rtr(ToRtr::Rc {
                path,
                max_dest_rd_atomic,
                min_rnr_timer,
            }) => {
                m |= write_path(&mut a, &path);
                a.max_dest_rd_atomic = max_dest_rd_atomic;
                a.min_rnr_timer = min_rnr_timer;
                m |= AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
            }
            Step::Rtr(ToRtr::Uc { path }) => m |= write_path(&mut a, &path),
            Step::Rtr(ToRtr::Ud) => {}
            Step::Rts(ToRts::Rc {
                sq_psn,
                timeout,
                retry_cnt,
                rnr_retry,
                max_rd_atomic,
            }) => {
                a.sq_psn = sq_psn;
                a.timeout = timeout;
                a.retry_cnt = retry_cnt;
                a.rnr_retry = rnr_retry;
                a.max_rd_atomic = max_rd_atomic;
                m |= AttrMask::SQ_PSN
                    | AttrMask::TIMEOUT
                    | AttrMask::RETRY_CNT
                    | AttrMask::RNR_RETRY
                    | AttrMask::MAX_QP_RD_ATOMIC;
            }
            Step::Rts(ToRts::Unreliable { sq_psn }) => {
                a.sq_psn = sq_psn;
                m |= AttrMask::SQ_PSN;
            }
            Step::Drain { notify } => {
                if notify {
                    a.en_sqd_async_notify = true;
                    m |= AttrMask::EN_SQD_ASYNC_NOTIFY;
                }
            }
            Step::Resume(c) | Step::Change(c) => c.write(&mut a, &mut m),
            Step::SetQkey(qkey) => {
                a.qkey = qkey;
                m |= AttrMask::QKEY;
            }
            Step::Error | Step::Reset => {}
            Step::WithOptional(s, optional) => {
                let (mut a, mut m) = s.step().build(from, qp_type)?;
                optional.write(&mut a, &mut m);
                return Ok((a, m));
            }
        }
        Ok((a, m))
    }
}

fn write_path(a: &mut QpAttr, p: &PeerPath) -> AttrMask {
    a.path_mtu = p.path_mtu;
    a.dest_qp_num = p.dest_qpn;
    a.rq_psn = p.rq_psn;
    a.ah_attr = p.ah;
    AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN | AttrMask::AV
}

/// Takes QP `qp` (number `qpn`, type `qp_type`, now in `from`) through `step`:
/// builds the attributes, validates them with [`qp_state::validate`], calls
/// [`Device::modify_qp`], then [`Device::query_qp`], and fails with
/// [`ModifyError::StateNotReached`] if the QP is not in the state asked for.
///
/// Emits exactly one `tracing` event per call (target `mlx5_hw::transition`): INFO on success
/// with the attributes the QP reports, WARN on failure with the attributes requested and the
/// error. Returns the queried attributes.
pub fn apply(
    dev: &dyn Device,
    qp: QpId,
    qp_type: QpType,
    qpn: u32,
    from: QpState,
    step: &Step,
) -> Result<QpAttr> {
    let built = step.build(from, qp_type);
    let requested = built.as_ref().map(|(a, _)| *a).unwrap_or_default();
    let mask = built.as_ref().map(|(_, m)| *m).unwrap_or_default();
    let outcome = built.map_err(Into::into).and_then(|(attr, mask)| {
        let next = qp_state::validate(from, &attr, mask, qp_type)?;
        dev.modify_qp(qp, &attr, mask)?;
        let got = dev.query_qp(qp)?;
        if got.qp_state != next {
            return Err(ModifyError::StateNotReached {
                wanted: next,
                reached: got.qp_state,
            }
            .into());
        }
        Ok(got)
    });
    let want = step.target(from);
    match &outcome {
        Ok(got) => log_transition(
            tracing::Level::INFO,
            step,
            qp_type,
            qpn,
            from,
            want,
            mask,
            got,
            None,
        ),
        Err(e) => log_transition(
            tracing::Level::WARN,
            step,
            qp_type,
            qpn,
            from,
            want,
            mask,
            &requested,
            Some(e),
        ),
    }
    outcome
}

/// Applies `steps` in order from `from` (e.g. Reset→Init→RTR→RTS, or the rebuild after an error:
/// Error→Reset→Init→RTR→RTS), stopping at the first failure. Each step logs its own event.
/// Returns the attributes queried after the last step.
pub fn apply_all(
    dev: &dyn Device,
    qp: QpId,
    qp_type: QpType,
    qpn: u32,
    from: QpState,
    steps: &[Step],
) -> Result<QpAttr> {
    let mut cur = from;
    let mut last = None;
    for step in steps {
        let got = apply(dev, qp, qp_type, qpn, cur, step)?;
        cur = got.qp_state;
        last = Some(got);
    }
    match last {
        Some(a) => Ok(a),
        None => dev.query_qp(qp),
    }
}

#[allow(clippy::too_many_arguments)]
fn log_transition(
    level: tracing::Level,
    step: &Step,
    qp_type: QpType,
    qpn: u32,
    from: QpState,
    to: QpState,
    mask: AttrMask,
    a: &QpAttr,
    err: Option<&crate::error::Error>,
) {
    let dgid = a
        .ah_attr
        .grh
        .map(|g| g.dgid.to_string())
        .unwrap_or_default();
    macro_rules! ev {
        ($lvl:expr, $msg:literal) => {
            tracing::event!(
                target: "mlx5_hw::transition",
                $lvl,
                step = step.name(),
                qp_type = qp_type.name(),
                old_state = from.name(),
                new_state = to.name(),
                qpn,
                dest_qpn = a.dest_qp_num,
                rq_psn = a.rq_psn,
                sq_psn = a.sq_psn,
                path_mtu = a.path_mtu.bytes(),
                dlid = a.ah_attr.dlid,
                dgid = dgid.as_str(),
                timeout = a.timeout,
                retry_cnt = a.retry_cnt,
                rnr_retry = a.rnr_retry,
                max_rd_atomic = a.max_rd_atomic,
                max_dest_rd_atomic = a.max_dest_rd_atomic,
                min_rnr_timer = a.min_rnr_timer,
                attr_mask = mask.bits(),
                error = err.map(|e| e.to_string()).unwrap_or_default().as_str(),
                $msg
            )
        };
    }
    if level == tracing::Level::INFO {
        ev!(tracing::Level::INFO, "QP modified");
    } else {
        ev!(tracing::Level::WARN, "QP modify failed");
    }
}
