//! Safe wrappers around the C oracle. Each takes the buffer the helper writes, exactly as the
//! Rust side would hand it to hardware; zero-fill it first when comparing whole segments
//! (`mlx5dv_set_ctrl_seg` leaves bytes 9–10 untouched and `mlx5dv_set_dgram_seg` bytes 16–19,
//! `docs/sources.md` §13).

#[cfg(not(oracle_missing))]
mod ffi {
    use core::ffi::c_char;

    extern "C" {
        #[allow(clippy::too_many_arguments)]
        pub fn oracle_set_ctrl_seg(
            buf: *mut u8,
            pi: u16,
            opcode: u8,
            opmod: u8,
            qp_num: u32,
            fm_ce_se: u8,
            ds: u8,
            signature: u8,
            imm: u32,
        );
        pub fn oracle_has_x86_ctrl_seg() -> i32;
        #[allow(clippy::too_many_arguments)]
        pub fn oracle_x86_set_ctrl_seg(
            buf: *mut u8,
            pi: u16,
            opcode: u8,
            opmod: u8,
            qp_num: u32,
            fm_ce_se: u8,
            ds: u8,
            signature: u8,
            imm: u32,
        );
        pub fn oracle_set_data_seg(buf: *mut u8, length: u32, lkey: u32, address: u64);
        #[allow(clippy::too_many_arguments)]
        pub fn oracle_set_dgram_seg(
            buf: *mut u8,
            key: u64,
            dqp_dct: u32,
            ext: u8,
            stat_rate_sl: u8,
            fl_mlid: u8,
            rlid: u16,
            rmac: *const u8,
            tclass: u8,
            hop_limit: u8,
            grh_gid_fl: u32,
            rgid: *const u8,
        );
        pub fn oracle_get_cqe_owner(cqe: *mut u8) -> u8;
        pub fn oracle_get_cqe_se(cqe: *mut u8) -> u8;
        pub fn oracle_get_cqe_format(cqe: *mut u8) -> u8;
        pub fn oracle_get_cqe_opcode(cqe: *mut u8) -> u8;
        pub fn oracle_set_cqe_owner(cqe: *mut u8, val: u8);
        pub fn oracle_dci_wqe(
            ring: *mut u8,
            wqe_cnt: u32,
            cur_post: u32,
            qp_num: u32,
            wr: *const super::DciWrC,
        ) -> u32;
        pub fn oracle_entry_count() -> usize;
        pub fn oracle_entry(i: usize, value: *mut u64) -> *const c_char;
    }
}

/// `struct oracle_dci_wr` of `oracle.c`, field for field.
#[cfg(not(oracle_missing))]
#[repr(C)]
struct DciWrC {
    ib_opcode: u32,
    send_flags: u32,
    imm_be: u32,
    av: *const u8,
    dctn: u32,
    dc_key: u64,
    with_stream: u32,
    stream_id: u16,
    remote_addr: u64,
    rkey: u32,
    swap: u64,
    compare_add: u64,
    inline_data: u32,
    data: *const u8,
    data_len: u32,
    nsge: u32,
    sge_addr: *const u64,
    sge_len: *const u32,
    sge_lkey: *const u32,
}

/// One DCI work request as a program gives it to libmlx5's `ibv_wr_*` API
/// ([`dci_wqe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DciWr {
    /// `enum ibv_wr_opcode`: SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM,
    /// RDMA_READ, ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD.
    pub ib_opcode: u32,
    /// `IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE`.
    pub send_flags: u32,
    /// The `__be32` immediate, stored as given.
    pub imm_be: u32,
    /// The address handle's AV.
    pub av: [u8; 48],
    /// The DCT number.
    pub dctn: u32,
    /// The DC access key.
    pub dc_key: u64,
    /// `mlx5dv_wr_set_dc_addr_stream` with this stream, instead of `mlx5dv_wr_set_dc_addr`.
    pub stream: Option<u16>,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// CAS: the swap value.
    pub swap: u64,
    /// CAS: the compare value; FAA: the addend.
    pub compare_add: u64,
    /// `ibv_wr_set_inline_data(data)` when `Some`, else the gather list.
    pub inline: Option<Vec<u8>>,
    /// `ibv_wr_set_sge_list`: `(addr, length, lkey)`.
    pub sges: Vec<(u64, u32, u32)>,
}

