//! The requester's memory accesses: gather lists read (whole for UD, packet by packet for RC
//! and UC) and scatter lists checked and written, each against its MR at that moment.

use mlx5_cq::SYNDROME_LOCAL_PROT_ERR;

use crate::ctx::Ctx;
use crate::qp::Qp;
use crate::srq::Sge;
use crate::wqe::{Gather, Piece, WqeFault};

pub(super) fn prot(why: String) -> WqeFault {
    WqeFault {
        syndrome: SYNDROME_LOCAL_PROT_ERR,
        why,
    }
}

/// Read the gather list (LOCAL_PROT on any key, PD or bounds violation).
pub(super) fn gather(qp: &Qp, ctx: &Ctx, data: &Gather) -> Result<Vec<u8>, WqeFault> {
    match data {
        Gather::Inline(v) => Ok(v.clone()),
        Gather::Mixed(_) => gather_range(qp, ctx, data, 0, data.len() as usize),
        Gather::Sges(sges) => {
            let mut out = Vec::with_capacity(data.len() as usize);
            for (i, s) in sges.iter().enumerate() {
                if s.len == 0 {
                    continue;
                }
                let mr = ctx
                    .mrs
                    .local(s.lkey, qp.pd, s.addr, s.len as u64, false)
                    .map_err(|e| {
                        prot(format!(
                            "gather entry {i}: lkey {:#x} addr {:#x} len {}: {e:?}",
                            s.lkey, s.addr, s.len
                        ))
                    })?;
                let start = out.len();
                out.resize(start + s.len as usize, 0);
                mr.region.read(s.addr, &mut out[start..]);
            }
            Ok(out)
        }
    }
}

/// Check a gather list's keys, PD and bounds (LOCAL_PROT) without reading it.
pub(super) fn check_gather(qp: &Qp, ctx: &Ctx, data: &Gather) -> Result<(), WqeFault> {
    match data {
        Gather::Sges(sges) => check_local(qp, ctx, sges, false),
        Gather::Inline(_) => Ok(()),
        Gather::Mixed(p) => {
            let sges: Vec<Sge> = p
                .iter()
                .filter_map(|p| match p {
                    Piece::Sge(s) => Some(*s),
                    Piece::Inline(_) => None,
                })
                .collect();
            check_local(qp, ctx, &sges, false)
        }
    }
}

/// Read `n` bytes at byte `offset` of a gather list (one packet's payload), checking each
/// piece against its MR at this moment (LOCAL_PROT if it is gone).
pub(super) fn gather_range(
    qp: &Qp,
    ctx: &Ctx,
    data: &Gather,
    mut offset: u64,
    n: usize,
) -> Result<Vec<u8>, WqeFault> {
    let sges = match data {
        Gather::Inline(v) => {
            let start = (offset as usize).min(v.len());
            let end = start.saturating_add(n).min(v.len());
            return Ok(v[start..end].to_vec());
        }
        Gather::Sges(s) => s,
        Gather::Mixed(p) => return mixed_range(qp, ctx, p, offset, n),
    };
    let mut out = Vec::with_capacity(n);
    for (i, s) in sges.iter().enumerate() {
        if out.len() == n {
            break;
        }
        let len = s.len as u64;
        if offset >= len {
            offset -= len;
            continue;
        }
        let take = ((len - offset) as usize).min(n - out.len());
        let addr = s.addr + offset;
        let mr = ctx
            .mrs
            .local(s.lkey, qp.pd, addr, take as u64, false)
            .map_err(|e| {
                prot(format!(
                    "gather entry {i}: lkey {:#x} addr {addr:#x} len {take} at send time: {e:?}",
                    s.lkey
                ))
            })?;
        let start = out.len();
        out.resize(start + take, 0);
        mr.region.read(addr, &mut out[start..]);
        offset = 0;
    }
    Ok(out)
}

/// [`gather_range`] of inline and gather pieces (`Gather::Mixed`).
fn mixed_range(
    qp: &Qp,
    ctx: &Ctx,
    pieces: &[Piece],
    mut offset: u64,
    n: usize,
) -> Result<Vec<u8>, WqeFault> {
    let mut out = Vec::with_capacity(n);
    for (i, p) in pieces.iter().enumerate() {
        if out.len() == n {
            break;
        }
        let len = p.len();
        if offset >= len {
            offset -= len;
            continue;
        }
        let take = ((len - offset) as usize).min(n - out.len());
        match p {
            Piece::Inline(v) => out.extend_from_slice(&v[offset as usize..offset as usize + take]),
            Piece::Sge(s) => {
                let addr = s.addr + offset;
                let mr = ctx
                    .mrs
                    .local(s.lkey, qp.pd, addr, take as u64, false)
                    .map_err(|e| {
                        prot(format!(
                            "data segment {i}: lkey {:#x} addr {addr:#x} len {take} at send \
                             time: {e:?}",
                            s.lkey
                        ))
                    })?;
                let start = out.len();
                out.resize(start + take, 0);
                mr.region.read(addr, &mut out[start..]);
            }
        }
        offset = 0;
    }
    Ok(out)
}

/// Check a local scatter list for LOCAL_WRITE.
pub(super) fn check_scatter(qp: &Qp, ctx: &Ctx, sges: &[Sge]) -> Result<(), WqeFault> {
    check_local(qp, ctx, sges, true)
}

/// Check every non-empty entry of `sges` against its MR: key, PD, bounds and, when `write`
/// (a scatter list), LOCAL_WRITE; LOCAL_PROT naming the entry otherwise.
fn check_local(qp: &Qp, ctx: &Ctx, sges: &[Sge], write: bool) -> Result<(), WqeFault> {
    let (list, needs) = if write {
        ("scatter", " (needs LOCAL_WRITE)")
    } else {
        ("gather", "")
    };
    for (i, s) in sges.iter().enumerate() {
        if s.len == 0 {
            continue;
        }
        ctx.mrs
            .local(s.lkey, qp.pd, s.addr, s.len as u64, write)
            .map_err(|e| {
                prot(format!(
                    "{list} entry {i}: lkey {:#x} addr {:#x} len {}{needs}: {e:?}",
                    s.lkey, s.addr, s.len
                ))
            })?;
    }
    Ok(())
}

/// Write `data` at byte `offset` of a scatter list; false if a key check fails.
pub fn scatter(qp: &Qp, ctx: &Ctx, sges: &[Sge], mut offset: u64, data: &[u8]) -> bool {
    let mut rest = data;
    for s in sges {
        if rest.is_empty() {
            break;
        }
        let len = s.len as u64;
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = ((len - offset) as usize).min(rest.len());
        let Ok(mr) = ctx
            .mrs
            .local(s.lkey, qp.pd, s.addr + offset, n as u64, true)
        else {
            return false;
        };
        if !mr.region.write(s.addr + offset, &rest[..n]) {
            return false;
        }
        rest = &rest[n..];
        offset = 0;
    }
    rest.is_empty()
}
