//! Objects laid out like the real thing: what `mlx5dv_init_obj` would describe.

use crate::common;

use common::*;
use mlx5_hw::{AccessFlags, AhAttr, CqInitAttr, Device, Error, GlobalRoute, LinkLayer, QpType};
use mlx5_sim::{DeviceConfig, Fabric};

#[test]
fn qp_cq_srq_memory_layout() {
    let fabric = Fabric::new();
    let d = fabric.add_device(DeviceConfig::new([192, 168, 1, 7]));
    let mut o = Opts::new(QpType::Rc);
    o.cap = mlx5_hw::QpCap {
        max_send_wr: 10,
        max_recv_wr: 5,
        max_send_sge: 2,
        max_recv_sge: 3,
        max_inline_data: 0,
    };
    o.cqe_size = 128;
    let s = side(&d, &o, None);
    let l = s.qp.info.layout;
    // One buffer, RQ first, ending at the guard page (`mem::DmaBuf`): SQ 64 × 64 bytes.
    assert_eq!(l.rq.buf as usize % 64, 0, "64-byte aligned");
    assert_eq!(
        (l.sq.buf as usize + l.sq.wqe_cnt as usize * 64) % 4096,
        0,
        "the SQ ends at a page boundary, where the guard page starts"
    );
    assert_eq!(l.rq.stride, 64, "roundup_pow2(3 × 16)");
    assert_eq!(l.rq.wqe_cnt, 8);
    assert_eq!(
        l.sq.buf as usize,
        l.rq.buf as usize + 8 * 64,
        "SQ right after the RQ"
    );
    assert_eq!(l.sq.stride, 64);
    // RC: overhead 192 + 2 × 16 = 224 -> 256-byte WQEs; 10 × 256 -> 4096 bytes = 64 BBs.
    assert_eq!(l.sq.wqe_cnt, 64);
    assert_eq!(l.max_inline_data, 256 - 192 - 4);
    assert_eq!(s.qp.info.cap.max_inline_data, 60);
    assert_eq!(
        l.bf.reg as usize % 4096,
        0x800,
        "bfreg 0 of a dedicated UAR page"
    );
    assert_eq!(l.bf.size, 256);
    // SAFETY: reading the device-provided record and ring.
    unsafe {
        assert_eq!(mlx5_hw::mmio::read_dbrec(l.dbrec), 0);
        assert_eq!(mlx5_hw::mmio::read_dbrec(l.dbrec.add(1)), 0);
        assert!(
            (0..8 * 64 + 64 * 64).all(|i| *l.rq.buf.add(i) == 0),
            "zeroed"
        );
    }
    let c = s.scq.info.layout;
    assert_eq!((c.cqe_cnt, c.cqe_size), (256, 128));
    assert_eq!(c.cq_uar as usize % 4096, 0);
    // SAFETY: the CQ buffer.
    unsafe {
        assert!(
            (0..256).all(|i| *c.buf.add(i * 128 + 127) == 0xf0),
            "op_own 0xF0 in the 64-byte CQE of each slot"
        );
    }
    let srq = Srq::new(&d, s.pd, 15, 0);
    let sl = srq.info.layout;
    assert_eq!((sl.wqe_cnt, sl.stride, sl.head, sl.tail), (16, 32, 0, 15));
    for i in 0..16u32 {
        // SAFETY: the SRQ buffer.
        let next = unsafe {
            u16::from_be_bytes([
                *sl.buf.add((i * 32 + 2) as usize),
                *sl.buf.add((i * 32 + 3) as usize),
            ])
        };
        assert_eq!(next as u32, (i + 1) % 16);
    }
    // UD: overhead 16 + 48 = 64; inline 128 needs 64 + align16(4 + 128) = 208 -> 256 bytes.
    let ud = side(&d, &Opts::new(QpType::Ud), None);
    assert_eq!(ud.qp.info.layout.max_inline_data, 256 - 64 - 4);
}

#[test]
fn address_handle_av_bytes() {
    let fabric = Fabric::new();
    let a = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let b = fabric.add_device(DeviceConfig::new([10, 0, 0, 2]));
    let pd = a.alloc_pd().unwrap();
    let attr = AhAttr {
        port_num: 1,
        sl: 3,
        grh: Some(GlobalRoute {
            dgid: b.gid(),
            flow_label: 0x12345,
            hop_limit: 9,
            traffic_class: 0x68,
            sgid_index: 0,
        }),
        ..Default::default()
    };
    let ah = a.create_ah(pd, &attr).unwrap();
    let av = ah.av;
    assert_eq!(&av[8..12], &[0x80, 0, 0, 0], "extended AV");
    assert_eq!(av[12], 3 << 1, "RoCE: SL in bits 3:1");
    let sport = u16::from_be_bytes([av[14], av[15]]);
    assert!(sport >= 0xc000);
    assert_eq!(
        &av[20..26],
        &[0x02, 0, 10, 0, 0, 2],
        "destination MAC resolved on the fabric"
    );
    assert_eq!((av[26], av[27]), (0x68, 9));
    assert_eq!(
        u32::from_be_bytes([av[28], av[29], av[30], av[31]]),
        0x12345
    );
    assert_eq!(&av[32..48], &b.gid().0);
    assert_eq!(b.gid(), mlx5_hw::Gid::from_ipv4([10, 0, 0, 2]));
    let bad = AhAttr {
        grh: Some(GlobalRoute {
            dgid: mlx5_hw::Gid::from_ipv4([1, 2, 3, 4]),
            ..Default::default()
        }),
        ..attr
    };
    assert!(a.create_ah(pd, &bad).is_err());
}

#[test]
fn keys_access_and_lifetimes() {
    let fabric = Fabric::new();
    let d = fabric.add_device(DeviceConfig::new([10, 0, 0, 1]));
    let pd = d.alloc_pd().unwrap();
    let m = Mem::new(&d, pd, 64, AccessFlags::LOCAL_WRITE);
    assert_ne!(m.lkey(), m.rkey());
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the (refused) registration.
    let r = unsafe { d.reg_mr(pd, buf.as_mut_ptr(), 8, AccessFlags::REMOTE_WRITE) };
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
    let s = side_in(&d, pd, &Opts::new(QpType::Rc), None);
    assert!(matches!(d.destroy_cq(s.scq.info.id), Err(Error::Busy(_))));
    assert!(matches!(d.dealloc_pd(pd), Err(Error::Busy(_))));
    d.destroy_qp(s.qp.info.id).unwrap();
    d.destroy_cq(s.scq.info.id).unwrap();
    d.destroy_cq(s.rcq.info.id).unwrap();
    d.dereg_mr(m.mr.id).unwrap();
    d.dealloc_pd(pd).unwrap();
    assert!(d
        .create_cq(&CqInitAttr {
            cqe: 4,
            cqe_size: 96,
            ..Default::default()
        })
        .is_err());
    let port = d.query_port(1).unwrap();
    assert_eq!(port.link_layer, LinkLayer::Ethernet);
    assert_eq!(
        d.query_gid(1, 0).unwrap(),
        mlx5_hw::Gid::from_ipv4([10, 0, 0, 1])
    );
    assert!(d.query_port(2).is_err());
    let attr = d.query_device().unwrap();
    assert_eq!(attr.vendor_id, 0x02c9);
    assert!(attr.blueflame && attr.direct_path);
}
