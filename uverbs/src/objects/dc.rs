//! Dynamically Connected QPs: `CREATE_QP` of type `IB_QPT_DRIVER` with mlx5's DC flags, the
//! DC target's `MODIFY_QP` (its number at RTR), and the DCI stream caps of `QUERY_DEVICE`, as
//! `ib_uverbs` + `mlx5_ib` answer them.
//!
//! rdma-core 44 `mlx5dv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` (`providers/mlx5/verbs.c`
//! `create_qp`) sends the ordinary create command with `qp_type` `IBV_QPT_DRIVER` (0xff) and
//! `struct mlx5_ib_create_qp.flags` naming the kind:
//!
//! - a **DCI** (`MLX5_QP_FLAG_TYPE_DCI`, with `MLX5_QP_FLAG_DCI_STREAM` and `dci_streams` when
//!   `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS` is given) is created like any QP on libmlx5's own
//!   send queue, doorbell record and BlueFlame register, then made an initiator
//!   ([`mlx5_sim::SimDevice::make_dc`]);
//! - a **DCT** (`MLX5_QP_FLAG_TYPE_DCT`, `create_dct`) carries no buffer, doorbell record or
//!   register, only `access_key` (the union with `sq_buf_addr`) and `uidx`: the device makes a
//!   target with no queues (`Device::create_qp_ex` with `QpInitEx::dc`), whose receives complete
//!   on its receive CQ with that user index. `ibv_qp.qp_num` is 0 until the modify to RTR, whose
//!   response (`struct mlx5_ib_modify_qp_resp`) carries `dctn` (`verbs.c` `modify_dct`).
//!
//! The kernel's checks (`drivers/infiniband/hw/mlx5/qp.c`): `process_udata_size` (a DRIVER QP's
//! driver data shorter than `struct mlx5_ib_create_qp` is EINVAL), `process_vendor_flags` (a
//! DRIVER QP with neither or both of the DC flags is EINVAL), `check_qp_attr` (a DCT without an
//! SRQ or receive CQ, a DCI with `max_recv_wr` or `max_recv_sge`, are EINVAL),
//! `mlx5_ib_modify_dct` (RESET→INIT needs `IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX | IB_QP_PORT`,
//! INIT→RTR `IB_QP_MIN_RNR_TIMER | IB_QP_AV | IB_QP_PATH_MTU` and room for `dctn` in the
//! response, any other transition EINVAL: the project's state table, `mlx5_hw::qp_state`).
//!
//! A DCI may name an SRQ (UCX's `uct_dc_mlx5_iface_create_dci` passes its interface's): the
//! kernel's `create_dci` sets it in the QP context, where nothing ever uses it (no request is
//! delivered to an initiator). The handle is checked and held (the SRQ is busy while the DCI
//! lives, as the kernel's use count makes it), the device's DCI is made without it.

use mlx5_hw::{DcInit, DciStreams, Device, QpCap, QpId, QpInitAttr, QpInitEx, QpType};
use zerocopy::IntoBytes;

use crate::abi::{mlx5, CreateQp, ExModifyQpResp, Mlx5CreateQp};
use crate::cmd::{Req, Resp};
use crate::context::{self, Object, Qp};
use crate::emu::Emu;
use crate::node::Node;
use crate::objects::uctx;

/// `IB_QPT_DRIVER` (`enum ib_uverbs_qp_type`): the QP type of every mlx5 DC QP.
pub const QPT_DRIVER: u8 = 0xff;

/// `MLX5_QP_FLAG_DCI_STREAM` (`<rdma/mlx5-abi.h>`).
const QP_FLAG_DCI_STREAM: u32 = 1 << 11;

/// The flags a DCI's create may carry beside the plain QP's: its type and its streams.
pub const DCI_FLAGS: u32 = mlx5::QP_FLAG_TYPE_DCI | QP_FLAG_DCI_STREAM;

/// Offset of `dci_streams_caps` in the bytes of `struct mlx5_ib_query_device_resp` after
/// `response_length` (offset 100 of the struct, checked against the installed header by
/// this module's layout test).
pub const DCI_STREAMS_CAPS_AT: usize = 100 - 8;

