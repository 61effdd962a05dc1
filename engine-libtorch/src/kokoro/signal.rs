//! The signal operations of the generator's source as the export computes them: `Resize` along the
//! last axis with onnxruntime's float32 coordinates, running sums in f32 one after the other, and
//! the STFT as the ONNX definition sums it; the harmonic source, its spectrum and the iSTFT out of
//! them in libtorch's tensor passes (fp32 and fp16, on any device; int8 runs them in Rust loops,
//! `super::dsp`).

use tch::{Kind, Tensor};

use super::int8::to_f32s;
use super::load::consts;

/// A float tensor's values (any layout, any device) in a vector.
pub(super) fn floats(t: &Tensor) -> Vec<f32> {
    to_f32s(t).expect("a float tensor")
}

/// `Resize` nearest (asymmetric coordinates, floor) of the last axis by `scale`.
pub(super) fn resize_nearest(x: &Tensor, scale: f32) -> Tensor {
    let len = *x.size().last().expect("rank ≥ 1");
    let out = (len as f32 * scale) as i64;
    let idx: Vec<i64> = (0..out).map(|i| ((i as f32 / scale).floor() as i64).clamp(0, len - 1)).collect();
    x.index_select(-1, &Tensor::from_slice(&idx).to_device(x.device()))
}

/// `Resize` linear (half_pixel coordinates) of the last axis by `scale`.
pub(super) fn resize_linear(x: &Tensor, scale: f32) -> Tensor {
    let len = *x.size().last().expect("rank ≥ 1");
    let out = (len as f32 * scale) as i64;
    let (mut i1, mut i2, mut w1, mut w2) = (vec![], vec![], vec![], vec![]);
    for i in 0..out {
        let c = ((i as f32 + 0.5) / scale - 0.5).clamp(0.0, (len - 1) as f32);
        let a = (c as i64).min(len - 1);
        let b = (a + 1).min(len - 1);
        let (d1, d2) = if a == b { (0.5, 0.5) } else { ((c - a as f32).abs(), (c - b as f32).abs()) };
        i1.push(a);
        i2.push(b);
        w1.push(d2);
        w2.push(d1);
    }
    let dev = x.device();
    let a = x.index_select(-1, &Tensor::from_slice(&i1).to_device(dev));
    let b = x.index_select(-1, &Tensor::from_slice(&i2).to_device(dev));
    a * Tensor::from_slice(&w1).to_device(dev) + b * Tensor::from_slice(&w2).to_device(dev)
}

/// Running sums along `ax` in f32, one after the other, as onnxruntime's `CumSum` (libtorch's CPU
/// `cumsum` accumulates floats in double: the phase of the harmonic source would drift).
pub(super) fn cumsum_f32(x: &Tensor, ax: usize) -> Tensor {
    let size = x.size();
    let outer: i64 = size[..ax].iter().product();
    let len = size[ax] as usize;
    let inner = size[ax + 1..].iter().product::<i64>() as usize;
    let mut v = floats(x);
    for o in 0..outer as usize {
        let base = o * len * inner;
        for t in 1..len {
            for i in 0..inner {
                v[base + t * inner + i] += v[base + (t - 1) * inner + i];
            }
        }
    }
    Tensor::from_slice(&v).view(size.as_slice()).to_device(x.device())
}

