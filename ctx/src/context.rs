//! The device context: which device, and (for the software ConnectX) the fabric and thread it
//! needs, kept alive by every object made from it.

use std::fmt;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mlx5_hw::{CqId, CqInitAttr, Device, DeviceAttr, PortAttr};

use crate::channel::CompChannel;
use crate::cq::{Cq, CqInit};
use crate::error::{Error, Result};
use crate::events::{AsyncEvents, Watch};
use crate::pd::Pd;

/// An open device: the software ConnectX ([`Context::sim`], [`SimFabric`]), a ConnectX
/// (`mlx5_N`, through rdma-core loaded at run time), or any [`Device`]
/// ([`Context::from_device`]).
///
/// Cloning gives another handle to the same device. The device is closed when the last handle
/// and the last object made from it (PD, MR, CQ, QP, ...) are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) dev: Arc<dyn Device>,
    /// The fabric a software ConnectX lives on (kept alive, with its thread, by the context).
    #[cfg(feature = "sim")]
    sim: Option<(mlx5_sim::SimDevice, SimFabric)>,
    /// An [`AsyncEvents`] is taking the device's asynchronous events (one consumer).
    pub(crate) async_events_taken: AtomicBool,
    /// Whether the device died, and the events the helpers took ([`crate::events`]).
    pub(crate) watch: Watch,
    /// The QPs' CQs and the flushes retired once the device died ([`crate::dead`]).
    pub(crate) dead: crate::dead::Dead,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.dev.name())
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Open a device by name: `sim` is a software ConnectX on a fabric of its own, on its own
    /// thread ([`Context::sim`]); anything else is a verbs device (`mlx5_0`, `rxe0`), opened
    /// through rdma-core's libibverbs and libmlx5, which the first such open of the process
    /// loads ([`mlx5_hw::verbs::VerbsDevice::open`]). Every build has both: a host without
    /// rdma-core still opens `sim`, and opening a verbs device there fails with an error
    /// naming the packages to install ([`mlx5_hw::Error::RdmaCore`]).
    pub fn open(name: &str) -> Result<Context> {
        #[cfg(feature = "sim")]
        if name == "sim" {
            return Context::sim();
        }
        let dev = mlx5_hw::verbs::VerbsDevice::open(name)?;
        Ok(Context::from_device(Arc::new(dev)))
    }

    /// A context over any device implementation.
    pub fn from_device(dev: Arc<dyn Device>) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                dev,
                #[cfg(feature = "sim")]
                sim: None,
                async_events_taken: AtomicBool::new(false),
                watch: Watch::new(),
                dead: Default::default(),
            }),
        }
    }

    /// A software ConnectX (IPv4 10.0.0.1) alone on a fabric that runs on its own thread.
    #[cfg(feature = "sim")]
    pub fn sim() -> Result<Context> {
        Ok(SimFabric::threaded()?.add_device())
    }

    /// Two software ConnectX devices (10.0.0.1 and 10.0.0.2) on one fabric that runs on its own
    /// thread: the usual start of a test or a demo.
    #[cfg(feature = "sim")]
    pub fn sim_pair() -> Result<(Context, Context)> {
        let f = SimFabric::threaded()?;
        Ok((f.add_device(), f.add_device()))
    }

    /// The control path of the device.
    pub fn device(&self) -> &dyn Device {
        &*self.inner.dev
    }

    /// The device as a shareable handle.
    pub fn device_arc(&self) -> Arc<dyn Device> {
        self.inner.dev.clone()
    }

    /// The device's name (`sim0`, `mlx5_0`).
    pub fn name(&self) -> &str {
        self.inner.dev.name()
    }

    /// Device capabilities.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.inner.dev.query_device()?)
    }

    /// Attributes of port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        Ok(self.inner.dev.query_port(port)?)
    }

    /// The software ConnectX this context is, if it is one.
    #[cfg(feature = "sim")]
    pub fn sim_device(&self) -> Option<&mlx5_sim::SimDevice> {
        self.inner.sim.as_ref().map(|(d, _)| d)
    }

    /// The fabric of a software ConnectX context (fault injection, captures, stepping).
    #[cfg(feature = "sim")]
    pub fn sim_fabric(&self) -> Option<&SimFabric> {
        self.inner.sim.as_ref().map(|(_, f)| f)
    }

    /// Give a device that is not driven by a thread the chance to work: a software ConnectX on
    /// a deterministic fabric runs until idle; on a threaded fabric or a ConnectX nothing
    /// happens. The waiting helpers call this on every round.
    pub fn progress(&self) {
        #[cfg(feature = "sim")]
        if let Some((_, f)) = &self.inner.sim {
            if !f.is_threaded() {
                f.fabric().run_until_idle();
            }
            return;
        }
        self.inner.dev.progress();
    }

    /// Whether the device moves only when stepped ([`Context::progress`]): a software ConnectX
    /// on a deterministic fabric. Nothing wakes a sleeper on such a device.
    pub fn is_stepped(&self) -> bool {
        #[cfg(feature = "sim")]
        if let Some((_, f)) = &self.inner.sim {
            return !f.is_threaded();
        }
        false
    }

    /// Whether the device reported CQ `cq` in error (`IBV_EVENT_CQ_ERR`, the event a ConnectX
    /// raises when a CQ overruns). The events are the only report a device gives of it, on a
    /// ConnectX as on the software ConnectX: while an [`AsyncEvents`] holds the queue, its
    /// reads note them; while none does, this reads the device's queue itself and keeps what
    /// it takes for the next [`AsyncEvents`], in order ([`crate::events`]).
    pub(crate) fn cq_in_error(&self, cq: CqId) -> bool {
        self.take_events();
        self.inner.watch.cq_in_error(cq)
    }

    /// A destroyed CQ: its handle may name another CQ later.
    pub(crate) fn forget_cq(&self, cq: CqId) {
        self.inner.watch.forget_cq(cq);
        self.inner.dead.forget_cq(cq);
    }

    /// Why a wait on this device may not end whatever the peer does, for timeout messages: a
    /// deterministic software ConnectX that nobody steps.
    pub(crate) fn stall_hint(&self) -> Option<&'static str> {
        self.is_stepped().then_some(
            "the software ConnectX is deterministic: it moves only when stepped \
             (Context::progress, Fabric::run_until_idle, Fabric::advance for timers)",
        )
    }

    /// Whether the device reported a fatal error (`IBV_EVENT_DEVICE_FATAL`): it completes and
    /// creates nothing any more; destroy its objects and open it again. Known as soon as the
    /// event is taken, by an [`AsyncEvents`] or, while none exists, by this call or a waiting
    /// helper ([`crate::events`]).
    pub fn is_fatal(&self) -> bool {
        self.take_events();
        self.inner.watch.is_fatal()
    }

    /// While no [`AsyncEvents`] takes the device's events, take them here (kept for the next
    /// one), so a dead device is noticed.
    pub(crate) fn take_events(&self) {
        if self.inner.async_events_taken.load(Ordering::Acquire) {
            return;
        }
        let dev = self.device();
        while let Some(e) = dev.poll_async_event() {
            self.inner.watch.saw(&e, dev.name());
            self.inner.watch.keep(e, dev.name());
        }
    }

    /// [`Error::DeviceFatal`] (with `completions`) once the device is dead.
    pub(crate) fn check_alive(&self, completions: &[mlx5_qp::Wc]) -> Result<()> {
        if self.is_fatal() {
            return Err(self.fatal_error(completions.to_vec(), crate::Unretired::default()));
        }
        Ok(())
    }

    /// [`Error::DeviceFatal`] with what a wait polled and what its flush left.
    pub(crate) fn fatal_error(
        &self,
        completions: Vec<mlx5_qp::Wc>,
        unretired: crate::Unretired,
    ) -> Error {
        Error::DeviceFatal {
            device: self.name().to_string(),
            completions,
            unretired,
        }
    }

    /// The descriptors a waiting helper sleeps on besides its own, so that a dead device wakes
    /// it: the context's wake-up socket, and the device's event fd while no [`AsyncEvents`]
    /// takes the events (else that consumer's taking the event wakes the socket).
    /// Copies of the context's wake-up socket and of the device's event fd, for a reactor to
    /// own ([`Context::wake_fds`]; the `tokio` feature's `AsyncChannel`).
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_fds_owned(&self) -> Vec<std::os::fd::OwnedFd> {
        let mut fds: Vec<std::os::fd::OwnedFd> =
            self.inner.watch.wake_clone().into_iter().collect();
        if let Ok(fd) = self.device().async_event_fd() {
            fds.extend(crate::events::dup_event_fd(self, fd));
        }
        fds
    }

    pub(crate) fn wake_fds(&self) -> Vec<RawFd> {
        let mut fds: Vec<RawFd> = self.inner.watch.wake_fd().into_iter().collect();
        if !self.inner.async_events_taken.load(Ordering::Acquire) {
            if let Ok(fd) = self.device().async_event_fd() {
                fds.push(fd);
            }
        }
        fds
    }

    /// Allocate a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }

    /// A CQ of at least `cqe` entries (64-byte CQEs, no completion channel).
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        Cq::new(self, &Self::cq_init(cqe), None)
    }

    fn cq_init(cqe: u32) -> CqInit {
        CqInit {
            attr: CqInitAttr {
                cqe,
                ..CqInitAttr::default()
            },
        }
    }

    /// A CQ with every creation attribute (`init.attr.channel` must be `None`: attach a CQ to
    /// a channel with [`Context::create_cq_on_with`]).
    pub fn create_cq_with(&self, init: &CqInit) -> Result<Cq> {
        Cq::new(self, init, None)
    }

    /// A completion channel (`ibv_create_comp_channel`): one fd for the completion events of
    /// every CQ created on it ([`crate::channel`]).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::new(self)
    }

    /// A CQ of at least `cqe` entries that reports its completion events to `channel` (which
    /// it keeps alive). Arm it with [`Cq::arm`].
    pub fn create_cq_on(&self, cqe: u32, channel: &CompChannel) -> Result<Cq> {
        Cq::new(self, &Self::cq_init(cqe), Some(channel))
    }

    /// [`Context::create_cq_on`] with every creation attribute.
    pub fn create_cq_on_with(&self, init: &CqInit, channel: &CompChannel) -> Result<Cq> {
        Cq::new(self, init, Some(channel))
    }

    /// The device's asynchronous events (every `ibv_event_type`: QP fatal, communication
    /// established, last WQE reached, SRQ error and limit, port up and down, CQ error, device
    /// fatal, ...) with their own fd ([`crate::events`]). One consumer at a time: a second call
    /// while the first is alive is refused.
    pub fn async_events(&self) -> Result<AsyncEvents> {
        AsyncEvents::new(self)
    }

    /// Whether `other` is a handle to the same device.
    pub fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn check_same(&self, other: &Context, what: &'static str) -> Result<()> {
        if self.same_device(other) {
            Ok(())
        } else {
            Err(Error::WrongContext {
                what,
                theirs: other.name().to_string(),
                ours: self.name().to_string(),
            })
        }
    }
}