/// `struct mlx5_ib_modify_qp_resp` (`<rdma/mlx5-abi.h>`): what the modify of a DCT to RTR
/// answers in the driver's response.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    zerocopy::FromBytes,
    IntoBytes,
    zerocopy::KnownLayout,
    zerocopy::Immutable,
)]
#[repr(C)]
pub struct Mlx5ModifyQpResp {
    /// Bytes of this struct the kernel filled.
    pub response_length: u32,
    /// The DCT's number.
    pub dctn: u32,
    /// Enhanced connection establishment options (none: the device has no ECE).
    pub ece_options: u32,
    /// Zero.
    pub reserved: u32,
}

/// Write the DCI stream caps into `QUERY_DEVICE`'s driver data (`caps`: the bytes after
/// `response_length`): libmlx5 keeps them as `dci_streams_caps` (`verbs.c`
/// `mlx5_query_device_ex`), refuses a DCI asking for more (`create_qp`) and answers them in
/// `mlx5dv_query_device` with `MLX5DV_CONTEXT_MASK_DCI_STREAMS`.
pub fn query_device_caps(caps: &mut [u8]) {
    let c = mlx5_sim::dc::DCI_STREAMS_CAPS;
    if let Some(b) = caps.get_mut(DCI_STREAMS_CAPS_AT..DCI_STREAMS_CAPS_AT + 2) {
        b.copy_from_slice(&[c.log_num_concurent, c.log_num_errored]);
    }
}

/// What the create command asks of DC: `None` for a QP of another type, the DCI's attributes
/// for a DCI, the target's for a DCT; the kernel's refusals (module doc) as errno.
pub fn kind(c: &CreateQp, d: &Mlx5CreateQp, udata_len: usize) -> Result<Option<DcInit>, i32> {
    if c.qp_type != QPT_DRIVER {
        return Ok(None);
    }
    if udata_len < std::mem::size_of::<Mlx5CreateQp>() {
        return Err(libc::EINVAL);
    }
    match d.flags & (mlx5::QP_FLAG_TYPE_DCI | mlx5::QP_FLAG_TYPE_DCT) {
        mlx5::QP_FLAG_TYPE_DCI => {
            if c.max_recv_wr != 0 || c.max_recv_sge != 0 {
                return Err(libc::EINVAL);
            }
            let streams = (d.flags & QP_FLAG_DCI_STREAM != 0).then_some(DciStreams {
                log_num_concurent: d.dci_log_num_concurent,
                log_num_errored: d.dci_log_num_errored,
            });
            Ok(Some(DcInit::Initiator { streams }))
        }
        mlx5::QP_FLAG_TYPE_DCT => {
            if c.is_srq == 0 {
                return Err(libc::EINVAL);
            }
            Ok(Some(DcInit::Target {
                // `access_key` shares its place with `sq_buf_addr`.
                access_key: d.sq_buf_addr,
            }))
        }
        _ => Err(libc::EINVAL),
    }
}