/// A real one-sided STFT [B, frames, len/2 + 1, 2] of `sig` [B, L] as the ONNX definition sums it:
/// the plain DFT, frame sample by frame sample in f32, twiddles cos/sin(k·n · (−2π/len)). The
/// network's phase is an arctangent of imaginary over real parts, so the DC and Nyquist bins,
/// whose imaginary parts are rounding noise, get a phase of 0 or ±π that no two FFTs agree on
/// (docs/kokoro-architecture.md §5).
pub(super) fn stft(sig: &Tensor, step: usize, win: &Tensor, n: usize) -> Tensor {
    let size = sig.size();
    let (b, l) = (size[0] as usize, size[1] as usize);
    assert!(n > 0 && step > 0 && l >= n, "STFT of {l} samples in frames of {n} every {step}");
    let frames = (l - n) / step + 1;
    let bins = n / 2 + 1;
    let x = floats(sig);
    let w = floats(win);
    assert_eq!(w.len(), n, "STFT window");
    let velocity = -(2.0 * std::f32::consts::PI) / n as f32;
    let mut tw = vec![(0f32, 0f32); bins * n];
    for k in 0..bins {
        for j in 0..n {
            let angle = (k * j) as f32 * velocity;
            tw[k * n + j] = (angle.cos(), angle.sin());
        }
    }
    let mut out = vec![0f32; b * frames * bins * 2];
    for bi in 0..b {
        for f in 0..frames {
            let frame = &x[bi * l + f * step..bi * l + f * step + n];
            let o = &mut out[(bi * frames + f) * bins * 2..(bi * frames + f + 1) * bins * 2];
            for k in 0..bins {
                let (mut re, mut im) = (0f32, 0f32);
                for j in 0..n {
                    let e = frame[j] * w[j];
                    let (c, s) = tw[k * n + j];
                    re += c * e;
                    im += s * e;
                }
                o[2 * k] = re;
                o[2 * k + 1] = im;
            }
        }
    }
    Tensor::from_slice(&out).view([b as i64, frames as i64, bins as i64, 2]).to_device(sig.device())
}

/// [`stft`] as tensor passes on `sig`'s device (the network's path on a GPU: no copy to the host
/// and back): the same products and the same sums in the same order, so the same bits. Its
/// frames windowed at once, then for each frame sample in turn its products with every bin's
/// twiddles added to the bins' sums, from zero as [`stft`] starts.
pub(super) fn stft_on_device(sig: &Tensor, step: usize, win: &Tensor, n: usize) -> Tensor {
    let size = sig.size();
    let (b, l) = (size[0], size[1] as usize);
    assert!(n > 0 && step > 0 && l >= n, "STFT of {l} samples in frames of {n} every {step}");
    let dev = sig.device();
    let frames = ((l - n) / step + 1) as i64;
    let bins = n / 2 + 1;
    let velocity = -(2.0 * std::f32::consts::PI) / n as f32;
    // twiddles [n, bins], as `stft` computes them
    let (mut cos, mut sin) = (vec![0f32; n * bins], vec![0f32; n * bins]);
    for k in 0..bins {
        for j in 0..n {
            let angle = (k * j) as f32 * velocity;
            (cos[j * bins + k], sin[j * bins + k]) = (angle.cos(), angle.sin());
        }
    }
    let twiddles = |v: &[f32]| Tensor::from_slice(v).view([n as i64, 1, bins as i64]).to_device(dev);
    let (cos, sin) = (twiddles(&cos), twiddles(&sin));
    // [B, frames, n]: each frame's samples times the window
    let windowed = sig.to_kind(Kind::Float).unfold(1, n as i64, step as i64) * win.to_kind(Kind::Float).to_device(dev);
    let mut re = Tensor::zeros([b, frames, bins as i64], (Kind::Float, dev));
    let mut im = re.zeros_like();
    for j in 0..n as i64 {
        let e = windowed.narrow(2, j, 1); // [B, frames, 1]
        re += &e * cos.get(j);
        im += &e * sin.get(j);
    }
    Tensor::stack(&[re, im], 3)
}

/// The harmonic source of F0 [1, 2T] → [1, 600T] (SineGen without its random phase and noise,
/// as the export computes it), `w` [9, 1] and `b` [1] its Linear 9 → 1, then tanh. With
/// `on_device` (a GPU's path) the phase's running sum is libtorch's, in double, on the device
/// (no copy to the host and back): closer to the exact sum than the export's f32 one after the
/// other, which the CPU's path keeps ([`cumsum_f32`]).
pub(super) fn harmonic_source(f0: &Tensor, w: &Tensor, b: &Tensor, on_device: bool) -> Tensor {
    let f0 = f0.unsqueeze(1); // [1, 1, 2T]
    let up = resize_nearest(&f0, 300.0); // [1, 1, 600T]
    let harmonics = consts(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], f0.device()).view([1, 9, 1]);
    let rad = (&up * harmonics) / 24000.0;
    let frac = &rad - rad.floor();
    let down = resize_linear(&frac, 1.0 / 300.0); // [1, 9, 2T]
    let phase = if on_device {
        down.cumsum(2, Kind::Double).to_kind(Kind::Float)
    } else {
        cumsum_f32(&down.transpose(1, 2), 1).transpose(1, 2)
    };
    let phase = ((phase * 2.0) * f64::from(std::f32::consts::PI)) * 300.0;
    let phase = resize_linear(&phase, 300.0); // [1, 9, 600T]
    let voiced = up.gt(10.0).to_kind(Kind::Float);
    let sines = (phase.sin() * f64::from(0.1f32)) * voiced;
    let m = sines.transpose(1, 2).matmul(w) + b; // [1, 600T, 1]
    m.tanh().transpose(1, 2).squeeze_dim(1)
}

