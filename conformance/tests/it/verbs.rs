//! The libibverbs bindings of `mlx5dv-sys` (module `ibv`) against the installed
//! `<infiniband/verbs.h>`: `sizeof` and every field offset of every mirrored struct (including
//! `struct verbs_context`, whose offsets decide which provider op `verbs_get_ctx_op` reads),
//! and the value of every enum constant, through the C oracle (`oracle/verbs_table.h`).

use core::mem::{offset_of, size_of};

use mlx5_conformance::oracle;
use mlx5dv_sys::ibv;
use mlx5dv_sys::ibv::*;

/// Compare `(oracle name, Rust value)` pairs; report every mismatch at once.
fn check(what: &str, items: &[(&str, u64)]) {
    let table = oracle::entries();
    let mut bad = Vec::new();
    for (name, rust) in items {
        match table.iter().find(|(n, _)| n == name) {
            Some((_, c)) if c == rust => {}
            Some((_, c)) => bad.push(format!("{name}: C {c:#x}, Rust {rust:#x}")),
            None => bad.push(format!("{name}: unknown to the C oracle")),
        }
    }
    assert!(
        bad.is_empty(),
        "{what} mismatches against verbs.h:\n  {}",
        bad.join("\n  ")
    );
}

macro_rules! size {
    ($c:literal, $t:ty) => {
        (concat!("sizeof ", $c), size_of::<$t>() as u64)
    };
}
macro_rules! off {
    ($c:literal, $t:ty, $f:ident) => {
        (
            concat!("offsetof ", $c, ".", stringify!($f)),
            offset_of!($t, $f) as u64,
        )
    };
    ($c:literal . $cf:literal, $t:ty, $f:ident) => {
        (
            concat!("offsetof ", $c, ".", $cf),
            offset_of!($t, $f) as u64,
        )
    };
}
macro_rules! c {
    ($name:literal, $v:expr) => {
        ($name, ($v) as u64)
    };
}

