//! The fabric: any number of software ConnectX devices on one Ethernet/IP network (lossless
//! unless faults are injected, [`crate::faults`]; other processes reachable over UDP,
//! [`crate::udp_port`]), and the two ways to run it.
//!
//! - Deterministic: nothing happens until the caller steps ([`Fabric::step`],
//!   [`Fabric::run_until_idle`], `Device::progress`) or moves the virtual clock
//!   ([`Fabric::advance`]), which fires timers (ACK timeout, RNR wait) in order. Every test is
//!   reproducible and a 7-retry timeout takes no wall time.
//! - Threaded: [`Fabric::start_thread`] polls doorbells in the background, with the virtual
//!   clock following the wall clock, for examples and latency runs; the thread stops when the
//!   returned guard is dropped. The driver writes while the device reads, so doorbells are
//!   scanned differently ([`crate::doorbell::threaded`]): the doorbell record drives
//!   execution and BlueFlame copies are only checked once settled; deterministic mode makes
//!   the stricter checks.
//!
//! The thread sleeps when idle. Doorbells are plain stores to memory, which wake no thread, so
//! it cannot sleep until one comes: after its last piece of work it keeps stepping (yielding
//! the core between steps) for [`SPIN_AFTER_WORK`], then sleeps in `ppoll(2)` for 50 µs,
//! doubling each idle round up to [`MAX_IDLE_SLEEP`]. The sleep ends early for a device call
//! (every `Device` method of a [`SimDevice`] writes the fabric's wake-up eventfd while the
//! thread sleeps), a frame arriving on a device's UDP socket, the next timer (ACK timeout,
//! RNR wait, a delayed frame) or the thread being stopped. An idle fabric so wakes 200 times a
//! second instead of spinning (each wake-up costs a few µs of CPU on bare metal, some 30 µs in
//! a VM: under 1 % of a core), and a doorbell rung after a long idle period is seen
//! within `MAX_IDLE_SLEEP` (plus scheduling delay). A doorbell rung within `SPIN_AFTER_WORK`
//! of the last work and a frame from another process are seen at once; after a device call
//! the backoff starts again from `MIN_IDLE_SLEEP`, so a doorbell that soon follows one is seen
//! within a few times that.

use std::os::fd::AsRawFd;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mlx5_hw::{Gid, LinkLayer, Mtu, PortState};

use crate::bugs::DriverBug;
use crate::device::SimDevice;
use crate::engine::Port;
use crate::fault_rules::Scope;
use crate::faults::{FaultTarget, Faults};
use crate::notify::EventFd;
use crate::shared::{Inner, Waker};
use crate::wire::MacAddr;
use crate::world::{Dev, World};
use crate::wqe::AtomicEndianness;

/// How to build a device.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Device name; `sim<N>` when empty.
    pub name: String,
    /// IPv4 address of port 1 (its GID 0 is the IPv4-mapped GID).
    pub ipv4: [u8; 4],
    /// MAC address; derived from the IPv4 address when `None` (`02:00:a:b:c:d`).
    pub mac: Option<[u8; 6]>,
    /// LID (reported only on an InfiniBand link layer).
    pub lid: u16,
    /// Active MTU of the port.
    pub mtu: Mtu,
    /// Link layer reported by `query_port`.
    pub link_layer: LinkLayer,
    /// BlueFlame registers the device gives one QP each before it shares registers
    /// ([`crate::doorbell::shared`]; rdma-core's default 4 low-latency registers).
    pub dedicated_bfregs: u32,
    /// Registers the further QPs share, each new QP taking the one with the fewest QPs (the
    /// kernel's medium class; default 11). 0: they all share bfreg 0, which has no BlueFlame
    /// (`bf.size` 0).
    pub shared_bfregs: u32,
    /// Byte order of atomic targets and replies: host order (what `mlx5_core` selects when the
    /// device supports it, [`AtomicEndianness`]) unless set to big-endian.
    pub atomic_endianness: AtomicEndianness,
}

