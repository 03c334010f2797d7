//! Fuzz harness `connect_wire`: arbitrary bytes as a connection-setup control message
//! (`mlx5_connect::wire::Message::decode`). Nothing may panic; a message that decodes encodes
//! back to exactly the same bytes, and its announced frame length is the input's. Shared by
//! `fuzz/fuzz_targets/connect_wire.rs` and `connect/tests/it/fuzz_replay.rs`.

use mlx5_connect::wire::Message;

/// Run one input.
pub fn run(data: &[u8]) {
    // The framing reader first sees only the header: it must not panic on any prefix.
    let _ = Message::frame_len(data);
    if let Ok(m) = Message::decode(data) {
        let again = m.encode().expect("a decoded message encodes");
        assert_eq!(again, data, "decode → encode is not the identity for {m:?}");
        assert_eq!(Message::frame_len(data).ok(), Some(data.len()));
        assert_eq!(Message::decode(&again), Ok(m));
    }
}
