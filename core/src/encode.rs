//! Encoding audio for replies: wav, pcm, flac, mp3, opus (Ogg), aac (ADTS), whole ([`encode`]) or as it
//! is made ([`StreamEncoder`]; [`AudioStream`] resamples too); G.711 mu-law and A-law bytes
//! ([`ulaw`], [`alaw`]).
//!
//! Every format takes mono 16-bit samples and returns one complete file (docs/protocol.md §e.1).
//! Empty input still yields a valid, decodable file of zero length. wav, pcm and flac are
//! written here without dependencies; mp3 uses LAME (built from source by `mp3lame-sys`),
//! opus uses the system libopus, wrapped in an Ogg stream written here; aac uses FFmpeg's
//! libavcodec, loaded at run time ([`aac_available`] says whether this machine has it), in
//! ADTS headers written here.

mod aac;
mod flac;
mod g711;
mod md5;
mod mp3;
mod ogg;
mod opus;

use crate::config::{ResponseFormat, G711_RATE};
use crate::resample::{resample, Resampler};

/// Why audio could not be encoded (a bad sample rate, an encoder library's error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError(pub String);

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

/// Encode mono 16-bit samples at `sample_rate` Hz as one complete file of `format`.
pub fn encode(format: ResponseFormat, samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    if sample_rate == 0 {
        return Err(EncodeError(format!("cannot encode {}: sample rate must be positive", format.as_str())));
    }
    match format {
        ResponseFormat::Wav => wav(samples, sample_rate),
        ResponseFormat::Pcm => Ok(pcm(samples)),
        ResponseFormat::Flac => flac::encode(samples, sample_rate),
        ResponseFormat::Mp3 => mp3::encode(samples, sample_rate),
        ResponseFormat::Opus => opus::encode(samples, sample_rate),
        ResponseFormat::Aac => aac::encode(samples, sample_rate),
        // G.711 is 8 kHz only: other rates are resampled first.
        ResponseFormat::Ulaw | ResponseFormat::Alaw => {
            let resampled;
            let samples = if sample_rate == G711_RATE {
                samples
            } else {
                resampled = resample(sample_rate, G711_RATE, samples).map_err(|e| EncodeError(e.0))?;
                &resampled[..]
            };
            Ok(if format == ResponseFormat::Ulaw { ulaw(samples) } else { alaw(samples) })
        }
    }
}

/// Whether this machine can encode `aac` (FFmpeg's libavcodec 59, 60 or 61 is installed); if
/// not, the error says what to install. Loads the library on the first call.
pub fn aac_available() -> Result<(), EncodeError> {
    aac::available()
}

/// How a streamed body is paged, where the format has a choice (Ogg Opus pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Paging {
    /// The whole-file layout: the streamed bytes are exactly those of [`encode`] (a body sent
    /// as it is made, without `stream_format`).
    AsFile,
    /// Out with every push: each piece of audio leaves at once (`stream_format` streams).
    Eager,
}

/// One response encoded as the audio arrives: [`StreamEncoder::push`] returns the bytes ready
/// so far (possibly none: a format may hold part of a frame), [`StreamEncoder::finish`] the
/// rest. Their concatenation is one complete, decodable file of the format:
/// - pcm: the samples as they come; wav: the header that leaves both sizes open
///   (0xFFFFFFFF), then the samples;
/// - flac: STREAMINFO with the length and MD5 unknown, a frame per 4096-sample block;
/// - mp3: LAME frames without the Info tag (its delay and padding stay in the decoded audio);
/// - opus: Ogg pages; with [`Paging::AsFile`] the very bytes of [`encode`];
/// - aac: ADTS frames, a frame per 1024 samples, the very bytes of [`encode`].
pub struct StreamEncoder {
    kind: StreamKind,
}

enum StreamKind {
    Pcm,
    Wav { header: Option<[u8; WAV_HEADER_LEN]> },
    Flac(flac::FlacStream),
    Mp3(mp3::Mp3Stream),
    Opus(opus::OpusStream),
    Aac(aac::AacStream),
    G711 { alaw: bool },
}

