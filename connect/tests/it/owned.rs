//! Connecting owning QPs in one call: in process with chosen PSNs (a PSN that wraps during the
//! run), over TCP, and a failed attempt that leaves the QP ready for the next one.

use std::net::TcpListener;
use std::time::Duration;

use mlx5_connect::{accept_qp, connect_qp, connect_qps, connect_qps_with, ConnectParams};
use mlx5_ctx::{Context, QpInit, SimFabric};
use mlx5_hw::QpState;
use mlx5_qp::{SendWr, WcOpcode};

/// Both PSNs start 20 below the 24-bit wrap; 64 SENDs later both have wrapped, every message
/// arrived in order and the QPs report the PSNs asked for.
#[test]
fn chosen_psns_wrap_during_the_run() {
    let [a, b] = crate::connect_support::contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(256).unwrap(), b.create_cq(256).unwrap());
    let mut qa = pa.create_qp(&QpInit::rc(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::rc(&cb)).unwrap();
    let psn_a = 0x00ff_ffec;
    let psn_b = 0x00ff_fff0;
    let (conn_a, conn_b) = connect_qps_with(
        (&mut qa, &ConnectParams::default().with_psn(psn_a)),
        (&mut qb, &ConnectParams::default().with_psn(psn_b)),
    )
    .unwrap();
    assert_eq!((conn_a.local().psn, conn_b.local().psn), (psn_a, psn_b));
    assert_eq!(qa.query().unwrap().sq_psn, psn_a);
    assert_eq!(qb.query().unwrap().rq_psn, psn_a);
    let src = pa.alloc_mr(64).unwrap();
    let dst = pb.alloc_mr(64 * 64).unwrap();
    for i in 0..64u64 {
        qb.post_recv(i, &[dst.sge(i as usize * 64, 64).unwrap()])
            .unwrap();
    }
    for i in 0..64u64 {
        src.write(0, &i.to_be_bytes()).unwrap();
        let sge = [src.sge(0, 8).unwrap()];
        qa.post(&SendWr::send(i).sges(&sge).signaled()).unwrap();
        cb.wait_for(&mut qb, i, Duration::from_secs(5)).unwrap();
        ca.wait_for(&mut qa, i, Duration::from_secs(5)).unwrap();
        assert_eq!(dst.read_u64_be(i as usize * 64).unwrap(), i);
    }
    // 64 one-packet messages from 0xffffec: PSNs 0xffffec..=0xffffff, then 0x0..=0x2b; a query
    // reports the live next PSNs, as mlx5 and rxe do.
    let next = (psn_a + 64) & 0x00ff_ffff;
    assert_eq!(next, 0x2c);
    assert_eq!(qa.query().unwrap().sq_psn, next, "A's next PSN wrapped");
    assert_eq!(
        qb.query().unwrap().rq_psn,
        next,
        "B expects the wrapped PSN"
    );
}

/// A PSN wider than 24 bits is refused before the QP is touched.
#[test]
fn a_psn_wider_than_24_bits_is_refused() {
    let f = SimFabric::deterministic();
    let (a, b) = (f.add_device(), f.add_device());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&QpInit::rc(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::rc(&cb)).unwrap();
    let e = connect_qps(
        &mut qa,
        &mut qb,
        &ConnectParams::default().with_psn(1 << 24),
    )
    .unwrap_err();
    assert!(e.to_string().contains("24 bits"), "{e}");
    assert_eq!(qa.query().unwrap().qp_state, QpState::Reset);
}