impl DeviceConfig {
    /// A RoCE device with the given IPv4 address, MTU 1024 (the active MTU of RoCE on a
    /// 1500-byte Ethernet MTU).
    pub fn new(ipv4: [u8; 4]) -> DeviceConfig {
        DeviceConfig {
            name: String::new(),
            ipv4,
            mac: None,
            lid: 0,
            mtu: Mtu::Mtu1024,
            link_layer: LinkLayer::Ethernet,
            dedicated_bfregs: crate::doorbell::shared::DEFAULT_DEDICATED_BFREGS,
            shared_bfregs: crate::doorbell::shared::DEFAULT_SHARED_BFREGS,
            atomic_endianness: AtomicEndianness::Host,
        }
    }

    /// Set how many BlueFlame registers are dedicated to one QP each and how many are shared
    /// by the QPs after those ([`crate::doorbell::shared`]).
    pub fn bfregs(mut self, dedicated: u32, shared: u32) -> DeviceConfig {
        self.dedicated_bfregs = dedicated;
        self.shared_bfregs = shared;
        self
    }

    /// Set the atomic byte order (big-endian models a device without the host-endianness
    /// capability, `atomic_req_8B_endianness_mode` 0).
    pub fn atomic_endianness(mut self, order: AtomicEndianness) -> DeviceConfig {
        self.atomic_endianness = order;
        self
    }

    /// Set the active MTU.
    pub fn mtu(mut self, mtu: Mtu) -> DeviceConfig {
        self.mtu = mtu;
        self
    }

    /// Set the name.
    pub fn name(mut self, name: &str) -> DeviceConfig {
        self.name = name.to_string();
        self
    }
}

/// How long the fabric thread keeps stepping after its last piece of work before it starts
/// to sleep (a ping-pong's next doorbell normally comes well within it).
pub const SPIN_AFTER_WORK: Duration = Duration::from_millis(1);
/// The first idle sleep of the fabric thread; each further idle round doubles it.
pub const MIN_IDLE_SLEEP: Duration = Duration::from_micros(50);
/// Busy steps one pass of the fabric thread takes before it lets go of the fabric's lock.
const MAX_STEPS_PER_PASS: usize = 100_000;
/// The longest idle sleep of the fabric thread: the bound on how late a doorbell rung after a
/// long idle period is seen.
pub const MAX_IDLE_SLEEP: Duration = Duration::from_millis(5);

pub use crate::world::REMOTE_ACK_TIMEOUT_FLOOR;

/// A shared fabric of software ConnectX devices. Cloning gives another handle to the same
/// fabric.
#[derive(Clone)]
pub struct Fabric {
    pub(crate) inner: Arc<Inner>,
}

