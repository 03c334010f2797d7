//! Support for tests that run a QP pair across two processes, each with its own software
//! ConnectX: the peer process (this test binary started again, running one `#[ignore]`d test
//! chosen by name), one end of the pair (fabric, device bound to UDP, PD, CQ, QP, buffer),
//! and a completion queue reader that never waits without a deadline.
//!
//! The peer process is found and steered entirely through its command line, one environment
//! variable and its standard streams: no fixed port, no extra binary.
#![allow(dead_code)]

use mlx5_connect::{QpLink, QpRef, RemoteBuffer};
use mlx5_hw::{AccessFlags, CqInitAttr, Device, MrInfo, PdId, QpCap, QpInitAttr, QpType};
use mlx5_qp::{Cq, Qp, Sge, Wc, WcStatus};
use mlx5_sim::{DeviceConfig, Fabric, SimDevice};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable that turns an `#[ignore]`d peer test into the peer: it holds the
/// UDP address of the parent's device.
pub const PEER_ENV: &str = "MLX5_TWO_PROCESS_PEER";
/// The line the peer prints once its device and control listener are bound.
pub const READY_TAG: &str = "MLX5_PEER_READY";
/// The line the peer prints last, after its own checks passed.
pub const VERDICT_TAG: &str = "MLX5_PEER_VERDICT";
/// How long the peer process may live at most before its watchdog ends it.
pub const PEER_LIFETIME: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// The peer process, seen from the parent.

/// A running peer process. Dropping it kills the process (if still running) and reaps it, so a
/// failing parent test never leaves the peer behind.
pub struct PeerProcess {
    name: String,
    child: Child,
    /// Held open for the peer's lifetime: the peer exits when it reads EOF (parent gone).
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout_seen: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    gone: Arc<AtomicBool>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl PeerProcess {
    /// Start this test binary again, running only the `#[ignore]`d test `test_name`, with
    /// `PEER_ENV` set to `parent_udp`.
    pub fn spawn(test_name: &str, parent_udp: SocketAddr) -> PeerProcess {
        let exe = std::env::current_exe().expect("the path of the running test binary");
        let mut child = Command::new(exe)
            .args([
                test_name,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PEER_ENV, parent_udp.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("peer stdout is piped");
        let err = child.stderr.take().expect("peer stderr is piped");
        let (tx, lines) = mpsc::channel();
        let stdout_seen = Arc::new(Mutex::new(Vec::new()));
        let seen = stdout_seen.clone();
        let gone = Arc::new(AtomicBool::new(false));
        let eof = gone.clone();
        let out_reader = std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(l.clone());
                let _ = tx.send(l);
            }
            // EOF: the peer exited (or closed its stdout, which it never does on purpose).
            eof.store(true, Ordering::SeqCst);
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let mut err = err;
            let _ = err.read_to_string(&mut s);
            sink.lock().unwrap_or_else(|e| e.into_inner()).push_str(&s);
        });
        PeerProcess {
            name: test_name.to_string(),
            child,
            stdin,
            lines,
            stdout_seen,
            stderr,
            gone,
            readers: vec![out_reader, err_reader],
            status: None,
        }
    }

    /// The text after `tag` on the first stdout line that carries it (libtest may print
    /// `test name ... ` before it on the same line). Panics with the peer's output if the
    /// line does not come within `timeout` or the peer exits first.
    pub fn wait_tagged(&mut self, tag: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(at) = l.find(tag) {
                        return l[at + tag.len()..].trim().to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no `{tag}` line from the peer within {timeout:?}\n{}",
                        self.dump()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let st = self.wait_exit(Duration::from_secs(5));
                    panic!(
                        "the peer closed its stdout ({st:?}) before printing `{tag}`\n{}",
                        self.dump()
                    )
                }
            }
        }
    }

    /// A flag that turns true when the peer's stdout reaches EOF, i.e. the peer exited: give it
    /// to [`End::watch`] so waits for completions fail at once instead of at their deadline.
    pub fn gone_flag(&self) -> Arc<AtomicBool> {
        self.gone.clone()
    }

    /// Wait up to `timeout` for the peer to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(st)) => self.status = Some(st),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => return None,
                Err(e) => panic!("waiting for the peer process: {e}"),
            }
        }
        self.status
    }

    /// Wait for the peer to exit and check its verdict: exit status 0 and a `VERDICT_TAG` line
    /// (so a peer that ran no test, e.g. a misspelt test name, does not pass). Returns the
    /// verdict's text.
    pub fn expect_success(&mut self, timeout: Duration) -> String {
        let Some(st) = self.wait_exit(timeout) else {
            panic!(
                "the peer did not exit within {timeout:?} after the test\n{}",
                self.dump()
            );
        };
        // The readers end at EOF, which the exit brings.
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        assert!(st.success(), "the peer failed: {st}\n{}", self.dump());
        let verdict = self
            .stdout_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find_map(|l| {
                l.find(VERDICT_TAG)
                    .map(|at| l[at + VERDICT_TAG.len()..].trim().to_string())
            });
        match verdict {
            Some(v) => v,
            None => panic!("the peer exited 0 without a verdict\n{}", self.dump()),
        }
    }

    /// Everything the peer printed so far, for failure messages.
    pub fn dump(&self) -> String {
        let out = self
            .stdout_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n");
        let err = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        format!(
            "--- peer `{}` stdout ---\n{out}\n--- peer stderr ---\n{err}\n---",
            self.name
        )
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            // Still running (or never reaped): the parent failed or gave up. Kill it by its
            // own handle and reap it so no orphan outlives the test.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.stdin.take();
    }
}

