//! The int8 convolution inputs of the generator's and the AdaIN residual blocks', in one routine
//! instead of a dozen tensor passes: AdaIN (instance norm over time, then (1 + γ)·x̂ + β), the
//! activation after it (the generator's Snake, x + sin²(αx)/α, or the decoder's and F0/N's
//! LeakyReLU) and `DynamicQuantizeLinear`, over a time-major activation [T, C], straight into the
//! padded time-major codes that the convolution's kernels read (`Conv::forward_tm`). Time-major, every
//! per-channel value (mean, scale, α) lines up with a row's lanes, so each pass is one vectorized
//! loop over rows, and the blocks never transpose.
//!
//! The arithmetic is fixed by the code, not by the CPU: lanes are channels, each channel's sums
//! run over time in order (in f64), and nothing is fused into FMAs, so the wider builds
//! (`cpu::simd_fn!`'s AVX2 and AVX-512 builds of its passes) give the same bits as the baseline one.

use super::approx::sin_poly;
use super::int8::{quantize_into, range_params};
use super::stats::Stats;
use crate::cpu::{prefetch, simd_fn};

/// A Snake's α and 1/α per channel.
pub(super) struct Alpha {
    pub alpha: Vec<f32>,
    pub inv: Vec<f32>,
}

/// The activation after an AdaIN: both are monotone in each channel, which the range prediction
/// of [`adain_quantize`] relies on.
#[derive(Clone, Copy)]
pub(super) enum Activation<'a> {
    /// The generator's Snake of these α
    Snake(&'a Alpha),
    /// LeakyReLU of this negative slope (x·slope in f32 where x < 0, as `net::leaky`)
    Leaky(f32),
}

/// sin²(v), for the Snake: v = kπ + r with |r| ≤ π/2 (π in three parts, exact products for
/// |k| < 2¹⁶), sin(r) by its Taylor series to r¹¹ (error below 6e-8 there), squared (the sign of
/// (−1)ᵏ drops out). Branch-free, so that the loops around it vectorize. |v| is clamped to 2²⁰,
/// far beyond what the network feeds it (where sin² of an f32 means little anyway).
#[inline(always)]
fn sin2(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2²³: adding and removing it rounds to an integer
    const PI_A: f32 = 3.140_625;
    const PI_B: f32 = 9.675_026e-4;
    const PI_C: f32 = 1.509_958e-7;
    let v = v.clamp(-1_048_576.0, 1_048_576.0);
    let k = (v * std::f32::consts::FRAC_1_PI + MAGIC) - MAGIC;
    let r = ((v - k * PI_A) - k * PI_B) - k * PI_C;
    let s = sin_poly(r);
    s * s
}

/// AdaIN of `x` ([T, C] time-major, `c` channels, its [`Stats`] `stats`; `gb`: γ then β, C each,
/// from the style), then `act`, quantized as `DynamicQuantizeLinear` does into
/// `q`: [T + 2·pad, C] time-major, the `pad` rows at each end the zero point (a convolution's
/// padding). `z` is scratch (a row). Returns the codes' scale and zero point.
#[allow(clippy::too_many_arguments)]
pub(super) fn adain_quantize(
    x: &[f32],
    c: usize,
    stats: &Stats,
    gb: &[f32],
    act: Activation,
    pad: usize,
    z: &mut Vec<f32>,
    q: &mut Vec<u8>,
) -> (f32, u8) {
    assert!(c > 0 && x.len().is_multiple_of(c) && gb.len() == 2 * c, "AdaIN: [T, C] and γ, β of C");
    if let Activation::Snake(alpha) = act {
        assert!(alpha.alpha.len() == c && alpha.inv.len() == c, "Snake: α of C");
    }
    assert!(stats.sum.len() == c && stats.lo.len() == c && stats.hi.len() == c, "AdaIN: statistics of C channels");
    z.resize(c, 0.0);
    pass(x, (stats, x.len() / c), gb, act, pad, z, q)
}

/// A channel's AdaIN (`m`, `a`, `b`: (x − mean)·a + β) and Snake (`al`, `inv`: α and 1/α) of `v`.
/// (Inlined: the passes run it in their AVX2 and AVX-512 builds, and the prediction of the
/// extremes on single values: the same operations, so the same bits.)
#[inline(always)]
fn adain_snake(v: f32, m: f32, a: f32, b: f32, al: f32, inv: f32) -> f32 {
    let y = (v - m) * a + b;
    y + inv * sin2(al * y)
}