/// Store the WQE of `wr` at producer index `cur_post` of `ring` (`ring.len() / 64` blocks, a
/// power of two) for QP `qp_num`, the way rdma-core 44's libmlx5 builds a DCI WQE through
/// `ibv_wr_*` and `mlx5dv_wr_set_dc_addr[_stream]` (replayed store for store by the oracle:
/// `oracle.c` `oracle_dci_wqe` names each function). Bytes libmlx5 leaves alone keep what
/// `ring` held. Returns the DS count (0 for an opcode it does not build).
pub fn dci_wqe(ring: &mut [u8], cur_post: u32, qp_num: u32, wr: &DciWr) -> u32 {
    #[cfg(oracle_missing)]
    {
        let _ = (ring, cur_post, qp_num, wr);
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let blocks = ring.len() / 64;
        assert!(
            blocks.is_power_of_two() && ring.len() == blocks * 64,
            "a ring of 64-byte blocks, a power of two of them"
        );
        // The C side takes 8-aligned struct pointers: work on an aligned copy.
        let mut tmp = vec![0u64; ring.len() / 8];
        let bytes: &mut [u8] = zerocopy_free_bytes(&mut tmp);
        bytes.copy_from_slice(ring);
        let (addr, len, lkey): (Vec<u64>, Vec<u32>, Vec<u32>) = (
            wr.sges.iter().map(|s| s.0).collect(),
            wr.sges.iter().map(|s| s.1).collect(),
            wr.sges.iter().map(|s| s.2).collect(),
        );
        let data = wr.inline.as_deref().unwrap_or(&[]);
        let c = DciWrC {
            ib_opcode: wr.ib_opcode,
            send_flags: wr.send_flags,
            imm_be: wr.imm_be,
            av: wr.av.as_ptr(),
            dctn: wr.dctn,
            dc_key: wr.dc_key,
            with_stream: u32::from(wr.stream.is_some()),
            stream_id: wr.stream.unwrap_or(0),
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            swap: wr.swap,
            compare_add: wr.compare_add,
            inline_data: u32::from(wr.inline.is_some()),
            data: data.as_ptr(),
            data_len: data.len() as u32,
            nsge: wr.sges.len() as u32,
            sge_addr: addr.as_ptr(),
            sge_len: len.as_ptr(),
            sge_lkey: lkey.as_ptr(),
        };
        // SAFETY: `tmp` is `blocks` whole 64-byte blocks, 8-aligned, and the oracle writes only
        // inside them (each segment wraps at their end); every pointer in `c` names a live
        // buffer of the length it states (`av` 48 bytes, `data` `data_len`, the SGE arrays
        // `nsge` entries each).
        let ds =
            unsafe { ffi::oracle_dci_wqe(bytes.as_mut_ptr(), blocks as u32, cur_post, qp_num, &c) };
        ring.copy_from_slice(bytes);
        ds
    }
}

/// The bytes of a `u64` buffer (its alignment for the C side).
#[cfg(not(oracle_missing))]
fn zerocopy_free_bytes(v: &mut [u64]) -> &mut [u8] {
    let n = core::mem::size_of_val(v);
    // SAFETY: any `u64` buffer is a valid byte buffer of 8 bytes per element; the borrow is
    // handed on, so nothing else reads the `u64`s meanwhile.
    unsafe { core::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), n) }
}

/// Arguments of `mlx5dv_set_ctrl_seg`, host order except `imm` (stored unswapped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlArgs {
    /// Producer index of the WQE's first basic block.
    pub pi: u16,
    /// `MLX5_OPCODE_*`.
    pub opcode: u8,
    /// Opcode modifier.
    pub opmod: u8,
    /// QP number (24 bits are meaningful).
    pub qpn: u32,
    /// Fence / completion / solicited flags.
    pub fm_ce_se: u8,
    /// WQE size in 16-byte units.
    pub ds: u8,
    /// WQE signature.
    pub signature: u8,
    /// Immediate, stored as given.
    pub imm: u32,
}

/// Arguments of `mlx5dv_set_dgram_seg`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DgramArgs {
    /// Q_Key << 32 for UD, DC access key for DC.
    pub key: u64,
    /// Destination QPN or DCT number.
    pub dqp_dct: u32,
    /// Extended AV bit (0 or 1).
    pub ext: u8,
    /// Static rate and SL.
    pub stat_rate_sl: u8,
    /// Force loopback / source path bits.
    pub fl_mlid: u8,
    /// Remote LID or UDP source port.
    pub rlid: u16,
    /// Remote MAC.
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// GRH flag, SGID index, flow label.
    pub grh_gid_fl: u32,
    /// Remote GID.
    pub rgid: [u8; 16],
}

/// A copy of a caller buffer with the alignment of the C structs (the header's structs are
/// 4- or 8-aligned and the SSE helper stores 16 bytes at once), so the C side never sees a
/// misaligned pointer.
#[cfg(not(oracle_missing))]
#[repr(C, align(16))]
struct Aligned<const N: usize>([u8; N]);

#[cfg(oracle_missing)]
fn missing() -> ! {
    panic!("{}", crate::INSTALL_HINT)
}

/// `mlx5dv_set_ctrl_seg` on `buf`.
pub fn set_ctrl_seg(buf: &mut [u8; 16], a: CtrlArgs) {
    #[cfg(oracle_missing)]
    {
        let _ = (buf, a);
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let mut tmp = Aligned(*buf);
        // SAFETY: the helper writes within the 16 bytes of `struct mlx5_wqe_ctrl_seg`; `tmp`
        // is 16 bytes, 16-aligned and exclusively ours.
        unsafe {
            ffi::oracle_set_ctrl_seg(
                tmp.0.as_mut_ptr(),
                a.pi,
                a.opcode,
                a.opmod,
                a.qpn,
                a.fm_ce_se,
                a.ds,
                a.signature,
                a.imm,
            )
        };
        *buf = tmp.0;
    }
}