#[test]
fn struct_layouts() {
    check(
        "layout",
        &[
            // struct _ibv_device_ops
            size!("_ibv_device_ops", _ibv_device_ops),
            off!("_ibv_device_ops", _ibv_device_ops, _dummy1),
            off!("_ibv_device_ops", _ibv_device_ops, _dummy2),
            // struct ibv_device
            size!("ibv_device", ibv_device),
            off!("ibv_device", ibv_device, _ops),
            off!("ibv_device", ibv_device, node_type),
            off!("ibv_device", ibv_device, transport_type),
            off!("ibv_device", ibv_device, name),
            off!("ibv_device", ibv_device, dev_name),
            off!("ibv_device", ibv_device, dev_path),
            off!("ibv_device", ibv_device, ibdev_path),
            // struct ibv_device_attr_ex
            size!("ibv_device_attr_ex", ibv_device_attr_ex),
            off!("ibv_device_attr_ex", ibv_device_attr_ex, orig_attr),
            off!("ibv_device_attr_ex", ibv_device_attr_ex, comp_mask),
            off!("ibv_device_attr_ex", ibv_device_attr_ex, odp_caps),
            off!(
                "ibv_device_attr_ex",
                ibv_device_attr_ex,
                completion_timestamp_mask
            ),
            off!("ibv_device_attr_ex", ibv_device_attr_ex, hca_core_clock),
            off!(
                "ibv_device_attr_ex",
                ibv_device_attr_ex,
                device_cap_flags_ex
            ),
            // struct ibv_device_attr
            size!("ibv_device_attr", ibv_device_attr),
            off!("ibv_device_attr", ibv_device_attr, fw_ver),
            off!("ibv_device_attr", ibv_device_attr, node_guid),
            off!("ibv_device_attr", ibv_device_attr, sys_image_guid),
            off!("ibv_device_attr", ibv_device_attr, max_mr_size),
            off!("ibv_device_attr", ibv_device_attr, page_size_cap),
            off!("ibv_device_attr", ibv_device_attr, vendor_id),
            off!("ibv_device_attr", ibv_device_attr, vendor_part_id),
            off!("ibv_device_attr", ibv_device_attr, hw_ver),
            off!("ibv_device_attr", ibv_device_attr, max_qp),
            off!("ibv_device_attr", ibv_device_attr, max_qp_wr),
            off!("ibv_device_attr", ibv_device_attr, device_cap_flags),
            off!("ibv_device_attr", ibv_device_attr, max_sge),
            off!("ibv_device_attr", ibv_device_attr, max_sge_rd),
            off!("ibv_device_attr", ibv_device_attr, max_cq),
            off!("ibv_device_attr", ibv_device_attr, max_cqe),
            off!("ibv_device_attr", ibv_device_attr, max_mr),
            off!("ibv_device_attr", ibv_device_attr, max_pd),
            off!("ibv_device_attr", ibv_device_attr, max_qp_rd_atom),
            off!("ibv_device_attr", ibv_device_attr, max_ee_rd_atom),
            off!("ibv_device_attr", ibv_device_attr, max_res_rd_atom),
            off!("ibv_device_attr", ibv_device_attr, max_qp_init_rd_atom),
            off!("ibv_device_attr", ibv_device_attr, max_ee_init_rd_atom),
            off!("ibv_device_attr", ibv_device_attr, atomic_cap),
            off!("ibv_device_attr", ibv_device_attr, max_ee),
            off!("ibv_device_attr", ibv_device_attr, max_rdd),
            off!("ibv_device_attr", ibv_device_attr, max_mw),
            off!("ibv_device_attr", ibv_device_attr, max_raw_ipv6_qp),
            off!("ibv_device_attr", ibv_device_attr, max_raw_ethy_qp),
            off!("ibv_device_attr", ibv_device_attr, max_mcast_grp),
            off!("ibv_device_attr", ibv_device_attr, max_mcast_qp_attach),
            off!(
                "ibv_device_attr",
                ibv_device_attr,
                max_total_mcast_qp_attach
            ),
            off!("ibv_device_attr", ibv_device_attr, max_ah),
            off!("ibv_device_attr", ibv_device_attr, max_fmr),
            off!("ibv_device_attr", ibv_device_attr, max_map_per_fmr),
            off!("ibv_device_attr", ibv_device_attr, max_srq),
            off!("ibv_device_attr", ibv_device_attr, max_srq_wr),
            off!("ibv_device_attr", ibv_device_attr, max_srq_sge),
            off!("ibv_device_attr", ibv_device_attr, max_pkeys),
            off!("ibv_device_attr", ibv_device_attr, local_ca_ack_delay),
            off!("ibv_device_attr", ibv_device_attr, phys_port_cnt),
            // struct ibv_port_attr
            size!("ibv_port_attr", ibv_port_attr),
            off!("ibv_port_attr", ibv_port_attr, state),
            off!("ibv_port_attr", ibv_port_attr, max_mtu),
            off!("ibv_port_attr", ibv_port_attr, active_mtu),
            off!("ibv_port_attr", ibv_port_attr, gid_tbl_len),
            off!("ibv_port_attr", ibv_port_attr, port_cap_flags),
            off!("ibv_port_attr", ibv_port_attr, max_msg_sz),
            off!("ibv_port_attr", ibv_port_attr, bad_pkey_cntr),
            off!("ibv_port_attr", ibv_port_attr, qkey_viol_cntr),
            off!("ibv_port_attr", ibv_port_attr, pkey_tbl_len),
            off!("ibv_port_attr", ibv_port_attr, lid),
            off!("ibv_port_attr", ibv_port_attr, sm_lid),
            off!("ibv_port_attr", ibv_port_attr, lmc),
            off!("ibv_port_attr", ibv_port_attr, max_vl_num),
            off!("ibv_port_attr", ibv_port_attr, sm_sl),
            off!("ibv_port_attr", ibv_port_attr, subnet_timeout),
            off!("ibv_port_attr", ibv_port_attr, init_type_reply),
            off!("ibv_port_attr", ibv_port_attr, active_width),
            off!("ibv_port_attr", ibv_port_attr, active_speed),
            off!("ibv_port_attr", ibv_port_attr, phys_state),
            off!("ibv_port_attr", ibv_port_attr, link_layer),
            off!("ibv_port_attr", ibv_port_attr, flags),
            off!("ibv_port_attr", ibv_port_attr, port_cap_flags2),
            // struct ibv_async_event
            size!("ibv_async_event", ibv_async_event),
            off!("ibv_async_event", ibv_async_event, element),
            off!("ibv_async_event", ibv_async_event, event_type),
            // struct ibv_wc
            size!("ibv_wc", ibv_wc),
            off!("ibv_wc", ibv_wc, wr_id),
            off!("ibv_wc", ibv_wc, status),
            off!("ibv_wc", ibv_wc, opcode),
            off!("ibv_wc", ibv_wc, vendor_err),
            off!("ibv_wc", ibv_wc, byte_len),
            off!("ibv_wc"."imm_data", ibv_wc, imm_data_invalidated_rkey_union),
            off!("ibv_wc", ibv_wc, qp_num),
            off!("ibv_wc", ibv_wc, src_qp),
            off!("ibv_wc", ibv_wc, wc_flags),
            off!("ibv_wc", ibv_wc, pkey_index),
            off!("ibv_wc", ibv_wc, slid),
            off!("ibv_wc", ibv_wc, sl),
            off!("ibv_wc", ibv_wc, dlid_path_bits),
            // struct ibv_pd
            size!("ibv_pd", ibv_pd),
            off!("ibv_pd", ibv_pd, context),
            off!("ibv_pd", ibv_pd, handle),
            // struct ibv_td_init_attr
            size!("ibv_td_init_attr", ibv_td_init_attr),
            off!("ibv_td_init_attr", ibv_td_init_attr, comp_mask),
            // struct ibv_td
            size!("ibv_td", ibv_td),
            off!("ibv_td", ibv_td, context),
            // struct ibv_xrcd_init_attr
            size!("ibv_xrcd_init_attr", ibv_xrcd_init_attr),
            off!("ibv_xrcd_init_attr", ibv_xrcd_init_attr, comp_mask),
            off!("ibv_xrcd_init_attr", ibv_xrcd_init_attr, fd),
            off!("ibv_xrcd_init_attr", ibv_xrcd_init_attr, oflags),
            // struct ibv_xrcd
            size!("ibv_xrcd", ibv_xrcd),
            off!("ibv_xrcd", ibv_xrcd, context),
            // struct ibv_mr
            size!("ibv_mr", ibv_mr),
            off!("ibv_mr", ibv_mr, context),
            off!("ibv_mr", ibv_mr, pd),
            off!("ibv_mr", ibv_mr, addr),
            off!("ibv_mr", ibv_mr, length),
            off!("ibv_mr", ibv_mr, handle),
            off!("ibv_mr", ibv_mr, lkey),
            off!("ibv_mr", ibv_mr, rkey),
            // struct ibv_mw
            size!("ibv_mw", ibv_mw),
            off!("ibv_mw", ibv_mw, context),
            off!("ibv_mw", ibv_mw, pd),
            off!("ibv_mw", ibv_mw, rkey),
            off!("ibv_mw", ibv_mw, handle),
            off!("ibv_mw"."type", ibv_mw, type_),
            // struct ibv_dm
            size!("ibv_dm", ibv_dm),
            off!("ibv_dm", ibv_dm, context),
            off!("ibv_dm", ibv_dm, memcpy_to_dm),
            off!("ibv_dm", ibv_dm, memcpy_from_dm),
            off!("ibv_dm", ibv_dm, comp_mask),
            off!("ibv_dm", ibv_dm, handle),
            // struct ibv_global_route
            size!("ibv_global_route", ibv_global_route),
            off!("ibv_global_route", ibv_global_route, dgid),
            off!("ibv_global_route", ibv_global_route, flow_label),
            off!("ibv_global_route", ibv_global_route, sgid_index),
            off!("ibv_global_route", ibv_global_route, hop_limit),
            off!("ibv_global_route", ibv_global_route, traffic_class),
            // struct ibv_ah_attr
            size!("ibv_ah_attr", ibv_ah_attr),
            off!("ibv_ah_attr", ibv_ah_attr, grh),
            off!("ibv_ah_attr", ibv_ah_attr, dlid),
            off!("ibv_ah_attr", ibv_ah_attr, sl),
            off!("ibv_ah_attr", ibv_ah_attr, src_path_bits),
            off!("ibv_ah_attr", ibv_ah_attr, static_rate),
            off!("ibv_ah_attr", ibv_ah_attr, is_global),
            off!("ibv_ah_attr", ibv_ah_attr, port_num),
            // struct ibv_ah
            size!("ibv_ah", ibv_ah),
            off!("ibv_ah", ibv_ah, context),
            off!("ibv_ah", ibv_ah, pd),
            off!("ibv_ah", ibv_ah, handle),
            // struct ibv_srq_attr
            size!("ibv_srq_attr", ibv_srq_attr),
            off!("ibv_srq_attr", ibv_srq_attr, max_wr),
            off!("ibv_srq_attr", ibv_srq_attr, max_sge),
            off!("ibv_srq_attr", ibv_srq_attr, srq_limit),
            // struct ibv_srq_init_attr
            size!("ibv_srq_init_attr", ibv_srq_init_attr),
            off!("ibv_srq_init_attr", ibv_srq_init_attr, srq_context),
            off!("ibv_srq_init_attr", ibv_srq_init_attr, attr),
            // struct ibv_tm_cap
            size!("ibv_tm_cap", ibv_tm_cap),
            off!("ibv_tm_cap", ibv_tm_cap, max_num_tags),
            off!("ibv_tm_cap", ibv_tm_cap, max_ops),
            // struct ibv_srq_init_attr_ex
            size!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, srq_context),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, attr),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, comp_mask),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, srq_type),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, pd),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, xrcd),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, cq),
            off!("ibv_srq_init_attr_ex", ibv_srq_init_attr_ex, tm_cap),
            // struct ibv_srq
            size!("ibv_srq", ibv_srq),
            off!("ibv_srq", ibv_srq, context),
            off!("ibv_srq", ibv_srq, srq_context),
            off!("ibv_srq", ibv_srq, pd),
            off!("ibv_srq", ibv_srq, handle),
            off!("ibv_srq", ibv_srq, mutex),
            off!("ibv_srq", ibv_srq, cond),
            off!("ibv_srq", ibv_srq, events_completed),
            // struct ibv_wq
            size!("ibv_wq", ibv_wq),
            off!("ibv_wq", ibv_wq, context),
            off!("ibv_wq", ibv_wq, wq_context),
            off!("ibv_wq", ibv_wq, pd),
            off!("ibv_wq", ibv_wq, cq),
            off!("ibv_wq", ibv_wq, wq_num),
            off!("ibv_wq", ibv_wq, handle),
            off!("ibv_wq", ibv_wq, state),
            off!("ibv_wq", ibv_wq, wq_type),
            off!("ibv_wq", ibv_wq, post_recv),
            off!("ibv_wq", ibv_wq, mutex),
            off!("ibv_wq", ibv_wq, cond),
            off!("ibv_wq", ibv_wq, events_completed),
            off!("ibv_wq", ibv_wq, comp_mask),
            // struct ibv_qp_cap
            size!("ibv_qp_cap", ibv_qp_cap),
            off!("ibv_qp_cap", ibv_qp_cap, max_send_wr),
            off!("ibv_qp_cap", ibv_qp_cap, max_recv_wr),
            off!("ibv_qp_cap", ibv_qp_cap, max_send_sge),
            off!("ibv_qp_cap", ibv_qp_cap, max_recv_sge),
            off!("ibv_qp_cap", ibv_qp_cap, max_inline_data),
            // struct ibv_qp_init_attr
            size!("ibv_qp_init_attr", ibv_qp_init_attr),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, qp_context),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, send_cq),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, recv_cq),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, srq),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, cap),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, qp_type),
            off!("ibv_qp_init_attr", ibv_qp_init_attr, sq_sig_all),
            // struct ibv_rx_hash_conf
            size!("ibv_rx_hash_conf", ibv_rx_hash_conf),
            off!("ibv_rx_hash_conf", ibv_rx_hash_conf, rx_hash_function),
            off!("ibv_rx_hash_conf", ibv_rx_hash_conf, rx_hash_key_len),
            off!("ibv_rx_hash_conf", ibv_rx_hash_conf, rx_hash_key),
            off!("ibv_rx_hash_conf", ibv_rx_hash_conf, rx_hash_fields_mask),
            // struct ibv_qp_init_attr_ex
            size!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, qp_context),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, send_cq),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, recv_cq),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, srq),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, cap),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, qp_type),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, sq_sig_all),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, comp_mask),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, pd),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, xrcd),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, create_flags),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, max_tso_header),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, rwq_ind_tbl),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, rx_hash_conf),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, source_qpn),
            off!("ibv_qp_init_attr_ex", ibv_qp_init_attr_ex, send_ops_flags),
            // struct ibv_qp_open_attr
            size!("ibv_qp_open_attr", ibv_qp_open_attr),
            off!("ibv_qp_open_attr", ibv_qp_open_attr, comp_mask),
            off!("ibv_qp_open_attr", ibv_qp_open_attr, qp_num),
            off!("ibv_qp_open_attr", ibv_qp_open_attr, xrcd),
            off!("ibv_qp_open_attr", ibv_qp_open_attr, qp_context),
            off!("ibv_qp_open_attr", ibv_qp_open_attr, qp_type),
            // struct ibv_qp_attr
            size!("ibv_qp_attr", ibv_qp_attr),
            off!("ibv_qp_attr", ibv_qp_attr, qp_state),
            off!("ibv_qp_attr", ibv_qp_attr, cur_qp_state),
            off!("ibv_qp_attr", ibv_qp_attr, path_mtu),
            off!("ibv_qp_attr", ibv_qp_attr, path_mig_state),
            off!("ibv_qp_attr", ibv_qp_attr, qkey),
            off!("ibv_qp_attr", ibv_qp_attr, rq_psn),
            off!("ibv_qp_attr", ibv_qp_attr, sq_psn),
            off!("ibv_qp_attr", ibv_qp_attr, dest_qp_num),
            off!("ibv_qp_attr", ibv_qp_attr, qp_access_flags),
            off!("ibv_qp_attr", ibv_qp_attr, cap),
            off!("ibv_qp_attr", ibv_qp_attr, ah_attr),
            off!("ibv_qp_attr", ibv_qp_attr, alt_ah_attr),
            off!("ibv_qp_attr", ibv_qp_attr, pkey_index),
            off!("ibv_qp_attr", ibv_qp_attr, alt_pkey_index),
            off!("ibv_qp_attr", ibv_qp_attr, en_sqd_async_notify),
            off!("ibv_qp_attr", ibv_qp_attr, sq_draining),
            off!("ibv_qp_attr", ibv_qp_attr, max_rd_atomic),
            off!("ibv_qp_attr", ibv_qp_attr, max_dest_rd_atomic),
            off!("ibv_qp_attr", ibv_qp_attr, min_rnr_timer),
            off!("ibv_qp_attr", ibv_qp_attr, port_num),
            off!("ibv_qp_attr", ibv_qp_attr, timeout),
            off!("ibv_qp_attr", ibv_qp_attr, retry_cnt),
            off!("ibv_qp_attr", ibv_qp_attr, rnr_retry),
            off!("ibv_qp_attr", ibv_qp_attr, alt_port_num),
            off!("ibv_qp_attr", ibv_qp_attr, alt_timeout),
            off!("ibv_qp_attr", ibv_qp_attr, rate_limit),
            // struct ibv_sge
            size!("ibv_sge", ibv_sge),
            off!("ibv_sge", ibv_sge, addr),
            off!("ibv_sge", ibv_sge, length),
            off!("ibv_sge", ibv_sge, lkey),
            // struct ibv_send_wr
            size!("ibv_send_wr", ibv_send_wr),
            off!("ibv_send_wr", ibv_send_wr, wr_id),
            off!("ibv_send_wr", ibv_send_wr, next),
            off!("ibv_send_wr", ibv_send_wr, sg_list),
            off!("ibv_send_wr", ibv_send_wr, num_sge),
            off!("ibv_send_wr", ibv_send_wr, opcode),
            off!("ibv_send_wr", ibv_send_wr, send_flags),
            off!("ibv_send_wr"."imm_data", ibv_send_wr, imm_data_invalidated_rkey_union),
            off!("ibv_send_wr", ibv_send_wr, wr),
            off!("ibv_send_wr", ibv_send_wr, qp_type),
            off!("ibv_send_wr"."bind_mw", ibv_send_wr, bind_mw_tso_union),
            // struct ibv_recv_wr
            size!("ibv_recv_wr", ibv_recv_wr),
            off!("ibv_recv_wr", ibv_recv_wr, wr_id),
            off!("ibv_recv_wr", ibv_recv_wr, next),
            off!("ibv_recv_wr", ibv_recv_wr, sg_list),
            off!("ibv_recv_wr", ibv_recv_wr, num_sge),
            // struct ibv_qp
            size!("ibv_qp", ibv_qp),
            off!("ibv_qp", ibv_qp, context),
            off!("ibv_qp", ibv_qp, qp_context),
            off!("ibv_qp", ibv_qp, pd),
            off!("ibv_qp", ibv_qp, send_cq),
            off!("ibv_qp", ibv_qp, recv_cq),
            off!("ibv_qp", ibv_qp, srq),
            off!("ibv_qp", ibv_qp, handle),
            off!("ibv_qp", ibv_qp, qp_num),
            off!("ibv_qp", ibv_qp, state),
            off!("ibv_qp", ibv_qp, qp_type),
            off!("ibv_qp", ibv_qp, mutex),
            off!("ibv_qp", ibv_qp, cond),
            off!("ibv_qp", ibv_qp, events_completed),
            // struct ibv_comp_channel
            size!("ibv_comp_channel", ibv_comp_channel),
            off!("ibv_comp_channel", ibv_comp_channel, context),
            off!("ibv_comp_channel", ibv_comp_channel, fd),
            off!("ibv_comp_channel", ibv_comp_channel, refcnt),
            // struct ibv_cq
            size!("ibv_cq", ibv_cq),
            off!("ibv_cq", ibv_cq, context),
            off!("ibv_cq", ibv_cq, channel),
            off!("ibv_cq", ibv_cq, cq_context),
            off!("ibv_cq", ibv_cq, handle),
            off!("ibv_cq", ibv_cq, cqe),
            off!("ibv_cq", ibv_cq, mutex),
            off!("ibv_cq", ibv_cq, cond),
            off!("ibv_cq", ibv_cq, comp_events_completed),
            off!("ibv_cq", ibv_cq, async_events_completed),
            // struct ibv_cq_ex
            size!("ibv_cq_ex", ibv_cq_ex),
            off!("ibv_cq_ex", ibv_cq_ex, context),
            off!("ibv_cq_ex", ibv_cq_ex, channel),
            off!("ibv_cq_ex", ibv_cq_ex, cq_context),
            off!("ibv_cq_ex", ibv_cq_ex, handle),
            off!("ibv_cq_ex", ibv_cq_ex, cqe),
            off!("ibv_cq_ex", ibv_cq_ex, mutex),
            off!("ibv_cq_ex", ibv_cq_ex, cond),
            off!("ibv_cq_ex", ibv_cq_ex, comp_events_completed),
            off!("ibv_cq_ex", ibv_cq_ex, async_events_completed),
            off!("ibv_cq_ex", ibv_cq_ex, comp_mask),
            off!("ibv_cq_ex", ibv_cq_ex, status),
            off!("ibv_cq_ex", ibv_cq_ex, wr_id),
            off!("ibv_cq_ex", ibv_cq_ex, start_poll),
            off!("ibv_cq_ex", ibv_cq_ex, next_poll),
            off!("ibv_cq_ex", ibv_cq_ex, end_poll),
            off!("ibv_cq_ex", ibv_cq_ex, read_opcode),
            off!("ibv_cq_ex", ibv_cq_ex, read_vendor_err),
            off!("ibv_cq_ex", ibv_cq_ex, read_byte_len),
            off!("ibv_cq_ex", ibv_cq_ex, read_imm_data),
            off!("ibv_cq_ex", ibv_cq_ex, read_qp_num),
            off!("ibv_cq_ex", ibv_cq_ex, read_src_qp),
            off!("ibv_cq_ex", ibv_cq_ex, read_wc_flags),
            off!("ibv_cq_ex", ibv_cq_ex, read_slid),
            off!("ibv_cq_ex", ibv_cq_ex, read_sl),
            off!("ibv_cq_ex", ibv_cq_ex, read_dlid_path_bits),
            off!("ibv_cq_ex", ibv_cq_ex, read_completion_ts),
            off!("ibv_cq_ex", ibv_cq_ex, read_cvlan),
            off!("ibv_cq_ex", ibv_cq_ex, read_flow_tag),
            off!("ibv_cq_ex", ibv_cq_ex, read_tm_info),
            off!("ibv_cq_ex", ibv_cq_ex, read_completion_wallclock_ns),
            // struct ibv_cq_init_attr_ex
            size!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, cqe),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, cq_context),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, channel),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, comp_vector),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, wc_flags),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, comp_mask),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, flags),
            off!("ibv_cq_init_attr_ex", ibv_cq_init_attr_ex, parent_domain),
            // struct ibv_parent_domain_init_attr
            size!("ibv_parent_domain_init_attr", ibv_parent_domain_init_attr),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                pd
            ),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                td
            ),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                comp_mask
            ),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                alloc
            ),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                free
            ),
            off!(
                "ibv_parent_domain_init_attr",
                ibv_parent_domain_init_attr,
                pd_context
            ),
            // struct ibv_values_ex
            size!("ibv_values_ex", ibv_values_ex),
            off!("ibv_values_ex", ibv_values_ex, comp_mask),
            off!("ibv_values_ex", ibv_values_ex, raw_clock),
            // struct ibv_mw_bind_info
            size!("ibv_mw_bind_info", ibv_mw_bind_info),
            off!("ibv_mw_bind_info", ibv_mw_bind_info, mr),
            off!("ibv_mw_bind_info", ibv_mw_bind_info, addr),
            off!("ibv_mw_bind_info", ibv_mw_bind_info, length),
            off!("ibv_mw_bind_info", ibv_mw_bind_info, mw_access_flags),
            // struct ibv_context_ops
            size!("ibv_context_ops", ibv_context_ops),
            off!("ibv_context_ops", ibv_context_ops, _compat_query_device),
            off!("ibv_context_ops", ibv_context_ops, _compat_query_port),
            off!("ibv_context_ops", ibv_context_ops, _compat_alloc_pd),
            off!("ibv_context_ops", ibv_context_ops, _compat_dealloc_pd),
            off!("ibv_context_ops", ibv_context_ops, _compat_reg_mr),
            off!("ibv_context_ops", ibv_context_ops, _compat_rereg_mr),
            off!("ibv_context_ops", ibv_context_ops, _compat_dereg_mr),
            off!("ibv_context_ops", ibv_context_ops, alloc_mw),
            off!("ibv_context_ops", ibv_context_ops, bind_mw),
            off!("ibv_context_ops", ibv_context_ops, dealloc_mw),
            off!("ibv_context_ops", ibv_context_ops, _compat_create_cq),
            off!("ibv_context_ops", ibv_context_ops, poll_cq),
            off!("ibv_context_ops", ibv_context_ops, req_notify_cq),
            off!("ibv_context_ops", ibv_context_ops, _compat_cq_event),
            off!("ibv_context_ops", ibv_context_ops, _compat_resize_cq),
            off!("ibv_context_ops", ibv_context_ops, _compat_destroy_cq),
            off!("ibv_context_ops", ibv_context_ops, _compat_create_srq),
            off!("ibv_context_ops", ibv_context_ops, _compat_modify_srq),
            off!("ibv_context_ops", ibv_context_ops, _compat_query_srq),
            off!("ibv_context_ops", ibv_context_ops, _compat_destroy_srq),
            off!("ibv_context_ops", ibv_context_ops, post_srq_recv),
            off!("ibv_context_ops", ibv_context_ops, _compat_create_qp),
            off!("ibv_context_ops", ibv_context_ops, _compat_query_qp),
            off!("ibv_context_ops", ibv_context_ops, _compat_modify_qp),
            off!("ibv_context_ops", ibv_context_ops, _compat_destroy_qp),
            off!("ibv_context_ops", ibv_context_ops, post_send),
            off!("ibv_context_ops", ibv_context_ops, post_recv),
            off!("ibv_context_ops", ibv_context_ops, _compat_create_ah),
            off!("ibv_context_ops", ibv_context_ops, _compat_destroy_ah),
            off!("ibv_context_ops", ibv_context_ops, _compat_attach_mcast),
            off!("ibv_context_ops", ibv_context_ops, _compat_detach_mcast),
            off!("ibv_context_ops", ibv_context_ops, _compat_async_event),
            // struct ibv_context
            size!("ibv_context", ibv_context),
            off!("ibv_context", ibv_context, device),
            off!("ibv_context", ibv_context, ops),
            off!("ibv_context", ibv_context, cmd_fd),
            off!("ibv_context", ibv_context, async_fd),
            off!("ibv_context", ibv_context, num_comp_vectors),
            off!("ibv_context", ibv_context, mutex),
            off!("ibv_context", ibv_context, abi_compat),
            // struct verbs_context
            size!("verbs_context", verbs_context),
            off!("verbs_context", verbs_context, query_port),
            off!("verbs_context", verbs_context, advise_mr),
            off!("verbs_context", verbs_context, alloc_null_mr),
            off!("verbs_context", verbs_context, read_counters),
            off!("verbs_context", verbs_context, attach_counters_point_flow),
            off!("verbs_context", verbs_context, create_counters),
            off!("verbs_context", verbs_context, destroy_counters),
            off!("verbs_context", verbs_context, reg_dm_mr),
            off!("verbs_context", verbs_context, alloc_dm),
            off!("verbs_context", verbs_context, free_dm),
            off!("verbs_context", verbs_context, modify_flow_action_esp),
            off!("verbs_context", verbs_context, destroy_flow_action),
            off!("verbs_context", verbs_context, create_flow_action_esp),
            off!("verbs_context", verbs_context, modify_qp_rate_limit),
            off!("verbs_context", verbs_context, alloc_parent_domain),
            off!("verbs_context", verbs_context, dealloc_td),
            off!("verbs_context", verbs_context, alloc_td),
            off!("verbs_context", verbs_context, modify_cq),
            off!("verbs_context", verbs_context, post_srq_ops),
            off!("verbs_context", verbs_context, destroy_rwq_ind_table),
            off!("verbs_context", verbs_context, create_rwq_ind_table),
            off!("verbs_context", verbs_context, destroy_wq),
            off!("verbs_context", verbs_context, modify_wq),
            off!("verbs_context", verbs_context, create_wq),
            off!("verbs_context", verbs_context, query_rt_values),
            off!("verbs_context", verbs_context, create_cq_ex),
            off!("verbs_context"."priv", verbs_context, priv_),
            off!("verbs_context", verbs_context, query_device_ex),
            off!("verbs_context", verbs_context, ibv_destroy_flow),
            off!("verbs_context", verbs_context, ABI_placeholder2),
            off!("verbs_context", verbs_context, ibv_create_flow),
            off!("verbs_context", verbs_context, ABI_placeholder1),
            off!("verbs_context", verbs_context, open_qp),
            off!("verbs_context", verbs_context, create_qp_ex),
            off!("verbs_context", verbs_context, get_srq_num),
            off!("verbs_context", verbs_context, create_srq_ex),
            off!("verbs_context", verbs_context, open_xrcd),
            off!("verbs_context", verbs_context, close_xrcd),
            off!("verbs_context", verbs_context, _ABI_placeholder3),
            off!("verbs_context", verbs_context, sz),
            off!("verbs_context", verbs_context, context),
        ],
    );
}