/// A channel's AdaIN (as [`adain_snake`]) and LeakyReLU of `slope` of `v`. (Inlined, as it.)
#[inline(always)]
fn leaky_of_adain(v: f32, m: f32, a: f32, b: f32, slope: f32) -> f32 {
    let y = (v - m) * a + b;
    if y >= 0.0 {
        y
    } else {
        y * slope
    }
}

/// A channel's AdaIN and `act` of `v` (the prediction's single values).
#[inline(always)]
fn adain_act(v: f32, ch: usize, m: f32, a: f32, b: f32, act: Activation) -> f32 {
    match act {
        Activation::Snake(alpha) => adain_snake(v, m, a, b, alpha.alpha[ch], alpha.inv[ch]),
        Activation::Leaky(slope) => leaky_of_adain(v, m, a, b, slope),
    }
}

simd_fn! {
    /// [`adain_quantize`]'s pass (z a row): the channels' means and variances from their
    /// sums over `n` rows; the output's range predicted from each channel's extremes, since AdaIN and the
    /// activation are monotone in each channel (x + sin²(αx)/α has the slope 1 + sin(2αx) ≥ 0);
    /// then each row normalized, activated and quantized in one go (before, the values went to memory, 4.6 MB at
    /// the second stage, and a second pass quantized them). The range is also measured as the
    /// rows go: where rounding made the computed Snake not quite monotone and a value fell
    /// outside the prediction, the rows are done again with the range measured, so the codes are
    /// always those of the exact range.
    fn pass(x: &[f32], over: (&Stats, usize), gb: &[f32], act: Activation, pad: usize, z: &mut [f32], q: &mut Vec<u8>) -> (f32, u8) {
        let (stats, n) = over;
        let c = stats.sum.len();
        let t = x.len() / c;
        let (mean, a) = affine(stats, gb, n);
        let beta = &gb[c..];
        let (mut plo, mut phi) = (0f32, 0f32);
        for ch in 0..c {
            for v in [stats.lo[ch], stats.hi[ch]] {
                let y = adain_act(v, ch, mean[ch], a[ch], beta[ch], act);
                plo = plo.min(y);
                phi = phi.max(y);
            }
        }
        let (mut scale, mut zp) = range_params(plo, phi);
        q.resize((t + 2 * pad) * c, zp);
        let (lo, hi) = rows(x, &mean, &a, beta, act, scale, zp, z, &mut q[pad * c..(pad + t) * c]);
        if lo != plo || hi != phi {
            (scale, zp) = range_params(lo, hi);
            rows(x, &mean, &a, beta, act, scale, zp, z, &mut q[pad * c..(pad + t) * c]);
        }
        q[..pad * c].fill(zp);
        q[(pad + t) * c..].fill(zp);
        (scale, zp)
    }
}

/// The codes' range after an AdaIN of statistics `stats` over `n` rows and `act`: predicted from
/// each channel's extremes (both are monotone in each channel), as [`adain_quantize`] predicts
/// it; the range of those rows' values, up to rounding.
pub(super) fn predicted_range(stats: &Stats, n: usize, gb: &[f32], act: Activation) -> (f32, u8) {
    let c = stats.sum.len();
    let (mean, a) = affine(stats, gb, n);
    let beta = &gb[c..];
    let (mut lo, mut hi) = (0f32, 0f32);
    for ch in 0..c {
        for v in [stats.lo[ch], stats.hi[ch]] {
            let y = adain_act(v, ch, mean[ch], a[ch], beta[ch], act);
            lo = lo.min(y);
            hi = hi.max(y);
        }
    }
    range_params(lo, hi)
}

