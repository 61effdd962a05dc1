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
    let joe = PiperModel::load(&voice(), Device::Cpu).expect("joe loads");
    let multi_path = dir.0.join("multi.onnx");
    let multi = PiperModel::load(&multi_path, Device::Cpu).expect("the multi-speaker copy loads");
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
    let joe = PiperModel::load(&voice(), Device::Cpu).expect("joe loads");
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
        let e = PiperModel::load(&hibari, Device::Cpu).err().expect("not a Piper voice");
        assert!(e.contains("not a Piper VITS export"), "{e}");
    }
}

/// Our real-time factor and onnxruntime's (piper-tts's path: a plain session of the file), one
/// thread each, default scales, on the test sentences. Prints, asserts nothing:
/// `cargo test --release -p speechstream-engine-libtorch --test piper_model -- --ignored
/// --nocapture speed`.
#[test]
#[ignore]
fn speed_one_thread() {
    tch::set_num_threads(1);
    let dir = TempDir::new("piper-speed");
    let ids = prepare(&dir.0);
    let joe = PiperModel::load(&voice(), Device::Cpu).expect("joe loads");
    let (mut total_time, mut total_audio) = (0f64, 0f64);
    for (n, seq) in ids.iter().enumerate() {
        joe.infer(seq, None, Scales::default(), 0).expect("inference");
        let mut best = f64::MAX;
        let mut seconds = 0.0;
        for _ in 0..5 {
            let t = Instant::now();
            let out = joe.infer(seq, None, Scales::default(), n as u64).expect("inference");
            let dt = t.elapsed().as_secs_f64();
            seconds = out.audio.len() as f64 / 22_050.0;
            best = best.min(dt);
        }
        total_time += best;
        total_audio += seconds;
        eprintln!(
            "ours 1 thread: {} ids, {seconds:.2} s of audio, best of 5 {:.1} ms, RTF {:.4}",
            seq.len(),
            best * 1e3,
            best / seconds
        );
    }
    eprintln!("ours 1 thread: all sentences RTF {:.4}", total_time / total_audio);
    eprint!("{}", reference(&["bench", voice().to_str().expect("a path")]));
}
