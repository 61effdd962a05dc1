//! The int8 matrix products of the voice's Linear layers, timed alone: our kernels
//! (`speechstream_engine_libtorch::gemm`) at every level this CPU has, against libtorch's
//! `_int_mm` (int8) and its float32 `linear`, one thread, on the model's own shapes.
//!
//!   cargo build --release -p speechstream-benches --features hibari --bin int8-gemm
//!   target/release/int8-gemm
//!
//! `INT8_M=32,832` sets the row counts (default: a chunk's and a sentence's, 16-254; a loaded
//! server batches 800-900 rows, which `QWeight::forward` hands over in blocks of 8-128 rows).
//!
//! Prints one row per shape (M rows × N outputs × K inputs) with each way's GMAC/s (multiply-adds
//! per second, best of the runs). The weights are spread like the voice's (normal, σ = 19 steps).

use std::time::Instant;

use speechstream_engine_libtorch::cpu::Level;
use speechstream_engine_libtorch::gemm::{self, Packed};
use tch::{Device, Kind, Tensor};

/// The voice's Linear shapes (N outputs, K inputs) and how often one pass of each network uses
/// them (docs/hibari-architecture.md §3): the decoder's 8 blocks and head dominate.
const SHAPES: [(&str, usize, usize, usize); 6] = [
    ("dec pw1", 768, 256, 8),
    ("dec pw2", 256, 768, 8),
    ("head", 3005, 256, 1),
    ("pro pw1", 384, 192, 6),
    ("pro pw2", 192, 384, 6),
    ("attn in", 576, 192, 6),
];

fn best(mut f: impl FnMut(), budget_s: f64) -> f64 {
    f();
    let (mut best, start) = (f64::INFINITY, Instant::now());
    let mut runs = 0;
    while runs < 5 || (start.elapsed().as_secs_f64() < budget_s && runs < 2000) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        runs += 1;
    }
    best
}

fn main() {
    tch::set_num_threads(1);
    let _g = tch::no_grad_guard();
    let levels = Level::available();
    print!("{:<9} {:>4} {:>5} {:>4}", "shape", "M", "N", "K");
    for l in &levels {
        print!(" {:>11}", l.to_string());
    }
    println!(" {:>11} {:>11}   (GMAC/s, 1 thread)", "torch int8", "torch fp32");
    let ms: Vec<usize> = match std::env::var("INT8_M") {
        Ok(v) => v.split(',').map(|x| x.trim().parse().expect("INT8_M: row counts, e.g. 32,832")).collect(),
        Err(_) => vec![16, 19, 70, 83, 134, 229, 254],
    };
    for m in ms {
        for (name, n, k, _) in SHAPES {
            let a = Tensor::randint_low(-128, 128, [m as i64, k as i64], (Kind::Int8, Device::Cpu));
            // spread as the voice's weights are (normal, σ = 19 steps; the decoder's and head's
            // are 18.5-20, the largest ±127), so the AVX2 / AVX-512BW kernels split about as few
            // pairs as on the voice
            let x = Tensor::randn([n as i64, k as i64], (Kind::Float, Device::Cpu));
            let w = (&x * 19.0).round().clamp(-127, 127).to_kind(Kind::Int8);
            // as the model hands them over: A + 128 in u8 (onnxruntime's uint8 activations)
            let av = gemm::plus_128(&Vec::<i8>::try_from(a.reshape([-1])).expect("i8"));
            let wv = Vec::<i8>::try_from(w.reshape([-1])).expect("i8");
            let macs = (m * n * k) as f64;
            print!("{name:<9} {m:>4} {n:>5} {k:>4}");
            let mut c = vec![0i32; m * n];
            for &l in &levels {
                let p = Packed::new(&wv, n, k, l);
                let s = best(|| p.matmul_u8(&av, &mut c), 0.2);
                print!(" {:>11.1}", macs / s / 1e9);
            }
            let wt = w.transpose(0, 1).contiguous();
            let s = best(
                || {
                    let _ = a.internal_int_mm(&wt);
                },
                0.2,
            );
            print!(" {:>11.1}", macs / s / 1e9);
            let (af, wf) = (a.to_kind(Kind::Float), w.to_kind(Kind::Float));
            let s = best(
                || {
                    let _ = af.linear::<&Tensor>(&wf, None);
                },
                0.2,
            );
            println!(" {:>11.1}", macs / s / 1e9);
        }
    }
}
