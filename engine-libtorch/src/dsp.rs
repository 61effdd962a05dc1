//! hibari's host DSP (its `dsp.py`) in tensor ops, on any device: the band-limited pulse train from
//! f0, its STFT, the five-part spectrum and the inverse STFT (n_fft 1200, hop 300, periodic Hann,
//! 24 kHz, centered). NOTES.md ("DSP") lists the details followed here; float32 operations are
//! done in the reference's order, the phase sum in float64.
//!
//! The inverse STFT can produce any range of samples from the spectra of just the frames that
//! overlap it ([`Dsp::ola`]), so audio can be made chunk by chunk; the pulse train needs the whole
//! f0 curve (its phase is a running sum from the sentence start), which is known before the
//! decoder runs.

use tch::{Device, Kind, Tensor};

use crate::noise::{NoiseSource, BINS};

pub const N_FFT: i64 = 1200;
pub const HOP: i64 = 300;
pub const SAMPLE_RATE: u32 = 24_000;
/// Bins per frame.
pub const N_BINS: i64 = BINS as i64;

/// The spectral outputs of the network for a run of frames, each [n, 601] (time-major), float32.
#[derive(Debug)]
pub struct SpectralFrames<'a> {
    pub lh: &'a Tensor,
    pub theta: &'a Tensor,
    pub ln: &'a Tensor,
    pub lr: &'a Tensor,
    pub phi: &'a Tensor,
}

/// Window tables on one device.
#[derive(Debug)]
pub struct Dsp {
    device: Device,
    /// periodic Hann, float32 [1200]
    win: Tensor,
    /// win / (n_fft / 4), the analysis window of the pulse STFT
    win_src: Tensor,
    /// interpolation weights of frame k±1 (u) and frame k (v) per sample of a hop, float32 [300]
    u: Tensor,
    v: Tensor,
    /// squared window on the host, for the OLA normalisation
    win_sq: Vec<f32>,
}

fn hann() -> Vec<f32> {
    (0..N_FFT).map(|n| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos()) as f32).collect()
}

