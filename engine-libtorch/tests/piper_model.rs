//! Piper's VITS written natively (src/piper) against onnxruntime on the same file: the joe voice
//! (`.cache/piper/en_US-joe-medium.onnx`, scripts/setup-voice.sh piper) and a multi-speaker
//! copy of it, run by tests/piper/reference.py in .venv-piper (scripts/setup-piper.sh) on ids
//! from piper-tts's own phonemizer.
//!
//! What is compared: without noise (noise_scale = noise_w = 0) the network is deterministic, and
//! onnxruntime runs the file as it is; with noise, onnxruntime runs a copy whose two
//! RandomNormalLike nodes read the noise PiperModel drew ([`PiperModel::noise`]). Either way
//! the durations (the graph's ceiled w) must be equal exactly and the audio equal to float
//! rounding: the same operations in float32, summed in other orders by other kernels, through
//! 4 flows and a HiFi-GAN of 3 up-samplings.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use speechstream_engine_libtorch::piper::{PiperModel, PiperOutput, Scales};
use speechstream_engine_libtorch::Precision;
use tch::Device;

/// The largest difference of audio samples allowed (the output is within ±1).
const AUDIO_BOUND: f32 = 2e-4;

fn voice() -> PathBuf {
    common::cached("piper/en_US-joe-medium.onnx", "scripts/setup-voice.sh piper")
}

/// .venv-piper's python, or `SPEECHSTREAM_PIPER_PYTHON`.
fn python() -> PathBuf {
    let p = std::env::var_os("SPEECHSTREAM_PIPER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-piper/bin/python"));
    assert!(p.exists(), "{} not found: run scripts/setup-piper.sh first", p.display());
    p
}

