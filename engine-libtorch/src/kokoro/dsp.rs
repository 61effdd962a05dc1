//! The generator's signal ends in int8 as Rust loops over f32 slices, in place of libtorch's tensor
//! passes (`signal.rs` keeps those for fp32 and fp16, on any device): the harmonic source (~15
//! passes over [9, 600T] floats), its STFT, and the iSTFT after `conv_post` (oneDNN's reference
//! deconvolution). Every step is the export's (docs/kokoro-architecture.md §3 step 8): the same
//! `Resize` coordinates, the running phase summed in f32 in order, the same DFT sums with the same
//! twiddles, the window sum dividing the same samples. Only the transcendental functions differ
//! from libtorch's: branch-free polynomials (sin with its argument reduced in f64, exp, tanh,
//! atan), so that the loops vectorize. Nothing is fused into FMAs and the sums run in a fixed
//! order, so the AVX2 and AVX-512 builds (`cpu::simd_fn!`) give the baseline's bits.

use std::f32::consts::PI;

use super::approx::{atan, cos_poly, exp, sin, sin_poly, tanh};
use crate::cpu::simd_fn;

/// The harmonics of F0 the source sums.
const HARMONICS: usize = 9;
/// Audio samples per F0 frame.
const UP: f32 = 300.0;
/// The STFT's frame, hop and one-sided bins.
const N_FFT: usize = 20;
const HOP: usize = 5;
const BINS: usize = N_FFT / 2 + 1;
/// Frames per block of the STFT's and the iSTFT's passes (their scratch stays in L1).
const BLOCK: usize = 64;

/// A linear `Resize` by `scale` of `size` values (half-pixel coordinates, as `signal::resize_linear`):
/// output `i`'s two inputs and their weights.
fn linear_taps(i: usize, scale: f32, size: usize) -> (usize, usize, f32, f32) {
    let c = ((i as f32 + 0.5) / scale - 0.5).clamp(0.0, (size - 1) as f32);
    let a = (c as usize).min(size - 1);
    let b = (a + 1).min(size - 1);
    if a == b {
        (a, b, 0.5, 0.5)
    } else {
        (a, b, (c - b as f32).abs(), (c - a as f32).abs())
    }
}

/// The harmonic source of F0 `f0` [2T] (Hz) → [600T], as `signal::harmonic_source` computes it
/// (SineGen without its random phase and noise, the Linear 9 → 1 `w`, `b`, tanh). Only two
/// up-sampled samples per F0 frame reach the linear resize down, so the harmonics' fractional
/// parts are taken there; the running phase is summed per frame in f32 in order, time-major
/// [2T, 9]; each output sample then interpolates its two frames' phases for the 9 harmonics, and
/// their sines, the voiced mask (F0 > 10 Hz), the Linear and tanh follow in the same pass.
pub(super) fn harmonic_source(f0: &[f32], w: &[f32], b: f32) -> Vec<f32> {
    let n = f0.len();
    assert!(n > 0 && w.len() == HARMONICS, "F0 of {n} frames and a Linear 9 → 1 of {} weights", w.len());
    let len = (n as f32 * UP) as usize; // the nearest ×300 up-sampling's length
    assert!(len <= i32::MAX as usize, "a source of {len} samples");
    // `Resize` nearest (as `signal::resize_nearest`): the F0 frame of sample i (the quotient is
    // not negative: truncating is its floor)
    let near = |i: usize| ((i as f32 / UP) as usize).min(n - 1);
    let down_scale = 1.0f32 / UP;
    let frames = (len as f32 * down_scale) as usize;
    let mut phase = vec![0f32; frames * HARMONICS];
    let mut sum = [0f32; HARMONICS];
    for (i, row) in phase.chunks_exact_mut(HARMONICS).enumerate() {
        let (a, bb, wa, wb) = linear_taps(i, down_scale, len);
        let (fa, fb) = (f0[near(a)], f0[near(bb)]);
        for (h, (s, p)) in sum.iter_mut().zip(row).enumerate() {
            let frac = |v: f32| {
                let rad = (v * (h + 1) as f32) / 24000.0;
                rad - rad.floor()
            };
            *s += frac(fa) * wa + frac(fb) * wb;
            *p = ((*s * 2.0) * PI) * UP;
        }
    }
    assert_eq!((frames as f32 * UP) as usize, len, "the resize back up meets the source's length");
    let voiced: Vec<f32> = (0..len).map(|i| if f0[near(i)] > 10.0 { 1.0 } else { 0.0 }).collect();
    let mut out = vec![0f32; len];
    source_pass(&phase, &voiced, w, b, &mut out);
    out
}

