//! perftest's out-of-band messages, byte for byte, as pure functions (no socket here): the
//! version string, the system data, the MTU, the parameter negotiation of perftest 6.28 and
//! later, the per-QP endpoint message ("keys"), the bandwidth report and the closing "done".
//! Facts from perftest (linux-rdma/perftest, tags v4.5-0.17 = version 6.06, which Debian 12
//! ships, and 26.04.17 = 6.29); the functions named are where each format is written and read.
//! perftest puts everything in network byte order except the `ibv_device_attr` of the
//! negotiation, which it copies raw (host order).

use std::fmt;

/// Bytes of the version exchange: `char version[MAX_VERSION]`, `MAX_VERSION 16`
/// (`src/perftest_parameters.h`), sent whole by `exchange_versions`
/// (`src/perftest_communication.c`).
pub const VERSION_LEN: usize = 16;

/// The perftest version whose exchange these tools speak and announce: the current release,
/// 26.04.17 (`configure.ac` `AC_INIT([perftest],[6.29])`). A peer keys every later change of
/// the protocol on the version it is told, so it speaks 6.29's protocol to us.
pub const OUR_VERSION: &str = "6.29";

/// The oldest peer perftest itself accepts (`check_version_compatibility`: "not compatible
/// with versions older than 5.70").
pub const MIN_PEER_VERSION: f64 = 5.70;

/// From this version on both ends swap [`Negotiation`] after the MTU (`negotiate_params`:
/// skipped when `atof(rem_version) < 6.28`; 6.28 itself negotiates unconditionally).
// A version number, not τ.
#[allow(clippy::approx_constant)]
pub const NEGOTIATE_FROM: f64 = 6.28;

/// Peers before this version write `"done"` after the closing handshake (`ctx_close_connection`;
/// removed by perftest commit dbf395e, first released in 23.10.0-0.29 = 6.17). Nobody reads it.
pub const DONE_UNTIL: f64 = 6.17;

/// What peers before [`DONE_UNTIL`] write last: `"done"` with its NUL (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";

/// Bytes of the endpoint message without a GID (`KEY_MSG_SIZE`,
/// `src/perftest_communication.h`): `KEY_PRINT_FMT` and its NUL.
pub const KEY_LEN: usize = 59;
/// Bytes of the endpoint message with a GID (`KEY_MSG_SIZE_GID`): `KEY_PRINT_FMT_GID` and its
/// NUL. perftest sends this one whenever its side has a GID index (always on RoCE:
/// `check_link` sets index 0 on an Ethernet port; on InfiniBand with `-x`).
pub const KEY_GID_LEN: usize = 108;

/// Bytes of [`Negotiation`] on the wire: `sizeof(struct perftest_parameters_negotiate)` on
/// x86_64 with `HAVE_MLX5DV` (seven `int`s, padding, two `uint64_t`, eight `int`s,
/// `struct ibv_device_attr` of 232 bytes at offset 80, `uint64_t mlx5dv_comp_mask`).
pub const NEGOTIATION_LEN: usize = 320;
/// Offset of `struct ibv_device_attr` in [`Negotiation`]'s bytes.
const ATTR_AT: usize = 80;
/// Offset of `max_qp_rd_atom` in `struct ibv_device_attr` (rdma-core `libibverbs/verbs.h`;
/// the only field a peer reads: `compare_ibv_device`).
const ATTR_MAX_QP_RD_ATOM: usize = 144;
/// Offsets of the other fields filled in (`vendor_id`, `vendor_part_id`, `max_qp`,
/// `max_qp_wr`, `max_sge`, `max_cq`, `max_cqe`, `max_mr`, `max_qp_init_rd_atom`, `max_srq`,
/// `max_srq_wr`), and of `node_guid` and `phys_port_cnt`, for a peer that prints them.
const ATTR_VENDOR_ID: usize = 96;
const ATTR_NODE_GUID: usize = 64;
const ATTR_PHYS_PORT_CNT: usize = 227;
const ATTR_U32S: [(usize, AttrField); 11] = [
    (100, AttrField::VendorPartId),
    (108, AttrField::MaxQp),
    (112, AttrField::MaxQpWr),
    (120, AttrField::MaxSge),
    (128, AttrField::MaxCq),
    (132, AttrField::MaxCqe),
    (136, AttrField::MaxMr),
    (156, AttrField::MaxQpInitRdAtom),
    (212, AttrField::MaxSrq),
    (216, AttrField::MaxSrqWr),
    (96, AttrField::VendorId),
];

