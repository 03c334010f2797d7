//! Receive WQEs: an RQ WQE is data segments only; an SRQ WQE is a 16-byte next segment and
//! then data segments. Both end early with the `MLX5_INVALID_LKEY` terminator (rdma-core
//! `providers/mlx5/qp.c` `mlx5_post_recv`, `srq.c` `mlx5_post_srq_recv`; `docs/wqe-layout.md` §8).

use mlx5_wqe::INVALID_LKEY;

use super::bytes::{be16, be32, be64, take};
use super::{Error, Report};

/// The scatter list: `sges` slots (or as many as the bytes hold) of 16 bytes from `off`.
fn scatter(r: &mut Report, b: &[u8], off: usize, sges: Option<usize>) -> Result<(), Error> {
    let avail = b.len() - off;
    let slots = match sges {
        Some(n) => n,
        None if avail.is_multiple_of(16) => avail / 16,
        None => {
            return Err(Error::Length {
                what: "receive scatter list",
                expected: "a multiple of 16".into(),
                got: avail,
            })
        }
    };
    let mut ended = false;
    for i in 0..slots {
        let o = off + 16 * i;
        let s = take(b, o, 16, b.len(), &format!("data segment {i}"))?;
        let lkey = be32(s, 4);
        let title = if ended {
            format!("data segment {i}, unused (the list ended at the terminator)")
        } else if lkey == INVALID_LKEY {
            format!("data segment {i}: terminator")
        } else {
            format!("data segment {i} (struct mlx5_wqe_data_seg)")
        };
        r.section(title, o, 16);
        r.add(
            o,
            &s[0..4],
            "data.byte_count",
            format!("{} bytes", be32(s, 0)),
        );
        let lkey_text = if lkey == INVALID_LKEY {
            "MLX5_INVALID_LKEY: the scatter list ends here".to_string()
        } else {
            format!("lkey {lkey:#010x}")
        };
        r.add(o + 4, &s[4..8], "data.lkey", lkey_text);
        r.add(
            o + 8,
            &s[8..16],
            "data.addr",
            format!("address {:#018x}", be64(s, 8)),
        );
        ended |= lkey == INVALID_LKEY;
    }
    let used = off + 16 * slots;
    if b.len() > used {
        r.notes.push(format!(
            "{} byte(s) after the {slots} scatter slot(s) were ignored",
            b.len() - used
        ));
    }
    Ok(())
}

fn count(r: &Report) -> usize {
    let mut n = 0;
    for f in r.fields("data.lkey") {
        if f.raw == INVALID_LKEY.to_be_bytes() {
            break;
        }
        n += 1;
    }
    n
}

/// Decode an RQ WQE.
pub(crate) fn decode_rq(b: &[u8], sges: Option<usize>) -> Result<Report, Error> {
    let mut r = Report::default();
    scatter(&mut r, b, 0, sges)?;
    r.summary = format!(
        "receive WQE: {} scatter entr(ies) in {} slot(s)",
        count(&r),
        r.sections.len()
    );
    Ok(r)
}

/// Decode an SRQ WQE.
pub(crate) fn decode_srq(b: &[u8], sges: Option<usize>) -> Result<Report, Error> {
    let mut r = Report::default();
    let s = take(b, 0, 16, b.len(), "SRQ next segment")?;
    r.section("SRQ next segment (struct mlx5_wqe_srq_next_seg)", 0, 16);
    r.add(0, &s[0..2], "next.rsvd0", "reserved");
    r.add(
        2,
        &s[2..4],
        "next.next_wqe_index",
        format!("next free WQE {}", be16(s, 2)),
    );
    r.add(4, &s[4..5], "next.signature", format!("{:#04x}", s[4]));
    r.add(5, &s[5..16], "next.rsvd1", "reserved");
    scatter(&mut r, b, 16, sges)?;
    r.summary = format!(
        "SRQ WQE: next index {}, {} scatter entr(ies) in {} slot(s)",
        be16(s, 2),
        count(&r),
        r.sections.len() - 1
    );
    Ok(r)
}
