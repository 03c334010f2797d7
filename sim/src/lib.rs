//! # mlx5-sim: the software ConnectX
//!
//! A device model that plays the hardware side of the mlx5 contract (see DESIGN §4).
#![deny(missing_docs)]

pub mod pcap;
pub mod wire;
