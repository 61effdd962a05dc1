//! The network on a device against the CPU: for a few sentences, the prosody pass (with the
//! CPU's durations, so both regulate to the same frames) and every output of the decoder and
//! the audio, in fp32, compared element by element. For `scripts/gpu-check.sh`.
//!
//!   target/release/device-check --device cuda --tolerance 1e-3
//!   target/release/device-check --device cuda --kokoro .cache/kokoro     # Kokoro-82M instead
//!
//! One JSON object on stdout: per sentence and quantity the largest absolute difference, and
//! `pass` (every difference within the tolerance); exit status 1 when one is not.
//!
//! Kokoro (`--kokoro DIR`, the directory of `kokoro-v1.0.int8.onnx` and its voices; its fp32
//! runs the int8 file's weights dequantized) is compared as its own CPU arithmetic allows
//! (docs/kokoro-architecture.md): its generator takes the phase of its source's STFT as an
//! arctangent, and the Nyquist bin's imaginary part is rounding noise, so a 1e-7 change of the
//! input may flip that phase by 2π and move single samples far; the comparison is phase-blind
//! where it must be. With the CPU's rounded durations fed to the device: the durations before
//! rounding (largest difference, frames), the F0 and N curves (relative RMS) and the audio's log
//! band-power spectra (mean distance, dB), each within [`KOKORO_TOLERANCE`]; and, so that the
//! check can fail, the same spectral distance to another voice's audio, which must be far
//! beyond it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::json;
use speechstream_engine_libtorch::dsp::spectral_distance;
use speechstream_engine_libtorch::kokoro::serve::Vocab;
use speechstream_engine_libtorch::kokoro::voices;
use speechstream_engine_libtorch::{load_front_end, parse_device, Hibari, KokoroModel, NoiseSource, Precision};
use tch::{Device, Tensor};

#[derive(Parser)]
#[command(name = "device-check", about = "hibari (or Kokoro-82M) on a device against the CPU, in fp32")]
struct Args {
    /// The device to check: cuda, cuda:N (or cpu, which checks the comparison itself).
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Largest absolute difference allowed.
    #[arg(long, default_value_t = 1e-3)]
    tolerance: f64,
    /// hibari's assets [default: the checkout's .cache/hibari, or $SPEECHSTREAM_ASSETS]; Kokoro's
    /// check reads its text front end from them.
    #[arg(long)]
    assets: Option<PathBuf>,
    /// Check Kokoro-82M instead of hibari: the directory of kokoro-v1.0.int8.onnx and its voices.
    #[arg(long)]
    kokoro: Option<PathBuf>,
    /// The Kokoro voice to speak with (default: the first by name).
    #[arg(long)]
    voice: Option<String>,
    /// Kokoro: move the device's style by this part (e.g. 1e-6): with `--device cpu`, how far
    /// the CPU's own arithmetic moves for an input change of that size (the tolerance's scale).
    #[arg(long, default_value_t = 0.0)]
    perturb: f32,
    /// Kokoro: the device's precision, fp32 or fp16 (its products in float16), always against
    /// the CPU's fp32 and within the same bounds.
    #[arg(long, default_value = "fp32")]
    precision: Precision,
}

/// Kokoro's bounds, device against CPU: durations before rounding (frames), F0 and N (relative
/// RMS), audio (mean log-spectral distance, dB). On the CPU (`--device cpu --perturb`), moving
/// the style by 1e-6 of itself moved them by at most 3e-5 frames, 1e-6 and 0.26 dB; by 1e-4, by
/// 2.3e-3 frames, 7e-5 and 0.82 dB, while the waveform moved by up to 36% RMS (the source's phase
/// flips: no waveform bound can hold). cuDNN's convolutions round fp32 through TF32 by default in
/// libtorch (10-bit mantissas, no switch in tch), hence the margins. Another voice's audio is
/// 7.4-9.1 dB away, and must stay twice the audio bound away for the check to mean anything.
const KOKORO_TOLERANCE: (f64, f64, f64) = (0.05, 0.01, 2.0);

const TEXTS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog near the riverbank.",
    "Hello! This is hibari, checked on the device against the CPU.",
    "On the fourteenth of March, twelve thousand people walked thirty kilometres.",
];

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    let a = a.to_device(Device::Cpu).to_kind(tch::Kind::Double);
    let b = b.to_device(Device::Cpu).to_kind(tch::Kind::Double);
    if a.size() != b.size() {
        return f64::INFINITY;
    }
    (a - b).abs().max().double_value(&[])
}

