//! MP3 through LAME: mono CBR with a LAME/Info tag in the first frame, so that decoders
//! which read it (ffmpeg, mpg123, browsers) trim the encoder delay and the padding.

use mp3lame_encoder::{Bitrate, Builder, FlushGap, Mode, MonoPcm, Quality};

use super::EncodeError;

/// 64 kb/s mono is plenty for speech at 24 kHz and valid for every MPEG version.
const BITRATE: Bitrate = Bitrate::Kbps64;
/// Feed LAME bounded pieces: its API counts samples in a C int and we size output per call.
const CHUNK: usize = 16_384;

/// A LAME encoder for mono CBR at `sample_rate`, with or without the LAME/Info tag frame.
fn build(sample_rate: u32, tag: bool) -> Result<mp3lame_encoder::Encoder, EncodeError> {
    // The MPEG-1/2/2.5 rates; anything else LAME would silently resample.
    if !matches!(sample_rate, 8_000 | 11_025 | 12_000 | 16_000 | 22_050 | 24_000 | 32_000 | 44_100 | 48_000) {
        return Err(EncodeError(format!(
            "cannot encode mp3: sample rate {sample_rate} Hz is not an MPEG audio rate \
             (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100 or 48000 Hz)"
        )));
    }
    let mut builder = Builder::new().ok_or_else(|| EncodeError("mp3: LAME could not allocate".into()))?;
    builder.set_num_channels(1).map_err(|e| lame("channels", &e))?;
    builder.set_sample_rate(sample_rate).map_err(|e| lame("sample rate", &e))?;
    builder
        .set_output_sample_rate(std::num::NonZeroU32::new(sample_rate))
        .map_err(|e| lame("output sample rate", &e))?;
    builder.set_mode(Mode::Mono).map_err(|e| lame("mode", &e))?;
    builder.set_brate(BITRATE).map_err(|e| lame("bitrate", &e))?;
    builder.set_quality(Quality::Good).map_err(|e| lame("quality", &e))?;
    builder.set_to_write_vbr_tag(tag).map_err(|e| lame("LAME tag", &e))?;
    builder.build().map_err(|e| lame("init", &e))
}

fn lame(what: &str, e: &dyn std::fmt::Display) -> EncodeError {
    EncodeError(format!("mp3: {what}: {e}"))
}

/// Encode `samples` and append the frames LAME has ready to `out`.
fn feed(encoder: &mut mp3lame_encoder::Encoder, samples: &[i16], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    for chunk in samples.chunks(CHUNK) {
        out.reserve(mp3lame_encoder::max_required_buffer_size(chunk.len()));
        encoder.encode_to_vec(MonoPcm(chunk), out).map_err(|e| lame("encoding", &e))?;
    }
    Ok(())
}

/// lame_encode_flush: encodes what LAME still buffers, padded with silence. (The "nogap"
/// flush only empties the bit reservoir and would drop the tail.)
fn flush(encoder: &mut mp3lame_encoder::Encoder, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.reserve(mp3lame_encoder::max_required_buffer_size(0));
    encoder.flush_to_vec::<FlushGap>(out).map_err(|e| lame("flushing", &e))?;
    Ok(())
}

pub(super) fn encode(samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    let mut encoder = build(sample_rate, true)?;
    // 64 kb/s is 8 kB per second of audio.
    let mut out = Vec::with_capacity(samples.len() / 2 + 8192);
    feed(&mut encoder, samples, &mut out)?;
    flush(&mut encoder, &mut out)?;

    // LAME leaves a placeholder frame at the start; the tag (delay, padding, length)
    // can only be computed now and overwrites it in place.
    let tag_len = encoder.lame_tag_size();
    if tag_len > 0 {
        let mut tag = Vec::with_capacity(tag_len);
        encoder
            .lame_tag_encode_to_vec(&mut tag)
            .ok_or_else(|| EncodeError("mp3: LAME tag could not be written".into()))?;
        let slot =
            out.get_mut(..tag.len()).ok_or_else(|| EncodeError("mp3: output shorter than its LAME tag".into()))?;
        slot.copy_from_slice(&tag);
    }
    Ok(out)
}

/// MP3 frames made as audio arrives. No LAME/Info tag (it can only be written once the
/// length is known), so a decoder keeps LAME's delay and padding: about 50 ms more audio than
/// went in, silence at both ends.
pub(super) struct Mp3Stream(mp3lame_encoder::Encoder);

impl Mp3Stream {
    pub(super) fn new(sample_rate: u32) -> Result<Mp3Stream, EncodeError> {
        Ok(Mp3Stream(build(sample_rate, false)?))
    }

    pub(super) fn push(&mut self, samples: &[i16]) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(samples.len() / 2 + 1024);
        feed(&mut self.0, samples, &mut out)?;
        Ok(out)
    }

    pub(super) fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        flush(&mut self.0, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_with_an_mpeg2_mono_frame_carrying_the_info_tag() {
        let samples: Vec<i16> = (0..24_000).map(|i| ((i as f64 * 0.1).sin() * 5000.0) as i16).collect();
        let out = encode(&samples, 24_000).expect("mp3");
        // Frame sync, MPEG-2 (ID bits 10), layer III, no CRC.
        assert_eq!(out[0], 0xff);
        assert_eq!(out[1] & 0xfe, 0xf2);
        // Bitrate index 8 (64 kb/s in MPEG-2 layer III), rate index 1 (24 kHz).
        assert_eq!(out[2] >> 4, 8);
        assert_eq!((out[2] >> 2) & 3, 1);
        assert_eq!(out[3] >> 6, 3, "mono");
        // CBR streams carry "Info" (not "Xing") after the side info (9 bytes, MPEG-2 mono).
        assert_eq!(&out[4 + 9..4 + 9 + 4], b"Info");
    }

    #[test]
    fn empty_input_still_produces_frames() {
        let out = encode(&[], 24_000).expect("mp3");
        assert!(out.len() > 100, "{} bytes", out.len());
        assert_eq!(out[0], 0xff);
    }

    #[test]
    fn rejects_non_mpeg_rates() {
        let err = encode(&[0; 10], 25_000).expect_err("25 kHz");
        assert!(err.0.contains("25000 Hz"), "{err}");
    }
}
