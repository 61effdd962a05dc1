//! hibari's host DSP (its `dsp.py`): the band-limited pulse train from f0, its STFT, the five-part
//! spectrum and the inverse STFT (n_fft 1200, hop 300, periodic Hann, 24 kHz, centered). NOTES.md
//! ("DSP") lists the details followed here; float32 operations are done in the reference's order,
//! the phase sum in float64.
//!
//! On the CPU the elementwise parts run as fused loops over the tensors' memory (one pass each
//! instead of one libtorch op per operation, float32 exp, tanh, sin and cos by range reduction and Taylor series, noise
//! generated in place) and only the FFTs are libtorch's. On other devices everything is tensor ops.
//!
//! The inverse STFT can produce any range of samples from the spectra of just the frames that
//! overlap it ([`Dsp::ola`]), so audio can be made chunk by chunk; the pulse train needs the whole
//! f0 curve (its phase is a running sum from the sentence start), which is known before the
//! decoder runs.

use std::f32::consts::PI;

use tch::{Device, Kind, Tensor};

use crate::cpu::simd_fn;
use crate::float32::{exp, poly, round_even, to_int};
use crate::noise::{NoiseSource, BINS};
use crate::tensor_slices::{f32s as values, f32s_mut as values_mut};

pub const N_FFT: i64 = 1200;
pub const HOP: i64 = 300;
pub const SAMPLE_RATE: u32 = 24_000;
/// Bins per frame.
pub const N_BINS: i64 = BINS as i64;

const FFT: usize = N_FFT as usize;
const H: usize = HOP as usize;
/// Frames overlapping one sample (n_fft / hop).
const K: usize = FFT / H;
/// Largest |φ| the float32 sin/cos below reduce accurately; beyond it the tensor ops are used.
const MAX_PHASE: f32 = 8192.0;

/// The spectral outputs of the network for a run of frames, each [n, 601] (time-major), float32.
#[derive(Debug)]
pub struct SpectralFrames<'a> {
    pub lh: &'a Tensor,
    pub theta: &'a Tensor,
    pub ln: &'a Tensor,
    pub lr: &'a Tensor,
    pub phi: &'a Tensor,
}

