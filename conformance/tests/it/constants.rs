//! Every constant the Rust crates define that `<infiniband/mlx5dv.h>` (or `verbs.h`, for the
//! work-completion status values) also defines, against the header's value, plus the names
//! the Rust crates print for opcodes, syndromes and statuses.

use mlx5_conformance::oracle;
use mlx5_cq as cq;
use mlx5_wqe as wqe;
use mlx5dv_sys as sys;

fn check(items: &[(&str, u64)]) {
    let table = oracle::entries();
    let mut bad = Vec::new();
    for (name, rust) in items {
        match table.iter().find(|(n, _)| n == name) {
            Some((_, c)) if c == rust => {}
            Some((_, c)) => bad.push(format!("{name}: C {c:#x}, Rust {rust:#x}")),
            None => bad.push(format!("{name}: unknown to the C oracle")),
        }
    }
    assert!(
        bad.is_empty(),
        "constant mismatches against mlx5dv.h:\n  {}",
        bad.join("\n  ")
    );
}

macro_rules! c {
    ($name:literal, $v:expr) => {
        ($name, ($v) as u64)
    };
}

#[test]
fn send_opcodes() {
    check(&[
        c!("MLX5_OPCODE_NOP", wqe::OPCODE_NOP),
        c!("MLX5_OPCODE_SEND_INVAL", wqe::OPCODE_SEND_INVAL),
        c!("MLX5_OPCODE_RDMA_WRITE", wqe::OPCODE_RDMA_WRITE),
        c!("MLX5_OPCODE_RDMA_WRITE_IMM", wqe::OPCODE_RDMA_WRITE_IMM),
        c!("MLX5_OPCODE_SEND", wqe::OPCODE_SEND),
        c!("MLX5_OPCODE_SEND_IMM", wqe::OPCODE_SEND_IMM),
        c!("MLX5_OPCODE_TSO", wqe::OPCODE_TSO),
        c!("MLX5_OPCODE_RDMA_READ", wqe::OPCODE_RDMA_READ),
        c!("MLX5_OPCODE_ATOMIC_CS", wqe::OPCODE_ATOMIC_CS),
        c!("MLX5_OPCODE_ATOMIC_FA", wqe::OPCODE_ATOMIC_FA),
        c!("MLX5_OPCODE_ATOMIC_MASKED_CS", wqe::OPCODE_ATOMIC_MASKED_CS),
        c!("MLX5_OPCODE_ATOMIC_MASKED_FA", wqe::OPCODE_ATOMIC_MASKED_FA),
        c!("MLX5_OPCODE_FMR", wqe::OPCODE_FMR),
        c!("MLX5_OPCODE_LOCAL_INVAL", wqe::OPCODE_LOCAL_INVAL),
        c!("MLX5_OPCODE_CONFIG_CMD", wqe::OPCODE_CONFIG_CMD),
        c!("MLX5_OPCODE_UMR", wqe::OPCODE_UMR),
    ]);
}

/// The send opcodes `wqe-dump` names beyond `mlx5_wqe`'s, where `mlx5dv.h` has them (the
/// others come from Linux `device.h` and DPDK `mlx5_prm.h`, which the oracle does not see).
#[test]
fn decoder_send_opcodes() {
    use mlx5_decode::opcode as o;
    check(&[
        c!("MLX5_OPCODE_SET_PSV", o::SET_PSV),
        c!("MLX5_OPCODE_TAG_MATCHING", o::TAG_MATCHING),
        c!("MLX5_OPCODE_FLOW_TBL_ACCESS", o::FLOW_TBL_ACCESS),
        c!("MLX5_OPCODE_MMO", o::MMO),
    ]);
}

#[test]
fn wqe_constants() {
    check(&[
        c!("MLX5_WQE_CTRL_CQ_UPDATE", wqe::CTRL_CQ_UPDATE),
        c!("MLX5_WQE_CTRL_SOLICITED", wqe::CTRL_SOLICITED),
        c!("MLX5_WQE_CTRL_FENCE", wqe::CTRL_FENCE),
        c!(
            "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE",
            wqe::CTRL_INITIATOR_SMALL_FENCE
        ),
        c!("MLX5_SEND_WQE_BB", wqe::SEND_WQE_BB),
        c!("MLX5_SEND_WQE_SHIFT", wqe::SEND_WQE_SHIFT),
        c!("MLX5_INLINE_SEG", wqe::INLINE_SEG),
        c!("MLX5_INVALID_LKEY", wqe::INVALID_LKEY),
        c!("MLX5_EXTENDED_UD_AV", wqe::EXTENDED_UD_AV),
        c!("MLX5_RCV_DBR", cq::RCV_DBR),
        c!("MLX5_SND_DBR", cq::SND_DBR),
        c!("MLX5_RCV_DBR", sys::MLX5_RCV_DBR),
        c!("MLX5_SND_DBR", sys::MLX5_SND_DBR),
    ]);
}

