//! The cases: each connects a fresh pair ([`connect`]), posts on one side or both and checks
//! the data and the completions on both; [`CASES`] names them in the order they run.

use std::process::Command;
use std::time::{Duration, Instant};

use mlx5_hw::verbs::baseline::{
    BaselineCq, BaselineQp, Completion, SendOp as VOp, SendWr as VWr, Sge as VSge, UdDest as VUd,
};
use mlx5_hw::QpType;
use mlx5_qp::{SendWr, Wc, WcOpcode};
use mlx5_tools::resources::{Resources as Side, VerbsResources as VerbsSide};

use super::pair::*;

fn send(env: &Env, size: usize, imm: Option<u32>, to_rxe: bool, t: QpType) -> R<()> {
    let mut p = connect(
        env,
        Opts {
            qp_type: t,
            ..Opts::default()
        },
    )?;
    let data = pattern(size, 3);
    if to_rxe {
        let r = p.rxe_sge(0, BUF as u32 / 2);
        p.vqp.post_recv(7, &[r]).map_err(e("rxe post_recv"))?;
        p.s.mr.write(BUF / 2, &data).map_err(e("write"))?;
        let sge = [p.sim_sge(BUF / 2, size as u32)];
        let wr = match imm {
            Some(i) => SendWr::send_imm(1, i),
            None => SendWr::send(1),
        };
        p.s.qps[0]
            .post(&wr.sges(&sge).signaled())
            .map_err(e("sim post"))?;
        p.sim_ok("send")?;
        let c = p.rxe_ok("recv")?;
        if c.byte_len as usize != size || c.wr_id != 7 || c.imm != imm {
            return Err(format!("rxe recv {c:?}"));
        }
        check("received", &p.v.mr.read(0, size).unwrap_or_default(), &data)
    } else {
        let r = p.sim_sge(0, BUF as u32 / 2);
        p.s.qps[0].post_recv(7, &[r]).map_err(e("sim post_recv"))?;
        p.v.mr.write(BUF / 2, &data).map_err(e("write"))?;
        let sge = [p.rxe_sge(BUF / 2, size as u32)];
        let op = imm.map_or(VOp::Send, VOp::SendImm);
        p.vpost(&VWr::new(1, op, &sge))?;
        p.rxe_ok("send")?;
        let w = p.sim_ok("recv")?;
        let want_imm = imm.unwrap_or(0);
        if w.byte_len() as usize != size
            || w.wr_id() != 7
            || (imm.is_some() && w.imm_data() != want_imm)
        {
            return Err(format!("sim recv {w:?}"));
        }
        check("received", &p.s.mr.read(0, size).unwrap_or_default(), &data)
    }
}

fn write(env: &Env, size: usize, imm: Option<u32>, to_rxe: bool, t: QpType) -> R<()> {
    let mut p = connect(
        env,
        Opts {
            qp_type: t,
            ..Opts::default()
        },
    )?;
    let data = pattern(size, 9);
    if to_rxe {
        if imm.is_some() {
            p.vqp.post_recv(5, &[]).map_err(e("rxe post_recv"))?;
        }
        p.s.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.sim_sge(0, size as u32)];
        let ra = p.rxe_remote(100)?;
        let wr = match imm {
            Some(i) => SendWr::write_imm(1, ra, i),
            None => SendWr::write(1, ra),
        };
        p.s.qps[0]
            .post(&wr.sges(&sge).signaled())
            .map_err(e("sim post"))?;
        p.sim_ok("write")?;
        if imm.is_some() {
            let c = p.rxe_ok("write-imm recv")?;
            if c.imm != imm || c.wr_id != 5 {
                return Err(format!("rxe recv {c:?}"));
            }
        } else if t == QpType::Uc {
            // No completion at the target: wait until the data is there.
            let end = Instant::now() + WAIT;
            while p.v.mr.read(100, size).unwrap_or_default() != data && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        check(
            "written",
            &p.v.mr.read(100, size).unwrap_or_default(),
            &data,
        )
    } else {
        if imm.is_some() {
            p.s.qps[0].post_recv(5, &[]).map_err(e("sim post_recv"))?;
        }
        p.v.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.rxe_sge(0, size as u32)];
        let (addr, rkey) = p.sim_remote(100)?;
        let op = match imm {
            Some(i) => VOp::WriteImm {
                remote_addr: addr,
                rkey,
                imm: i,
            },
            None => VOp::Write {
                remote_addr: addr,
                rkey,
            },
        };
        p.vpost(&VWr::new(1, op, &sge))?;
        p.rxe_ok("write")?;
        if imm.is_some() {
            let w = p.sim_ok("write-imm recv")?;
            if w.imm_data() != imm.unwrap_or(0) || w.opcode() != WcOpcode::RecvRdmaWithImm {
                return Err(format!("sim recv {w:?}"));
            }
        } else if t == QpType::Uc {
            let end = Instant::now() + WAIT;
            while p.s.mr.read(100, size).unwrap_or_default() != data && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        check(
            "written",
            &p.s.mr.read(100, size).unwrap_or_default(),
            &data,
        )
    }
}

