//! The run's facts in perftest's words, and every step of every program in both roles against
//! what stock perftest 4.5 did on its socket (`testdata/perftest-4.5.transcripts`).

use super::script::{script, Program, Shape, Step};
use super::session::Session;
use super::wire::{self, BwReport, Dest};
use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

const TRANSCRIPTS: &str = include_str!("testdata/perftest-4.5.transcripts");

/// One system call of a transcript: written by that side (`true`) or read, and its bytes.
type Record = (bool, Vec<u8>);

struct Transcript {
    name: String,
    client: bool,
    args: String,
    records: Vec<Record>,
}

fn transcripts() -> Vec<Transcript> {
    let mut out: Vec<Transcript> = Vec::new();
    for line in TRANSCRIPTS.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("@ ") {
            let mut w = rest.splitn(3, ' ');
            let (name, role, args) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            out.push(Transcript {
                name: name.into(),
                client: role == "client",
                args: args.into(),
                records: Vec::new(),
            });
            continue;
        }
        let (dir, body) = line.split_at(2);
        let bytes = if let Some(t) = body.strip_prefix('"') {
            let (text, tail) = t.rsplit_once('"').unwrap();
            let nul: usize = tail
                .trim()
                .strip_prefix('+')
                .map_or(0, |n| n.trim_end_matches("nul").parse().unwrap());
            let mut b = text.as_bytes().to_vec();
            b.resize(b.len() + nul, 0);
            b
        } else {
            (0..body.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap())
                .collect()
        };
        out.last_mut()
            .unwrap()
            .records
            .push((dir.starts_with('W'), bytes));
    }
    out
}

/// The shape of a captured run, from its command line.
fn shape_of(t: &Transcript, client: bool) -> Shape {
    let args: Vec<&str> = t.args.split_whitespace().collect();
    let program = match args[0] {
        "ib_write_lat" => Program::WriteLat,
        "ib_send_lat" => Program::SendLat,
        "ib_read_lat" => Program::ReadLat,
        "ib_atomic_lat" => Program::AtomicLat,
        "ib_write_bw" => Program::WriteBw,
        "ib_send_bw" => Program::SendBw,
        "ib_read_bw" => Program::ReadBw,
        "ib_atomic_bw" => Program::AtomicBw,
        p => panic!("{p}"),
    };
    let flag = |f: &str| args.iter().position(|a| *a == f);
    let all = flag("-a").is_some();
    let ud = flag("-c").is_some_and(|i| args[i + 1] == "UD");
    Shape {
        program,
        client,
        qps: flag("-q").map_or(1, |i| args[i + 1].parse().unwrap()),
        // -a: 2 bytes to 8 MiB (the UD runs captured use no -a).
        sizes: if all && !ud { 23 } else { 1 },
        all,
        duplex: flag("-b").is_some(),
        duration: flag("-D").is_some(),
    }
}

/// Play `t`'s side against a socket: what it wrote is written, what it read is read (and must
/// be as long); returns every length this side was sent.
fn replay(t: Transcript, mut s: TcpStream) -> Vec<usize> {
    let mut got = Vec::new();
    for (wrote, bytes) in t.records {
        if wrote {
            s.write_all(&bytes).unwrap();
        } else {
            let mut b = vec![0u8; bytes.len()];
            s.read_exact(&mut b)
                .unwrap_or_else(|e| panic!("{}: reading {} bytes: {e}", t.name, bytes.len()));
            got.push(b.len());
        }
    }
    // Nothing more is sent to a perftest that has finished.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty() || rest == wire::DONE,
        "{}: {} bytes more",
        t.name,
        rest.len()
    );
    got
}

/// This side of a run of `shape` against the other side's transcript, without traffic: the
/// prelude, then every step of the script (the connect and the runs do nothing).
fn walk(shape: &Shape, s: TcpStream) -> Result<()> {
    let mut session = Session::new(s, shape.client);
    let t = Duration::from_secs(20);
    let ours = Ours {
        dont_xchg_versions: false,
        mtu: 1024,
        facts: RunFacts {
            program: shape.program,
            conn: QpType::Rc,
            atomic: AtomicArg::FetchAndAdd,
            all: shape.all,
            size: 2,
            size_given: false,
            iters: Some(1000),
            duration: None,
            qps: 1,
            gbits: false,
        },
        device: DeviceSummary::default(),
    };
    let agreed = prelude(&mut session, &ours, t)?;
    assert_eq!((agreed.mtu, agreed.cycle_buffer), (1024, 4096));
    let me = Dest {
        lid: 0,
        out_reads: 1,
        qpn: 0x11,
        psn: 0x1234,
        rkey: 7,
        vaddr: 0x1000,
        gid: Some(mlx5_hw::Gid::from_ipv4([192, 0, 2, 9]).0),
        srqn: 0,
    };
    let report = BwReport {
        size: 4096,
        iters: 20,
        bw_peak: 1.0,
        bw_avg: 1.0,
        msg_rate: 0.1,
    };
    for step in script(shape) {
        match step {
            Step::Keys { .. } | Step::Sync { .. } => {
                session.hand_shake(&me, "a handshake", t)?;
            }
            Step::Reports => {
                session.reports(&report, t)?;
            }
            Step::Close => session.close(&me, t)?,
            Step::Connect | Step::Run { .. } => {}
        }
    }
    Ok(())
}

