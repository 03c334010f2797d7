// The Linux kernel's `qp_state_table` (drivers/infiniband/core/verbs.c, consulted by
// `ib_modify_qp_is_ok`) and `enum ib_qp_attr_mask` (include/rdma/ib_verbs.h), transcribed by
// hand as data, per kernel version: facts only, no kernel code. Included by
// `hw/tests/qp_state_table.rs` (which checks `mlx5_hw::qp_state`) and by the root crate's
// `tests/sim_transition_table.rs` (which checks the software ConnectX); neither derives it from
// the library it tests. The includer brings `QpState`, `QpType` and `HashMap` into scope.

/// The kernels whose tables are transcribed here (the RC/UC/UD and XRC cells).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kernel {
    /// Linux 6.1 (read in 6.1's verbs.c; the same up to 6.19): `IB_QP_RATE_LIMIT` appears only
    /// in the raw-packet columns of RTR->RTS and RTS->RTS.
    V6_1,
    /// Linux 7.0 and 7.1: commit 42e3aac65c1c "IB/core: Extend rate limit support for RC QPs"
    /// (RDMA pull for the 7.0 merge window) adds `IB_QP_RATE_LIMIT` to the RC optional
    /// parameters of INIT->RTR, RTR->RTS and RTS->RTS ([`KERNEL_TABLE_7_0_ROWS`]).
    V7_0,
    /// Linux 7.2 and later: commit 8b0c66fa058b "IB/core: Delegate IB_QP_RATE_LIMIT validation
    /// to drivers" (RDMA pull for the 7.2 merge window) removes every `IB_QP_RATE_LIMIT` from
    /// the table (the RC/UC/UD cells are 6.1's again) and makes `ib_modify_qp_is_ok` ignore the
    /// bit ([`KERNEL_PASS_THROUGH_7_2`]).
    V7_2,
}

/// Every transcribed kernel, oldest first.
const KERNELS: [Kernel; 3] = [Kernel::V6_1, Kernel::V7_0, Kernel::V7_2];

