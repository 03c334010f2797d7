//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod async_events;
mod bounded;
mod common;
mod cq_overrun;
mod doorbell;
mod errors;
mod events;
mod garbage;
mod loss;
mod loss_prop;
mod loss_uc_ud;
mod objects;
mod pcap_roundtrip;
mod pcap_tshark;
mod rc_ops;
mod rnr_fault;
mod rnr_loss;
mod shared_bfregs;
mod state;
mod tap;
mod threaded;
mod threaded_doorbells;
mod uc_ud;
mod udp;
mod wire_bytes;
mod wire_golden_rxe;
mod wire_proptest;
mod wire_segment;
mod wrap;
mod xrc_wire;
