//! The native tch implementation against onnxruntime on the dequantized fp32 graph and hibari's own
//! dsp.py (fixtures from fixtures/make_fixtures.py), plus chunked == whole and batched == single
//! (prosody and decoder).
//! Needs `.cache` from scripts/setup-voice.sh (fails with a message when it is missing).

mod common;

use common::*;
use speechstream_engine_libtorch::{chunk_ranges, Hibari, NoiseSource, Prosody, Spectra};
use tch::{Device, Tensor};

const OUTPUTS: [&str; 5] = ["lh", "theta", "ln", "lr", "phi"];
const TOL: f32 = 1e-3;

/// f0 against onnxruntime, Hz: 3.0e-4 on this CPU's own path, 7.4e-4 on MKL's SSE2 branch
/// (`MKL_CBWR=COMPATIBLE`, scripts/cpu-paths.sh; AMD EPYC Zen 4, 2026-12-06), where [`TOL`]
/// left a third of that; 2e-3 Hz is still 1e-5 of a 200 Hz voice.
const F0_TOL: f32 = 2e-3;

fn model() -> Hibari {
    Hibari::load(hibari_assets(), Device::Cpu).expect("loading hibari")
}

#[test]
fn network_matches_onnxruntime() {
    let h = model();
    let m = manifest();
    let cases = m["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut worst = [0f32; 6];
    let mut worst_sums = [0f64; 2];
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let ids = ints(&case["ids"]);
        let speed = case["speed"].as_f64().unwrap() as f32;
        let fr = case["frames_total"].as_u64().unwrap() as usize;
        let p = h.prosody(&ids, speed);
        // the ids a G2P string gives go through the vocab the same way
        assert_eq!(h.ids(case["phonemes"].as_str().unwrap()), ids, "{name}: ids");
        let ref_d: Vec<i64> = case["durations"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let ref_s: Vec<f32> =
            case["log_durations"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let ds = max_abs_diff(&p.log_durations, &ref_s);
        assert!(ds < 1e-4, "{name}: log-durations differ by {ds}");
        if p.durations != ref_d {
            failures.push(format!("{name}: durations {:?} != {:?}", p.durations, ref_d));
            continue;
        }
        assert_eq!(p.frames, fr, "{name}: F");
        let frames: Vec<usize> =
            case["frames"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        let data = read_f32(&fixtures().join(format!("{name}.f32")));
        let nf = frames.len();
        assert_eq!(data.len(), 5 * nf * 601 + fr + 5 * fr + 5 * 601, "{name}: fixture size");
        let sp = h.decode(&p, 0, fr);
        for (o, t) in sp.outputs().iter().enumerate() {
            let ours = to_vec(t); // [F, 601]
            for (i, &f) in frames.iter().enumerate() {
                let r = &data[(o * nf + i) * 601..(o * nf + i + 1) * 601];
                let e = max_abs_diff(&ours[f * 601..(f + 1) * 601], r);
                worst[o] = worst[o].max(e);
                if e > TOL {
                    failures.push(format!("{name}: {} frame {f} off by {e}", OUTPUTS[o]));
                }
            }
            // per-frame sums over bins, per-bin sums over frames (float64 in the reference)
            let sums = &data[5 * nf * 601 + fr + o * fr..5 * nf * 601 + fr + (o + 1) * fr];
            for (f, &r) in sums.iter().enumerate() {
                let s: f64 = ours[f * 601..(f + 1) * 601].iter().map(|&x| f64::from(x)).sum();
                let e = (s - f64::from(r)).abs();
                worst_sums[0] = worst_sums[0].max(e);
                if e > 601.0 * f64::from(TOL) * 0.1 {
                    failures.push(format!("{name}: {} frame {f} sum off by {e}", OUTPUTS[o]));
                }
            }
            let base = 5 * nf * 601 + fr + 5 * fr + o * 601;
            for b in 0..601 {
                let s: f64 = (0..fr).map(|f| f64::from(ours[f * 601 + b])).sum();
                let e = (s - f64::from(data[base + b])).abs();
                worst_sums[1] = worst_sums[1].max(e);
                if e > fr as f64 * f64::from(TOL) * 0.1 + 1e-2 {
                    failures.push(format!("{name}: {} bin {b} sum off by {e}", OUTPUTS[o]));
                }
            }
            let st = &case["stats"][OUTPUTS[o]];
            let total: f64 = ours.iter().map(|&x| f64::from(x)).sum();
            let rt = st["sum"].as_f64().unwrap();
            assert!(
                (total - rt).abs() <= (ours.len() as f64) * 1e-4 + 1e-2,
                "{name}: {} total {total} vs {rt}",
                OUTPUTS[o]
            );
        }
        let f0 = to_vec(&p.f0);
        let e = max_abs_diff(&f0, &data[5 * nf * 601..5 * nf * 601 + fr]);
        worst[5] = worst[5].max(e);
        if e > F0_TOL {
            failures.push(format!("{name}: f0 off by {e}"));
        }
        assert_eq!(to_vec(&sp.f0), f0);
    }
    eprintln!(
        "max abs error over {} cases: lh {:.2e} theta {:.2e} ln {:.2e} lr {:.2e} phi {:.2e} f0 {:.2e}; \
         per-frame sums {:.2e}, per-bin sums {:.2e}",
        cases.len(),
        worst[0],
        worst[1],
        worst[2],
        worst[3],
        worst[4],
        worst[5],
        worst_sums[0],
        worst_sums[1]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The DSP alone, on spectra both sides read from the same (float16-rounded) fixture.
#[test]
fn dsp_matches_hibari_dsp_py() {
    let h = model();
    let m = manifest();
    let d = &m["dsp"];
    let n = d["frames"].as_u64().unwrap() as usize;
    let seed = d["seed"].as_u64().unwrap();
    let noise = NoiseSource::new(seed, d["stream"].as_u64().unwrap());
    // the generator matches the Python one (float64 there, float32 here: a few ulps apart)
    let check: Vec<f32> = d["noise_check"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    for (&x, &y) in noise.frames(3, 1).0[..4].iter().zip(&check) {
        assert!((x - y).abs() <= 4e-7 * y.abs().max(0.8), "noise {x} against the fixture's {y}");
    }

    let bytes = std::fs::read(fixtures().join("dsp.f32")).unwrap();
    let half = 5 * n * 601 * 2;
    assert_eq!(bytes.len(), half + 4 * n + 4 * n * 300);
    let spec: Vec<f32> = bytes[..half].chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect();
    let rest: Vec<f32> = bytes[half..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let (f0, wav) = rest.split_at(n);
    let part = |o: usize| Tensor::from_slice(&spec[o * n * 601..(o + 1) * n * 601]).view([n as i64, 601]);
    let f0 = Tensor::from_slice(f0);
    let sp = Spectra {
        start: 0,
        lh: part(0),
        theta: part(1),
        ln: part(2),
        lr: part(3),
        phi: part(4),
        f0: f0.shallow_clone(),
    };
    let ours = to_vec(&h.synthesize_from(&sp, &f0, n, &noise));
    let e = max_abs_diff(&ours, wav);
    let rms = (wav.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / wav.len() as f64).sqrt();
    eprintln!("dsp: {} samples, rms {rms:.3e}, max abs error {e:.2e}", wav.len());
    assert!(rms > 1e-2, "reference waveform is too quiet to test anything");
    assert!(e <= TOL, "waveform off by {e}");
    // a different seed gives a different waveform: the noise really goes in
    let other = to_vec(&h.synthesize_from(&sp, &f0, n, &NoiseSource::new(seed + 1, 0)));
    let d = max_abs_diff(&other, wav);
    eprintln!("dsp: another seed changes the waveform by up to {d:.2e}");
    assert!(d > 100.0 * e.max(1e-7), "the noise seed has no effect ({d})");
}

/// Network + DSP against onnxruntime + dsp.py with the same noise.
#[test]
fn waveform_end_to_end() {
    let h = model();
    let m = manifest();
    let mut n_checked = 0;
    for case in m["cases"].as_array().unwrap() {
        let Some(seed) = case["wave_seed"].as_u64() else { continue };
        let name = case["name"].as_str().unwrap();
        let p = h.prosody(&ints(&case["ids"]), case["speed"].as_f64().unwrap() as f32);
        let ours = h.synthesize(&p, &NoiseSource::new(seed, 0));
        let wav = read_f32(&fixtures().join(format!("{name}.wav.f32")));
        let e = max_abs_diff(&ours, &wav);
        eprintln!("{name}: {} samples, waveform max abs error {e:.2e}", wav.len());
        assert!(e <= TOL, "{name}: waveform off by {e}");
        n_checked += 1;
    }
    assert!(n_checked > 0);
}

#[test]
fn chunked_equals_whole() {
    let (worst, e) = science_chunked_vs_whole(&model(), |f| chunk_ranges(f, 10, 48));
    eprintln!("decoder chunked vs whole: max abs {worst:.2e}");
    assert!(worst <= TOL, "{worst}");
    eprintln!("audio chunked vs whole: max abs {e:.2e}");
    assert!(e <= TOL, "{e}");
}

#[test]
fn batched_equals_single() {
    let h = model();
    let m = manifest();
    let cases = batch_cases(&m);
    let items: Vec<(&[i64], f32)> = cases.iter().map(|(ids, speed)| (ids.as_slice(), *speed)).collect();
    let (worst, worst_f0) = prosody_batch_vs_single(&h, &items);
    eprintln!("batched vs single: max abs {worst:.2e} (spectra), {worst_f0:.2e} (f0, Hz)");
    // f0 is a x100-scaled output (up to ~300 Hz): 1e-4 there is a few float32 ulps.
    assert!(worst <= 1e-4 && worst_f0 <= 1e-3, "{worst} {worst_f0}");
}

/// Decoder windows of several sentences in one pass equal each decoded alone: first chunks,
/// middle chunks, last partial chunks, ranges inside the context of either end, a whole sentence.
#[test]
fn decoder_batch_equals_single() {
    let h = model();
    let m = manifest();
    let names = ["yes", "hello", "question", "science", "long1", "hi_fast"];
    let cases: Vec<&serde_json::Value> =
        m["cases"].as_array().unwrap().iter().filter(|c| names.contains(&c["name"].as_str().unwrap())).collect();
    assert_eq!(cases.len(), names.len());
    let ps: Vec<Prosody> =
        cases.iter().map(|c| h.prosody(&ints(&c["ids"]), c["speed"].as_f64().unwrap() as f32)).collect();
    let mut items: Vec<(&Prosody, usize, usize)> = Vec::new();
    for (k, p) in ps.iter().enumerate() {
        let ranges = chunk_ranges(p.frames, 16, 80);
        let last = ranges.last().unwrap();
        assert!(last.len() < 80 || ranges.len() == 1, "a last partial chunk");
        items.push((p, ranges[0].start, ranges[0].end));
        items.push((p, last.start, last.end));
        if ranges.len() > 2 {
            items.push((p, ranges[1].start, ranges[1].end));
        }
        // Uneven lengths, near the ends (the window clipped on one side only).
        items.push((p, 3 + k, 10 + 7 * k));
        items.push((p, p.frames - 1 - k, p.frames));
        items.push((p, p.frames / 2 - 20, (p.frames / 2 + 13 * k + 1).min(p.frames)));
    }
    items.push((&ps[0], 0, ps[0].frames));
    let singles: Vec<Spectra> = items.iter().map(|&(p, a, b)| h.decode(p, a, b)).collect();
    let mut worst = 0f32;
    for order in [false, true] {
        let mut batch = items.clone();
        if order {
            batch.reverse();
        }
        let out = h.decode_batch(&batch);
        assert_eq!(out.len(), batch.len());
        for (k, sp) in out.iter().enumerate() {
            let j = if order { items.len() - 1 - k } else { k };
            let (single, (_, a, b)) = (&singles[j], items[j]);
            assert_eq!((sp.start, sp.lh.size()), (a, vec![(b - a) as i64, 601]));
            assert_eq!(to_vec(&sp.f0), to_vec(&single.f0));
            for o in 0..5 {
                worst = worst.max(max_abs_diff(&to_vec(sp.outputs()[o]), &to_vec(single.outputs()[o])));
            }
        }
    }
    // A batch of two equal-length first chunks (no padding needed between different lengths).
    let two = h.decode_batch(&[(&ps[1], 0, 16), (&ps[2], 0, 16)]);
    for (sp, p) in two.iter().zip(&ps[1..3]) {
        let single = h.decode(p, 0, 16);
        for o in 0..5 {
            worst = worst.max(max_abs_diff(&to_vec(sp.outputs()[o]), &to_vec(single.outputs()[o])));
        }
    }
    eprintln!("decoder batched vs single: {} windows, max abs {worst:e}", items.len());
    assert!(worst <= 1e-4, "{worst}");
    // The audio of batched chunks: each with its own noise, pulses and overlap-add.
    let noises: Vec<NoiseSource> = (0..items.len() as u64).map(|k| NoiseSource::new(5, k)).collect();
    let audio_items: Vec<(&Prosody, usize, usize, &NoiseSource)> =
        items.iter().zip(&noises).map(|(&(p, a, b), n)| (p, a, b, n)).collect();
    let mut worst_audio = 0f32;
    for (&(p, a, b, n), x) in audio_items.iter().zip(h.synthesize_chunks(&audio_items)) {
        let single = to_vec(&h.synthesize_chunk(p, a, b, n));
        let x = to_vec(&x);
        assert_eq!(x.len(), (b - a) * 300);
        worst_audio = worst_audio.max(max_abs_diff(&x, &single));
    }
    eprintln!("audio of batched chunks vs single: max abs {worst_audio:e}");
    assert!(worst_audio <= 1e-4, "{worst_audio}");
}
