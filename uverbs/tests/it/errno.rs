//! The errno of the emulated kernel side, for commands written by hand (`raw_commands.c`,
//! compiled here with gcc against the uapi headers): the framing of `ib_uverbs_write`
//! (`drivers/infiniband/core/uverbs_main.c`), mlx5's context checks
//! (`drivers/infiniband/hw/mlx5/main.c` `mlx5_ib_alloc_ucontext`, `mlx5_ib_mmap`), and the
//! descriptor's other operations.

use std::process::Command;
use std::time::Duration;

use crate::support::{run_path, Scratch};

#[test]
fn commands_get_the_kernels_errno() {
    let s = Scratch::new("raw");
    let exe = s.path("raw_commands");
    let st = Command::new("gcc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/raw_commands.c"
        ))
        .status()
        .expect("gcc");
    assert!(st.success(), "raw_commands.c does not compile");
    let o = run_path(&[], &exe, &[], Duration::from_secs(60)).ok("raw_commands");
    let want = [
        // No ioctl framework; the uverbs file has no read method.
        ("ioctl", libc::ENOTTY),
        ("read", libc::EINVAL),
        // `ib_uverbs_mmap` without a context.
        ("mmap_before_context", libc::ENODEV),
        ("alloc_pd_before_context", libc::EINVAL),
        // `in_words` not the write's length; bits outside the command number and flags.
        ("get_context_bad_length", libc::EINVAL),
        ("get_context_reserved_bits", libc::EINVAL),
        // No DEVX; a comp_mask; not one register left beside the low-latency ones.
        ("get_context_devx", libc::EOPNOTSUPP),
        ("get_context_comp_mask", libc::EOPNOTSUPP),
        ("get_context_too_many_low_latency", libc::EINVAL),
        // A response address nobody mapped; the context is not kept, so asking again works.
        ("get_context_bad_response", libc::EFAULT),
        ("get_context", 0),
        ("get_context_again", libc::EINVAL),
        // UAR pages: one page each, below the context's 8; contiguous pages are ENOSYS.
        ("mmap_page_0", 0),
        ("mmap_page_8", libc::EINVAL),
        ("mmap_two_pages", libc::EINVAL),
        ("mmap_contiguous", libc::ENOSYS),
        ("alloc_pd", 0),
        // No room for the response.
        ("alloc_pd_no_room", libc::ENOSPC),
        ("dealloc_pd_unknown", libc::EINVAL),
        ("dealloc_pd", 0),
        // A command mlx5 does in user space, and one that does not exist.
        ("post_send", libc::EOPNOTSUPP),
        ("command_99", libc::EOPNOTSUPP),
    ];
    let got: Vec<(&str, i32)> = o
        .stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k, v.parse().unwrap_or(-1)))
        .collect();
    assert_eq!(got, want, "stdout:\n{}", o.stdout);
}
