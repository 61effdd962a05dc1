//! The one policy for encoding whole files, for both protocols: every [`EncodeJob`] the core
//! hands out (a non-streamed WebSocket utterance, a non-streamed HTTP response) runs on tokio's
//! blocking pool, never on a runtime thread, where an mp3 or opus file of minutes would stall
//! every connection that thread serves.

use speechstream_core::encode::{EncodeJob, Encoded};

/// Run `job` on the blocking pool and wait for it.
pub(crate) async fn encode_off_runtime(job: EncodeJob) -> Encoded {
    match tokio::task::spawn_blocking(move || job.run()).await {
        Ok(encoded) => encoded,
        Err(e) => Encoded(Err(format!("audio encoding failed: {e}"))),
    }
}
