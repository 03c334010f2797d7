//! Many ring laps on the software ConnectX: thousands of posts of mixed sizes (inline payloads
//! and masked atomics wrapping at the ring end), unsignaled runs, batches; and proof that a
//! BlueFlame write is what the device executes.

use crate::datapath_support;

use datapath_support::*;
use mlx5_hw::QpCap;
use mlx5_qp::{Error, SendWr, Wc, WcStatus};
use mlx5_sim::DriverBugKind;

#[test]
fn thousands_of_posts_over_many_laps() {
    let o = Opts {
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 3,
            max_recv_sge: 1,
            max_inline_data: 200,
        },
        ..Opts::default()
    };
    let (f, mut a, b) = pair(&o);
    let wqe_cnt = a.info.layout.sq.wqe_cnt as u16;
    let mut model = vec![0u8; 32 * 1024];
    let mut fa_count = 0u64;
    let mut wrapped_inline = 0;
    let mut wrapped_masked = 0;
    let mut signaled = Vec::new();
    let mut completed = Vec::new();
    let mut wcs = [Wc::default(); 16];
    let mut total_bbs = 0u64;
    for k in 0..16 {
        a.buf.bytes_mut()[4096 + k] = 0xa0 + k as u8;
        a.buf.bytes_mut()[8192 + k] = 0xb0 + k as u8;
    }
    let n = 4000u64;
    for i in 0..n {
        let payload: Vec<u8> = (0..(i * 37 % 200) as usize + 1)
            .map(|k| (i as usize * 31 + k) as u8)
            .collect();
        let off = (i as usize * 97) % (32 * 1024 - 256);
        let sig = i % 9 == 0 || i == n - 1;
        let kind = i % 5;
        loop {
            let pi = a.qp.sq_pi();
            let local = a.buf.sge(8 * (i as usize % 64), 8);
            let gather = [a.buf.sge(4096, 16), a.buf.sge(8192, 16)];
            let wr = match kind {
                0 | 1 => SendWr::write(i, b.buf.remote(off)).inline(&payload),
                2 => SendWr::masked_fetch_add64(i, b.buf.remote(32 * 1024), local, 1, 0),
                3 => SendWr::masked_comp_swap64(
                    i,
                    b.buf.remote(32 * 1024 + 8),
                    local,
                    0,
                    0,
                    i,
                    0xffff,
                ),
                _ => SendWr::write(i, b.buf.remote(off)).sges(&gather),
            };
            let wr = if sig { wr.signaled() } else { wr };
            let r = if i % 3 == 0 {
                let mut bt = a.qp.batch();
                bt.post(&wr)
            } else {
                a.qp.post(&wr)
            };
            match r {
                Ok(()) => {
                    let bbs = a.qp.sq_pi().wrapping_sub(pi);
                    total_bbs += u64::from(bbs);
                    if (pi % wqe_cnt) + bbs > wqe_cnt {
                        match kind {
                            0 | 1 => wrapped_inline += 1,
                            3 => wrapped_masked += 1,
                            _ => {}
                        }
                    }
                    break;
                }
                Err(Error::SqFull { .. }) => {
                    f.run_until_idle();
                    let k = a.cq.poll(&mut a.qp, &mut wcs).unwrap();
                    completed.extend(wcs[..k].iter().map(|w| (w.wr_id(), w.status())));
                }
                Err(e) => panic!("post {i}: {e}"),
            }
        }
        if sig {
            signaled.push(i);
        }
        match kind {
            0 | 1 => model[off..off + payload.len()].copy_from_slice(&payload),
            2 => fa_count += 1,
            4 => {
                model[off..off + 16].copy_from_slice(&a.buf.bytes()[4096..4112]);
                model[off + 16..off + 32].copy_from_slice(&a.buf.bytes()[8192..8208]);
            }
            _ => {}
        }
    }
    loop {
        f.run_until_idle();
        let k = a.cq.poll(&mut a.qp, &mut wcs).unwrap();
        if k == 0 {
            break;
        }
        completed.extend(wcs[..k].iter().map(|w| (w.wr_id(), w.status())));
    }
    assert!(
        completed.iter().all(|c| c.1 == WcStatus::Success),
        "{completed:?}"
    );
    assert_eq!(completed.iter().map(|c| c.0).collect::<Vec<_>>(), signaled);
    assert_eq!(a.qp.sq_outstanding_bbs(), 0);
    assert!(
        wrapped_inline > 10,
        "inline payloads wrapped {wrapped_inline} times"
    );
    // A 64-bit masked CAS is ctrl + raddr + 32 operand bytes in its first block and the data
    // segment in its second: started in the last block, the WQE wraps.
    assert!(
        wrapped_masked >= 1,
        "masked atomics wrapped {wrapped_masked} times"
    );
    let laps = total_bbs / u64::from(wqe_cnt);
    assert!(laps >= 50, "only {laps} laps of a {wqe_cnt}-block ring");
    assert_eq!(&b.buf.bytes()[..32 * 1024 - 256], &model[..32 * 1024 - 256]);
    let fa = u64::from_ne_bytes(b.buf.bytes()[32 * 1024..32 * 1024 + 8].try_into().unwrap());
    assert_eq!(fa, fa_count);
    no_driver_bugs(&f);
}

