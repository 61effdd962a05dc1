//! The network on a device against the CPU: for a few sentences, the prosody pass (with the
//! CPU's durations, so both regulate to the same frames) and every output of the decoder and
//! the audio, in fp32, compared element by element. For `scripts/gpu-check.sh`.
//!
//!   target/release/device-check --device cuda --tolerance 1e-3
//!
//! One JSON object on stdout: per sentence and quantity the largest absolute difference, and
//! `pass` (every difference within the tolerance); exit status 1 when one is not.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::json;
use speechstream_engine_libtorch::g2p::FrontEnd;
use speechstream_engine_libtorch::{parse_device, Hibari, NoiseSource, Precision};
use tch::{Device, Tensor};

#[derive(Parser)]
#[command(name = "device-check", about = "hibari on a device against the CPU, in fp32")]
struct Args {
    /// The device to check: cuda, cuda:N (or cpu, which checks the comparison itself).
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Largest absolute difference allowed.
    #[arg(long, default_value_t = 1e-3)]
    tolerance: f64,
    /// hibari's assets [default: the checkout's .cache/hibari, or $SPEECHSTREAM_ASSETS].
    #[arg(long)]
    assets: Option<PathBuf>,
}

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
    let load = |d: Device| Hibari::load(&assets, d).and_then(|h| h.with_precision(Precision::Fp32));
    let (cpu, dev) = match (load(Device::Cpu), load(device)) {
        (Ok(c), Ok(d)) => (c, d),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("device-check: loading hibari from {}: {e}", assets.display());
            return ExitCode::FAILURE;
        }
    };
    let front_end = match FrontEnd::load(&assets, Device::Cpu) {
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