impl Default for Fabric {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.inner.lock();
        f.debug_struct("Fabric")
            .field("devices", &w.devs.len())
            .field("now_ns", &w.now)
            .finish()
    }
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Fabric {
        Fabric {
            inner: Arc::new(Inner {
                world: Mutex::new(World::default()),
                link_layer: Mutex::new(Vec::new()),
                waker: Waker {
                    fd: EventFd::new(),
                    parked: AtomicU32::new(0),
                },
            }),
        }
    }

    /// Add a device (port 1 active).
    pub fn add_device(&self, cfg: DeviceConfig) -> SimDevice {
        let mut w = self.inner.lock();
        let idx = w.devs.len();
        let name = if cfg.name.is_empty() {
            format!("sim{idx}")
        } else {
            cfg.name.clone()
        };
        let ip = cfg.ipv4;
        let mac = cfg.mac.unwrap_or([0x02, 0x00, ip[0], ip[1], ip[2], ip[3]]);
        let port = Port {
            lid: if cfg.lid == 0 {
                idx as u16 + 1
            } else {
                cfg.lid
            },
            gid: Gid::from_ipv4(ip),
            ip: ip.into(),
            mac: MacAddr(mac),
            mtu: cfg.mtu,
            state: PortState::Active,
            atomic_endianness: cfg.atomic_endianness,
        };
        let guid = 0x0002_c903_0000_0000 | (idx as u64 + 1);
        let mut dev = Dev::new(name.clone(), port, guid);
        dev.bfregs = crate::doorbell::shared::Bfregs::new(cfg.dedicated_bfregs, cfg.shared_bfregs);
        // Each device numbers its objects (QPNs, CQNs, SRQNs) from its own base, as two NICs
        // do: a driver that sends to the QPN of the wrong device is caught rather than lucky.
        dev.next_id = 0x100 + ((idx as u32 & 0xff) << 12);
        dev.threaded = w.threads > 0;
        if let Some(f) = w.remote_ack_floor {
            dev.remote_ack_floor = f;
        }
        w.devs.push(dev);
        drop(w);
        let mut ll = self
            .inner
            .link_layer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ll.push(cfg.link_layer);
        SimDevice::new(self.inner.clone(), idx, name)
    }

    /// Set the least local ACK timeout of the QPs whose peer is in another process (a device
    /// of another fabric reached through a UDP socket, [`SimDevice::bind_udp`]) while a fabric
    /// thread runs, for every device, present and future; `Duration::ZERO` gives them the
    /// timer their `timeout` attribute asks for, as a ConnectX does. Default
    /// [`REMOTE_ACK_TIMEOUT_FLOOR`]; deterministic runs and QPs within one fabric always have
    /// the exact timer.
    pub fn set_remote_ack_timeout_floor(&self, floor: Duration) {
        let ns = u64::try_from(floor.as_nanos()).unwrap_or(u64::MAX);
        let mut w = self.inner.lock();
        w.remote_ack_floor = Some(ns);
        for d in &mut w.devs {
            d.remote_ack_floor = ns;
        }
    }

    /// How many devices the fabric holds.
    pub fn device_count(&self) -> usize {
        self.inner.lock().devs.len()
    }

    /// One step of every device and the wire; returns whether anything happened.
    pub fn step(&self) -> bool {
        self.inner.lock().step()
    }

    /// One step as the fabric's thread makes it when it runs at virtual time `t` (since the
    /// fabric was created; the clock never moves back): what arrived is received first, then
    /// the timers that expired in between fire, late, and the devices run
    /// (`World::step_at`). Returns whether anything happened. For a deterministic test of a
    /// fabric that was descheduled: call it until it returns false.
    pub fn step_at(&self, t: Duration) -> bool {
        let t = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        self.inner.lock().step_at(t)
    }

    /// Put arbitrary Ethernet frame bytes on the wire, arriving now (a foreign sender, a
    /// fuzzer): the device whose MAC and IPv4 they name receives them on its next step and
    /// checks them like any frame (malformed ones are counted and dropped).
    pub fn inject_frame(&self, frame: Vec<u8>) {
        self.inner.lock().inject(frame);
    }

    /// Step until nothing more happens; returns the number of busy steps.
    pub fn run_until_idle(&self) -> usize {
        self.inner.lock().run_until_idle()
    }

    /// Move the virtual clock forward by `d`, firing timers in order, then run until idle.
    pub fn advance(&self, d: Duration) {
        let mut w = self.inner.lock();
        let target = w.now.saturating_add(d.as_nanos() as u64);
        w.advance_to(target);
    }

    /// Virtual time since the fabric was created.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.inner.lock().now)
    }

    /// Every driver bug reported by any device so far.
    pub fn driver_bugs(&self) -> Vec<DriverBug> {
        let w = self.inner.lock();
        w.devs
            .iter()
            .flat_map(|d| d.bugs.all().iter().cloned())
            .collect()
    }

    /// Remove and return every driver bug reported so far.
    pub fn take_driver_bugs(&self) -> Vec<DriverBug> {
        let mut w = self.inner.lock();
        w.devs.iter_mut().flat_map(|d| d.bugs.take()).collect()
    }

    /// Capture every frame put on the wire to a pcap file (nanosecond timestamps of virtual
    /// time), replacing any capture in progress. Frames are captured as their device transmits
    /// them, before the fabric's faults apply: retransmissions appear each time they are sent,
    /// frames the fabric drops are included, injected duplicates and corruption are not
    /// ([`crate::world`]).
    pub fn capture_to(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        let w = crate::pcap::PcapWriter::create(path, crate::pcap::Resolution::Nanos)?;
        self.inner.lock().capture = Some(w);
        Ok(())
    }

    /// Stop capturing and flush the file.
    pub fn stop_capture(&self) -> std::io::Result<u64> {
        match self.inner.lock().capture.take() {
            Some(mut w) => {
                w.flush()?;
                Ok(w.frames())
            }
            None => Ok(0),
        }
    }

    /// The fault controls: loss, duplication, reordering, delay, corruption and link state per
    /// link, direction or QP ([`crate::faults`]).
    pub fn faults(&self) -> crate::faults::Faults {
        crate::faults::Faults {
            inner: self.inner.clone(),
        }
    }

    /// Seed the generator every random fault draws from (default 0), so a run with faults is
    /// reproducible.
    pub fn set_seed(&self, seed: u64) {
        self.inner.lock().faults.set_seed(seed);
    }

    /// Frames in flight (sent, not yet arrived).
    pub fn in_flight(&self) -> usize {
        self.inner.lock().wire.len()
    }

    /// Frames that could not be encoded or parsed (0 unless something is wrong with the
    /// software ConnectX or a frame was corrupted).
    pub fn malformed_frames(&self) -> u64 {
        self.inner.lock().malformed
    }

    /// Run the fabric on a background thread until the guard is dropped. The virtual clock
    /// follows the wall clock while it runs.
    ///
    /// While it runs, doorbells are scanned in threaded mode
    /// ([`crate::doorbell::threaded`]): the doorbell record drives execution and BlueFlame
    /// writes are judged once settled, since the driver may be in the middle of a copy when
    /// the device looks. Stop it when the driver is not posting. When idle the thread sleeps
    /// (module documentation: [`SPIN_AFTER_WORK`], [`MAX_IDLE_SLEEP`]).
    pub fn start_thread(&self) -> FabricThread {
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        let flag = stop.clone();
        self.inner.lock().enter_threaded();
        let handle = std::thread::Builder::new()
            .name("mlx5-sim".into())
            .spawn(move || {
                thread_loop(&inner, &flag);
                inner.lock().leave_threaded();
            })
            .ok();
        if handle.is_none() {
            self.inner.lock().leave_threaded();
        }
        FabricThread {
            stop,
            handle,
            inner: self.inner.clone(),
        }
    }
}