simd_fn! {
    /// [`harmonic_source`]'s pass over the samples, in runs between the same two frames of the
    /// linear resize up (`phase` [frames, 9]), each lane a sample: the 9 phases interpolated, their
    /// sines × 0.1 × `voiced`, the dot product with `w` in order, + `b`, tanh.
    fn source_pass(phase: &[f32], voiced: &[f32], w: &[f32], b: f32, out: &mut [f32]) {
        let (frames, len) = (phase.len() / HARMONICS, out.len());
        let w: [f32; HARMONICS] = w.try_into().expect("9 weights");
        let top = (frames - 1) as f32;
        let mut j = 0;
        while j < len {
            let (a, bb, _, _) = linear_taps(j, UP, frames);
            // the run's end: where the coordinate passes a + 1 (a guess, then checked either way)
            let mut e = (a * 300 + 450).clamp(j + 1, len);
            while e > j + 1 && linear_taps(e - 1, UP, frames).0 != a {
                e -= 1;
            }
            while e < len && linear_taps(e, UP, frames).0 == a {
                e += 1;
            }
            let pa: [f32; HARMONICS] = phase[a * HARMONICS..][..HARMONICS].try_into().expect("a frame");
            let pb: [f32; HARMONICS] = phase[bb * HARMONICS..][..HARMONICS].try_into().expect("a frame");
            let (af, bf, same) = (a as f32, bb as f32, a == bb);
            // BLOCK samples at a time, the harmonics in turn over them (a lane a sample)
            for s0 in (j..e).step_by(BLOCK) {
                let n = BLOCK.min(e - s0);
                let (mut wa, mut wb, mut acc) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
                for (k, (wa, wb)) in wa[..n].iter_mut().zip(&mut wb[..n]).enumerate() {
                    // linear_taps's weights
                    let c = (((s0 + k) as i32 as f32 + 0.5) / UP - 0.5).clamp(0.0, top);
                    (*wa, *wb) = if same { (0.5, 0.5) } else { ((c - bf).abs(), (c - af).abs()) };
                }
                let v = &voiced[s0..s0 + n];
                for h in 0..HARMONICS {
                    let (pa, pb, w) = (pa[h], pb[h], w[h]);
                    for k in 0..n {
                        acc[k] += ((sin(pa * wa[k] + pb * wb[k]) * 0.1) * v[k]) * w;
                    }
                }
                for (o, &a) in out[s0..s0 + n].iter_mut().zip(&acc) {
                    *o = tanh(a + b);
                }
            }
            j = e;
        }
    }
}

/// The source's STFT as `signal::source_spectrum` computes it: `m` reflection-padded by 10 at
/// each end, frames of 20 every 5 under the Hann `window`, the plain DFT of `signal::stft` (the
/// same twiddles and sums), magnitudes and phases (atan(im/re), moved by ±π where re < 0 as the
/// export's `Where`s do). Returns [22, frames] channel-major and the frames.
pub(super) fn source_spectrum(m: &[f32], window: &[f32]) -> (Vec<f32>, usize) {
    let l = m.len();
    assert!(l > 10 && window.len() == N_FFT, "an STFT of {l} samples, a window of {}", window.len());
    let last = l as isize - 1;
    let padded: Vec<f32> = (-10..l as isize + 10)
        .map(|t| {
            m[if t < 0 {
                -t
            } else if t > last {
                2 * last - t
            } else {
                t
            } as usize]
        })
        .collect();
    let frames = l / HOP + 1; // (l + 20 − 20)/5 + 1
    let velocity = -(2.0 * PI) / N_FFT as f32;
    let mut tw = [[0f32; N_FFT]; 2 * BINS]; // cos of bin k in row k, sin in row 11 + k
    let (cos_rows, sin_rows) = tw.split_at_mut(BINS);
    for (k, (c, s)) in cos_rows.iter_mut().zip(sin_rows).enumerate() {
        for (j, (c, s)) in c.iter_mut().zip(s).enumerate() {
            let angle = (k * j) as f32 * velocity;
            (*c, *s) = (angle.cos(), angle.sin());
        }
    }
    let mut out = vec![0f32; 2 * BINS * frames];
    spectrum_pass(&padded, window, &tw, &mut out);
    (out, frames)
}

