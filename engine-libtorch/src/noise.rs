//! Seeded noise for the DSP's noise branch: a counter-based generator, so the value for
//! (seed, stream, frame, bin) does not depend on how a sentence is cut into chunks, on the device,
//! or on other requests running at the same time (tch has only a process-global seed).
//!
//! x = splitmix64(key + frame·1024 + bin), key = splitmix64(seed ^ splitmix64(stream)); u1 and u2
//! are bits 40..63 and 16..39 of x (plus one half, over 2^24); Box-Muller (r = sqrt(−2 ln u1),
//! r cos 2πu2 and r sin 2πu2). `fixtures/make_fixtures.py` (`counter_noise`) implements the same
//! generator in numpy, in float64.
//!
//! Here Box-Muller runs in float32, its log, sin and cos ours: range reduction in integers from
//! the 24-bit m of each u (exact), then their series, fused multiply-adds (exact on every
//! level), branch-free, so that the loop vectorizes at 8 or 16 lanes (AVX2 / AVX-512 where the
//! CPU has them, see `cpu::simd_fn`): the same bits on every level, within 2.5e-7 of the
//! float64 values (a few float32 ulps; the tests check 1.2 million of them). Float64 at 4 or 8
//! lanes took three times as long (6.7 against 2.2 ns per pair capped to AVX2 on a Zen 4), ~3%
//! of a loaded server's time.

use crate::cpu::simd_fn;
use crate::float32::{LN2_HI, LN2_LO};

/// Number of frequency bins (n_fft / 2 + 1).
pub const BINS: usize = 601;

/// splitmix64's output function (Steele, Lea, Flood), wrapping arithmetic.
#[inline(always)]
pub fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where a sentence's noise comes from: the request's `seed` and a stream number (e.g. the index of
/// the sentence in the request, so sentences of one request get different noise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoiseSource {
    pub seed: u64,
    pub stream: u64,
}

impl NoiseSource {
    pub fn new(seed: u64, stream: u64) -> Self {
        NoiseSource { seed, stream }
    }

    fn key(&self) -> u64 {
        splitmix64(self.seed ^ splitmix64(self.stream))
    }

    /// Complex standard-normal noise (real and imaginary parts each N(0, 1)) for frames
    /// `k0..k0 + n`: returns (re, im), each `n * BINS` values, frame-major.
    pub fn frames(&self, k0: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut re = vec![0f32; n * BINS];
        let mut im = vec![0f32; n * BINS];
        self.fill(k0, &mut re, &mut im);
        (re, im)
    }

    /// [`NoiseSource::frames`] into `re` and `im` (of equal length, a multiple of `BINS`), from
    /// frame `k0` on.
    pub fn fill(&self, k0: usize, re: &mut [f32], im: &mut [f32]) {
        assert!(re.len() == im.len() && re.len().is_multiple_of(BINS), "{} and {} values", re.len(), im.len());
        let key = self.key();
        for (k, (re, im)) in re.chunks_exact_mut(BINS).zip(im.chunks_exact_mut(BINS)).enumerate() {
            fill_frame(key.wrapping_add(((k0 + k) as u64).wrapping_mul(1024)), re, im);
        }
    }

    /// [`NoiseSource::frames`] as CPU tensors [n, BINS] float32.
    pub fn frames_tensor(&self, k0: usize, n: usize) -> (tch::Tensor, tch::Tensor) {
        let (re, im) = self.frames(k0, n);
        let shape = [n as i64, BINS as i64];
        (tch::Tensor::from_slice(&re).view(shape), tch::Tensor::from_slice(&im).view(shape))
    }
}

simd_fn! {
    /// One frame: bin b gets the pair of counter value `base + b`.
    fn fill_frame(base: u64, re: &mut [f32], im: &mut [f32]) {
        for (b, (re, im)) in re.iter_mut().zip(im.iter_mut()).enumerate() {
            (*re, *im) = box_muller(splitmix64(base.wrapping_add(b as u64)));
        }
    }
}