/// The fabric thread: step while there is work, keep stepping for [`SPIN_AFTER_WORK`], then
/// sleep with exponential backoff until woken.
fn thread_loop(inner: &Inner, stop: &AtomicBool) {
    let start = Instant::now();
    let base = inner.lock().now;
    let mut last_work = Instant::now();
    let mut backoff = MIN_IDLE_SLEEP;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let mut w = inner.lock();
        // The clock follows the wall clock step by step, and each step receives what arrived
        // before it fires timers ([`World::step_at`]): work that arrived since the last pass
        // (a doorbell, a frame) runs at the time the device does it, which is what it stamps
        // (CQE timestamps, pcap times), and a response that waited while this thread was
        // descheduled is not taken for a lost one.
        let mut busy = false;
        for _ in 0..MAX_STEPS_PER_PASS {
            let t = base + start.elapsed().as_nanos() as u64;
            if !w.step_at(t) {
                break;
            }
            busy = true;
        }
        if busy {
            drop(w);
            last_work = Instant::now();
            backoff = MIN_IDLE_SLEEP;
            continue;
        }
        if last_work.elapsed() < SPIN_AFTER_WORK {
            drop(w);
            std::thread::yield_now();
            continue;
        }
        // Idle: sleep until a device call, a UDP frame, the next timer or the backoff.
        let timeout = match w.next_deadline() {
            Some(at) => backoff.min(Duration::from_nanos(at.saturating_sub(w.now))),
            None => backoff,
        };
        fds.clear();
        fds.extend(
            inner
                .waker
                .raw_fd()
                .into_iter()
                .chain(
                    w.devs
                        .iter()
                        .filter_map(|d| d.udp.as_ref())
                        .flat_map(|u| u.raw_fds()),
                )
                .chain(
                    w.devs
                        .iter()
                        .filter_map(|d| d.tap.as_ref().map(|t| t.as_raw_fd())),
                )
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
        );
        inner.waker.parked.fetch_add(1, Ordering::SeqCst);
        drop(w);
        // A stop or kick between the last check and here has already made the eventfd
        // readable, so ppoll returns at once.
        let woken = !stop.load(Ordering::SeqCst) && sleep_on(&mut fds, timeout);
        inner.waker.parked.fetch_sub(1, Ordering::SeqCst);
        if woken {
            // A device call or a frame: work is likely to follow, wake up quickly next time.
            if let Some(fd) = &inner.waker.fd {
                fd.clear();
            }
            backoff = MIN_IDLE_SLEEP;
        } else {
            backoff = (backoff * 2).min(MAX_IDLE_SLEEP);
        }
    }
}

