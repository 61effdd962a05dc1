//! The paths of the speech endpoints (docs/protocol.md §a).

/// The streaming speech WebSocket endpoint (docs/protocol.md §a).
pub const STREAM_PATH: &str = "/v1/audio/speech/stream";
/// The OpenAI-compatible speech endpoint (docs/protocol.md §f).
pub const SPEECH_PATH: &str = "/v1/audio/speech";
/// Upstream vLLM-Omni's batch of whole files in one request.
pub const BATCH_PATH: &str = "/v1/audio/speech/batch";