/// Linux 6.1: `cur next type | required | optional` for every valid cell with RC, UC or UD
/// parameters, in the kernel's own row order. Cells marked valid with no parameters are listed
/// with `-`. Anything absent is not a transition.
const KERNEL_TABLE: &str = "
RESET RESET RC | - | -
RESET RESET UC | - | -
RESET RESET UD | - | -
RESET INIT UD | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_QKEY | -
RESET INIT UC | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS | -
RESET INIT RC | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS | -
INIT RESET RC | - | -
INIT RESET UC | - | -
INIT RESET UD | - | -
INIT ERR RC | - | -
INIT ERR UC | - | -
INIT ERR UD | - | -
INIT INIT UD | - | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_QKEY
INIT INIT UC | - | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS
INIT INIT RC | - | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS
INIT RTR UC | IB_QP_AV IB_QP_PATH_MTU IB_QP_DEST_QPN IB_QP_RQ_PSN | IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX
INIT RTR RC | IB_QP_AV IB_QP_PATH_MTU IB_QP_DEST_QPN IB_QP_RQ_PSN IB_QP_MAX_DEST_RD_ATOMIC IB_QP_MIN_RNR_TIMER | IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX
INIT RTR UD | - | IB_QP_PKEY_INDEX IB_QP_QKEY
RTR RESET RC | - | -
RTR RESET UC | - | -
RTR RESET UD | - | -
RTR ERR RC | - | -
RTR ERR UC | - | -
RTR ERR UD | - | -
RTR RTS UD | IB_QP_SQ_PSN | IB_QP_CUR_STATE IB_QP_QKEY
RTR RTS UC | IB_QP_SQ_PSN | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PATH_MIG_STATE
RTR RTS RC | IB_QP_TIMEOUT IB_QP_RETRY_CNT IB_QP_RNR_RETRY IB_QP_SQ_PSN IB_QP_MAX_QP_RD_ATOMIC | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
RTS RESET RC | - | -
RTS RESET UC | - | -
RTS RESET UD | - | -
RTS ERR RC | - | -
RTS ERR UC | - | -
RTS ERR UD | - | -
RTS RTS UD | - | IB_QP_CUR_STATE IB_QP_QKEY
RTS RTS UC | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS IB_QP_ALT_PATH IB_QP_PATH_MIG_STATE
RTS RTS RC | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS IB_QP_ALT_PATH IB_QP_PATH_MIG_STATE IB_QP_MIN_RNR_TIMER
RTS SQD UD | - | IB_QP_EN_SQD_ASYNC_NOTIFY
RTS SQD UC | - | IB_QP_EN_SQD_ASYNC_NOTIFY
RTS SQD RC | - | IB_QP_EN_SQD_ASYNC_NOTIFY
SQD RESET RC | - | -
SQD RESET UC | - | -
SQD RESET UD | - | -
SQD ERR RC | - | -
SQD ERR UC | - | -
SQD ERR UD | - | -
SQD RTS UD | - | IB_QP_CUR_STATE IB_QP_QKEY
SQD RTS UC | - | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PATH_MIG_STATE
SQD RTS RC | - | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
SQD SQD UD | - | IB_QP_PKEY_INDEX IB_QP_QKEY
SQD SQD UC | - | IB_QP_AV IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX IB_QP_PATH_MIG_STATE
SQD SQD RC | - | IB_QP_PORT IB_QP_AV IB_QP_TIMEOUT IB_QP_RETRY_CNT IB_QP_RNR_RETRY IB_QP_MAX_QP_RD_ATOMIC IB_QP_MAX_DEST_RD_ATOMIC IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
SQE RESET RC | - | -
SQE RESET UC | - | -
SQE RESET UD | - | -
SQE ERR RC | - | -
SQE ERR UC | - | -
SQE ERR UD | - | -
SQE RTS UD | - | IB_QP_CUR_STATE IB_QP_QKEY
SQE RTS UC | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS
SQE RTS RC | - | -
ERR RESET RC | - | -
ERR RESET UC | - | -
ERR RESET UD | - | -
ERR ERR RC | - | -
ERR ERR UC | - | -
ERR ERR UD | - | -
";

