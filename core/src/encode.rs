//! Encoding a whole utterance for non-streamed replies: wav, pcm, flac, mp3, opus (Ogg).
//!
//! OWNER: helper B (encoders). Signature below is the agreed interface.

use crate::config::ResponseFormat;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Encode mono 16-bit samples at `sample_rate` Hz as one complete file of `format`.
pub fn encode(
    format: ResponseFormat,
    samples: &[i16],
    sample_rate: u32,
) -> Result<Vec<u8>, EncodeError> {
    let _ = (format, samples, sample_rate);
    todo!("helper B")
}
