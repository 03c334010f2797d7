//! Device discovery and the device's attributes: `ibv_devices`, `ibv_devinfo -v`.

use std::time::Duration;

use crate::support::{run, Scratch};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn ibv_devices_lists_the_device_with_its_guid() {
    let o = run(&["--ip", "127.77.200.1"], "ibv_devices", &[], LIMIT).ok("ibv_devices");
    // The node GUID is the device's: 0002:c903 and its IPv4 address.
    let line = o
        .stdout
        .lines()
        .find(|l| l.contains("mlx5_0"))
        .unwrap_or_else(|| panic!("no mlx5_0:\n{}", o.stdout));
    assert!(line.contains("0002c9037f4dc801"), "{line}");
}

#[test]
fn ibv_devinfo_shows_the_device_port_and_roce_v2_gid() {
    let s = Scratch::new("devinfo");
    let report = s.path("report");
    let o = run(
        &["--ip", "127.77.200.2", "--report", report.to_str().unwrap()],
        "ibv_devinfo",
        &["-v"],
        LIMIT,
    )
    .ok("ibv_devinfo -v");
    for want in [
        "hca_id:\tmlx5_0",
        "fw_ver:\t\t\t\t16.35.0000",
        "vendor_part_id:\t\t\t4119",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        "XRC",
        "hca_core_clock:\t\t\t156250kHZ",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t1024 (3)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.77.200.2, RoCE v2",
    ] {
        assert!(o.stdout.contains(want), "no '{want}' in:\n{}", o.stdout);
    }
    // The library reports nothing wrong, and the program touched no data path.
    let r = crate::support::report(&report);
    assert_eq!(r["driver_bugs"], "0");
    assert!(o.stderr.is_empty(), "stderr: {}", o.stderr);
}

#[test]
fn the_mtu_and_address_follow_the_options() {
    let o = run(
        &["--ip", "127.77.200.3", "--mtu", "4096"],
        "ibv_devinfo",
        &[],
        LIMIT,
    )
    .ok("ibv_devinfo");
    assert!(o.stdout.contains("active_mtu:\t\t4096 (5)"), "{}", o.stdout);
}

#[test]
fn without_the_library_there_is_no_device_and_a_bad_setting_is_said() {
    // A bad fault rule is refused by the launcher before the program starts.
    let o = run(&["--faults", "loss=200%"], "ibv_devices", &[], LIMIT);
    assert_eq!(o.code, Some(127));
    assert!(o.stderr.contains("outside 0%..100%"), "{}", o.stderr);
    // An address the device cannot bind: the library says why and lists no device.
    let o = run(&["--ip", "192.0.2.1"], "ibv_devices", &[], LIMIT);
    assert!(
        o.stderr
            .contains("cannot bind the device's UDP socket to 192.0.2.1"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("mlx5_0"), "{}", o.stdout);
}

/// A program that reads `/sys/class/infiniband` itself (as UCX does, with a fixed `/sys`) reads
/// the device's tree: its GID and its counters.
#[test]
fn a_fixed_sys_path_reads_the_emulated_tree() {
    let o = run(
        &["--ip", "127.77.200.9"],
        "cat",
        &[
            "/sys/class/infiniband/mlx5_0/ports/1/gids/0",
            "/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0",
            "/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_packets",
            "/sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence",
            "/sys/class/infiniband_verbs/uverbs0/ibdev",
        ],
        LIMIT,
    )
    .ok("cat of the tree");
    assert_eq!(
        o.stdout,
        "0000:0000:0000:0000:0000:ffff:7f4d:c809\nRoCE v2\n0\n0\nmlx5_0"
    );
}
