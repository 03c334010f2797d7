//! The sysfs tree libibverbs, libmlx5 and UCX read to find the device: plain files under a
//! directory of this process's own, which `SYSFS_PATH` names (libibverbs `sysfs.c`
//! `ibv_get_sysfs_path` takes it when `getuid() == geteuid()`), laid out as the kernel lays it
//! out (the class directories are symbolic links into `devices/`, so UCX's `realpath` of the
//! device finds its PCI function, UCX `ib_device.c` `uct_ib_device_set_pci_id`).
//!
//! What is read, and by whom (rdma-core v44 unless said):
//!
//! | file | reader |
//! |---|---|
//! | `class/infiniband_verbs/abi_version` = 6 | `init.c` `check_abi_version` |
//! | `class/infiniband_verbs/uverbs0/{ibdev,dev,abi_version}` | `init.c` `setup_sysfs_dev`, `setup_sysfs_uverbs`; mlx5 needs provider ABI 1 |
//! | `class/infiniband/mlx5_0/node_type` | `init.c` `setup_sysfs_dev` (`strtoul`: "1: CA") |
//! | `class/infiniband/mlx5_0/device/modalias` | `init.c` `match_modalias` against mlx5's PCI table (`providers/mlx5/mlx5.c` `hca_table`: vendor 0x15b3, ConnectX-5 is 0x1017) |
//! | `.../mlx5_0/{node_guid,sys_image_guid,fw_ver,hca_type,board_id,hw_rev,node_desc}` | `ibv_devices`, `ibv_devinfo` (`ibv_get_device_guid` reads `node_guid`) |
//! | `.../ports/1/gids/N`, `gid_attrs/types/N` | `cmd_device.c` `query_sysfs_gid_entry` / `query_gid_table_fb` (the GID table when the ioctl method is absent) |
//! | `.../ports/1/pkeys/0` | `verbs.c` `ibv_query_pkey` |
//! | `.../device/{vendor,device,numa_node,local_cpus}` | UCX `ib_device.c` (`vendor`/`device` make `rc_mlx5`/`ud_mlx5` available) |
//! | `.../ports/1/counters/*`, `hw_counters/*` | monitoring tools; refreshed from the device's counters on every open ([`counter_name`]) |
//!
//! The GID table has one entry: index 0, the port's IPv4 address as a RoCE v2 GID
//! (`::ffff:a.b.c.d`, type "RoCE v2"). Every index below `gid_tbl_len` has both files, as a
//! kernel answers for every populated entry (an empty type file would make libibverbs fail the
//! query).

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use mlx5_hw::Gid;

/// The device's name.
pub const IBDEV: &str = "mlx5_0";
/// The uverbs device's name.
pub const UVERBS: &str = "uverbs0";
/// The character device's numbers: `infiniband_verbs` major 231, minor 192 + N (kernel
/// `drivers/infiniband/core/uverbs_main.c` `IB_UVERBS_BASE_DEV`).
pub const CDEV: (u32, u32) = (231, 192);
/// The PCI function the device claims to be.
pub const PCI_SLOT: &str = "0000:03:00.0";
/// The PCI vendor (Mellanox) and device (ConnectX-5) ids.
pub const PCI_IDS: (u16, u16) = (0x15b3, 0x1017);

/// What the tree says about the device.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    /// Node GUID.
    pub guid: u64,
    /// Port 1's IPv4 address (its GID).
    pub ip: Ipv4Addr,
    /// Firmware version string.
    pub fw_ver: String,
}

fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// A GID as the kernel prints it in `gids/N` (eight groups of four hex digits).
pub fn gid_text(g: &Gid) -> String {
    g.0.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn put(path: &Path, text: &str) -> io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, text)
}