simd_fn! {
    /// [`source_spectrum`]'s pass, `BLOCK` frames at a time, a lane a frame: the windowed frames
    /// tap-major, each bin's sums over the taps in order, magnitude and phase into `out`.
    fn spectrum_pass(padded: &[f32], window: &[f32], tw: &[[f32; N_FFT]; 2 * BINS], out: &mut [f32]) {
        let frames = out.len() / (2 * BINS);
        let mut e = [[0f32; BLOCK]; N_FFT];
        for f0 in (0..frames).step_by(BLOCK) {
            let nb = BLOCK.min(frames - f0);
            for (j, row) in e.iter_mut().enumerate() {
                for (i, v) in row[..nb].iter_mut().enumerate() {
                    *v = padded[(f0 + i) * HOP + j] * window[j];
                }
            }
            for k in 0..BINS {
                let (mut re, mut im) = ([0f32; BLOCK], [0f32; BLOCK]);
                for (j, row) in e.iter().enumerate() {
                    let (c, s) = (tw[k][j], tw[BINS + k][j]);
                    for i in 0..BLOCK {
                        re[i] += c * row[i];
                        im[i] += s * row[i];
                    }
                }
                let (mag, ph) = out.split_at_mut(BINS * frames);
                let (mag, ph) = (&mut mag[k * frames + f0..][..nb], &mut ph[k * frames + f0..][..nb]);
                for i in 0..nb {
                    let (r, q) = (re[i], im[i]);
                    mag[i] = (r * r + q * q).sqrt();
                    let a = atan(q / r);
                    let wrapped = if q > 0.0 { a + PI } else { a - PI };
                    ph[i] = if r < 0.0 { wrapped } else { a };
                }
            }
        }
    }
}

/// The iSTFT as `signal::istft` computes it, of `conv_post`'s output `y` [22, frames]
/// channel-major (log-magnitudes, then phases before their sine): the transposed convolution
/// with `basis` [22, 20] (stride 5), divided by `window_sum` where it is stored and positive, × 4,
/// 10 samples trimmed at each end → [5·(frames − 1)].
pub(super) fn istft(y: &[f32], basis: &[f32], window_sum: &[f32]) -> Vec<f32> {
    assert!(!y.is_empty() && y.len().is_multiple_of(2 * BINS), "{} values for 22 channels", y.len());
    let basis: &[[f32; N_FFT]; 2 * BINS] = basis
        .as_chunks::<N_FFT>()
        .0
        .try_into()
        .unwrap_or_else(|_| panic!("an inverse basis of {} values for [22, 20]", basis.len()));
    let frames = y.len() / (2 * BINS);
    let len = (frames - 1) * HOP + N_FFT;
    let mut wav = vec![0f32; len];
    istft_pass(y, basis, &mut wav);
    let k = len.min(window_sum.len());
    for (v, &s) in wav[..k].iter_mut().zip(window_sum) {
        if s > f32::MIN_POSITIVE {
            *v /= s;
        }
    }
    wav[10..len - 10].iter().map(|&v| v * 4.0).collect()
}

