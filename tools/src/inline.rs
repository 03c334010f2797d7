//! `-I`: the inline size a run asks the device for, and what happens when the device grants
//! less. perftest passes `-I` to the QP's `cap.max_inline_data` and stops when the QP cannot be
//! created (perftest `src/perftest_resources.c` `ctx_qp_create`, `create_qp_main`); so do these
//! tools, and they also name the largest size the device would have granted. Without `-I` the
//! default is taken down to what the QP grants, silently, as before.
//!
//! A device grants a `max_inline_data` request either in full (rounded up to the WQE size) or
//! not at all: libmlx5 fails `ibv_create_qp` with EINVAL when the WQE it needs is larger than
//! the device's `max_sq_desc_sz` (rdma-core `providers/mlx5/verbs.c` `mlx5_calc_send_wqe`),
//! Soft-RoCE when the request is above its 512-byte limit (Linux
//! `drivers/infiniband/sw/rxe/rxe_qp.c` `rxe_qp_chk_cap`, `RXE_MAX_INLINE_DATA`). So the
//! largest size is found by asking: [`largest_granted`] creates and destroys QPs of the run's
//! shape, halving the interval each time.

use super::error::Error;

/// The inline size of a run: what `-I` asks for, or the tool's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineRequest {
    /// Bytes to ask the device for.
    pub bytes: u32,
    /// Whether `-I` asked for them (refused when not granted), rather than the default
    /// (taken down to what the QP grants).
    pub explicit: bool,
}

impl InlineRequest {
    /// `-I` (`arg`) when given, else `default`.
    pub fn new(arg: Option<u32>, default: u32) -> InlineRequest {
        InlineRequest {
            bytes: arg.unwrap_or(default),
            explicit: arg.is_some(),
        }
    }

    /// No inline data (READ: the local buffer is the destination, nothing is sent).
    pub fn none() -> InlineRequest {
        InlineRequest {
            bytes: 0,
            explicit: false,
        }
    }

    /// The inline size the run uses on QPs that were `granted` this many bytes: the request,
    /// taken down to the grant when it is the default; an explicit `-I` above the grant is
    /// refused ([`refused`]; `device` names the device).
    pub fn settle(&self, granted: u32, device: &str) -> Result<u32, Error> {
        if self.explicit && self.bytes > granted {
            return Err(refused(self.bytes, granted, device));
        }
        Ok(self.bytes.min(granted))
    }
}

/// The error for `-I asked` on `device`, naming `largest`, the largest inline size the device
/// grants a QP of this run.
pub fn refused(asked: u32, largest: u32, device: &str) -> Error {
    Error::Usage(format!(
        "-I {asked}: {device} grants a QP of this run at most {largest} bytes of inline data; \
         use -I {largest} or less, or leave -I out"
    ))
}

/// The largest inline size a device grants, given `asked` that it refuses: `try_create(n)`
/// creates a QP asking for `n` inline bytes and returns what it was granted (`None`: refused),
/// destroying the QP again. A binary search over `0..asked`, about log2(`asked`) calls; `None`
/// when even 0 is refused.
pub fn largest_granted(asked: u32, mut try_create: impl FnMut(u32) -> Option<u32>) -> Option<u32> {
    // `lo` is granted, `hi` refused; a grant is at least its request (rounded up to the WQE
    // size), so every request up to it is granted too.
    let mut lo = try_create(0)?.min(asked.saturating_sub(1));
    let mut hi = asked;
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        match try_create(mid) {
            Some(granted) => lo = granted.clamp(mid, hi - 1),
            None => hi = mid,
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device like the software ConnectX (RC): a WQE of ctrl + the 176-byte memory-window
    /// overhead + the inline segment, rounded to 64 bytes, at most 1024 bytes.
    fn mlx5_like(n: u32) -> Option<u32> {
        let tot = 192 + (4 + n).div_ceil(16) * 16;
        (tot <= 1024).then(|| tot.div_ceil(64) * 64 - 196)
    }

    #[test]
    fn finds_the_largest_grant() {
        let mut calls = 0;
        let got = largest_granted(900, |n| {
            calls += 1;
            mlx5_like(n)
        });
        assert_eq!(got, Some(828));
        assert!(calls <= 12, "{calls} creates");
        // Soft-RoCE: exactly up to 512.
        assert_eq!(
            largest_granted(4096, |n| (n <= 512).then_some(n)),
            Some(512)
        );
        // Nothing at all.
        assert_eq!(largest_granted(64, |_| None), None);
        // A grant never claims more than was refused.
        assert_eq!(largest_granted(100, |n| (n < 100).then_some(200)), Some(99));
    }

    #[test]
    fn explicit_requests_are_refused_default_ones_capped() {
        let e = InlineRequest::new(Some(600), 220)
            .settle(572, "sim0")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("-I 600") && e.contains("at most 572") && e.contains("sim0"),
            "{e}"
        );
        assert_eq!(
            InlineRequest::new(Some(500), 220).settle(572, "d").unwrap(),
            500
        );
        assert_eq!(InlineRequest::new(None, 220).settle(60, "d").unwrap(), 60);
        assert_eq!(InlineRequest::none().settle(60, "d").unwrap(), 0);
        let e = refused(600, 512, "rxe0").to_string();
        assert!(
            e.contains("-I 600") && e.contains("-I 512 or less") && e.contains("rxe0"),
            "{e}"
        );
    }
}
