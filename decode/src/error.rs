//! Decoder errors: each a one-line message that says what is wrong and where.

/// Why input could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// No bytes at all.
    #[error("no input bytes (expected hex digits such as `00 00 10 08 ...`)")]
    Empty,
    /// A token with an odd number of hex digits.
    #[error(
        "line {line}: `{token}` has an odd number of hex digits (write each byte as two digits)"
    )]
    OddDigits {
        /// 1-based line number.
        line: usize,
        /// The offending token.
        token: String,
    },
    /// A token that is not hex.
    #[error("line {line}: `{token}` is not hex (allowed: hex digits, `0x` prefixes, commas, whitespace, `#` comments)")]
    NotHex {
        /// 1-based line number.
        line: usize,
        /// The offending token.
        token: String,
    },
    /// A segment or structure runs past the end of the bytes it may use.
    #[error("truncated {what} at offset {offset:#x}: needs {need} bytes, only {have} available")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts.
        offset: usize,
        /// Bytes it needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The ctrl segment's DS count claims more bytes than the input has.
    #[error("DS count {ds} means a {need}-byte WQE, but only {have} bytes were given")]
    DsBeyondInput {
        /// DS count from the ctrl segment.
        ds: u8,
        /// `ds * 16`.
        need: usize,
        /// Input length.
        have: usize,
    },
    /// A DS count of zero.
    #[error("DS count is 0: a WQE is at least its 16-byte ctrl segment (DS >= 1)")]
    ZeroDs,
    /// A send opcode the decoder does not know.
    #[error("unknown send opcode {0:#04x} (byte 3 of the ctrl segment)")]
    UnknownOpcode(u8),
    /// A masked atomic with an opmod other than 0x08 (4-byte) or 0x09 (8-byte).
    #[error("masked atomic with opmod {0:#04x}: expected 0x08 (4-byte operands) or 0x09 (8-byte)")]
    UnknownAtomicOpmod(u8),
    /// A CQE opcode the decoder does not know.
    #[error("unknown CQE opcode {0} (op_own bits 7:4, byte 63 of the 64-byte CQE)")]
    UnknownCqeOpcode(u8),
    /// A compressed CQE that contradicts its layout.
    #[error("compressed CQE at offset {offset:#x}: {why}")]
    Compressed {
        /// Where the CQE starts.
        offset: usize,
        /// What is wrong.
        why: String,
    },
    /// Input of the wrong length for the structure.
    #[error("{what}: expected {expected} bytes, got {got}")]
    Length {
        /// What was expected.
        what: &'static str,
        /// Expected length.
        expected: String,
        /// Input length.
        got: usize,
    },
    /// A bad option value.
    #[error("{0}")]
    Usage(String),
}
