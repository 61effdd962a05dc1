//! Seeded noise for the DSP's noise branch: a counter-based generator, so the value for
//! (seed, stream, frame, bin) does not depend on how a sentence is cut into chunks, on the device,
//! or on other requests running at the same time (tch has only a process-global seed).
//!
//! x = splitmix64(key + frame·1024 + bin), key = splitmix64(seed ^ splitmix64(stream)); u1 and u2
//! are bits 40..63 and 16..39 of x (plus one half, over 2^24); Box-Muller in float64, cast to
//! float32. `fixtures/make_fixtures.py` (`counter_noise`) implements the same generator in numpy.

use std::f64::consts::PI;

/// Number of frequency bins (n_fft / 2 + 1).
pub const BINS: usize = 601;

/// splitmix64's output function (Steele, Lea, Flood), wrapping arithmetic.
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
        let (re, im) = self.frames_tensor(k0, n);
        (Vec::try_from(&re.view([-1])).expect("f32"), Vec::try_from(&im.view([-1])).expect("f32"))
    }

    /// [`NoiseSource::frames`] as CPU tensors [n, BINS] float32: the uniforms come from the counter
    /// here, the Box-Muller transform (log, sqrt, cos, sin in float64) runs vectorized in libtorch.
    pub fn frames_tensor(&self, k0: usize, n: usize) -> (tch::Tensor, tch::Tensor) {
        let key = self.key();
        let mut u1 = Vec::with_capacity(n * BINS);
        let mut u2 = Vec::with_capacity(n * BINS);
        for k in k0..k0 + n {
            for b in 0..BINS {
                let x = splitmix64(key.wrapping_add((k as u64).wrapping_mul(1024).wrapping_add(b as u64)));
                u1.push(((x >> 40) as f64 + 0.5) / 16_777_216.0);
                u2.push((((x >> 16) & 0xFF_FFFF) as f64 + 0.5) / 16_777_216.0);
            }
        }
        let _g = tch::no_grad_guard();
        let shape = [n as i64, BINS as i64];
        let r = (tch::Tensor::from_slice(&u1).log() * -2.0).sqrt().view(shape);
        let a = (tch::Tensor::from_slice(&u2) * (2.0 * PI)).view(shape);
        let re = (&r * a.cos()).to_kind(tch::Kind::Float);
        let im = (r * a.sin()).to_kind(tch::Kind::Float);
        (re, im)
    }
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
}
