//! The QP state machine table. (Filled in by the control-path work.)