fn main() -> ExitCode {
    let args = Args::parse();
    let device = match parse_device(&args.device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("device-check: {e}");
            return ExitCode::FAILURE;
        }
    };
    let assets = args.assets.clone().unwrap_or_else(|| {
        std::env::var_os("SPEECHSTREAM_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/hibari"))
    });
    if let Some(dir) = &args.kokoro {
        return match kokoro_check(&assets, dir, args.voice.as_deref(), device, args.perturb, args.precision) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("device-check: Kokoro: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let load = |d: Device| Hibari::load(&assets, d).and_then(|h| h.with_precision(Precision::Fp32));
    let (cpu, dev) = match (load(Device::Cpu), load(device)) {
        (Ok(c), Ok(d)) => (c, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("device-check: loading hibari from {}: {e}", assets.display());
            return ExitCode::FAILURE;
        }
    };
    let front_end = match load_front_end(&assets, Device::Cpu, false) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("device-check: front end: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut results = Vec::new();
    let mut worst: f64 = 0.0;
    for text in TEXTS {
        for sentence in front_end.sentences(text) {
            let ids = cpu.ids(&sentence.phonemes);
            let p_cpu = cpu.prosody(&ids, 1.0);
            let p_dev = dev.prosody_with_durations(&ids, 1.0, &p_cpu.durations);
            let s_cpu = cpu.decode(&p_cpu, 0, p_cpu.frames);
            let s_dev = dev.decode(&p_dev, 0, p_dev.frames);
            let noise = NoiseSource::new(1, 0);
            let a_cpu = cpu.synthesize_chunk(&p_cpu, 0, p_cpu.frames, &noise);
            let a_dev = dev.synthesize_chunk(&p_dev, 0, p_dev.frames, &noise);
            let names = ["lh", "theta", "ln", "lr", "phi"];
            let mut diffs = serde_json::Map::new();
            diffs.insert("f0".into(), json!(max_diff(&p_cpu.f0, &p_dev.f0) / 100.0));
            for (name, (a, b)) in names.iter().zip(s_cpu.outputs().iter().zip(s_dev.outputs().iter())) {
                diffs.insert((*name).into(), json!(max_diff(a, b)));
            }
            diffs.insert("audio".into(), json!(max_diff(&a_cpu, &a_dev)));
            // f0 is in Hz (the network's output times 100): compared as the network's output.
            for v in diffs.values() {
                worst = worst.max(v.as_f64().unwrap_or(f64::INFINITY));
            }
            results.push(json!({"text": sentence.text, "frames": p_cpu.frames, "max_abs_diff": diffs}));
        }
    }
    let pass = worst <= args.tolerance;
    let line = json!({
        "kind": "device_check",
        "device": format!("{device:?}"),
        "precision": "fp32",
        "tolerance": args.tolerance,
        "worst": worst,
        "pass": pass,
        "sentences": results,
    });
    println!("{line}");
    eprintln!(
        "device-check: {device:?} against the CPU, fp32: worst difference {worst:.3e} (tolerance {:.0e}): {}",
        args.tolerance,
        if pass { "pass" } else { "FAIL" }
    );
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Root mean square of `a − b` over the RMS of `b`.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let e: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let r: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (e / r.max(f64::MIN_POSITIVE)).sqrt()
}

/// Kokoro-82M in `precision` on `device` against the CPU in fp32 (module doc); prints its JSON
/// line and returns whether it passed.
fn kokoro_check(
    assets: &Path,
    dir: &Path,
    voice: Option<&str>,
    device: Device,
    perturb: f32,
    precision: Precision,
) -> Result<bool, String> {
    let files = voices::scan(dir);
    let onnx = files.int8.as_deref().ok_or_else(|| format!("{}: no {}", dir.display(), voices::INT8_MODEL))?;
    let pick = |name: Option<&str>| files.voices.iter().find(|v| name.is_none_or(|n| v.name == n));
    let voice = pick(voice).ok_or_else(|| format!("{}: no voice {}", dir.display(), voice.unwrap_or("at all")))?;
    let other = files.voices.iter().find(|v| v.name != voice.name).ok_or("one voice only: nothing to tell it from")?;
    let vocab_path = Some(dir.join("vocab.json")).filter(|p| p.is_file()).unwrap_or_else(|| assets.join("vocab.json"));
    let vocab = Vocab::read(&vocab_path)?;
    let front_end = load_front_end(assets, Device::Cpu, false).map_err(|e| format!("front end: {e}"))?;
    let cpu = KokoroModel::load(onnx, Device::Cpu, Precision::Fp32)?;
    let dev = KokoroModel::load(onnx, device, precision)?;
    let (raw_tol, curve_tol, spectral_tol) = KOKORO_TOLERANCE;
    let mut results = Vec::new();
    let mut pass = true;
    for text in &TEXTS[..2] {
        for sentence in front_end.sentences(text) {
            let ids = vocab.ids(&sentence.phonemes);
            let style = voice.pack.style(ids.len());
            let (c, ct) = cpu.infer_traced(&ids, style, 1.0, None)?;
            let moved: Vec<f32> = style.iter().map(|v| v * (1.0 + perturb)).collect();
            let (d, dt) = dev.infer_traced(&ids, &moved, 1.0, Some(&c.durations))?;
            let (o, _) = cpu.infer_traced(&ids, other.pack.style(ids.len()), 1.0, Some(&c.durations))?;
            let raw = ct
                .durations_raw
                .iter()
                .zip(&dt.durations_raw)
                .map(|(a, b)| f64::from((a - b).abs()))
                .fold(0.0, f64::max);
            let (f0, n) = (rel_rms(&dt.f0, &ct.f0), rel_rms(&dt.n, &ct.n));
            let spectral = spectral_distance(&d.audio, &c.audio);
            let another = spectral_distance(&o.audio, &c.audio);
            let ok = raw <= raw_tol
                && f0 <= curve_tol
                && n <= curve_tol
                && spectral <= spectral_tol
                && another > spectral_tol * 2.0;
            pass &= ok;
            results.push(json!({
                "text": sentence.text, "frames": c.durations.iter().sum::<i64>(),
                "durations_raw_max_abs": raw, "f0_rel_rms": f0, "n_rel_rms": n,
                "audio_rel_rms": rel_rms(&d.audio, &c.audio), "spectral_db": spectral,
                "another_voice_spectral_db": another, "pass": ok,
            }));
        }
    }
    let line = json!({
        "kind": "device_check_kokoro",
        "device": format!("{device:?}"),
        "precision": precision.to_string(),
        "perturb": perturb,
        "voice": voice.name, "another_voice": other.name,
        "tolerance": {"durations_raw_frames": raw_tol, "curves_rel_rms": curve_tol, "spectral_db": spectral_tol},
        "pass": pass,
        "sentences": results,
    });
    println!("{line}");
    eprintln!(
        "device-check: Kokoro on {device:?} in {precision} against the CPU's fp32: {}",
        if pass { "pass" } else { "FAIL" }
    );
    Ok(pass)
}
