//! The perftest-compatible tools `lat` and `bw` and the ping-pong tools `rc_pingpong` and
//! `ud_pingpong`, built on the library's public API (`mlx5-ctx` owning objects,
//! `mlx5-connect`): command-line arguments ([`args`]) and
//! their limits ([`limits`]), the devices of a run ([`devices`]) and one end's resources on them
//! ([`resources`]), connecting their QPs ([`connecting`]), the post/poll path under measurement
//! ([`path`]), how long a wait may last ([`patience`]), statistics ([`stats`]), perftest-style
//! report lines ([`report`]), the latency histogram as an SVG picture ([`svg`]) and as an
//! HdrHistogram log ([`hlog`]), terminal progress ([`progress`]), errors ([`error`]), what a
//! server and its client tell each other before they connect ([`hello`]) and after a
//! bidirectional run ([`results`]), the control connection and the UDP link between two
//! processes ([`rendezvous`]), perftest's own exchange for runs against stock perftest
//! ([`perftest`]), which source GID a RoCE port uses by default ([`gid`]), what `-I` asks of the
//! device ([`inline`]), what `lat` and `bw` do alike around a run ([`run`]), the edges of a run
//! ([`serve`]), the log every program installs ([`log`]), what the `rc_pingpong` and
//! `ud_pingpong` binaries share ([`pingpong`]) and the NIC's figures of `lat --timestamps`
//! ([`timestamps`]); `-c DC` ([`dc`]) and `-c XRC` ([`xrc`]).
//!
//! The tools print the same columns as perftest's `ib_write_lat` / `ib_write_bw`
//! (perftest `src/perftest_parameters.c`, `print_report_lat` / `print_report_bw`) so that their
//! figures can be put side by side with perftest's on the same machine (`docs/perftest.md`).
//! This crate has no `unsafe` code: registered memory is reached only through `mlx5_ctx::Mr`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod args;
pub mod connecting;
pub mod cpu;
pub mod dc;
pub mod devices;
pub mod error;
pub mod gid;
pub mod hello;
pub mod hlog;
pub mod ibv_exchange;
pub mod inline;
pub mod limits;
pub mod log;
pub mod path;
pub mod patience;
pub mod perftest;
pub mod pingpong;
pub mod progress;
pub mod rendezvous;
pub mod report;
pub mod resources;
pub mod results;
pub mod run;
pub mod serve;
pub mod stats;
pub mod svg;
pub mod timestamps;
pub mod xrc;

pub use error::{Error, Result};
