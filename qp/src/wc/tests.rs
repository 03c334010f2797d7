//! The raw writers and `Wc::new` against CQEs built field by field.

use super::*;
use core::mem::MaybeUninit;
use mlx5_cq::{Cqe64, U16, U32};

/// A 64-byte aligned CQE, as in a CQ buffer.
#[repr(C, align(64))]
struct Line(Cqe64);

/// A `Wc` written by `write`, over bytes that start as `fill`.
fn written(fill: u8, write: impl FnOnce(*mut Wc)) -> Wc {
    let mut m = MaybeUninit::<Wc>::uninit();
    // SAFETY: the test's own storage; every byte is initialised (`fill`) before `write`,
    // and any bytes are a valid `Wc`.
    unsafe {
        core::ptr::write_bytes(m.as_mut_ptr() as *mut u8, fill, core::mem::size_of::<Wc>());
        write(m.as_mut_ptr());
        m.assume_init()
    }
}

/// The little-endian load of bytes 56..64 the poll makes.
fn tail_of(c: &Cqe64) -> u64 {
    u64::from_ne_bytes(c.as_bytes()[56..64].try_into().unwrap())
}

fn req_cqe(send_opcode: u8, qpn: u32, byte_cnt: u32, own: u8) -> Line {
    Line(Cqe64 {
        sop_drop_qpn: U32::new((send_opcode as u32) << 24 | qpn),
        wqe_counter: U16::new(0x1234),
        byte_cnt: U32::new(byte_cnt),
        imm_inval_pkey: U32::new(0xdead_beef),
        flags_rqpn: U32::new(0x3f12_3456),
        slid: U16::new(0x4321),
        ml_path: 0xff,
        op_own: CQE_REQ << 4 | own,
        ..Cqe64::default()
    })
}

#[test]
fn a_requester_cqe_copied_is_the_send_completion() {
    for send_op in 0..=255u8 {
        for (fill, own) in [(0u8, 0u8), (0xff, 1)] {
            let c = req_cqe(send_op, 0x00ab_cdef, 777, own);
            // SAFETY: `p` is the test's `Wc`; `c` an aligned CQE.
            let wc = written(fill, |p| unsafe {
                Wc::write_req(
                    p,
                    0x1122_3344_5566_7788,
                    c.0.as_bytes().as_ptr(),
                    tail_of(&c.0),
                )
            });
            let opcode = WcOpcode::from_send_opcode(send_op);
            let want = WcFields {
                wr_id: 0x1122_3344_5566_7788,
                qp_num: 0x00ab_cdef,
                opcode,
                flags: send_flags(send_op),
                byte_len: if has_byte_len(opcode) { 777 } else { 0 },
                ..WcFields::default()
            };
            assert_eq!(wc.fields(), want, "send opcode {send_op:#x}");
            assert!(wc.is_ok() && wc.syndrome_name().is_none());
            assert_eq!(
                wc.flags().contains(WcFlags::WITH_IMM),
                send_op == op::OPCODE_RDMA_WRITE_IMM || send_op == op::OPCODE_SEND_IMM
            );
            // What a software-built completion of the same fields reads back.
            assert_eq!(Wc::new(&want).fields(), want, "send opcode {send_op:#x}");
        }
    }
}

#[test]
fn a_responder_cqe_copied_is_the_receive_completion() {
    let kinds = [
        (CQE_RESP_SEND, WcOpcode::Recv, WcFlags::empty()),
        (CQE_RESP_SEND_IMM, WcOpcode::Recv, WcFlags::WITH_IMM),
        (CQE_RESP_SEND_INV, WcOpcode::Recv, WcFlags::WITH_INV),
        (
            CQE_RESP_WR_IMM,
            WcOpcode::RecvRdmaWithImm,
            WcFlags::WITH_IMM,
        ),
    ];
    for (kind, opcode, flags) in kinds {
        for (grh, sl, path) in [(1u32, 0xfu32, 0xffu8), (0, 3, 0x05)] {
            let mut c = req_cqe(0xee, 0x12_3456, 0xdead_beef, 1);
            c.0.op_own = kind << 4 | 0x1;
            c.0.flags_rqpn = U32::new(grh << 28 | sl << 24 | 0x65_4321);
            c.0.imm_inval_pkey = U32::new(0x0102_cafe);
            c.0.ml_path = path;
            let ptr = c.0.as_bytes().as_ptr();
            // SAFETY: as above.
            let wc = written(0xa5, |p| unsafe {
                Wc::write_resp(p, 7, ptr, tail_of(&c.0))
            });
            let want = WcFields {
                wr_id: 7,
                qp_num: 0x12_3456,
                byte_len: 0xdead_beef,
                opcode,
                flags: if grh != 0 {
                    flags | WcFlags::GRH
                } else {
                    flags
                },
                sl: sl as u8,
                imm_data: if flags.is_empty() { 0 } else { 0x0102_cafe },
                src_qp: 0x65_4321,
                slid: 0x4321,
                pkey_index: 0xcafe,
                dlid_path_bits: path & 0x7f,
                ..WcFields::default()
            };
            assert_eq!(wc.fields(), want, "kind {kind}");
            let mut r = Wc::responder(&c.0);
            r.set_wr_id(7);
            assert_eq!(r, wc);
            // What a software-built completion of the same fields reads back.
            assert_eq!(Wc::new(&want).fields(), want, "kind {kind}");
        }
    }
}

#[test]
fn errors_keep_status_syndromes_and_the_posted_opcode() {
    for status in WcStatus::ALL.into_iter().skip(1) {
        for opcode in [
            WcOpcode::RdmaWrite,
            WcOpcode::Other,
            WcOpcode::MaskedFetchAdd,
            WcOpcode::Recv,
        ] {
            let f = WcFields {
                wr_id: 9,
                qp_num: 0xff_ffff,
                status,
                opcode,
                syndrome: 0x22,
                vendor_err: 0x99,
                ..WcFields::default()
            };
            let wc = Wc::new(&f);
            assert_eq!(wc.fields(), f);
            assert!(!wc.is_ok());
            assert_eq!(wc.syndrome_name(), Some(mlx5_cq::syndrome_name(0x22)));
        }
    }
}

#[test]
fn fields_that_do_not_apply_read_zero() {
    let f = WcFields {
        opcode: WcOpcode::RdmaWrite,
        byte_len: 5,
        src_qp: 3,
        sl: 2,
        imm_data: 1,
        syndrome: 4,
        ..WcFields::default()
    };
    let want = WcFields {
        opcode: WcOpcode::RdmaWrite,
        ..WcFields::default()
    };
    assert_eq!(Wc::new(&f).fields(), want);
    assert_eq!(Wc::default().fields(), WcFields::default());
    assert_eq!(Wc::from(want), Wc::new(&want));
    assert_eq!(WcFields::from(Wc::new(&want)), want);
}