#[derive(Clone, Copy)]
enum AttrField {
    VendorId,
    VendorPartId,
    MaxQp,
    MaxQpWr,
    MaxSge,
    MaxCq,
    MaxCqe,
    MaxMr,
    MaxQpInitRdAtom,
    MaxSrq,
    MaxSrqWr,
}

/// A peer's version as `exchange_versions` carried it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerVersion {
    /// The text up to the first NUL.
    pub text: String,
    /// Its leading number, as perftest reads it (`atof`).
    pub value: f64,
}

impl fmt::Display for PeerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.text)
    }
}

/// The 16 bytes of version `v` (`strncpy(version, VERSION, 16)`: the text, NULs after it).
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    b[..n].copy_from_slice(&v.as_bytes()[..n]);
    b
}

/// The version in `b`, or why it is no perftest version (a peer that is not perftest, or
/// these tools' own exchange, whose first bytes are `MX5S`).
pub fn decode_version(b: &[u8; VERSION_LEN]) -> Result<PeerVersion, String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(VERSION_LEN);
    let text = &b[..end];
    let shown = String::from_utf8_lossy(text).into_owned();
    if text.starts_with(b"MX5S") {
        return Err(
            "it speaks these tools' own exchange (hello \"MX5S\"), not perftest's: \
                    start it with --perftest too, or this side without"
                .into(),
        );
    }
    let digits = text.iter().take_while(|c| c.is_ascii_digit()).count();
    let ok = digits > 0
        && text.get(digits) == Some(&b'.')
        && text[digits + 1..].iter().all(|c| c.is_ascii_digit())
        && text.len() > digits + 1;
    if !ok {
        return Err(format!(
            "its first {VERSION_LEN} bytes are no perftest version (\"{}\", bytes {:02x?}): is it \
             perftest (ib_*_lat / ib_*_bw), with the same -p?",
            shown.escape_default(),
            &b[..end.clamp(1, 8)]
        ));
    }
    let value = shown
        .parse::<f64>()
        .map_err(|e| format!("version {shown:?}: {e}"))?;
    Ok(PeerVersion { text: shown, value })
}