impl std::fmt::Debug for StreamEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamEncoder").finish_non_exhaustive()
    }
}

impl StreamEncoder {
    /// A stream of `format` at `sample_rate` Hz. Errors for rates the format cannot carry.
    pub fn new(format: ResponseFormat, sample_rate: u32, paging: Paging) -> Result<StreamEncoder, EncodeError> {
        if sample_rate == 0 {
            return Err(EncodeError(format!("cannot encode {}: sample rate must be positive", format.as_str())));
        }
        let kind = match format {
            ResponseFormat::Pcm => StreamKind::Pcm,
            ResponseFormat::Wav => StreamKind::Wav { header: Some(streaming_wav_header(sample_rate)) },
            ResponseFormat::Flac => StreamKind::Flac(flac::FlacStream::new(sample_rate)?),
            ResponseFormat::Mp3 => StreamKind::Mp3(mp3::Mp3Stream::new(sample_rate)?),
            ResponseFormat::Opus => StreamKind::Opus(opus::OpusStream::new(sample_rate, paging == Paging::Eager)?),
            ResponseFormat::Aac => StreamKind::Aac(aac::AacStream::new(sample_rate)?),
            ResponseFormat::Ulaw | ResponseFormat::Alaw if sample_rate != G711_RATE => {
                return Err(EncodeError(format!("{} is {G711_RATE} Hz only, not {sample_rate} Hz", format.as_str())))
            }
            ResponseFormat::Ulaw => StreamKind::G711 { alaw: false },
            ResponseFormat::Alaw => StreamKind::G711 { alaw: true },
        };
        Ok(StreamEncoder { kind })
    }

    /// Encode more samples; returns the bytes that are ready.
    pub fn push(&mut self, samples: &[i16]) -> Result<Vec<u8>, EncodeError> {
        match &mut self.kind {
            StreamKind::Pcm => Ok(pcm(samples)),
            StreamKind::Wav { header } => {
                let mut out = header.take().map(|h| h.to_vec()).unwrap_or_default();
                push_s16le(&mut out, samples);
                Ok(out)
            }
            StreamKind::Flac(s) => s.push(samples),
            StreamKind::Mp3(s) => s.push(samples),
            StreamKind::Opus(s) => s.push(samples),
            StreamKind::Aac(s) => s.push(samples),
            StreamKind::G711 { alaw } => Ok(if *alaw { self::alaw(samples) } else { ulaw(samples) }),
        }
    }

    /// End of audio: the bytes that close the file.
    pub fn finish(self) -> Result<Vec<u8>, EncodeError> {
        match self.kind {
            StreamKind::Pcm => Ok(Vec::new()),
            StreamKind::Wav { header } => Ok(header.map(|h| h.to_vec()).unwrap_or_default()),
            StreamKind::Flac(s) => s.finish(),
            StreamKind::Mp3(s) => s.finish(),
            StreamKind::Opus(s) => s.finish(),
            StreamKind::Aac(s) => s.finish(),
            StreamKind::G711 { .. } => Ok(Vec::new()),
        }
    }
}

/// A response's audio encoded as it arrives: the engine's s16le PCM, converted to the
/// response's rate ([`Resampler`], chunk-independent) and encoded ([`StreamEncoder`]).
#[derive(Debug)]
pub struct AudioStream {
    from: u32,
    resampler: Resampler,
    encoder: StreamEncoder,
    samples: Vec<i16>,
    converted: Vec<i16>,
}

impl AudioStream {
    /// A stream of `format` at `to` Hz from audio at `from` Hz.
    pub fn new(format: ResponseFormat, from: u32, to: u32, paging: Paging) -> Result<AudioStream, EncodeError> {
        let resampler = Resampler::new(from, to).map_err(|e| EncodeError(e.0))?;
        let encoder = StreamEncoder::new(format, to, paging)?;
        Ok(AudioStream { from, resampler, encoder, samples: Vec::new(), converted: Vec::new() })
    }