#[test]
fn unions_and_anonymous_members() {
    let wr = offset_of!(ibv_send_wr, wr) as u64;
    let bind = offset_of!(ibv_send_wr, bind_mw_tso_union) as u64;
    let off = |o: usize| o as u64;
    check(
        "layout",
        &[
            size!("ibv_gid", ibv_gid),
            ("offsetof ibv_gid.raw", off(offset_of!(ibv_gid, raw))),
            ("offsetof ibv_gid.global", off(offset_of!(ibv_gid, global))),
            (
                "offsetof ibv_gid.global.subnet_prefix",
                off(offset_of!(ibv_gid_global_t, subnet_prefix)),
            ),
            (
                "offsetof ibv_gid.global.interface_id",
                off(offset_of!(ibv_gid_global_t, interface_id)),
            ),
            size!("ibv_async_event.element", ibv_async_event_element_t),
            (
                "offsetof ibv_async_event.element.port_num",
                off(offset_of!(ibv_async_event, element)),
            ),
            size!("ibv_send_wr.wr", wr_t),
            (
                "offsetof ibv_send_wr.invalidate_rkey",
                off(offset_of!(ibv_send_wr, imm_data_invalidated_rkey_union)),
            ),
            (
                "offsetof ibv_send_wr.wr.rdma.remote_addr",
                wr + off(offset_of!(rdma_t, remote_addr)),
            ),
            (
                "offsetof ibv_send_wr.wr.rdma.rkey",
                wr + off(offset_of!(rdma_t, rkey)),
            ),
            (
                "offsetof ibv_send_wr.wr.atomic.remote_addr",
                wr + off(offset_of!(atomic_t, remote_addr)),
            ),
            (
                "offsetof ibv_send_wr.wr.atomic.compare_add",
                wr + off(offset_of!(atomic_t, compare_add)),
            ),
            (
                "offsetof ibv_send_wr.wr.atomic.swap",
                wr + off(offset_of!(atomic_t, swap)),
            ),
            (
                "offsetof ibv_send_wr.wr.atomic.rkey",
                wr + off(offset_of!(atomic_t, rkey)),
            ),
            (
                "offsetof ibv_send_wr.wr.ud.ah",
                wr + off(offset_of!(ud_t, ah)),
            ),
            (
                "offsetof ibv_send_wr.wr.ud.remote_qpn",
                wr + off(offset_of!(ud_t, remote_qpn)),
            ),
            (
                "offsetof ibv_send_wr.wr.ud.remote_qkey",
                wr + off(offset_of!(ud_t, remote_qkey)),
            ),
            size!("ibv_send_wr.qp_type", qp_type_t),
            (
                "offsetof ibv_send_wr.qp_type.xrc.remote_srqn",
                off(offset_of!(ibv_send_wr, qp_type) + offset_of!(xrc_t, remote_srqn)),
            ),
            size!("ibv_send_wr.bind_mw", bind_mw_t),
            size!("ibv_send_wr.tso", tso_t),
            (
                "offsetof ibv_send_wr.bind_mw.mw",
                bind + off(offset_of!(bind_mw_t, mw)),
            ),
            (
                "offsetof ibv_send_wr.bind_mw.rkey",
                bind + off(offset_of!(bind_mw_t, rkey)),
            ),
            (
                "offsetof ibv_send_wr.bind_mw.bind_info",
                bind + off(offset_of!(bind_mw_t, bind_info)),
            ),
            (
                "offsetof ibv_send_wr.tso.hdr",
                bind + off(offset_of!(tso_t, hdr)),
            ),
            (
                "offsetof ibv_send_wr.tso.hdr_sz",
                bind + off(offset_of!(tso_t, hdr_sz)),
            ),
            (
                "offsetof ibv_send_wr.tso.mss",
                bind + off(offset_of!(tso_t, mss)),
            ),
            (
                "offsetof ibv_wc.invalidated_rkey",
                off(offset_of!(ibv_wc, imm_data_invalidated_rkey_union)),
            ),
        ],
    );
    // The unions are as large as the header's.
    assert_eq!(size_of::<imm_data_invalidated_rkey_union_t>(), 4);
    assert_eq!(size_of::<bind_mw_tso_union_t>(), size_of::<bind_mw_t>());
}