#[test]
fn every_program_in_both_roles_exchanges_what_perftest_4_5_exchanges() {
    let all = transcripts();
    assert_eq!(all.len(), 30);
    for t in all {
        // This side takes the other role: a client against the captured server and so on.
        let shape = shape_of(&t, !t.client);
        let name = format!(
            "{} {}",
            t.name,
            if shape.client { "client" } else { "server" }
        );
        let sent: usize = t.records.iter().filter(|r| !r.0).count();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (ours, theirs) = if shape.client {
            let peer = std::thread::spawn(move || replay(t, l.accept().unwrap().0));
            (walk(&shape, TcpStream::connect(addr).unwrap()), peer)
        } else {
            let peer = std::thread::spawn(move || replay(t, TcpStream::connect(addr).unwrap()));
            (walk(&shape, l.accept().unwrap().0), peer)
        };
        ours.unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = theirs
            .join()
            .unwrap_or_else(|_| panic!("{name}: the replay failed"));
        assert_eq!(got.len(), sent, "{name}: parts sent");
    }
}

#[test]
fn the_script_of_each_program() {
    let s = |program, client, duplex| Shape {
        program,
        client,
        qps: 1,
        sizes: 1,
        all: false,
        duplex,
        duration: false,
    };
    use Step::*;
    let head = [
        Keys { qp: 0 },
        Keys { qp: 0 },
        Connect,
        Sync { qp: 0 },
        Sync { qp: 0 },
    ];
    assert_eq!(
        script(&s(Program::WriteLat, true, false)),
        [&head[..], &[Run { size: 0 }]].concat()
    );
    assert_eq!(
        script(&s(Program::ReadLat, false, false)),
        [&head[..], &[Close]].concat()
    );
    assert_eq!(
        script(&s(Program::WriteBw, false, false)),
        [&head[1..], &[Sync { qp: 0 }, Reports, Close]].concat()
    );
    assert_eq!(
        script(&s(Program::WriteBw, true, false)),
        [
            &head[1..],
            &[Run { size: 0 }, Sync { qp: 0 }, Reports, Close]
        ]
        .concat()
    );
    assert_eq!(
        script(&s(Program::SendBw, true, true)),
        [
            &head[1..],
            &[Sync { qp: 0 }, Run { size: 0 }, Reports, Close]
        ]
        .concat()
    );
}

#[test]
fn the_run_in_perftests_negotiation() {
    let f = RunFacts {
        program: Program::SendBw,
        conn: QpType::Ud,
        atomic: AtomicArg::FetchAndAdd,
        all: false,
        size: 65536,
        size_given: false,
        iters: Some(1000),
        duration: None,
        qps: 2,
        gbits: true,
    };
    let n = negotiation(&f, 1024, DeviceSummary::default());
    // UD without -s: perftest lowers the size to the MTU; FETCH_AND_ADD only for atomics.
    assert_eq!((n.verb, n.tst, n.connection_type), (0, 1, 2));
    assert_eq!((n.size, n.iters, n.num_of_qps), (1024, 1000, 2));
    assert_eq!((n.atomic_type, n.report_fmt, n.duration), (0, 0, 5));
    let d = negotiation(
        &RunFacts {
            program: Program::AtomicLat,
            conn: QpType::Rc,
            all: true,
            iters: None,
            duration: Some(9),
            size: 8,
            gbits: false,
            ..f
        },
        1024,
        DeviceSummary::default(),
    );
    assert_eq!((d.verb, d.tst, d.atomic_type), (5, 0, 1));
    assert_eq!(
        (d.test_method, d.size, d.test_type, d.iters, d.duration),
        (1, MAX_SIZE, 1, 0, 9)
    );
}

#[test]
fn outstanding_reads_follow_perftest() {
    let mut a = Agreed {
        peer_version: None,
        cycle_buffer: 4096,
        mtu: 1024,
        peer: None,
    };
    assert_eq!(a.out_reads(Test::Write, 16), 1);
    assert_eq!(a.out_reads(Test::Read, 16), 16);
    let mut n = wire::Negotiation::default();
    n.device.max_qp_rd_atom = 4;
    a.peer = Some(n);
    assert_eq!(a.out_reads(Test::Atomic, 16), 4);
}

#[test]
fn gids_of_two_families_are_refused_as_perftest_refuses_them() {
    let d = |g: mlx5_hw::Gid| Dest {
        lid: 0,
        out_reads: 1,
        qpn: 1,
        psn: 1,
        rkey: 1,
        vaddr: 1,
        gid: Some(g.0),
        srqn: 0,
    };
    let v4 = d(mlx5_hw::Gid::from_ipv4([10, 0, 0, 1]));
    let mut v6g = [0u8; 16];
    v6g[0] = 0xfe;
    v6g[1] = 0x80;
    let v6 = d(mlx5_hw::Gid(v6g));
    check_gid_families(&v4, &v4).unwrap();
    let e = check_gid_families(&v4, &v6).unwrap_err().to_string();
    assert!(
        e.contains("IPv4") && e.contains("IPv6") && e.contains("Incompatibility"),
        "{e}"
    );
}
