//! Every RC opcode between two software ConnectX devices, data checked byte for byte.

use crate::common;

use common::*;
use mlx5_cq::*;
use mlx5_hw::QpType;
use mlx5_sim::AtomicEndianness;
use mlx5_wqe::*;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn send_and_send_imm_scatter_into_rq() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let src = p.mem(false, 8192);
    let dst = p.mem(true, 8192);
    let data = pattern(5000, 7);
    src.write(0, &data);
    // Receive scattered over two buffers.
    p.b.qp.post_recv(&[dst.sge(0, 3000), dst.sge(4096, 4000)]);
    p.b.qp.post_recv(&[dst.sge(0, 64)]);
    // Gather from two SGEs.
    let (s1, s2) = (src.sge(0, 2000), src.sge(2000, 3000));
    let idx = p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&DataSeg::new(s1.length, s1.lkey, s1.addr)).unwrap();
        w.push(&DataSeg::new(s2.length, s2.lkey, s2.addr)).unwrap();
    });
    p.run();
    let c = p.a.scq.poll().expect("send CQE");
    assert_eq!(c.opcode(), CQE_REQ);
    assert_eq!(c.wqe_counter(), idx);
    assert_eq!(c.qpn(), p.a.qp.qpn());
    assert_eq!(c.send_opcode(), OPCODE_SEND);
    let r = p.b.rcq.poll().expect("recv CQE");
    assert_eq!(r.opcode(), CQE_RESP_SEND);
    assert_eq!(r.byte_cnt(), 5000);
    assert_eq!(r.wqe_counter(), 0);
    assert_eq!(r.qpn(), p.b.qp.qpn());
    assert_eq!(r.src_qpn(), p.a.qp.qpn());
    assert_eq!(dst.read(0, 3000), data[..3000]);
    assert_eq!(dst.read(4096, 2000), data[3000..]);
    assert_eq!(
        dst.read(4096 + 2000, 16),
        vec![0; 16],
        "nothing written past the message"
    );
    // SEND_IMM, inline, solicited.
    let imm = 0xdead_beefu32.to_be();
    p.a.qp.post(
        OPCODE_SEND_IMM,
        0,
        CTRL_CQ_UPDATE | CTRL_SOLICITED,
        imm,
        |w| {
            w.push_inline(&[b"hello", b" world"]).unwrap();
        },
    );
    p.run();
    assert_eq!(p.a.scq.poll().unwrap().send_opcode(), OPCODE_SEND_IMM);
    let r = p.b.rcq.poll().unwrap();
    assert_eq!(r.opcode(), CQE_RESP_SEND_IMM);
    assert_eq!(r.imm_bytes(), [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(r.byte_cnt(), 11);
    assert_eq!(r.se(), 1);
    assert_eq!(r.wqe_counter(), 1);
    assert_eq!(dst.read(0, 11), b"hello world");
    p.assert_no_bugs();
}

#[test]
fn write_write_imm_and_read() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let local = p.mem(false, 16384);
    let remote = p.mem(true, 16384);
    let data = pattern(9000, 3);
    local.write(0, &data);
    // Unsignaled WRITE (3 packets at MTU 4096) followed by a signaled WRITE_IMM.
    let ra = remote.addr();
    let (rkey, lkey, la) = (remote.rkey(), local.lkey(), local.addr());
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, 0, 0, |w| {
        w.push(&RaddrSeg::new(ra + 100, rkey)).unwrap();
        w.push(&DataSeg::new(9000, lkey, la)).unwrap();
    });
    p.b.qp.post_recv(&[]);
    let imm = 0x0102_0304u32.to_be();
    let i2 =
        p.a.qp
            .post(OPCODE_RDMA_WRITE_IMM, 0, CTRL_CQ_UPDATE, imm, |w| {
                w.push(&RaddrSeg::new(ra + 12000, rkey)).unwrap();
                w.push_inline(&[b"imm!"]).unwrap();
            });
    p.run();
    let c = p.a.scq.drain();
    assert_eq!(c.len(), 1, "only the signaled WRITE_IMM completes");
    assert_eq!(c[0].wqe_counter(), i2);
    assert_eq!(c[0].send_opcode(), OPCODE_RDMA_WRITE_IMM);
    assert_eq!(remote.read(100, 9000), data);
    assert_eq!(remote.read(99, 1), [0]);
    assert_eq!(remote.read(9100, 1), [0]);
    assert_eq!(remote.read(12000, 4), b"imm!");
    let r = p.b.rcq.poll().expect("WRITE_IMM consumes a receive");
    assert_eq!(r.opcode(), CQE_RESP_WR_IMM);
    assert_eq!(r.imm_bytes(), [1, 2, 3, 4]);
    assert_eq!(r.byte_cnt(), 4);
    // READ back into two local buffers.
    let back = p.mem(false, 16384);
    let (bl, ba) = (back.lkey(), back.addr());
    p.a.qp.post(OPCODE_RDMA_READ, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra + 100, rkey)).unwrap();
        w.push(&DataSeg::new(5000, bl, ba)).unwrap();
        w.push(&DataSeg::new(4000, bl, ba + 8192)).unwrap();
    });
    p.run();
    let c = p.a.scq.poll().expect("READ CQE");
    assert_eq!(c.opcode(), CQE_REQ);
    assert_eq!(c.send_opcode(), OPCODE_RDMA_READ);
    assert_eq!(c.byte_cnt(), 9000);
    assert_eq!(back.read(0, 5000), data[..5000]);
    assert_eq!(back.read(8192, 4000), data[5000..]);
    p.assert_no_bugs();
}

