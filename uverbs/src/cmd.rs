//! Command framing: one `write` on a command descriptor is one command, framed as the kernel's
//! `ib_uverbs_write` expects it (`drivers/infiniband/core/uverbs_main.c`; rdma-core
//! `libibverbs/cmd_fallback.c` `_execute_cmd_write` / `_execute_cmd_write_ex` builds it).
//!
//! - **Legacy** (`command` = the number): `struct ib_uverbs_cmd_hdr` with `in_words` counting
//!   4-byte words of the whole write, header included; the core request (starting with the
//!   `u64 response` address for commands that answer), then the driver's data. The kernel
//!   writes the core response at `response` and the driver's response right after it (at
//!   `response` + the size of the core response).
//! - **Extended** (`command` | `IB_USER_VERBS_CMD_FLAG_EXTENDED`): the header, then
//!   `struct ib_uverbs_ex_cmd_hdr` (`response`, `provider_in_words`, `provider_out_words`); word
//!   counts are 8-byte words and cover the core part only. The driver's response starts
//!   `out_words × 8` bytes after `response`.
//!
//! The checks and their errno are the kernel's (`verify_hdr`): a length that does not match the
//! header, reserved bits or a response with no room for it are EINVAL; a request or response
//! shorter than the command's core struct is ENOSPC; a command the device does not implement is
//! EOPNOTSUPP (the kernel's `ib_uverbs_notsupp`); any command but `GET_CONTEXT` before a context
//! exists, and a second `GET_CONTEXT`, are EINVAL. A successful write returns its length.

use crate::abi::{cmd, take, CmdHdr, ExCmdHdr, CMD_COMMAND_MASK, CMD_FLAG_EXTENDED};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects;

/// A command's input, split as the kernel splits it.
#[derive(Debug)]
pub struct Req<'a> {
    /// The core request (after its `response` field).
    pub core: &'a [u8],
    /// The driver's data (udata in).
    pub udata: &'a [u8],
    /// Room for the core response.
    pub core_out: usize,
    /// Room for the driver's response (udata out).
    pub udata_out: usize,
    /// An extended command.
    pub ex: bool,
}

/// A command's output.
#[derive(Debug, Default)]
pub struct Resp {
    /// The core response.
    pub core: Vec<u8>,
    /// The driver's response.
    pub udata: Vec<u8>,
}

impl Resp {
    /// A response of the two structs' bytes.
    pub fn of(core: &[u8], udata: &[u8]) -> Resp {
        Resp {
            core: core.to_vec(),
            udata: udata.to_vec(),
        }
    }
}

/// The kernel's sizes of a legacy command: the core request (with `response`, if any) and the
/// core response (0: no response).
fn legacy_sizes(n: u32) -> Option<(usize, usize)> {
    use crate::abi::*;
    use std::mem::size_of as sz;
    // With a response: `u64 response` and the struct after it.
    let r = 8;
    Some(match n {
        cmd::GET_CONTEXT => (r, sz::<GetContextResp>()),
        cmd::QUERY_DEVICE => (r, sz::<QueryDeviceResp>()),
        cmd::QUERY_PORT => (r + sz::<QueryPort>(), sz::<QueryPortResp>()),
        cmd::ALLOC_PD => (r, sz::<Handle>()),
        cmd::DEALLOC_PD | cmd::DESTROY_AH | cmd::DEREG_MR | cmd::CLOSE_XRCD => (sz::<Handle>(), 0),
        cmd::CREATE_AH => (r + sz::<CreateAh>(), sz::<Handle>()),
        cmd::REG_MR => (r + sz::<RegMr>(), sz::<RegMrResp>()),
        cmd::CREATE_COMP_CHANNEL => (r, sz::<CompChannelResp>()),
        cmd::CREATE_CQ => (r + sz::<CreateCq>(), sz::<CreateCqResp>()),
        cmd::DESTROY_CQ => (r + sz::<DestroyObj>(), sz::<DestroyCqResp>()),
        cmd::CREATE_QP => (r + sz::<CreateQp>(), sz::<CreateQpResp>()),
        cmd::QUERY_QP => (r + sz::<QueryQp>(), sz::<QueryQpResp>()),
        cmd::MODIFY_QP => (sz::<ModifyQp>(), 0),
        cmd::DESTROY_QP | cmd::DESTROY_SRQ => (r + sz::<DestroyObj>(), sz::<EventsReported>()),
        cmd::ATTACH_MCAST | cmd::DETACH_MCAST => (sz::<Mcast>(), 0),
        cmd::CREATE_SRQ => (r + sz::<CreateSrq>(), sz::<CreateSrqResp>()),
        cmd::MODIFY_SRQ => (sz::<ModifySrq>(), 0),
        cmd::QUERY_SRQ => (r + sz::<DestroyObj>(), sz::<QuerySrqResp>()),
        cmd::OPEN_XRCD => (r + sz::<OpenXrcd>(), sz::<Handle>()),
        cmd::CREATE_XSRQ => (r + sz::<CreateXsrq>(), sz::<CreateSrqResp>()),
        cmd::OPEN_QP => (r + sz::<OpenQp>(), sz::<CreateQpResp>()),
        _ => return None,
    })
}

