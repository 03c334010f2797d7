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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mlx5_hw::{Gid, LinkLayer, Mtu, PortState};

use crate::bugs::DriverBug;
use crate::device::SimDevice;
use crate::engine::Port;
use crate::wire::MacAddr;
use crate::world::{Dev, World};

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
        }
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

pub(crate) struct Inner {
    pub(crate) world: Mutex<World>,
    pub(crate) link_layer: Mutex<Vec<LinkLayer>>,
}

impl Inner {
    /// Lock the world (a poisoned lock is recovered: the state is still consistent enough to
    /// inspect, and the sim never panics on bad input).
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

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
        };
        let guid = 0x0002_c903_0000_0000 | (idx as u64 + 1);
        let mut dev = Dev::new(name.clone(), port, guid);
        dev.threaded = w.threads > 0;
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

    /// How many devices the fabric holds.
    pub fn device_count(&self) -> usize {
        self.inner.lock().devs.len()
    }

    /// One step of every device and the wire; returns whether anything happened.
    pub fn step(&self) -> bool {
        self.inner.lock().step()
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
    /// the device looks. Stop it when the driver is not posting.
    pub fn start_thread(&self) -> FabricThread {
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        let flag = stop.clone();
        self.inner.lock().enter_threaded();
        let handle = std::thread::Builder::new()
            .name("mlx5-sim".into())
            .spawn(move || {
                let start = Instant::now();
                let base = inner.lock().now;
                let mut idle = 0u32;
                while !flag.load(Ordering::Relaxed) {
                    let busy = {
                        let mut w = inner.lock();
                        let t = base + start.elapsed().as_nanos() as u64;
                        if t > w.now {
                            w.advance_to(t);
                        }
                        w.step()
                    };
                    if busy {
                        idle = 0;
                    } else {
                        idle = idle.saturating_add(1);
                        if idle > 1000 {
                            std::thread::sleep(Duration::from_micros(50));
                        } else {
                            std::thread::yield_now();
                        }
                    }
                }
                inner.lock().leave_threaded();
            })
            .ok();
        if handle.is_none() {
            self.inner.lock().leave_threaded();
        }
        FabricThread { stop, handle }
    }
}

/// The background thread of a fabric; stops and joins when dropped.
#[derive(Debug)]
pub struct FabricThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl FabricThread {
    /// Whether the thread could be started.
    pub fn is_running(&self) -> bool {
        self.handle.is_some()
    }
}

impl Drop for FabricThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