#[allow(clippy::too_many_arguments)]
fn atomic(
    p: &mut Pair,
    opcode: u8,
    opmod: u8,
    remote_off: u64,
    seg: impl FnOnce(&mut WqeWriter),
    result: &Mem,
    size: u32,
    remote: &Mem,
) -> Cqe64 {
    let (ra, rkey) = (remote.addr() + remote_off, remote.rkey());
    let (rl, raddr) = (result.lkey(), result.addr());
    p.a.qp.post(opcode, opmod, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rkey)).unwrap();
        seg(w);
        w.push(&DataSeg::new(size, rl, raddr)).unwrap();
    });
    p.run();
    p.a.scq.poll().expect("atomic CQE")
}

/// Atomics on target memory and replies in the devices' atomic byte order: host order by
/// default (`mlx5_core` `handle_hca_cap_atomic` selects host endianness when offered), big-endian
/// for a device in `atomic_req_8B_endianness_mode` 0; 32-bit masked replies are big-endian in
/// both (UCX `ib_mlx5dv_md.c`, `ext_atomic_arg_sizes_be`). The AtomicETH operands are numbers.
fn atomics_in(order: AtomicEndianness) {
    let mut o = Opts::new(QpType::Rc);
    o.atomic_endianness = order;
    let mut p = Pair::new(o);
    let big = order == AtomicEndianness::Big;
    // An 8-byte target or reply, a 4-byte target, a 4-byte reply.
    let t8 = |v: u64| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_ne_bytes()
        }
    };
    let t4 = |v: u32| {
        if big {
            v.to_be_bytes()
        } else {
            v.to_ne_bytes()
        }
    };
    let r4 = |v: u32| v.to_be_bytes();
    let remote = p.mem(true, 64);
    let result = p.mem(false, 64);
    remote.write(0, &t8(100));
    // FAA 5: remote 100 -> 105, reply 100.
    let c = atomic(
        &mut p,
        OPCODE_ATOMIC_FA,
        0,
        0,
        |w| w.push(&AtomicSeg::faa(5)).unwrap(),
        &result,
        8,
        &remote,
    );
    assert_eq!(c.send_opcode(), OPCODE_ATOMIC_FA);
    assert_eq!(c.byte_cnt(), 8);
    assert_eq!(remote.read(0, 8), t8(105));
    assert_eq!(result.read(0, 8), t8(100));
    // CAS that fails, then one that succeeds.
    atomic(
        &mut p,
        OPCODE_ATOMIC_CS,
        0,
        0,
        |w| w.push(&AtomicSeg::cas(7, 9)).unwrap(),
        &result,
        8,
        &remote,
    );
    assert_eq!(remote.read(0, 8), t8(105));
    assert_eq!(result.read(0, 8), t8(105));
    atomic(
        &mut p,
        OPCODE_ATOMIC_CS,
        0,
        0,
        |w| w.push(&AtomicSeg::cas(105, 0xabcd)).unwrap(),
        &result,
        8,
        &remote,
    );
    assert_eq!(remote.read(0, 8), t8(0xabcd));
    // Masked 64-bit CS: compare the high byte only, swap the low byte.
    remote.write(8, &t8(0x1100_0000_0000_0022));
    atomic(
        &mut p,
        OPCODE_ATOMIC_MASKED_CS,
        OPMOD_EXT_ATOMIC_64,
        8,
        |w| {
            w.push(&MaskedCs64Seg::new(
                0x1100_0000_0000_0000,
                0xff00_0000_0000_0000,
                0x99,
                0xff,
            ))
            .unwrap()
        },
        &result,
        8,
        &remote,
    );
    assert_eq!(remote.read(8, 8), t8(0x1100_0000_0000_0099));
    assert_eq!(result.read(0, 8), t8(0x1100_0000_0000_0022));
    // Masked 64-bit FA with a field boundary at bit 31: the low field's carry is dropped.
    remote.write(16, &t8(0x0000_0001_ffff_ffff));
    atomic(
        &mut p,
        OPCODE_ATOMIC_MASKED_FA,
        OPMOD_EXT_ATOMIC_64,
        16,
        |w| w.push(&MaskedFa64Seg::new(1, 0x8000_0000)).unwrap(),
        &result,
        8,
        &remote,
    );
    assert_eq!(remote.read(16, 8), t8(0x0000_0001_0000_0000));
    // Masked 32-bit CS and FA on a 4-byte aligned word.
    remote.write(28, &t4(0x0000_00aa));
    atomic(
        &mut p,
        OPCODE_ATOMIC_MASKED_CS,
        OPMOD_EXT_ATOMIC_32,
        28,
        |w| {
            w.push(&MaskedCs32Seg::new(0xaa, 0xff, 0x5500, 0xff00))
                .unwrap()
        },
        &result,
        4,
        &remote,
    );
    assert_eq!(remote.read(28, 4), t4(0x0000_55aa));
    assert_eq!(result.read(0, 4), r4(0xaa));
    atomic(
        &mut p,
        OPCODE_ATOMIC_MASKED_FA,
        OPMOD_EXT_ATOMIC_32,
        28,
        |w| w.push(&MaskedFa32Seg::new(0x10, 0)).unwrap(),
        &result,
        4,
        &remote,
    );
    assert_eq!(remote.read(28, 4), t4(0x0000_55ba));
    assert_eq!(result.read(0, 4), r4(0x55aa));
    p.assert_no_bugs();
}

