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
//!
//! `int8-gemm --kokoro`: Kokoro's generator convolutions instead (docs/kokoro-architecture.md §7:
//! C → C channels, kernel k, dilation d, over the weather fixture's 1,504 and 9,024 frames), each
//! row of A read in place from the time-major input (`Packed::matmul_u8_taps`), at every level.

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

/// Kokoro's generator convolutions: (frames, channels, kernel, dilation); each stage has three
/// resblocks (kernels 3, 7, 11) and a noise block (kernel 7, then 11), each with convolutions of
/// dilation 1, 3, 5 and three of dilation 1.
const KOKORO: [(usize, usize, usize, usize); 10] = [
    (1504, 256, 3, 1),
    (1504, 256, 7, 1),
    (1504, 256, 7, 3),
    (1504, 256, 11, 1),
    (1504, 256, 11, 5),
    (9024, 128, 3, 1),
    (9024, 128, 7, 1),
    (9024, 128, 11, 1),
    (9024, 128, 11, 3),
    (9024, 128, 11, 5),
];

fn kokoro(levels: &[Level]) {
    print!("{:<6} {:>4} {:>3} {:>3}", "frames", "C", "k", "dil");
    for l in levels {
        print!(" {:>11}", l.to_string());
    }
    println!("   (GMAC/s, 1 thread)");
    for (frames, c, k, dil) in KOKORO {
        let pad = dil * (k - 1) / 2;
        let x = Tensor::randint_low(0, 256, [((frames + 2 * pad) * c) as i64], (Kind::Uint8, Device::Cpu));
        let xt = Vec::<u8>::try_from(&x).expect("u8");
        // spread as the generator's weights are (rms 4.5-10 steps, the largest 64-88)
        let w = (Tensor::randn([c as i64, (c * k) as i64], (Kind::Float, Device::Cpu)) * 7.0)
            .round()
            .clamp(-127, 127)
            .to_kind(Kind::Int8);
        let wv = Vec::<i8>::try_from(w.reshape([-1])).expect("i8");
        let mut y = vec![0i32; frames * c];
        print!("{frames:<6} {c:>4} {k:>3} {dil:>3}");
        for &l in levels {
            let p = Packed::new(&wv, c, c * k, l);
            let s = best(|| p.matmul_u8_taps(&xt, frames, c, k, c, dil * c, &mut y), 0.3);
            print!(" {:>11.1}", (frames * c * c * k) as f64 / s / 1e9);
        }
        println!();
    }
}

fn main() {
    tch::set_num_threads(1);
    let _g = tch::no_grad_guard();
    let levels = Level::available();
    if std::env::args().any(|a| a == "--kokoro") {
        return kokoro(&levels);
    }
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