/// The kernel's smallest core request and response of an extended command (up to the first
/// field it requires: `UAPI_DEF_WRITE_IO_EX` in `uverbs_cmd.c`).
fn ex_sizes(n: u32) -> Option<(usize, usize)> {
    Some(match n {
        cmd::QUERY_DEVICE => (4, 184),
        cmd::CREATE_CQ => (28, 16),
        cmd::CREATE_QP => (52, 40),
        cmd::MODIFY_QP => (112, 8),
        _ => return None,
    })
}

/// Execute one command written to command descriptor `fd`; the write's result.
pub fn execute(emu: &mut Emu, fd: i32, bytes: &[u8]) -> Result<usize, i32> {
    if bytes.len() < std::mem::size_of::<CmdHdr>() {
        return Err(libc::EINVAL);
    }
    let (hdr, rest) = take::<CmdHdr>(bytes);
    if hdr.command & !(CMD_FLAG_EXTENDED | CMD_COMMAND_MASK) != 0 {
        return Err(libc::EINVAL);
    }
    let n = hdr.command & CMD_COMMAND_MASK;
    let node = emu.node.clone().ok_or(libc::ENODEV)?;
    if !emu.contexts.contains_key(&fd) {
        return Err(libc::EBADF);
    }
    let has_context = emu.contexts.get(&fd).is_some_and(|c| c.u.is_some());
    if hdr.command & CMD_FLAG_EXTENDED != 0 {
        let (req_min, resp_min) = ex_sizes(n).ok_or(libc::EOPNOTSUPP)?;
        if !has_context {
            return Err(libc::EINVAL);
        }
        if rest.len() < std::mem::size_of::<ExCmdHdr>() {
            return Err(libc::EINVAL);
        }
        let (ex, body) = take::<ExCmdHdr>(rest);
        let core_in = hdr.in_words as usize * 8;
        if core_in + ex.provider_in_words as usize * 8 != body.len() || ex.cmd_hdr_reserved != 0 {
            return Err(libc::EINVAL);
        }
        if core_in < req_min {
            return Err(libc::ENOSPC);
        }
        let core_out = hdr.out_words as usize * 8;
        let udata_out = ex.provider_out_words as usize * 8;
        if ex.response != 0 {
            if core_out == 0 && udata_out == 0 {
                return Err(libc::EINVAL);
            }
            if core_out < resp_min {
                return Err(libc::ENOSPC);
            }
        } else if core_out != 0 || udata_out != 0 {
            return Err(libc::EINVAL);
        }
        let req = Req {
            core: &body[..core_in],
            udata: &body[core_in..],
            core_out,
            udata_out,
            ex: true,
        };
        let resp = dispatch(emu, &node, fd, n, &req)?;
        if ex.response != 0 {
            respond(ex.response, core_out, &resp.core, udata_out, &resp.udata)?;
        }
        return Ok(bytes.len());
    }
    let (req_size, resp_size) = legacy_sizes(n).ok_or(libc::EOPNOTSUPP)?;
    if hdr.in_words as usize * 4 != bytes.len() {
        return Err(libc::EINVAL);
    }
    if n != cmd::GET_CONTEXT && !has_context {
        return Err(libc::EINVAL);
    }
    if rest.len() < req_size {
        return Err(libc::ENOSPC);
    }
    let out_len = hdr.out_words as usize * 4;
    if out_len < resp_size {
        return Err(libc::ENOSPC);
    }
    let (response, core) = if resp_size > 0 {
        let (r, _) = take::<u64>(rest);
        (r, &rest[8..req_size])
    } else {
        (0, &rest[..req_size])
    };
    let udata_out = if resp_size > 0 {
        out_len - resp_size
    } else {
        0
    };
    let req = Req {
        core,
        udata: &rest[req_size..],
        core_out: resp_size,
        udata_out,
        ex: false,
    };
    let resp = dispatch(emu, &node, fd, n, &req)?;
    if resp_size > 0 {
        if let Err(e) = respond(response, resp_size, &resp.core, udata_out, &resp.udata) {
            if n == cmd::GET_CONTEXT {
                // The kernel frees a context it could not report (`ib_uverbs_get_context`):
                // the program may ask again.
                objects::device::undo_context(emu, &node, fd);
            }
            return Err(e);
        }
    }
    Ok(bytes.len())
}

