//! How far the voices move with the CPU's code path: the premise of every numeric bound in the
//! suite (docs/engines.md, "The same tests on every CPU").
//!
//! Our own kernels (the int8 products, the fused passes, the DSP) give the same bits on every
//! CPU level. libtorch's float kernels do not: MKL picks its branch by vendor and instruction set
//! (an Intel Xeon runs its AVX-512 branch, an AMD EPYC its AVX2 one), libtorch's vectorised
//! kernels (`ATEN_CPU_CAPABILITY`) and oneDNN's by instruction set. So the bounds of the tests
//! that judge the voices against a reference (onnxruntime, the forced aligner, Whisper) were set
//! from the figures measured on each CPU code path one machine can emulate
//! (scripts/cpu-paths.sh), with a margin for the spread this test holds:
//!
//! - hibari int8, the default precision wherever our int8 kernels run: **the same bits** on
//!   every path (its float steps are our own loops or exact in any order);
//! - hibari fp32 and Kokoro int8 move: the engine's word timings by at most
//!   [`TIMING_SPREAD_MS`] from this CPU's own path; Kokoro's durations before rounding (which
//!   pass through ALBERT's float attention, norms and softmax, requantized twelve times) by at
//!   most [`RAW_SPREAD_FRAMES`], and its audio on fixed durations (fixtures/kokoro's) by at most
//!   [`AUDIO_SPREAD_DB`] (log band energies, `dsp::spectral_distance`, as kokoro_onnx.rs measures
//!   against onnxruntime). On any path, a figure against a reference is then at most its
//!   figure on this CPU's own path plus this spread, which the bounds leave room for.
//!
//! Each path runs in a child process (this test binary, re-run with the path's environment and
//! [`CHILD`] naming its output file): MKL and libtorch read their switches once, at start-up.
//! If this test fails, a change made the voices depend more on the CPU than the bounds allow
//! for: measure them again on every path (scripts/cpu-paths.sh) before widening anything.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use speechstream_core::engine::{Engine, EngineEventKind, OutputKind, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::{dsp, EngineOptions, KokoroModel, Precision, TorchEngine};

/// The environment variable that makes this test a child: the file it writes its audio to.
const CHILD: &str = "SPEECHSTREAM_CPU_PATH_OUT";