    /// More s16le PCM at `sample_rate` Hz (the rate the stream began with); returns the bytes
    /// that are ready.
    pub fn push_s16le(&mut self, pcm: &[u8], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
        if sample_rate != self.from {
            return Err(EncodeError(format!(
                "Audio sample rate changed during streaming: {} Hz to {sample_rate} Hz",
                self.from
            )));
        }
        self.samples.clear();
        self.samples.extend(s16le_samples(pcm));
        self.converted.clear();
        self.resampler.push(&self.samples, &mut self.converted);
        self.encoder.push(&self.converted)
    }

    /// End of audio: the bytes that close the file.
    pub fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        self.converted.clear();
        self.resampler.finish(&mut self.converted);
        let mut out = self.encoder.push(&self.converted)?;
        out.extend(self.encoder.finish()?);
        Ok(out)
    }
}

/// The 44-byte header that starts a streamed WAV: mono 16-bit PCM with both sizes 0xFFFFFFFF,
/// as the length is unknown when it is sent.
pub fn streaming_wav_header(sample_rate: u32) -> [u8; WAV_HEADER_LEN] {
    let mut h = [0u8; WAV_HEADER_LEN];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, b"RIFF");
    put(4, &u32::MAX.to_le_bytes());
    put(8, b"WAVE");
    put(12, b"fmt ");
    put(16, &16u32.to_le_bytes());
    put(20, &1u16.to_le_bytes()); // PCM
    put(22, &1u16.to_le_bytes()); // channels
    put(24, &sample_rate.to_le_bytes());
    put(28, &sample_rate.saturating_mul(2).to_le_bytes()); // byte rate
    put(32, &2u16.to_le_bytes()); // block align
    put(34, &16u16.to_le_bytes()); // bits per sample
    put(36, b"data");
    put(40, &u32::MAX.to_le_bytes());
    h
}

/// G.711 μ-law, one byte per sample (headerless, as telephony carries it; normally at 8 kHz).
pub fn ulaw(samples: &[i16]) -> Vec<u8> {
    g711::encode_ulaw(samples)
}

/// G.711 A-law, one byte per sample (headerless; normally at 8 kHz).
pub fn alaw(samples: &[i16]) -> Vec<u8> {
    g711::encode_alaw(samples)
}

/// A non-streamed utterance's audio, collected until its end and then encoded as one file:
/// the one collect-and-encode path of both protocols (the WebSocket's `stream_audio=false`,
/// HTTP's default). It is bounded: past `max_seconds` of audio, [`WholeAudio::push`] refuses.
#[derive(Debug)]
pub struct WholeAudio {
    format: ResponseFormat,
    max_seconds: u32,
    pcm: Vec<u8>,
    sample_rate: Option<u32>,
}

impl WholeAudio {
    /// Collect audio for one `format` file of at most `max_seconds`.
    pub fn new(format: ResponseFormat, max_seconds: u32) -> WholeAudio {
        WholeAudio { format, max_seconds, pcm: Vec::new(), sample_rate: None }
    }

    /// Add a chunk of s16le PCM at `sample_rate`.
    ///
    /// # Errors
    ///
    /// The file would be longer than `max_seconds`: the utterance fails, and `instead` (the
    /// caller's streamed alternative, e.g. `stream_audio=true`) goes into the message.
    pub fn push(&mut self, pcm: &[u8], sample_rate: u32, instead: &str) -> Result<(), String> {
        let limit = u64::from(self.max_seconds) * u64::from(sample_rate) * 2;
        if (self.pcm.len() + pcm.len()) as u64 > limit {
            return Err(whole_audio_too_long(self.max_seconds, instead));
        }
        self.sample_rate = Some(sample_rate);
        self.pcm.extend_from_slice(pcm);
        Ok(())
    }

    /// Bytes of PCM collected.
    pub fn len(&self) -> usize {
        self.pcm.len()
    }