#[test]
fn cqe_constants() {
    check(&[
        c!("MLX5_CQE_OWNER_MASK", 1u8),
        c!("MLX5_CQE_REQ", cq::CQE_REQ),
        c!("MLX5_CQE_RESP_WR_IMM", cq::CQE_RESP_WR_IMM),
        c!("MLX5_CQE_RESP_SEND", cq::CQE_RESP_SEND),
        c!("MLX5_CQE_RESP_SEND_IMM", cq::CQE_RESP_SEND_IMM),
        c!("MLX5_CQE_RESP_SEND_INV", cq::CQE_RESP_SEND_INV),
        c!("MLX5_CQE_RESIZE_CQ", cq::CQE_RESIZE_CQ),
        c!("MLX5_CQE_NO_PACKET", cq::CQE_NO_PACKET),
        c!("MLX5_CQE_SIG_ERR", cq::CQE_SIG_ERR),
        c!("MLX5_CQE_REQ_ERR", cq::CQE_REQ_ERR),
        c!("MLX5_CQE_RESP_ERR", cq::CQE_RESP_ERR),
        c!("MLX5_CQE_INVALID", cq::CQE_INVALID),
        c!("MLX5_INLINE_SCATTER_32", cq::INLINE_SCATTER_32),
        c!("MLX5_INLINE_SCATTER_64", cq::INLINE_SCATTER_64),
        c!("MLX5_CQ_DOORBELL", cq::CQ_DOORBELL),
        c!("MLX5_CQ_DB_REQ_NOT_SOL", cq::CQ_DB_REQ_NOT_SOL),
        c!("MLX5_CQ_DB_REQ_NOT", cq::CQ_DB_REQ_NOT),
        c!(
            "MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT",
            cq::VENDOR_SYNDROME_ODP_PFAULT
        ),
    ]);
    // The 0xF0 fill rdma-core gives new CQs is opcode INVALID with owner 0.
    assert_eq!(
        cq::CQE_INITIAL_OP_OWN as u64,
        oracle::value("MLX5_CQE_INVALID") << 4
    );
}

#[test]
fn syndromes_and_their_names() {
    let table = oracle::entries();
    let mut seen = 0;
    for &s in cq::ALL_SYNDROMES.iter() {
        let name = format!("MLX5_CQE_SYNDROME_{}", cq::syndrome_name(s));
        let c = table.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(c, Some(s as u64), "{name}");
        seen += 1;
    }
    // And the header has no syndrome the Rust table lacks.
    let in_header = table
        .iter()
        .filter(|(n, _)| n.starts_with("MLX5_CQE_SYNDROME_"))
        .count();
    assert_eq!(seen, in_header);
}

#[test]
fn wc_status_values_and_names() {
    let all = cq::WcStatus::ALL;
    let items: Vec<(&str, u64)> = all.iter().map(|s| (s.name(), *s as u64)).collect();
    check(&items);
}

#[test]
fn opcode_names_are_rdma_cores() {
    for (name, v) in oracle::entries() {
        if let Some(suffix) = name.strip_prefix("MLX5_OPCODE_") {
            if let Some(rust) = wqe::opcode_name(v as u8) {
                assert_eq!(rust, suffix, "name of send opcode {v:#x}");
            }
            // wqe-dump names every send opcode the header defines, as the header does.
            assert_eq!(
                mlx5_decode::send_opcode_name(v as u8),
                Some(suffix),
                "wqe-dump's name of send opcode {v:#x}"
            );
        }
        if let Some(suffix) = name.strip_prefix("MLX5_CQE_") {
            let is_opcode = name != "MLX5_CQE_OWNER_MASK"
                && !suffix.starts_with("SYNDROME_")
                && !suffix.starts_with("VENDOR_")
                && !suffix.starts_with("RES_")
                && !suffix.starts_with("L");
            if is_opcode {
                assert_eq!(
                    cq::cqe_opcode_name(v as u8),
                    suffix,
                    "name of CQE opcode {v}"
                );
            }
        }
    }
}

