//! Every response format, encoded by `encode::encode` and decoded by independent tools
//! (ffmpeg for all formats, sox for wav and flac): length and content must survive.
//!
//! ffmpeg and sox are required, not optional: CI installs them from scripts/apt-packages.txt.
//! A missing tool fails the test with instructions rather than skipping it.

use std::path::PathBuf;
use std::process::Command;

use speechstream_core::config::ResponseFormat;
use speechstream_core::encode::{encode, Paging, StreamEncoder};

const RATE: u32 = 24_000;

/// 440 Hz and 1000 Hz, about -8 dBFS in total, deterministic.
fn two_tones(len: usize) -> Vec<i16> {
    (0..len)
        .map(|i| {
            let t = i as f64 / f64::from(RATE);
            let x = 0.25 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + 0.15 * (2.0 * std::f64::consts::PI * 1000.0 * t).sin();
            (x * 32767.0).round() as i16
        })
        .collect()
}

/// Everything a lossless coder can trip on: full-scale extremes, white noise, a square
/// wave, digital silence (constant blocks), and a length that leaves a 3-sample last block.
fn hostile(len: usize) -> Vec<i16> {
    let mut x = 0x2545_f491u32;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            match (i / 3000) % 5 {
                0 => x as i16,
                1 => {
                    if (i / 7) % 2 == 0 {
                        i16::MAX
                    } else {
                        i16::MIN
                    }
                }
                2 => 0,
                3 => ((i as f64 * 0.3).sin() * 30000.0) as i16 ^ (x as i16 & 0x3),
                _ => -1234,
            }
        })
        .collect()
}

