//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area.

mod qp_state_dc;
mod qp_state_doc;
mod qp_state_table;
mod qp_state_transition;
mod qp_state_values;
mod verbs_host;
mod verbs_rxe;
