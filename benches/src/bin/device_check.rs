//! The network on a device against the CPU: for a few sentences, the prosody pass (with the
//! CPU's durations, so both regulate to the same frames) and every output of the decoder and
//! the audio, in fp32, compared element by element. For `scripts/gpu-check.sh`.
//!
//! hibari's audio is compared from one source: the device's DSP makes its pulse train from the
//! CPU's f0. The pulses' phase is the running sum of f0 over the sentence and the highest
//! harmonic ~275 times it, so an f0 within 1.2e-6 of the CPU's (what an H200 gave, 2026-12-04)
//! moves a 4 s sentence's audio by ~1e-3 on any device: on the CPU alone, moving f0 by 1.2e-4
//! Hz moved the check's sentences by 2.4e-4 to 3.2e-3, and by 1e-6 of itself 4.3e-4 to 5.3e-3
//! (`--device cpu --perturb 1e-6`, 2026-12-07). That was the 1.26e-3 the
//! first GPU run failed on, not the device's arithmetic. Each sentence also reports the audio
//! from the device's own f0 (`audio_own_f0`) and the CPU's audio with its pulses from the
//! device's f0 (`cpu_audio_at_device_f0`): where the f0 explains the difference, the two agree.
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
//! beyond it. Then the batch (`batch` in its JSON): every sentence of the three texts through
//! the device in one pass (`KokoroModel::infer_batch`, what the server's rounds do on a device;
//! on the CPU, the paths a device takes: `load_device_paths`), each against itself alone on the
//! same device: the durations equal, the rest within the same bounds (docs/kokoro-architecture.md
//! §9: on the CPU's device paths F0 and N 2.2e-7 and the audio 0.06-0.09 dB).
//!
//! A Piper voice (`--piper VOICE.onnx`, its `.onnx.json` beside it) is compared as its own tests
//! compare it with onnxruntime (engine-libtorch/tests/piper_model.rs): the device's network, in
//! the precision it runs there (fp32 on every device but the CPU, whose int8 is left out here:
//! `--precision fp32`), against the CPU's fp32 on the same phoneme ids, once with the noise off
//! (noise_scale = noise_w = 0) and once at the voice's scales with the same seeded noise (ours,
//! drawn on the host and moved to the device, so both get the same numbers): the durations must
//! be equal and the audio within [`PIPER_SNR_DB`] of the CPU's (its largest difference reported
//! too). The ids come from `--piper-ids` (written beforehand by `--write-piper-cases`, which
//! reads the texts through espeak-ng as the server does, so that the device needs no espeak-ng
//! for this check), else from espeak-ng here.
//!
//!   target/release/device-check --write-piper-cases target/gpu-check/cases --piper .cache/piper/en_US-joe-medium.onnx
//!   target/release/device-check --device cuda --piper DIR/en_US-joe-medium.onnx --piper-ids target/gpu-check/cases/piper-check.json

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::json;
use speechstream_engine_libtorch::dsp::spectral_distance;
use speechstream_engine_libtorch::g2p::espeak::Espeak;
use speechstream_engine_libtorch::kokoro::serve::Vocab;
use speechstream_engine_libtorch::kokoro::voices;
use speechstream_engine_libtorch::piper::serve::PiperConfig;
use speechstream_engine_libtorch::piper::{PiperModel, Scales};
use speechstream_engine_libtorch::{load_front_end, parse_device, Hibari, KokoroModel, NoiseSource, Precision};
use tch::{Device, Tensor};