#[test]
fn atomics_run_in_host_order_by_default() {
    atomics_in(AtomicEndianness::Host);
}

#[test]
fn atomics_run_big_endian_on_a_device_in_mode_0() {
    atomics_in(AtomicEndianness::Big);
}

#[test]
fn atomic_operands_are_big_endian_on_the_wire_whatever_the_mode() {
    // The FAA of `atomics_in` captured: the AtomicETH add and the AtomicAckETH original value
    // are big-endian numbers (IBTA Vol 1 §9.3.4, §9.3.6), the same bytes in both modes.
    for order in [AtomicEndianness::Host, AtomicEndianness::Big] {
        let mut o = Opts::new(QpType::Rc);
        o.atomic_endianness = order;
        let mut p = Pair::new(o);
        let remote = p.mem(true, 64);
        let result = p.mem(false, 64);
        let v = 0x0102_0304_0506_0708u64;
        remote.write(
            0,
            &if order == AtomicEndianness::Big {
                v.to_be_bytes()
            } else {
                v.to_ne_bytes()
            },
        );
        let dir = std::env::temp_dir().join(format!(
            "mlx5-sim-atomic-wire-{}-{order:?}.pcap",
            std::process::id()
        ));
        p.fabric.capture_to(&dir).unwrap();
        atomic(
            &mut p,
            OPCODE_ATOMIC_FA,
            0,
            0,
            |w| w.push(&AtomicSeg::faa(0x10)).unwrap(),
            &result,
            8,
            &remote,
        );
        p.fabric.stop_capture().unwrap();
        let frames: Vec<Vec<u8>> = mlx5_sim::pcap::PcapReader::open(&dir)
            .unwrap()
            .map(|r| r.unwrap().data)
            .collect();
        let _ = std::fs::remove_file(&dir);
        let req = frames
            .iter()
            .filter_map(|f| mlx5_sim::wire::Packet::parse(f).ok())
            .find(|k| k.atomic_eth.is_some())
            .expect("the FetchAdd request");
        assert_eq!(req.atomic_eth.unwrap().swap_add, 0x10);
        let ack = frames
            .iter()
            .filter_map(|f| mlx5_sim::wire::Packet::parse(f).ok())
            .find(|k| k.atomic_ack_eth.is_some())
            .expect("the atomic ACK");
        assert_eq!(ack.atomic_ack_eth.unwrap().orig, v, "{order:?}");
        p.assert_no_bugs();
    }
}

