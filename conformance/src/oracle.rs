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
        pub fn oracle_entry_count() -> usize;
        pub fn oracle_entry(i: usize, value: *mut u64) -> *const c_char;
    }
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
