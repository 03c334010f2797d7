//! Receive-side WQEs: RQ entries (data segments only) and SRQ entries (next segment + data
//! segments), each list ended by the `MLX5_INVALID_LKEY` terminator when it uses fewer than the
//! queue's scatter entries (rdma-core `providers/mlx5/qp.c` `mlx5_post_recv`, `srq.c`
//! `mlx5_post_srq_recv`).

use crate::seg::DataSeg;

/// One scatter entry of a receive WR, in host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Buffer address.
    pub addr: u64,
    /// Buffer length.
    pub length: u32,
    /// Local key of the region holding the buffer.
    pub lkey: u32,
}

/// Write the scatter list of a receive WQE into `slots` (the WQE's data-segment slots, e.g.
/// `stride / 16` of them for an RQ). Zero-length SGEs are skipped as rdma-core does; when fewer
/// than `slots.len()` entries are written the next slot gets the terminator. Returns the number
/// of data segments written (terminator excluded), or `None` if the list does not fit.
#[inline(always)]
pub fn write_scatter(slots: &mut [DataSeg], sges: &[Sge]) -> Option<usize> {
    let mut n = 0;
    for s in sges {
        if s.length == 0 {
            continue;
        }
        let slot = slots.get_mut(n)?;
        *slot = DataSeg::new(s.length, s.lkey, s.addr);
        n += 1;
    }
    if n < slots.len() {
        slots[n] = DataSeg::terminator();
    }
    Some(n)
}

/// Read a receive scatter list back: the data segments up to the terminator or the slot count.
pub fn read_scatter(slots: &[DataSeg]) -> impl Iterator<Item = Sge> + '_ {
    slots
        .iter()
        .take_while(|d| !d.is_terminator())
        .map(|d| Sge {
            addr: d.addr(),
            length: d.byte_count(),
            lkey: d.lkey(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminator_after_short_list() {
        let mut slots = [DataSeg::default(); 4];
        let sges = [
            Sge {
                addr: 1,
                length: 2,
                lkey: 3,
            },
            Sge {
                addr: 9,
                length: 0,
                lkey: 9,
            },
        ];
        assert_eq!(write_scatter(&mut slots, &sges), Some(1));
        assert!(slots[1].is_terminator());
        assert_eq!(read_scatter(&slots).count(), 1);
    }

    #[test]
    fn full_list_has_no_terminator_and_overflow_fails() {
        let mut slots = [DataSeg::default(); 1];
        let s = Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        };
        assert_eq!(write_scatter(&mut slots, &[s]), Some(1));
        assert_eq!(write_scatter(&mut slots, &[s, s]), None);
    }
}
