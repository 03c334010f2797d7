//! Golden vectors for CQEs, the ownership rule and the CQ doorbell encodings, in plain Rust.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`struct mlx5_cqe64`, `struct mlx5_err_cqe`,
//! `mlx5dv_get_cqe_*`), `cq.c` (`get_sw_cqe`, `update_cons_index`, `mlx5_arm_cq`,
//! `mlx5_handle_error_cqe`); `docs/wqe-layout.md` §9–§11.

use mlx5_cq::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn cqe(bytes: &[u8]) -> Cqe64 {
    Cqe64::from_bytes(bytes.try_into().expect("64 bytes"))
}

#[test]
fn op_own_decoding() {
    // `docs/wqe-layout.md` §9: 0xd3 → owner 1, se 1, format 0, opcode 13 (REQ_ERR).
    let mut raw = [0u8; 64];
    for (op_own, want) in [
        (0xd3u8, (1, 1, 0, CQE_REQ_ERR)),
        (0xf0, (0, 0, 0, CQE_INVALID)),
        (0x01, (1, 0, 0, CQE_REQ)),
        (0x26, (0, 1, 1, CQE_RESP_SEND)),
        (0x3b, (1, 1, 2, CQE_RESP_SEND_IMM)),
        (0x0c, (0, 0, 3, CQE_REQ)),
        (0xe0, (0, 0, 0, CQE_RESP_ERR)),
    ] {
        raw[63] = op_own;
        let c = cqe(&raw);
        assert_eq!(
            (c.owner(), c.se(), c.format(), c.opcode()),
            want,
            "op_own {op_own:#04x}"
        );
    }
    let mut c = cqe(&raw);
    c.set_owner(1);
    assert_eq!(c.op_own, 0xe1);
    c.set_owner(2); // only bit 0 of the value counts
    assert_eq!(c.op_own, 0xe0);
}