#[test]
fn srq_receives_in_post_order_with_wqe_index() {
    let o = Opts::new(QpType::Rc);
    let fabric = mlx5_sim::Fabric::new();
    let da = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 1]));
    let db = fabric.add_device(mlx5_sim::DeviceConfig::new([10, 0, 0, 2]));
    let pd_b = mlx5_hw::Device::alloc_pd(&db).unwrap();
    let mut srq = Srq::new(&db, pd_b, 7, 0);
    let a = side(&da, &o, None);
    let b = side_in(&db, pd_b, &o, Some(&srq));
    let mut p = Pair {
        fabric,
        a,
        b,
        opts: o,
    };
    p.connect();
    let src = p.mem(false, 256);
    let dst = p.mem(true, 4096);
    src.write(0, b"abcdefgh");
    let i0 = srq.post(&[dst.sge(0, 64)]);
    let i1 = srq.post(&[dst.sge(1024, 64)]);
    let s = src.sge(0, 8);
    for k in 0..2u32 {
        p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&DataSeg::new(4 + k * 4, s.lkey, s.addr)).unwrap();
        });
    }
    p.run();
    let r = p.b.rcq.drain();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].wqe_counter() as u32, i0);
    assert_eq!(r[1].wqe_counter() as u32, i1);
    assert_eq!(r[0].srqn(), srq.info.layout.srqn);
    assert_eq!(dst.read(0, 4), b"abcd");
    assert_eq!(dst.read(1024, 8), b"abcdefgh");
    // Freed WQEs are reused through the list.
    srq.free(i0);
    srq.free(i1);
    for _ in 0..12 {
        let i = srq.post(&[dst.sge(2048, 64)]);
        p.a.qp.post(OPCODE_SEND, 0, CTRL_CQ_UPDATE, 0, |w| {
            w.push(&DataSeg::new(8, s.lkey, s.addr)).unwrap();
        });
        p.run();
        let r = p.b.rcq.poll().expect("recv");
        assert_eq!(r.wqe_counter() as u32, i);
        srq.free(i);
        p.a.scq.drain();
    }
    p.assert_no_bugs();
}

