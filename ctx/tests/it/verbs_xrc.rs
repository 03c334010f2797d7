//! The owning API on a verbs context without XRC or completion timestamps (Soft-RoCE): each
//! call fails with the backend's `Unsupported` error naming the refused verb and the device,
//! and nothing is left behind. Needs the project's VM: not part of `run-verbs-tests.sh` (which
//! runs mlx5-hw's tests); run by hand with
//!
//! ```text
//! cargo test -p mlx5-ctx --test it --no-run   # note the binary
//! MLX5_HW_RXE_VM=1 RXE_VM_ENV=MLX5_HW_RXE_VM tools/rxe-vm/run.sh 'BINARY verbs_xrc:: --include-ignored'
//! ```

use mlx5_ctx::{Context, Error};

fn rxe0() -> Context {
    assert!(
        std::env::var_os("MLX5_HW_RXE_VM").is_some(),
        "runs inside the Soft-RoCE VM (tools/rxe-vm/run.sh, MLX5_HW_RXE_VM=1)"
    );
    Context::open("rxe0").expect("open rxe0")
}

fn unsupported(e: Error, call: &str) {
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Device(mlx5_hw::Error::Unsupported(_)))
            && msg.contains(call)
            && msg.contains("rxe0"),
        "expected Unsupported naming {call} on rxe0, got {e:?}"
    );
}

#[test]
#[ignore = "needs Soft-RoCE: see the module documentation"]
fn xrc_and_timestamps_are_refused_clearly_on_soft_roce() {
    let ctx = rxe0();
    unsupported(ctx.open_xrcd().unwrap_err(), "ibv_open_xrcd");
    let e = ctx
        .create_cq_with_timestamps(&mlx5_ctx::CqInit {
            attr: mlx5_hw::CqInitAttr::default(),
        })
        .unwrap_err();
    unsupported(e, "create_cq_with_timestamps");
    let e = ctx.clock().unwrap_err();
    assert!(e.to_string().contains("rxe0"), "{e:?}");
    // The context is still usable: a PD comes and goes.
    drop(ctx.alloc_pd().unwrap());
}
