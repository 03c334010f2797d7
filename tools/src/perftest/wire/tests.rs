//! The formats against bytes stock perftest 4.5 wrote (`../testdata/perftest-4.5.transcripts`)
//! and against perftest's struct layout.

use super::*;

/// The endpoint message `ib_write_bw` (client, rxe1) wrote for its first QP.
const CAPTURED: &str = "0000:0001:000013:e7585e:0000044b:00005652ffcf2000:00:00:00:00:00:00:\
                        00:00:00:00:ff:ff:c0:00:02:02:00000000:";

fn captured() -> Vec<u8> {
    let mut b = CAPTURED.as_bytes().to_vec();
    b.resize(KEY_GID_LEN, 0);
    b
}

#[test]
fn versions_are_perftests_sixteen_bytes() {
    let b = encode_version("6.06");
    assert_eq!(&b[..5], b"6.06\0");
    assert!(b[4..].iter().all(|&c| c == 0));
    let v = decode_version(&b).unwrap();
    assert_eq!((v.text.as_str(), v.value), ("6.06", 6.06));
    assert_eq!(
        decode_version(&encode_version(OUR_VERSION)).unwrap().value,
        6.29
    );
    // A peer of this crate's own exchange, and one that is no perftest.
    let mut hello = [0u8; VERSION_LEN];
    hello[..4].copy_from_slice(b"MX5S");
    hello[4] = 3;
    let e = decode_version(&hello).unwrap_err();
    assert!(
        e.contains("own exchange") && e.contains("--perftest"),
        "{e}"
    );
    for junk in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"6.",
        b".5",
        b"6.0x",
        b"",
        b"v6.06",
    ] {
        let mut b = [0u8; VERSION_LEN];
        b[..junk.len()].copy_from_slice(junk);
        let e = decode_version(&b).unwrap_err();
        assert!(e.contains("no perftest version"), "{junk:?}: {e}");
    }
}

