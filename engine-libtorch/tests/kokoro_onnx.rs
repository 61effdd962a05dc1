//! Kokoro-82M's hand-written network (src/kokoro) against onnxruntime on the same int8 export
//! (`.cache/kokoro/kokoro-v1.0.int8.onnx`, scripts/setup-voice.sh kokoro), on the reference outputs
//! of fixtures/kokoro/make_fixtures.py.
//!
//! What can be compared, and how closely: the export is deterministic (its harmonic source has no
//! random phase or noise), but its int8 graph requantizes every activation tensor, so one float
//! rounding that differs from onnxruntime's moves a uint8 code by one, and that grows through the
//! twelve ALBERT layers and the decoder; the generator's STFT phases of the DC and Nyquist bins are
//! arctangents of rounding noise (see docs/kokoro-architecture.md). onnxruntime itself moves as
//! much when its input moves by 1e-6. So: the durations before rounding within a fraction of a
//! frame, the rounded ones within one frame; with onnxruntime's durations fed in (so that the
//! lengths agree), the F0 and N curves within a few percent and the audio's log spectra within a
//! few dB, where another voice's style is far beyond that bound (the check can fail).

mod common;

use common::{kokoro_fixture as fixture, kokoro_model as model, max_abs_diff, reals as floats};
use speechstream_engine_libtorch::cpu::{self, Level};
use speechstream_engine_libtorch::{dsp, KokoroModel, Precision};
use tch::Device;

/// Root mean square of `a − b` over the RMS of `b`.
fn rel_rms(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let e: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let r: f32 = b.iter().map(|y| y * y).sum();
    (e / r).sqrt()
}

/// [`dsp::spectral_distance`] in the bounds' precision.
fn spectral_distance(a: &[f32], b: &[f32]) -> f32 {
    dsp::spectral_distance(a, b) as f32
}

struct Got {
    raw: Vec<f32>,
    durations: Vec<i64>,
    f0: Vec<f32>,
    n: Vec<f32>,
    audio: Vec<f32>,
}

