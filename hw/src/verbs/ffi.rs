//! The two FFI surfaces this backend uses, and how their errors become [`Error`]s.
//!
//! - `mlx5dv_sys::RdmaCore`: rdma-core's `libibverbs.so.1` and `libmlx5.so.1`, loaded with
//!   `dlopen` when a device is first listed or opened ([`RdmaCore::get`], kept in
//!   [`super::VerbsDevice`]); every exported function (`ibv_open_device`, `ibv_create_qp`,
//!   `mlx5dv_init_obj`, ...) is a method of it. Nothing is linked at build time.
//! - `mlx5dv_sys::ibv` (hand-written, aliased `ibv`): the verbs types, and Rust versions of
//!   the `static inline` functions (`ibv_post_send`, `ibv_poll_cq`, `ibv_create_cq_ex`,
//!   `ibv_alloc_td`, ...), which dispatch through the provider's ops table exactly as
//!   `<infiniband/verbs.h>` does, without the loaded table. No C shim, no bindgen.
//! - `mlx5dv_sys` (aliased `dv`): the mlx5dv types, taking the same verbs types (`dv::ibv_qp`
//!   is `ibv::ibv_qp`), so the pointer casts at the call sites are identities.

use std::ffi::c_int;
use std::io;

use crate::error::Error;

pub(super) use mlx5dv_sys as dv;
pub(super) use mlx5dv_sys::ibv;
pub(super) use mlx5dv_sys::RdmaCore;

/// The `errno` a failed verbs call left behind, as an [`io::Error`].
pub(super) fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// The error of a call that returned NULL (and set `errno`).
pub(super) fn null_error(call: &'static str) -> Error {
    classify(call, errno())
}

/// The error of a call that returned a non-zero status.
///
/// libibverbs is not uniform: most calls return the errno value itself (`ibv_modify_qp`,
/// `ibv_dealloc_pd`: "returns 0 on success, or the value of errno on failure", man pages), a
/// few return -1 and set `errno`, and some providers return `-errno`. All three are decoded.
pub(super) fn status_io_error(ret: c_int) -> io::Error {
    if ret > 0 {
        io::Error::from_raw_os_error(ret)
    } else {
        let e = errno();
        match e.raw_os_error() {
            Some(code) if code != 0 && ret == -1 => e,
            _ => io::Error::from_raw_os_error(-ret),
        }
    }
}

/// `Ok(())` for 0, else the classified error of `call`.
pub(super) fn check(call: &'static str, ret: c_int) -> crate::error::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(classify(call, status_io_error(ret)))
    }
}

/// Maps an errno to the error variant a caller can act on.
pub(super) fn classify(call: &'static str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EBUSY) => Error::Busy(format!("{call}: {e} (objects still use it)")),
        Some(libc::ENOMEM) | Some(libc::ENOSPC) => Error::Resources(format!(
            "{call}: {e} (device or memory limit reached; if this is pinned memory, raise \
             `ulimit -l`)"
        )),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Error::Unsupported(format!(
            "{call}: {e} (not offered by this device or driver)"
        )),
        // A uverbs command answers EIO once the kernel has disassociated the context: the
        // device died or was removed (`IBV_EVENT_DEVICE_FATAL`; kernel
        // `drivers/infiniband/core/uverbs_main.c` `ib_uverbs_write`, no device behind the
        // file), and libmlx5 passes it on.
        Some(libc::EIO) => Error::DeviceFatal {
            device: "the device of this context".into(),
            call,
        },
        _ => Error::Verbs { call, source: e },
    }
}
