//! Fuzz harness `tools_hello`: arbitrary bytes as the hello `lat` and `bw` exchange before the
//! endpoints (`mlx5_tools::hello::Hello`). Nothing may panic; the prefix check takes any
//! length; a hello that decodes encodes to bytes that decode to it again (the decoder
//! ignores the bytes of sections a flag does not announce, so the bytes themselves need not
//! come back) and can be checked against itself.
//! Shared by `fuzz/fuzz_targets/tools_hello.rs` and `tools/tests/it/fuzz_replay.rs`.

use mlx5_tools::hello::{Hello, HELLO_LEN};

/// Run one input.
pub fn run(data: &[u8]) {
    let _ = Hello::check_prefix(data, "fuzz");
    let mut b = [0u8; HELLO_LEN];
    let n = data.len().min(HELLO_LEN);
    b[..n].copy_from_slice(&data[..n]);
    if let Ok(h) = Hello::decode(&b, "fuzz") {
        let again = Hello::decode(&h.encode(), "fuzz").expect("an encoded hello decodes");
        assert_eq!(again, h, "encode → decode is not the identity");
        // Checking a hello against itself never panics (client and server side).
        let _ = h.check_peer(&h, true, "fuzz");
        let _ = h.check_peer(&h, false, "fuzz");
    }
}
