//! Seeded noise for the DSP's noise branch: a counter-based generator, so the value for
//! (seed, stream, frame, bin) does not depend on how a sentence is cut into chunks, on the device,
//! or on other requests running at the same time (tch has only a process-global seed).
//!
//! x = splitmix64(key + frame·1024 + bin), key = splitmix64(seed ^ splitmix64(stream)); u1 and u2
//! are bits 40..63 and 16..39 of x (plus one half, over 2^24); Box-Muller in float64, cast to
//! float32. `fixtures/make_fixtures.py` (`counter_noise`) implements the same generator in numpy.
//!
//! The float64 log, sin and cos are ours (range reduction, then their series to float64
//! precision, fused multiply-adds: exact on every level), written branch-free so that the loop vectorizes (AVX2 / AVX-512 where the CPU has them, see
//! `cpu::simd_fn`). The float32 results are libm's: none of the 1.2 million values the tests compare
//! differs; one could only where a float64 result lies within a few float64 ulps of a float32
//! rounding boundary, and then by one float32 ulp.

use std::f64::consts::FRAC_PI_4;

use crate::cpu::simd_fn;

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

/// The normal pair of one counter value: r = sqrt(−2 ln u1), (r cos 2πu2, r sin 2πu2).
#[inline(always)]
fn box_muller(x: u64) -> (f32, f32) {
    let u1 = ((x >> 40) as i32 as f64 + 0.5) / 16_777_216.0;
    let r = (-2.0 * ln(u1)).sqrt();
    let (c, s) = cos_sin_turn(((x >> 16) & 0xFF_FFFF) as i32);
    ((r * c) as f32, (r * s) as f32)
}

/// Σ c[i]·z^i by Horner, one fused multiply-add per step (exact on every level).
#[inline(always)]
fn horner(z: f64, c: &[f64]) -> f64 {
    c.iter().rev().fold(0.0, |acc, &c| acc.mul_add(z, c))
}

/// ln x for a positive normal x: x = 2^k·m with m in [√2/2, √2), ln m = 2 atanh(s) with
/// s = (m − 1)/(m + 1), |s| < 0.172, by the series 2 Σ s^(2i+1)/(2i+1) to s^17 (remainder
/// < 4e-16 of the result), Horner with fused multiply-adds.
#[inline(always)]
fn ln(x: f64) -> f64 {
    const ODD: [f64; 9] =
        [1.0, 1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0, 1.0 / 13.0, 1.0 / 15.0, 1.0 / 17.0];
    let bits = x.to_bits();
    // exponent and mantissa; mantissas from √2 up count as m/2 with the next exponent
    let big = (bits & 0x000f_ffff_ffff_ffff) >= 0x0006_a09e_667f_3bcd; // mantissa bits of √2
    let k = ((bits >> 52) as i64 - 1023 + i64::from(big)) as f64;
    let m = f64::from_bits(
        (bits & 0x000f_ffff_ffff_ffff) | if big { 0x3fe0_0000_0000_0000 } else { 0x3ff0_0000_0000_0000 },
    );
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let series = horner(z, &ODD);
    k * std::f64::consts::LN_2 + 2.0 * s * series
}

/// (cos θ, sin θ) for θ = 2π (m + ½) / 2^24, m < 2^24: θ − jπ/2 (j the nearest quarter turn) is
/// exact up to one rounding, then the Taylor series of cos (to r^14) and sin (to r^15) on
/// [−π/4, π/4] (remainders < 2e-15), Horner with fused multiply-adds.
#[inline(always)]
fn cos_sin_turn(m: i32) -> (f64, f64) {
    // (−1)^i / (2i)! and (−1)^i / (2i + 1)! for i = 0..=7
    const C: [f64; 8] = [
        1.0,
        -1.0 / 2.0,
        1.0 / 24.0,
        -1.0 / 720.0,
        1.0 / 40_320.0,
        -1.0 / 3_628_800.0,
        1.0 / 479_001_600.0,
        -1.0 / 87_178_291_200.0,
    ];
    const S: [f64; 8] = [
        1.0,
        -1.0 / 6.0,
        1.0 / 120.0,
        -1.0 / 5040.0,
        1.0 / 362_880.0,
        -1.0 / 39_916_800.0,
        1.0 / 6_227_020_800.0,
        -1.0 / 1_307_674_368_000.0,
    ];
    // θ = (π/4)(m + ½)/2^21; j = round(octant / 2) in 0..=4
    let j = ((m >> 21) + 1) >> 1;
    let y = ((m as f64 + 0.5) * (1.0 / 2_097_152.0) - (2 * j) as f64) * FRAC_PI_4;
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
        // 1.2 million values: at most one float32 ulp apart, and equal but for a handful.
        let mut differ = 0;
        for stream in 0..10 {
            let s = NoiseSource::new(7, stream);
            let (re, im) = s.frames(0, 200);
            let (re0, im0) = reference(&s, 0, 200);
            for (x, y) in re.iter().chain(&im).zip(re0.iter().chain(&im0)) {
                if x != y {
                    differ += 1;
                    assert!((x.to_bits() as i64 - y.to_bits() as i64).abs() <= 1, "{x} vs {y}");
                }
            }
        }
        eprintln!("{differ} values differ");
        assert!(differ <= 10, "{differ} values differ");
    }

    #[test]
    fn log_and_turns_at_the_edges() {
        for m in [0i32, 1, 2, 1 << 20, (1 << 23) - 1, 1 << 23, (1 << 24) - 2, (1 << 24) - 1] {
            let u = (m as f64 + 0.5) / 16_777_216.0;
            let (l, l0) = (ln(u), u.ln());
            assert!((l - l0).abs() <= 2e-16 * l0.abs(), "ln {u}: {l} vs {l0}");
            let t = 2.0 * std::f64::consts::PI * u;
            let ((c, s), (c0, s0)) = (cos_sin_turn(m), (t.cos(), t.sin()));
            assert!((c - c0).abs() < 1e-15 && (s - s0).abs() < 1e-15, "{m}: {c} {s} vs {c0} {s0}");
        }
    }
}