#[test]
fn mlx5dv_flags() {
    check(&[
        c!("MLX5DV_OBJ_QP", sys::MLX5DV_OBJ_QP),
        c!("MLX5DV_OBJ_CQ", sys::MLX5DV_OBJ_CQ),
        c!("MLX5DV_OBJ_SRQ", sys::MLX5DV_OBJ_SRQ),
        c!("MLX5DV_OBJ_RWQ", sys::MLX5DV_OBJ_RWQ),
        c!("MLX5DV_OBJ_DM", sys::MLX5DV_OBJ_DM),
        c!("MLX5DV_OBJ_AH", sys::MLX5DV_OBJ_AH),
        c!("MLX5DV_OBJ_PD", sys::MLX5DV_OBJ_PD),
        c!(
            "MLX5DV_QP_MASK_UAR_MMAP_OFFSET",
            sys::MLX5DV_QP_MASK_UAR_MMAP_OFFSET
        ),
        c!(
            "MLX5DV_QP_MASK_RAW_QP_HANDLES",
            sys::MLX5DV_QP_MASK_RAW_QP_HANDLES
        ),
        c!(
            "MLX5DV_QP_MASK_RAW_QP_TIR_ADDR",
            sys::MLX5DV_QP_MASK_RAW_QP_TIR_ADDR
        ),
        c!("MLX5DV_SRQ_MASK_SRQN", sys::MLX5DV_SRQ_MASK_SRQN),
        c!(
            "MLX5DV_CONTEXT_FLAGS_CQE_V1",
            sys::MLX5DV_CONTEXT_FLAGS_CQE_V1
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_OBSOLETE",
            sys::MLX5DV_CONTEXT_FLAGS_OBSOLETE
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED",
            sys::MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW",
            sys::MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP",
            sys::MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD",
            sys::MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE",
            sys::MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE
        ),
        c!(
            "MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS",
            sys::MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_CQE_COMPRESION",
            sys::MLX5DV_CONTEXT_MASK_CQE_COMPRESION
        ),
        c!("MLX5DV_CONTEXT_MASK_SWP", sys::MLX5DV_CONTEXT_MASK_SWP),
        c!(
            "MLX5DV_CONTEXT_MASK_STRIDING_RQ",
            sys::MLX5DV_CONTEXT_MASK_STRIDING_RQ
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS",
            sys::MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_DYN_BFREGS",
            sys::MLX5DV_CONTEXT_MASK_DYN_BFREGS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE",
            sys::MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS",
            sys::MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_DC_ODP_CAPS",
            sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK",
            sys::MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS",
            sys::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD",
            sys::MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_DCI_STREAMS",
            sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH",
            sys::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH
        ),
        c!(
            "MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD",
            sys::MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD
        ),
        c!(
            "MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
            sys::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS
        ),
        c!(
            "MLX5DV_QP_INIT_ATTR_MASK_DC",
            sys::MLX5DV_QP_INIT_ATTR_MASK_DC
        ),
        c!(
            "MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS",
            sys::MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS
        ),
        c!(
            "MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS",
            sys::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS
        ),
        c!(
            "MLX5DV_QP_CREATE_TUNNEL_OFFLOADS",
            sys::MLX5DV_QP_CREATE_TUNNEL_OFFLOADS
        ),
        c!(
            "MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC",
            sys::MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC
        ),
        c!(
            "MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC",
            sys::MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC
        ),
        c!(
            "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
            sys::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
        ),
        c!(
            "MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE",
            sys::MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE
        ),
        c!(
            "MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE",
            sys::MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE
        ),
        c!(
            "MLX5DV_QP_CREATE_SIG_PIPELINING",
            sys::MLX5DV_QP_CREATE_SIG_PIPELINING
        ),
        c!("MLX5DV_DCTYPE_DCT", sys::MLX5DV_DCTYPE_DCT),
        c!("MLX5DV_DCTYPE_DCI", sys::MLX5DV_DCTYPE_DCI),
        c!(
            "MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE",
            sys::MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE
        ),
        c!(
            "MLX5DV_CQ_INIT_ATTR_MASK_FLAGS",
            sys::MLX5DV_CQ_INIT_ATTR_MASK_FLAGS
        ),
        c!(
            "MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE",
            sys::MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE
        ),
        c!(
            "MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD",
            sys::MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD
        ),
        c!(
            "MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED",
            sys::MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED
        ),
        c!(
            "MLX5DV_CQE_RES_FORMAT_HASH",
            sys::MLX5DV_CQE_RES_FORMAT_HASH
        ),
        c!(
            "MLX5DV_CQE_RES_FORMAT_CSUM",
            sys::MLX5DV_CQE_RES_FORMAT_CSUM
        ),
        c!(
            "MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX",
            sys::MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX
        ),
    ]);
    // Every comp_mask bit of the v44 context is inside the mask the Rust side allows.
    let all: u64 = oracle::entries()
        .iter()
        .filter(|(n, _)| n.starts_with("MLX5DV_CONTEXT_MASK_"))
        .fold(0, |a, (_, v)| a | v);
    assert_eq!(all, sys::MLX5DV_CONTEXT_MASK_V44_ALL);
}
