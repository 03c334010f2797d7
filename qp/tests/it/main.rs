//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod common;
mod datapath_errors;
mod datapath_prop;
mod datapath_rc;
mod datapath_srq;
mod datapath_stress;
mod datapath_support;
mod datapath_uc_ud;
mod dc;
mod dc_refusals;
mod dispatch;
mod fuzz_replay;
mod layout_rules;
mod lean;
mod lean_doorbells;
mod mcast;
mod mmio_trace;
mod poll;
mod poll_own;
mod poll_recv;
mod poll_send;
mod post;
mod post_raw;
mod post_rules;
mod prop;
mod scatter_cqe;
mod timestamps;
mod wr_limit;
mod xrc;
