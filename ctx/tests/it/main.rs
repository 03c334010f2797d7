//! The integration tests of mlx5-ctx, one test binary: drop order of every parent/child pair,
//! memory regions dropped while WRs name them, and random sequences of create/post/drop.
//! Freed buffers are quarantined (feature `quarantine`): an access after free faults at once.

#[cfg(feature = "tokio")]
mod async_cq;
mod channel;
mod cq_overrun;
mod dc;
mod dead_device;
mod drop_order;
mod mr_midstream;
mod open;
mod optional_attrs;
mod poll_until;
mod prop;
mod shared_bfregs;
mod sqe_recovery;
mod support;
mod transports;
mod verbs_xrc;
mod waiting;