simd_fn! {
    /// [`istft`]'s transposed convolution into `wav` (zeros), `BLOCK` frames at a time: the
    /// spectrum's real and imaginary parts (e^{y}·cos(sin y'), e^{y}·sin(sin y')) a lane a frame,
    /// then frame by frame its 20 samples (the 22 channels' taps summed in order, a lane a tap),
    /// added in (each sample's frames in order).
    fn istft_pass(y: &[f32], basis: &[[f32; N_FFT]; 2 * BINS], wav: &mut [f32]) {
        let frames = y.len() / (2 * BINS);
        let mut spec = [[0f32; BLOCK]; 2 * BINS];
        for f0 in (0..frames).step_by(BLOCK) {
            let nb = BLOCK.min(frames - f0);
            let (re, im) = spec.split_at_mut(BINS);
            for k in 0..BINS {
                let (lm, lp) = (&y[k * frames + f0..][..nb], &y[(BINS + k) * frames + f0..][..nb]);
                for (i, (&m, &p)) in lm.iter().zip(lp).enumerate() {
                    let (mag, ph) = (exp(m), sin(p));
                    re[k][i] = mag * cos_poly(ph);
                    im[k][i] = mag * sin_poly(ph);
                }
            }
            for i in 0..nb {
                let mut acc = [0f32; N_FFT];
                for (row, taps) in spec.iter().zip(basis) {
                    let s = row[i];
                    for (a, &t) in acc.iter_mut().zip(taps) {
                        *a += s * t;
                    }
                }
                for (w, &a) in wav[(f0 + i) * HOP..][..N_FFT].iter_mut().zip(&acc) {
                    *w += a;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use std::f32::consts::FRAC_PI_2;

    use super::*;
    use crate::cpu::{reset_cap, set_cap, Level};
    use crate::kokoro::signal;

    /// Deterministic values in [0, 1).
    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (s >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect()
    }

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().flatten(0, -1)).expect("floats")
    }

    /// The largest difference of `got` from `want`, relative to `want`'s largest magnitude.
    fn off(got: &[f32], want: &[f32]) -> f32 {
        assert_eq!(got.len(), want.len(), "lengths");
        let top = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / top
    }

    /// `f` at every level the CPU has: the same bits as the baseline's, which it returns.
    fn every_level<T: PartialEq + std::fmt::Debug>(f: impl Fn() -> T) -> T {
        let mut first: Option<T> = None;
        for level in Level::available() {
            set_cap(level);
            let got = f();
            reset_cap();
            match &first {
                None => first = Some(got),
                Some(want) => assert!(want == &got, "{level}: other bits than the baseline's"),
            }
        }
        first.expect("a level")
    }

    #[test]
    fn polynomials_follow_libm() {
        let worst = |f: &dyn Fn(f32) -> f32, g: &dyn Fn(f64) -> f64, xs: &mut dyn Iterator<Item = f32>| {
            xs.fold(0f64, |m, x| m.max((f64::from(f(x)) - g(f64::from(x))).abs()))
        };
        // the source's phases: up to ~1e6 rad, and beyond
        let big = |s: u64| noise(200_000, s).into_iter().map(|v| (v - 0.5) * 2e6);
        let e = worst(&sin, &f64::sin, &mut big(1).chain((0..20_000).map(|i| i as f32 * 1e-3 - 10.0)));
        assert!(e < 3e-7, "sin off by {e}");
        let e = worst(&sin, &f64::sin, &mut [5e8f32, -3.3e8, 1e7 + 0.5].into_iter());
        assert!(e < 2e-7, "sin of a far argument off by {e}");
        let small = || (0..=20_000).map(|i| i as f32 * 1e-4 - 1.0);
        let e = worst(&cos_poly, &f64::cos, &mut small());
        assert!(e < 1e-7, "cos off by {e}");
        let e = worst(&sin_poly, &f64::sin, &mut small());
        assert!(e < 1e-7, "sin of a small argument off by {e}");
        let e = worst(&|x| exp(x) / x.exp(), &|_| 1.0, &mut (0..=35_000).map(|i| i as f32 * 5e-3 - 87.0));
        assert!(e < 3e-7, "exp off by {e} relative");
        assert!(exp(89.0) == f32::INFINITY && exp(1e4) == f32::INFINITY && exp(-200.0) == 0.0);
        let e = (f64::from(exp(-100.0)) / (-100f64).exp() - 1.0).abs();
        assert!(e < 0.05, "exp in the subnormals off by {e} relative");
        let e = worst(&tanh, &f64::tanh, &mut (0..=40_000).map(|i| i as f32 * 5e-4 - 10.0));
        assert!(e < 3e-7, "tanh off by {e}");
        let e = worst(&atan, &f64::atan, &mut (0..=40_000).map(|i| ((i as f32 - 20_000.0) * 1e-3).powi(3)));
        assert!(e < 3e-7, "atan off by {e}");
        assert!(atan(f32::INFINITY) == FRAC_PI_2 && atan(f32::NEG_INFINITY) == -FRAC_PI_2);
        for f in [sin, exp, tanh, atan] {
            assert!(f(f32::NAN).is_nan());
        }
        assert_eq!(tanh(1e4), 1.0);
        assert_eq!(tanh(-1e4), -1.0);
    }

    /// F0 over `n` frames: voiced stretches gliding between 70 and 420 Hz, unvoiced ones (0 and
    /// 5 Hz) between.
    fn f0(n: usize) -> Vec<f32> {
        let r = noise(n, 7);
        (0..n)
            .map(|i| match (i / 37) % 4 {
                0 => {
                    if i % 2 == 0 {
                        0.0
                    } else {
                        5.0
                    }
                }
                _ => 70.0 + 350.0 * (0.5 + 0.5 * (i as f32 * 0.05).sin()) + r[i],
            })
            .collect()
    }

    #[test]
    fn source_matches_libtorch_at_every_level() {
        // 1,200 frames (15 s): phases up to ~1e6 rad
        let f = f0(1200);
        let w: Vec<f32> = noise(9, 3).iter().map(|v| v - 0.5).collect();
        let b = 0.031;
        let got = every_level(|| harmonic_source(&f, &w, b));
        let want = signal::harmonic_source(
            &Tensor::from_slice(&f).view([1, -1]),
            &Tensor::from_slice(&w).view([9, 1]),
            &Tensor::from_slice(&[b]),
            false,
        );
        let want = floats(&want);
        let e = off(&got, &want);
        assert!(e < 2e-6, "source off by {e} of its range");
    }

    #[test]
    fn spectrum_matches_libtorch_at_every_level() {
        let f = f0(200);
        let w: Vec<f32> = noise(9, 5).iter().map(|v| v - 0.5).collect();
        let mut m = harmonic_source(&f, &w, 0.02);
        // and some noise on it, where the source is flat
        for (v, r) in m.iter_mut().zip(noise(60_000, 11)) {
            *v += (r - 0.5) * 1e-3;
        }
        let window: Vec<f32> = (0..20).map(|j| 0.5 - 0.5 * (2.0 * PI * j as f32 / 20.0).cos()).collect();
        let (got, frames) = every_level(|| source_spectrum(&m, &window));
        let want = signal::source_spectrum(&Tensor::from_slice(&m).view([1, -1]), &Tensor::from_slice(&window), false);
        assert_eq!(want.size(), [1, 22, frames as i64]);
        let want = floats(&want);
        let (split, split_want) = (got.split_at(11 * frames), want.split_at(11 * frames));
        let e = off(split.0, split_want.0);
        assert!(e < 1e-6, "magnitudes off by {e} of their range");
        let e = off(split.1, split_want.1);
        assert!(e < 1e-6, "phases off by {e} of their range");
    }

    #[test]
    fn istft_matches_libtorch_at_every_level() {
        let frames = 1001;
        let y: Vec<f32> = noise(22 * frames, 13)
            .iter()
            .enumerate()
            .map(|(i, v)| if i < 11 * frames { v * 6.0 - 4.0 } else { (v - 0.5) * 40.0 })
            .collect();
        let basis: Vec<f32> = noise(22 * 20, 17).iter().map(|v| v - 0.5).collect();
        // a stored window sum with zeros in it, as far as the export stores one
        let ws: Vec<f32> = (0..20).map(|i| if i % 7 == 0 { 0.0 } else { 0.2 + i as f32 * 0.1 }).collect();
        let got = every_level(|| istft(&y, &basis, &ws));
        let want = signal::istft(
            &Tensor::from_slice(&y).view([1, 22, frames as i64]),
            &Tensor::from_slice(&basis).view([22, 1, 20]),
            &Tensor::from_slice(&ws),
        );
        let want = floats(&want);
        assert_eq!(got.len(), (frames - 1) * 5);
        let e = off(&got, &want);
        assert!(e < 2e-6, "audio off by {e} of its range");
    }
}