/// A client whose first attempt fails (nobody listens yet) keeps its QP: back in Reset, the
/// same QP then connects over TCP and traffic flows.
#[test]
fn a_failed_connect_leaves_the_qp_reusable() {
    let [a, b] = crate::connect_support::contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&QpInit::rc(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::rc(&cb)).unwrap();
    let params = {
        let mut p = ConnectParams::default();
        p.io_timeout = Duration::from_millis(300);
        p
    };
    // Reserve a port, close it: nobody listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = connect_qp(("127.0.0.1", port), &mut qa, &params, |_| Ok(())).unwrap_err();
    assert!(!e.to_string().is_empty());
    assert_eq!(qa.query().unwrap().qp_state, QpState::Reset);
    assert_eq!(qa.state(), QpState::Reset);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dst = pb.alloc_mr(64).unwrap();
    let sge = dst.sge(0, 64).unwrap();
    let server = std::thread::spawn(move || {
        let conn = accept_qp(&listener, &mut qb, &ConnectParams::default(), |qp| {
            qp.post_recv(9, &[sge])
        })
        .unwrap();
        (conn, qb, cb, dst)
    });
    let _conn = connect_qp(addr, &mut qa, &ConnectParams::default(), |_| Ok(())).unwrap();
    assert_eq!(qa.state(), QpState::Rts);
    let (_c, mut qb, mut cb, dst) = server.join().unwrap();
    let src = pa.alloc_mr(64).unwrap();
    src.write(0, b"again").unwrap();
    let l = [src.sge(0, 5).unwrap()];
    qa.post(&SendWr::send(1).sges(&l).signaled()).unwrap();
    ca.wait_for(&mut qa, 1, Duration::from_secs(5)).unwrap();
    let wc = cb.wait_for(&mut qb, 9, Duration::from_secs(5)).unwrap();
    assert_eq!((wc.opcode(), wc.byte_len()), (WcOpcode::Recv, 5));
    assert_eq!(dst.read(0, 5).unwrap(), b"again");
}

/// A wait on a deterministic fabric steps it; a wait for what never comes ends at its deadline
/// with a message that says what is outstanding and why the device may be idle.
#[test]
fn waits_step_a_deterministic_fabric_and_time_out_clearly() {
    let f = SimFabric::deterministic();
    let (a, b) = (f.add_device(), f.add_device());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&QpInit::rc(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::rc(&cb)).unwrap();
    connect_qps(&mut qa, &mut qb, &ConnectParams::default()).unwrap();
    let (src, dst) = (pa.alloc_mr(64).unwrap(), pb.alloc_mr(64).unwrap());
    src.write(0, b"det").unwrap();
    let l = [src.sge(0, 3).unwrap()];
    qa.post(&SendWr::write(5, dst.remote(0).unwrap()).sges(&l).signaled())
        .unwrap();
    ca.wait_for(&mut qa, 5, Duration::from_secs(5)).unwrap();
    assert_eq!(dst.read(0, 3).unwrap(), b"det");
    let e = cb
        .wait_for(&mut qb, 77, Duration::from_millis(50))
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("gave up after") && msg.contains("deterministic"),
        "{msg}"
    );
}

/// The owning-QP functions give a UD connection the peer's address handle: it is destroyed
/// when the connection drops (no handle is left on either device), and a datagram sent
/// through it arrives before that.
#[test]
fn a_ud_connection_destroys_its_address_handle_when_dropped() {
    let [a, b] = crate::connect_support::contexts();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut ca, mut cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&QpInit::ud(&ca)).unwrap();
    let mut qb = pb.create_qp(&QpInit::ud(&cb)).unwrap();
    // The address handles alive on each side, as the software ConnectX counts them (through
    // rdma-core the model is behind the kernel interface: the AH count is not checked there,
    // the datagram and the clean drop are).
    let ahs = |c: &Context| c.sim_device().map(|d| d.live_objects().ahs);
    let counted = a.sim_device().is_some();
    {
        let (conn_a, _conn_b) = connect_qps(&mut qa, &mut qb, &ConnectParams::default()).unwrap();
        if counted {
            assert_eq!(
                (ahs(&a), ahs(&b)),
                (Some(1), Some(1)),
                "one handle per side for its peer"
            );
        }
        let dst = pb.alloc_mr(64 + 40).unwrap();
        qb.post_recv(7, &[dst.sge(0, 64 + 40).unwrap()]).unwrap();
        let dest = conn_a.ud_peer().unwrap().dest();
        qa.post(&SendWr::send(1).inline(b"datagram").ud(&dest).signaled())
            .unwrap();
        ca.wait_for(&mut qa, 1, Duration::from_secs(5)).unwrap();
        let wc = cb.wait_for(&mut qb, 7, Duration::from_secs(5)).unwrap();
        assert_eq!(wc.opcode(), WcOpcode::Recv);
        assert_eq!(&dst.read(40, 8).unwrap()[..], b"datagram");
    }
    if counted {
        assert_eq!(
            (ahs(&a), ahs(&b)),
            (Some(0), Some(0)),
            "the connections destroyed their handles"
        );
    }
}