#[test]
fn the_device_executes_the_blueflame_copy() {
    let (f, mut a, b) = pair(&Opts::default());
    let ring = a.info.layout.sq.buf;
    // One inline WRITE rung through BlueFlame; then the ring copy is corrupted before the
    // device looks. The device executes the register copy (the original bytes) and reports
    // the difference as a driver bug.
    a.qp.post(
        &SendWr::write(1, b.buf.remote(0))
            .inline(b"from blueflame")
            .signaled(),
    )
    .unwrap();
    // SAFETY: block 0 of the SQ ring; the payload starts at byte 36 (ctrl, raddr, inline hdr).
    unsafe { std::ptr::copy_nonoverlapping(b"CORRUPTED RING".as_ptr(), ring.add(36), 14) };
    let w = pump(&f, &mut a.cq, &mut a.qp, 2);
    assert_eq!(w.len(), 1);
    assert_eq!(&b.buf.bytes()[..14], b"from blueflame");
    let bugs = f.take_driver_bugs();
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    assert_eq!(bugs[0].kind, DriverBugKind::BlueFlameMismatch);

    // Two WQEs and one 8-byte doorbell: the device reads the ring, so corruption shows.
    {
        let mut bt = a.qp.batch();
        bt.post(&SendWr::write(2, b.buf.remote(100)).inline(b"first"))
            .unwrap();
        bt.post(
            &SendWr::write(3, b.buf.remote(200))
                .inline(b"second")
                .signaled(),
        )
        .unwrap();
    }
    // SAFETY: block 1 of the ring holds WQE 2 (PI 1); its payload starts at byte 36.
    unsafe { std::ptr::copy_nonoverlapping(b"FIRST".as_ptr(), ring.add(64 + 36), 5) };
    let w = pump(&f, &mut a.cq, &mut a.qp, 2);
    assert_eq!(w.len(), 1);
    assert_eq!(&b.buf.bytes()[100..105], b"FIRST");
    assert_eq!(&b.buf.bytes()[200..206], b"second");
    no_driver_bugs(&f);
}

#[test]
fn a_blueflame_copy_is_checked_over_the_wqe_not_the_line_padding() {
    let (f, mut a, b) = pair(&Opts::default());
    let ring = a.info.layout.sq.buf;
    // An inline WRITE of 8 bytes is 3 DS: the device reads 48 bytes of the 64-byte line. The
    // ring's bytes 48..64 may differ from the copy's (the copy pads with bytes 32..48).
    a.qp.post(
        &SendWr::write(1, b.buf.remote(0))
            .inline(b"8 bytes!")
            .signaled(),
    )
    .unwrap();
    // SAFETY: block 0 of the SQ ring, past the WQE's 48 bytes.
    unsafe { std::ptr::write_bytes(ring.add(48), 0xa5, 16) };
    let w = pump(&f, &mut a.cq, &mut a.qp, 2);
    assert_eq!(w.len(), 1);
    assert_eq!(&b.buf.bytes()[..8], b"8 bytes!");
    assert!(f.take_driver_bugs().is_empty(), "padding is not the WQE");

    // The last byte of the WQE itself (the inline segment's padding, inside DS 3) is compared.
    a.qp.post(
        &SendWr::write(2, b.buf.remote(8))
            .inline(b"8 more!!")
            .signaled(),
    )
    .unwrap();
    // SAFETY: block 1 of the SQ ring, byte 47: inside the WQE.
    unsafe { *ring.add(64 + 47) ^= 0xff };
    let w = pump(&f, &mut a.cq, &mut a.qp, 2);
    assert_eq!(w.len(), 1);
    assert_eq!(&b.buf.bytes()[8..16], b"8 more!!");
    let bugs = f.take_driver_bugs();
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    assert_eq!(bugs[0].kind, DriverBugKind::BlueFlameMismatch);
}