/// `mlx5dv_x86_set_ctrl_seg` on `buf`, or `false` when the oracle was built without SSSE3
/// (not x86_64).
pub fn x86_set_ctrl_seg(buf: &mut [u8; 16], a: CtrlArgs) -> bool {
    #[cfg(oracle_missing)]
    {
        let _ = (buf, a);
        missing()
    }
    #[cfg(not(oracle_missing))]
    // SAFETY: the SSE helper stores 16 bytes to a 16-aligned `struct mlx5_wqe_ctrl_seg`;
    // `tmp` is 16 bytes, 16-aligned and exclusively ours.
    unsafe {
        if ffi::oracle_has_x86_ctrl_seg() == 0 {
            return false;
        }
        let mut tmp = Aligned(*buf);
        ffi::oracle_x86_set_ctrl_seg(
            tmp.0.as_mut_ptr(),
            a.pi,
            a.opcode,
            a.opmod,
            a.qpn,
            a.fm_ce_se,
            a.ds,
            a.signature,
            a.imm,
        );
        *buf = tmp.0;
        true
    }
}

/// `mlx5dv_set_data_seg` on `buf`.
pub fn set_data_seg(buf: &mut [u8; 16], length: u32, lkey: u32, addr: u64) {
    #[cfg(oracle_missing)]
    {
        let _ = (buf, length, lkey, addr);
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let mut tmp = Aligned(*buf);
        // SAFETY: writes the 16 bytes of `struct mlx5_wqe_data_seg` into a 16-byte, 16-aligned
        // buffer.
        unsafe { ffi::oracle_set_data_seg(tmp.0.as_mut_ptr(), length, lkey, addr) };
        *buf = tmp.0;
    }
}

/// `mlx5dv_set_dgram_seg` on `buf`.
pub fn set_dgram_seg(buf: &mut [u8; 48], a: &DgramArgs) {
    #[cfg(oracle_missing)]
    {
        let _ = (buf, a);
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let mut tmp = Aligned(*buf);
        // SAFETY: writes within the 48 bytes of `struct mlx5_wqe_datagram_seg` (`tmp`, 48 bytes,
        // 16-aligned); reads 6 bytes of `rmac` and 16 of `rgid`, arrays of exactly that size.
        unsafe {
            ffi::oracle_set_dgram_seg(
                tmp.0.as_mut_ptr(),
                a.key,
                a.dqp_dct,
                a.ext,
                a.stat_rate_sl,
                a.fl_mlid,
                a.rlid,
                a.rmac.as_ptr(),
                a.tclass,
                a.hop_limit,
                a.grh_gid_fl,
                a.rgid.as_ptr(),
            )
        };
        *buf = tmp.0;
    }
}

/// `(owner, se, format, opcode)` of a CQE, by `mlx5dv_get_cqe_owner/se/format/opcode`.
pub fn cqe_fields(cqe: &[u8; 64]) -> (u8, u8, u8, u8) {
    #[cfg(oracle_missing)]
    {
        let _ = cqe;
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let mut c = Aligned(*cqe);
        let p = c.0.as_mut_ptr();
        // SAFETY: the getters read byte 63 of a 64-byte `struct mlx5_cqe64`.
        unsafe {
            (
                ffi::oracle_get_cqe_owner(p),
                ffi::oracle_get_cqe_se(p),
                ffi::oracle_get_cqe_format(p),
                ffi::oracle_get_cqe_opcode(p),
            )
        }
    }
}

/// `mlx5dv_set_cqe_owner` on `cqe`.
pub fn set_cqe_owner(cqe: &mut [u8; 64], val: u8) {
    #[cfg(oracle_missing)]
    {
        let _ = (cqe, val);
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        let mut c = Aligned(*cqe);
        // SAFETY: writes byte 63 of a 64-byte, 16-aligned `struct mlx5_cqe64`.
        unsafe { ffi::oracle_set_cqe_owner(c.0.as_mut_ptr(), val) };
        *cqe = c.0;
    }
}

/// Every named number the oracle reports: `"sizeof T"`, `"offsetof T.field"`, or a constant
/// name such as `"MLX5_OPCODE_RDMA_WRITE"`.
pub fn entries() -> Vec<(String, u64)> {
    #[cfg(oracle_missing)]
    {
        missing()
    }
    #[cfg(not(oracle_missing))]
    {
        // SAFETY: the table is a static array of `oracle_entry_count()` entries whose names
        // are NUL-terminated string literals.
        unsafe {
            (0..ffi::oracle_entry_count())
                .map(|i| {
                    let mut v = 0u64;
                    let name = ffi::oracle_entry(i, &mut v);
                    (
                        core::ffi::CStr::from_ptr(name)
                            .to_string_lossy()
                            .into_owned(),
                        v,
                    )
                })
                .collect()
        }
    }
}

/// The oracle's value for `name`; panics (failing the test) when the oracle does not know it.
pub fn value(name: &str) -> u64 {
    entries()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("the C oracle has no entry {name:?}"))
}