// ---------------------------------------------------------------------------------------------
// The peer process, seen from inside.

/// In the peer process: the parent's UDP address from `PEER_ENV`, or `None` when the test was
/// not started as a peer (then it has nothing to do). Also starts the watchdogs: the process
/// exits when its stdin closes (the parent is gone) or after [`PEER_LIFETIME`].
pub fn peer_role() -> Option<SocketAddr> {
    let v = std::env::var(PEER_ENV).ok()?;
    let addr = v
        .parse()
        .unwrap_or_else(|e| panic!("{PEER_ENV}={v:?} is not a socket address: {e}"));
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        eprintln!("peer: the parent closed stdin; exiting");
        std::process::exit(2);
    });
    std::thread::spawn(|| {
        std::thread::sleep(PEER_LIFETIME);
        eprintln!("peer: still running after {PEER_LIFETIME:?}; exiting");
        std::process::exit(3);
    });
    Some(addr)
}

/// In the peer process: print a tagged line and flush it at once (the parent is waiting).
pub fn say(tag: &str, text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{tag} {text}");
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------------------
// One end of the pair.

/// Bytes in each end's registered buffer.
pub const BUF_LEN: usize = 320 << 10;
/// Receive slots, at the start of the buffer (wr_id = slot index).
pub const RECV_SLOTS: usize = 16;
/// Bytes per receive slot.
pub const RECV_SLOT: usize = 8192;
/// Where outgoing SEND / WRITE payloads are staged.
pub const STAGE_OFF: usize = 64 << 10;
/// What the peer's READ reads (filled before connecting).
pub const READ_SRC_OFF: usize = 128 << 10;
/// Where the peer's WRITE lands.
pub const WRITE_DST_OFF: usize = 192 << 10;
/// Where this end's READ lands.
pub const READ_DST_OFF: usize = 256 << 10;

/// A registered buffer of [`BUF_LEN`] bytes.
pub struct Buf {
    mem: Vec<u64>,
    /// Its memory region.
    pub mr: MrInfo,
}

impl Buf {
    fn new(dev: &SimDevice, pd: PdId) -> Buf {
        let mut mem = vec![0u64; BUF_LEN / 8];
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        // SAFETY: `mem` is owned by the Buf, which lives in the `End` next to the device and
        // QP and is dropped only after the test stopped the fabric thread.
        let mr = unsafe { dev.reg_mr(pd, mem.as_mut_ptr() as *mut u8, BUF_LEN, access) }
            .expect("register the buffer");
        Buf { mem, mr }
    }
    /// Its address.
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    /// `len` bytes at `off`.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: a Vec<u64> viewed as bytes within its length. The device may write to it
        // concurrently only where a posted receive or the peer's WRITE lands, and the tests
        // read a region only after the completion that says it is written.
        let all = unsafe { std::slice::from_raw_parts(self.mem.as_ptr() as *const u8, BUF_LEN) };
        &all[off..off + len]
    }
    /// Copy `data` to `off`.
    pub fn write(&mut self, off: usize, data: &[u8]) {
        // SAFETY: as in `bytes`; nothing the device owns is written here.
        let all =
            unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr() as *mut u8, BUF_LEN) };
        all[off..off + data.len()].copy_from_slice(data);
    }
    /// The SGE for `len` bytes at `off`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }
    /// The buffer as announced to the peer.
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.mr.rkey,
            len: BUF_LEN as u64,
        }
    }
}

/// A deterministic byte stream (xorshift32 of `seed`), so a byte in the wrong place shows.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// One end: its own fabric with one device bound to a UDP socket on 127.0.0.1, a PD, one CQ
/// for sends and receives, a QP in Reset and a registered buffer.
pub struct End {
    /// This process's fabric.
    pub fabric: Fabric,
    /// The device.
    pub dev: SimDevice,
    /// The UDP address frames for this device arrive at.
    pub udp: SocketAddr,
    /// Protection domain.
    pub pd: PdId,
    /// The CQ.
    pub cq: Cq,
    /// The QP's device handle and number.
    pub qp_ref: QpRef,
    /// The data-path QP.
    pub qp: Qp,
    /// The registered buffer.
    pub buf: Buf,
    /// Set when the peer process is gone ([`PeerProcess::gone_flag`]): a wait for a
    /// completion fails at once then.
    pub watch: Option<Arc<AtomicBool>>,
    stash: Vec<Wc>,
}