/// The XRC columns (`IB_QPT_XRC_INI`, `IB_QPT_XRC_TGT`) of the same table, read in 6.1's
/// verbs.c; no version changes them (7.0's rate-limit rows are RC only). Valid cells without
/// XRC parameters are listed with `-`, as above; SQE->RTS is valid for every type and lists
/// none for XRC.
const KERNEL_TABLE_XRC: &str = "
RESET RESET XRC_INI | - | -
RESET RESET XRC_TGT | - | -
RESET INIT XRC_INI | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS | -
RESET INIT XRC_TGT | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS | -
INIT RESET XRC_INI | - | -
INIT RESET XRC_TGT | - | -
INIT ERR XRC_INI | - | -
INIT ERR XRC_TGT | - | -
INIT INIT XRC_INI | - | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS
INIT INIT XRC_TGT | - | IB_QP_PKEY_INDEX IB_QP_PORT IB_QP_ACCESS_FLAGS
INIT RTR XRC_INI | IB_QP_AV IB_QP_PATH_MTU IB_QP_DEST_QPN IB_QP_RQ_PSN | IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX
INIT RTR XRC_TGT | IB_QP_AV IB_QP_PATH_MTU IB_QP_DEST_QPN IB_QP_RQ_PSN IB_QP_MAX_DEST_RD_ATOMIC IB_QP_MIN_RNR_TIMER | IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX
RTR RESET XRC_INI | - | -
RTR RESET XRC_TGT | - | -
RTR ERR XRC_INI | - | -
RTR ERR XRC_TGT | - | -
RTR RTS XRC_INI | IB_QP_TIMEOUT IB_QP_RETRY_CNT IB_QP_RNR_RETRY IB_QP_SQ_PSN IB_QP_MAX_QP_RD_ATOMIC | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PATH_MIG_STATE
RTR RTS XRC_TGT | IB_QP_TIMEOUT IB_QP_SQ_PSN | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
RTS RESET XRC_INI | - | -
RTS RESET XRC_TGT | - | -
RTS ERR XRC_INI | - | -
RTS ERR XRC_TGT | - | -
RTS RTS XRC_INI | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS IB_QP_ALT_PATH IB_QP_PATH_MIG_STATE
RTS RTS XRC_TGT | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS IB_QP_ALT_PATH IB_QP_PATH_MIG_STATE IB_QP_MIN_RNR_TIMER
RTS SQD XRC_INI | - | IB_QP_EN_SQD_ASYNC_NOTIFY
RTS SQD XRC_TGT | - | IB_QP_EN_SQD_ASYNC_NOTIFY
SQD RESET XRC_INI | - | -
SQD RESET XRC_TGT | - | -
SQD ERR XRC_INI | - | -
SQD ERR XRC_TGT | - | -
SQD RTS XRC_INI | - | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PATH_MIG_STATE
SQD RTS XRC_TGT | - | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
SQD SQD XRC_INI | - | IB_QP_PORT IB_QP_AV IB_QP_TIMEOUT IB_QP_RETRY_CNT IB_QP_RNR_RETRY IB_QP_MAX_QP_RD_ATOMIC IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX IB_QP_PATH_MIG_STATE
SQD SQD XRC_TGT | - | IB_QP_PORT IB_QP_AV IB_QP_TIMEOUT IB_QP_MAX_DEST_RD_ATOMIC IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE
SQE RESET XRC_INI | - | -
SQE RESET XRC_TGT | - | -
SQE ERR XRC_INI | - | -
SQE ERR XRC_TGT | - | -
SQE RTS XRC_INI | - | -
SQE RTS XRC_TGT | - | -
ERR RESET XRC_INI | - | -
ERR RESET XRC_TGT | - | -
ERR ERR XRC_INI | - | -
ERR ERR XRC_TGT | - | -
";

/// Linux 7.0: the rows of [`KERNEL_TABLE`] that changed, as they read in 7.0 (the rest is
/// 6.1's).
const KERNEL_TABLE_7_0_ROWS: &str = "
INIT RTR RC | IB_QP_AV IB_QP_PATH_MTU IB_QP_DEST_QPN IB_QP_RQ_PSN IB_QP_MAX_DEST_RD_ATOMIC IB_QP_MIN_RNR_TIMER | IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_PKEY_INDEX IB_QP_RATE_LIMIT
RTR RTS RC | IB_QP_TIMEOUT IB_QP_RETRY_CNT IB_QP_RNR_RETRY IB_QP_SQ_PSN IB_QP_MAX_QP_RD_ATOMIC | IB_QP_CUR_STATE IB_QP_ALT_PATH IB_QP_ACCESS_FLAGS IB_QP_MIN_RNR_TIMER IB_QP_PATH_MIG_STATE IB_QP_RATE_LIMIT
RTS RTS RC | - | IB_QP_CUR_STATE IB_QP_ACCESS_FLAGS IB_QP_ALT_PATH IB_QP_PATH_MIG_STATE IB_QP_MIN_RNR_TIMER IB_QP_RATE_LIMIT
";

/// Linux 7.2: bits `ib_modify_qp_is_ok` accepts on every valid transition whatever the cell
/// lists (`mask & ~(req_param | opt_param | IB_QP_STATE | IB_QP_RATE_LIMIT)`).
const KERNEL_PASS_THROUGH_7_2: &str = "IB_QP_RATE_LIMIT";

