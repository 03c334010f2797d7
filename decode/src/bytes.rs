//! Bounds-checked access to the input: every segment is taken whole with [`take`] (an error,
//! not a panic, when it runs past the end), then read at fixed offsets inside it.

use super::Error;

/// `n` bytes at `off`, which must end at or before `limit` (the end of the WQE or CQE).
pub(crate) fn take<'a>(
    b: &'a [u8],
    off: usize,
    n: usize,
    limit: usize,
    what: &str,
) -> Result<&'a [u8], Error> {
    let end = limit.min(b.len());
    if off + n > end {
        return Err(Error::Truncated {
            what: what.to_string(),
            offset: off,
            need: n,
            have: end.saturating_sub(off),
        });
    }
    Ok(&b[off..off + n])
}

/// Big-endian u16 at `i` of a segment already taken whole.
pub(crate) fn be16(s: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([s[i], s[i + 1]])
}

/// Big-endian u32 at `i`.
pub(crate) fn be32(s: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]])
}

/// Big-endian 24-bit value at `i` (3 bytes).
pub(crate) fn be24(s: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([0, s[i], s[i + 1], s[i + 2]])
}

/// Big-endian u64 at `i`.
pub(crate) fn be64(s: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&s[i..i + 8]);
    u64::from_be_bytes(a)
}

/// Format a 16-byte GID as eight colon-separated groups (IPv4-mapped as dotted quad).
pub(crate) fn gid(g: &[u8]) -> String {
    if g.len() == 16 && g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
        return format!("::ffff:{}.{}.{}.{}", g[12], g[13], g[14], g[15]);
    }
    g.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p.get(1).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(":")
}