/// `CREATE_QP` of a DCT (rdma-core `create_dct`): a target with no queues on the PD, receive
/// CQ and SRQ the command names, its access key, and its user index under CQE version 1
/// (missing or out of range, or given under CQE version 0: EINVAL, kernel `mlx5_ib.h`
/// `get_qp_user_index`). Flags other than its type and
/// scatter-to-CQE (which the device, without `MLX5_IB_QUERY_DEV_RESP_FLAGS_SCAT2CQE_DCT`,
/// ignores as the kernel's `process_vendor_flag` does) are EINVAL (rdma-core's own check).
pub fn create_dct(
    emu: &mut Emu,
    node: &Node,
    fd: i32,
    req: &Req,
    c: &CreateQp,
    d: &Mlx5CreateQp,
    access_key: u64,
) -> Result<Resp, i32> {
    let ok = mlx5::QP_FLAG_TYPE_DCT | mlx5::QP_FLAG_SCATTER_CQE | mlx5::QP_FLAG_ALLOW_SCATTER_CQE;
    if d.flags & !ok != 0 {
        return Err(libc::EINVAL);
    }
    let u = uctx(emu, fd)?;
    let uidx = if u.cqe_version == 1 {
        if d.uidx == mlx5::DEFAULT_UIDX || d.uidx & !0x00ff_ffff != 0 {
            return Err(libc::EINVAL);
        }
        Some(d.uidx)
    } else {
        if d.uidx != mlx5::DEFAULT_UIDX {
            return Err(libc::EINVAL);
        }
        None
    };
    let pd = u.get(c.pd_handle, context::pd)?.id;
    let send_cq = u.get(c.send_cq_handle, context::cq)?.cqn;
    let recv_cq = u.get(c.recv_cq_handle, context::cq)?.cqn;
    let srq = u.get(c.srq_handle, context::srq)?.srqn;
    let attr = QpInitAttr {
        qp_type: QpType::Dct,
        send_cq: mlx5_hw::CqId(send_cq),
        recv_cq: mlx5_hw::CqId(recv_cq),
        srq: Some(mlx5_hw::SrqId(srq)),
        // The kernel's `create_dct` reads no capability: the target has no queues.
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let ex = QpInitEx {
        dc: Some(DcInit::Target { access_key }),
        ..Default::default()
    };
    let info = node
        .dev
        .create_qp_ex(pd, &attr, &ex)
        .map_err(crate::objects::errno)?;
    if let Some(x) = uidx {
        if let Err(e) = node.dev.set_qp_user_index(info.id, x) {
            let _ = node.dev.destroy_qp_user(info.id);
            return Err(crate::objects::errno(e));
        }
    }
    // The create answers the capabilities as asked (uverbs copies back what the driver left
    // in `ib_qp_init_attr`; `create_dct` leaves them).
    let cap = QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    };
    let h = u.insert(Object::Qp(Qp {
        qpn: info.id.0,
        user_handle: c.user_handle,
        qp_type: QpType::Dct,
        pd: Some(c.pd_handle),
        send_cq: Some(c.send_cq_handle),
        recv_cq: Some(c.recv_cq_handle),
        srq: Some(c.srq_handle),
        xrcd: None,
        bfreg: None,
        cap,
        sq_sig_all: false,
        events_reported: 0,
    }));
    emu.qp_owner.insert(info.id.0, (fd, h));
    // `ibv_qp.qp_num` is 0 until RTR (kernel `create_dct` gives the QP no number yet).
    Ok(crate::objects::qp::created(req, h, 0, cap, 0))
}

/// Make the DCI just created on the program's rings an initiator; on a refusal the QP is
/// destroyed again and the create fails with the refusal's errno.
pub fn adopt_dci(node: &Node, qpn: u32, dc: DcInit) -> Result<(), i32> {
    node.dev.make_dc(QpId(qpn), dc).map_err(|e| {
        let _ = node.dev.destroy_qp_user(QpId(qpn));
        crate::objects::errno(e)
    })
}

/// Whether QP `qpn` is a DC target (its modify answers `dctn`).
pub fn is_dct(node: &Node, qpn: u32) -> bool {
    node.dev.qp_type(qpn) == Some(QpType::Dct)
}

/// `MODIFY_QP` of a DCT after the device took it (kernel `mlx5_ib_modify_dct`): the modify to
/// RTR must have room for `dctn` in the driver's response (else EINVAL, checked by
/// [`check_dct_modify`] before the device moves it) and answers it, with `response_length`
/// the whole struct when there is room for it, else up to `dctn`.
pub fn dct_modified(
    node: &Node,
    qpn: u32,
    to_rtr: bool,
    req: &Req,
    core: ExModifyQpResp,
) -> Result<Resp, i32> {
    if !to_rtr {
        return Ok(Resp::of(core.as_bytes(), &[]));
    }
    let dctn = node
        .dev
        .dct_number(QpId(qpn))
        .map_err(crate::objects::errno)?;
    let full = std::mem::size_of::<Mlx5ModifyQpResp>();
    let r = Mlx5ModifyQpResp {
        response_length: if req.udata_out < full { 8 } else { full as u32 },
        dctn,
        ..Default::default()
    };
    Ok(Resp::of(core.as_bytes(), r.as_bytes()))
}

