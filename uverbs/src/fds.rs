//! Which file descriptors are the emulation's: command descriptors (one per opened
//! `/dev/infiniband/uverbs0`) and event descriptors (completion channels, asynchronous event
//! queues). Two bitmaps of atomics, so a hook tells "not ours" with one load, no lock and no
//! allocation. Descriptors at or above [`MAX_FD`] are never the emulation's: opening one fails
//! with EMFILE instead (`crate::emu`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors the bitmaps cover.
pub const MAX_FD: usize = 1 << 16;

const WORDS: usize = MAX_FD / 64;

static COMMAND: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
static EVENT: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

fn slot(fd: i32) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok()?;
    (fd < MAX_FD).then_some((fd / 64, 1u64 << (fd % 64)))
}

fn test(map: &[AtomicU64; WORDS], fd: i32) -> bool {
    slot(fd).is_some_and(|(w, b)| map[w].load(Ordering::Acquire) & b != 0)
}

fn set(map: &[AtomicU64; WORDS], fd: i32, on: bool) -> bool {
    let Some((w, b)) = slot(fd) else {
        return false;
    };
    if on {
        map[w].fetch_or(b, Ordering::AcqRel);
    } else {
        map[w].fetch_and(!b, Ordering::AcqRel);
    }
    true
}

/// Whether `fd` is a command descriptor.
pub fn is_command(fd: i32) -> bool {
    test(&COMMAND, fd)
}

/// Whether `fd` is an event descriptor.
pub fn is_event(fd: i32) -> bool {
    test(&EVENT, fd)
}

/// Whether `fd` is either.
pub fn is_ours(fd: i32) -> bool {
    is_command(fd) || is_event(fd)
}

/// Mark or unmark a command descriptor; `false` if `fd` is out of range.
pub fn set_command(fd: i32, on: bool) -> bool {
    set(&COMMAND, fd, on)
}

/// Mark or unmark an event descriptor; `false` if `fd` is out of range.
pub fn set_event(fd: i32, on: bool) -> bool {
    set(&EVENT, fd, on)
}

/// Forget every descriptor (a child after `fork`: the parent's state is not its own).
pub fn clear_all() {
    for w in COMMAND.iter().chain(EVENT.iter()) {
        w.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_per_kind_and_bounded() {
        assert!(!is_ours(9000));
        assert!(set_command(9000, true));
        assert!(is_command(9000) && is_ours(9000) && !is_event(9000));
        assert!(set_event(9001, true));
        assert!(is_event(9001) && !is_command(9001));
        set_command(9000, false);
        set_event(9001, false);
        assert!(!is_ours(9000) && !is_ours(9001));
        assert!(!set_command(MAX_FD as i32, true));
        assert!(!is_ours(-1));
    }
}
