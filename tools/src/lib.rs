//! The shared, safe part of the perftest-compatible tools `lat` and `bw`: command-line
//! arguments ([`args`]), statistics ([`stats`]), perftest-style report lines ([`report`]), the
//! latency histogram picture ([`svg`]), terminal progress ([`progress`]), errors
//! ([`error`]), what a server and its client tell each other before they connect ([`hello`]),
//! the control connection and the UDP link between two processes ([`rendezvous`]), which
//! source GID a RoCE port uses by default ([`gid`]), what `-I` asks of the device
//! ([`inline`]) and the edges of a run ([`serve`]).
//!
//! The tools print the same columns as perftest's `ib_write_lat` / `ib_write_bw` (perftest
//! `src/perftest_parameters.c`, `print_report_lat` / `print_report_bw`) so that their figures
//! can be put side by side with perftest's on the same machine (`docs/sources.md` §21). What
//! needs `unsafe` — registering memory and building the data path from the device's layouts —
//! lives in the binaries (`src/bin/support/side.rs`), since this crate forbids unsafe code.
#![deny(missing_docs)]

pub mod args;
pub mod error;
pub mod gid;
pub mod hello;
pub mod inline;
pub mod progress;
pub mod rendezvous;
pub mod report;
pub mod serve;
pub mod side;
pub mod stats;
pub mod svg;

pub use error::{Error, Result};