fn read(env: &Env, size: usize, from_rxe: bool) -> R<()> {
    let mut p = connect(env, Opts::default())?;
    let data = pattern(size, 21);
    if from_rxe {
        p.v.mr.write(64, &data).map_err(e("write"))?;
        let sge = [p.sim_sge(0, size as u32)];
        let ra = p.rxe_remote(64)?;
        p.s.qps[0]
            .post(&SendWr::read(1, ra).sges(&sge).signaled())
            .map_err(e("sim post"))?;
        let w = p.sim_ok("read")?;
        if w.byte_len() as usize != size {
            return Err(format!("sim read completion {w:?}"));
        }
        check("read", &p.s.mr.read(0, size).unwrap_or_default(), &data)
    } else {
        p.s.mr.write(64, &data).map_err(e("write"))?;
        let sge = [p.rxe_sge(0, size as u32)];
        let (addr, rkey) = p.sim_remote(64)?;
        p.vpost(&VWr::new(
            1,
            VOp::Read {
                remote_addr: addr,
                rkey,
            },
            &sge,
        ))?;
        p.rxe_ok("read")?;
        check("read", &p.v.mr.read(0, size).unwrap_or_default(), &data)
    }
}

/// CAS (`cas`) or FAA on the peer's memory. Both sides keep atomic targets and write the
/// returned value in host byte order: rxe operates on a native `u64` (`rxe_resp.c`), the
/// software ConnectX in its default host-endianness mode (the mode `mlx5_core` selects,
/// `docs/software-connectx.md`), so the target and the returned value are checked in host
/// order on both sides.
fn atomic(env: &Env, cas: bool, on_rxe: bool) -> R<()> {
    let mut p = connect(env, Opts::default())?;
    let orig: u64 = 0x0102_0304_0506_0708;
    let (arg, cmp) = (0x1111_0000_2222_0000u64, orig);
    let want = if cas { arg } else { orig.wrapping_add(arg) };
    if on_rxe {
        p.v.mr.write_u64(256, orig).map_err(e("write"))?;
        let ra = p.rxe_remote(256)?;
        let local = p.sim_sge(512, 8);
        let wr = if cas {
            SendWr::comp_swap(1, ra, local, cmp, arg)
        } else {
            SendWr::fetch_add(1, ra, local, arg)
        };
        p.s.qps[0].post(&wr.signaled()).map_err(e("sim post"))?;
        p.sim_ok("atomic")?;
        let got = p.s.mr.read_u64(512).map_err(e("read"))?;
        let now = p.v.mr.read_u64(256).map_err(e("read"))?;
        atomic_result(got, now, orig, want)?;
    } else {
        p.s.mr.write_u64(256, orig).map_err(e("write"))?;
        let (addr, rkey) = p.sim_remote(256)?;
        let sge = [p.rxe_sge(512, 8)];
        let op = if cas {
            VOp::CompareSwap {
                remote_addr: addr,
                rkey,
                compare: cmp,
                swap: arg,
            }
        } else {
            VOp::FetchAdd {
                remote_addr: addr,
                rkey,
                add: arg,
            }
        };
        p.vpost(&VWr::new(1, op, &sge))?;
        p.rxe_ok("atomic")?;
        let got = p.v.mr.read_u64(512).map_err(e("read"))?;
        let now = p.s.mr.read_u64(256).map_err(e("read"))?;
        atomic_result(got, now, orig, want)?;
    }
    Ok(())
}