#[test]
fn enum_values_and_constants() {
    check(
        "constant",
        &[
            c!("IBV_NODE_UNKNOWN", ibv::ibv_node_type::IBV_NODE_UNKNOWN),
            c!("IBV_NODE_CA", ibv::ibv_node_type::IBV_NODE_CA),
            c!("IBV_NODE_SWITCH", ibv::ibv_node_type::IBV_NODE_SWITCH),
            c!("IBV_NODE_ROUTER", ibv::ibv_node_type::IBV_NODE_ROUTER),
            c!("IBV_NODE_RNIC", ibv::ibv_node_type::IBV_NODE_RNIC),
            c!("IBV_NODE_USNIC", ibv::ibv_node_type::IBV_NODE_USNIC),
            c!("IBV_NODE_USNIC_UDP", ibv::ibv_node_type::IBV_NODE_USNIC_UDP),
            c!(
                "IBV_NODE_UNSPECIFIED",
                ibv::ibv_node_type::IBV_NODE_UNSPECIFIED
            ),
            c!(
                "IBV_DEVICE_XRC",
                ibv::ibv_device_cap_flags::IBV_DEVICE_XRC.0
            ),
            c!(
                "IBV_TRANSPORT_UNKNOWN",
                ibv::ibv_transport_type::IBV_TRANSPORT_UNKNOWN
            ),
            c!(
                "IBV_TRANSPORT_IB",
                ibv::ibv_transport_type::IBV_TRANSPORT_IB
            ),
            c!(
                "IBV_TRANSPORT_IWARP",
                ibv::ibv_transport_type::IBV_TRANSPORT_IWARP
            ),
            c!(
                "IBV_TRANSPORT_USNIC",
                ibv::ibv_transport_type::IBV_TRANSPORT_USNIC
            ),
            c!(
                "IBV_TRANSPORT_USNIC_UDP",
                ibv::ibv_transport_type::IBV_TRANSPORT_USNIC_UDP
            ),
            c!(
                "IBV_TRANSPORT_UNSPECIFIED",
                ibv::ibv_transport_type::IBV_TRANSPORT_UNSPECIFIED
            ),
            c!("IBV_ATOMIC_NONE", ibv::ibv_atomic_cap::IBV_ATOMIC_NONE),
            c!("IBV_ATOMIC_HCA", ibv::ibv_atomic_cap::IBV_ATOMIC_HCA),
            c!("IBV_ATOMIC_GLOB", ibv::ibv_atomic_cap::IBV_ATOMIC_GLOB),
            c!("IBV_MTU_256", ibv::ibv_mtu::IBV_MTU_256),
            c!("IBV_MTU_512", ibv::ibv_mtu::IBV_MTU_512),
            c!("IBV_MTU_1024", ibv::ibv_mtu::IBV_MTU_1024),
            c!("IBV_MTU_2048", ibv::ibv_mtu::IBV_MTU_2048),
            c!("IBV_MTU_4096", ibv::ibv_mtu::IBV_MTU_4096),
            c!("IBV_PORT_NOP", ibv::ibv_port_state::IBV_PORT_NOP),
            c!("IBV_PORT_DOWN", ibv::ibv_port_state::IBV_PORT_DOWN),
            c!("IBV_PORT_INIT", ibv::ibv_port_state::IBV_PORT_INIT),
            c!("IBV_PORT_ARMED", ibv::ibv_port_state::IBV_PORT_ARMED),
            c!("IBV_PORT_ACTIVE", ibv::ibv_port_state::IBV_PORT_ACTIVE),
            c!(
                "IBV_PORT_ACTIVE_DEFER",
                ibv::ibv_port_state::IBV_PORT_ACTIVE_DEFER
            ),
            c!("IBV_EVENT_CQ_ERR", ibv::ibv_event_type::IBV_EVENT_CQ_ERR),
            c!(
                "IBV_EVENT_QP_FATAL",
                ibv::ibv_event_type::IBV_EVENT_QP_FATAL
            ),
            c!(
                "IBV_EVENT_QP_REQ_ERR",
                ibv::ibv_event_type::IBV_EVENT_QP_REQ_ERR
            ),
            c!(
                "IBV_EVENT_QP_ACCESS_ERR",
                ibv::ibv_event_type::IBV_EVENT_QP_ACCESS_ERR
            ),
            c!(
                "IBV_EVENT_COMM_EST",
                ibv::ibv_event_type::IBV_EVENT_COMM_EST
            ),
            c!(
                "IBV_EVENT_SQ_DRAINED",
                ibv::ibv_event_type::IBV_EVENT_SQ_DRAINED
            ),
            c!(
                "IBV_EVENT_PATH_MIG",
                ibv::ibv_event_type::IBV_EVENT_PATH_MIG
            ),
            c!(
                "IBV_EVENT_PATH_MIG_ERR",
                ibv::ibv_event_type::IBV_EVENT_PATH_MIG_ERR
            ),
            c!(
                "IBV_EVENT_DEVICE_FATAL",
                ibv::ibv_event_type::IBV_EVENT_DEVICE_FATAL
            ),
            c!(
                "IBV_EVENT_PORT_ACTIVE",
                ibv::ibv_event_type::IBV_EVENT_PORT_ACTIVE
            ),
            c!(
                "IBV_EVENT_PORT_ERR",
                ibv::ibv_event_type::IBV_EVENT_PORT_ERR
            ),
            c!(
                "IBV_EVENT_LID_CHANGE",
                ibv::ibv_event_type::IBV_EVENT_LID_CHANGE
            ),
            c!(
                "IBV_EVENT_PKEY_CHANGE",
                ibv::ibv_event_type::IBV_EVENT_PKEY_CHANGE
            ),
            c!(
                "IBV_EVENT_SM_CHANGE",
                ibv::ibv_event_type::IBV_EVENT_SM_CHANGE
            ),
            c!("IBV_EVENT_SRQ_ERR", ibv::ibv_event_type::IBV_EVENT_SRQ_ERR),
            c!(
                "IBV_EVENT_SRQ_LIMIT_REACHED",
                ibv::ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED
            ),
            c!(
                "IBV_EVENT_QP_LAST_WQE_REACHED",
                ibv::ibv_event_type::IBV_EVENT_QP_LAST_WQE_REACHED
            ),
            c!(
                "IBV_EVENT_CLIENT_REREGISTER",
                ibv::ibv_event_type::IBV_EVENT_CLIENT_REREGISTER
            ),
            c!(
                "IBV_EVENT_GID_CHANGE",
                ibv::ibv_event_type::IBV_EVENT_GID_CHANGE
            ),
            c!(
                "IBV_EVENT_WQ_FATAL",
                ibv::ibv_event_type::IBV_EVENT_WQ_FATAL
            ),
            c!("IBV_WC_SUCCESS", ibv::ibv_wc_status::IBV_WC_SUCCESS),
            c!("IBV_WC_LOC_LEN_ERR", ibv::ibv_wc_status::IBV_WC_LOC_LEN_ERR),
            c!(
                "IBV_WC_LOC_QP_OP_ERR",
                ibv::ibv_wc_status::IBV_WC_LOC_QP_OP_ERR
            ),
            c!(
                "IBV_WC_LOC_EEC_OP_ERR",
                ibv::ibv_wc_status::IBV_WC_LOC_EEC_OP_ERR
            ),
            c!(
                "IBV_WC_LOC_PROT_ERR",
                ibv::ibv_wc_status::IBV_WC_LOC_PROT_ERR
            ),
            c!(
                "IBV_WC_WR_FLUSH_ERR",
                ibv::ibv_wc_status::IBV_WC_WR_FLUSH_ERR
            ),
            c!("IBV_WC_MW_BIND_ERR", ibv::ibv_wc_status::IBV_WC_MW_BIND_ERR),
            c!(
                "IBV_WC_BAD_RESP_ERR",
                ibv::ibv_wc_status::IBV_WC_BAD_RESP_ERR
            ),
            c!(
                "IBV_WC_LOC_ACCESS_ERR",
                ibv::ibv_wc_status::IBV_WC_LOC_ACCESS_ERR
            ),
            c!(
                "IBV_WC_REM_INV_REQ_ERR",
                ibv::ibv_wc_status::IBV_WC_REM_INV_REQ_ERR
            ),
            c!(
                "IBV_WC_REM_ACCESS_ERR",
                ibv::ibv_wc_status::IBV_WC_REM_ACCESS_ERR
            ),
            c!("IBV_WC_REM_OP_ERR", ibv::ibv_wc_status::IBV_WC_REM_OP_ERR),
            c!(
                "IBV_WC_RETRY_EXC_ERR",
                ibv::ibv_wc_status::IBV_WC_RETRY_EXC_ERR
            ),
            c!(
                "IBV_WC_RNR_RETRY_EXC_ERR",
                ibv::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR
            ),
            c!(
                "IBV_WC_LOC_RDD_VIOL_ERR",
                ibv::ibv_wc_status::IBV_WC_LOC_RDD_VIOL_ERR
            ),
            c!(
                "IBV_WC_REM_INV_RD_REQ_ERR",
                ibv::ibv_wc_status::IBV_WC_REM_INV_RD_REQ_ERR
            ),
            c!(
                "IBV_WC_REM_ABORT_ERR",
                ibv::ibv_wc_status::IBV_WC_REM_ABORT_ERR
            ),
            c!(
                "IBV_WC_INV_EECN_ERR",
                ibv::ibv_wc_status::IBV_WC_INV_EECN_ERR
            ),
            c!(
                "IBV_WC_INV_EEC_STATE_ERR",
                ibv::ibv_wc_status::IBV_WC_INV_EEC_STATE_ERR
            ),
            c!("IBV_WC_FATAL_ERR", ibv::ibv_wc_status::IBV_WC_FATAL_ERR),
            c!(
                "IBV_WC_RESP_TIMEOUT_ERR",
                ibv::ibv_wc_status::IBV_WC_RESP_TIMEOUT_ERR
            ),
            c!("IBV_WC_GENERAL_ERR", ibv::ibv_wc_status::IBV_WC_GENERAL_ERR),
            c!("IBV_WC_TM_ERR", ibv::ibv_wc_status::IBV_WC_TM_ERR),
            c!(
                "IBV_WC_TM_RNDV_INCOMPLETE",
                ibv::ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE
            ),
            c!("IBV_WC_SEND", ibv::ibv_wc_opcode::IBV_WC_SEND),
            c!("IBV_WC_RDMA_WRITE", ibv::ibv_wc_opcode::IBV_WC_RDMA_WRITE),
            c!("IBV_WC_RDMA_READ", ibv::ibv_wc_opcode::IBV_WC_RDMA_READ),
            c!("IBV_WC_COMP_SWAP", ibv::ibv_wc_opcode::IBV_WC_COMP_SWAP),
            c!("IBV_WC_FETCH_ADD", ibv::ibv_wc_opcode::IBV_WC_FETCH_ADD),
            c!("IBV_WC_BIND_MW", ibv::ibv_wc_opcode::IBV_WC_BIND_MW),
            c!("IBV_WC_LOCAL_INV", ibv::ibv_wc_opcode::IBV_WC_LOCAL_INV),
            c!("IBV_WC_TSO", ibv::ibv_wc_opcode::IBV_WC_TSO),
            c!(
                "IBV_WC_ATOMIC_WRITE",
                ibv::ibv_wc_opcode::IBV_WC_ATOMIC_WRITE
            ),
            c!("IBV_WC_RECV", ibv::ibv_wc_opcode::IBV_WC_RECV),
            c!(
                "IBV_WC_RECV_RDMA_WITH_IMM",
                ibv::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM
            ),
            c!("IBV_WC_TM_ADD", ibv::ibv_wc_opcode::IBV_WC_TM_ADD),
            c!("IBV_WC_TM_DEL", ibv::ibv_wc_opcode::IBV_WC_TM_DEL),
            c!("IBV_WC_TM_SYNC", ibv::ibv_wc_opcode::IBV_WC_TM_SYNC),
            c!("IBV_WC_TM_RECV", ibv::ibv_wc_opcode::IBV_WC_TM_RECV),
            c!("IBV_WC_TM_NO_TAG", ibv::ibv_wc_opcode::IBV_WC_TM_NO_TAG),
            c!("IBV_WC_DRIVER1", ibv::ibv_wc_opcode::IBV_WC_DRIVER1),
            c!("IBV_WC_DRIVER2", ibv::ibv_wc_opcode::IBV_WC_DRIVER2),
            c!("IBV_WC_DRIVER3", ibv::ibv_wc_opcode::IBV_WC_DRIVER3),
            c!(
                "IBV_WC_EX_WITH_BYTE_LEN",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_BYTE_LEN.0
            ),
            c!(
                "IBV_WC_EX_WITH_IMM",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_IMM.0
            ),
            c!(
                "IBV_WC_EX_WITH_QP_NUM",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_QP_NUM.0
            ),
            c!(
                "IBV_WC_EX_WITH_SRC_QP",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SRC_QP.0
            ),
            c!(
                "IBV_WC_EX_WITH_SLID",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SLID.0
            ),
            c!(
                "IBV_WC_EX_WITH_SL",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_SL.0
            ),
            c!(
                "IBV_WC_EX_WITH_DLID_PATH_BITS",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_DLID_PATH_BITS.0
            ),
            c!(
                "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.0
            ),
            c!(
                "IBV_WC_EX_WITH_CVLAN",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_CVLAN.0
            ),
            c!(
                "IBV_WC_EX_WITH_FLOW_TAG",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_FLOW_TAG.0
            ),
            c!(
                "IBV_WC_EX_WITH_TM_INFO",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_TM_INFO.0
            ),
            c!(
                "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK",
                ibv::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK.0
            ),
            c!("IBV_WC_GRH", ibv::ibv_wc_flags::IBV_WC_GRH.0),
            c!("IBV_WC_WITH_IMM", ibv::ibv_wc_flags::IBV_WC_WITH_IMM.0),
            c!("IBV_WC_IP_CSUM_OK", ibv::ibv_wc_flags::IBV_WC_IP_CSUM_OK.0),
            c!("IBV_WC_WITH_INV", ibv::ibv_wc_flags::IBV_WC_WITH_INV.0),
            c!(
                "IBV_WC_TM_SYNC_REQ",
                ibv::ibv_wc_flags::IBV_WC_TM_SYNC_REQ.0
            ),
            c!("IBV_WC_TM_MATCH", ibv::ibv_wc_flags::IBV_WC_TM_MATCH.0),
            c!(
                "IBV_WC_TM_DATA_VALID",
                ibv::ibv_wc_flags::IBV_WC_TM_DATA_VALID.0
            ),
            c!(
                "IBV_ACCESS_LOCAL_WRITE",
                ibv::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            ),
            c!(
                "IBV_ACCESS_REMOTE_WRITE",
                ibv::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            ),
            c!(
                "IBV_ACCESS_REMOTE_READ",
                ibv::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            ),
            c!(
                "IBV_ACCESS_REMOTE_ATOMIC",
                ibv::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
            ),
            c!(
                "IBV_ACCESS_MW_BIND",
                ibv::ibv_access_flags::IBV_ACCESS_MW_BIND.0
            ),
            c!(
                "IBV_ACCESS_ZERO_BASED",
                ibv::ibv_access_flags::IBV_ACCESS_ZERO_BASED.0
            ),
            c!(
                "IBV_ACCESS_ON_DEMAND",
                ibv::ibv_access_flags::IBV_ACCESS_ON_DEMAND.0
            ),
            c!(
                "IBV_ACCESS_HUGETLB",
                ibv::ibv_access_flags::IBV_ACCESS_HUGETLB.0
            ),
            c!(
                "IBV_ACCESS_RELAXED_ORDERING",
                ibv::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0
            ),
            c!(
                "IBV_XRCD_INIT_ATTR_FD",
                ibv::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
            ),
            c!(
                "IBV_XRCD_INIT_ATTR_OFLAGS",
                ibv::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0
            ),
            c!(
                "IBV_XRCD_INIT_ATTR_RESERVED",
                ibv::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_RESERVED.0
            ),
            c!("IBV_SRQ_MAX_WR", ibv::ibv_srq_attr_mask::IBV_SRQ_MAX_WR.0),
            c!("IBV_SRQ_LIMIT", ibv::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0),
            c!("IBV_SRQT_BASIC", ibv::ibv_srq_type::IBV_SRQT_BASIC),
            c!("IBV_SRQT_XRC", ibv::ibv_srq_type::IBV_SRQT_XRC),
            c!("IBV_SRQT_TM", ibv::ibv_srq_type::IBV_SRQT_TM),
            c!(
                "IBV_SRQ_INIT_ATTR_TYPE",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TYPE.0
            ),
            c!(
                "IBV_SRQ_INIT_ATTR_PD",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_PD.0
            ),
            c!(
                "IBV_SRQ_INIT_ATTR_XRCD",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_XRCD.0
            ),
            c!(
                "IBV_SRQ_INIT_ATTR_CQ",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_CQ.0
            ),
            c!(
                "IBV_SRQ_INIT_ATTR_TM",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_TM.0
            ),
            c!(
                "IBV_SRQ_INIT_ATTR_RESERVED",
                ibv::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_RESERVED.0
            ),
            c!("IBV_WQS_RESET", ibv::ibv_wq_state::IBV_WQS_RESET),
            c!("IBV_WQS_RDY", ibv::ibv_wq_state::IBV_WQS_RDY),
            c!("IBV_WQS_ERR", ibv::ibv_wq_state::IBV_WQS_ERR),
            c!("IBV_WQS_UNKNOWN", ibv::ibv_wq_state::IBV_WQS_UNKNOWN),
            c!("IBV_WQT_RQ", ibv::ibv_wq_type::IBV_WQT_RQ),
            c!("IBV_QPT_RC", ibv::ibv_qp_type::IBV_QPT_RC),
            c!("IBV_QPT_UC", ibv::ibv_qp_type::IBV_QPT_UC),
            c!("IBV_QPT_UD", ibv::ibv_qp_type::IBV_QPT_UD),
            c!("IBV_QPT_RAW_PACKET", ibv::ibv_qp_type::IBV_QPT_RAW_PACKET),
            c!("IBV_QPT_XRC_SEND", ibv::ibv_qp_type::IBV_QPT_XRC_SEND),
            c!("IBV_QPT_XRC_RECV", ibv::ibv_qp_type::IBV_QPT_XRC_RECV),
            c!("IBV_QPT_DRIVER", ibv::ibv_qp_type::IBV_QPT_DRIVER),
            c!(
                "IBV_QP_INIT_ATTR_PD",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_XRCD",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_CREATE_FLAGS",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_CREATE_FLAGS.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_MAX_TSO_HEADER",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_MAX_TSO_HEADER.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_IND_TABLE",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_IND_TABLE.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_RX_HASH",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_RX_HASH.0
            ),
            c!(
                "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
                ibv::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0
            ),
            c!(
                "IBV_QP_EX_WITH_RDMA_WRITE",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0
            ),
            c!(
                "IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0
            ),
            c!(
                "IBV_QP_EX_WITH_SEND",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0
            ),
            c!(
                "IBV_QP_EX_WITH_SEND_WITH_IMM",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_IMM.0
            ),
            c!(
                "IBV_QP_EX_WITH_RDMA_READ",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ.0
            ),
            c!(
                "IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP.0
            ),
            c!(
                "IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD.0
            ),
            c!(
                "IBV_QP_EX_WITH_LOCAL_INV",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_LOCAL_INV.0
            ),
            c!(
                "IBV_QP_EX_WITH_BIND_MW",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_BIND_MW.0
            ),
            c!(
                "IBV_QP_EX_WITH_SEND_WITH_INV",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_INV.0
            ),
            c!(
                "IBV_QP_EX_WITH_TSO",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_TSO.0
            ),
            c!(
                "IBV_QP_EX_WITH_ATOMIC_WRITE",
                ibv::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_WRITE.0
            ),
            c!(
                "IBV_QP_OPEN_ATTR_NUM",
                ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_NUM.0
            ),
            c!(
                "IBV_QP_OPEN_ATTR_XRCD",
                ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_XRCD.0
            ),
            c!(
                "IBV_QP_OPEN_ATTR_CONTEXT",
                ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_CONTEXT.0
            ),
            c!(
                "IBV_QP_OPEN_ATTR_TYPE",
                ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_TYPE.0
            ),
            c!(
                "IBV_QP_OPEN_ATTR_RESERVED",
                ibv::ibv_qp_open_attr_mask::IBV_QP_OPEN_ATTR_RESERVED.0
            ),
            c!("IBV_QP_STATE", ibv::ibv_qp_attr_mask::IBV_QP_STATE.0),
            c!(
                "IBV_QP_CUR_STATE",
                ibv::ibv_qp_attr_mask::IBV_QP_CUR_STATE.0
            ),
            c!(
                "IBV_QP_EN_SQD_ASYNC_NOTIFY",
                ibv::ibv_qp_attr_mask::IBV_QP_EN_SQD_ASYNC_NOTIFY.0
            ),
            c!(
                "IBV_QP_ACCESS_FLAGS",
                ibv::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0
            ),
            c!(
                "IBV_QP_PKEY_INDEX",
                ibv::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            ),
            c!("IBV_QP_PORT", ibv::ibv_qp_attr_mask::IBV_QP_PORT.0),
            c!("IBV_QP_QKEY", ibv::ibv_qp_attr_mask::IBV_QP_QKEY.0),
            c!("IBV_QP_AV", ibv::ibv_qp_attr_mask::IBV_QP_AV.0),
            c!("IBV_QP_PATH_MTU", ibv::ibv_qp_attr_mask::IBV_QP_PATH_MTU.0),
            c!("IBV_QP_TIMEOUT", ibv::ibv_qp_attr_mask::IBV_QP_TIMEOUT.0),
            c!(
                "IBV_QP_RETRY_CNT",
                ibv::ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            ),
            c!(
                "IBV_QP_RNR_RETRY",
                ibv::ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            ),
            c!("IBV_QP_RQ_PSN", ibv::ibv_qp_attr_mask::IBV_QP_RQ_PSN.0),
            c!(
                "IBV_QP_MAX_QP_RD_ATOMIC",
                ibv::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0
            ),
            c!("IBV_QP_ALT_PATH", ibv::ibv_qp_attr_mask::IBV_QP_ALT_PATH.0),
            c!(
                "IBV_QP_MIN_RNR_TIMER",
                ibv::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0
            ),
            c!("IBV_QP_SQ_PSN", ibv::ibv_qp_attr_mask::IBV_QP_SQ_PSN.0),
            c!(
                "IBV_QP_MAX_DEST_RD_ATOMIC",
                ibv::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
            ),
            c!(
                "IBV_QP_PATH_MIG_STATE",
                ibv::ibv_qp_attr_mask::IBV_QP_PATH_MIG_STATE.0
            ),
            c!("IBV_QP_CAP", ibv::ibv_qp_attr_mask::IBV_QP_CAP.0),
            c!("IBV_QP_DEST_QPN", ibv::ibv_qp_attr_mask::IBV_QP_DEST_QPN.0),
            c!(
                "IBV_QP_RATE_LIMIT",
                ibv::ibv_qp_attr_mask::IBV_QP_RATE_LIMIT.0
            ),
            c!("IBV_QPS_RESET", ibv::ibv_qp_state::IBV_QPS_RESET),
            c!("IBV_QPS_INIT", ibv::ibv_qp_state::IBV_QPS_INIT),
            c!("IBV_QPS_RTR", ibv::ibv_qp_state::IBV_QPS_RTR),
            c!("IBV_QPS_RTS", ibv::ibv_qp_state::IBV_QPS_RTS),
            c!("IBV_QPS_SQD", ibv::ibv_qp_state::IBV_QPS_SQD),
            c!("IBV_QPS_SQE", ibv::ibv_qp_state::IBV_QPS_SQE),
            c!("IBV_QPS_ERR", ibv::ibv_qp_state::IBV_QPS_ERR),
            c!("IBV_QPS_UNKNOWN", ibv::ibv_qp_state::IBV_QPS_UNKNOWN),
            c!("IBV_MIG_MIGRATED", ibv::ibv_mig_state::IBV_MIG_MIGRATED),
            c!("IBV_MIG_REARM", ibv::ibv_mig_state::IBV_MIG_REARM),
            c!("IBV_MIG_ARMED", ibv::ibv_mig_state::IBV_MIG_ARMED),
            c!("IBV_WR_RDMA_WRITE", ibv::ibv_wr_opcode::IBV_WR_RDMA_WRITE),
            c!(
                "IBV_WR_RDMA_WRITE_WITH_IMM",
                ibv::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
            ),
            c!("IBV_WR_SEND", ibv::ibv_wr_opcode::IBV_WR_SEND),
            c!(
                "IBV_WR_SEND_WITH_IMM",
                ibv::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM
            ),
            c!("IBV_WR_RDMA_READ", ibv::ibv_wr_opcode::IBV_WR_RDMA_READ),
            c!(
                "IBV_WR_ATOMIC_CMP_AND_SWP",
                ibv::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
            ),
            c!(
                "IBV_WR_ATOMIC_FETCH_AND_ADD",
                ibv::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
            ),
            c!("IBV_WR_LOCAL_INV", ibv::ibv_wr_opcode::IBV_WR_LOCAL_INV),
            c!("IBV_WR_BIND_MW", ibv::ibv_wr_opcode::IBV_WR_BIND_MW),
            c!(
                "IBV_WR_SEND_WITH_INV",
                ibv::ibv_wr_opcode::IBV_WR_SEND_WITH_INV
            ),
            c!("IBV_WR_TSO", ibv::ibv_wr_opcode::IBV_WR_TSO),
            c!("IBV_WR_DRIVER1", ibv::ibv_wr_opcode::IBV_WR_DRIVER1),
            c!(
                "IBV_WR_ATOMIC_WRITE",
                ibv::ibv_wr_opcode::IBV_WR_ATOMIC_WRITE
            ),
            c!("IBV_SEND_FENCE", ibv::ibv_send_flags::IBV_SEND_FENCE.0),
            c!(
                "IBV_SEND_SIGNALED",
                ibv::ibv_send_flags::IBV_SEND_SIGNALED.0
            ),
            c!(
                "IBV_SEND_SOLICITED",
                ibv::ibv_send_flags::IBV_SEND_SOLICITED.0
            ),
            c!("IBV_SEND_INLINE", ibv::ibv_send_flags::IBV_SEND_INLINE.0),
            c!("IBV_SEND_IP_CSUM", ibv::ibv_send_flags::IBV_SEND_IP_CSUM.0),
            c!(
                "IBV_CQ_INIT_ATTR_MASK_FLAGS",
                ibv::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0
            ),
            c!(
                "IBV_CQ_INIT_ATTR_MASK_PD",
                ibv::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0
            ),
            c!(
                "IBV_CREATE_CQ_ATTR_SINGLE_THREADED",
                ibv::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_SINGLE_THREADED.0
            ),
            c!(
                "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN",
                ibv::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0
            ),
            c!(
                "IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS",
                ibv::ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS.0
            ),
            c!(
                "IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT",
                ibv::ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT.0
            ),
            c!(
                "IBV_VALUES_MASK_RAW_CLOCK",
                ibv::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0
            ),
            c!(
                "IBV_VALUES_MASK_RESERVED",
                ibv::ibv_values_mask::IBV_VALUES_MASK_RESERVED.0
            ),
            c!(
                "IBV_LINK_LAYER_UNSPECIFIED",
                ibv::IBV_LINK_LAYER_UNSPECIFIED
            ),
            c!("IBV_LINK_LAYER_INFINIBAND", ibv::IBV_LINK_LAYER_INFINIBAND),
            c!("IBV_LINK_LAYER_ETHERNET", ibv::IBV_LINK_LAYER_ETHERNET),
            c!("IBV_ACCESS_OPTIONAL_FIRST", ibv::IBV_ACCESS_OPTIONAL_FIRST),
            c!("IBV_ACCESS_OPTIONAL_RANGE", ibv::IBV_ACCESS_OPTIONAL_RANGE),
            c!("IBV_SYSFS_NAME_MAX", ibv::IBV_SYSFS_NAME_MAX),
            c!("IBV_SYSFS_PATH_MAX", ibv::IBV_SYSFS_PATH_MAX),
            c!("__VERBS_ABI_IS_EXTENDED", ibv::VERBS_ABI_IS_EXTENDED),
        ],
    );
}

#[test]
fn mlx5dv_clock_info_layout() {
    use mlx5dv_sys::mlx5dv_clock_info as ci;
    check(
        "layout",
        &[
            size!("mlx5dv_clock_info", ci),
            off!("mlx5dv_clock_info", ci, nsec),
            off!("mlx5dv_clock_info", ci, last_cycles),
            off!("mlx5dv_clock_info", ci, frac),
            off!("mlx5dv_clock_info", ci, mult),
            off!("mlx5dv_clock_info", ci, shift),
            off!("mlx5dv_clock_info", ci, mask),
        ],
    );
}
