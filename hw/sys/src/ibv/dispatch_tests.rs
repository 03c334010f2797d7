//! The inline verbs dispatch as verbs.h does, on a fake provider context built in memory: the
//! extended ops only when `abi_compat` says extended, `sz` covers the op and the op is set
//! (`verbs_get_ctx_op`), the data-path ops through `context->ops`.

extern crate std;

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr;
use std::boxed::Box;

use super::*;

/// A zeroed `verbs_context` whose `ibv_context` is extended and whose provider claims `sz`.
fn fake(sz: usize) -> Box<verbs_context> {
    // SAFETY: all-zero is valid for every field (integers, NULL pointers, `None` function
    // pointers, a zeroed pthread mutex is PTHREAD_MUTEX_INITIALIZER on glibc).
    let mut v: Box<verbs_context> = Box::new(unsafe { core::mem::zeroed() });
    v.sz = sz;
    v.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    v
}

const TD_SENTINEL: usize = 0x7d00;

unsafe extern "C" fn fake_alloc_td(_: *mut ibv_context, _: *mut ibv_td_init_attr) -> *mut ibv_td {
    TD_SENTINEL as *mut ibv_td
}

unsafe extern "C" fn fake_post_send(
    _: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    _: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the test passes a live WR.
    unsafe { (*wr).wr_id as c_int }
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[test]
fn extended_op_is_called_when_present() {
    let mut v = fake(size_of::<verbs_context>());
    v.alloc_td = Some(fake_alloc_td);
    let mut attr = ibv_td_init_attr::default();
    // SAFETY: `v.context` is a (fake) live context.
    let got = unsafe { ibv_alloc_td(&mut v.context, &mut attr) };
    assert_eq!(got, Some(TD_SENTINEL as *mut ibv_td));
}

#[test]
fn sz_guards_the_op() {
    // `verbs_get_ctx_op`: the op exists only if sz >= sizeof - offsetof(op).
    let need = size_of::<verbs_context>() - offset_of!(verbs_context, alloc_td);
    let mut v = fake(need);
    v.alloc_td = Some(fake_alloc_td);
    let mut attr = ibv_td_init_attr::default();
    // SAFETY: fake live context.
    assert!(unsafe { ibv_alloc_td(&mut v.context, &mut attr) }.is_some());
    v.sz = need - 1;
    // SAFETY: fake live context.
    assert_eq!(unsafe { ibv_alloc_td(&mut v.context, &mut attr) }, None);
    assert_eq!(errno(), libc::EOPNOTSUPP);
}

#[test]
fn legacy_context_and_null_op_are_eopnotsupp() {
    let mut v = fake(size_of::<verbs_context>());
    let mut attr = ibv_td_init_attr::default();
    // SAFETY: fake live context; the op is NULL.
    assert_eq!(unsafe { ibv_alloc_td(&mut v.context, &mut attr) }, None);
    v.alloc_td = Some(fake_alloc_td);
    v.context.abi_compat = ptr::null_mut();
    // SAFETY: fake live context, not extended.
    assert_eq!(unsafe { ibv_alloc_td(&mut v.context, &mut attr) }, None);
    // SAFETY: as above.
    assert!(unsafe { verbs_get_ctx(&mut v.context) }.is_null());
    let mut td = ibv_td {
        context: &mut v.context,
    };
    // SAFETY: a (fake) TD on that context.
    assert_eq!(unsafe { ibv_dealloc_td(&mut td) }, libc::EOPNOTSUPP);
}

#[test]
fn verbs_get_ctx_is_the_enclosing_struct() {
    let mut v = fake(size_of::<verbs_context>());
    let outer: *mut verbs_context = &mut *v;
    // SAFETY: fake live extended context.
    assert_eq!(unsafe { verbs_get_ctx(&mut v.context) }, outer);
}

#[test]
fn post_send_goes_through_context_ops() {
    let mut v = fake(size_of::<verbs_context>());
    // SAFETY: zero is valid for an `ibv_qp` / `ibv_send_wr` (integers, NULL pointers).
    let mut qp: ibv_qp = unsafe { core::mem::zeroed() };
    qp.context = &mut v.context;
    // SAFETY: as above.
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.wr_id = 42;
    let mut bad: *mut ibv_send_wr = ptr::null_mut();
    // SAFETY: fake QP whose context has no post_send: EOPNOTSUPP, bad_wr = wr.
    let rc = unsafe { ibv_post_send(&mut qp, &mut wr, &mut bad) };
    assert_eq!(rc, libc::EOPNOTSUPP);
    assert_eq!(bad, &mut wr as *mut ibv_send_wr);
    v.context.ops.post_send = Some(fake_post_send);
    // SAFETY: the provider op now answers the WR id.
    assert_eq!(unsafe { ibv_post_send(&mut qp, &mut wr, &mut bad) }, 42);
}

#[test]
fn lp64_sizes() {
    // rdma-core 44 on x86_64 / aarch64 glibc (gcc sizeof); the conformance crate re-checks
    // every field against the installed header.
    assert_eq!(size_of::<ibv_wc>(), 48);
    assert_eq!(size_of::<ibv_send_wr>(), 128);
    assert_eq!(size_of::<ibv_recv_wr>(), 32);
    assert_eq!(size_of::<ibv_sge>(), 16);
    assert_eq!(size_of::<ibv_ah_attr>(), 32);
    assert_eq!(size_of::<ibv_qp_attr>(), 144);
    assert_eq!(size_of::<ibv_port_attr>(), 52);
    assert_eq!(size_of::<ibv_async_event>(), 16);
    assert_eq!(size_of::<ibv_qp_init_attr_ex>(), 136);
    assert_eq!(size_of::<ibv_cq_init_attr_ex>(), 56);
}

unsafe extern "C" fn fake_start_poll(cq: *mut ibv_cq_ex, _: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the test passes a live fake CQ.
    unsafe { (*cq).wr_id = 7 };
    0
}

unsafe extern "C" fn fake_read_ts(_: *mut ibv_cq_ex) -> u64 {
    0x1234_5678_9abc
}

#[test]
fn extended_poll_goes_through_the_cq_and_missing_readers_read_zero() {
    // SAFETY: all-zero is valid for an `ibv_cq_ex` (integers, NULL pointers, `None` function
    // pointers, zeroed pthread objects).
    let mut cq: Box<ibv_cq_ex> = Box::new(unsafe { core::mem::zeroed() });
    let mut attr = 0u32;
    let a = (&mut attr as *mut u32).cast::<ibv_poll_cq_attr>();
    // SAFETY: a fake extended CQ without ops: EOPNOTSUPP, no call through NULL.
    assert_eq!(unsafe { ibv_start_poll(&mut *cq, a) }, libc::EOPNOTSUPP);
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_next_poll(&mut *cq) }, libc::EOPNOTSUPP);
    // SAFETY: as above; a missing end_poll is a no-op.
    unsafe { ibv_end_poll(&mut *cq) };
    cq.start_poll = Some(fake_start_poll);
    cq.read_completion_ts = Some(fake_read_ts);
    // SAFETY: the fake ops answer.
    assert_eq!(unsafe { ibv_start_poll(&mut *cq, a) }, 0);
    assert_eq!(cq.wr_id, 7);
    // SAFETY: as above: the fake read_completion_ts op is installed and answers.
    let ts = unsafe { ibv_wc_read_completion_ts(&mut *cq) };
    assert_eq!(ts, 0x1234_5678_9abc);
    // SAFETY: a reader the "provider" did not install (not asked for in wc_flags).
    assert_eq!(unsafe { ibv_wc_read_byte_len(&mut *cq) }, 0);
}