/// One `int` in network order (`hton_int`), as `check_sys_data` sends the cycle buffer and the
/// cache line size, each in an exchange of its own.
pub fn encode_int(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// An `int` sent by [`encode_int`].
pub fn decode_int(b: &[u8; 4]) -> u32 {
    u32::from_be_bytes(*b)
}

/// The MTU field of `check_mtu`: `sprintf(cur, "%d", mtu)` of the `enum ibv_mtu` value (1 for
/// 256 bytes ... 5 for 4096), of which peers from 5.31 on send the first 2 bytes.
pub const MTU_LEN: usize = 2;

/// The MTU field for `mtu` bytes (256..=4096, a power of two).
pub fn encode_mtu(mtu: u32) -> [u8; MTU_LEN] {
    let e = mtu_enum(mtu).unwrap_or(3);
    [b'0' + e, 0]
}

/// `enum ibv_mtu` of `mtu` bytes (rdma-core `libibverbs/verbs.h`: `IBV_MTU_256 = 1` ...
/// `IBV_MTU_4096 = 5`).
pub fn mtu_enum(mtu: u32) -> Option<u8> {
    match mtu {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The MTU in bytes the peer's field names, or why it names none.
pub fn decode_mtu(b: &[u8; MTU_LEN]) -> Result<u32, String> {
    match (b[0], b[1]) {
        (c @ b'1'..=b'5', 0) => Ok(128 << (c - b'0')),
        _ => Err(format!(
            "its MTU field {b:02x?} is not one of \"1\"..\"5\" (enum ibv_mtu, 256..4096 bytes)"
        )),
    }
}

/// One QP's endpoint as perftest's `struct pingpong_dest` carries it (`set_up_connection`
/// fills it; `ethernet_write_keys` / `ethernet_read_keys` format and parse it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// The port's LID (0 on RoCE), `%04x`.
    pub lid: u16,
    /// READ/atomic requests this side serves at once (its `max_dest_rd_atomic`; the peer sets
    /// its `max_rd_atomic` to it), `%04x`.
    pub out_reads: u16,
    /// QP number, `%06x`.
    pub qpn: u32,
    /// First PSN this side sends, `%06x`.
    pub psn: u32,
    /// The rkey of the buffer the peer writes, reads or runs atomics on, `%08x`.
    pub rkey: u32,
    /// That buffer's address, `%016llx`.
    pub vaddr: u64,
    /// The port's GID, 16 bytes of `%02x` (in the long form only).
    pub gid: Option<[u8; 16]>,
    /// XRC: the SRQ number of the receive side (DC, XRC); else 0, `%08x`.
    pub srqn: u32,
}

impl Dest {
    /// The message's length on the wire.
    pub fn len(&self) -> usize {
        if self.gid.is_some() {
            KEY_GID_LEN
        } else {
            KEY_LEN
        }
    }

    /// Whether this is the short form (no GID).
    pub fn is_empty(&self) -> bool {
        self.gid.is_none()
    }

    /// The message: the text of `KEY_PRINT_FMT` (or `KEY_PRINT_FMT_GID`) and NULs to its
    /// length. `None` when a field does not fit its width (a QPN or PSN over 24 bits), which
    /// perftest's fixed-size message cannot carry.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.qpn > 0xff_ffff || self.psn > 0xff_ffff {
            return None;
        }
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        match self.gid {
            Some(g) => {
                for b in g {
                    s.push_str(&format!("{b:02x}:"));
                }
                s.push_str(&format!("{:08x}:", self.srqn));
            }
            None => s.push_str(&format!("{:08x}", self.srqn)),
        }
        let mut b = s.into_bytes();
        b.resize(self.len(), 0);
        Some(b)
    }

    /// The endpoint in `b` (of [`KEY_LEN`] or [`KEY_GID_LEN`] bytes: the length says which
    /// form), or what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Dest, String> {
        let gid = match b.len() {
            KEY_LEN => false,
            KEY_GID_LEN => true,
            n => return Err(format!("an endpoint message of {n} bytes")),
        };
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = std::str::from_utf8(&b[..end]).map_err(|_| {
            format!(
                "its endpoint message is not text: {:02x?}",
                &b[..end.min(16)]
            )
        })?;
        let bad = |why: &str| format!("its endpoint message {text:?}: {why}");
        let fields: Vec<&str> = text.split(':').collect();
        // Long form: 6 fields, 16 GID bytes, the SRQN and the empty text after its ':'.
        let want = if gid { 6 + 16 + 2 } else { 7 };
        if fields.len() != want || (gid && !fields[want - 1].is_empty()) {
            return Err(bad(&format!(
                "{} ':'-separated fields, perftest's {} form has {}",
                fields.len(),
                if gid { "GID" } else { "short" },
                want
            )));
        }
        let hex = |i: usize, width: u32| -> Result<u64, String> {
            let f = fields[i];
            if f.is_empty() || f.len() > 16 || !f.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad(&format!("field {} ({f:?}) is not hexadecimal", i + 1)));
            }
            let v = u64::from_str_radix(f, 16).map_err(|e| bad(&e.to_string()))?;
            if width < 64 && v >> width != 0 {
                return Err(bad(&format!(
                    "field {} ({f:?}) is wider than {width} bits",
                    i + 1
                )));
            }
            Ok(v)
        };
        let mut g = [0u8; 16];
        if gid {
            for (k, byte) in g.iter_mut().enumerate() {
                *byte = hex(6 + k, 8)? as u8;
            }
        }
        Ok(Dest {
            lid: hex(0, 16)? as u16,
            out_reads: hex(1, 16)? as u16,
            qpn: hex(2, 24)? as u32,
            psn: hex(3, 24)? as u32,
            rkey: hex(4, 32)? as u32,
            vaddr: hex(5, 64)?,
            gid: gid.then_some(g),
            srqn: hex(if gid { 22 } else { 6 }, 32)? as u32,
        })
    }
}