/// The switches the paths set; a child starts with none of them but its path's.
const SWITCHES: [&str; 5] =
    ["SPEECHSTREAM_SIMD", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"];

/// The code paths compared with this CPU's own (`native`), as scripts/cpu-paths.sh names them:
/// MKL's SSE2 branch (standing in for the other vendor's branch, which MKL does not run here),
/// MKL's AVX2 branch (an AMD CPU's, on an Intel one), the AVX2-only class (Zen 1-3, Haswell) and
/// Alder Lake's (AVX2 + AVX-VNNI).
const PATHS: [(&str, &[(&str, &str)]); 5] = [
    ("native", &[]),
    ("mkl-compatible", &[("MKL_CBWR", "COMPATIBLE")]),
    ("mkl-avx2", &[("MKL_ENABLE_INSTRUCTIONS", "AVX2")]),
    (
        "avx2",
        &[
            ("SPEECHSTREAM_SIMD", "avx2"),
            ("ATEN_CPU_CAPABILITY", "avx2"),
            ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
            ("ONEDNN_MAX_CPU_ISA", "AVX2"),
        ],
    ),
    (
        "avxvnni",
        &[
            ("SPEECHSTREAM_SIMD", "avxvnni"),
            ("ATEN_CPU_CAPABILITY", "avx2"),
            ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
            ("ONEDNN_MAX_CPU_ISA", "AVX2_VNNI"),
        ],
    ),
];

/// How far a word's start or end may move between code paths, ms: three of Kokoro's 25 ms
/// frames (a duration rounded the other way near .5 moves the words after it by one; measured:
/// two, on an AMD EPYC Zen 4, 2026-12-06).
const TIMING_SPREAD_MS: i64 = 75;

/// How far Kokoro's durations before rounding may move between code paths, frames (measured:
/// 0.33 on "hello" between MKL's AVX2 and SSE2 branches, 0 between libtorch's AVX-512 and AVX2
/// kernels; AMD EPYC Zen 4, 2026-12-06).
const RAW_SPREAD_FRAMES: f32 = 0.4;

/// How far Kokoro's audio on fixed durations may move between code paths, dB (measured: 1.37
/// and 1.04 dB on "hello" and "weather" between MKL's branches, as above).
const AUDIO_SPREAD_DB: f64 = 1.75;

/// The sentences: held out of every tuning, as in word_timestamps.rs.
const TEXT: &str = "Could you pass me the salt, please? We walked along the river until the sun went down.";

/// What is compared: (label, voice, hibari's precision).
const CASES: [(&str, Option<&str>, Precision); 4] = [
    ("hibari int8", None, Precision::Int8),
    ("hibari fp32", None, Precision::Fp32),
    ("jf_alpha", Some("jf_alpha"), Precision::Int8),
    ("jm_kumo", Some("jm_kumo"), Precision::Int8),
];

/// One case's output: its 24 kHz samples and its words' (start, end) in ms.
#[derive(serde::Serialize, serde::Deserialize)]
struct Spoken {
    pcm: Vec<i16>,
    words: Vec<(i64, i64)>,
}

/// Kokoro's network on a fixture's inputs with onnxruntime's durations fed in: its own durations
/// before rounding, and the audio (the same length on every path).
#[derive(serde::Serialize, serde::Deserialize)]
struct Fed {
    raw: Vec<f32>,
    audio: Vec<f32>,
}

/// What a child reports: the engine's [`CASES`], then Kokoro's network on [`FIXTURES`].
#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    spoken: Vec<Spoken>,
    fed: Vec<Fed>,
}

/// fixtures/kokoro's cases: jf_alpha and jm_kumo voices (make_fixtures.py).
const FIXTURES: [&str; 2] = ["hello", "weather"];

fn engine(precision: Precision, kokoro: bool) -> TorchEngine {
    let mut options = EngineOptions::new(hibari_assets());
    options.admission = speechstream_engine_libtorch::AdmissionMode::Off;
    options.threads = Some(1);
    options.workers = Some(1);
    options.precision = Some(precision);
    if kokoro {
        options.kokoro.dir = Some(cache().join("kokoro"));
        options.kokoro.required = true;
        // (the same first segments on every path: a slower path's warm-up would cut them
        // shorter, which moves the words by the pause of the cut, not by the arithmetic)
        options.kokoro.first_words = Some(6);
    }
    TorchEngine::new(options).expect("engine")
}

fn speak(engine: &TorchEngine, voice: Option<&str>) -> Spoken {
    let mut request = SynthesisRequest::new(TEXT).with_seed(Some(5)).with_output(OutputKind::AudioAndWords);
    if let Some(voice) = voice {
        request = request.with_voice(voice);
    }
    let (tx, rx) = mpsc::channel();
    engine.submit(RequestId { connection: 1, utterance: 0 }, request, Box::new(Sink(tx)));
    let mut spoken = Spoken { pcm: Vec::new(), words: Vec::new() };
    loop {
        match rx.recv_timeout(Duration::from_secs(180)).expect("engine event").kind {
            EngineEventKind::Audio { pcm, .. } => {
                spoken.pcm.extend(pcm.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])))
            }
            EngineEventKind::Words(words) => spoken.words.extend(words.iter().map(|w| (w.start_ms, w.end_ms))),
            EngineEventKind::Finished => return spoken,
            other => panic!("unexpected event {other:?}"),
        }
    }
}