    /// Nothing collected yet.
    pub fn is_empty(&self) -> bool {
        self.pcm.is_empty()
    }

    /// The encoding of what was collected, at its rate (`default_rate` when no audio came).
    pub fn finish(self, default_rate: u32) -> EncodeJob {
        let sample_rate = self.sample_rate.unwrap_or(default_rate);
        EncodeJob { format: self.format, sample_rate, out_rate: sample_rate, pcm: self.pcm }
    }
}

/// Why a non-streamed utterance failed past its limit; `instead` names the streamed
/// alternative of the caller's protocol.
pub fn whole_audio_too_long(seconds: u32, instead: &str) -> String {
    format!("audio longer than {seconds} seconds cannot be sent as one file; use {instead} for longer texts")
}

/// A whole file to encode: CPU work (mp3 and opus especially) that a driver runs where it does
/// not hold up other connections, then hands back ([`Session::handle_encoded`],
/// [`SpeechResponse::handle_encoded`]). A driver with nothing else to do runs it at once.
///
/// [`Session::handle_encoded`]: crate::session::Session::handle_encoded
/// [`SpeechResponse::handle_encoded`]: crate::speech_response::SpeechResponse::handle_encoded
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeJob {
    format: ResponseFormat,
    sample_rate: u32,
    out_rate: u32,
    pcm: Vec<u8>,
}

impl EncodeJob {
    /// The same file at `rate` Hz: the audio is resampled before it is encoded.
    pub fn at_rate(self, rate: u32) -> EncodeJob {
        EncodeJob { out_rate: rate, ..self }
    }

    /// Encode: the file, or why it failed (`audio encoding failed: ...`).
    pub fn run(self) -> Encoded {
        let file = if self.out_rate == self.sample_rate {
            encode_s16le(self.format, self.pcm, self.sample_rate)
        } else {
            let samples: Vec<i16> = s16le_samples(&self.pcm).collect();
            resample(self.sample_rate, self.out_rate, &samples)
                .map_err(|e| EncodeError(e.0))
                .and_then(|samples| encode(self.format, &samples, self.out_rate))
        };
        Encoded(file.map_err(|e| format!("audio encoding failed: {e}")))
    }
}

/// The result of an [`EncodeJob`]: the file, or why it could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded(pub Result<Vec<u8>, String>);

/// Length of the canonical RIFF/WAVE header: RIFF + fmt (16 bytes of PCM fields) + data.
const WAV_HEADER_LEN: usize = 44;

/// Encode mono s16le PCM bytes (what engines produce) at `sample_rate` Hz as one complete file
/// of `format`. pcm and wav take the bytes as they are, without converting to samples and back.
/// A trailing odd byte (half a sample) is dropped.
pub fn encode_s16le(format: ResponseFormat, mut pcm: Vec<u8>, sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    pcm.truncate(pcm.len() & !1);
    match format {
        ResponseFormat::Pcm if sample_rate > 0 => Ok(pcm),
        ResponseFormat::Wav if sample_rate > 0 => {
            let mut out = wav_header(pcm.len(), sample_rate)?;
            out.extend_from_slice(&pcm);
            Ok(out)
        }
        _ => {
            let samples: Vec<i16> = s16le_samples(&pcm).collect();
            encode(format, &samples, sample_rate)
        }
    }
}

/// RIFF/WAVE, PCM 16-bit mono, the 44-byte header libsndfile writes for PCM_16.
fn wav(samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    let mut out = wav_header(samples.len() * 2, sample_rate)?;
    push_s16le(&mut out, samples);
    Ok(out)
}

