//! The preload library under real programs: Debian's unmodified rdma-core 44 tools, perftest
//! and UCX run on the software ConnectX, each bounded by a timeout and its output checked.

mod dc;
mod descheduled;
mod discovery;
mod driver_bugs;
mod errno;
mod faults;
mod perftest;
mod pingpong;
mod support;
mod ucx;
mod unmapped_memory;