/// Runs tests/piper/reference.py with `args`; its stdout.
fn reference(args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/piper/reference.py");
    let out = Command::new(python()).arg(script).args(args).output().expect("running the reference");
    assert!(out.status.success(), "reference.py {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("speechstream-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("a temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_f32(path: &Path, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).expect("writing floats");
}

/// `prepare`: the sentences' ids and the multi-speaker copy, in `dir`.
fn prepare(dir: &Path) -> Vec<Vec<i64>> {
    reference(&["prepare", voice().to_str().expect("a path"), dir.to_str().expect("a path")]);
    let text = std::fs::read_to_string(dir.join("ids.json")).expect("ids.json");
    serde_json::from_str(&text).expect("ids")
}

struct Case {
    name: &'static str,
    multi: bool,
    ids: Vec<i64>,
    speaker: Option<i64>,
    scales: Scales,
    seed: u64,
}

impl Case {
    fn noisy(&self) -> bool {
        self.scales.noise_scale != 0.0 || self.scales.noise_w != 0.0
    }
}

#[test]
fn joe_and_a_multi_speaker_copy_match_onnxruntime() {
    let start = Instant::now();
    let dir = TempDir::new("piper-model");
    let ids = prepare(&dir.0);
    assert_eq!(ids.len(), 3, "three sentences");
    let joe = PiperModel::load(&voice(), Device::Cpu, Precision::Fp32).expect("joe loads");
    let multi_path = dir.0.join("multi.onnx");
    let multi = PiperModel::load(&multi_path, Device::Cpu, Precision::Fp32).expect("the multi-speaker copy loads");
    assert_eq!((joe.num_speakers(), multi.num_speakers()), (1, 4));
    assert_eq!((joe.samples_per_frame(), joe.num_symbols()), (256, 256));
    assert!(joe.stochastic_durations());
    eprintln!("loaded in {:.2} s", start.elapsed().as_secs_f32());

    let quiet = Scales { noise_scale: 0.0, length_scale: 1.0, noise_w: 0.0 };
    let slow = Scales { length_scale: 1.3, ..quiet };
    let default = Scales::default();
    let cases = [
        Case { name: "quiet 0", multi: false, ids: ids[0].clone(), speaker: None, scales: quiet, seed: 0 },
        Case { name: "quiet 1 slow", multi: false, ids: ids[1].clone(), speaker: None, scales: slow, seed: 0 },
        Case { name: "noisy 2", multi: false, ids: ids[2].clone(), speaker: None, scales: default, seed: 7 },
        Case { name: "noisy 0", multi: false, ids: ids[0].clone(), speaker: None, scales: default, seed: 1234 },
        Case { name: "multi quiet s1", multi: true, ids: ids[2].clone(), speaker: Some(1), scales: quiet, seed: 0 },
        Case { name: "multi noisy s0", multi: true, ids: ids[2].clone(), speaker: Some(0), scales: default, seed: 5 },
        Case { name: "multi noisy s3", multi: true, ids: ids[2].clone(), speaker: Some(3), scales: default, seed: 5 },
    ];
    let joe_path = voice();
    let t = Instant::now();
    let mut ours: Vec<PiperOutput> = Vec::new();
    let mut spec = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let model = if c.multi { &multi } else { &joe };
        let out = model.infer(&c.ids, c.speaker, c.scales, c.seed).expect("inference");
        let noise = if c.noisy() {
            // the prior's noise for more frames than ours, so that different durations fail on
            // the durations' comparison rather than in onnxruntime
            let frames: i64 = out.durations.iter().sum::<i64>().max(1) + 200;
            let (dp, prior) = model.noise(c.seed, c.ids.len(), frames as usize);
            let (dpf, priorf) = (format!("dp_{i}.f32"), format!("prior_{i}.f32"));
            write_f32(&dir.0.join(&dpf), &dp);
            write_f32(&dir.0.join(&priorf), &prior);
            serde_json::json!({"dp": dpf, "prior": priorf, "channels": prior.len() as i64 / frames})
        } else {
            serde_json::Value::Null
        };
        let s = c.scales;
        spec.push(serde_json::json!({
            "model": if c.multi { &multi_path } else { &joe_path },
            "ids": c.ids,
            "speaker": c.speaker,
            "scales": [s.noise_scale, s.length_scale, s.noise_w],
            "noise": noise,
        }));
        ours.push(out);
    }
    eprintln!("ours: {:.2} s", t.elapsed().as_secs_f32());
    std::fs::write(dir.0.join("cases.json"), serde_json::json!({ "cases": spec }).to_string()).expect("cases.json");
    let t = Instant::now();
    reference(&["run", dir.0.to_str().expect("a path")]);
    eprintln!("onnxruntime: {:.2} s", t.elapsed().as_secs_f32());
    let text = std::fs::read_to_string(dir.0.join("out.json")).expect("out.json");
    let theirs: Vec<serde_json::Value> = serde_json::from_str(&text).expect("results");

    let mut worst = 0f32;
    for (i, (c, ours)) in cases.iter().zip(&ours).enumerate() {
        let durations: Vec<i64> = serde_json::from_value(theirs[i]["durations"].clone()).expect("durations");
        assert_eq!(ours.durations, durations, "{}: durations", c.name);
        let bytes = std::fs::read(dir.0.join(format!("out_{i}.f32"))).expect("audio");
        let audio: Vec<f32> =
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        let frames: i64 = ours.durations.iter().sum::<i64>().max(1);
        assert_eq!(ours.audio.len(), frames as usize * ours.samples_per_frame, "{}: samples", c.name);
        assert_eq!(ours.audio.len(), audio.len(), "{}: samples", c.name);
        let err = common::max_abs_diff(&ours.audio, &audio);
        let rms = (audio.iter().map(|x| x * x).sum::<f32>() / audio.len() as f32).sqrt();
        eprintln!(
            "{:16} {} ids, {frames} frames, durations equal; audio RMS {rms:.4}, max abs error {err:.2e}",
            c.name,
            c.ids.len()
        );
        assert!(err <= AUDIO_BOUND, "{}: audio differs by up to {err} (bound {AUDIO_BOUND})", c.name);
        worst = worst.max(err);
    }
    eprintln!("worst max abs error {worst:.2e} (bound {AUDIO_BOUND}); {:.1} s in all", start.elapsed().as_secs_f32());
    // the speakers' conditioning is not a no-op, and the seed decides the noise
    assert_ne!(ours[5].audio, ours[6].audio, "speakers 0 and 3 sound alike");
    let again = joe.infer(&cases[2].ids, None, cases[2].scales, cases[2].seed).expect("inference");
    assert_eq!(again.audio, ours[2].audio, "the same seed, other audio");
    let other = joe.infer(&cases[2].ids, None, cases[2].scales, 8).expect("inference");
    assert_ne!(other.audio, ours[2].audio, "another seed, the same audio");
}

#[test]
fn refuses_what_it_cannot_speak() {
    let joe = PiperModel::load(&voice(), Device::Cpu, Precision::Fp32).expect("joe loads");
    let s = Scales::default();
    assert!(joe.infer(&[], None, s, 0).is_err(), "no ids");
    assert!(joe.infer(&[1, 256, 2], None, s, 0).is_err(), "an id past the table");
    assert!(joe.infer(&[1, -1, 2], None, s, 0).is_err(), "a negative id");
    assert!(joe.infer(&[1, 0, 2], Some(1), s, 0).is_err(), "a second speaker of a single-speaker voice");
    assert!(joe.infer(&[1, 0, 2], None, Scales { length_scale: 0.0, ..s }, 0).is_err());
    assert!(joe.infer(&[1, 0, 2], None, Scales { noise_w: f32::NAN, ..s }, 0).is_err());
    // a file that is an ONNX model but not a Piper export
    let hibari = common::cache().join("hibari/hibari.onnx");
    if hibari.exists() {
        let e = PiperModel::load(&hibari, Device::Cpu, Precision::Fp32).err().expect("not a Piper voice");
        assert!(e.contains("not a Piper VITS export"), "{e}");
    }
}

/// The CPU's model name, as lscpu gives it.
fn cpu_name() -> String {
    let out =
        Command::new("lscpu").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    out.lines()
        .find_map(|l| l.strip_prefix("Model name:").map(|v| v.trim().to_owned()))
        .unwrap_or_else(|| "an unknown CPU".into())
}

/// RTF of `model` on `ids` (default scales, best of 5 per sentence), each sentence printed.
fn rtf(label: &str, model: &PiperModel, ids: &[Vec<i64>]) -> f64 {
    let (mut total_time, mut total_audio) = (0f64, 0f64);
    for (n, seq) in ids.iter().enumerate() {
        model.infer(seq, None, Scales::default(), n as u64).expect("inference");
        let mut best = f64::MAX;
        let mut seconds = 0.0;
        for _ in 0..5 {
            let t = Instant::now();
            let out = model.infer(seq, None, Scales::default(), n as u64).expect("inference");
            best = best.min(t.elapsed().as_secs_f64());
            seconds = out.audio.len() as f64 / 22_050.0;
        }
        total_time += best;
        total_audio += seconds;
        eprintln!(
            "{label:>10}: {} ids, {seconds:.2} s of audio, best of 5 {:.1} ms, RTF {:.4}",
            seq.len(),
            best * 1e3,
            best / seconds
        );
    }
    total_time / total_audio
}

/// Our real-time factors (fp32; int8 at the CPU's best level and capped to AVX2, our kernels'
/// levels: libtorch's own ops are not capped) and onnxruntime's (piper-tts's path: a plain
/// session of the file), one thread each, default scales, on the test sentences. Prints,
/// asserts nothing:
/// `cargo test --release -p speechstream-engine-libtorch --test piper_model -- --ignored
/// --nocapture speed`.
#[test]
#[ignore]
fn speed_one_thread() {
    use speechstream_engine_libtorch::cpu::{self, Level};
    tch::set_num_threads(1);
    let dir = TempDir::new("piper-speed");
    let ids = prepare(&dir.0);
    let fp32 = PiperModel::load(&voice(), Device::Cpu, Precision::Fp32).expect("joe loads");
    let best = cpu::level();
    let int8 = PiperModel::load(&voice(), Device::Cpu, Precision::Int8).expect("joe loads");
    assert_eq!(int8.precision(), Precision::Int8);
    let capped = cpu::set_cap(Level::Avx2);
    let int8_avx2 = PiperModel::load(&voice(), Device::Cpu, Precision::Int8).expect("joe loads");
    cpu::reset_cap();
    let r_fp32 = rtf("fp32", &fp32, &ids);
    let r_int8 = rtf("int8", &int8, &ids);
    cpu::set_cap(Level::Avx2);
    let r_avx2 = rtf("int8 avx2", &int8_avx2, &ids);
    cpu::reset_cap();
    let bench = reference(&["bench", voice().to_str().expect("a path")]);
    eprint!("{bench}");
    // reference.py's last line: "... RTF <x>"
    let ort = bench
        .lines()
        .rev()
        .find_map(|l| l.rsplit_once("RTF ").and_then(|(_, v)| v.trim().parse::<f64>().ok()))
        .unwrap_or(f64::NAN);
    eprintln!("\n{}, 1 thread, the {} test sentences:", cpu_name(), ids.len());
    eprintln!("| path | RTF | × onnxruntime's speed |\n|---|---|---|");
    for (name, r) in [
        ("onnxruntime fp32 (piper-tts)".to_owned(), ort),
        ("ours fp32".to_owned(), r_fp32),
        (format!("ours int8 ({best})"), r_int8),
        (format!("ours int8 ({capped})"), r_avx2),
    ] {
        eprintln!("| {name} | {r:.4} | {:.2} |", ort / r);
    }
}

/// Signal-to-noise ratio of `x` against `reference`, in dB.
fn snr_db(reference: &[f32], x: &[f32]) -> f64 {
    let signal: f64 = reference.iter().map(|&v| f64::from(v).powi(2)).sum();
    let noise: f64 = reference.iter().zip(x).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum();
    10.0 * (signal / noise.max(1e-30)).log10()
}

/// "The quick brown fox jumps over the lazy dog." as piper-tts phonemizes it for joe.
const FOX: &[i64] = &[
    1, 0, 41, 0, 59, 0, 3, 0, 23, 0, 35, 0, 120, 0, 74, 0, 23, 0, 3, 0, 15, 0, 88, 0, 120, 0, 14, 0, 100, 0, 26, 0, 3,
    0, 19, 0, 120, 0, 51, 0, 122, 0, 23, 0, 31, 0, 3, 0, 17, 0, 108, 0, 120, 0, 102, 0, 25, 0, 28, 0, 31, 0, 3, 0, 121,
    0, 27, 0, 100, 0, 34, 0, 60, 0, 3, 0, 41, 0, 59, 0, 3, 0, 24, 0, 120, 0, 18, 0, 74, 0, 38, 0, 21, 0, 3, 0, 17, 0,
    120, 0, 51, 0, 122, 0, 66, 0, 10, 0, 2,
];

/// The SNR int8 keeps against fp32 on [`FOX`] (same scales, same seed: the same noise), in dB:
/// 16.9 measured (AMD EPYC Zen 4, AVX-512 VNNI; every level gives the same bits), the
/// generator alone 25.7. The same 16.9 with the generator's last stage in one pass of 8-bit
/// activations or two ([`INT8_QUIET_DB`]): the SNR is the earlier layers' small shifts of the
/// waveform, and does not hear what two passes won back (0.2 Distill-MOS, the noise floor in
/// the pauses).
const INT8_SNR_DB: f64 = 15.0;

/// How far int8's level may sit above fp32's where fp32 is quiet, in dB: the mean over the
/// 20 ms frames of [`FOX`] under −45 dBFS in fp32 of int8's level less fp32's: +0.2 measured
/// with the generator's last stage's activations in two passes, +3.0 in one (the pauses' noise
/// floor that cost 0.2 Distill-MOS).
const INT8_QUIET_DB: f64 = 1.0;

/// The mean of `x`'s level less `reference`'s, in dB, over the 20 ms frames (at 22.05 kHz)
/// where `reference` is under −45 dBFS; None without such frames.
fn quiet_excess_db(reference: &[f32], x: &[f32]) -> Option<f64> {
    let level =
        |f: &[f32]| 10.0 * (f.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / f.len() as f64 + 1e-12).log10();
    let d: Vec<f64> = reference
        .chunks_exact(441)
        .zip(x.chunks_exact(441))
        .filter(|(a, _)| level(a) < -45.0)
        .map(|(a, b)| level(b) - level(a))
        .collect();
    (!d.is_empty()).then(|| d.iter().sum::<f64>() / d.len() as f64)
}

/// At most this share of the tokens whose duration int8's text encoder (its FFN) moves from
/// fp32's, each by at most a frame: 2 of [`FOX`]'s 109 measured (Zen 4; the same 2 with our
/// kernels, libtorch and MKL capped to AVX2, and with `MKL_CBWR=COMPATIBLE`).
const INT8_MOVED_DURATIONS: f64 = 0.05;

/// int8 against fp32 on one sentence: its durations within a frame of fp32's on all but a few
/// tokens ([`INT8_MOVED_DURATIONS`]); with its text encoder in fp32, the same durations, and
/// the audio within [`INT8_SNR_DB`] of fp32's.
#[test]
fn int8_stays_close_to_fp32() {
    let fp32 = PiperModel::load(&voice(), Device::Cpu, Precision::Fp32).expect("joe loads");
    let int8 = PiperModel::load(&voice(), Device::Cpu, Precision::Int8).expect("joe loads");
    assert_eq!((fp32.precision(), int8.precision()), (Precision::Fp32, Precision::Int8));
    let a = fp32.infer(FOX, None, Scales::default(), 3).expect("fp32");
    let whole = int8.infer(FOX, None, Scales::default(), 3).expect("int8");
    assert_eq!(a.durations.len(), whole.durations.len());
    let moved = a.durations.iter().zip(&whole.durations).filter(|(x, y)| x != y).count();
    eprintln!("int8 moved {moved} of {} durations", a.durations.len());
    assert!(
        a.durations.iter().zip(&whole.durations).all(|(x, y)| x.abs_diff(*y) <= 1),
        "int8 moved a duration by more than a frame: {:?} against {:?}",
        whole.durations,
        a.durations
    );
    assert!(moved as f64 <= INT8_MOVED_DURATIONS * a.durations.len() as f64, "int8 moved {moved} durations");
    let int8 = int8.with_float_encoder();
    let b = int8.infer(FOX, None, Scales::default(), 3).expect("int8");
    assert_eq!(a.durations, b.durations, "int8 with an fp32 text encoder changed the durations");
    let (snr, err) = (snr_db(&a.audio, &b.audio), common::max_abs_diff(&a.audio, &b.audio));
    eprintln!("int8 against fp32: SNR {snr:.1} dB, max abs error {err:.3e}");
    assert!(snr >= INT8_SNR_DB, "int8 at {snr:.1} dB SNR of fp32 (bound {INT8_SNR_DB} dB)");
    let quiet = quiet_excess_db(&a.audio, &b.audio).expect("quiet frames in fp32's audio");
    eprintln!("int8's level where fp32 is quiet: {quiet:+.1} dB");
    assert!(quiet <= INT8_QUIET_DB, "int8 {quiet:+.1} dB above fp32 where it is quiet (bound {INT8_QUIET_DB} dB)");
    // the same bits at AVX2 (our kernels and passes capped: the cap is the whole process's, and
    // changes only speed for whatever else runs meanwhile)
    use speechstream_engine_libtorch::cpu::{self, Level};
    if cpu::level() > Level::Avx2 && Level::Avx2.supported() {
        cpu::set_cap(Level::Avx2);
        let capped = PiperModel::load(&voice(), Device::Cpu, Precision::Int8).expect("joe loads");
        let c = capped.infer(FOX, None, Scales::default(), 3).expect("int8 at AVX2");
        cpu::reset_cap();
        assert!(c.audio == whole.audio, "int8 at AVX2 gave other audio");
    }
}

/// How close int8's audio decoded in stretches (a first chunk, then growing pieces, as a chunked
/// server would decode a segment) stays to the whole pass's, in dB of SNR: 24.8 to 30.3 measured
/// (AMD EPYC Zen 4; 24.6 to 30.5 with libtorch and MKL capped to AVX2 or MKL_CBWR=COMPATIBLE,
/// where fp32's stretches stay within 3.0e-6; 86 where the only cut is after frame 1), two int8
/// renderings of the same frames: a block of steps whose window a cut shortens quantizes on its
/// own range (the first up-sampling's blocks are 60 frames long), so within int8's own noise
/// (16.9 dB against fp32; the generator alone 25.7).
const STRETCHES_SNR_DB: f64 = 20.0;

/// A prepared pass decoded in stretches, each with the contexts on both sides, equals it decoded
/// whole: in fp32 to float rounding (with half the generator's context, 6 frames, 4.7e-4 off);
/// in int8 within [`STRETCHES_SNR_DB`]; whole, the same bits as `infer`'s.
#[test]
fn decoding_in_stretches_sounds_as_the_whole() {
    for precision in [Precision::Fp32, Precision::Int8] {
        let model = PiperModel::load(&voice(), Device::Cpu, precision).expect("joe loads");
        assert_eq!(model.context(), (12, 32), "joe's generator reaches 12 frames, its flow 32 more");
        let whole = model.infer(FOX, None, Scales::default(), 3).expect("whole");
        let prepared = model.prepare(FOX, None, Scales::default(), 3).expect("prepared");
        let frames = prepared.frames();
        assert_eq!(prepared.durations(), &whole.durations[..]);
        assert!(model.decode(&prepared, 0..frames).unwrap() == whole.audio, "{precision}: whole, as infer");
        let hop = model.samples_per_frame();
        for cuts in [&[1][..], &[16], &[16, 128], &[37, 38, 100]] {
            let mut pieces = Vec::new();
            let mut from = 0;
            for &cut in cuts.iter().chain([frames + 5].iter()) {
                let piece = model.decode(&prepared, from..cut).unwrap();
                assert_eq!(piece.len(), (cut.min(frames) - from) * hop);
                pieces.extend(piece);
                from = cut;
            }
            let (snr, err) = (snr_db(&whole.audio, &pieces), common::max_abs_diff(&whole.audio, &pieces));
            eprintln!("{precision}, cut at {cuts:?} of {frames} frames: SNR {snr:.1} dB, max abs error {err:.2e}");
            match precision {
                Precision::Fp32 => assert!(err <= 1e-5, "fp32 cut at {cuts:?}: {err:.2e} from the whole"),
                _ => assert!(snr >= STRETCHES_SNR_DB, "int8 cut at {cuts:?}: {snr:.1} dB SNR of the whole"),
            }
        }
    }
}

/// `audio` as a 16-bit mono WAV.
fn write_wav(path: &Path, audio: &[f32], rate: u32) {
    let mut b = Vec::with_capacity(44 + 2 * audio.len());
    let data = 2 * audio.len() as u32;
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(2 * rate).to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    for &v in audio {
        b.extend_from_slice(&((v.clamp(-1.0, 1.0) * 32767.0).round() as i16).to_le_bytes());
    }
    std::fs::write(path, b).expect("writing a WAV");
}

/// Held-out sentences (none of the test sentences) for the int8 listening check.
const HELD_OUT: [&str; 6] = [
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "The museum opens at nine in the morning and closes at half past five.",
    "Please remember to bring your passport, your ticket, and a warm jacket.",
    "A gentle breeze carried the smell of fresh bread through the narrow streets.",
    "Our quarterly revenue grew by twelve percent, beating every analyst's forecast.",
    "Thunder rolled across the valley as the old farmer hurried the cattle home.",
];

/// int8 against fp32 on [`HELD_OUT`] (default scales, the same seed): SNR and max abs error per
/// sentence, and both precisions' audio as WAVs in `$PIPER_QUALITY_DIR` (default: the temp dir)
/// for Whisper (tests/asr/whisper.py). Prints, asserts nothing:
/// `cargo test --release -p speechstream-engine-libtorch --test piper_model -- --ignored
/// --nocapture quality`.
#[test]
#[ignore]
fn int8_quality_against_fp32() {
    let out = std::env::var_os("PIPER_QUALITY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("speechstream-piper-quality"));
    std::fs::create_dir_all(&out).expect("the output dir");
    let ids_path = out.join("held_out.json");
    let joe = voice();
    let mut args = vec!["ids", joe.to_str().expect("a path"), ids_path.to_str().expect("a path")];
    args.extend(HELD_OUT);
    reference(&args);
    let ids: Vec<Vec<i64>> = serde_json::from_str(&std::fs::read_to_string(&ids_path).expect("ids")).expect("id lists");
    let fp32 = PiperModel::load(&voice(), Device::Cpu, Precision::Fp32).expect("joe loads");
    let int8 = PiperModel::load(&voice(), Device::Cpu, Precision::Int8).expect("joe loads");
    std::fs::write(out.join("texts.txt"), HELD_OUT.join("\n") + "\n").expect("texts");
    for (i, seq) in ids.iter().enumerate() {
        let a = fp32.infer(seq, None, Scales::default(), i as u64).expect("fp32");
        let b = int8.infer(seq, None, Scales::default(), i as u64).expect("int8");
        write_wav(&out.join(format!("fp32_{i}.wav")), &a.audio, 22_050);
        write_wav(&out.join(format!("int8_{i}.wav")), &b.audio, 22_050);
        if a.durations != b.durations {
            eprintln!("{i}: durations differ ({} vs {} frames)", a.audio.len() / 256, b.audio.len() / 256);
            continue;
        }
        eprintln!(
            "{i}: {:.2} s, SNR {:.1} dB, max abs error {:.3e}",
            a.audio.len() as f64 / 22_050.0,
            snr_db(&a.audio, &b.audio),
            common::max_abs_diff(&a.audio, &b.audio)
        );
    }
    eprintln!("WAVs in {}", out.display());
}