/// What a device tells a negotiating peer (the `struct ibv_device_attr` of the negotiation,
/// the fields these tools know; the rest stays zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSummary {
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `node_guid`.
    pub node_guid: u64,
    /// `max_qp`.
    pub max_qp: u32,
    /// `max_qp_wr`.
    pub max_qp_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `max_cq`.
    pub max_cq: u32,
    /// `max_cqe`.
    pub max_cqe: u32,
    /// `max_mr`.
    pub max_mr: u32,
    /// `max_qp_rd_atom`: READ/atomic requests a QP serves at once (the peer lowers its own
    /// outstanding reads to it: `compare_ibv_device`).
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: u32,
    /// `max_srq`.
    pub max_srq: u32,
    /// `max_srq_wr`.
    pub max_srq_wr: u32,
    /// `phys_port_cnt`.
    pub phys_port_cnt: u8,
}

impl DeviceSummary {
    fn get(&self, f: AttrField) -> u32 {
        match f {
            AttrField::VendorId => self.vendor_id,
            AttrField::VendorPartId => self.vendor_part_id,
            AttrField::MaxQp => self.max_qp,
            AttrField::MaxQpWr => self.max_qp_wr,
            AttrField::MaxSge => self.max_sge,
            AttrField::MaxCq => self.max_cq,
            AttrField::MaxCqe => self.max_cqe,
            AttrField::MaxMr => self.max_mr,
            AttrField::MaxQpInitRdAtom => self.max_qp_init_rd_atom,
            AttrField::MaxSrq => self.max_srq,
            AttrField::MaxSrqWr => self.max_srq_wr,
        }
    }

    fn set(&mut self, f: AttrField, v: u32) {
        *match f {
            AttrField::VendorId => &mut self.vendor_id,
            AttrField::VendorPartId => &mut self.vendor_part_id,
            AttrField::MaxQp => &mut self.max_qp,
            AttrField::MaxQpWr => &mut self.max_qp_wr,
            AttrField::MaxSge => &mut self.max_sge,
            AttrField::MaxCq => &mut self.max_cq,
            AttrField::MaxCqe => &mut self.max_cqe,
            AttrField::MaxMr => &mut self.max_mr,
            AttrField::MaxQpInitRdAtom => &mut self.max_qp_init_rd_atom,
            AttrField::MaxSrq => &mut self.max_srq,
            AttrField::MaxSrqWr => &mut self.max_srq_wr,
        } = v;
    }
}

/// `struct perftest_parameters_negotiate` (`src/perftest_parameters.h`, perftest 6.28 and
/// later; 6.28 lacked `data_validation`, which sits in what was padding there): what a run is,
/// in perftest's enums, and the device. `negotiate_params` swaps it after the MTU and stops the
/// run when any field but the device differs (`compare`: " %s mismatch: local=..., remote=...").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiation {
    /// `enum ctx_test_method`: 0 `RUN_REGULAR`, 1 `RUN_ALL` (`-a`), 2 `RUN_INFINITELY`.
    pub test_method: u32,
    /// 0 RC, 1 UC, 2 UD, 3 RawEth, 4 XRC, 5 DC, 6 SRD.
    pub connection_type: u32,
    /// `VerbType`: 0 SEND, 1 SEND_IMM, 2 WRITE, 3 WRITE_IMM, 4 READ, 5 ATOMIC.
    pub verb: u32,
    /// `TestType`: 0 LAT, 1 BW.
    pub tst: u32,
    /// `AtomicType`: 0 CMP_AND_SWAP, 1 FETCH_AND_ADD (0 in tests other than atomics).
    pub atomic_type: u32,
    /// `TestMethod`: 0 ITERATIONS, 1 DURATION (`-D`).
    pub test_type: u32,
    /// `enum ctx_report_fmt`: 0 GBS (`--report_gbits`), 1 MBS.
    pub report_fmt: u32,
    /// The message size (`MAX_SIZE`, 8 MiB, with `-a`).
    pub size: u64,
    /// Iterations (0 with `-D`).
    pub iters: u64,
    /// `--aes_xts`.
    pub aes_xts: u32,
    /// QPs (`-q`; twice that with XRC in latency tests and bidirectional bandwidth tests).
    pub num_of_qps: u32,
    /// `-D` seconds (5 when not given).
    pub duration: u32,
    /// `-z`.
    pub use_rdma_cm: u32,
    /// WRITE with immediate.
    pub use_write_with_imm: u32,
    /// `--no_enhanced_reorder`.
    pub no_enhanced_reorder: u32,
    /// `--sig_offload`.
    pub sig_offload: u32,
    /// `--data_validation` (6.29).
    pub data_validation: u32,
    /// The device.
    pub device: DeviceSummary,
    /// `mlx5dv_context.comp_mask` on an mlx5 device, else 0.
    pub mlx5dv_comp_mask: u64,
}

