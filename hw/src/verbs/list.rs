//! Listing the RDMA devices libibverbs sees (`ibv_get_device_list`).

use std::ffi::CStr;

use super::ffi::{dv, ibv, null_error, RdmaCore};
use crate::error::{Error, Result};

/// One RDMA device as `ibv_get_device_list` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// Whether the mlx5 provider drives it (`mlx5dv_is_supported`), so the direct data path
    /// (mlx5dv rings) is available.
    pub mlx5: bool,
}

/// The `ibv_get_device_list` array, freed on drop.
pub(super) struct DeviceList {
    /// The loaded libraries (the first list of the process loads them).
    pub(super) rdma: &'static RdmaCore,
    list: *mut *mut ibv::ibv_device,
    len: usize,
}

impl DeviceList {
    /// Asks libibverbs for the device list, loading rdma-core first if this is the first
    /// call of the process ([`RdmaCore::get`]; a host without it is [`Error::RdmaCore`]).
    ///
    /// A machine without RDMA support in the kernel (no `/sys/class/infiniband`) makes
    /// libibverbs fail with `ENOSYS`; that is an empty list here, not an error.
    pub(super) fn get() -> Result<DeviceList> {
        let rdma = RdmaCore::get().map_err(|source| Error::RdmaCore {
            device: None,
            source,
        })?;
        let mut n: std::ffi::c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array (or NULL) is owned by us until
        // `ibv_free_device_list`, which `Drop` calls.
        let list = unsafe { rdma.ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = super::ffi::errno();
            return match e.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::ENOENT) | Some(0) | None => {
                    Ok(DeviceList { rdma, list, len: 0 })
                }
                _ => Err(null_error("ibv_get_device_list")),
            };
        }
        Ok(DeviceList {
            rdma,
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    /// The raw device pointers (valid while `self` lives).
    pub(super) fn devices(&self) -> impl Iterator<Item = *mut ibv::ibv_device> + '_ {
        (0..self.len).map(move |i| {
            // SAFETY: libibverbs returns an array of `len` device pointers followed by NULL;
            // `i < len`.
            unsafe { *self.list.add(i) }
        })
    }

    /// What is known about one device of this list.
    pub(super) fn info(&self, dev: *mut ibv::ibv_device) -> DeviceInfo {
        // SAFETY: `dev` comes from a live device list; `ibv_get_device_name` returns a
        // NUL-terminated string owned by the device, copied out at once.
        let name = unsafe {
            let p = self.rdma.ibv_get_device_name(dev);
            if p.is_null() {
                String::from("?")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: as above; both calls only read the device structure.
        let (guid, mlx5) = unsafe {
            (
                self.rdma.ibv_get_device_guid(dev),
                self.rdma.mlx5dv_is_supported(dev.cast::<dv::ibv_device>()),
            )
        };
        DeviceInfo {
            name,
            node_guid: u64::from_be(guid),
            mlx5,
        }
    }

    /// The device named `name`, or a `NoDevice` error listing the devices that exist.
    pub(super) fn find(&self, name: &str) -> Result<*mut ibv::ibv_device> {
        let mut seen = Vec::new();
        for d in self.devices() {
            let info = self.info(d);
            if info.name == name {
                return Ok(d);
            }
            seen.push(info.name);
        }
        Err(no_device(name, &seen))
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        if !self.list.is_null() {
            // SAFETY: `list` came from `ibv_get_device_list` and is freed exactly once; contexts
            // opened from it stay valid after the free (libibverbs refcounts devices).
            unsafe { self.rdma.ibv_free_device_list(self.list) };
        }
    }
}

/// The `NoDevice` error for `name`, naming what was found and what to check.
pub(super) fn no_device(name: &str, found: &[String]) -> Error {
    let why = if found.is_empty() {
        "no RDMA device found. Check that the NIC's driver (mlx5_core + mlx5_ib) and ib_uverbs \
         are loaded (`ibv_devices`, `ls /sys/class/infiniband`), that /dev/infiniband/uverbs* \
         is readable and writable by this user, and that rdma-core's providers \
         (ibverbs-providers) are installed"
            .to_string()
    } else {
        format!(
            "not found; devices present: {}. Pass one of those names (`ibv_devices` lists them)",
            found.join(", ")
        )
    };
    Error::NoDevice {
        name: name.to_string(),
        why,
    }
}

/// Every RDMA device on this machine (empty when the kernel has no RDMA support), loading
/// rdma-core at the first call ([`Error::RdmaCore`] when it is not installed).
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    Ok(list.devices().map(|d| list.info(d)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_message_lists_what_exists() {
        let e = no_device("mlx5_0", &["rxe0".into(), "rxe1".into()]).to_string();
        assert!(e.contains("mlx5_0") && e.contains("rxe0, rxe1"), "{e}");
        let e = no_device("mlx5_0", &[]).to_string();
        assert!(
            e.contains("no RDMA device") && e.contains("/dev/infiniband"),
            "{e}"
        );
    }
}