/// [`adain_quantize`] with its normalization fixed: the statistics `stats` of `rows` rows (not
/// `x`'s own) and the codes' `scale` and `zp` (values beyond their range saturate), as an earlier
/// pass over a window of the segment measured them (`net::Norms`). Given the statistics and the
/// codes that [`adain_quantize`] used and returned for the same `x`, the same codes.
#[allow(clippy::too_many_arguments)]
pub(super) fn adain_quantize_fixed(
    x: &[f32],
    c: usize,
    (stats, rows_n): (&Stats, usize),
    gb: &[f32],
    act: Activation,
    (scale, zp): (f32, u8),
    pad: usize,
    z: &mut Vec<f32>,
    q: &mut Vec<u8>,
) {
    assert!(c > 0 && x.len().is_multiple_of(c) && gb.len() == 2 * c, "AdaIN: [T, C] and γ, β of C");
    if let Activation::Snake(alpha) = act {
        assert!(alpha.alpha.len() == c && alpha.inv.len() == c, "Snake: α of C");
    }
    assert!(stats.sum.len() == c && rows_n > 0, "AdaIN: statistics of C channels over some rows");
    z.resize(c, 0.0);
    fixed_pass(x, (stats, rows_n), (gb, act), (scale, zp), pad, z, q);
}

simd_fn! {
    /// [`adain_quantize_fixed`]'s pass: [`pass`]'s rows with the range given.
    fn fixed_pass(
        x: &[f32],
        over: (&Stats, usize),
        norm: (&[f32], Activation),
        codes: (f32, u8),
        pad: usize,
        z: &mut [f32],
        q: &mut Vec<u8>,
    ) {
        let ((stats, rows_n), (gb, act), (scale, zp)) = (over, norm, codes);
        let c = stats.sum.len();
        let t = x.len() / c;
        let (mean, a) = affine(stats, gb, rows_n);
        q.resize((t + 2 * pad) * c, zp);
        rows(x, &mean, &a, &gb[c..], act, scale, zp, z, &mut q[pad * c..(pad + t) * c]);
        q[..pad * c].fill(zp);
        q[(pad + t) * c..].fill(zp);
    }
}

/// AdaIN as (x − mean)·a + β: each channel's mean and a = (1 + γ)/√(var + ε) from its
/// statistics over `t` rows (`gb`: γ then β). (Inlined: the passes run it in their AVX2 and
/// AVX-512 builds.)
#[inline(always)]
fn affine(stats: &Stats, gb: &[f32], t: usize) -> (Vec<f32>, Vec<f32>) {
    let (sum, sq) = (&stats.sum, &stats.sq);
    let n = t as f64;
    let mean: Vec<f32> = sum.iter().map(|&s| (s / n) as f32).collect();
    let var = sum.iter().zip(sq).map(|(&s, &q)| (q / n - (s / n) * (s / n)).max(0.0) as f32);
    let gamma = &gb[..sum.len()];
    let a: Vec<f32> = var.zip(gamma).map(|(v, &g)| (1.0 + g) / (v + 1e-5).sqrt()).collect();
    (mean, a)
}

/// AdaIN of `x` ([T, C] time-major, its [`Stats`] `stats`; `gb`: γ then β) then LeakyReLU of
/// `slope`, as floats [T, C] (for a block whose next step is not a quantization: the ×2
/// up-sampling of F0.1, N.1 and decode.3); the same values as [`adain_quantize`] quantizes.
pub(super) fn adain_leaky(x: &[f32], stats: &Stats, gb: &[f32], slope: f32) -> Vec<f32> {
    let c = stats.sum.len();
    assert!(c > 0 && x.len().is_multiple_of(c) && gb.len() == 2 * c, "AdaIN: [T, C] and γ, β of C");
    let mut out = vec![0f32; x.len()];
    leaky_pass(x, stats, gb, slope, &mut out);
    out
}

simd_fn! {
    /// [`adain_leaky`]'s pass.
    fn leaky_pass(x: &[f32], stats: &Stats, gb: &[f32], slope: f32, out: &mut [f32]) {
        let c = stats.sum.len();
        let (mean, a) = affine(stats, gb, x.len() / c);
        let beta = &gb[c..];
        for (xr, or) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
            for (((o, &v), (&m, &a)), &b) in or.iter_mut().zip(xr).zip(mean.iter().zip(&a)).zip(beta) {
                *o = leaky_of_adain(v, m, a, b, slope);
            }
        }
    }
}