impl End {
    /// A fabric with one device of address `ip`, bound to an ephemeral UDP port, and a QP of
    /// `qp_type` on it.
    pub fn new(ip: [u8; 4], qp_type: QpType) -> End {
        let fabric = Fabric::new();
        let dev = fabric.add_device(DeviceConfig::new(ip));
        let udp = dev.bind_udp("127.0.0.1:0").expect("bind the device to UDP");
        let pd = dev.alloc_pd().expect("alloc PD");
        let cqi = dev
            .create_cq(&CqInitAttr {
                cqe: 256,
                cqe_size: 64,
                ignore_overrun: false,
                channel: None,
            })
            .expect("create CQ");
        // SAFETY: the device CQ is never destroyed while the End (and so this Cq) lives.
        let cq = unsafe { Cq::from_layout(&cqi.layout) }.expect("CQ layout");
        let info = dev
            .create_qp(
                pd,
                &QpInitAttr {
                    qp_type,
                    send_cq: cqi.id,
                    recv_cq: cqi.id,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: RECV_SLOTS as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .expect("create QP");
        // SAFETY: the device QP is never destroyed while the End (and so this Qp) lives.
        let qp = unsafe { Qp::from_layout(&info.layout, None) }.expect("QP layout");
        let buf = Buf::new(&dev, pd);
        End {
            fabric,
            dev,
            udp,
            pd,
            cq,
            qp_ref: QpRef::new(&info, pd),
            qp,
            buf,
            watch: None,
            stash: Vec::new(),
        }
    }

    /// The link `mlx5_connect` drives: it posts one receive per slot once the QP is in
    /// Init, before this side reports READY.
    pub fn link(&mut self) -> QpLink<'_, impl FnMut(&mut Qp) -> mlx5_qp::Result<()>> {
        let sges: Vec<Sge> = (0..RECV_SLOTS)
            .map(|i| self.buf.sge(i * RECV_SLOT, RECV_SLOT))
            .collect();
        QpLink::new(&mut self.qp, &mut self.cq, move |qp: &mut Qp| {
            for (i, s) in sges.iter().enumerate() {
                qp.post_recv(i as u64, std::slice::from_ref(s))?;
            }
            Ok(())
        })
    }

    /// Repost the receive of slot `slot` (its completion was consumed).
    pub fn repost(&mut self, slot: u64) {
        let s = self.buf.sge(slot as usize * RECV_SLOT, RECV_SLOT);
        self.qp.post_recv(slot, &[s]).expect("repost a receive");
    }

    /// The first completion, stashed or new, that `want` accepts; completions it does not
    /// accept are kept for later calls (a receive may overtake the completion of an earlier
    /// send). Panics on an error completion and after `timeout` without a match.
    pub fn next(&mut self, what: &str, timeout: Duration, want: impl Fn(&Wc) -> bool) -> Wc {
        let deadline = Instant::now() + timeout;
        let mut wcs = [Wc::default(); 16];
        let mut spins = 0u32;
        loop {
            if let Some(i) = self.stash.iter().position(&want) {
                return self.stash.remove(i);
            }
            let n = self.cq.poll(&mut self.qp, &mut wcs).expect("poll the CQ");
            for w in &wcs[..n] {
                assert_eq!(
                    w.status(),
                    WcStatus::Success,
                    "error completion while waiting for {what}: {w:?} ({:?})",
                    w.syndrome_name()
                );
            }
            self.stash.extend_from_slice(&wcs[..n]);
            if n > 0 {
                spins = 0;
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "no completion for {what} within {timeout:?}; stashed: {:?}",
                self.stash
            );
            if let Some(w) = &self.watch {
                assert!(
                    !w.load(Ordering::SeqCst),
                    "the peer process exited while this side waited for {what}"
                );
            }
            // Spin briefly (the peer answers within microseconds on an idle machine), then
            // give the core to the fabric thread and the peer process.
            spins += 1;
            if spins < 200 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Completions that arrived but were not consumed.
    pub fn stashed(&self) -> &[Wc] {
        &self.stash
    }

    /// Frames this device received: with one device per fabric, every one of them came from
    /// the other process over UDP.
    pub fn rcv_packets(&self) -> u64 {
        self.dev.counter("port_rcv_packets")
    }

    /// Packet counters for the report line.
    pub fn traffic(&self) -> String {
        let c = |n: &str| self.dev.counter(n);
        format!(
            "xmit_packets={} rcv_packets={} duplicate_request={} local_ack_timeout_err={}",
            c("port_xmit_packets"),
            c("port_rcv_packets"),
            c("duplicate_request"),
            c("local_ack_timeout_err")
        )
    }

    /// Fail on any driver bug the software ConnectX saw or any frame it could not parse.
    pub fn assert_clean(&self) {
        let bugs = self.fabric.driver_bugs();
        assert!(
            bugs.is_empty(),
            "driver bugs reported by the software ConnectX: {bugs:#?}"
        );
        assert_eq!(self.fabric.malformed_frames(), 0, "malformed frames");
    }
}