/// The fields [`Negotiation::mismatches`] compares, with perftest's names and the names of
/// each value (`negotiate_params`' `COMPARE` table).
const ENUMS: [(&str, &[&str]); 7] = [
    ("test_method", &["RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"]),
    (
        "connection_type",
        &["RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"],
    ),
    (
        "verb",
        &["SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"],
    ),
    ("tst", &["LAT", "BW", "LAT_BY_BW", "FS_RATE"]),
    ("atomicType", &["CMP_AND_SWAP", "FETCH_AND_ADD"]),
    ("test_type", &["ITERATIONS", "DURATION"]),
    ("report_fmt", &["GBS", "MBS"]),
];

impl Negotiation {
    fn enums(&self) -> [u32; 7] {
        [
            self.test_method,
            self.connection_type,
            self.verb,
            self.tst,
            self.atomic_type,
            self.test_type,
            self.report_fmt,
        ]
    }

    fn ints(&self) -> [u32; 8] {
        [
            self.aes_xts,
            self.num_of_qps,
            self.duration,
            self.use_rdma_cm,
            self.use_write_with_imm,
            self.no_enhanced_reorder,
            self.sig_offload,
            self.data_validation,
        ]
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; NEGOTIATION_LEN] {
        let mut b = [0u8; NEGOTIATION_LEN];
        for (i, v) in self.enums().iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[32..40].copy_from_slice(&self.size.to_be_bytes());
        b[40..48].copy_from_slice(&self.iters.to_be_bytes());
        for (i, v) in self.ints().iter().enumerate() {
            b[48 + i * 4..52 + i * 4].copy_from_slice(&v.to_be_bytes());
        }
        // The device attributes go raw, in this host's order, as perftest copies them.
        let a = &mut b[ATTR_AT..ATTR_AT + 232];
        for (at, f) in ATTR_U32S {
            a[at..at + 4].copy_from_slice(&self.device.get(f).to_ne_bytes());
        }
        a[ATTR_MAX_QP_RD_ATOM..ATTR_MAX_QP_RD_ATOM + 4]
            .copy_from_slice(&self.device.max_qp_rd_atom.to_ne_bytes());
        a[ATTR_NODE_GUID..ATTR_NODE_GUID + 8].copy_from_slice(&self.device.node_guid.to_ne_bytes());
        a[ATTR_PHYS_PORT_CNT] = self.device.phys_port_cnt;
        b[312..320].copy_from_slice(&self.mlx5dv_comp_mask.to_be_bytes());
        b
    }

