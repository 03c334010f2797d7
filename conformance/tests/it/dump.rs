//! `wqe-dump`'s decoder reading WQEs that rdma-core's own helpers wrote (through the C oracle):
//! every field it reports must sit at the offset and hold the value the helper was given.

use mlx5_conformance::oracle::{self, CtrlArgs, DgramArgs};
use mlx5_decode::{decode, Kind, Options, QpType};

fn meaning(r: &mlx5_decode::Report, name: &str) -> String {
    r.field(name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .meaning
        .clone()
}

#[test]
fn ud_send_built_by_rdma_core_helpers() {
    let mut ctrl = [0u8; 16];
    oracle::set_ctrl_seg(
        &mut ctrl,
        CtrlArgs {
            pi: 0xbeef,
            opcode: 0x0b, // SEND_IMM
            opmod: 0,
            qpn: 0x00abcd,
            fm_ce_se: 0x0a,
            ds: 5,
            signature: 0,
            imm: u32::from_ne_bytes([0x01, 0x02, 0x03, 0x04]),
        },
    );
    let mut av = [0u8; 48];
    let rgid: [u8; 16] = core::array::from_fn(|i| 0xf0 + i as u8);
    oracle::set_dgram_seg(
        &mut av,
        &DgramArgs {
            key: 0x1234_5678 << 32,
            dqp_dct: 0x00_0777,
            ext: 1,
            stat_rate_sl: 0x75,
            fl_mlid: 0x03,
            rlid: 0xc123,
            rmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            tclass: 0x20,
            hop_limit: 0x40,
            grh_gid_fl: 0x4050_0001,
            rgid,
        },
    );
    let mut data = [0u8; 16];
    oracle::set_data_seg(&mut data, 0x800, 0x1357_9bdf, 0x0000_7fff_0000_1000);
    let wqe = [&ctrl[..], &av[..], &data[..]].concat();

    let r = decode(
        Kind::Send,
        &wqe,
        &Options {
            qp_type: QpType::Ud,
            ..Options::default()
        },
    )
    .expect("decodes");
    // Each field's raw bytes are the helper's bytes at the field's offset.
    for s in &r.sections {
        for f in &s.fields {
            assert_eq!(
                &wqe[f.offset..f.offset + f.raw.len()],
                &f.raw[..],
                "{}",
                f.name
            );
        }
    }
    let expect = [
        ("ctrl.opcode", 3, "0x0b SEND_IMM"),
        (
            "ctrl.wqe_index",
            1,
            "WQE index 0xbeef (producer index of the first basic block)",
        ),
        ("ctrl.qpn", 4, "QP number 0x00abcd"),
        ("ctrl.ds", 7, "5 DS = 80 bytes"),
        ("ctrl.imm", 12, "immediate 01 02 03 04 (network order)"),
        ("av.qkey", 16, "Q_Key 0x12345678"),
        ("av.dqp_dct", 24, "EXTENDED_UD_AV | destination QP 0x000777"),
        ("av.stat_rate_sl", 28, "static rate code 7, SL bits 0x5"),
        ("av.rlid", 30, "0xc123 (IB: DLID; RoCE v2: UDP source port)"),
        ("av.rmac", 36, "MAC 02:11:22:33:44:55"),
        ("av.tclass", 42, "traffic class 0x20"),
        ("av.hop_limit", 43, "hop limit 64"),
        (
            "av.grh_gid_fl",
            44,
            "GRH | SGID index 5, flow label 0x00001",
        ),
        ("data.byte_count", 64, "2048 bytes"),
        ("data.lkey", 68, "lkey 0x13579bdf"),
        ("data.addr", 72, "address 0x00007fff00001000"),
    ];
    for (name, off, text) in expect {
        assert_eq!(r.field(name).map(|f| f.offset), Some(off), "{name}");
        assert_eq!(meaning(&r, name), text, "{name}");
    }
    assert!(meaning(&r, "ctrl.fm_ce_se").starts_with("CQ_UPDATE|SOLICITED ("));
    assert_eq!(r.field("av.rgid").unwrap().raw, rgid);
}

#[test]
fn cqe_owner_set_by_rdma_core() {
    let mut cqe = [0u8; 64];
    cqe[63] = 0x20; // RESP_SEND, owner 0
    oracle::set_cqe_owner(&mut cqe, 1);
    let r = decode(Kind::Cqe, &cqe, &Options::default()).expect("decodes");
    let (owner, se, format, opcode) = oracle::cqe_fields(&cqe);
    assert_eq!(
        meaning(&r, "cqe.op_own"),
        format!(
            "opcode {opcode} RESP_SEND, format {format} (no inline data), SE {se}, owner {owner}"
        )
    );
    assert_eq!(owner, 1);
}
