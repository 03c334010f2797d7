//! What the ping-pong examples share (placeholder).