/// `enum ib_qp_attr_mask` values (include/rdma/ib_verbs.h; the same in verbs.h as
/// `IBV_QP_*`).
const KERNEL_BITS: [(&str, u32); 22] = [
    ("IB_QP_STATE", 1),
    ("IB_QP_CUR_STATE", 1 << 1),
    ("IB_QP_EN_SQD_ASYNC_NOTIFY", 1 << 2),
    ("IB_QP_ACCESS_FLAGS", 1 << 3),
    ("IB_QP_PKEY_INDEX", 1 << 4),
    ("IB_QP_PORT", 1 << 5),
    ("IB_QP_QKEY", 1 << 6),
    ("IB_QP_AV", 1 << 7),
    ("IB_QP_PATH_MTU", 1 << 8),
    ("IB_QP_TIMEOUT", 1 << 9),
    ("IB_QP_RETRY_CNT", 1 << 10),
    ("IB_QP_RNR_RETRY", 1 << 11),
    ("IB_QP_RQ_PSN", 1 << 12),
    ("IB_QP_MAX_QP_RD_ATOMIC", 1 << 13),
    ("IB_QP_ALT_PATH", 1 << 14),
    ("IB_QP_MIN_RNR_TIMER", 1 << 15),
    ("IB_QP_SQ_PSN", 1 << 16),
    ("IB_QP_MAX_DEST_RD_ATOMIC", 1 << 17),
    ("IB_QP_PATH_MIG_STATE", 1 << 18),
    ("IB_QP_CAP", 1 << 19),
    ("IB_QP_DEST_QPN", 1 << 20),
    ("IB_QP_RATE_LIMIT", 1 << 25),
];

/// The state a table row names.
fn state(s: &str) -> QpState {
    match s {
        "RESET" => QpState::Reset,
        "INIT" => QpState::Init,
        "RTR" => QpState::Rtr,
        "RTS" => QpState::Rts,
        "SQD" => QpState::Sqd,
        "SQE" => QpState::Sqe,
        "ERR" => QpState::Error,
        _ => panic!("bad state {s}"),
    }
}

/// The QP type a table row names.
fn qp_type(s: &str) -> QpType {
    match s {
        "RC" => QpType::Rc,
        "UC" => QpType::Uc,
        "UD" => QpType::Ud,
        "XRC_INI" => QpType::XrcSend,
        "XRC_TGT" => QpType::XrcRecv,
        _ => panic!("bad type {s}"),
    }
}

/// The mask a table column lists (`-`: none).
fn bits(s: &str) -> u32 {
    if s.trim() == "-" {
        return 0;
    }
    s.split_whitespace()
        .map(|n| {
            KERNEL_BITS
                .iter()
                .find(|(k, _)| *k == n)
                .unwrap_or_else(|| panic!("unknown bit {n}"))
                .1
        })
        .fold(0, |a, b| a | b)
}

/// A table cell: current state, next state, QP type.
type Key = (QpState, QpState, QpType);

/// The rows of a table text, parsed.
fn rows(text: &str) -> Vec<(Key, (u32, u32))> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split('|').collect();
            assert_eq!(parts.len(), 3, "{line}");
            let head: Vec<&str> = parts[0].split_whitespace().collect();
            let key = (state(head[0]), state(head[1]), qp_type(head[2]));
            (key, (bits(parts[1]), bits(parts[2])))
        })
        .collect()
}

/// The table of `k`, parsed: the required and the optional mask of every valid cell.
fn expected_table(k: Kernel) -> HashMap<Key, (u32, u32)> {
    let mut t = HashMap::new();
    for (key, cell) in rows(KERNEL_TABLE).into_iter().chain(rows(KERNEL_TABLE_XRC)) {
        assert!(t.insert(key, cell).is_none(), "duplicate {key:?}");
    }
    if k == Kernel::V7_0 {
        for (key, cell) in rows(KERNEL_TABLE_7_0_ROWS) {
            assert!(t.insert(key, cell).is_some(), "7.0 changes no new cell {key:?}");
        }
    }
    t
}

/// The bits `k`'s `ib_modify_qp_is_ok` accepts on every valid transition.
fn pass_through(k: Kernel) -> u32 {
    match k {
        Kernel::V7_2 => bits(KERNEL_PASS_THROUGH_7_2),
        _ => 0,
    }
}
