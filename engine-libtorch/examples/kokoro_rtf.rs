//! In-process real-time factor of Kokoro (src/kokoro) on one thread: load once, then the best of
//! `REPS` runs of one utterance (a fixture case's phoneme ids and style), per precision.
//!
//!   cargo run -p speechstream-engine-libtorch --example kokoro_rtf -- MODEL CASE.json [REPS] [int8,fp32,fp16]
//!
//! `KOKORO_DEVICE=cuda` (or `cuda:N`) runs it on a GPU (scripts/gpu-check.sh); the CPU otherwise.
//! `KOKORO_BATCH=N` also times N segments in one pass (`infer_batch`: the case's ids cut to
//! N lengths from half to all of them, so that the pass pads as a server's round of different
//! sentences does) against the same N one after the other; fp32 and fp16 only, on the CPU with
//! the paths a GPU takes (`load_device_paths`: only there does a batch run as one pass).
//!
//! In int8 it also prints the network's int8 multiply-adds a pass and a second of audio
//! (`gemm::multiply_adds`): its arithmetic, to set against `int8-gemm --kokoro`'s rate.
//!
//! scripts/bench-kokoro.sh runs it beside onnxruntime (kokoro-onnx's runtime) on the same model.

use std::path::Path;
use std::time::Instant;

use speechstream_engine_libtorch::{KokoroModel, Precision};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: kokoro_rtf MODEL CASE.json [REPS] [int8,fp32,fp16]");
        std::process::exit(2);
    }
    let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let style: Vec<f32> = case["style"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let speed = case["speed"].as_f64().unwrap() as f32;
    let reps: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(3);
    let precisions = args.get(4).map(String::as_str).unwrap_or("int8,fp32");
    let device =
        match speechstream_engine_libtorch::parse_device(&std::env::var("KOKORO_DEVICE").unwrap_or("cpu".into())) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("kokoro_rtf: {e}");
                std::process::exit(2);
            }
        };
    tch::set_num_threads(1);
    speechstream_engine_libtorch::keep_freed_memory();
    for p in precisions.split(',') {
        let precision: Precision = p.parse().unwrap();
        let t = Instant::now();
        let m = KokoroModel::load(Path::new(&args[1]), device, precision).unwrap();
        let load = t.elapsed().as_secs_f64();
        let mut best = f64::MAX;
        let mut seconds = 0.0;
        let counted = speechstream_engine_libtorch::gemm::multiply_adds();
        for _ in 0..reps {
            let t = Instant::now();
            let out = m.infer(&ids, &style, speed).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            seconds = out.audio.len() as f64 / 24_000.0;
        }
        let on = if device == tch::Device::Cpu {
            format!("level {}", speechstream_engine_libtorch::cpu::level())
        } else {
            format!("{device:?}")
        };
        println!(
            "native {precision} ({on}): {seconds:.2} s of audio in {best:.3} s (best of {reps}), RTF {:.3}, {:.2}x real time; load {load:.1} s",
            best / seconds,
            seconds / best
        );
        // (int8: the network's arithmetic, our kernels' products; `int8-gemm --kokoro` times
        // their rate alone)
        let macs = (speechstream_engine_libtorch::gemm::multiply_adds() - counted) as f64 / reps as f64;
        if macs > 0.0 {
            println!(
                "  int8 products: {:.2} GMAC a pass, {:.2} GMAC a second of audio ({:.0} GMAC/s over the best pass)",
                macs / 1e9,
                macs / 1e9 / seconds,
                macs / 1e9 / best
            );
        }
        if let Some(n) = std::env::var("KOKORO_BATCH").ok().and_then(|v| v.parse::<usize>().ok()).filter(|&n| n > 1) {
            if precision == Precision::Int8 {
                continue;
            }
            let m = if device == tch::Device::Cpu {
                KokoroModel::load_device_paths(Path::new(&args[1]), precision).unwrap()
            } else {
                m
            };
            let lens: Vec<usize> = (0..n).map(|i| ids.len() * (n - 1 + i) / (2 * (n - 1))).map(|l| l.max(1)).collect();
            let items: Vec<(&[i64], &[f32], f32)> = lens.iter().map(|&l| (&ids[..l], &style[..], speed)).collect();
            let (mut batched, mut alone, mut seconds) = (f64::MAX, f64::MAX, 0.0);
            for _ in 0..reps {
                let t = Instant::now();
                let out = m.infer_batch(&items).unwrap();
                batched = batched.min(t.elapsed().as_secs_f64());
                seconds = out.iter().map(|o| o.as_ref().unwrap().audio.len() as f64 / 24_000.0).sum::<f64>();
                let t = Instant::now();
                for &(ids, style, speed) in &items {
                    m.infer(ids, style, speed).unwrap();
                }
                alone = alone.min(t.elapsed().as_secs_f64());
            }
            println!(
                "native {precision} ({on}), {n} segments ({}-{} ids): {seconds:.2} s of audio in one pass {batched:.3} s, \
                 {:.2}x real time; one after the other {alone:.3} s, {:.2}x (best of {reps}): the pass {:.2}x as fast",
                lens[0],
                lens[n - 1],
                seconds / batched,
                seconds / alone,
                alone / batched
            );
        }
    }
}
