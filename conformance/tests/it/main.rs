//! The integration tests of this crate, one test binary (link time dominates on small
//! machines): one module per area. Without the installed headers (`cfg(oracle_missing)`, set
//! by `build.rs`) only `skipped` is compiled: one ignored test that says why.

#[cfg(not(oracle_missing))]
mod constants;
#[cfg(not(oracle_missing))]
mod dc;
#[cfg(not(oracle_missing))]
mod dump;
#[cfg(not(oracle_missing))]
mod flush_in_error;
#[cfg(not(oracle_missing))]
mod helpers;
#[cfg(not(oracle_missing))]
mod layout;
mod rerun;
#[cfg(not(oracle_missing))]
mod signatures;
#[cfg(not(oracle_missing))]
mod verbs;

#[cfg(oracle_missing)]
mod skipped {
    #[test]
    #[ignore = "<infiniband/mlx5dv.h> was not installed when this crate was built: install \
                libibverbs-dev (apt-get install libibverbs-dev) and rebuild to run the \
                conformance tests"]
    fn conformance_tests_skipped_without_libibverbs_dev() {
        panic!("{}", mlx5_conformance::INSTALL_HINT);
    }
}