fn masked_refused(env: &Env) -> R<()> {
    let mut p = connect(env, Opts::default())?;
    let ra = p.rxe_remote(256)?;
    let local = p.sim_sge(512, 8);
    let before = p.v.mr.read(256, 8).unwrap_or_default();
    p.s.qps[0]
        .post(&SendWr::masked_comp_swap64(1, ra, local, 1, 1, 2, 2).signaled())
        .map_err(e("sim post"))?;
    let w = p.sim_wc()?;
    if w.is_ok() {
        return Err("a masked atomic toward rxe completed".into());
    }
    if p.v.mr.read(256, 8).unwrap_or_default() != before {
        return Err("the rxe memory changed".into());
    }
    Ok(())
}

/// UD QPs have no connection: both are brought to RTS directly (the handshake's UD step
/// creates the peer's address handle through `Device::create_ah`, which a verbs device
/// without mlx5 refuses), and each end gets an address handle for the other.
fn ud(env: &Env, to_rxe: bool) -> R<()> {
    use mlx5_hw::{AhAttr, AttrMask, Device, Gid, GlobalRoute, QpAttr, QpState};
    const QKEY: u32 = 0x1111_2222;
    let mut s = Side::new(&env.sim_ctx, &cfg(QpType::Ud)).map_err(e("sim side"))?;
    let v = VerbsSide::new(&env.verbs_ctx, env.verbs.clone(), &cfg(QpType::Ud))
        .map_err(e("rxe side"))?;
    let up = |dev: &dyn Device, qp: mlx5_hw::QpId| -> R<()> {
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            qkey: QKEY,
            ..Default::default()
        };
        let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
        dev.modify_qp(qp, &init, m).map_err(e("modify INIT"))?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..Default::default()
        };
        dev.modify_qp(qp, &rtr, AttrMask::STATE)
            .map_err(e("modify RTR"))?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0x42,
            ..Default::default()
        };
        dev.modify_qp(qp, &rts, AttrMask::STATE | AttrMask::SQ_PSN)
            .map_err(e("modify RTS"))
    };
    up(s.context().device(), s.qps[0].id())?;
    s.qps[0].set_state(QpState::Rts);
    up(v.context().device(), v.qps[0].id)?;
    let ah = |dgid: Gid, sgid_index: u8| AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid,
            sgid_index,
            hop_limit: 64,
            ..Default::default()
        }),
        ..Default::default()
    };
    let sim_ip = env.sim.ipv4().octets();
    let rxe_gid = env.verbs.query_gid(1, 1).map_err(e("rxe GID 1"))?;
    let (sqpn, vqpn) = (s.qps[0].qpn(), v.qps[0].qpn);
    println!("qpn sim {sqpn:#x} rxe {vqpn:#x} (UD)");
    let mut vqp = BaselineQp::new(&env.verbs, v.qps[0].id).map_err(e("rxe qp"))?;
    let mut vcq = BaselineCq::new(&env.verbs, v.cq.id).map_err(e("rxe cq"))?;
    let data = pattern(700, 5);
    let vsge = |off: usize, len: u32| VSge {
        addr: v.mr.addr() + off as u64,
        length: len,
        lkey: v.mr.lkey(),
    };
    let mut wcs = [Wc::default(); 1];
    let mut sim_wc = |s: &mut Side| -> R<Wc> {
        let end = Instant::now() + WAIT;
        loop {
            if s.cq.poll(&mut s.qps[..], &mut wcs).map_err(e("sim poll"))? == 1 {
                return Ok(wcs[0]);
            }
            if Instant::now() > end {
                return Err("no completion on the sim side".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    let rxe_wc = |cq: &mut BaselineCq| -> R<Completion> {
        let c = cq.wait(1, WAIT).map_err(e("rxe poll"))?;
        let c = *c.first().ok_or("no completion on the rxe side")?;
        if !c.is_success() {
            return Err(format!("rxe completion {}", c.status_str()));
        }
        Ok(c)
    };
    if to_rxe {
        vqp.post_recv(3, &[vsge(0, 2048)])
            .map_err(e("rxe post_recv"))?;
        s.mr.write(4096, &data).map_err(e("write"))?;
        let a =
            s.pd.create_ah(&ah(rxe_gid, 0))
                .map_err(e("sim create_ah"))?;
        let dest = a.dest(vqpn, QKEY);
        let sge = [s.mr.sge(4096, 700).map_err(e("sge"))?];
        s.qps[0]
            .post(&SendWr::send(1).sges(&sge).ud(&dest).signaled())
            .map_err(e("sim post"))?;
        let w = sim_wc(&mut s)?;
        if !w.is_ok() {
            return Err(format!("sim send {w:?}"));
        }
        let c = rxe_wc(&mut vcq)?;
        // A UD receive starts with the 40-byte GRH (IBTA Vol 1 §11.4.1.1).
        if c.byte_len != 740 || c.src_qp != sqpn {
            return Err(format!("rxe recv {c:?}"));
        }
        check("datagram", &v.mr.read(40, 700).unwrap_or_default(), &data)
    } else {
        let r = s.mr.sge(0, 2048).map_err(e("sge"))?;
        s.qps[0].post_recv(3, &[r]).map_err(e("sim post_recv"))?;
        v.mr.write(4096, &data).map_err(e("write"))?;
        let a = env
            .verbs
            .create_ah_verbs(v.pd.id(), &ah(Gid::from_ipv4(sim_ip), 1))
            .map_err(e("rxe create_ah"))?;
        let sge = [vsge(4096, 700)];
        let mut wr = VWr::new(1, VOp::Send, &sge);
        wr.ud = Some(VUd {
            ah: a.id,
            remote_qpn: sqpn,
            remote_qkey: QKEY,
        });
        vqp.post_send(&wr).map_err(e("rxe post"))?;
        rxe_wc(&mut vcq)?;
        let w = sim_wc(&mut s)?;
        if !w.is_ok() || w.byte_len() != 740 || w.src_qp() != vqpn {
            return Err(format!("sim recv {w:?}"));
        }
        check("datagram", &s.mr.read(40, 700).unwrap_or_default(), &data)
    }
}

/// The receiver posts its receive late: RNR NAK, RNR wait, retry; or never, with a finite
/// `rnr_retry`: RNR_RETRY_EXC_ERR.
fn rnr(env: &Env, to_rxe: bool, exhaust: bool) -> R<()> {
    let retry = if exhaust { 1 } else { 7 };
    let mut p = connect(
        env,
        Opts {
            sim_rnr_retry: retry,
            rxe_rnr_retry: retry,
            ..Opts::default()
        },
    )?;
    let data = pattern(200, 1);
    if to_rxe {
        p.s.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.sim_sge(0, 200)];
        p.s.qps[0]
            .post(&SendWr::send(1).sges(&sge).signaled())
            .map_err(e("sim post"))?;
        if exhaust {
            let w = p.sim_wc()?;
            return match w.status() {
                mlx5_qp::WcStatus::RnrRetryExcErr => Ok(()),
                s => Err(format!("sim completion {s:?}, want RNR_RETRY_EXC_ERR")),
            };
        }
        std::thread::sleep(Duration::from_millis(300));
        let r = p.rxe_sge(0, 4096);
        p.vqp.post_recv(2, &[r]).map_err(e("rxe post_recv"))?;
        p.sim_ok("send after RNR")?;
        p.rxe_ok("late recv")?;
        check("received", &p.v.mr.read(0, 200).unwrap_or_default(), &data)
    } else {
        p.v.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.rxe_sge(0, 200)];
        p.vpost(&VWr::new(1, VOp::Send, &sge))?;
        if exhaust {
            let c = p.rxe_wc()?;
            return if c.status == IBV_WC_RNR_RETRY_EXC_ERR {
                Ok(())
            } else {
                Err(format!(
                    "rxe completion {}, want RNR retry exceeded",
                    c.status_str()
                ))
            };
        }
        std::thread::sleep(Duration::from_millis(300));
        let r = p.sim_sge(0, 4096);
        p.s.qps[0].post_recv(2, &[r]).map_err(e("sim post_recv"))?;
        p.rxe_ok("send after RNR")?;
        p.sim_ok("late recv")?;
        check("received", &p.s.mr.read(0, 200).unwrap_or_default(), &data)
    }
}

/// WRITEs over a lossy link, recovered by retransmission: frames from the sim are dropped
/// by its own fault injection; frames toward it by `tc netem` on the tap.
fn lossy(env: &Env, to_rxe: bool) -> R<()> {
    let mut p = connect(env, Opts::default())?;
    let size = 32 * 1024;
    let data = pattern(size, 77);
    let netem = |on: bool| {
        let args: &[&str] = if on {
            &[
                "qdisc", "add", "dev", &env.tap, "root", "netem", "loss", "15%",
            ]
        } else {
            &["qdisc", "del", "dev", &env.tap, "root"]
        };
        Command::new("tc")
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if to_rxe {
        env.fabric.faults().all().drop_every(7);
        p.s.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.sim_sge(0, size as u32)];
        let ra = p.rxe_remote(0)?;
        for i in 0..3 {
            p.s.qps[0]
                .post(&SendWr::write(i, ra).sges(&sge).signaled())
                .map_err(e("sim post"))?;
        }
        let r = (0..3).try_for_each(|_| p.sim_ok("lossy write").map(|_| ()));
        let dropped = env.fabric.faults().stats();
        env.fabric.faults().clear();
        r?;
        let _ = dropped;
        check("written", &p.v.mr.read(0, size).unwrap_or_default(), &data)
    } else {
        if !netem(true) {
            return Err("tc qdisc add ... netem failed (sch_netem?)".into());
        }
        p.v.mr.write(0, &data).map_err(e("write"))?;
        let sge = [p.rxe_sge(0, size as u32)];
        let (addr, rkey) = p.sim_remote(0)?;
        let op = VOp::Write {
            remote_addr: addr,
            rkey,
        };
        let r = (|| {
            for i in 0..3 {
                p.vpost(&VWr::new(i, op, &sge))?;
            }
            for _ in 0..3 {
                p.rxe_ok("lossy write")?;
            }
            Ok::<_, String>(())
        })();
        netem(false);
        r?;
        check("written", &p.s.mr.read(0, size).unwrap_or_default(), &data)
    }
}

/// PSNs that wrap from 0xffffff to 0 inside a message, both directions.
fn psn_wrap(env: &Env) -> R<()> {
    let mut p = connect(
        env,
        Opts {
            psn: Some(0xff_fff0),
            ..Opts::default()
        },
    )?;
    let size = 40 * 1024; // 40 packets at MTU 1024
    let data = pattern(size, 33);
    p.s.mr.write(0, &data).map_err(e("write"))?;
    let sge = [p.sim_sge(0, size as u32)];
    let ra = p.rxe_remote(0)?;
    p.s.qps[0]
        .post(&SendWr::write(1, ra).sges(&sge).signaled())
        .map_err(e("sim post"))?;
    p.sim_ok("write across the wrap")?;
    check(
        "sim -> rxe",
        &p.v.mr.read(0, size).unwrap_or_default(),
        &data,
    )?;
    let data2 = pattern(size, 44);
    p.v.mr.write(size, &data2).map_err(e("write"))?;
    let vsge = [p.rxe_sge(size, size as u32)];
    let (addr, rkey) = p.sim_remote(size as u64)?;
    p.vpost(&VWr::new(
        2,
        VOp::Write {
            remote_addr: addr,
            rkey,
        },
        &vsge,
    ))?;
    p.rxe_ok("write across the wrap")?;
    check(
        "rxe -> sim",
        &p.s.mr.read(size, size).unwrap_or_default(),
        &data2,
    )?;
    // And a READ back across the wrap.
    let rsge = [p.sim_sge(2 * size, size as u32)];
    p.s.qps[0]
        .post(&SendWr::read(3, ra).sges(&rsge).signaled())
        .map_err(e("sim post"))?;
    p.sim_ok("read across the wrap")?;
    check(
        "read",
        &p.s.mr.read(2 * size, size).unwrap_or_default(),
        &data,
    )
}

/// A case: its name (`--only` matches a part of it) and its run.
pub(super) type Case = (&'static str, fn(&Env) -> R<()>);

/// Every case, in the order they run.
pub(super) const CASES: &[Case] = &[
    ("rc-send-3000-sim-to-rxe", |e| {
        send(e, 3000, None, true, QpType::Rc)
    }),
    ("rc-send-3000-rxe-to-sim", |e| {
        send(e, 3000, None, false, QpType::Rc)
    }),
    ("rc-send-imm-sim-to-rxe", |e| {
        send(e, 100, Some(0xdead_beef), true, QpType::Rc)
    }),
    ("rc-send-imm-rxe-to-sim", |e| {
        send(e, 100, Some(0xfeed_f00d), false, QpType::Rc)
    }),
    ("rc-write-5000-sim-to-rxe", |e| {
        write(e, 5000, None, true, QpType::Rc)
    }),
    ("rc-write-5000-rxe-to-sim", |e| {
        write(e, 5000, None, false, QpType::Rc)
    }),
    ("rc-write-imm-sim-to-rxe", |e| {
        write(e, 2100, Some(0x1234_5678), true, QpType::Rc)
    }),
    ("rc-write-imm-rxe-to-sim", |e| {
        write(e, 2100, Some(0x8765_4321), false, QpType::Rc)
    }),
    ("rc-read-64-sim-from-rxe", |e| read(e, 64, true)),
    ("rc-read-64-rxe-from-sim", |e| read(e, 64, false)),
    ("rc-read-10000-sim-from-rxe", |e| read(e, 10000, true)),
    ("rc-read-10000-rxe-from-sim", |e| read(e, 10000, false)),
    ("rc-cas-sim-on-rxe", |e| atomic(e, true, true)),
    ("rc-cas-rxe-on-sim", |e| atomic(e, true, false)),
    ("rc-faa-sim-on-rxe", |e| atomic(e, false, true)),
    ("rc-faa-rxe-on-sim", |e| atomic(e, false, false)),
    ("rc-masked-atomic-refused-toward-rxe", masked_refused),
    ("ud-send-sim-to-rxe", |e| ud(e, true)),
    ("ud-send-rxe-to-sim", |e| ud(e, false)),
    ("uc-send-sim-to-rxe", |e| {
        send(e, 3000, None, true, QpType::Uc)
    }),
    ("uc-send-rxe-to-sim", |e| {
        send(e, 3000, None, false, QpType::Uc)
    }),
    ("uc-write-sim-to-rxe", |e| {
        write(e, 3000, None, true, QpType::Uc)
    }),
    ("uc-write-rxe-to-sim", |e| {
        write(e, 3000, None, false, QpType::Uc)
    }),
    ("rc-rnr-late-recv-on-rxe", |e| rnr(e, true, false)),
    ("rc-rnr-late-recv-on-sim", |e| rnr(e, false, false)),
    ("rc-rnr-exhausted-sim-to-rxe", |e| rnr(e, true, true)),
    ("rc-rnr-exhausted-rxe-to-sim", |e| rnr(e, false, true)),
    ("rc-loss-sim-to-rxe-retransmitted", |e| lossy(e, true)),
    ("rc-loss-rxe-to-sim-retransmitted", |e| lossy(e, false)),
    ("rc-psn-wrap-both-ways", psn_wrap),
];