/// The header for `data_len` bytes of audio, in a vector with room for them.
fn wav_header(data_len: usize, sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    let data_len = u32::try_from(data_len)
        .ok()
        .filter(|&n| n <= u32::MAX - 36)
        .ok_or_else(|| EncodeError("cannot encode wav: audio longer than 4 GiB".into()))?;
    let byte_rate = sample_rate
        .checked_mul(2)
        .ok_or_else(|| EncodeError(format!("cannot encode wav: sample rate {sample_rate} Hz")))?;
    let mut out = Vec::with_capacity(WAV_HEADER_LEN + data_len as usize);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVE");
    out.extend_from_slice(b"fmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // WAVE_FORMAT_PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // channels
    out.extend_from_slice(&sample_rate.to_le_bytes());
    out.extend_from_slice(&byte_rate.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes()); // block align
    out.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    Ok(out)
}

/// The samples of s16le PCM bytes (a trailing odd byte is dropped).
fn s16le_samples(pcm: &[u8]) -> impl Iterator<Item = i16> + '_ {
    pcm.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]]))
}

/// Headerless signed 16-bit little-endian.
fn pcm(samples: &[i16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    push_s16le(&mut out, samples);
    out
}

fn push_s16le(out: &mut Vec<u8>, samples: &[i16]) {
    out.reserve(samples.len() * 2);
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[test]
    fn s16le_bytes_encode_like_samples() {
        let samples: Vec<i16> = (0..4801).map(|i| ((i * 7919) % 65536 - 32768) as i16).collect();
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        for format in [ResponseFormat::Wav, ResponseFormat::Pcm, ResponseFormat::Flac] {
            assert_eq!(encode_s16le(format, bytes.clone(), 24_000), encode(format, &samples, 24_000));
        }
        let mut odd = bytes.clone();
        odd.push(7);
        assert_eq!(encode_s16le(ResponseFormat::Wav, odd, 24_000), encode(ResponseFormat::Wav, &samples, 24_000));
        assert!(encode_s16le(ResponseFormat::Wav, bytes.clone(), 0).is_err());
        assert!(encode_s16le(ResponseFormat::Pcm, bytes, 0).is_err());
    }

    #[test]
    fn wav_header_fields() {
        let samples = [0i16, 1, -1, i16::MAX, i16::MIN];
        let out = encode(ResponseFormat::Wav, &samples, 24_000).expect("wav");
        assert_eq!(out.len(), 44 + 10);
        assert_eq!(&out[0..4], b"RIFF");
        assert_eq!(u32_at(&out, 4), 36 + 10);
        assert_eq!(&out[8..12], b"WAVE");
        assert_eq!(&out[12..16], b"fmt ");
        assert_eq!(u32_at(&out, 16), 16);
        assert_eq!(u16_at(&out, 20), 1);
        assert_eq!(u16_at(&out, 22), 1);
        assert_eq!(u32_at(&out, 24), 24_000);
        assert_eq!(u32_at(&out, 28), 48_000);
        assert_eq!(u16_at(&out, 32), 2);
        assert_eq!(u16_at(&out, 34), 16);
        assert_eq!(&out[36..40], b"data");
        assert_eq!(u32_at(&out, 40), 10);
        assert_eq!(&out[44..], &[0, 0, 1, 0, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x80]);
    }

    #[test]
    fn wav_empty_is_a_bare_header() {
        let out = encode(ResponseFormat::Wav, &[], 44_100).expect("wav");
        assert_eq!(out.len(), 44);
        assert_eq!(u32_at(&out, 4), 36);
        assert_eq!(u32_at(&out, 40), 0);
        assert_eq!(u32_at(&out, 24), 44_100);
    }

    #[test]
    fn pcm_is_raw_little_endian() {
        let out = encode(ResponseFormat::Pcm, &[0x0102, -2], 24_000).expect("pcm");
        assert_eq!(out, vec![0x02, 0x01, 0xfe, 0xff]);
        assert!(encode(ResponseFormat::Pcm, &[], 24_000).expect("pcm").is_empty());
    }

    #[test]
    fn zero_sample_rate_is_an_error() {
        for format in crate::config::FORMAT_VALUES.iter().copied() {
            let err = encode(format, &[1, 2, 3], 0).expect_err("rate 0");
            assert!(err.0.contains("sample rate"), "{err}");
        }
    }
}