#[test]
fn requester_cqe_fields() {
    // A REQ CQE for an RDMA_WRITE (send opcode 0x08) on QP 0x123, WQE counter 0x0010,
    // byte count 0, owner 1.
    let raw = hex("00000000 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 00000000 00000000
         00000000 00000000 08000123 0010 00 01");
    let c = cqe(&raw);
    assert_eq!(c.opcode(), CQE_REQ);
    assert_eq!(c.send_opcode(), 0x08);
    assert_eq!(c.qpn(), 0x123);
    assert_eq!(c.wqe_counter(), 0x10);
    assert_eq!(c.owner(), 1);
    assert!(!c.is_error());
    assert_eq!(c.as_bytes()[..], raw[..]);
}

#[test]
fn responder_cqe_fields() {
    // RESP_SEND_IMM: 4096 bytes from source QP 0x000abc, immediate ca fe ba be (network order,
    // kept raw), SRQN 0x000777, SLID 0x0012, WQE counter 5.
    let raw = hex("00000000 00000000 00000000 00000000
         00000000 00000012 00000abc 00000000
         00000777 cafebabe 00000000 00001000
         00000000 00000000 00000042 0005 00 30");
    let c = cqe(&raw);
    assert_eq!(c.opcode(), CQE_RESP_SEND_IMM);
    assert_eq!(c.byte_cnt(), 4096);
    assert_eq!(c.src_qpn(), 0xabc);
    assert_eq!(c.imm_bytes(), [0xca, 0xfe, 0xba, 0xbe]);
    assert_eq!(c.srqn(), 0x777);
    assert_eq!(c.slid.get(), 0x12);
    assert_eq!(c.qpn(), 0x42);
    assert_eq!(c.wqe_counter(), 5);
}

#[test]
fn error_cqe_fields() {
    // REQ_ERR on QP 0x000123 for an RDMA_WRITE at WQE counter 3: syndrome 0x15
    // (TRANSPORT_RETRY_EXC_ERR), vendor syndrome 0x81, owner 0.
    let mut raw = [0u8; 64];
    raw[54] = 0x81;
    raw[55] = 0x15;
    raw[56..60].copy_from_slice(&[0x08, 0x00, 0x01, 0x23]);
    raw[60..62].copy_from_slice(&[0x00, 0x03]);
    raw[63] = 0xd0;
    let c = cqe(&raw);
    assert!(c.is_error());
    let e = c.as_err();
    assert_eq!(
        (e.syndrome, e.vendor_err_synd),
        (SYNDROME_TRANSPORT_RETRY_EXC_ERR, 0x81)
    );
    assert_eq!(
        (e.qpn(), e.send_opcode(), e.wqe_counter()),
        (0x123, 0x08, 3)
    );
    assert_eq!(WcStatus::from_syndrome(e.syndrome), WcStatus::RetryExcErr);
    assert_eq!(WcStatus::from_syndrome(e.syndrome) as u8, 12);
    assert_eq!(syndrome_name(e.syndrome), "TRANSPORT_RETRY_EXC_ERR");
}

#[test]
fn every_syndrome_maps_to_rdma_cores_status() {
    // rdma-core cq.c mlx5_handle_error_cqe; numbers from verbs.h enum ibv_wc_status.
    let table = [
        (0x01, 1, "LOCAL_LENGTH_ERR"),
        (0x02, 2, "LOCAL_QP_OP_ERR"),
        (0x04, 4, "LOCAL_PROT_ERR"),
        (0x05, 5, "WR_FLUSH_ERR"),
        (0x06, 6, "MW_BIND_ERR"),
        (0x10, 7, "BAD_RESP_ERR"),
        (0x11, 8, "LOCAL_ACCESS_ERR"),
        (0x12, 9, "REMOTE_INVAL_REQ_ERR"),
        (0x13, 10, "REMOTE_ACCESS_ERR"),
        (0x14, 11, "REMOTE_OP_ERR"),
        (0x15, 12, "TRANSPORT_RETRY_EXC_ERR"),
        (0x16, 13, "RNR_RETRY_EXC_ERR"),
        (0x22, 16, "REMOTE_ABORTED_ERR"),
    ];
    for (s, status, name) in table {
        assert_eq!(WcStatus::from_syndrome(s) as u8, status, "syndrome {s:#x}");
        assert_eq!(syndrome_name(s), name);
    }
    assert_eq!(ALL_SYNDROMES.len(), table.len());
    for s in [0x00, 0x03, 0x07, 0x17, 0x21, 0x23, 0xff] {
        assert_eq!(
            WcStatus::from_syndrome(s),
            WcStatus::GeneralErr,
            "syndrome {s:#x}"
        );
        assert_eq!(WcStatus::GeneralErr as u8, 21);
    }
}

#[test]
fn ownership_across_laps() {
    // A ring of 4 CQEs. Hardware writes owner = lap parity: 0 on lap 0 (ci 0..3), 1 on lap 1
    // (ci 4..7), 0 on lap 2 ...
    let n = 4;
    for ci in 0..32u32 {
        let lap_parity = ((ci / n) & 1) as u8;
        assert_eq!(expected_owner(ci, n), lap_parity, "ci {ci}");
        // A REQ CQE written on this lap is software's ...
        assert!(sw_owned(lap_parity, ci, n), "ci {ci}");
        // ... the one left from the previous lap is not ...
        assert!(!sw_owned(lap_parity ^ 1, ci, n), "ci {ci}");
        // ... and neither is a never-written entry of either parity.
        assert!(!sw_owned(0xf0 | lap_parity, ci, n), "ci {ci}");
    }
    // The rdma-core fill (0xF0) is never software-owned, on any lap.
    assert!((0..64).all(|ci| !sw_owned(CQE_INITIAL_OP_OWN, ci, 8)));
    // The counter is free-running: parity comes from bit log2(n) of ci, also past 2^24.
    assert!(sw_owned(0x01, (1 << 24) + 4, 4));
    assert!(sw_owned(0x00, u32::MAX - 3, 4) == ((u32::MAX - 3) & 4 == 0));
}

#[test]
fn cqe_position_in_a_slot() {
    assert_eq!(cqe64_offset(64), 0);
    assert_eq!(cqe64_offset(128), 64);
}

#[test]
fn set_ci_encoding() {
    // dbrec[0] = BE32(ci & 0xffffff) (rdma-core update_cons_index).
    assert_eq!(CQ_SET_CI, 0);
    assert_eq!(set_ci_value(5).to_be_bytes(), [0, 0, 0, 5]);
    assert_eq!(
        set_ci_value(0x0123_4567).to_be_bytes(),
        [0x00, 0x23, 0x45, 0x67]
    );
}

#[test]
fn arm_encodings() {
    // dbrec[1] = BE32(sn << 28 | cmd | ci); UAR +0x20 = BE64(that << 32 | cqn) (rdma-core
    // mlx5_arm_cq).
    assert_eq!((CQ_ARM_DB, CQ_DOORBELL), (1, 0x20));
    assert_eq!(arm_value(0, ArmCmd::Next, 0).to_be_bytes(), [0, 0, 0, 0]);
    assert_eq!(
        arm_value(1, ArmCmd::Next, 0x10).to_be_bytes(),
        [0x10, 0x00, 0x00, 0x10]
    );
    assert_eq!(
        arm_value(2, ArmCmd::Solicited, 0x0abcde).to_be_bytes(),
        [0x21, 0x0a, 0xbc, 0xde]
    );
    // sn is 2 bits, ci 24 bits.
    assert_eq!(arm_value(5, ArmCmd::Solicited, 0x0100_0001), 0x1100_0001);
    assert_eq!(
        arm_uar_value(3, ArmCmd::Solicited, 7, 0x000099).to_be_bytes(),
        [0x31, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x99]
    );
    for sn in 0..4 {
        for cmd in [ArmCmd::Next, ArmCmd::Solicited] {
            for ci in [0, 1, 0xff_ffff] {
                assert_eq!(decode_arm(arm_value(sn, cmd, ci)), (sn, cmd, ci));
            }
        }
    }
}

#[test]
fn cqe_opcode_names() {
    let names = [
        (0, "REQ"),
        (1, "RESP_WR_IMM"),
        (2, "RESP_SEND"),
        (3, "RESP_SEND_IMM"),
        (4, "RESP_SEND_INV"),
        (5, "RESIZE_CQ"),
        (6, "NO_PACKET"),
        (12, "SIG_ERR"),
        (13, "REQ_ERR"),
        (14, "RESP_ERR"),
        (15, "INVALID"),
    ];
    for (op, name) in names {
        assert_eq!(cqe_opcode_name(op), name);
    }
    assert_eq!(cqe_opcode_name(7), "RESERVED");
}
