//! Port counters from sysfs.
//!
//! The kernel exposes two directories per port (Documentation/ABI/stable/sysfs-class-infiniband):
//! `counters/` (IBTA PortCounters: `port_xmit_packets`, `port_rcv_data`, ...) and
//! `hw_counters/` (driver counters; mlx5 spells them `out_of_sequence`, `packet_seq_err`,
//! `local_ack_timeout_err`, `rnr_nak_retry_err`, `duplicate_request`, `out_of_buffer`, ...;
//! drivers/infiniband/hw/mlx5/counters.c). rxe has `hw_counters/` with its own names.

use std::path::{Path, PathBuf};

use crate::device::Counter;
use crate::error::{Error, Result};

/// Where the kernel publishes RDMA devices.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// Reads every counter of `device`'s `port` under `root` (normally [`SYSFS_INFINIBAND`]):
/// `hw_counters/*` first, then `counters/*`, each sorted by name.
///
/// Files that are not a decimal number (a few drivers publish text such as `lifespan`) are
/// skipped; an unreadable file is skipped too (some counters need privileges). The port
/// directory itself must exist.
pub fn read_counters(root: &Path, device: &str, port: u8) -> Result<Vec<Counter>> {
    let port_dir: PathBuf = root.join(device).join("ports").join(port.to_string());
    if !port_dir.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{} does not exist: {device} has no port {port} (or the kernel does not publish it)",
            port_dir.display()
        )));
    }
    let mut out = Vec::new();
    for sub in ["hw_counters", "counters"] {
        let dir = port_dir.join(sub);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut group: Vec<Counter> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                if name == "lifespan" {
                    return None;
                }
                let text = std::fs::read_to_string(e.path()).ok()?;
                let value = text.trim().parse::<u64>().ok()?;
                Some(Counter { name, value })
            })
            .collect();
        group.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(group);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tree() -> PathBuf {
        let root = std::env::temp_dir().join(format!("mlx5-hw-counters-{}", std::process::id()));
        let p = root.join("mlx5_0/ports/1");
        std::fs::create_dir_all(p.join("hw_counters")).unwrap();
        std::fs::create_dir_all(p.join("counters")).unwrap();
        std::fs::write(p.join("hw_counters/out_of_sequence"), "17\n").unwrap();
        std::fs::write(p.join("hw_counters/duplicate_request"), "3\n").unwrap();
        std::fs::write(p.join("hw_counters/lifespan"), "10\n").unwrap();
        std::fs::write(p.join("counters/port_xmit_packets"), "123456789012\n").unwrap();
        std::fs::write(p.join("counters/not_a_number"), "N/A\n").unwrap();
        root
    }

    #[test]
    fn reads_hw_counters_then_port_counters() {
        let root = fake_tree();
        let c = read_counters(&root, "mlx5_0", 1).unwrap();
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["duplicate_request", "out_of_sequence", "port_xmit_packets"]
        );
        assert_eq!(c[1].value, 17);
        assert_eq!(c[2].value, 123_456_789_012);
        let e = read_counters(&root, "mlx5_0", 2).unwrap_err().to_string();
        assert!(e.contains("no port 2"), "{e}");
        std::fs::remove_dir_all(root).unwrap();
    }
}