/// Write the core response (cut or zero-filled to `core_out` bytes) at `addr` and the driver's
/// response (at most `udata_out` bytes) right after it; EFAULT if the program's memory is not
/// there.
fn respond(
    addr: u64,
    core_out: usize,
    core: &[u8],
    udata_out: usize,
    udata: &[u8],
) -> Result<(), i32> {
    let mut c = core.to_vec();
    c.resize(core_out, 0);
    crate::sys::copy_to_user(addr, &c)?;
    let n = udata.len().min(udata_out);
    if n > 0 {
        crate::sys::copy_to_user(addr + core_out as u64, &udata[..n])?;
    }
    Ok(())
}

fn dispatch(emu: &mut Emu, node: &Node, fd: i32, n: u32, req: &Req) -> Result<Resp, i32> {
    let r = run(emu, node, fd, n, req);
    match &r {
        Ok(_) => tracing::debug!(fd, command = n, ex = req.ex, "command done"),
        Err(e) => tracing::debug!(fd, command = n, ex = req.ex, errno = e, "command refused"),
    }
    r
}

fn run(emu: &mut Emu, node: &Node, fd: i32, n: u32, req: &Req) -> Result<Resp, i32> {
    use objects::{ah, cq, device, mr, qp, srq};
    // A device in its fatal state is gone for the kernel: mlx5_ib raises
    // IB_EVENT_DEVICE_FATAL and the device is removed, which disassociates every open context
    // (kernel `drivers/infiniband/core/uverbs_main.c` `ib_uverbs_remove_one` →
    // `uverbs_disassociate_...` / `ib_uverbs_free_hw_resources`); from then on every command
    // on the descriptor fails with EIO (`ib_uverbs_write`: no device behind the file). The
    // objects are released when the program closes the descriptor. libibverbs turns EIO from a
    // destroy into success only with RDMAV_ALLOW_DISASSOC_DESTROY set (rdma-core
    // `libibverbs/driver.h` `verbs_is_destroy_err`, `init.c` `ibverbs_init`).
    if node.dev.is_fatal() {
        return Err(libc::EIO);
    }
    match n {
        cmd::GET_CONTEXT => device::get_context(emu, node, fd, req),
        cmd::QUERY_DEVICE => device::query_device(node, req),
        cmd::QUERY_PORT => device::query_port(node, req),
        cmd::ALLOC_PD => mr::alloc_pd(emu, node, fd, req),
        cmd::DEALLOC_PD => mr::dealloc_pd(emu, node, fd, req),
        cmd::REG_MR => mr::reg_mr(emu, node, fd, req),
        cmd::DEREG_MR => mr::dereg_mr(emu, node, fd, req),
        cmd::CREATE_COMP_CHANNEL => cq::create_channel(emu, node),
        cmd::CREATE_CQ => cq::create(emu, node, fd, req),
        cmd::DESTROY_CQ => cq::destroy(emu, node, fd, req),
        cmd::CREATE_QP => qp::create(emu, node, fd, req),
        cmd::OPEN_QP => qp::open(emu, node, fd, req),
        cmd::QUERY_QP => qp::query(emu, node, fd, req),
        cmd::MODIFY_QP => qp::modify(emu, node, fd, req),
        cmd::DESTROY_QP => qp::destroy(emu, node, fd, req),
        cmd::CREATE_SRQ | cmd::CREATE_XSRQ => srq::create(emu, node, fd, req, n),
        cmd::MODIFY_SRQ => srq::modify(emu, node, fd, req),
        cmd::QUERY_SRQ => srq::query(emu, fd, req),
        cmd::DESTROY_SRQ => srq::destroy(emu, node, fd, req),
        cmd::OPEN_XRCD => srq::open_xrcd(emu, node, fd, req),
        cmd::CLOSE_XRCD => srq::close_xrcd(emu, node, fd, req),
        cmd::CREATE_AH => ah::create(emu, node, fd, req),
        cmd::DESTROY_AH => ah::destroy(emu, node, fd, req),
        cmd::ATTACH_MCAST => ah::attach(emu, node, fd, req, true),
        cmd::DETACH_MCAST => ah::attach(emu, node, fd, req, false),
        _ => Err(libc::EOPNOTSUPP),
    }
}