/// The child's part: every case on this process's code path, into `out` as JSON.
fn speak_every_case(out: &Path) {
    let int8 = engine(Precision::Int8, true);
    let fp32 = engine(Precision::Fp32, false);
    let spoken = CASES
        .iter()
        .map(|(_, voice, precision)| speak(if *precision == Precision::Fp32 { &fp32 } else { &int8 }, *voice))
        .collect();
    let net = KokoroModel::load(&kokoro_model(), tch::Device::Cpu, Precision::Int8).unwrap();
    let fed = FIXTURES
        .iter()
        .map(|name| {
            let (case, _) = kokoro_fixture(name);
            let speed = case["speed"].as_f64().unwrap() as f32;
            let durations = ints(&case["durations"]);
            let (out, trace) =
                net.infer_traced(&ints(&case["ids"]), &reals(&case["style"]), speed, Some(&durations)).unwrap();
            Fed { raw: trace.durations_raw, audio: out.audio }
        })
        .collect();
    std::fs::write(out, serde_json::to_vec(&Report { spoken, fed }).unwrap()).unwrap();
}

/// Whether this CPU can take a path: libtorch capped to AVX2 needs AVX2 (every x86 CPU the
/// project has met; not an ARM one, where only MKL's switches apply, and do nothing).
fn runs_here(vars: &[(&str, &str)]) -> bool {
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    avx2 || !vars.iter().any(|(var, _)| *var == "ATEN_CPU_CAPABILITY")
}

/// Runs this test again in a child with `path`'s switches (and no others) and reads what it spoke.
fn run_path(name: &str, vars: &[(&str, &str)], dir: &Path) -> Report {
    let out = dir.join(format!("{name}.json"));
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", "the_voices_move_with_the_cpu_code_path_no_more_than_the_bounds_allow", "--nocapture"]);
    for var in SWITCHES {
        child.env_remove(var);
    }
    child.envs(vars.iter().copied()).env(CHILD, &out);
    let status = child.status().expect("run this test as a child");
    assert!(status.success(), "{name}: the child failed ({status})");
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

#[test]
fn the_voices_move_with_the_cpu_code_path_no_more_than_the_bounds_allow() {
    if let Some(out) = std::env::var_os(CHILD) {
        speak_every_case(Path::new(&out));
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("speechstream-cpu-paths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let reports: Vec<(&str, Report)> = PATHS
        .iter()
        .filter(|(_, vars)| runs_here(vars))
        .map(|(name, vars)| (*name, run_path(name, vars, &dir)))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let native = &reports[0].1;
    let mut broken = Vec::new();
    for (path, report) in &reports[1..] {
        for ((label, _, _), (theirs, ours)) in CASES.iter().zip(report.spoken.iter().zip(&native.spoken)) {
            assert_eq!(theirs.words.len(), ours.words.len(), "{label} {path}: another number of words");
            let same_bits = theirs.pcm == ours.pcm && theirs.words == ours.words;
            let moved = theirs
                .words
                .iter()
                .zip(&ours.words)
                .map(|(a, b)| (a.0 - b.0).abs().max((a.1 - b.1).abs()))
                .max()
                .unwrap_or(0);
            eprintln!(
                "{label} {path} against native: {}; words moved by at most {moved} ms",
                if same_bits { "the same bits" } else { "other bits" }
            );
            if *label == "hibari int8" && !same_bits {
                broken.push(format!("{label} {path}: other bits than native (it is the same bits on every path)"));
            }
            if moved > TIMING_SPREAD_MS {
                broken.push(format!("{label} {path}: words moved by {moved} ms (spread {TIMING_SPREAD_MS})"));
            }
        }
        for (name, (theirs, ours)) in FIXTURES.iter().zip(report.fed.iter().zip(&native.fed)) {
            let raw = theirs.raw.iter().zip(&ours.raw).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let distance = dsp::spectral_distance(&theirs.audio, &ours.audio);
            eprintln!(
                "Kokoro int8 {name} {path} against native: durations before rounding ±{raw:.3} frames, \
                 audio on fixed durations {distance:.2} dB"
            );
            if raw > RAW_SPREAD_FRAMES || distance > AUDIO_SPREAD_DB {
                broken.push(format!(
                    "Kokoro int8 {name} {path}: durations moved by {raw} frames (spread {RAW_SPREAD_FRAMES}), \
                     audio by {distance:.2} dB (spread {AUDIO_SPREAD_DB})"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