/// Window tables on one device (and on the host for the CPU loops).
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
    /// 1 / summed squared window where all four frames exist, per sample of a hop
    norm_inner: Vec<f32>,
    /// host copies of win, win_src, u, v
    host_win: Vec<f32>,
    host_win_src: Vec<f32>,
    host_u: Vec<f32>,
    host_v: Vec<f32>,
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
        let win_sq: Vec<f32> = w.iter().map(|&x| x * x).collect();
        let norm_inner = (0..H).map(|j| 1.0 / (0..K).fold(0f32, |s, i| s + win_sq[i * H + j]).max(1e-11)).collect();
        Dsp {
            device,
            win: Tensor::from_slice(&w).to_device(device),
            win_src: Tensor::from_slice(&w_src).to_device(device),
            u: Tensor::from_slice(&u).to_device(device),
            v: Tensor::from_slice(&v).to_device(device),
            win_sq,
            norm_inner,
            host_win: w,
            host_win_src: w_src,
            host_u: u,
            host_v: v,
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// The pulse train of a whole sentence from its f0 curve (\[F\] Hz): \[F * 300\] float32.
    pub fn pulses(&self, f0: &Tensor) -> Tensor {
        if self.device == Device::Cpu {
            self.pulses_cpu(f0)
        } else {
            self.pulses_tensor(f0)
        }
    }

    /// [`Dsp::pulses`] in tensor ops.
    fn pulses_tensor(&self, f0: &Tensor) -> Tensor {
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

    /// [`Dsp::pulses`] on the CPU: the interpolated f0 and the phase (a running sum) in one
    /// sequential loop, then the pulse values in a vectorized one.
    fn pulses_cpu(&self, f0: &Tensor) -> Tensor {
        let f0 = host(f0);
        let f0 = values(&f0);
        let nf = f0.len();
        let mut f = vec![0f32; nf * H];
        let mut out = Tensor::zeros([(nf * H) as i64], (Kind::Float, Device::Cpu));
        // SAFETY: `out` was just made here; no other handle to its storage exists.
        let t = unsafe { values_mut(&mut out) };
        let (u, v) = (&self.host_u, &self.host_v);
        let mut sum = 0f64;
        let mut sums = [0f64; H];
        for (k, (f, t)) in f.chunks_exact_mut(H).zip(t.chunks_exact_mut(H)).enumerate() {
            let (prev, cur, next) = (f0[k.saturating_sub(1)], f0[k], f0[(k + 1).min(nf - 1)]);
            for j in 0..H {
                // frames k-1 and k for the first half of the hop, k and k+1 for the second
                f[j] = if j < H / 2 { prev * v[j] + cur * u[j] } else { cur * v[j] + next * u[j] };
            }
            // the running sum alone in the sequential loop, the phases from it in a vector one
            for (s, &x) in sums.iter_mut().zip(f.iter()) {
                sum += f64::from(x.max(40.0));
                *s = sum;
            }
            phases(&sums, t);
        }
        pulse_values(&f, t);
        out
    }

    /// STFT of a pulse train (centered, reflect padding, window / 300), first `frames` frames:
    /// (re, im), each [frames, 601] float32.
    pub fn pulse_spectrum(&self, pulses: &Tensor, frames: i64) -> (Tensor, Tensor) {
        if self.device == Device::Cpu {
            self.pulse_spectrum_cpu(pulses, frames)
        } else {
            self.pulse_spectrum_tensor(pulses, frames)
        }
    }

    /// [`Dsp::pulse_spectrum`] in tensor ops.
    fn pulse_spectrum_tensor(&self, pulses: &Tensor, frames: i64) -> (Tensor, Tensor) {
        let half = N_FFT / 2;
        let xp = pulses.view([1, 1, -1]).reflection_pad1d([half, half]).view([-1]);
        let fr = xp.unfold(0, N_FFT, HOP).narrow(0, 0, frames) * &self.win_src;
        let spec = fr.fft_rfft(None, -1, "backward").view_as_real();
        (spec.select(-1, 0).contiguous(), spec.select(-1, 1).contiguous())
    }

    /// [`Dsp::pulse_spectrum`] on the CPU: the windowed frames written straight from the pulse
    /// train (reflected at the ends), libtorch's rfft, its output split into re and im.
    fn pulse_spectrum_cpu(&self, pulses: &Tensor, frames: i64) -> (Tensor, Tensor) {
        let p = host(pulses);
        let x = values(&p);
        let len = x.len();
        let nfr = frames as usize;
        let half = FFT / 2;
        assert!(len > half && nfr <= len / H + 1, "{nfr} frames of {len} samples");
        let w = &self.host_win_src;
        // (every value written below)
        let mut fr = Tensor::empty([frames, N_FFT], (Kind::Float, Device::Cpu));
        // SAFETY: `fr` was just made here; no other handle to its storage exists.
        for (k, row) in unsafe { values_mut(&mut fr) }.chunks_exact_mut(FFT).enumerate() {
            let start = (k * H) as isize - half as isize;
            if start >= 0 && start as usize + FFT <= len {
                let x = &x[start as usize..start as usize + FFT];
                row.iter_mut().zip(x.iter().zip(w)).for_each(|(r, (&x, &w))| *r = x * w);
            } else {
                for (i, r) in row.iter_mut().enumerate() {
                    let s = start + i as isize;
                    let s = if s < 0 {
                        -s
                    } else if s >= len as isize {
                        2 * (len as isize - 1) - s
                    } else {
                        s
                    };
                    *r = x[s as usize] * w[i];
                }
            }
        }
        let spec = fr.fft_rfft(None, -1, "backward").view_as_real();
        let spec = values(&spec);
        let mut re = Tensor::empty([frames, N_BINS], (Kind::Float, Device::Cpu));
        let mut im = Tensor::empty([frames, N_BINS], (Kind::Float, Device::Cpu));
        // SAFETY: `re` and `im` were just made here; no other handle to their storage exists.
        let (re_v, im_v) = unsafe { (values_mut(&mut re), values_mut(&mut im)) };
        for ((re, im), c) in re_v.iter_mut().zip(im_v).zip(spec.chunks_exact(2)) {
            (*re, *im) = (c[0], c[1]);
        }
        (re, im)
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
        if self.device == Device::Cpu {
            if let Some(s) = self.spectrum_cpu(out, pulse, noise, k0) {
                return s;
            }
        }
        self.spectrum_tensor(out, pulse, noise, k0)
    }

    /// [`Dsp::spectrum`] in tensor ops.
    fn spectrum_tensor(
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

    /// [`Dsp::spectrum`] on the CPU: the noise written into the outputs, then one fused pass over
    /// the bins. None (use the tensor ops) where some |φ| is beyond [`MAX_PHASE`] or not finite.
    fn spectrum_cpu(
        &self,
        out: &SpectralFrames<'_>,
        pulse: (&Tensor, &Tensor),
        noise: &NoiseSource,
        k0: usize,
    ) -> Option<(Tensor, Tensor)> {
        let phi = host(out.phi);
        // (false for NaN too; a fold rather than `all` so that it vectorizes)
        if !values(&phi).iter().fold(true, |ok, x| ok & (x.abs() <= MAX_PHASE)) {
            return None;
        }
        let [lh, theta, ln, lr, pr, pi] = [out.lh, out.theta, out.ln, out.lr, pulse.0, pulse.1].map(host);
        let shape = lh.size();
        // (every value written by the noise, then updated in place)
        let mut re = Tensor::empty(&shape, (Kind::Float, Device::Cpu));
        let mut im = Tensor::empty(&shape, (Kind::Float, Device::Cpu));
        // SAFETY: `re` and `im` were just made here; no other handle to their storage exists.
        let (re_v, im_v) = unsafe { (values_mut(&mut re), values_mut(&mut im)) };
        noise.fill(k0, re_v, im_v);
        let x = [&lh, &theta, &ln, &lr, &phi, &pr, &pi].map(values);
        assert!(x.iter().all(|x| x.len() == re_v.len()), "spectral frames of different sizes");
        spectrum_bins(x, re_v, im_v);
        Some((re, im))
    }

    /// Inverse STFT: the samples [300a, 300b) of a sentence of `total` frames, from the spectra of
    /// frames k0..k0+n ((re, im) [n, 601]), which must include every frame overlapping those samples:
    /// k0 <= max(0, a-1) and k0+n >= min(total, b+2). Returns [300 (b-a)] float32.
    pub fn ola(&self, spec: (&Tensor, &Tensor), k0: usize, total: usize, a: usize, b: usize) -> Tensor {
        let n = spec.0.size()[0] as usize;
        assert!(a <= b && b <= total, "samples [{a}, {b}) of {total} frames");
        assert!(k0 <= a.saturating_sub(1) && k0 + n >= (b + 2).min(total), "frames {k0}+{n} don't cover [{a}, {b})");
        if self.device == Device::Cpu {
            self.ola_cpu(spec, k0, total, a, b)
        } else {
            self.ola_tensor(spec, k0, total, a, b)
        }
    }

    /// [`Dsp::ola`] in tensor ops.
    fn ola_tensor(&self, spec: (&Tensor, &Tensor), k0: usize, total: usize, a: usize, b: usize) -> Tensor {
        let (re, im) = spec;
        let n = re.size()[0] as usize;
        let frames = Tensor::complex(re, im).fft_irfft(N_FFT, -1, "backward") * &self.win;
        let frames = frames.view([n as i64, K as i64, HOP]);
        let y = Tensor::zeros([(n + K - 1) as i64, HOP], (Kind::Float, self.device));
        for i in 0..K {
            let mut rows = y.narrow(0, i as i64, n as i64);
            let _ = rows.g_add_(&frames.select(1, i as i64));
        }
        let rows = (a + 2 - k0)..(b + 2 - k0);
        let norm: Vec<f32> = rows.clone().flat_map(|r| self.norm_row(k0 + r, total)).collect();
        let norm = Tensor::from_slice(&norm).view([(b - a) as i64, HOP]).to_device(self.device);
        (y.narrow(0, rows.start as i64, (b - a) as i64) * norm).reshape([-1])
    }

    /// [`Dsp::ola`] on the CPU: libtorch's irfft, then each output hop summed from the frames that
    /// overlap it (windowed, in the order frame k, k-1, k-2, k-3 like the reference's shifted adds)
    /// and normalized.
    fn ola_cpu(&self, spec: (&Tensor, &Tensor), k0: usize, total: usize, a: usize, b: usize) -> Tensor {
        let (re, im) = (host(spec.0), host(spec.1));
        let n = re.size()[0];
        let mut c = Tensor::empty([n, N_BINS, 2], (Kind::Float, Device::Cpu));
        // SAFETY: `c` was just made here; no other handle to its storage exists (its complex view
        // below is made after the slice's last use).
        let c_v = unsafe { values_mut(&mut c) };
        for (c, (&re, &im)) in c_v.chunks_exact_mut(2).zip(values(&re).iter().zip(values(&im))) {
            (c[0], c[1]) = (re, im);
        }
        let frames = c.view_as_complex().fft_irfft(N_FFT, -1, "backward");
        let frames = values(&frames);
        let mut out = Tensor::zeros([((b - a) * H) as i64], (Kind::Float, Device::Cpu));
        // SAFETY: `out` was just made here; no other handle to its storage exists.
        for (r, y) in ((a + 2 - k0)..(b + 2 - k0)).zip(unsafe { values_mut(&mut out) }.chunks_exact_mut(H)) {
            // row r of the frames' overlap-add (k0-based) is covered by frames r-3..=r
            for i in 0..K {
                if let Some(q) = r.checked_sub(i).filter(|&q| q < n as usize) {
                    let x = &frames[q * FFT + i * H..q * FFT + (i + 1) * H];
                    let w = &self.host_win[i * H..(i + 1) * H];
                    y.iter_mut().zip(x.iter().zip(w)).for_each(|(y, (&x, &w))| *y += x * w);
                }
            }
            let g = k0 + r;
            if g >= K - 1 && g < total {
                y.iter_mut().zip(&self.norm_inner).for_each(|(y, &s)| *y *= s);
            } else {
                y.iter_mut().zip(self.norm_row(g, total)).for_each(|(y, s)| *y *= s);
            }
        }
        out
    }

    /// 1 / summed squared window of the frames that exist in a sentence of `total` frames, for the
    /// samples of row g of its overlap-add (frames g-3..=g overlap it).
    fn norm_row(&self, g: usize, total: usize) -> impl Iterator<Item = f32> + '_ {
        (0..H).map(move |j| {
            let s = (0..K).filter(|&i| g >= i && g - i < total).fold(0f32, |s, i| s + self.win_sq[i * H + j]);
            1.0 / s.max(1e-11)
        })
    }
}

/// A contiguous float32 CPU tensor with the values of `t` (`t` itself when it is one).
fn host(t: &Tensor) -> Tensor {
    t.to_device(Device::Cpu).to_kind(Kind::Float).contiguous()
}

simd_fn! {
    /// The phases 2π · frac(s / 24000) of running sums `s` (positive), as float32.
    fn phases(sums: &[f64], t: &mut [f32]) {
        for (t, &s) in t.iter_mut().zip(sums) {
            let turns = s * (1.0 / SAMPLE_RATE as f64);
            *t = ((turns - turns.floor()) * (2.0 * std::f64::consts::PI)) as f32;
        }
    }
}

simd_fn! {
    /// Pulse values from the interpolated f0 `f` and the phase `t` (overwritten): with
    /// h = floor(11000 / max(f, 40)) + ½, sin(h t) / (2 sin(t/2)) − ½, or its limit h − ½ where
    /// |2 sin(t/2)| <= 2e-3; 0 where unvoiced (f <= 40).
    fn pulse_values(f: &[f32], t: &mut [f32]) {
        for (&f, t) in f.iter().zip(t.iter_mut()) {
            let fc = if f < 40.0 { 40.0 } else { f };
            let d = 11000.0 / fc;
            let h = round_even(d);
            let h = if h > d { h - 1.0 } else { h } + 0.5;
            let s = sin_cos(*t * 0.5).0 * 2.0;
            let e = if s.abs() <= 2e-3 { h } else { sin_cos(h * *t).0 / s };
            *t = if f > 40.0 { e - 0.5 } else { 0.0 };
        }
    }
}

simd_fn! {
    /// S = P exp(lh) e^{iπ tanh θ} + Z exp(ln) + exp(lr) e^{iφ} per bin, from
    /// x = [lh, θ, ln, lr, φ, Re P, Im P]; (re, im) hold Z on entry and S on return.
    fn spectrum_bins(x: [&[f32]; 7], re: &mut [f32], im: &mut [f32]) {
        let n = re.len();
        let [lh, theta, ln, lr, phi, pr, pi] = x.map(|x| &x[..n]);
        for i in 0..n {
            let (pr, pi) = (pr[i], pi[i]);
            let a = ex(lh[i]);
            let (s, c) = sin_cos(tanh(theta[i]) * PI);
            let (rr, ri) = (c * a, s * a);
            let en = ex(ln[i]);
            let mut r = pr * rr - pi * ri + re[i] * en;
            let mut m = pr * ri + pi * rr + im[i] * en;
            let er = ex(lr[i]);
            let (s, c) = sin_cos(phi[i]);
            r += c * er;
            m += s * er;
            (re[i], im[i]) = (r, m);
        }
    }
}

/// exp(min(x, 7)), the reference's `ex`.
#[inline(always)]
fn ex(x: f32) -> f32 {
    exp(if x > 7.0 { 7.0 } else { x })
}

/// tanh in float32 to 1.5e-7 absolute (what its one use needs: π·tanh θ is a phase): 1 − 2 /
/// (e^{2|x|} + 1) through [`exp`], with the sign of x.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    let ax = x.abs();
    (1.0 - 2.0 / (exp(2.0 * if ax > 9.0 { 9.0 } else { ax }) + 1.0)).copysign(x)
}