fn require(tool: &str) {
    let ok = Command::new(tool)
        .arg(if tool == "sox" { "--version" } else { "-version" })
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{tool}` is not installed or does not run. These tests decode with real tools: \
         run the project's setup script, or `apt-get install -y $(cat scripts/apt-packages.txt)`"
    );
}

/// A temp file that removes itself.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("speechstream-encode-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).expect("write temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn s16le(bytes: &[u8]) -> Vec<i16> {
    assert_eq!(bytes.len() % 2, 0, "odd byte count from decoder");
    bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().expect("spawn decoder");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Decode with ffmpeg to s16le mono 24 kHz.
fn ffmpeg_decode(format: ResponseFormat, bytes: &[u8], name: &str) -> Vec<i16> {
    require("ffmpeg");
    let file = TempFile::new(&format!("{name}.{}", format.as_str()), bytes);
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error"]);
    if format == ResponseFormat::Pcm {
        cmd.args(["-f", "s16le", "-ar", "24000", "-ac", "1"]);
    }
    cmd.arg("-i").arg(&file.0);
    cmd.args(["-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1", "-ar", "24000", "-"]);
    s16le(&run(&mut cmd))
}

fn sox_decode(bytes: &[u8], ext: &str, name: &str) -> Vec<i16> {
    require("sox");
    let file = TempFile::new(&format!("{name}.sox.{ext}"), bytes);
    let mut cmd = Command::new("sox");
    cmd.args(["-V1", "-t", ext]).arg(&file.0);
    cmd.args(["-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1", "-L", "-"]);
    s16le(&run(&mut cmd))
}

/// Power of `x` at `freq` Hz (Goertzel), normalised by length.
fn goertzel(x: &[i16], freq: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * freq / f64::from(RATE);
    let coeff = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s0 = f64::from(v) + coeff * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    (s1 * s1 + s2 * s2 - coeff * s1 * s2) / (x.len() as f64).powi(2)
}

/// The decoded audio carries both tones at about their original level, and nothing
/// comparable at 3 kHz (where the input has no energy).
fn assert_tones(decoded: &[i16], original: &[i16], what: &str) {
    for f in [440.0, 1000.0] {
        let (got, want) = (goertzel(decoded, f), goertzel(original, f));
        let db = 10.0 * (got / want).log10();
        assert!(db.abs() < 1.5, "{what}: {f} Hz is {db:.2} dB off the input");
        let floor = goertzel(decoded, 3000.0);
        assert!(got > 1000.0 * floor, "{what}: {f} Hz power {got:.1} not well above the 3 kHz floor {floor:.1}");
    }
}

/// Lag (decoded vs original, within ±max_lag) that maximises the cross-correlation,
/// and the normalised correlation there.
fn best_alignment(decoded: &[i16], original: &[i16], max_lag: i64) -> (i64, f64) {
    let energy = |x: &[i16]| x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>();
    let norm = (energy(decoded) * energy(original)).sqrt().max(1.0);
    let mut best = (0, f64::MIN);
    for lag in -max_lag..=max_lag {
        let mut acc = 0.0;
        for (i, &o) in original.iter().enumerate() {
            let j = i as i64 + lag;
            if let Some(&d) = usize::try_from(j).ok().and_then(|j| decoded.get(j)) {
                acc += f64::from(o) * f64::from(d);
            }
        }
        if acc > best.1 {
            best = (lag, acc);
        }
    }
    (best.0, best.1 / norm)
}

fn encoded(format: ResponseFormat, samples: &[i16]) -> Vec<u8> {
    match encode(format, samples, RATE) {
        Ok(bytes) => bytes,
        Err(e) => panic!("encoding {} failed: {e}", format.as_str()),
    }
}

fn signals() -> Vec<(&'static str, Vec<i16>)> {
    vec![("1s", two_tones(24_000)), ("0.37s", two_tones(8_880)), ("empty", Vec::new())]
}

#[test]
fn wav_decodes_bit_exact_with_ffmpeg_and_sox() {
    for (name, samples) in signals() {
        let bytes = encoded(ResponseFormat::Wav, &samples);
        assert_eq!(bytes.len(), 44 + 2 * samples.len());
        assert_eq!(ffmpeg_decode(ResponseFormat::Wav, &bytes, name), samples, "{name}");
        assert_eq!(sox_decode(&bytes, "wav", name), samples, "{name}");
    }
}

#[test]
fn sox_reads_the_wav_header() {
    require("sox");
    let samples = two_tones(8_880);
    let bytes = encoded(ResponseFormat::Wav, &samples);
    let file = TempFile::new("info.wav", &bytes);
    let info = |flag: &str| {
        let out = run(Command::new("sox").args(["--i", flag]).arg(&file.0));
        String::from_utf8_lossy(&out).trim().to_owned()
    };
    assert_eq!(info("-s"), "8880", "samples");
    assert_eq!(info("-r"), "24000", "rate");
    assert_eq!(info("-c"), "1", "channels");
    assert_eq!(info("-b"), "16", "bits");
    assert_eq!(info("-e"), "Signed Integer PCM", "encoding");
}

#[test]
fn pcm_decodes_bit_exact() {
    for (name, samples) in signals() {
        let bytes = encoded(ResponseFormat::Pcm, &samples);
        assert_eq!(ffmpeg_decode(ResponseFormat::Pcm, &bytes, name), samples, "{name}");
    }
}

#[test]
fn flac_decodes_bit_exact_with_ffmpeg_and_sox() {
    let mut cases = signals();
    cases.push(("hostile", hostile(4096 * 5 + 3)));
    cases.push(("tiny", vec![5, -7, 300]));
    cases.push(("one", vec![-32768]));
    for (name, samples) in cases {
        let bytes = encoded(ResponseFormat::Flac, &samples);
        let decoded = ffmpeg_decode(ResponseFormat::Flac, &bytes, name);
        assert_eq!(decoded.len(), samples.len(), "{name}: sample count");
        assert!(decoded == samples, "{name}: ffmpeg decode is not bit-exact");
        assert!(sox_decode(&bytes, "flac", name) == samples, "{name}: sox (libFLAC) decode is not bit-exact");
    }
}

#[test]
fn flac_streaminfo_md5_matches_the_audio() {
    require("ffmpeg");
    let samples = hostile(10_000);
    let bytes = encoded(ResponseFormat::Flac, &samples);
    let file = TempFile::new("md5.flac", &bytes);
    let out = run(Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-i"]).arg(&file.0).args([
        "-f",
        "md5",
        "-acodec",
        "pcm_s16le",
        "-",
    ]));
    let text = String::from_utf8_lossy(&out);
    let want: String = bytes[26..42].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(text.trim(), format!("MD5={want}"));
}

#[test]
fn flac_compresses_speechlike_audio() {
    let samples = two_tones(24_000);
    let bytes = encoded(ResponseFormat::Flac, &samples);
    assert!(
        bytes.len() < samples.len(),
        "{} bytes for {} samples: under half of raw expected",
        bytes.len(),
        samples.len()
    );
}

#[test]
fn mp3_keeps_length_and_tones() {
    for (name, samples) in signals() {
        let bytes = encoded(ResponseFormat::Mp3, &samples);
        let decoded = ffmpeg_decode(ResponseFormat::Mp3, &bytes, name);
        // ffmpeg trims LAME's delay and padding from the Info tag, so the length is exact
        // up to rounding inside the decoder; allow one granule (576) of slack.
        let diff = decoded.len() as i64 - samples.len() as i64;
        assert!(diff.abs() <= 576, "{name}: decoded {} samples for {} in", decoded.len(), samples.len());
        if samples.is_empty() {
            // LAME's minimum output may decode to a few hundred samples, all silent.
            assert!(decoded.iter().all(|v| v.abs() <= 1), "empty mp3 is not silent");
            continue;
        }
        assert_tones(&decoded, &samples, &format!("mp3 {name}"));
        let (lag, corr) = best_alignment(&decoded, &samples, 1200);
        assert!(lag.abs() <= 2, "{name}: mp3 delay not trimmed, lag {lag}");
        assert!(corr > 0.95, "{name}: mp3 correlation {corr:.3}");
    }
}

#[test]
fn opus_keeps_exact_length_and_tones() {
    for (name, samples) in signals() {
        let bytes = encoded(ResponseFormat::Opus, &samples);
        let decoded = ffmpeg_decode(ResponseFormat::Opus, &bytes, name);
        // Pre-skip and the final granule trim to the exact length at 48 kHz; ffmpeg's
        // resampling back to 24 kHz may round by a sample or two.
        let diff = decoded.len() as i64 - samples.len() as i64;
        assert!(diff.abs() <= 2, "{name}: decoded {} samples for {} in", decoded.len(), samples.len());
        if samples.is_empty() {
            continue;
        }
        assert_tones(&decoded, &samples, &format!("opus {name}"));
        let (lag, corr) = best_alignment(&decoded, &samples, 1200);
        assert!(lag.abs() <= 2, "{name}: opus pre-skip wrong, lag {lag}");
        assert!(corr > 0.9, "{name}: opus correlation {corr:.3}");
    }
}

#[test]
fn opus_at_other_rates_keeps_length() {
    for rate in [8_000u32, 16_000, 48_000] {
        let samples: Vec<i16> = (0..rate as usize / 2)
            .map(|i| ((i as f64 * 440.0 / f64::from(rate) * std::f64::consts::TAU).sin() * 9000.0) as i16)
            .collect();
        let bytes = match encode(ResponseFormat::Opus, &samples, rate) {
            Ok(b) => b,
            Err(e) => panic!("opus at {rate}: {e}"),
        };
        require("ffmpeg");
        let file = TempFile::new(&format!("rate{rate}.opus"), &bytes);
        let out = run(Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-i"])
            .arg(&file.0)
            .args(["-f", "s16le", "-ac", "1", "-ar", "48000", "-"]));
        let decoded = s16le(&out);
        let want = samples.len() * (48_000 / rate as usize);
        assert!(
            (decoded.len() as i64 - want as i64).abs() <= 2,
            "{rate} Hz: {} samples at 48 kHz, want {want}",
            decoded.len()
        );
    }
}

/// ffmpeg decodes G.711 at 8 kHz.
fn ffmpeg_decode_g711(codec: &str, bytes: &[u8], name: &str) -> Vec<i16> {
    require("ffmpeg");
    let file = TempFile::new(&format!("{name}.{codec}"), bytes);
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-f", codec, "-ar", "8000", "-ac", "1", "-i"]).arg(&file.0);
    cmd.args(["-f", "s16le", "-acodec", "pcm_s16le", "-"]);
    s16le(&run(&mut cmd))
}

/// Every 16-bit value through our G.711 encoders and ffmpeg's decoders: one byte per sample,
/// each decoded value within one quantisation step of the input (a segment's step is 1/16 of
/// its lower edge: at most (|x| + 132) / 16, plus mu-law's clip above 32635), and monotonic.
#[test]
fn g711_decodes_with_ffmpeg_within_a_step() {
    let every: Vec<i16> = (i16::MIN..=i16::MAX).collect();
    for (codec, bytes) in
        [("mulaw", speechstream_core::encode::ulaw(&every)), ("alaw", speechstream_core::encode::alaw(&every))]
    {
        assert_eq!(bytes.len(), every.len(), "{codec}: one byte per sample");
        let decoded = ffmpeg_decode_g711(codec, &bytes, "every");
        assert_eq!(decoded.len(), every.len(), "{codec}");
        let mut last = i16::MIN;
        for (&x, &y) in every.iter().zip(&decoded) {
            let magnitude = (x as i32).abs();
            let step = (magnitude + 132) / 16 + 1 + (magnitude - 32_635).max(0);
            assert!((x as i32 - y as i32).abs() <= step, "{codec}: {x} decoded as {y}");
            assert!(y >= last, "{codec}: not monotonic at {x}");
            last = y;
        }
    }
}

/// 24 kHz speech-band tones, resampled to 8 kHz and G.711-encoded, decode with ffmpeg to the
/// same tones (telephony's path).
#[test]
fn telephony_path_keeps_the_tones() {
    let original = two_tones(24_000);
    let narrow = speechstream_core::resample::resample(RATE, 8_000, &original).expect("resample");
    assert_eq!(narrow.len(), 8_000);
    for (codec, bytes) in
        [("mulaw", speechstream_core::encode::ulaw(&narrow)), ("alaw", speechstream_core::encode::alaw(&narrow))]
    {
        let decoded = ffmpeg_decode_g711(codec, &bytes, "tones");
        assert_eq!(decoded.len(), narrow.len());
        // Back at 24 kHz, the tones are where they were, at their level.
        let wide = speechstream_core::resample::resample(8_000, RATE, &decoded).expect("resample back");
        assert_tones(&wide, &original, codec);
    }
}

/// Stream `samples` through a [`StreamEncoder`] in pieces of `piece` samples: the bytes of each
/// push, then of finish.
fn streamed(format: ResponseFormat, samples: &[i16], piece: usize, paging: Paging) -> Vec<Vec<u8>> {
    let mut encoder = StreamEncoder::new(format, RATE, paging).expect("stream encoder");
    let mut parts: Vec<Vec<u8>> = samples.chunks(piece.max(1)).map(|c| encoder.push(c).expect("push")).collect();
    parts.push(encoder.finish().expect("finish"));
    parts
}

/// Every format streamed as an engine delivers audio (uneven pieces) decodes with ffmpeg when
/// the stream ends: the lossless ones bit-exact, the lossy ones with their tones; and audio
/// leaves before the end (every push of a second of audio yields bytes).
#[test]
fn every_format_streams_and_decodes() {
    let samples = two_tones(24_000 * 3 + 517);
    for format in [
        ResponseFormat::Pcm,
        ResponseFormat::Wav,
        ResponseFormat::Flac,
        ResponseFormat::Mp3,
        ResponseFormat::Opus,
        ResponseFormat::Aac,
    ] {
        let name = format!("stream-{}", format.as_str());
        let parts = streamed(format, &samples, 24_000, Paging::Eager);
        // The first three pushes are a second of audio each (the fourth, 517 samples, may be
        // held back by a format's frame or block).
        for (i, part) in parts[..3].iter().enumerate() {
            assert!(!part.is_empty(), "{name}: push {i} of a second of audio gave no bytes");
        }
        let bytes: Vec<u8> = parts.concat();
        let decoded = ffmpeg_decode(format, &bytes, &name);
        match format {
            ResponseFormat::Pcm | ResponseFormat::Wav | ResponseFormat::Flac => {
                assert!(decoded == samples, "{name}: not bit-exact ({} vs {} samples)", decoded.len(), samples.len())
            }
            ResponseFormat::Opus => {
                assert!((decoded.len() as i64 - samples.len() as i64).abs() <= 2, "{name}: {} samples", decoded.len());
                assert_tones(&decoded, &samples, &name);
                let (lag, corr) = best_alignment(&decoded, &samples, 1200);
                assert!(lag.abs() <= 2 && corr > 0.9, "{name}: lag {lag}, correlation {corr:.3}");
            }
            ResponseFormat::Mp3 => {
                // No Info tag in a stream: LAME's delay and padding (under 2 granules each) stay.
                let extra = decoded.len() as i64 - samples.len() as i64;
                assert!((0..=4 * 1152).contains(&extra), "{name}: {} samples", decoded.len());
                let (lag, corr) = best_alignment(&decoded, &samples, 3000);
                assert!(lag >= 0 && corr > 0.95, "{name}: lag {lag}, correlation {corr:.3}");
                assert_tones(&decoded[lag as usize..lag as usize + samples.len()], &samples, &name);
            }
            ResponseFormat::Aac => {
                // The priming frame is not sent: the length rounded up to a 1024-sample frame.
                let extra = decoded.len() as i64 - samples.len() as i64;
                assert!((0..1024).contains(&extra), "{name}: {} samples", decoded.len());
                let (lag, corr) = best_alignment(&decoded, &samples, 1200);
                assert!(lag == 0 && corr > 0.95, "{name}: lag {lag}, correlation {corr:.3}");
                assert_tones(&decoded[1024..samples.len()], &samples[1024..], &name);
            }
            ResponseFormat::Ulaw | ResponseFormat::Alaw => unreachable!("G.711 has tests of its own"),
            other => unreachable!("{other:?} is not in FORMATS"),
        }
        // Empty streams are valid files too.
        let empty = streamed(format, &[], 1, Paging::Eager).concat();
        let decoded = ffmpeg_decode(format, &empty, &format!("{name}-empty"));
        assert!(decoded.iter().all(|v| v.abs() <= 1), "{name}: empty stream is not silent");
    }
}

/// A body streamed without `stream_format` has today's bytes: Ogg Opus paged as the file is,
/// whatever the pieces; lossless formats whose headers need the length (wav, flac) and mp3
/// (its Info tag) are sent whole instead, so this holds for pcm and opus.
#[test]
fn opus_streamed_as_file_has_the_file_bytes() {
    for len in [0usize, 1, 959, 960, 24_000 * 2 + 1, 960 * 50, 960 * 50 + 1, 960 * 100 - 313] {
        let samples = hostile(len);
        let whole = encoded(ResponseFormat::Opus, &samples);
        for piece in [1usize, 333, 960, 24_000, 100_000] {
            let parts = streamed(ResponseFormat::Opus, &samples, piece, Paging::AsFile);
            assert!(parts.concat() == whole, "opus of {len} samples in pieces of {piece} differs from the file");
        }
        assert!(
            streamed(ResponseFormat::Pcm, &samples, 777, Paging::AsFile).concat()
                == encoded(ResponseFormat::Pcm, &samples)
        );
    }
}

/// AAC (ADTS) at every rate we serve, whole and streamed in uneven pieces (the same bytes),
/// decoded by ffmpeg at its own rate: the length within a frame (the encoder's priming frame is
/// not sent, so the decoded audio lines up with the input), the tones at their level.
#[test]
fn aac_keeps_length_alignment_and_tones_at_every_rate() {
    require("ffmpeg");
    if let Err(e) = speechstream_core::encode::aac_available() {
        panic!("{e}");
    }
    for rate in [8_000u32, 16_000, 22_050, 24_000, 44_100, 48_000] {
        let len = rate as usize * 3 / 2 + 77;
        let tone = |i: usize, f: f64| (i as f64 * f / f64::from(rate) * std::f64::consts::TAU).sin();
        // Two tones, and a sweep from 200 Hz up so that the audio never repeats (for the alignment).
        let sweep = |i: usize| {
            (std::f64::consts::TAU * (200.0 + 300.0 * i as f64 / f64::from(rate)) * i as f64 / f64::from(rate)).sin()
        };
        let samples: Vec<i16> = (0..len)
            .map(|i| ((0.25 * tone(i, 440.0) + 0.15 * tone(i, 1000.0) + 0.1 * sweep(i)) * 32767.0).round() as i16)
            .collect();
        let whole = match encode(ResponseFormat::Aac, &samples, rate) {
            Ok(b) => b,
            Err(e) => panic!("aac at {rate}: {e}"),
        };
        let mut encoder = StreamEncoder::new(ResponseFormat::Aac, rate, Paging::Eager).expect("aac stream");
        let mut streamed = Vec::new();
        for piece in samples.chunks(rate as usize / 3 + 11) {
            streamed.extend(encoder.push(piece).expect("push"));
        }
        streamed.extend(encoder.finish().expect("finish"));
        assert!(streamed == whole, "{rate} Hz: streamed bytes differ from the file");

        let file = TempFile::new(&format!("rate{rate}.aac"), &whole);
        let probe = run(Command::new("ffprobe")
            .args(["-v", "error", "-show_entries", "stream=codec_name,profile,sample_rate,channels", "-of", "csv=p=0"])
            .arg(&file.0));
        assert_eq!(String::from_utf8_lossy(&probe).trim(), format!("aac,LC,{rate},1"), "{rate} Hz");
        let decoded = s16le(&run(Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-f", "aac", "-i"])
            .arg(&file.0)
            .args(["-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1", "-ar", &rate.to_string(), "-"])));
        let extra = decoded.len() as i64 - len as i64;
        assert!((0..1024).contains(&extra), "{rate} Hz: decoded {} samples for {len}", decoded.len());
        let (lag, corr) = best_alignment(&decoded, &samples, 1100);
        assert!(lag == 0 && corr > 0.95, "{rate} Hz: lag {lag}, correlation {corr:.3}");
        // Past the first frame (which fades in), each tone within 1.5 dB of the input's.
        let power = |x: &[i16], f: f64| {
            let (c, s) = x.iter().enumerate().fold((0.0, 0.0), |(c, s), (i, &v)| {
                let phase = i as f64 * f / f64::from(rate) * std::f64::consts::TAU;
                (c + f64::from(v) * phase.cos(), s + f64::from(v) * phase.sin())
            });
            c * c + s * s
        };
        for f in [440.0, 1000.0] {
            let db = 10.0 * (power(&decoded[1024..len], f) / power(&samples[1024..], f)).log10();
            assert!(db.abs() < 1.5, "{rate} Hz: {f} Hz is {db:.2} dB off the input");
        }
    }
}