#[derive(Parser)]
#[command(
    name = "device-check",
    about = "hibari (or Kokoro-82M, or a Piper voice) on a device against the CPU, in fp32"
)]
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
    /// Move the device's input by this part (e.g. 1e-6): with `--device cpu`, how far the CPU's
    /// own arithmetic moves for an input change of that size (the tolerance's scale). Kokoro:
    /// its style; hibari: its f0 before the pulse train (`audio_own_f0`).
    #[arg(long, default_value_t = 0.0)]
    perturb: f32,
    /// Kokoro: the device's precision, fp32 or fp16 (its products in float16), always against
    /// the CPU's fp32 and within the same bounds. Piper: the precision asked for (it runs fp32
    /// on every device but the CPU, and int8 only there; the JSON says what ran).
    #[arg(long, default_value = "fp32")]
    precision: Precision,
    /// Check a Piper voice instead: its .onnx, with its .onnx.json beside it.
    #[arg(long, value_name = "VOICE.onnx")]
    piper: Option<PathBuf>,
    /// Piper: the sentences' phoneme ids, a JSON list of {"text", "ids"} (`--write-piper-cases`'s
    /// piper-check.json) [default: the check's texts read here by espeak-ng, as the server reads].
    #[arg(long, value_name = "FILE")]
    piper_ids: Option<PathBuf>,
    /// Piper: read the check's texts and the in-process speed's two cases through espeak-ng as
    /// the server does, write them into DIR (piper-check.json, piper-short.json, piper-long.json:
    /// {"text", "ids"}, the cases as engine-libtorch's piper_rtf example takes them) and exit.
    #[arg(long, value_name = "DIR", requires = "piper")]
    write_piper_cases: Option<PathBuf>,
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
    if let (Some(onnx), Some(dir)) = (&args.piper, &args.write_piper_cases) {
        // no device involved
        return match write_piper_cases(onnx, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("device-check: Piper: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
    if let Some(onnx) = &args.piper {
        return match piper_check(onnx, args.piper_ids.as_deref(), device, args.precision) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("device-check: Piper: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
            // (`--perturb`: the device's f0 moved by that part of itself, its pulses from that)
            let mut p_dev = p_dev;
            let f0_dev = &p_dev.f0 * (1.0 + f64::from(args.perturb));
            if args.perturb != 0.0 {
                dev.pulses_from(&mut p_dev, &f0_dev);
            }
            let a_own = dev.synthesize_chunk(&p_dev, 0, p_dev.frames, &noise);
            // The audio from one source: the device's pulse train made from the CPU's f0.
            let mut p_same = dev.prosody_with_durations(&ids, 1.0, &p_cpu.durations);
            dev.pulses_from(&mut p_same, &p_cpu.f0);
            let a_dev = dev.synthesize_chunk(&p_same, 0, p_same.frames, &noise);
            // What the device's f0 does to the CPU's own audio: its pulses from the device's f0.
            let mut p_moved = cpu.prosody(&ids, 1.0);
            cpu.pulses_from(&mut p_moved, &f0_dev);
            let a_moved = cpu.synthesize_chunk(&p_moved, 0, p_moved.frames, &noise);
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
            // Reported, not held to the tolerance: the device's audio from its own f0, and the
            // CPU's from the device's f0 (the same difference, if the f0 explains it).
            results.push(json!({
                "text": sentence.text,
                "frames": p_cpu.frames,
                "max_abs_diff": diffs,
                "audio_own_f0": max_diff(&a_cpu, &a_own),
                "cpu_audio_at_device_f0": max_diff(&a_cpu, &a_moved),
            }));
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
    let batch = kokoro_batch_check(&dev, onnx, device, precision, &front_end, &vocab, &voice.pack)?;
    pass &= batch["pass"].as_bool() == Some(true);
    let line = json!({
        "kind": "device_check_kokoro",
        "device": format!("{device:?}"),
        "precision": precision.to_string(),
        "perturb": perturb,
        "voice": voice.name, "another_voice": other.name,
        "tolerance": {"durations_raw_frames": raw_tol, "curves_rel_rms": curve_tol, "spectral_db": spectral_tol},
        "pass": pass,
        "sentences": results,
        "batch": batch,
    });
    println!("{line}");
    eprintln!(
        "device-check: Kokoro on {device:?} in {precision} against the CPU's fp32: {}",
        if pass { "pass" } else { "FAIL" }
    );
    Ok(pass)
}

/// Every sentence of [`TEXTS`] through `dev` in one pass against each alone on it (module doc):
/// the batch's JSON, with `pass`. On the CPU a model of the device's paths is loaded for it
/// (fp32 only: fp16 there is skipped, too slow).
fn kokoro_batch_check(
    dev: &KokoroModel,
    onnx: &Path,
    device: Device,
    precision: Precision,
    front_end: &speechstream_engine_libtorch::g2p::FrontEnd,
    vocab: &Vocab,
    pack: &voices::VoicePack,
) -> Result<serde_json::Value, String> {
    if device == Device::Cpu && precision == Precision::Fp16 {
        // (libtorch's half-precision convolutions on the CPU: minutes for these sentences)
        return Ok(json!({ "skipped": "fp16 on the CPU is too slow to batch-check", "pass": true }));
    }
    let paths;
    let dev = if dev.batches() {
        dev
    } else {
        paths = KokoroModel::load_device_paths(onnx, precision)?;
        &paths
    };
    let ids: Vec<Vec<i64>> =
        TEXTS.iter().flat_map(|t| front_end.sentences(t)).map(|s| vocab.ids(&s.phonemes)).collect();
    let items: Vec<(&[i64], &[f32], f32)> = ids.iter().map(|ids| (&ids[..], pack.style(ids.len()), 1.0)).collect();
    let (raw_tol, curve_tol, spectral_tol) = KOKORO_TOLERANCE;
    let mut pass = true;
    let mut results = Vec::new();
    for (&(ids, style, speed), got) in items.iter().zip(dev.infer_batch_traced(&items)?) {
        let (b, bt) = got?;
        let (a, at) = dev.infer_traced(ids, style, speed, None)?;
        let raw =
            bt.durations_raw.iter().zip(&at.durations_raw).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max);
        let same = b.durations == a.durations;
        let (f0, n, spectral) = if same {
            (rel_rms(&bt.f0, &at.f0), rel_rms(&bt.n, &at.n), spectral_distance(&b.audio, &a.audio))
        } else {
            (f64::INFINITY, f64::INFINITY, f64::INFINITY)
        };
        let ok = same && raw <= raw_tol && f0 <= curve_tol && n <= curve_tol && spectral <= spectral_tol;
        pass &= ok;
        results.push(json!({
            "ids": ids.len(), "durations_equal": same, "durations_raw_max_abs": raw,
            "f0_rel_rms": f0, "n_rel_rms": n, "spectral_db": spectral, "pass": ok,
        }));
    }
    eprintln!(
        "device-check: Kokoro on {device:?} in {precision}, {} sentences in one pass against each alone: {}",
        items.len(),
        if pass { "pass" } else { "FAIL" }
    );
    Ok(json!({ "segments": items.len(), "pass": pass, "sentences": results }))
}

/// Piper's bound, device against CPU (both fp32, the same ids and noise): the durations equal
/// (VITS ceils them: a change would move every sample after it), and the audio at least this
/// signal-to-noise ratio from the CPU's, in dB. For scale: our CPU's fp32 is within 2.4e-5 (max
/// abs) of onnxruntime's on joe (tests/piper_model.rs), the CPU's int8 13-20 dB from its fp32 on
/// these sentences (`--device cpu --precision int8` fails this check); TF32 (10-bit mantissas,
/// which the engine turns off on CUDA) moved hibari's audio by up to 0.14.
const PIPER_SNR_DB: f64 = 40.0;

/// The in-process speed's two texts (`--write-piper-cases`): one short sentence, and a paragraph
/// read as one pass (its sentences' phonemes joined, the time of a long segment).
const PIPER_SHORT: &str = "The weather today is sunny with a light breeze from the west.";
const PIPER_LONG: &str = "The old lighthouse stood at the edge of the cliff for more than two hundred years. \
    Every night its keeper climbed the narrow stairs, trimmed the wick and watched the lamp turn slowly \
    over the dark water. Ships that passed far out at sea saw the light and knew where the rocks were. \
    When the keeper grew old, the town installed an electric lamp, and the stairs were left to the gulls.";

/// One of the check's sentences: its text and phoneme ids.
#[derive(serde::Deserialize, serde::Serialize)]
struct PiperCase {
    text: String,
    ids: Vec<i64>,
}

/// The voice's config (the .onnx.json beside `onnx`).
fn piper_config(onnx: &Path) -> Result<PiperConfig, String> {
    let name = onnx.file_stem().and_then(|s| s.to_str()).unwrap_or("voice");
    PiperConfig::read(&onnx.with_extension("onnx.json"), name)
}

/// `texts` read by espeak-ng as the server reads them for this voice: each sentence's text and
/// phonemes.
fn piper_read(config: &PiperConfig, texts: &[&str]) -> Result<Vec<(String, String)>, String> {
    let espeak = Espeak::for_piper();
    let mut out = Vec::new();
    for text in texts {
        for s in config.phonemizer.sentences(&espeak, text)? {
            out.push((s.text, s.phonemes));
        }
    }
    Ok(out)
}

/// `--write-piper-cases`: the check's sentences and the two speed cases, as JSON files in `dir`.
fn write_piper_cases(onnx: &Path, dir: &Path) -> Result<(), String> {
    let config = piper_config(onnx)?;
    let case = |text: String, phonemes: &str| PiperCase { ids: config.ids.ids(phonemes), text };
    let check: Vec<PiperCase> = piper_read(&config, TEXTS)?.into_iter().map(|(t, p)| case(t, &p)).collect();
    let short = piper_read(&config, &[PIPER_SHORT])?;
    let (text, phonemes) = short.into_iter().next().ok_or("the short text has no sentence")?;
    let short = case(text, &phonemes);
    let long = piper_read(&config, &[PIPER_LONG])?;
    let phonemes = long.iter().map(|(_, p)| p.trim()).collect::<Vec<_>>().join(" ");
    let long = case(PIPER_LONG.to_owned(), &phonemes);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, value: serde_json::Value| {
        let path = dir.join(name);
        std::fs::write(&path, value.to_string()).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("piper-check.json", json!(check))?;
    write("piper-short.json", json!(short))?;
    write("piper-long.json", json!(long))?;
    eprintln!(
        "device-check: Piper cases in {}: {} sentences to check, short {} ids, long {} ids",
        dir.display(),
        check.len(),
        short.ids.len(),
        long.ids.len()
    );
    Ok(())
}

/// Signal-to-noise ratio of `x` against `reference`, in dB (400 for equal signals).
fn snr_db(reference: &[f32], x: &[f32]) -> f64 {
    let signal: f64 = reference.iter().map(|&v| f64::from(v).powi(2)).sum();
    let noise: f64 = reference.iter().zip(x).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum();
    if noise == 0.0 {
        return 400.0;
    }
    10.0 * (signal / noise).log10()
}

/// A Piper voice on `device` in `precision` (what it runs there) against the CPU's fp32 (module
/// doc); prints its JSON line and returns whether it passed.
fn piper_check(onnx: &Path, ids: Option<&Path>, device: Device, precision: Precision) -> Result<bool, String> {
    let config = piper_config(onnx)?;
    let cases: Vec<PiperCase> = match ids {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => piper_read(&config, TEXTS)?
            .into_iter()
            .map(|(text, p)| PiperCase { ids: config.ids.ids(&p), text })
            .collect(),
    };
    if cases.is_empty() {
        return Err("no sentences to check".into());
    }
    let cpu = PiperModel::load(onnx, Device::Cpu, Precision::Fp32)?;
    let dev = PiperModel::load(onnx, device, precision)?;
    // what the server runs on this device (`--precision auto`)
    let auto = PiperModel::auto_precision(device);
    let mut pass = dev.device() == device
        && (device == Device::Cpu || (dev.precision() == Precision::Fp32 && auto == Precision::Fp32));
    let quiet = Scales { noise_scale: 0.0, length_scale: config.scales.length_scale, noise_w: 0.0 };
    let mut results = Vec::new();
    for case in &cases {
        for (noise, scales, seed) in [("off", quiet, 0u64), ("seeded", config.scales, 7)] {
            let c = cpu.infer(&case.ids, None, scales, seed)?;
            let d = dev.infer(&case.ids, None, scales, seed)?;
            let moved = c.durations.iter().zip(&d.durations).filter(|(a, b)| a != b).count();
            let durations_max = c.durations.iter().zip(&d.durations).map(|(a, b)| (a - b).abs()).max().unwrap_or(0);
            let same = c.durations == d.durations && c.audio.len() == d.audio.len();
            let (err, snr) = if same {
                let err = c.audio.iter().zip(&d.audio).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max);
                (Some(err), Some(snr_db(&c.audio, &d.audio)))
            } else {
                (None, None)
            };
            let ok = same && snr.is_some_and(|s| s >= PIPER_SNR_DB);
            pass &= ok;
            let peak = c.audio.iter().fold(0f32, |m, x| m.max(x.abs()));
            results.push(json!({
                "text": case.text, "ids": case.ids.len(), "noise": noise, "seed": seed,
                "scales": [scales.noise_scale, scales.length_scale, scales.noise_w],
                "frames": c.durations.iter().sum::<i64>(), "frames_device": d.durations.iter().sum::<i64>(),
                "durations_differ": moved, "durations_max_abs": durations_max,
                "audio_peak": peak, "audio_max_abs_diff": err, "snr_db": snr, "pass": ok,
            }));
        }
    }
    let line = json!({
        "kind": "device_check_piper",
        "device": format!("{device:?}"),
        "voice": onnx.file_stem().and_then(|s| s.to_str()),
        "precision_asked": precision.to_string(),
        "precision": dev.precision().to_string(),
        "auto_precision": auto.to_string(),
        "model_device": format!("{:?}", dev.device()),
        "tolerance": {"durations": "equal", "snr_db": PIPER_SNR_DB},
        "pass": pass,
        "sentences": results,
    });
    println!("{line}");
    eprintln!(
        "device-check: Piper on {device:?} in {} against the CPU's fp32: {}",
        dev.precision(),
        if pass { "pass" } else { "FAIL" }
    );
    Ok(pass)
}
