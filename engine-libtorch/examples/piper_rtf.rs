//! In-process real-time factor of a Piper voice (src/piper) on one thread: load once, then the
//! best of `REPS` runs of one utterance (a case's phoneme ids at the voice's own scales, seed 0),
//! per precision.
//!
//!   cargo run --release -p speechstream-engine-libtorch --example piper_rtf -- VOICE.onnx CASE.json [REPS] [int8,fp32]
//!
//! CASE.json is `{"text", "ids"}` (benches' `device-check --write-piper-cases` writes a short
//! and a long one). `PIPER_DEVICE=cuda` (or `cuda:N`) runs it on a GPU (scripts/gpu-check.sh),
//! where the network runs in fp32 whatever is asked (int8 is the CPU's): each line says the
//! precision that ran. The CPU otherwise.

use std::path::Path;
use std::time::Instant;

use speechstream_engine_libtorch::piper::serve::PiperConfig;
use speechstream_engine_libtorch::piper::PiperModel;
use speechstream_engine_libtorch::Precision;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: piper_rtf VOICE.onnx CASE.json [REPS] [int8,fp32]");
        std::process::exit(2);
    }
    let onnx = Path::new(&args[1]);
    let name = onnx.file_stem().and_then(|s| s.to_str()).unwrap_or("voice");
    let config = PiperConfig::read(&onnx.with_extension("onnx.json"), name).unwrap_or_else(|e| {
        eprintln!("piper_rtf: {e}");
        std::process::exit(2);
    });
    let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let reps: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(3);
    let precisions = args.get(4).map(String::as_str).unwrap_or("int8,fp32");
    let device =
        match speechstream_engine_libtorch::parse_device(&std::env::var("PIPER_DEVICE").unwrap_or("cpu".into())) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("piper_rtf: {e}");
                std::process::exit(2);
            }
        };
    tch::set_num_threads(1);
    speechstream_engine_libtorch::keep_freed_memory();
    for p in precisions.split(',') {
        let asked: Precision = p.parse().unwrap();
        let t = Instant::now();
        let m = PiperModel::load(onnx, device, asked).unwrap();
        let load = t.elapsed().as_secs_f64();
        let mut best = f64::MAX;
        let mut seconds = 0.0;
        for _ in 0..reps {
            let t = Instant::now();
            let out = m.infer(&ids, None, config.scales, 0).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            seconds = out.audio.len() as f64 / f64::from(config.sample_rate);
        }
        let ran = m.precision();
        println!(
            "native {ran}{} ({}): {} ids, {seconds:.2} s of audio in {best:.3} s (best of {reps}), RTF {:.3}, {:.2}x real time; load {load:.1} s",
            if ran == asked { String::new() } else { format!(" (asked {asked})") },
            if device == tch::Device::Cpu {
                format!("level {}", speechstream_engine_libtorch::cpu::level())
            } else {
                format!("{device:?}")
            },
            ids.len(),
            best / seconds,
            seconds / best
        );
    }
}