/// π/4 in three parts, each with few enough significant bits that y·part is exact for the
/// quadrant counts used here (Cody and Waite's reduction).
const PI4_A: f32 = 0.785_156_25;
#[allow(clippy::excessive_precision)] // an exact binary value, written in full
const PI4_B: f32 = 2.418_756_484_985_351_6e-4;
const PI4_C: f32 = (std::f64::consts::FRAC_PI_4 - 0.785_156_25 - 2.418_756_484_985_351_6e-4) as f32;

/// (sin x, cos x) in float32 for |x| <= [`MAX_PHASE`]: x reduced to r in [−π/4, π/4] by the nearest
/// quarter turn, then the Taylor series of sin (to r^9) and cos (to r^10), remainders < 2e-9.
#[inline(always)]
fn sin_cos(x: f32) -> (f32, f32) {
    const S: [f32; 5] = [1.0, -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362_880.0];
    const C: [f32; 6] = [1.0, -0.5, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40_320.0, -1.0 / 3_628_800.0];
    let ax = x.abs();
    // the nearest quarter turn q (an even octant y = 2q)
    let qf = round_even(ax * (4.0 / PI) * 0.5);
    let q = to_int(qf);
    let y = 2.0 * qf;
    let r = ((ax - y * PI4_A) - y * PI4_B) - y * PI4_C;
    let z = r * r;
    let sp = r * poly(z, &S);
    let cp = poly(z, &C);
    // quadrant q: swap for odd ones, then the signs
    let (s, c) = if q & 1 != 0 { (cp, sp) } else { (sp, cp) };
    let s = if (q & 2 != 0) != (x < 0.0) { -s } else { s };
    let c = if q.wrapping_add(1) & 2 != 0 { -c } else { c };
    (s, c)
}

