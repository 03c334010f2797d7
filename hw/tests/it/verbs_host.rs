//! Host-side tests of the verbs backend that need no RDMA device: they run everywhere the crate
//! builds with `--features verbs`, including machines whose kernel has no RDMA support at all.
#![cfg(feature = "verbs")]

use mlx5_hw::verbs::{list_devices, VerbsDevice};
use mlx5_hw::Error;

#[test]
fn listing_devices_works_without_rdma_support() {
    // On a machine without RDMA in the kernel libibverbs fails with ENOSYS; that is an empty
    // list, not an error and not a crash.
    let devs = list_devices().expect("ibv_get_device_list must not fail");
    for d in &devs {
        assert!(!d.name.is_empty());
    }
}

#[test]
fn opening_a_missing_device_is_a_clear_no_device_error() {
    let name = "mlx5_no_such_device_7";
    match VerbsDevice::open(name) {
        Ok(_) => panic!("{name} opened"),
        Err(Error::NoDevice { name: n, why }) => {
            assert_eq!(n, name);
            let found = list_devices().unwrap();
            if found.is_empty() {
                assert!(why.contains("no RDMA device"), "{why}");
                assert!(why.contains("/dev/infiniband"), "hint missing: {why}");
            } else {
                for d in &found {
                    assert!(why.contains(&d.name), "{why} does not list {}", d.name);
                }
            }
        }
        Err(e) => panic!("expected NoDevice, got {e}"),
    }
}

#[test]
fn opening_mlx5_0_fails_clearly_unless_it_exists() {
    let present = list_devices()
        .unwrap()
        .into_iter()
        .find(|d| d.name == "mlx5_0");
    match (VerbsDevice::open("mlx5_0"), present) {
        (Ok(dev), Some(info)) => assert_eq!(dev.is_mlx5(), info.mlx5),
        (Err(Error::NoDevice { why, .. }), None) => {
            let msg = Error::NoDevice {
                name: "mlx5_0".into(),
                why,
            }
            .to_string();
            assert!(msg.starts_with("device mlx5_0: "), "{msg}");
        }
        (Ok(_), None) => panic!("mlx5_0 opened but is not listed"),
        (Err(e), _) => panic!("unexpected error opening mlx5_0: {e}"),
    }
}