    /// The fields of `b`.
    pub fn decode(b: &[u8; NEGOTIATION_LEN]) -> Negotiation {
        let be32 = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let be64 = |at: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(v)
        };
        let a = &b[ATTR_AT..ATTR_AT + 232];
        let ne32 = |at: usize| u32::from_ne_bytes([a[at], a[at + 1], a[at + 2], a[at + 3]]);
        let mut device = DeviceSummary {
            max_qp_rd_atom: ne32(ATTR_MAX_QP_RD_ATOM),
            node_guid: {
                let mut v = [0u8; 8];
                v.copy_from_slice(&a[ATTR_NODE_GUID..ATTR_NODE_GUID + 8]);
                u64::from_ne_bytes(v)
            },
            phys_port_cnt: a[ATTR_PHYS_PORT_CNT],
            ..DeviceSummary::default()
        };
        for (at, f) in ATTR_U32S {
            device.set(f, ne32(at));
        }
        debug_assert_eq!(ATTR_VENDOR_ID, 96);
        Negotiation {
            test_method: be32(0),
            connection_type: be32(4),
            verb: be32(8),
            tst: be32(12),
            atomic_type: be32(16),
            test_type: be32(20),
            report_fmt: be32(24),
            size: be64(32),
            iters: be64(40),
            aes_xts: be32(48),
            num_of_qps: be32(52),
            duration: be32(56),
            use_rdma_cm: be32(60),
            use_write_with_imm: be32(64),
            no_enhanced_reorder: be32(68),
            sig_offload: be32(72),
            data_validation: be32(76),
            device,
            mlx5dv_comp_mask: be64(312),
        }
    }

    /// Every field a negotiating perftest compares that differs between `local` (this side)
    /// and `remote`, in perftest's words (`" verb mismatch: local=WRITE, remote=SEND"`), in
    /// its order; empty when the runs agree. The device is not compared (perftest only lowers
    /// its outstanding reads to the peer's `max_qp_rd_atom`).
    pub fn mismatches(local: &Negotiation, remote: &Negotiation) -> Vec<String> {
        let mut out = Vec::new();
        let name = |names: &[&str], v: u32| {
            names
                .get(v as usize)
                .map_or_else(|| v.to_string(), |s| s.to_string())
        };
        for ((field, names), (l, r)) in ENUMS.iter().zip(local.enums().iter().zip(remote.enums())) {
            if *l != r {
                out.push(format!(
                    "{field} mismatch: local={}, remote={}",
                    name(names, *l),
                    name(names, r)
                ));
            }
        }
        let nums: [(&str, u64, u64); 2] = [
            ("size", local.size, remote.size),
            ("iters", local.iters, remote.iters),
        ];
        let ints = ["aes_xts", "num_of_qps", "duration", "use_rdma_cm"];
        let flags = [
            "use_write_with_imm",
            "no_enhanced_reorder",
            "sig_offload",
            "data_validation",
        ];
        for (field, l, r) in nums {
            if l != r {
                out.push(format!("{field} mismatch: local={l}, remote={r}"));
            }
        }
        for (i, (l, r)) in local.ints().iter().zip(remote.ints()).enumerate() {
            if *l != r {
                let field = ints
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| flags[i - ints.len()]);
                let onoff = |v: u32| match v {
                    0 => "OFF".to_string(),
                    1 => "ON".to_string(),
                    v => v.to_string(),
                };
                let (ls, rs) = if matches!(field, "num_of_qps" | "duration") {
                    (l.to_string(), r.to_string())
                } else {
                    (onoff(*l), onoff(r))
                };
                out.push(format!("{field} mismatch: local={ls}, remote={rs}"));
            }
        }
        out
    }
}

/// One side's figures of a bandwidth run as `xchg_bw_reports` swaps them (`struct
/// bw_report_data`, the fields it sends): the message size, the messages (all QPs), and the
/// peak and average bandwidth (MiB/s, or Gb/s when the run reports Gb/s) and message rate
/// (millions per second). Each field is one exchange of its own, in this order, in network
/// order (`hton_long`, `hton_long` from peer version 5.33 on, `hton_double`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// `size`.
    pub size: u64,
    /// `iters`.
    pub iters: u64,
    /// `bw_peak`.
    pub bw_peak: f64,
    /// `bw_avg`.
    pub bw_avg: f64,
    /// `msgRate_avg`.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five fields, each as its own 8-byte exchange.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_be_bytes(),
            self.bw_avg.to_be_bytes(),
            self.msg_rate.to_be_bytes(),
        ]
    }

    /// The report of five 8-byte fields, or why a figure is not one (NaN, infinite, negative).
    pub fn decode(f: &[[u8; 8]; 5]) -> Result<BwReport, String> {
        let fig = |b: [u8; 8], what: &str| {
            let v = f64::from_be_bytes(b);
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(format!("its report's {what} is {v}"))
            }
        };
        Ok(BwReport {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: fig(f[2], "peak bandwidth")?,
            bw_avg: fig(f[3], "average bandwidth")?,
            msg_rate: fig(f[4], "message rate")?,
        })
    }
}

#[cfg(test)]
mod tests;