/// The normal pair of one counter value: r = sqrt(−2 ln u1), (r cos 2πu2, r sin 2πu2), with
/// u = (m + ½)/2^24 for the 24-bit m of each, in float32 (see the module's notes).
#[inline(always)]
fn box_muller(x: u64) -> (f32, f32) {
    let r = (-2.0 * ln_half_up((x >> 40) as i32)).sqrt();
    let (c, s) = cos_sin_turn(((x >> 16) & 0xFF_FFFF) as i32);
    (r * c, r * s)
}

/// Σ c[i]·z^i by Horner, one fused multiply-add per step (exact on every level).
#[inline(always)]
fn horner(z: f32, c: &[f32]) -> f32 {
    c.iter().rev().fold(0.0, |acc, &c| acc.mul_add(z, c))
}

/// ln((m + ½)/2^24) for 0 ≤ m < 2^24, in float32 to about an ulp. With v = 2m + 1 (odd, below
/// 2^25) and 2^e the power of two nearest v on the log scale (v/2^e in [√2/2, √2)): ln u =
/// (e − 25) ln 2 + 2 atanh(s), s = (v − 2^e)/(v + 2^e), |s| < 0.172, by the series 2 Σ
/// s^(2i+1)/(2i+1) to s^11 (remainder < 2e-10 of it). v − 2^e is an integer below 2^24, exact in
/// float32, and v + 2^e is rounded once: no cancellation near u = 1, where ln u is small.
#[inline(always)]
fn ln_half_up(m: i32) -> f32 {
    const ODD: [f32; 6] = [1.0, 1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0];
    let v = 2 * m + 1;
    let bits = (v as f32).to_bits();
    // the exponent of v (as rounded: a v rounded up to 2^25 is 2^25 − 1, whose e is 25 too),
    // plus one from the mantissa of √2 on
    let big = (bits & 0x007f_ffff) >= 0x0035_04f3; // mantissa bits of √2
    let e = (bits >> 23) as i32 - 127 + i32::from(big);
    let p = 1i32 << e;
    let s = (v - p) as f32 / (v + p) as f32;
    let z = s * s;
    let k = (e - 25) as f32;
    k.mul_add(LN2_HI, k.mul_add(LN2_LO, 2.0 * s * horner(z, &ODD)))
}

