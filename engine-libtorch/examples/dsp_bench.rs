//! Times the DSP stages alone on the decoder outputs of benches/texts/long.txt, per second of audio,
//! on one thread (run it under `taskset -c 0`):
//!
//!     cargo run --release -p speechstream-engine-libtorch --example dsp_bench [-- DUMP [COMPARE]]
//!
//! DUMP writes the audio of every sentence (float32, concatenated) there; COMPARE reads such a
//! file (e.g. from another version of the DSP) and prints the largest difference.

use std::time::Instant;

use speechstream_engine_libtorch::dsp::SpectralFrames;
use speechstream_engine_libtorch::*;
use tch::Device;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    keep_freed_memory();
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    let _g = tch::no_grad_guard();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let assets = root.join(".cache/hibari");
    let h = Hibari::load(&assets, Device::Cpu).unwrap();
    let fe = load_front_end(&assets, Device::Cpu, false).unwrap();
    let text = std::fs::read_to_string(root.join("benches/texts/long.txt")).unwrap();
    let items: Vec<(Prosody, Spectra)> = fe
        .sentences(&text)
        .iter()
        .map(|s| {
            let p = h.prosody(&h.ids(&s.phonemes), 1.0);
            let sp = h.decode(&p, 0, p.frames);
            (p, sp)
        })
        .collect();
    let dsp = h.dsp();
    let frames: usize = items.iter().map(|(p, _)| p.frames).sum();
    let secs = frames as f64 * 300.0 / 24000.0;
    // [pulses, pulse_spectrum, noise, spectrum, ola]
    let mut tot = [0f64; 5];
    let mut audio = Vec::new();
    let rounds = 6;
    for round in 0..rounds {
        for (i, (p, sp)) in items.iter().enumerate() {
            let noise = NoiseSource::new(1, i as u64);
            let t0 = Instant::now();
            let pu = dsp.pulses(&p.f0);
            let t1 = Instant::now();
            let (pr, pi) = dsp.pulse_spectrum(&pu, p.frames as i64);
            let t2 = Instant::now();
            let _ = noise.frames_tensor(0, p.frames);
            let t3 = Instant::now();
            let f = SpectralFrames { lh: &sp.lh, theta: &sp.theta, ln: &sp.ln, lr: &sp.lr, phi: &sp.phi };
            let (re, im) = dsp.spectrum(&f, (&pr, &pi), &noise, 0);
            let t4 = Instant::now();
            let y = dsp.ola((&re, &im), 0, p.frames, 0, p.frames);
            let t5 = Instant::now();
            if round > 0 {
                for (k, d) in [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4].iter().enumerate() {
                    tot[k] += d.as_secs_f64();
                }
            } else {
                audio.extend(Vec::<f32>::try_from(&y).unwrap());
            }
        }
    }
    let ms = |x: f64| x / (rounds - 1) as f64 / secs * 1e3;
    println!(
        "per audio second ({secs:.1} s): pulses {:.3} ms, pulse_spectrum {:.3} ms, noise {:.3} ms, \
         spectrum (incl. noise) {:.3} ms, ola {:.3} ms; total {:.3} ms",
        ms(tot[0]),
        ms(tot[1]),
        ms(tot[2]),
        ms(tot[3]),
        ms(tot[4]),
        ms(tot[0] + tot[1] + tot[3] + tot[4])
    );
    if let Some(path) = args.get(1) {
        let bytes: Vec<u8> = audio.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap();
    }
    if let Some(path) = args.get(2) {
        let other: Vec<f32> =
            std::fs::read(path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(other.len(), audio.len());
        let e = audio.iter().zip(&other).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let peak = other.iter().fold(0f32, |m, x| m.max(x.abs()));
        println!("max abs difference to {path}: {e:.3e} (peak {peak:.3})");
    }
}