/// The kernel's refusal of a DCT's modify to RTR whose response has no room for `dctn`
/// (`mlx5_ib_modify_dct`: `udata->outlen < offsetofend(resp, dctn)` is EINVAL; a legacy
/// `MODIFY_QP` has no response at all).
pub fn check_dct_modify(to_rtr: bool, req: &Req) -> Result<(), i32> {
    if to_rtr && (!req.ex || req.udata_out < 8) {
        return Err(libc::EINVAL);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(qp_type: u8, flags: u32) -> (CreateQp, Mlx5CreateQp) {
        let c = CreateQp {
            qp_type,
            is_srq: 1,
            ..Default::default()
        };
        let d = Mlx5CreateQp {
            flags,
            sq_buf_addr: 0x1234_5678_9abc_def0,
            ..Default::default()
        };
        (c, d)
    }

    #[test]
    fn the_dc_kind_comes_from_the_flags_as_the_kernel_reads_them() {
        let full = std::mem::size_of::<Mlx5CreateQp>();
        let (c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCT);
        assert_eq!(
            kind(&c, &d, full),
            Ok(Some(DcInit::Target {
                access_key: 0x1234_5678_9abc_def0
            }))
        );
        let (c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCI);
        assert_eq!(
            kind(&c, &d, full),
            Ok(Some(DcInit::Initiator { streams: None }))
        );
        let (c, mut d) = create(QPT_DRIVER, DCI_FLAGS);
        d.dci_log_num_concurent = 3;
        d.dci_log_num_errored = 1;
        assert_eq!(
            kind(&c, &d, full),
            Ok(Some(DcInit::Initiator {
                streams: Some(DciStreams {
                    log_num_concurent: 3,
                    log_num_errored: 1
                })
            }))
        );
        // Neither, both, short driver data, a DCT without an SRQ, a DCI with receives.
        let (c, d) = create(QPT_DRIVER, 0);
        assert_eq!(kind(&c, &d, full), Err(libc::EINVAL));
        let (c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCI | mlx5::QP_FLAG_TYPE_DCT);
        assert_eq!(kind(&c, &d, full), Err(libc::EINVAL));
        let (c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCT);
        assert_eq!(kind(&c, &d, full - 4), Err(libc::EINVAL));
        let (mut c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCT);
        c.is_srq = 0;
        assert_eq!(kind(&c, &d, full), Err(libc::EINVAL));
        let (mut c, d) = create(QPT_DRIVER, mlx5::QP_FLAG_TYPE_DCI);
        c.max_recv_sge = 1;
        assert_eq!(kind(&c, &d, full), Err(libc::EINVAL));
        // Another type is not DC.
        let (c, d) = create(2, mlx5::QP_FLAG_TYPE_DCT);
        assert_eq!(kind(&c, &d, full), Ok(None));
    }

    #[test]
    fn the_dci_stream_caps_land_where_the_header_puts_them() {
        let mut caps = [0u8; crate::abi::MLX5_QUERY_DEVICE_CAPS];
        query_device_caps(&mut caps);
        let c = mlx5_sim::dc::DCI_STREAMS_CAPS;
        assert_eq!(
            caps[DCI_STREAMS_CAPS_AT..DCI_STREAMS_CAPS_AT + 2],
            [c.log_num_concurent, c.log_num_errored]
        );
    }

    /// `struct mlx5_ib_modify_qp_resp` and the place of `dci_streams_caps`, as gcc sees the
    /// installed uapi header.
    #[test]
    fn layout_matches_the_uapi_header() {
        let dir = std::env::temp_dir().join(format!("mlx5sim-dc-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/mlx5-abi.h>\n\
                 int main(void) { printf(\"%zu %zu\\n\", sizeof(struct mlx5_ib_modify_qp_resp), \
                 offsetof(struct mlx5_ib_query_device_resp, dci_streams_caps)); return 0; }\n";
        std::fs::write(dir.join("dc.c"), c).unwrap();
        let exe = dir.join("dc");
        let st = std::process::Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(dir.join("dc.c"))
            .status()
            .expect("gcc (Debian: build-essential)");
        assert!(st.success(), "gcc failed on <rdma/mlx5-abi.h>");
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Vec<usize> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(
            v,
            [
                std::mem::size_of::<Mlx5ModifyQpResp>(),
                DCI_STREAMS_CAPS_AT + 8
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