#[test]
fn the_mtu_field_is_the_enum_as_text() {
    assert_eq!(encode_mtu(1024), *b"3\0");
    assert_eq!(encode_mtu(4096), *b"5\0");
    for mtu in [256, 512, 1024, 2048, 4096] {
        assert_eq!(decode_mtu(&encode_mtu(mtu)).unwrap(), mtu);
    }
    for bad in [*b"0\0", *b"6\0", *b"3x", *b"\0\0", *b"10"] {
        assert!(decode_mtu(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn endpoint_messages_are_byte_for_byte_perftests() {
    let d = Dest::decode(&captured()).unwrap();
    assert_eq!(
        (d.lid, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr, d.srqn),
        (0, 1, 0x13, 0xe7585e, 0x44b, 0x5652_ffcf_2000, 0)
    );
    let g = d.gid.unwrap();
    assert_eq!(&g[10..], &[0xff, 0xff, 192, 0, 2, 2]);
    assert_eq!(d.encode().unwrap(), captured());
    // The short form (InfiniBand without -x): 58 characters and a NUL.
    let short = Dest { gid: None, ..d };
    let b = short.encode().unwrap();
    assert_eq!(b.len(), KEY_LEN);
    assert_eq!(
        std::str::from_utf8(&b[..KEY_LEN - 1]).unwrap(),
        "0000:0001:000013:e7585e:0000044b:00005652ffcf2000:00000000"
    );
    assert_eq!(Dest::decode(&b).unwrap(), short);
    // Widths perftest's fixed message cannot carry.
    assert!(Dest { qpn: 1 << 24, ..d }.encode().is_none());
    assert!(Dest { psn: 1 << 24, ..d }.encode().is_none());
}

#[test]
fn a_broken_endpoint_message_is_named() {
    let text = |s: &str, len: usize| {
        let mut b = s.as_bytes().to_vec();
        b.resize(len, 0);
        b
    };
    let cases: [(Vec<u8>, &str); 6] = [
        (text("0000:0001:000013", KEY_GID_LEN), "fields"),
        (
            text(&CAPTURED.replace("e7585e", "e7585g"), KEY_GID_LEN),
            "not hexadecimal",
        ),
        (
            text(&CAPTURED.replace(":000013:", ":1000013:"), KEY_GID_LEN),
            "wider than 24 bits",
        ),
        (
            text(&CAPTURED.replace(":ff:ff:", ":fff:ff:"), KEY_GID_LEN),
            "wider than 8 bits",
        ),
        (vec![0xff; KEY_LEN], "not text"),
        (vec![b'0'; 60], "60 bytes"),
    ];
    for (b, want) in cases {
        let e = Dest::decode(&b).unwrap_err();
        assert!(e.contains(want), "want {want:?}: {e}");
    }
}

#[test]
fn the_negotiation_has_perftests_layout() {
    let n = Negotiation {
        test_method: 1,
        connection_type: 2,
        verb: 4,
        tst: 1,
        atomic_type: 1,
        test_type: 0,
        report_fmt: 1,
        size: 0x0102_0304_0506_0708,
        iters: 5000,
        num_of_qps: 3,
        duration: 5,
        data_validation: 1,
        device: DeviceSummary {
            vendor_id: 0x02c9,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            node_guid: 0xfeed,
            phys_port_cnt: 1,
            ..DeviceSummary::default()
        },
        mlx5dv_comp_mask: 0x10,
        ..Negotiation::default()
    };
    let b = n.encode();
    assert_eq!(b.len(), 320);
    assert_eq!(
        &b[..4],
        &1u32.to_be_bytes(),
        "test_method at 0, network order"
    );
    assert_eq!(&b[8..12], &4u32.to_be_bytes(), "verb at 8");
    assert_eq!(&b[28..32], &[0; 4], "padding before size");
    assert_eq!(&b[32..40], &0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(&b[40..48], &5000u64.to_be_bytes());
    assert_eq!(&b[52..56], &3u32.to_be_bytes(), "num_of_qps at 52");
    assert_eq!(&b[76..80], &1u32.to_be_bytes(), "data_validation at 76");
    // struct ibv_device_attr at 80, raw (host order): vendor_id at +96, max_qp_rd_atom +144.
    assert_eq!(&b[176..180], &0x02c9u32.to_ne_bytes());
    assert_eq!(&b[224..228], &16u32.to_ne_bytes());
    assert_eq!(b[80 + 227], 1, "phys_port_cnt");
    assert_eq!(&b[312..320], &0x10u64.to_be_bytes());
    assert_eq!(Negotiation::decode(&b), n);
}

#[test]
fn mismatches_name_both_values_in_perftests_words() {
    let a = Negotiation {
        verb: 2,
        tst: 0,
        size: 2,
        iters: 1000,
        num_of_qps: 1,
        duration: 5,
        report_fmt: 1,
        ..Negotiation::default()
    };
    assert!(Negotiation::mismatches(&a, &a).is_empty());
    let b = Negotiation {
        verb: 0,
        atomic_type: 1,
        size: 64,
        num_of_qps: 2,
        data_validation: 1,
        device: DeviceSummary {
            max_qp_rd_atom: 128,
            ..DeviceSummary::default()
        },
        ..a
    };
    let m = Negotiation::mismatches(&a, &b);
    assert_eq!(
        m,
        [
            "verb mismatch: local=WRITE, remote=SEND",
            "atomicType mismatch: local=CMP_AND_SWAP, remote=FETCH_AND_ADD",
            "size mismatch: local=2, remote=64",
            "num_of_qps mismatch: local=1, remote=2",
            "data_validation mismatch: local=OFF, remote=ON",
        ]
    );
    let c = Negotiation { verb: 99, ..a };
    assert!(Negotiation::mismatches(&a, &c)[0].ends_with("remote=99"));
}

#[test]
fn bandwidth_reports_decode_what_perftest_sent() {
    // ib_write_bw -n 20 -s 4096 -q 2, the client's report: 4096 bytes, 40 messages, then the
    // peak, the average (MiB/s) and the message rate (Mpps).
    let hex = |s: &str| -> [u8; 8] {
        let v = u64::from_str_radix(s, 16).unwrap();
        v.to_be_bytes()
    };
    let fields = [
        hex("0000000000001000"),
        hex("0000000000000028"),
        hex("3fef78c99941c22e"),
        hex("3febc9ddbfb0bfc2"),
        hex("3f2d236deb42cbec"),
    ];
    let r = BwReport::decode(&fields).unwrap();
    assert_eq!((r.size, r.iters), (4096, 40));
    assert!(
        (r.bw_peak - 0.983).abs() < 1e-3 && (r.bw_avg - 0.868).abs() < 1e-3,
        "{r:?}"
    );
    assert!(
        (r.msg_rate - r.bw_avg / 4096.0 * 1.048576).abs() < 1e-6,
        "{r:?}"
    );
    assert_eq!(BwReport::decode(&r.encode()).unwrap(), r);
    let mut nan = fields;
    nan[3] = f64::NAN.to_be_bytes();
    assert!(BwReport::decode(&nan).unwrap_err().contains("average"));
}
