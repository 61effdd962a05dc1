//! The signal operations of the generator's source as the export computes them: `Resize` along the
//! last axis with onnxruntime's float32 coordinates, running sums in f32 one after the other, and
//! the STFT as the ONNX definition sums it.

use tch::{Kind, Tensor};

fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().flatten(0, -1).to_device(tch::Device::Cpu))
        .expect("a float tensor")
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