/// [`pass`]'s rows: each row of `x` normalized and activated into `z` (a row, in L1), its extremes
/// taken in 16 lanes (a per-channel array here became masked stores that the next row's loads
/// waited on), its codes for `scale` and `zp` written to `q` ([T, C]). Returns the extremes of all
/// the values, with 0. (Inlined: it runs in `pass`'s AVX2 and AVX-512 builds.)
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows(
    x: &[f32],
    mean: &[f32],
    a: &[f32],
    beta: &[f32],
    act: Activation,
    scale: f32,
    zp: u8,
    z: &mut [f32],
    q: &mut [u8],
) -> (f32, f32) {
    let c = mean.len();
    const W: usize = 16;
    const AHEAD: usize = 8;
    let (mut los, mut his) = ([0f32; W], [0f32; W]);
    let (mut lo, mut hi) = (0f32, 0f32);
    for (i, (xr, qr)) in x.chunks_exact(c).zip(q.chunks_exact_mut(c)).enumerate() {
        // x comes from L3 or memory (4.6 MB at the second stage): its rows asked for ahead
        if let Some(ahead) = x.get((i + AHEAD) * c..(i + AHEAD + 1) * c) {
            ahead.chunks(16).for_each(|line| prefetch(line.as_ptr()));
        }
        let lanes = z.iter_mut().zip(xr).zip(mean.iter().zip(a)).zip(beta);
        match act {
            Activation::Snake(alpha) => {
                for ((((z, &v), (&m, &a)), &b), (&al, &inv)) in lanes.zip(alpha.alpha.iter().zip(&alpha.inv)) {
                    *z = adain_snake(v, m, a, b, al, inv);
                }
            }
            Activation::Leaky(slope) => {
                for (((z, &v), (&m, &a)), &b) in lanes {
                    *z = leaky_of_adain(v, m, a, b, slope);
                }
            }
        }
        let (chunks, rest) = z.as_chunks::<W>();
        for ch in chunks {
            for ((lo, hi), &v) in los.iter_mut().zip(his.iter_mut()).zip(ch) {
                *lo = if v < *lo { v } else { *lo };
                *hi = if v > *hi { v } else { *hi };
            }
        }
        for &v in rest {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        quantize_into(z, scale, zp, qr);
    }
    let lo = los.iter().fold(lo, |m, &v| m.min(v));
    let hi = his.iter().fold(hi, |m, &v| m.max(v));
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{reset_cap, set_cap, Level};
    use crate::kokoro::int8::{quant_params, quantize_into};

    #[test]
    fn sin2_is_within_f32_rounding_of_sin_squared() {
        let mut worst = 0f64;
        for i in -200_000..=200_000 {
            let v = i as f32 * 1e-3 * std::f32::consts::E;
            let want = f64::from(v).sin().powi(2);
            worst = worst.max((f64::from(sin2(v)) - want).abs());
        }
        assert!(worst < 5e-6, "sin² off by {worst}");
    }

    /// The reference: the export's passes one by one, as net.rs's fp32 path runs them (the
    /// Snake of `alpha`, or LeakyReLU 0.2 without).
    fn reference(x: &[f32], c: usize, gb: &[f32], alpha: Option<&Alpha>) -> Vec<f32> {
        let t = x.len() / c;
        let mut out = vec![0f32; x.len()];
        for ch in 0..c {
            let col: Vec<f32> = (0..t).map(|i| x[i * c + ch]).collect();
            let mean = col.iter().map(|&v| f64::from(v)).sum::<f64>() / t as f64;
            let var = col.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / t as f64;
            for (i, &v) in col.iter().enumerate() {
                let y = (1.0 + f64::from(gb[ch])) * (f64::from(v) - mean) / (var + 1e-5).sqrt() + f64::from(gb[c + ch]);
                out[i * c + ch] = match alpha {
                    Some(alpha) => {
                        let al = f64::from(alpha.alpha[ch]);
                        (y + (al * y).sin().powi(2) / al) as f32
                    }
                    None => (if y >= 0.0 { y } else { y * 0.2 }) as f32,
                };
            }
        }
        out
    }

    /// Where the predicted range falls short (here: extremes that are not the channels' own, or
    /// none at all), the codes are still those of the true range, at every level.
    #[test]
    fn a_short_prediction_gives_the_codes_of_the_true_range() {
        let (t, c, pad) = (97, 20, 3);
        let x: Vec<f32> = (0..t * c).map(|i| ((i as f32) * 0.731).sin() * (1.0 + (i % c) as f32 * 0.2)).collect();
        let gb: Vec<f32> = (0..2 * c).map(|i| (i as f32 * 0.37).sin() * 0.5).collect();
        let alpha = Alpha {
            alpha: (0..c).map(|i| 0.5 + i as f32 * 0.1).collect(),
            inv: (0..c).map(|i| 1.0 / (0.5 + i as f32 * 0.1)).collect(),
        };
        let exact = Stats::of(&x, c);
        let mut inner = exact.clone();
        inner.lo.copy_from_slice(&x[5 * c..6 * c]);
        inner.hi.copy_from_slice(&x[5 * c..6 * c]);
        let mut none = exact.clone();
        none.lo.fill(f32::INFINITY);
        none.hi.fill(f32::NEG_INFINITY);
        for level in Level::available() {
            set_cap(level);
            let run = |st: &Stats| {
                let (mut z, mut q) = (Vec::new(), Vec::new());
                let p = adain_quantize(&x, c, st, &gb, Activation::Snake(&alpha), pad, &mut z, &mut q);
                (p, q)
            };
            let want = run(&exact);
            let (short, empty) = (run(&inner), run(&none));
            reset_cap();
            assert!(short == want && empty == want, "{level}: a short prediction changed the codes");
        }
    }

    #[test]
    fn one_pass_matches_adain_activation_and_quantize_at_every_level() {
        let (t, c, pad) = (301, 24, 5);
        // a deterministic mess: offsets and spreads differing by channel
        let x: Vec<f32> = (0..t * c)
            .map(|i| {
                let (ti, ch) = ((i / c) as f32, (i % c) as f32);
                (ti * 0.37 + ch).sin() * (1.0 + ch * 0.3) + ch * 0.5 - 4.0
            })
            .collect();
        let gb: Vec<f32> = (0..2 * c).map(|i| (i as f32 * 0.71).cos() * 0.8).collect();
        let alpha = Alpha {
            alpha: (0..c).map(|i| 0.2 + i as f32 * 0.15).collect(),
            inv: (0..c).map(|i| 1.0 / (0.2 + i as f32 * 0.15)).collect(),
        };
        for act in [Activation::Snake(&alpha), Activation::Leaky(0.2)] {
            let want = reference(&x, c, &gb, if let Activation::Snake(a) = act { Some(a) } else { None });
            matches_at_every_level(&x, c, &gb, act, pad, &want);
        }
    }

    /// [`adain_quantize`]'s codes of `x` within a step of `want`'s (the reference's values), the
    /// same at every level; and, for LeakyReLU, [`adain_leaky`]'s floats close to `want`.
    fn matches_at_every_level(x: &[f32], c: usize, gb: &[f32], act: Activation, pad: usize, want: &[f32]) {
        let t = x.len() / c;
        let (ws, wzp) = quant_params(want);
        let mut wq = vec![0u8; want.len()];
        quantize_into(want, ws, wzp, &mut wq);
        let mut first: Option<Vec<u8>> = None;
        // every level the CPU has, the baseline first (other tests may move the cap meanwhile;
        // they only ever set levels that must give the same bits too)
        for level in Level::available() {
            let (mut z, mut q) = (Vec::new(), Vec::new());
            set_cap(level);
            let (s, zp) = adain_quantize(x, c, &Stats::of(x, c), gb, act, pad, &mut z, &mut q);
            let floats = adain_leaky(x, &Stats::of(x, c), gb, 0.2);
            reset_cap();
            if let Activation::Leaky(_) = act {
                let worst = floats.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst < 1e-4, "{level}: AdaIN + LeakyReLU {worst} from the reference");
            }
            assert!((s - ws).abs() <= ws * 1e-4 && zp.abs_diff(wzp) <= 1, "{level}: scale {s} zp {zp} vs {ws} {wzp}");
            assert_eq!(q.len(), (t + 2 * pad) * c);
            assert!(q[..pad * c].iter().chain(&q[(t + pad) * c..]).all(|&v| v == zp), "{level}: padding");
            let body = &q[pad * c..(t + pad) * c];
            let off = body.iter().zip(&wq).filter(|(a, b)| a.abs_diff(**b) > 1).count();
            assert_eq!(off, 0, "{level}: codes more than one step from the reference");
            match &first {
                None => first = Some(q.clone()),
                Some(f) => assert!(f == &q, "{level}: other bits than the baseline's"),
            }
        }
    }
}