/// Runs a fixture's inputs with `style`, onnxruntime's durations fed in place of ours.
fn run(model: &KokoroModel, case: &serde_json::Value, style: &[f32]) -> Got {
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let fed: Vec<i64> = case["durations"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let speed = case["speed"].as_f64().unwrap() as f32;
    let (out, trace) = model.infer_traced(&ids, style, speed, Some(&fed)).unwrap();
    Got { raw: trace.durations_raw, durations: out.durations, f0: trace.f0, n: trace.n, audio: out.audio }
}

/// The bounds of every precision against onnxruntime: F0 and N within 3% relative RMS, the
/// audio's log spectra within 6 dB (another voice's style: 3 dB further still), the durations
/// before rounding within 0.6 of a frame (the rounded ones within one). Set from every CPU code
/// path scripts/cpu-paths.sh emulates (AMD EPYC Zen 4, 2026-12-06; docs/engines.md, "The same
/// tests on every CPU"): on this CPU's own path F0 ≤ 1.5%, N ≤ 0.6%, spectra ≤ 4.08 dB, durations
/// ±0.18 frames; on MKL's SSE2 branch ±0.29 (int8 "hello"). A path not emulated here (the other
/// vendor's MKL branch) is at most the spread tests/cpu_paths.rs holds away from this one (1.75
/// dB, 0.4 frames): 4.08 + 1.75 ≤ 6 dB, 0.18 + 0.4 ≤ 0.6 frames.
const BOUNDS: (f32, f32, f32) = (0.03, 6.0, 0.6);

/// Holds `precision` to onnxruntime's reference on the fixtures `names`; returns what it got for
/// each (with the fixture's own style).
fn check(precision: Precision, bounds: (f32, f32, f32), names: &[&str]) -> Vec<Got> {
    let (curve_bound, spectral_bound, raw_bound) = bounds;
    let net = KokoroModel::load(&model(), Device::Cpu, precision).unwrap();
    let mut all = Vec::new();
    for &name in names {
        let (case, audio) = fixture(name);
        let style = floats(&case["style"]);
        let got = run(&net, &case, &style);
        let raw = floats(&case["durations_raw"]);
        let raw_err = got.raw.iter().zip(&raw).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let f0 = rel_rms(&got.f0, &floats(&case["f0"]));
        let n = rel_rms(&got.n, &floats(&case["n"]));
        assert_eq!(got.audio.len(), audio.len(), "{name}: the fed durations fix the length");
        let d = spectral_distance(&got.audio, &audio);
        // Another voice's style row on the same phonemes and durations
        let other = if case["voice"] == "jm_kumo" { "hello" } else { "weather" };
        let other_style = floats(&fixture(other).0["style"]);
        let wrong = spectral_distance(&run(&net, &case, &other_style).audio, &audio);
        eprintln!(
            "{precision} {name}: durations ±{raw_err:.3} frames, F0 {f0:.4}, N {n:.4} (relative RMS), \
             spectra {d:.2} dB (another voice: {wrong:.2} dB)"
        );
        assert!(raw_err < raw_bound, "{name}: raw durations off by {raw_err}");
        assert!(f0 < curve_bound && n < curve_bound, "{name}: F0 {f0}, N {n}");
        assert!(d < spectral_bound, "{name}: spectral distance {d} dB");
        assert!(wrong > d + 3.0, "{name}: another voice is only {wrong} dB away (ours {d}): the check proves nothing");
        // Our own rounding of our raw durations, within one frame of onnxruntime's
        let ours: Vec<i64> = got.raw.iter().map(|v| (v.round_ties_even() as i64).max(1)).collect();
        let theirs = &case["durations"];
        for (i, d) in ours.iter().enumerate() {
            assert!((d - theirs[i].as_i64().unwrap()).abs() <= 1, "{name}: token {i}: {d} vs {}", theirs[i]);
        }
        assert_eq!(got.durations.len(), raw.len());
        all.push(got);
    }
    all
}

#[test]
fn int8_agrees_with_onnxruntime() {
    check(Precision::Int8, BOUNDS, &["hello", "weather"]);
}

#[test]
fn fp32_agrees_with_onnxruntime() {
    check(Precision::Fp32, BOUNDS, &["hello", "weather"]);
}

/// The public entry: pads added, one duration per token and pad, audio of their frames.
#[test]
fn infer_returns_audio_of_its_durations() {
    let m = KokoroModel::load(&model(), Device::Cpu, Precision::Int8).unwrap();
    let (case, _) = fixture("hello");
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let out = m.infer(&ids, &floats(&case["style"]), 1.0).unwrap();
    assert_eq!(out.durations.len(), ids.len() + 2);
    assert!(out.durations.iter().all(|&d| d >= 1));
    let frames: i64 = out.durations.iter().sum();
    assert_eq!(out.audio.len(), frames as usize * out.samples_per_frame);
    let peak = out.audio.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(peak > 0.05 && peak <= 1.5, "peak {peak}");
    // Twice the speed, about half the frames
    let fast = m.infer(&ids, &floats(&case["style"]), 2.0).unwrap();
    let fast_frames: i64 = fast.durations.iter().sum();
    assert!((fast_frames as f32) < 0.65 * frames as f32, "{fast_frames} vs {frames}");
    assert!(m.infer(&[], &floats(&case["style"]), 1.0).is_err());
    assert!(m.infer(&ids, &[0.0; 10], 1.0).is_err());
    assert!(m.infer(&ids, &floats(&case["style"]), 0.0).is_err());
}

/// One loaded model shared by threads (as the engine's workers share it) gives each the same
/// audio, bit for bit, as a run alone.
#[test]
fn shared_between_threads_gives_the_same_bits() {
    fn shareable<T: Send + Sync>(_: &T) {}
    let m = KokoroModel::load(&model(), Device::Cpu, Precision::Int8).unwrap();
    shareable(&m);
    let (case, _) = fixture("hello");
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let style = floats(&case["style"]);
    let alone = m.infer(&ids, &style, 1.0).unwrap();
    let outs: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|_| s.spawn(|| m.infer(&ids, &style, 1.0).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in outs {
        assert_eq!(o.durations, alone.durations);
        assert!(o.audio == alone.audio, "a thread's audio differs from the run alone");
    }
}

/// Every CPU level of our int8 kernels (src/gemm.rs) gives the int8 network's audio and durations
/// bit for bit as the portable baseline does, on the model's own weights and shapes.
#[test]
fn every_cpu_level_gives_the_baseline_bits() {
    let (case, _) = fixture("hello");
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let style = floats(&case["style"]);
    let run = |level: Level| {
        let got = cpu::set_cap(level);
        let m = KokoroModel::load(&model(), Device::Cpu, Precision::Int8).unwrap();
        let out = m.infer(&ids, &style, 1.0).unwrap();
        (got, out.durations, out.audio.iter().map(|v| v.to_bits()).collect::<Vec<u32>>())
    };
    let (_, durations, audio) = run(Level::Baseline);
    let levels = Level::available();
    eprintln!("levels on this CPU: {levels:?}");
    for level in levels.into_iter().filter(|&l| l != Level::Baseline) {
        let (got, d, a) = run(level);
        assert_eq!(got, level);
        assert_eq!(d, durations, "{level}: durations differ from the baseline's");
        assert!(a == audio, "{level}: audio differs from the baseline's");
    }
    cpu::reset_cap();
}

/// fp16 (the products in float16, for CUDA; run here on the CPU): as close to onnxruntime as
/// fp32 is, and near fp32 itself, on the same durations. On the short fixture only: the CPU's
/// float16 products are slow (the weather fixture took this test three minutes of CI), and the
/// arithmetic is the same on any length.
#[test]
fn fp16_agrees_with_onnxruntime_and_fp32() {
    let h = check(Precision::Fp16, BOUNDS, &["hello"]).remove(0);
    let full = KokoroModel::load(&model(), Device::Cpu, Precision::Fp32).unwrap();
    let (case, _) = fixture("hello");
    let f = run(&full, &case, &floats(&case["style"]));
    let (d, f0) = (spectral_distance(&h.audio, &f.audio), rel_rms(&h.f0, &f.f0));
    eprintln!("fp16 against fp32, hello: spectra {d:.2} dB, F0 {f0:.4} (relative RMS)");
    assert!(d < 2.0 && f0 < 0.01, "fp16 is {d} dB (F0 {f0}) from fp32");
    assert_ne!(h.audio, f.audio, "fp16 computed in float32 after all");
}

/// The network's GPU paths (the LSTMs as libtorch `lstm` passes, the source's running sum and
/// STFT as tensor passes: `KokoroModel::load_device_paths`), run here on the CPU, against the
/// CPU's own paths in fp32, within the tolerances the GPU check holds the device to
/// (benches/src/bin/device_check.rs: durations before rounding 0.05 frames, F0 and N 0.01
/// relative RMS, audio 2 dB, another voice twice that away), on both fixtures and their
/// predicted durations.
#[test]
fn the_gpu_paths_agree_with_the_cpu_paths() {
    let host = KokoroModel::load(&model(), Device::Cpu, Precision::Fp32).unwrap();
    let device = KokoroModel::load_device_paths(&model(), Precision::Fp32).unwrap();
    assert!(KokoroModel::load_device_paths(&model(), Precision::Int8).is_err());
    for name in ["hello", "weather"] {
        let (case, _) = fixture(name);
        let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let style = floats(&case["style"]);
        let speed = case["speed"].as_f64().unwrap() as f32;
        let (h, ht) = host.infer_traced(&ids, &style, speed, None).unwrap();
        let (d, dt) = device.infer_traced(&ids, &style, speed, None).unwrap();
        let raw = ht.durations_raw.iter().zip(&dt.durations_raw).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert_eq!(h.durations, d.durations, "{name}: durations");
        let (f0, n) = (rel_rms(&dt.f0, &ht.f0), rel_rms(&dt.n, &ht.n));
        let db = spectral_distance(&d.audio, &h.audio);
        let other = if name == "hello" { "weather" } else { "hello" };
        let (wrong, _) =
            device.infer_traced(&ids, &floats(&fixture(other).0["style"]), speed, Some(&h.durations)).unwrap();
        let wrong_db = spectral_distance(&wrong.audio, &h.audio);
        eprintln!(
            "GPU paths on the CPU, {name}: durations ±{raw:.2e} frames, F0 {f0:.2e}, N {n:.2e} (relative RMS), \
             audio {db:.3} dB (another voice {wrong_db:.2} dB)"
        );
        assert!(raw < 0.05 && f0 < 0.01 && n < 0.01 && db < 2.0, "{name}: the GPU paths are off");
        assert!(wrong_db > 4.0, "{name}: another voice is only {wrong_db} dB away: the check proves nothing");
        assert_ne!(h.audio, d.audio, "{name}: the GPU paths were not taken");
    }
}

/// Segments of different lengths, styles and speeds through the device's paths in one pass
/// (`infer_batch`, fp32) give each one's durations, F0 and N as alone within float
/// rounding (1e-5 relative; measured 4e-8 to 2e-7 in fp32), and its audio within 0.5 dB of its
/// log spectra (measured 0.06-0.09 dB: the source's phase, a running sum over the segment,
/// turns F0's last bits into 1-3% of the waveform, as hibari's does: benches/results/15-gpu.md).
/// A refused segment (no ids) is refused alone. Where the padding leaked into a segment (its
/// instance norms over the longest's steps: F0 5%, 5.6 dB; its LSTMs run backwards from the
/// padding: durations 2 frames off), the bounds fail. (fp16 runs the same masks; its products
/// in half precision, summed in another order, moved F0 by 6.4e-6 and N by 9.0e-5 on "hello",
/// 0.06 dB; not run here: fp16 on the CPU took over a minute.)
#[test]
fn a_batch_on_the_gpu_paths_gives_each_segment_its_audio_alone() {
    let (hello, weather) = (fixture("hello").0, fixture("weather").0);
    let ids = |c: &serde_json::Value| -> Vec<i64> {
        c["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
    };
    let (hello_ids, weather_ids) = (ids(&hello), ids(&weather));
    let (hello_style, weather_style) = (floats(&hello["style"]), floats(&weather["style"]));
    let items: Vec<(&[i64], &[f32], f32)> = vec![
        (&hello_ids, &hello_style, 1.0),
        (&weather_ids, &weather_style, 1.0),
        (&[], &hello_style, 1.0),
        (&hello_ids[..hello_ids.len() / 2], &weather_style, 1.3),
    ];
    let device = KokoroModel::load_device_paths(&model(), Precision::Fp32).unwrap();
    assert!(device.batches());
    let batched = device.infer_batch_traced(&items).unwrap();
    assert_eq!(batched.len(), items.len());
    assert!(batched[2].is_err(), "no ids: refused");
    for (i, (&(ids, style, speed), got)) in items.iter().zip(&batched).enumerate() {
        if ids.is_empty() {
            continue;
        }
        let (got, trace) = got.as_ref().unwrap();
        let (alone, alone_trace) = device.infer_traced(ids, style, speed, None).unwrap();
        let raw = max_abs_diff(&trace.durations_raw, &alone_trace.durations_raw);
        assert_eq!(got.durations, alone.durations, "segment {i}: durations (±{raw} before rounding)");
        assert_eq!(got.audio.len(), alone.audio.len(), "segment {i}: samples");
        let (f0, n) = (rel_rms(&trace.f0, &alone_trace.f0), rel_rms(&trace.n, &alone_trace.n));
        let (off, db) = (rel_rms(&got.audio, &alone.audio), spectral_distance(&got.audio, &alone.audio));
        eprintln!(
            "segment {i} ({} ids), batched against alone: durations ±{raw:.2e} frames, F0 {f0:.2e}, \
             N {n:.2e}, audio {off:.2e} relative RMS, {db:.4} dB",
            ids.len()
        );
        assert!(raw < 1e-3 && f0 < 1e-5 && n < 1e-5, "segment {i}: the batch moved its prosody");
        assert!(db < 0.5, "segment {i}: the batch moved its audio by {db} dB");
    }
}