/// `ppoll(2)` on `fds` for at most `timeout`; whether any became ready (or the call failed,
/// which the caller treats like a wake-up: it just steps again).
fn sleep_on(fds: &mut [libc::pollfd], timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos() as libc::c_long, // < 10^9
    };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfds and `ts` a valid timespec for the
    // duration of the call; no signal mask is changed (NULL).
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    r != 0
}

/// The background thread of a fabric; stops and joins when dropped.
pub struct FabricThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FabricThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricThread")
            .field("running", &self.handle.is_some())
            .finish()
    }
}

impl FabricThread {
    /// Whether the thread could be started.
    pub fn is_running(&self) -> bool {
        self.handle.is_some()
    }

    /// CPU time the thread has used so far (`pthread_getcpuclockid` + `clock_gettime`);
    /// `None` if it is not running or the clock cannot be read.
    pub fn cpu_time(&self) -> Option<Duration> {
        let h = self.handle.as_ref()?;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread has not been joined or detached (the handle is held), so its
        // pthread_t is valid; `clock` is a valid out-pointer.
        if unsafe { libc::pthread_getcpuclockid(h.as_pthread_t(), &mut clock) } != 0 {
            return None;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock` was just obtained; `ts` is a valid out-pointer.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return None;
        }
        Some(Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }
}

/// How long a stopping fabric thread lets the frames already on the wire leave.
const DRAIN_ON_STOP: Duration = Duration::from_millis(200);

impl Drop for FabricThread {
    /// Lets the frames already on the wire leave (200 ms at most), as a NIC
    /// sends what it has queued whatever its process does next: a program that exits right
    /// after its last completion would otherwise take its last ACK or NAK with it, and its
    /// peer would retry into RETRY_EXC_ERR. Then stops the thread.
    fn drop(&mut self) {
        let end = Instant::now() + DRAIN_ON_STOP;
        while !self.inner.lock().wire.is_empty() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.stop.store(true, Ordering::SeqCst);
        self.inner.waker.force();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The fault controls that name devices (here, above [`SimDevice`], so the fault rules below
/// the devices need not know them).
impl Faults {
    /// The link between two devices, both directions (`link(a, b)` and `link(b, a)` are the
    /// same link).
    pub fn link(&self, a: &SimDevice, b: &SimDevice) -> FaultTarget {
        self.link_ipv4(a.ipv4().octets(), b.ipv4().octets())
    }

    /// One direction: frames from `from` to `to`.
    pub fn path(&self, from: &SimDevice, to: &SimDevice) -> FaultTarget {
        self.target(Scope::Path(from.ipv4(), to.ipv4()))
    }

    /// Frames addressed to QP `qpn` of device `dev` (requests to its responder and responses
    /// to its requester). The same as `to_device(dev).qpn(qpn)`.
    pub fn qp(&self, dev: &SimDevice, qpn: u32) -> FaultTarget {
        self.target(Scope::Qp(dev.ipv4(), qpn))
    }

    /// Frames addressed to device `dev`, from any sender; narrow to one of its QPs with
    /// [`FaultTarget::qpn`].
    pub fn to_device(&self, dev: &SimDevice) -> FaultTarget {
        self.target(Scope::ToDevice(dev.ipv4()))
    }

    /// Frames device `dev` transmits, to any receiver.
    pub fn from_device(&self, dev: &SimDevice) -> FaultTarget {
        self.target(Scope::FromDevice(dev.ipv4()))
    }

    /// Take the port of device `dev` down, as a cable pulled at the adapter: nothing enters or
    /// leaves it and the device raises `IBV_EVENT_PORT_ERR` ([`SimDevice::set_port_state`]).
    /// A [`FaultTarget::down`] link is a path through the fabric that loses every frame, with
    /// both ports still up and no event; this is the port itself.
    pub fn port_down(&self, dev: &SimDevice) {
        dev.set_port_state(PortState::Down);
    }

    /// Bring the port of device `dev` back ([`Faults::port_down`]): `IBV_EVENT_PORT_ACTIVE`.
    pub fn port_up(&self, dev: &SimDevice) {
        dev.set_port_state(PortState::Active);
    }

    /// Put device `dev` in its fatal state (`IBV_EVENT_DEVICE_FATAL`, a catastrophic error of
    /// the adapter: firmware or hardware gone): every QP moves to Error, the event is raised,
    /// and from then on the device writes no CQE, moves no data and refuses every call that
    /// creates, modifies (but to Reset or Error) or queries an object, as mlx5 does after an
    /// internal error; objects can still be destroyed. Nothing brings it back.
    ///
    /// No flush CQE, as on a ConnectX: libmlx5 makes none for user QPs, and the kernel makes
    /// software completions for its own QPs only (`drivers/infiniband/hw/mlx5/cq.c`
    /// `mlx5_ib_poll_cq` -> `mlx5_ib_poll_sw_comp`) and wakes only their CQs
    /// (`mlx5_ib_handle_internal_error`): a program learns of it from the event, which is why
    /// the waiting helpers of `mlx5-ctx` watch for it rather than for completions, and why its
    /// owning objects retire the outstanding work themselves (`Cq::flush_dead`).
    pub fn device_fatal(&self, dev: &SimDevice) {
        dev.inject_fatal_error();
    }

    /// Inject an SRQ catastrophic error on SRQ `srq` of device `dev` (`IBV_EVENT_SRQ_ERR`): the
    /// SRQ hands out no more receive WQEs (a message that needs one is answered RNR NAK, as
    /// rxe answers for an SRQ in error) and keeps those posted until it is destroyed. ConnectX
    /// raises this event from its SRQ catastrophic-error event only
    /// (`MLX5_EVENT_TYPE_SRQ_CATAS_ERROR`, kernel `drivers/infiniband/hw/mlx5/srq.c`), an
    /// internal failure no WQE a program writes can cause (a malformed receive WQE completes
    /// with an error CQE on the QP that took it): so the software ConnectX raises it only when
    /// injected. Fails for an SRQ the device does not hold.
    pub fn srq_error(&self, dev: &SimDevice, srq: mlx5_hw::SrqId) -> mlx5_hw::Result<()> {
        dev.inject_srq_error(srq)
    }
}