fn link(target: &str, at: &Path) -> io::Result<()> {
    if let Some(d) = at.parent() {
        std::fs::create_dir_all(d)?;
    }
    match std::os::unix::fs::symlink(target, at) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// The directory of the IB device inside the tree.
pub fn ibdev_dir(root: &Path) -> PathBuf {
    root.join("devices/pci0000:00")
        .join(PCI_SLOT)
        .join("infiniband")
        .join(IBDEV)
}

/// Write the tree under `root`, with the port's counters (name, value) in `counters`.
pub fn write(root: &Path, f: &DeviceFacts, counters: &[(String, u64)]) -> io::Result<()> {
    let pci = root.join("devices/pci0000:00").join(PCI_SLOT);
    let (vendor, device) = PCI_IDS;
    put(&pci.join("vendor"), &format!("0x{vendor:04x}\n"))?;
    put(&pci.join("device"), &format!("0x{device:04x}\n"))?;
    put(&pci.join("subsystem_vendor"), &format!("0x{vendor:04x}\n"))?;
    put(&pci.join("subsystem_device"), "0x0008\n")?;
    put(
        &pci.join("modalias"),
        &format!(
            "pci:v{:08X}d{:08X}sv{:08X}sd00000008bc02sc00i00\n",
            vendor, device, vendor
        ),
    )?;
    put(&pci.join("numa_node"), "-1\n")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    put(&pci.join("local_cpus"), &format!("{}\n", cpu_mask(cpus)))?;

    let ib = ibdev_dir(root);
    link(&format!("../../../{PCI_SLOT}"), &ib.join("device"))?;
    put(&ib.join("node_type"), "1: CA\n")?;
    put(&ib.join("node_guid"), &format!("{}\n", guid_text(f.guid)))?;
    put(
        &ib.join("sys_image_guid"),
        &format!("{}\n", guid_text(f.guid)),
    )?;
    put(&ib.join("fw_ver"), &format!("{}\n", f.fw_ver))?;
    put(&ib.join("hca_type"), "MT4119\n")?;
    put(&ib.join("hw_rev"), "0x0\n")?;
    put(&ib.join("board_id"), "SIM0000000001\n")?;
    put(
        &ib.join("node_desc"),
        &format!("software ConnectX {} ({})\n", IBDEV, f.ip),
    )?;
    let port = ib.join("ports/1");
    put(&port.join("state"), "4: ACTIVE\n")?;
    put(&port.join("phys_state"), "5: LinkUp\n")?;
    put(&port.join("link_layer"), "Ethernet\n")?;
    put(&port.join("rate"), "100 Gb/sec (4X EDR)\n")?;
    put(&port.join("lid"), "0x0\n")?;
    put(&port.join("sm_lid"), "0x0\n")?;
    put(&port.join("sm_sl"), "0\n")?;
    put(&port.join("lid_mask_count"), "0\n")?;
    put(&port.join("cap_mask"), "0x04010000\n")?;
    let gid = Gid::from_ipv4(f.ip.octets());
    put(&port.join("gids/0"), &format!("{}\n", gid_text(&gid)))?;
    put(&port.join("gid_attrs/types/0"), "RoCE v2\n")?;
    put(&port.join("pkeys/0"), "0xffff\n")?;
    for (name, v) in counters {
        put(&counter_path(root, name), &format!("{v}\n"))?;
    }

    let uv = root
        .join("devices/pci0000:00")
        .join(PCI_SLOT)
        .join("infiniband_verbs")
        .join(UVERBS);
    put(&uv.join("ibdev"), &format!("{IBDEV}\n"))?;
    put(&uv.join("dev"), &format!("{}:{}\n", CDEV.0, CDEV.1))?;
    put(
        &uv.join("abi_version"),
        &format!("{}\n", crate::abi::MLX5_ABI_VERSION),
    )?;
    link(&format!("../../../{PCI_SLOT}"), &uv.join("device"))?;

    let cls = root.join("class");
    put(
        &cls.join("infiniband_verbs/abi_version"),
        &format!("{}\n", crate::abi::UVERBS_ABI_VERSION),
    )?;
    link(
        &format!("../../devices/pci0000:00/{PCI_SLOT}/infiniband_verbs/{UVERBS}"),
        &cls.join("infiniband_verbs").join(UVERBS),
    )?;
    link(
        &format!("../../devices/pci0000:00/{PCI_SLOT}/infiniband/{IBDEV}"),
        &cls.join("infiniband").join(IBDEV),
    )?;
    Ok(())
}

/// Where counter `name` lives: IBTA port counters (`port_*`) under `ports/1/counters`, the
/// others (mlx5's names) under `ports/1/hw_counters`, as the kernel's `mlx5_ib` puts them.
pub fn counter_path(root: &Path, name: &str) -> PathBuf {
    let dir = if name.starts_with("port_") {
        "counters"
    } else {
        "hw_counters"
    };
    ibdev_dir(root).join("ports/1").join(dir).join(name)
}

/// The counter a path of the tree names (`.../ports/1/counters/NAME` or
/// `.../ports/1/hw_counters/NAME`, through the class link or not), if it is one.
pub fn counter_name(path: &Path) -> Option<String> {
    let mut c = path.components().rev().map(|c| c.as_os_str().to_str());
    let name = c.next()??;
    let dir = c.next()??;
    let port = c.next()??;
    let ports = c.next()??;
    (ports == "ports" && port == "1" && (dir == "counters" || dir == "hw_counters"))
        .then(|| name.to_string())
}

/// The kernel's `local_cpus` mask for `n` CPUs (32-bit hex groups, comma separated).
fn cpu_mask(n: usize) -> String {
    let n = n.clamp(1, 1024);
    let words = n.div_ceil(32);
    (0..words)
        .rev()
        .map(|w| {
            let bits = (n - w * 32).min(32);
            let v: u32 = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            format!("{v:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Remove the trees of processes that are gone (`mlx5sim-PID` under `dir`).
pub fn sweep(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("mlx5sim-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_the_kernels() {
        assert_eq!(guid_text(0x0002_c903_7f4d_0102), "0002:c903:7f4d:0102");
        let g = Gid::from_ipv4([127, 77, 1, 2]);
        assert_eq!(gid_text(&g), "0000:0000:0000:0000:0000:ffff:7f4d:0102");
        assert_eq!(cpu_mask(2), "00000003");
        assert_eq!(cpu_mask(33), "00000001,ffffffff");
    }

    #[test]
    fn the_tree_has_what_libibverbs_reads() {
        let root = std::env::temp_dir().join(format!("mlx5sim-test-{}", std::process::id()));
        let f = DeviceFacts {
            guid: 0x0002_c903_0000_0001,
            ip: Ipv4Addr::new(127, 77, 0, 9),
            fw_ver: "16.35.0000".into(),
        };
        write(
            &root,
            &f,
            &[
                ("port_xmit_packets".into(), 5),
                ("out_of_sequence".into(), 1),
            ],
        )
        .unwrap();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read("class/infiniband_verbs/abi_version"), "6\n");
        assert_eq!(read("class/infiniband_verbs/uverbs0/ibdev"), "mlx5_0\n");
        assert_eq!(read("class/infiniband_verbs/uverbs0/dev"), "231:192\n");
        assert_eq!(read("class/infiniband/mlx5_0/node_type"), "1: CA\n");
        assert!(
            read("class/infiniband/mlx5_0/device/modalias").starts_with("pci:v000015B3d00001017sv")
        );
        assert_eq!(read("class/infiniband/mlx5_0/device/vendor"), "0x15b3\n");
        assert_eq!(
            read("class/infiniband/mlx5_0/ports/1/gid_attrs/types/0"),
            "RoCE v2\n"
        );
        assert_eq!(
            read("class/infiniband/mlx5_0/ports/1/counters/port_xmit_packets"),
            "5\n"
        );
        let p = counter_path(&root, "out_of_sequence");
        assert_eq!(counter_name(&p).as_deref(), Some("out_of_sequence"));
        assert_eq!(counter_name(&root.join("class")), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