/// The source's STFT (n_fft 20, hop 5, reflect padding, the Hann `window`): magnitudes and
/// phases [1, 22, frames] of `m` [1, L]; the STFT on the device with `on_device`
/// ([`stft_on_device`]).
pub(super) fn source_spectrum(m: &Tensor, window: &Tensor, on_device: bool) -> Tensor {
    let padded = m.unsqueeze(1).reflection_pad1d([10, 10]).squeeze_dim(1);
    let spec = if on_device { stft_on_device(&padded, 5, window, 20) } else { stft(&padded, 5, window, 20) }; // [1, frames, 11, 2]
    let spec = spec.transpose(1, 2);
    let (re, im) = (spec.select(3, 0), spec.select(3, 1));
    let mag = (&re * &re + &im * &im).sqrt();
    let atan = (&im / &re).atan();
    let pi = f64::from(std::f32::consts::PI);
    let wrapped = (&atan + pi).where_self(&im.gt(0.0), &(&atan - pi));
    let phase = wrapped.where_self(&re.lt(0.0), &atan);
    Tensor::cat(&[mag, phase], 1)
}

/// The iSTFT of `conv_post`'s output `y` [1, 22, frames] (log-magnitudes, then phases before
/// their sine) → audio [5·(frames − 1)]: a transposed convolution with the `inverse_basis`
/// [22, 1, 20] (stride 5), divided by the `window_sum` where the export stores it (its first
/// samples), × 4, 10 samples trimmed at each end.
pub(super) fn istft(y: &Tensor, inverse_basis: &Tensor, window_sum: &Tensor) -> Tensor {
    let (mag, phase) = (y.narrow(1, 0, 11).exp(), y.narrow(1, 11, 11).sin());
    let spec = Tensor::cat(&[&mag * phase.cos(), &mag * phase.sin()], 1);
    let wav = spec.conv_transpose1d(inverse_basis, None::<&Tensor>, [5], [0], [0], 1, [1]).squeeze_dim(1);
    // the export divides by its window sum where that is stored (its first 20 samples)
    let len = wav.size()[1];
    let k = len.min(window_sum.size()[0]);
    let ws = window_sum.narrow(0, 0, k);
    let head = wav.narrow(1, 0, k);
    let head = (&head / &ws).where_self(&ws.gt(f64::from(f32::MIN_POSITIVE)), &head);
    let wav = Tensor::cat(&[head, wav.narrow(1, k, len - k)], 1) * 4.0;
    wav.narrow(1, 10, len - 20).squeeze_dim(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The STFT's tensor passes (a GPU's path) give [`stft`]'s bits on the CPU: two signals, a
    /// Hann window, the source's frames (20 every 5), and a frame length whose last sample is
    /// left over.
    #[test]
    fn the_stft_on_a_device_gives_the_same_bits() {
        let l = 20 + 5 * 37 + 3;
        let v: Vec<f32> = (0..2 * l).map(|i| (i as f32 * 0.731).sin() * 0.9 + (i as f32 * 0.05).cos() * 0.1).collect();
        let sig = Tensor::from_slice(&v).view([2, l as i64]);
        let hann: Vec<f32> =
            (0..20).map(|j| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * j as f32 / 20.0).cos()).collect();
        let win = Tensor::from_slice(&hann);
        let host = stft(&sig, 5, &win, 20);
        let device = stft_on_device(&sig, 5, &win, 20);
        assert_eq!(host.size(), [2, 38, 11, 2]);
        assert_eq!(device.size(), host.size());
        let (h, d) = (floats(&host), floats(&device));
        let differ = h.iter().zip(&d).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{differ} of {} values differ", h.len());
        // (the check can fail: another window gives other values)
        let other = stft_on_device(&sig, 5, &(&win * 0.5), 20);
        assert!(floats(&other) != h);
    }
}
