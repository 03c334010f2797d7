//! Tests of the send queue's bookkeeping and WQE helpers on memory standing in for the ring.

use super::{meta, Doorbell, SendQueue};
use mlx5_wqe::ring::SqRing;
use mlx5_wqe::seg::DataSeg;
use mlx5_wqe::CtrlSeg;
use zerocopy::IntoBytes;

/// A ring of 16 blocks, its doorbell record and a register, in one zeroed allocation.
#[repr(C, align(4096))]
struct Mem([u8; 16 * 64 + 64 + 512]);

fn queue(mem: &mut Mem) -> SendQueue {
    let base = mem.0.as_mut_ptr();
    // SAFETY: the ring is the first 16 blocks (64-byte aligned), then the record and a
    // register of two 256-byte halves, all inside `mem`, which the test keeps alive.
    unsafe {
        let ring = SqRing::new(base, 16);
        let db = Doorbell::new(base.add(16 * 64 + 64), 256, false);
        SendQueue::new(ring, base.add(16 * 64) as *mut u32, db, 16)
    }
}

/// Write at block `block` a ctrl segment (`opmod`, `opcode`, `ds`) and data segments
/// `i = 0..n` at 16-byte units `skip..` (wrapping at the ring end).
fn wqe(mem: &mut Mem, block: usize, opmod: u8, opcode: u8, skip: usize, n: usize) {
    let ring = &mut mem.0[..16 * 64];
    let c = block * 64;
    ring[c] = opmod;
    ring[c + 3] = opcode;
    ring[c + 7] = (skip + n) as u8;
    for i in 0..n {
        let u = (c + (skip + i) * 16) % ring.len();
        ring[u..u + 16].copy_from_slice(sge(i).as_bytes());
    }
}

fn sge(i: usize) -> DataSeg {
    DataSeg::new(0x100 + i as u32, 0x77 + i as u32, 0x1000 * (i as u64 + 1))
}

/// `reply_sges` reads back the local scatter list of a READ or atomic WQE after its
/// fixed segments (ctrl + raddr, then the operands: 16 bytes, 32 for a 64-bit masked
/// compare-and-swap), wrapping at the ring end, at most the 16 entries of `out`.
#[test]
fn reply_sges_reads_the_scatter_list_after_the_operands() {
    use mlx5_wqe::{
        OPCODE_ATOMIC_CS, OPCODE_ATOMIC_FA, OPCODE_ATOMIC_MASKED_CS, OPCODE_ATOMIC_MASKED_FA,
        OPCODE_RDMA_READ, OPCODE_SEND, OPMOD_EXT_ATOMIC_32, OPMOD_EXT_ATOMIC_64,
    };
    // (block, opmod, opcode, units before the list, entries written, entries read)
    let cases = [
        (0, 0, OPCODE_RDMA_READ, 2, 3, 3),
        // 20 entries: only the 16 that `out` holds.
        (0, 0, OPCODE_RDMA_READ, 2, 20, 16),
        // The last block: the list continues at the ring's start.
        (15, 0, OPCODE_RDMA_READ, 2, 5, 5),
        (15, 0, OPCODE_ATOMIC_CS, 3, 1, 1),
        (15, 0, OPCODE_ATOMIC_FA, 3, 1, 1),
        (15, OPMOD_EXT_ATOMIC_32, OPCODE_ATOMIC_MASKED_CS, 3, 1, 1),
        (15, OPMOD_EXT_ATOMIC_32, OPCODE_ATOMIC_MASKED_FA, 3, 1, 1),
        (15, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_FA, 3, 1, 1),
        // Operands of 32 bytes: the list starts in the next block, here the ring's first.
        (15, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_CS, 4, 1, 1),
        (7, OPMOD_EXT_ATOMIC_64, OPCODE_ATOMIC_MASKED_CS, 4, 2, 2),
        (3, 0, OPCODE_SEND, 1, 2, 0),
    ];
    for (block, opmod, opcode, skip, n, want) in cases {
        let mut mem = Box::new(Mem([0; 16 * 64 + 64 + 512]));
        wqe(&mut mem, block, opmod, opcode, skip, n);
        let sq = queue(&mut mem);
        let mut out = [DataSeg::default(); 16];
        let got = sq.reply_sges(block as u16, &mut out);
        let what = format!("opcode {opcode:#x} opmod {opmod:#x} at block {block}, {n} entries");
        assert_eq!(got, want, "{what}");
        for (i, d) in out[..got].iter().enumerate() {
            assert_eq!(*d, sge(i), "entry {i}: {what}");
        }
        assert!(
            out[got..].iter().all(|d| *d == DataSeg::default()),
            "{what}"
        );
    }
}

/// The two raw stores of `write_ctrl` lay out what the typed builder does, on seeded
/// pseudo-random fields (xorshift64, fixed seed).
#[test]
fn write_ctrl_matches_the_builder() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (pi, opcode, opmod) = (x as u16, (x >> 16) as u8, (x >> 24) as u8);
        let (qpn, ds, fm, imm) = (
            (x >> 32) as u32 & 0x00ff_ffff,
            (x >> 56) as u32 & 0x3f,
            (x >> 8) as u8,
            x.rotate_left(20) as u32,
        );
        #[repr(C, align(64))]
        struct Block([u8; 64]);
        let mut b = Block([0xee; 64]);
        // SAFETY: `b` is a 64-byte aligned block.
        unsafe {
            SendQueue::write_ctrl(
                b.0.as_mut_ptr(),
                pi,
                opcode,
                opmod,
                qpn << 8,
                ds,
                fm,
                imm.to_be(),
            )
        };
        let want = CtrlSeg::builder()
            .wqe_index(pi)
            .opcode(opcode)
            .opmod(opmod)
            .qpn(qpn)
            .ds(ds as u8)
            .fm_ce_se(fm)
            .imm(imm)
            .build();
        assert_eq!(&b.0[..16], want.as_bytes());
        assert!(b.0[16..].iter().all(|&v| v == 0xee));
    }
}

#[test]
fn meta_byte_round_trips_and_the_common_shape_is_zero() {
    assert_eq!(meta::encode(1, 0), 0, "one block, no atomic");
    for bbs in 1..=16u32 {
        for size in [0u8, 4, 8] {
            let m = meta::encode(bbs, size);
            assert_eq!(meta::bbs(m), bbs as u16);
            assert_eq!(meta::atomic_size(m), size);
            assert_eq!(m == 0, bbs == 1 && size == 0);
        }
    }
}