#[cfg(feature = "sim")]
pub use sim::SimFabric;

#[cfg(feature = "sim")]
mod sim {
    use super::*;
    use mlx5_sim::{DeviceConfig, Fabric, FabricThread};

    /// A fabric of software ConnectX devices, running on its own thread ([`SimFabric::threaded`],
    /// the default of this API) or stepped by the program ([`SimFabric::deterministic`]).
    /// Cloning gives another handle; the thread stops when the last handle and the last
    /// context of its devices are gone.
    #[derive(Clone)]
    pub struct SimFabric {
        inner: Arc<FabricInner>,
    }

    struct FabricInner {
        // Declared first: the thread stops (and is joined) before the fabric goes.
        thread: Option<FabricThread>,
        fabric: Fabric,
    }

    impl fmt::Debug for SimFabric {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("SimFabric")
                .field("threaded", &self.is_threaded())
                .field("fabric", &self.inner.fabric)
                .finish()
        }
    }

    impl SimFabric {
        /// A fabric whose devices work on a background thread, as a NIC works beside the CPU.
        pub fn threaded() -> Result<SimFabric> {
            let fabric = Fabric::new();
            let thread = fabric.start_thread();
            if !thread.is_running() {
                return Err(Error::NoDevice(
                    "could not start the software ConnectX's thread".into(),
                ));
            }
            Ok(SimFabric {
                inner: Arc::new(FabricInner {
                    thread: Some(thread),
                    fabric,
                }),
            })
        }

        /// A fabric that moves only when stepped ([`Context::progress`], or the [`Fabric`]'s
        /// `step`, `run_until_idle`, `advance`): reproducible tests in virtual time.
        pub fn deterministic() -> SimFabric {
            SimFabric {
                inner: Arc::new(FabricInner {
                    thread: None,
                    fabric: Fabric::new(),
                }),
            }
        }

        /// Whether a background thread drives the fabric.
        pub fn is_threaded(&self) -> bool {
            self.inner.thread.is_some()
        }

        /// The fabric itself: fault injection, captures, virtual time, driver bugs.
        pub fn fabric(&self) -> &Fabric {
            &self.inner.fabric
        }

        /// Add a device with the next address (10.0.0.1, 10.0.0.2, ...) and open it.
        pub fn add_device(&self) -> Context {
            let n = self.inner.fabric.device_count() as u8;
            self.add_device_with(DeviceConfig::new([10, 0, 0, n.wrapping_add(1)]))
        }

        /// Add a device built from `cfg` and open it.
        pub fn add_device_with(&self, cfg: DeviceConfig) -> Context {
            let dev = self.inner.fabric.add_device(cfg);
            Context {
                inner: Arc::new(ContextInner {
                    dev: Arc::new(dev.clone()),
                    sim: Some((dev, self.clone())),
                    async_events_taken: AtomicBool::new(false),
                    watch: Watch::new(),
                    dead: Default::default(),
                }),
            }
        }
    }
}
