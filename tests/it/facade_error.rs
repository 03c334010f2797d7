//! The facade's one error: every layer's error converts into `mlx5_direct::Error` with `?`,
//! the layer's own error stays inside, and `device()` / `data_path()` find what lies below
//! whichever layer wrapped it.

use mlx5_direct::connect::ConnectError;
use mlx5_direct::{ctx, datapath, hw, Context, Error};

fn open_missing() -> mlx5_direct::Result<Context> {
    Ok(Context::open("no_such_device_9")?)
}

#[test]
fn a_ctx_error_converts_with_question_mark_and_keeps_its_layer() {
    let e = open_missing().expect_err("no such device");
    assert!(e.ctx().is_some(), "{e:?}");
    assert!(e.connect().is_none());
    assert_eq!(
        e.to_string(),
        e.ctx().unwrap().to_string(),
        "Display is the layer's own"
    );
}

#[test]
fn device_and_data_path_errors_are_found_whichever_layer_wrapped_them() {
    let hw_err = || hw::Error::Unsupported("a feature the device lacks".into());
    let dp_err = || datapath::Error::RqFull { capacity: 8 };
    let cases: Vec<(Error, bool, bool)> = vec![
        (Error::from(hw_err()), true, false),
        (Error::from(ctx::Error::Device(hw_err())), true, false),
        (Error::from(ConnectError::Device(hw_err())), true, false),
        (Error::from(dp_err()), false, true),
        (Error::from(ctx::Error::DataPath(dp_err())), false, true),
        (Error::from(ConnectError::DataPath(dp_err())), false, true),
        (Error::from(ctx::Error::NoDevice("x".into())), false, false),
    ];
    for (e, dev, dp) in cases {
        assert_eq!(e.device().is_some(), dev, "{e:?}");
        assert_eq!(e.data_path().is_some(), dp, "{e:?}");
        if dev {
            assert!(e.to_string().contains("a feature the device lacks"), "{e}");
        }
        if dp {
            assert!(matches!(
                e.data_path(),
                Some(datapath::Error::RqFull { capacity: 8 })
            ));
        }
    }
}

#[test]
fn the_chain_of_sources_reaches_the_bottom_layer() {
    let e = Error::from(ConnectError::Device(hw::Error::Unsupported("deep".into())));
    // transparent wrappers: the connect error's own source chain is the facade error's.
    let mut depth = 0;
    let mut cur: Option<&dyn std::error::Error> = Some(&e);
    while let Some(c) = cur {
        depth += 1;
        assert!(depth < 10, "a cycle in source()");
        cur = c.source();
    }
    assert!(e.to_string().contains("deep"), "{e}");
}