#[test]
fn frames_on_the_wire_are_rocev2_and_can_be_captured() {
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let path = std::env::temp_dir().join(format!("mlx5-sim-capture-{}.pcap", std::process::id()));
    p.fabric.capture_to(&path).unwrap();
    let remote = p.mem(true, 8192);
    let local = p.mem(false, 8192);
    let (ra, rk, ll, la) = (remote.addr(), remote.rkey(), local.lkey(), local.addr());
    p.a.qp.post(OPCODE_RDMA_WRITE, 0, CTRL_CQ_UPDATE, 0, |w| {
        w.push(&RaddrSeg::new(ra, rk)).unwrap();
        w.push(&DataSeg::new(5000, ll, la)).unwrap();
    });
    p.run();
    assert_eq!(
        p.fabric.stop_capture().unwrap(),
        6,
        "5 WRITE packets at path MTU 1024, one ACK"
    );
    let frames: Vec<_> = mlx5_sim::pcap::PcapReader::open(&path).unwrap().collect();
    let pkts: Vec<_> = frames
        .into_iter()
        .map(|r| mlx5_sim::wire::Packet::parse(&r.unwrap().data).unwrap())
        .collect();
    let _ = std::fs::remove_file(&path);
    use mlx5_sim::wire::Opcode;
    assert_eq!(pkts[0].bth.opcode, Opcode::RC_RDMA_WRITE_FIRST);
    assert_eq!(pkts[0].reth.map(|r| r.dma_len), Some(5000));
    assert_eq!(pkts[0].bth.psn.get(), 200);
    assert_eq!(pkts[0].bth.dest_qp, p.b.qp.qpn());
    assert_eq!(pkts[0].payload.len(), 1024);
    for (k, m) in pkts.iter().enumerate().take(4).skip(1) {
        assert_eq!(m.bth.opcode, Opcode::RC_RDMA_WRITE_MIDDLE);
        assert_eq!(m.bth.psn.get(), 200 + k as u32);
        assert!(!m.bth.ack_req);
    }
    assert_eq!(pkts[4].bth.opcode, Opcode::RC_RDMA_WRITE_LAST);
    assert_eq!(pkts[4].payload.len(), 5000 - 4 * 1024);
    assert!(pkts[4].bth.ack_req);
    assert_eq!(pkts[5].bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(pkts[5].bth.psn.get(), 204);
    assert_eq!(pkts[5].bth.dest_qp, p.a.qp.qpn());
    assert_eq!(pkts[5].addr.udp_src_port, pkts[0].addr.udp_src_port);
    p.assert_no_bugs();
}

/// The ACK of a request leaves in the step that delivered the request: a responder that sees
/// its WRITE_WITH_IMM's CQE and destroys its QP at once (an application done with the
/// connection) does not leave the requester retrying into RETRY_EXC_ERR.
#[test]
fn the_ack_leaves_before_the_responder_can_destroy_its_qp() {
    use mlx5_hw::Device;
    let mut p = Pair::new(Opts::new(QpType::Rc));
    let remote = p.mem(true, 64);
    let (ra, rkey) = (remote.addr(), remote.rkey());
    p.b.qp.post_recv(&[]);
    p.a.qp.post(
        OPCODE_RDMA_WRITE_IMM,
        0,
        CTRL_CQ_UPDATE,
        7u32.to_be(),
        |w| {
            w.push(&RaddrSeg::new(ra, rkey)).unwrap();
            w.push_inline(&[b"last"]).unwrap();
        },
    );
    // Step until B's completion is visible, as B's application would poll it.
    let mut steps = 0;
    while p.b.rcq.peek(0).is_none() {
        p.fabric.step();
        steps += 1;
        assert!(steps < 64, "the WRITE_WITH_IMM never arrived");
    }
    assert_eq!(p.b.rcq.poll().expect("B's CQE").opcode(), CQE_RESP_WR_IMM);
    p.b.dev.destroy_qp(p.b.qp.info.id).expect("destroy B's QP");
    // Long enough for every retry of A's timer to have fired, had the ACK been lost.
    p.fabric.advance(std::time::Duration::from_secs(60));
    let c = p.a.scq.poll().expect("A's CQE");
    assert_eq!(
        (c.opcode(), c.send_opcode()),
        (CQE_REQ, OPCODE_RDMA_WRITE_IMM),
        "A's WRITE_WITH_IMM was acknowledged, not failed"
    );
    assert_eq!(remote.read(0, 4), b"last");
}