/// How far apart two signals sound, phase-blind: the mean, over the frames of `reference` that
/// carry energy (within 30 dB of its loudest), of the RMS difference in dB of the two log
/// band-power spectra (512-sample Hann frames every 128 samples, 32 bands of 8 bins; a floor 50 dB
/// under the reference's peak). Infinite when the lengths differ or are under one frame. The
/// numerical checks of a network against another runtime or device use it: int8 and float graphs
/// differ in phase long before they differ in sound.
pub fn spectral_distance(audio: &[f32], reference: &[f32]) -> f64 {
    if audio.len() != reference.len() || audio.len() < 512 {
        return f64::INFINITY;
    }
    let bands = |x: &[f32]| {
        let frames = Tensor::from_slice(x).unfold(0, 512, 128) * Tensor::hann_window(512, (Kind::Float, Device::Cpu));
        let power = frames.fft_rfft(None, -1, "backward").abs().square().narrow(-1, 1, 256);
        let n = power.size()[0];
        power.view([n, 32, 8]).sum_dim_intlist(-1, false, Kind::Float)
    };
    let (a, r) = (bands(audio), bands(reference));
    let floor = r.max().double_value(&[]) * 1e-5;
    let db = |t: Tensor| (t + floor).log10() * 10.0;
    let energy = r.sum_dim_intlist(-1, false, Kind::Float);
    let keep = energy.gt(energy.max().double_value(&[]) * 1e-3);
    let per_frame = (db(a) - db(r)).square().mean_dim(-1, false, Kind::Float).sqrt();
    per_frame.masked_select(&keep).mean(Kind::Float).double_value(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{reset_cap, set_cap, Level};

    #[test]
    fn float32_functions_match_libm() {
        let mut worst = [0f64; 4];
        for i in -200_000..=200_000 {
            let x = i as f32 * 1e-3;
            let e = f64::from(x).exp();
            if x.abs() < 87.0 {
                worst[0] = worst[0].max((f64::from(exp(x)) - e).abs() / e);
            }
            worst[1] = worst[1].max((f64::from(tanh(x)) - f64::from(x).tanh()).abs());
            for x in [x, x * 40.0] {
                let (s, c) = sin_cos(x);
                worst[2] = worst[2].max((f64::from(s) - f64::from(x).sin()).abs());
                worst[3] = worst[3].max((f64::from(c) - f64::from(x).cos()).abs());
            }
        }
        eprintln!("exp relative {:.1e}, tanh {:.1e}, sin {:.1e}, cos {:.1e}", worst[0], worst[1], worst[2], worst[3]);
        assert!(worst[0] < 3e-7 && worst[1] < 2e-7 && worst[2] < 2e-7 && worst[3] < 2e-7, "{worst:?}");
        assert!(ex(f32::NAN).is_nan() && tanh(f32::NAN).is_nan() && exp(-1000.0) < 1e-37);
    }

    /// Standard normal values [n, 601] (from the noise generator: tch's is process-global).
    fn randn(n: i64, seed: u64) -> Tensor {
        Tensor::from_slice(&NoiseSource::new(seed, 0).frames(0, n as usize).0).view([n, N_BINS])
    }

    /// The CPU loops against the tensor ops (what other devices run), on random inputs.
    #[test]
    fn cpu_loops_match_tensor_ops() {
        let _g = tch::no_grad_guard();
        let d = Dsp::new(Device::Cpu);
        let diff = |a: &Tensor, b: &Tensor| {
            assert_eq!(a.size(), b.size());
            f64::try_from((a - b).abs().max()).unwrap()
        };
        let nf = 60;
        // f0 with unvoiced frames (<= 40 Hz), mostly below 400 Hz
        let f0 = randn(1, 1).narrow(1, 0, nf).reshape([nf]).abs() * 200.0 - 40.0;
        let (p, p_ref) = (d.pulses_cpu(&f0), d.pulses_tensor(&f0));
        // sin((H+1/2)t) of arguments up to ~1700 differs by ~1e-7 between implementations, and
        // 1 / (2 sin(t/2)) multiplies that by up to 500
        let e = diff(&p, &p_ref);
        eprintln!("pulses {e:.2e}");
        assert!(e < 2e-4, "pulses {e}");
        let (pr, pi) = d.pulse_spectrum_cpu(&p_ref, nf);
        let (pr0, pi0) = d.pulse_spectrum_tensor(&p_ref, nf);
        assert!(diff(&pr, &pr0) == 0.0 && diff(&pi, &pi0) == 0.0);

        let k0 = 7;
        let n = 30;
        let x: Vec<Tensor> = [2.0, 3.0, 2.0, 2.0, 8.0].iter().zip(2..).map(|(s, seed)| randn(n, seed) * *s).collect();
        let out = SpectralFrames { lh: &x[0], theta: &x[1], ln: &x[2], lr: &x[3], phi: &x[4] };
        let pulse = (pr.narrow(0, k0, n), pi.narrow(0, k0, n));
        let noise = NoiseSource::new(3, 1);
        let (re, im) = d.spectrum_cpu(&out, (&pulse.0, &pulse.1), &noise, k0 as usize).unwrap();
        let (re0, im0) = d.spectrum_tensor(&out, (&pulse.0, &pulse.1), &noise, k0 as usize);
        let scale = f64::try_from(re0.abs().max()).unwrap();
        let e = diff(&re, &re0).max(diff(&im, &im0));
        eprintln!("spectrum {e:.2e} of {scale:.2e}");
        assert!(e < 1e-6 * scale, "spectrum {e}");

        // the spectra as the frames k0..k0+n of a sentence of k0+n frames: chunks [a, b) from
        // frames a-1.., at the sentence end and inside; then as a whole sentence of n frames
        let total = (k0 + n) as usize;
        for (a, b) in [(8, 17), (28, total), (8, total)] {
            let k = (a - 1 - k0 as usize) as i64;
            let (re, im) = (re0.narrow(0, k, n - k), im0.narrow(0, k, n - k));
            let e = diff(&d.ola_cpu((&re, &im), a - 1, total, a, b), &d.ola_tensor((&re, &im), a - 1, total, a, b));
            eprintln!("ola [{a}, {b}): {e:.2e}");
            assert!(e < 1e-6 * scale, "ola [{a}, {b}): {e}");
        }
        let n = n as usize;
        let e = diff(&d.ola_cpu((&re0, &im0), 0, n, 0, n), &d.ola_tensor((&re0, &im0), 0, n, 0, n));
        eprintln!("ola whole: {e:.2e}");
        assert!(e < 1e-6 * scale, "ola whole: {e}");
    }

    /// The loops compiled for AVX-512, AVX2 and the crate's target give the same bits (on a CPU
    /// without some of these, the versions it lacks are not compared).
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let _g = tch::no_grad_guard();
        let d = Dsp::new(Device::Cpu);
        let n = 20;
        let x: Vec<Tensor> = [2.0, 3.0, 2.0, 2.0, 8.0].iter().zip(20..).map(|(s, seed)| randn(n, seed) * *s).collect();
        let out = SpectralFrames { lh: &x[0], theta: &x[1], ln: &x[2], lr: &x[3], phi: &x[4] };
        let f0 = randn(1, 30).narrow(1, 0, n).reshape([n]).abs() * 200.0 - 40.0;
        let run = || {
            let p = d.pulses_cpu(&f0);
            let (pr, pi) = d.pulse_spectrum_cpu(&p, n);
            let (re, im) = d.spectrum_cpu(&out, (&pr, &pi), &NoiseSource::new(1, 2), 3).unwrap();
            let y = d.ola_cpu((&re, &im), 0, n as usize, 0, n as usize);
            [p, re, im, y].map(|t| Vec::<f32>::try_from(t.reshape([-1])).unwrap())
        };
        let all = run();
        for cap in [Level::Avx2, Level::Baseline] {
            set_cap(cap);
            let lower = run();
            reset_cap();
            for (a, b) in all.iter().zip(&lower) {
                assert!(a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits()), "cap {cap}");
            }
        }
    }

    /// A sentence cut into chunks gives the audio of the whole.
    #[test]
    fn chunked_ola_equals_whole() {
        let _g = tch::no_grad_guard();
        let d = Dsp::new(Device::Cpu);
        let total = 25;
        let (re, im) = (randn(total as i64, 10), randn(total as i64, 11));
        let whole = Vec::<f32>::try_from(d.ola((&re, &im), 0, total, 0, total)).unwrap();
        let mut chunked = Vec::new();
        for (a, b) in [(0usize, 1), (1, 9), (9, 10), (10, 25)] {
            let (k0, k1) = (a.saturating_sub(1), (b + 2).min(total));
            let (re, im) = (re.narrow(0, k0 as i64, (k1 - k0) as i64), im.narrow(0, k0 as i64, (k1 - k0) as i64));
            chunked.extend(Vec::<f32>::try_from(d.ola((&re, &im), k0, total, a, b)).unwrap());
        }
        assert_eq!(chunked.len(), whole.len());
        let e = chunked.iter().zip(&whole).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(e < 1e-6, "{e}");
    }
}