/// (cos θ, sin θ) for θ = 2π (m + ½) / 2^24, m < 2^24, in float32: with v = 2m + 1, j the nearest
/// quarter turn (v/2^23 rounded, 0..=4) and v − j·2^23 (an integer of at most 2^22, exact), θ −
/// jπ/2 = (v − j·2^23)·2π/2^25 takes one rounding; then the Taylor series of cos (to r^10) and
/// sin (to r^9) on [−π/4, π/4] (remainders < 3e-9), Horner with fused multiply-adds.
#[inline(always)]
fn cos_sin_turn(m: i32) -> (f32, f32) {
    // (−1)^i / (2i)! for i = 0..=5 and (−1)^i / (2i + 1)! for i = 0..=4
    const C: [f32; 6] = [1.0, -1.0 / 2.0, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40_320.0, -1.0 / 3_628_800.0];
    const S: [f32; 5] = [1.0, -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362_880.0];
    const STEP: f32 = (2.0 * std::f64::consts::PI / 33_554_432.0) as f32; // 2π / 2^25
    let v = 2 * m + 1;
    let j = (v + (1 << 22)) >> 23;
    let y = (v - (j << 23)) as f32 * STEP;
    let z = y * y;
    let cos = horner(z, &C);
    let sin = y * horner(z, &S);
    // rotate by j quarter turns
    let (c, s) = if j & 1 != 0 { (sin, cos) } else { (cos, sin) };
    (if (j + 1) & 2 != 0 { -c } else { c }, if j & 2 != 0 { -s } else { s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // splitmix64 sequence from state 0: the first outputs are well known.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn chunking_does_not_change_noise() {
        let s = NoiseSource::new(42, 3);
        let (re, im) = s.frames(0, 10);
        let (re2, im2) = s.frames(4, 3);
        assert_eq!(&re[4 * BINS..7 * BINS], &re2[..]);
        assert_eq!(&im[4 * BINS..7 * BINS], &im2[..]);
        let mean = re.iter().map(|&x| f64::from(x)).sum::<f64>() / re.len() as f64;
        let var = re.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / re.len() as f64;
        assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.05, "{mean} {var}");
        assert_ne!(NoiseSource::new(42, 4).frames(0, 1).0, s.frames(0, 1).0);
    }

    /// The generator as make_fixtures.py writes it, with the platform's libm (float64).
    fn reference(s: &NoiseSource, k0: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let (mut re, mut im) = (Vec::new(), Vec::new());
        for k in k0..k0 + n {
            for b in 0..BINS {
                let x = splitmix64(s.key().wrapping_add((k as u64 * 1024) + b as u64));
                let u1 = ((x >> 40) as f64 + 0.5) / 16_777_216.0;
                let u2 = (((x >> 16) & 0xFF_FFFF) as f64 + 0.5) / 16_777_216.0;
                let r = (-2.0 * u1.ln()).sqrt();
                re.push((r * (2.0 * std::f64::consts::PI * u2).cos()) as f32);
                im.push((r * (2.0 * std::f64::consts::PI * u2).sin()) as f32);
            }
        }
        (re, im)
    }

    #[test]
    fn matches_libm_box_muller() {
        // 1.2 million values against float64 with libm: within 4e-7 of the value's magnitude (a
        // few float32 ulps), or of 0.8 near zero
        let (mut differ, mut worst) = (0, 0f64);
        for stream in 0..10 {
            let s = NoiseSource::new(7, stream);
            let (re, im) = s.frames(0, 200);
            let (re0, im0) = reference(&s, 0, 200);
            for (&x, &y) in re.iter().chain(&im).zip(re0.iter().chain(&im0)) {
                if x != y {
                    differ += 1;
                    let e = f64::from(x - y).abs() / f64::from(y.abs()).max(0.8);
                    worst = worst.max(e);
                    assert!(e <= 4e-7, "{x} vs {y}");
                }
            }
        }
        eprintln!("{differ} of 1.2 million values differ, by up to {worst:.2e} of their magnitude");
    }

    #[test]
    fn log_and_turns_over_the_range() {
        // the edges, then every 61st m: ln to 2.5e-7 of its value, cos and sin to 1.2e-7
        let edges =
            [0i32, 1, 2, 3, 1 << 20, (1 << 22) - 1, 1 << 22, (1 << 23) - 1, 1 << 23, (1 << 24) - 2, (1 << 24) - 1];
        let (mut wl, mut wt) = (0f64, 0f64);
        for m in edges.into_iter().chain((0..1 << 24).step_by(61)) {
            let u = (f64::from(m) + 0.5) / 16_777_216.0;
            let (l, l0) = (f64::from(ln_half_up(m)), u.ln());
            wl = wl.max((l - l0).abs() / l0.abs());
            assert!((l - l0).abs() <= 2.5e-7 * l0.abs(), "ln {u}: {l} vs {l0}");
            let t = 2.0 * std::f64::consts::PI * u;
            let ((c, s), (c0, s0)) = (cos_sin_turn(m), (t.cos(), t.sin()));
            let e = (f64::from(c) - c0).abs().max((f64::from(s) - s0).abs());
            wt = wt.max(e);
            assert!(e <= 1.2e-7, "{m}: {c} {s} vs {c0} {s0}");
        }
        eprintln!("ln: up to {wl:.2e} of its value; cos, sin: up to {wt:.2e}");
    }
}