impl Dsp {
    pub fn new(device: Device) -> Dsp {
        let w = hann();
        let w_src: Vec<f32> = w.iter().map(|&x| x / (N_FFT / 4) as f32).collect();
        let u: Vec<f32> = (0..HOP).map(|j| ((j as f64 + 0.5) / HOP as f64 - 0.5).rem_euclid(1.0) as f32).collect();
        let v: Vec<f32> = u.iter().map(|&x| 1.0 - x).collect();
        Dsp {
            device,
            win: Tensor::from_slice(&w).to_device(device),
            win_src: Tensor::from_slice(&w_src).to_device(device),
            u: Tensor::from_slice(&u).to_device(device),
            v: Tensor::from_slice(&v).to_device(device),
            win_sq: w.iter().map(|&x| x * x).collect(),
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// The pulse train of a whole sentence from its f0 curve ([F] Hz): [F * 300] float32.
    pub fn pulses(&self, f0: &Tensor) -> Tensor {
        let f0 = f0.to_device(self.device).to_kind(Kind::Float);
        let nf = f0.size()[0];
        let fp = Tensor::cat(&[f0.narrow(0, 0, 1), f0.shallow_clone(), f0.narrow(0, nf - 1, 1)], 0);
        let prev = fp.narrow(0, 0, nf).unsqueeze(1);
        let cur = fp.narrow(0, 1, nf).unsqueeze(1);
        let next = fp.narrow(0, 2, nf).unsqueeze(1);
        let h2 = HOP / 2;
        let (u1, u2) = (self.u.narrow(0, 0, h2).unsqueeze(0), self.u.narrow(0, h2, h2).unsqueeze(0));
        let (v1, v2) = (self.v.narrow(0, 0, h2).unsqueeze(0), self.v.narrow(0, h2, h2).unsqueeze(0));
        let first = &prev * &v1 + &cur * &u1;
        let second = &cur * &v2 + &next * &u2;
        let f = Tensor::cat(&[first, second], 1).reshape([-1]);
        let voiced = f.gt(40.0);
        let f = f.clamp_min(40.0);
        let t = (f.cumsum(0, Kind::Double) * (1.0 / SAMPLE_RATE as f64)).frac() * (2.0 * std::f64::consts::PI);
        let t = t.to_kind(Kind::Float);
        let h = (f.full_like(11000.0) / &f).floor() + 0.5;
        let s = (&t * 0.5).sin() * 2.0;
        let bad = s.abs().le(2e-3);
        let e = (&h * &t).sin();
        let s = s.masked_fill(&bad, 1.0);
        let e = (e / s).where_self(&bad.logical_not(), &h) - 0.5;
        e.masked_fill(&voiced.logical_not(), 0.0)
    }

    /// STFT of a pulse train (centered, reflect padding, window / 300), first `frames` frames:
    /// (re, im), each [frames, 601] float32.
    pub fn pulse_spectrum(&self, pulses: &Tensor, frames: i64) -> (Tensor, Tensor) {
        let half = N_FFT / 2;
        let xp = pulses.view([1, 1, -1]).reflection_pad1d([half, half]).view([-1]);
        let fr = xp.unfold(0, N_FFT, HOP).narrow(0, 0, frames) * &self.win_src;
        let spec = fr.fft_rfft(None, -1, "backward").view_as_real();
        (spec.select(-1, 0).contiguous(), spec.select(-1, 1).contiguous())
    }

    /// The complex spectrum of frames k0..k0+n: (re, im) [n, 601] from the network's outputs for
    /// those frames, the pulse spectrum rows of the same frames, and the noise of the same frames.
    pub fn spectrum(
        &self,
        out: &SpectralFrames<'_>,
        pulse: (&Tensor, &Tensor),
        noise: &NoiseSource,
        k0: usize,
    ) -> (Tensor, Tensor) {
        let n = out.lh.size()[0];
        let ex = |x: &Tensor| x.clamp_max(7.0).exp();
        let (pr, pi) = pulse;
        let a = ex(out.lh);
        let c = out.theta.tanh() * std::f64::consts::PI;
        let rr = c.cos() * &a;
        let ri = c.sin() * &a;
        let mut re = pr * &rr - pi * &ri;
        let mut im = pr * &ri + pi * &rr;
        let (zr, zi) = noise.frames_tensor(k0, n as usize);
        let en = ex(out.ln);
        let (zr, zi) = (zr.to_device(self.device), zi.to_device(self.device));
        re += zr * &en;
        im += zi * &en;
        let er = ex(out.lr);
        re += out.phi.cos() * &er;
        im += out.phi.sin() * &er;
        (re, im)
    }

    /// Inverse STFT: the samples [300a, 300b) of a sentence of `total` frames, from the spectra of
    /// frames k0..k0+n ((re, im) [n, 601]), which must include every frame overlapping those samples:
    /// k0 <= max(0, a-1) and k0+n >= min(total, b+2). Returns [300 (b-a)] float32.
    pub fn ola(&self, spec: (&Tensor, &Tensor), k0: usize, total: usize, a: usize, b: usize) -> Tensor {
        let (re, im) = spec;
        let n = re.size()[0] as usize;
        assert!(a <= b && b <= total, "samples [{a}, {b}) of {total} frames");
        assert!(k0 <= a.saturating_sub(1) && k0 + n >= (b + 2).min(total), "frames {k0}+{n} don't cover [{a}, {b})");
        let k = (N_FFT / HOP) as usize;
        let hop = HOP as usize;
        let frames = Tensor::complex(re, im).fft_irfft(N_FFT, -1, "backward") * &self.win;
        let frames = frames.view([n as i64, k as i64, HOP]);
        let y = Tensor::zeros([(n + k - 1) as i64, HOP], (Kind::Float, self.device));
        for i in 0..k {
            let mut rows = y.narrow(0, i as i64, n as i64);
            let _ = rows.g_add_(&frames.select(1, i as i64));
        }
        // 1 / summed squared window of the frames that exist in the whole sentence, per sample.
        let rows = (a + 2 - k0)..(b + 2 - k0);
        let mut norm = Vec::with_capacity((b - a) * hop);
        for r in rows.clone() {
            let g = k0 + r; // global row
            for j in 0..hop {
                let mut s = 0f32;
                for i in 0..k {
                    if g >= i && g - i < total {
                        s += self.win_sq[i * hop + j];
                    }
                }
                norm.push(1.0 / s.max(1e-11));
            }
        }
        let norm = Tensor::from_slice(&norm).view([(b - a) as i64, HOP]).to_device(self.device);
        (y.narrow(0, rows.start as i64, (b - a) as i64) * norm).reshape([-1])
    }
}
