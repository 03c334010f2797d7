//! `Context::open` by name in the default build: `sim` is the software ConnectX, any other
//! name a verbs device opened through rdma-core, loaded at run time. On a machine without that
//! device (or without rdma-core) the error says which, and what to do.

use mlx5_ctx::{Context, Error};

#[test]
fn sim_opens_in_the_default_build() {
    let ctx = Context::open("sim").expect("open sim");
    assert!(ctx.sim_device().is_some());
    assert!(ctx.query_device().unwrap().direct_path);
    let pd = ctx.alloc_pd().expect("a PD on the software ConnectX");
    drop(pd);
}

#[test]
fn mlx5_0_without_the_device_is_a_clear_error() {
    let present = mlx5_hw::verbs::list_devices()
        .map(|d| d.iter().any(|d| d.name == "mlx5_0"))
        .unwrap_or(false);
    if present {
        let ctx = Context::open("mlx5_0").expect("mlx5_0 is listed, so it opens");
        assert_eq!(ctx.name(), "mlx5_0");
        return;
    }
    let e = Context::open("mlx5_0").unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("device mlx5_0: "), "{msg}");
    match e {
        // rdma-core is here but the device is not: the devices present, or how to check.
        Error::Device(mlx5_hw::Error::NoDevice { why, .. }) => assert!(
            why.contains("no RDMA device") || why.contains("devices present"),
            "{why}"
        ),
        // No rdma-core at all: what to install.
        Error::Device(mlx5_hw::Error::RdmaCore { .. }) => {
            assert!(
                msg.contains("apt-get install libibverbs1 ibverbs-providers"),
                "{msg}"
            )
        }
        e => panic!("unexpected error opening mlx5_0: {e:?}"),
    }
}
