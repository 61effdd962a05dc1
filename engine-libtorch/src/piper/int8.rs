//! Piper's convolutions in int8 ([`Precision::Int8`](crate::precision::Precision)), on our own
//! kernels ([`crate::gemm`]: exact int32 sums, the same integers on every CPU level).
//!
//! - **Weights** are quantized once, at load, per output column of the product (per output
//!   channel; per output channel and phase for a transposed convolution): symmetric, scale
//!   max |w| / 127.
//! - **Activations** are quantized dynamically, asymmetric uint8 as onnxruntime's
//!   `DynamicQuantizeLinear` (range [min(x, 0), max(x, 0)] on 0..255), but per *block* of
//!   output steps rather than per tensor: each block of [`QConv::block_rows`] output steps
//!   quantizes the input window it reads (its steps plus the kernel's reach) with the window's own
//!   range. An utterance's loud and quiet stretches each get their resolution, and no pass over
//!   the whole tensor is needed for its range: the window is quantized while it is in cache,
//!   its products summed, and the sums turned into floats, block after block.
//! - **In two passes** ([`QConv::two_pass`], the generator's last stage, at the audio rate): the
//!   window, then its rounding error as a window of its own (in 1/255ths of a step, both
//!   windows quantized in one pass over the input), both products summed in one epilogue: 16
//!   bits of activation for twice the multiply-adds. One pass there cost joe 0.2 Distill-MOS
//!   against fp32 (a noise floor in the pauses 2–12 dB higher, and rougher speech); blocks down
//!   to 12 steps won back only half of it, two passes all but 0.02 (benches/results/17-piper.md).
//! - **Per step** instead ([`QConv::per_row`], the flow's WaveNet layers, at frame rate): each
//!   input step gets its own range, and each tap is a product of its own (see there).
//! - **The activation before the convolution** (the generator's LeakyReLU, and the mean of a
//!   stage's residual blocks as a factor) is applied while quantizing ([`Pre`]); it is monotone,
//!   so the window's range is that of its raw extremes.
//! - **A transposed convolution** of stride s and kernel 2s (HiFi-GAN's up-sampling) is a
//!   product over pairs of consecutive input steps: output step q·s + r reads inputs
//!   q + a_r − 1 and q + a_r (a_r = ⌊(r + pad)/s⌋) through taps s + b_r and b_r (b_r = (r + pad)
//!   mod s). One product of K = 2·C_in gives all s phases at once (N = s·C_out).
//!
//! Data is time-major ([T, C], a channels-last tensor's memory) in and out, so that blocks of
//! steps are contiguous; the float passes run in `cpu::simd_fn!` builds without fused
//! multiply-adds, so every level gives the same bits.

use std::cell::RefCell;

use tch::{Device, Kind, Tensor};

use crate::cpu::{self, simd_fn};
use crate::gemm::{self, Packed};
use crate::tensor_slices::{f32s, f32s_mut};

/// Bytes of int32 sums one block of output steps makes at most (they stay in L2 for the
/// epilogue): 256 KB.
const BLOCK_SUM_BYTES: usize = 1 << 18;
/// Output steps per block, whatever the width: a multiple of the kernels' tile heights (3, 4, 5,
/// 6) between these.
const MIN_BLOCK: usize = 60;
const MAX_BLOCK: usize = 1920;

thread_local! {
    /// The quantized input window of a block (rewritten in full each block).
    static WINDOW: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A window's rounding error, quantized ([`QConv::two_pass`]'s second pass).
    static ERR_WINDOW: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The activation applied to a convolution's input as it is quantized: LeakyReLU of `slope` of
/// x·`mul` (`mul` > 0, `slope` in (0, 1]: monotone increasing, 0 at 0).
#[derive(Clone, Copy, Debug)]
pub(super) struct Pre {
    pub slope: f32,
    pub mul: f32,
}

impl Pre {
    pub const NONE: Pre = Pre { slope: 1.0, mul: 1.0 };

    pub fn leaky(slope: f64) -> Pre {
        Pre { slope: slope as f32, mul: 1.0 }
    }

    #[inline(always)]
    fn apply(self, v: f32) -> f32 {
        let y = v * self.mul;
        if y >= 0.0 {
            y
        } else {
            y * self.slope
        }
    }
}

/// Where a convolution's output goes: stored, stored plus a residual of the output's shape
/// (x + conv(x)), or added to what the output holds, with that residual.
pub(super) enum Out<'a> {
    Store,
    Residual(&'a [f32]),
    AddResidual(&'a [f32]),
}

/// A transposed convolution as a product over pairs of input steps.
struct Up {
    stride: usize,
    c_out: usize,
    /// a_r: phase r of output step q comes from the product of pair q + a_r
    shift: Vec<usize>,
    /// (L − 1)·s − 2·pad + 2s = (L + 1)·s − 2·pad: output steps for L inputs
    pad: usize,
}

/// A 1-d convolution (stride 1, any dilation and padding) or a transposed one (stride s, kernel
/// 2s) in int8, on time-major data.
/// What [`QConv`] is made from: a float convolution's weight (weight norm folded), bias and
/// attributes (`load::Conv`'s).
pub(super) struct ConvParts<'a> {
    pub w: &'a Tensor,
    pub b: &'a Option<Tensor>,
    pub stride: i64,
    pub pad: i64,
    pub dil: i64,
    pub groups: i64,
    pub transposed: bool,
}

pub(super) struct QConv {
    packed: Packed,
    /// Σ_k W[j, k] per column (the kernels see the codes − 128; the window's zero point differs)
    rowsum: Vec<i32>,
    /// per column
    w_scale: Vec<f32>,
    /// per column (zero where the layer has none)
    bias: Vec<f32>,
    c_in: usize,
    /// columns of the product: the output's channels, or s·C_out for a transposed convolution
    n: usize,
    taps: usize,
    dil: usize,
    pad_l: usize,
    pad_r: usize,
    up: Option<Up>,
    /// Activations quantized per step (row) instead of per block ([`QConv::per_row`])
    per_row: bool,
    /// Activations in two passes ([`QConv::two_pass`])
    two_pass: bool,
}

/// Output steps per block of [`PostConv::run`]: its sums and its input's channels (32 on joe)
/// stay in L1.
const POST_BLOCK: usize = 256;

/// The generator's last convolution (`conv_post`: C channels to one, stride 1, no dilation) on
/// the int8 stages' time-major output, with the activation before it ([`Pre`]: the stages'
/// mean and the LeakyReLU) applied as it reads each block: one pass over the audio-rate
/// buffer instead of libtorch's copy, scale, LeakyReLU and one-channel convolution (7.7 ms of
/// joe's short sentence, 4.8 of it oneDNN's convolution; this 2.4-2.7). Each output step is the
/// bias, then the taps' products added channel by channel, tap by tap, with no fused
/// multiply-add: the same bits at every level (`cpu::simd_fn!`).
pub(super) struct PostConv {
    /// [C, k]
    w: Vec<f32>,
    bias: f32,
    c_in: usize,
    taps: usize,
    pad: usize,
}

impl PostConv {
    /// None unless `conv` is a plain convolution to one channel (stride 1, no dilation, no
    /// groups).
    pub fn new(conv: &ConvParts) -> Option<PostConv> {
        if conv.groups != 1 || conv.transposed || conv.stride != 1 || conv.dil != 1 {
            return None;
        }
        let w = if conv.w.dim() == 4 { conv.w.squeeze_dim(2) } else { conv.w.shallow_clone() };
        let (o, c, k) = (w.size()[0] as usize, w.size()[1] as usize, w.size()[2] as usize);
        if o != 1 || k == 0 || conv.pad < 0 || 2 * conv.pad as usize + 1 < k {
            return None;
        }
        let bias = conv.b.as_ref().map_or(0.0, |b| floats(b)[0]);
        Some(PostConv { w: floats(&w), bias, c_in: c, taps: k, pad: conv.pad as usize })
    }

    /// Output steps for `l` input steps.
    pub fn out_len(&self, l: usize) -> usize {
        l + 2 * self.pad + 1 - self.taps
    }

    /// conv(`pre`(x)) of `x` [L, C] (time-major) into `out` [L'].
    pub fn run(&self, x: &[f32], pre: Pre, out: &mut [f32]) {
        assert!(x.len().is_multiple_of(self.c_in), "PostConv: X [L, C]");
        assert_eq!(out.len(), self.out_len(x.len() / self.c_in), "PostConv: Y [L']");
        post_conv(self, x, pre, out);
    }
}

simd_fn! {
    /// [`PostConv::run`]: per block of [`POST_BLOCK`] output steps, its input window activated
    /// and laid out channel-major (zero in the padding), then the sums over time in lanes.
    fn post_conv(p: &PostConv, x: &[f32], pre: Pre, out: &mut [f32]) {
        let (c, k, pad) = (p.c_in, p.taps, p.pad);
        let l = x.len() / c;
        let span = POST_BLOCK + k - 1;
        let mut win = vec![0f32; c * span];
        let mut act = vec![0f32; c * span];
        let mut acc = [0f32; POST_BLOCK];
        for (b, dst) in out.chunks_mut(POST_BLOCK).enumerate() {
            let t0 = b * POST_BLOCK;
            let m = dst.len();
            // window step s is input step t0 + s − pad: activated time-major, then channel-major
            let (first, end) = (t0 as isize - pad as isize, (t0 + m + k - 1) as isize - pad as isize);
            let (lo, hi) = (first.clamp(0, l as isize) as usize, end.clamp(0, l as isize) as usize);
            let (before, n) = ((lo as isize - first) as usize, m + k - 1);
            let act = &mut act[..n * c];
            act.fill(0.0);
            for (a, &v) in act[before * c..][..(hi - lo) * c].iter_mut().zip(&x[lo * c..hi * c]) {
                *a = pre.apply(v);
            }
            for ci in 0..c {
                for (s, w) in win[ci * span..][..n].iter_mut().enumerate() {
                    *w = act[s * c + ci];
                }
            }
            let acc = &mut acc[..m];
            acc.fill(p.bias);
            for ci in 0..c {
                let row = &win[ci * span..(ci + 1) * span];
                for j in 0..k {
                    let w = p.w[ci * k + j];
                    for (a, &v) in acc.iter_mut().zip(&row[j..j + m]) {
                        *a += w * v;
                    }
                }
            }
            dst.copy_from_slice(acc);
        }
    }
}

/// f32 values of a float tensor (any layout, on any device).
fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_device(Device::Cpu).to_kind(Kind::Float).contiguous().view([-1])).expect("a float tensor")
}

/// W [N, K] as symmetric int8 per row (scale max |w| / 127), the scales, the rows' sums. (Scales
/// below the maximum, clipping the few large weights, came out no closer in least squares on
/// joe's layers: none was chosen.)
fn quantize_rows(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>, Vec<i32>) {
    let mut q = vec![0i8; n * k];
    let mut scales = vec![1f32; n];
    let mut sums = vec![0i32; n];
    for j in 0..n {
        let row = &w[j * k..(j + 1) * k];
        let max = row.iter().fold(0f32, |m, &v| m.max(v.abs()));
        let s = if max > 0.0 { max / 127.0 } else { 1.0 };
        scales[j] = s;
        for (d, &v) in q[j * k..(j + 1) * k].iter_mut().zip(row) {
            *d = (v / s).round().clamp(-127.0, 127.0) as i8;
        }
        sums[j] = q[j * k..(j + 1) * k].iter().map(|&v| i32::from(v)).sum();
    }
    (q, scales, sums)
}

impl QConv {
    /// The int8 form of `conv` (either layout of its weight); None for what it does not cover
    /// (groups, strides of plain convolutions, transposed ones whose kernel is not twice the
    /// stride).
    pub fn new(conv: &ConvParts) -> Option<QConv> {
        if conv.groups != 1 {
            return None;
        }
        let w = if conv.w.dim() == 4 { conv.w.squeeze_dim(2) } else { conv.w.shallow_clone() };
        let (a, b, k) = (w.size()[0] as usize, w.size()[1] as usize, w.size()[2] as usize);
        let wv = floats(&w);
        let bias_of = |n: usize| conv.b.as_ref().map_or_else(|| vec![0f32; n], floats);
        if conv.transposed {
            // W [C_in, C_out, 2s]
            let (c_in, c_out, s) = (a, b, conv.stride as usize);
            let p = conv.pad as usize;
            if k != 2 * s || p > s || conv.dil != 1 {
                return None;
            }
            let n = s * c_out;
            let kk = 2 * c_in;
            let mut rows = vec![0f32; n * kk];
            let mut shift = Vec::with_capacity(s);
            for r in 0..s {
                let (ar, br) = ((r + p) / s, (r + p) % s);
                shift.push(ar);
                for o in 0..c_out {
                    let row = &mut rows[(r * c_out + o) * kk..][..kk];
                    for c in 0..c_in {
                        // pair p = (x[p − 1], x[p]): the older step through tap s + b_r
                        row[c] = wv[(c * c_out + o) * k + s + br];
                        row[c_in + c] = wv[(c * c_out + o) * k + br];
                    }
                }
            }
            let (q, w_scale, rowsum) = quantize_rows(&rows, n, kk);
            let b = bias_of(c_out);
            let bias = (0..n).map(|j| b[j % c_out]).collect();
            return Some(QConv {
                packed: Packed::new(&q, n, kk, cpu::level()),
                rowsum,
                w_scale,
                bias,
                c_in,
                n,
                taps: 2,
                dil: 1,
                pad_l: 1,
                pad_r: 1,
                up: Some(Up { stride: s, c_out, shift, pad: p }),
                per_row: false,
                two_pass: false,
            });
        }
        if conv.stride != 1 {
            return None;
        }
        // W [O, C, k] → rows [O, k·C], K ordered (tap, channel) as the window's steps are
        let (o, c) = (a, b);
        let mut rows = vec![0f32; o * k * c];
        for oi in 0..o {
            for ci in 0..c {
                for j in 0..k {
                    rows[oi * k * c + j * c + ci] = wv[(oi * c + ci) * k + j];
                }
            }
        }
        let (q, w_scale, rowsum) = quantize_rows(&rows, o, k * c);
        Some(QConv {
            packed: Packed::new(&q, o, k * c, cpu::level()),
            rowsum,
            w_scale,
            bias: bias_of(o),
            c_in: c,
            n: o,
            taps: k,
            dil: conv.dil as usize,
            pad_l: conv.pad as usize,
            pad_r: conv.pad as usize,
            up: None,
            per_row: false,
            two_pass: false,
        })
    }

    /// The int8 form of `conv` (a plain convolution of stride 1) with its activations quantized
    /// per step: every input step (a frame, a token) gets the scale and zero point of its own
    /// channels' range, as hibari's int8 rows do. A step's codes then carry its scale into each
    /// product of a tap, so the taps are products of their own: one product of N' = taps·C_out
    /// columns (tap j's weights in columns j·C_out..) over K = C_in, each output step the sum of
    /// its taps' columns at their steps, each scaled by its step's scale. The same
    /// multiply-adds as [`QConv::new`]'s; the sums of the taps in floats, which frame-rate and
    /// token-rate layers (the flow, the text encoder) afford. None where [`QConv::new`] is.
    pub fn per_row(conv: &ConvParts) -> Option<QConv> {
        if conv.groups != 1 || conv.transposed || conv.stride != 1 {
            return None;
        }
        let w = if conv.w.dim() == 4 { conv.w.squeeze_dim(2) } else { conv.w.shallow_clone() };
        let (o, c, k) = (w.size()[0] as usize, w.size()[1] as usize, w.size()[2] as usize);
        let wv = floats(&w);
        // rows [k·O, C]: tap j of output channel oi is row j·O + oi
        let mut rows = vec![0f32; k * o * c];
        for oi in 0..o {
            for ci in 0..c {
                for j in 0..k {
                    rows[(j * o + oi) * c + ci] = wv[(oi * c + ci) * k + j];
                }
            }
        }
        let (q, w_scale, rowsum) = quantize_rows(&rows, k * o, c);
        Some(QConv {
            packed: Packed::new(&q, k * o, c, cpu::level()),
            rowsum,
            w_scale,
            bias: conv.b.as_ref().map_or_else(|| vec![0f32; o], floats),
            c_in: c,
            n: o,
            taps: k,
            dil: conv.dil as usize,
            pad_l: conv.pad as usize,
            pad_r: conv.pad as usize,
            up: None,
            per_row: true,
            two_pass: false,
        })
    }

    /// [`QConv::run`] of a [`QConv::per_row`] layer (stored).
    fn run_per_row(&self, x: &[f32], out: &mut [f32]) {
        let (c, n, k) = (self.c_in, self.n, self.taps);
        let l = x.len() / c;
        let mut q = vec![0u8; l * c];
        let mut scale = vec![0f32; l];
        let mut corr = vec![0i32; l];
        for (t, (row, qr)) in x.chunks_exact(c).zip(q.chunks_exact_mut(c)).enumerate() {
            let (lo, hi) = extremes(row);
            let (s, zp) = params(lo, hi);
            quantize(row, Pre::NONE, 1.0 / s, zp, qr);
            (scale[t], corr[t]) = (s, 128 - i32::from(zp));
        }
        // the products in blocks of input steps, each after the `reach` steps before it that the
        // next outputs still read, so that they stay in L2 for the epilogue (the whole layer's are
        // 12 MB on joe's flow); every output step is summed when all its steps' products are in
        let (width, reach, pad) = (k * n, self.dil * (k - 1), self.pad_l);
        let steps_out = out.len() / n;
        let block = (BLOCK_SUM_BYTES / (4 * width)).max(6);
        gemm::with_scratch_i32((reach + block) * width, |y| {
            let steps = Steps { scale: &scale, corr: &corr };
            let (mut y0, mut s0, mut t0) = (0, 0, 0);
            loop {
                let s1 = (s0 + block).min(l);
                let keep = s0.saturating_sub(reach).max(y0);
                y.copy_within((keep - y0) * width..(s0 - y0) * width, 0);
                y0 = keep;
                self.packed.matmul_u8(&q[s0 * c..s1 * c], &mut y[(s0 - y0) * width..(s1 - y0) * width]);
                let t1 = if s1 == l { steps_out } else { (s1 + pad).saturating_sub(reach).clamp(t0, steps_out) };
                let taps = Taps { k, n, dil: self.dil, pad, first_row: y0, first_out: t0 };
                let y = &y[..(s1 - y0) * width];
                per_row_epilogue(y, steps, &self.rowsum, &self.w_scale, &self.bias, taps, &mut out[t0 * n..t1 * n]);
                (s0, t0) = (s1, t1);
                if t0 == steps_out {
                    break;
                }
            }
        });
    }

    /// Quantizes the activations in two passes from now on: each block's window as before, and
    /// its rounding error (pre(x)·inv less its codes, within ± half a step) as a second window
    /// on the range ± half a step (scale step/255, zero point 128: [`quantize_two`], written in
    /// the same pass over the input as the first), whose product is added to the first's in the
    /// same epilogue: 16 bits of resolution where one pass gives 8, for twice the multiply-adds.
    /// For the layers where 8 bits of activation are heard (Piper's last up-sampling stage,
    /// [`super::net`]). A [`QConv::new`] layer's only.
    pub fn two_pass(&mut self) {
        assert!(!self.per_row, "two passes are for blocks of steps");
        self.two_pass = true;
    }

    /// Input channels.
    pub fn c_in(&self) -> usize {
        self.c_in
    }

    /// Output channels.
    pub fn c_out(&self) -> usize {
        self.up.as_ref().map_or(self.n, |u| u.c_out)
    }

    /// Output steps for `l` input steps.
    pub fn out_len(&self, l: usize) -> usize {
        match &self.up {
            Some(u) => ((l + 1) * u.stride).saturating_sub(2 * u.pad),
            None => (l + self.pad_l + self.pad_r).saturating_sub(self.dil * (self.taps - 1)),
        }
    }

    /// Rows of the product for `l` input steps: output steps, or pairs of input steps.
    fn product_rows(&self, l: usize) -> usize {
        match &self.up {
            Some(_) => l + 1,
            None => self.out_len(l),
        }
    }

    /// Output steps (product rows) per block: its sums within [`BLOCK_SUM_BYTES`].
    fn block_rows(&self) -> usize {
        (BLOCK_SUM_BYTES / (4 * self.n)).clamp(MIN_BLOCK, MAX_BLOCK) / MIN_BLOCK * MIN_BLOCK
    }

    /// The convolution of `pre`(x) (`x`: [L, C_in] time-major) into `out` ([L', C_out]) as
    /// `how` says.
    pub fn run(&self, x: &[f32], pre: Pre, out: &mut [f32], how: Out) {
        let c = self.c_in;
        assert!(x.len().is_multiple_of(c), "QConv: X [L, C]");
        let l = x.len() / c;
        let (rows, c_out) = (self.product_rows(l), self.c_out());
        assert_eq!(out.len(), self.out_len(l) * c_out, "QConv: Y [L', C']");
        match how {
            Out::Residual(r) | Out::AddResidual(r) => assert_eq!(r.len(), out.len(), "QConv: residual"),
            Out::Store => {}
        }
        if self.per_row {
            assert!(matches!(how, Out::Store) && pre.mul == 1.0 && pre.slope == 1.0, "per-step layers store x's");
            return self.run_per_row(x, out);
        }
        let reach = self.dil * (self.taps - 1);
        let block = self.block_rows();
        let n = self.n;
        WINDOW.with_borrow_mut(|win| {
            ERR_WINDOW.with_borrow_mut(|win2| {
                let passes = if self.two_pass { 2 } else { 1 };
                gemm::with_scratch_i32(passes * block * n, |ys| {
                    let (y, y2) = ys.split_at_mut(block * n);
                    let mut sc = vec![0f32; n];
                    let mut corr = vec![0i32; n];
                    let mut sc2 = vec![0f32; if self.two_pass { n } else { 0 }];
                    for r0 in (0..rows).step_by(block) {
                        let m = block.min(rows - r0);
                        // padded steps r0 .. r0 + m + reach; padded step i is x's step i − pad_l
                        let (first, end) =
                            (r0 as isize - self.pad_l as isize, (r0 + m + reach) as isize - self.pad_l as isize);
                        let (lo_i, hi_i) = (first.clamp(0, l as isize) as usize, end.clamp(0, l as isize) as usize);
                        let (before, after) = ((lo_i as isize - first) as usize, (end - hi_i as isize) as usize);
                        let inner = &x[lo_i * c..hi_i * c];
                        let (lo, hi) = extremes(inner);
                        let (scale, zp) = params(pre.apply(lo), pre.apply(hi));
                        let len = (m + reach) * c;
                        let (b, i) = (before * c, inner.len());
                        win.resize(len, 0);
                        win[..b].fill(zp);
                        win[b + i..].fill(zp);
                        let (y, y2) = (&mut y[..m * n], &mut y2[..if self.two_pass { m * n } else { 0 }]);
                        if self.two_pass {
                            // the window and its rounding error (in 1/255ths of a step: zero point
                            // 128, zero in the padding), quantized in one pass over it
                            win2.resize(len, 0);
                            win2[..b].fill(ERR_ZP);
                            win2[b + i..].fill(ERR_ZP);
                            quantize_two(inner, pre, 1.0 / scale, zp, &mut win[b..b + i], &mut win2[b..b + i]);
                            self.product(win, m, y);
                            self.product(win2, m, y2);
                        } else {
                            quantize(inner, pre, 1.0 / scale, zp, &mut win[b..b + i]);
                            self.product(win, m, y);
                        }
                        debug_assert_eq!(after, (len - b - i) / c);
                        let k = 128 - i32::from(zp);
                        for j in 0..n {
                            sc[j] = scale * self.w_scale[j];
                            corr[j] = k.wrapping_mul(self.rowsum[j]);
                        }
                        for (s2, &w) in sc2.iter_mut().zip(&self.w_scale) {
                            *s2 = scale / 255.0 * w;
                        }
                        let sums = Sums { y, corr: &corr, sc: &sc, y2, sc2: &sc2 };
                        match &self.up {
                            None => {
                                let at = r0 * c_out..(r0 + m) * c_out;
                                let dst = &mut out[at.clone()];
                                match how {
                                    Out::Store => epilogue(sums, &self.bias, dst, &[], false),
                                    Out::Residual(res) => epilogue(sums, &self.bias, dst, &res[at], false),
                                    Out::AddResidual(res) => epilogue(sums, &self.bias, dst, &res[at], true),
                                }
                            }
                            Some(u) => {
                                assert!(matches!(how, Out::Store), "an up-sampling stores its output");
                                up_epilogue(sums, &self.bias, r0, &u.shift, u.c_out, out);
                            }
                        }
                    }
                })
            })
        });
    }

    /// One block's product: its window (`win`, quantized) into the int32 sums `y` of its `m`
    /// output steps (product rows).
    fn product(&self, win: &[u8], m: usize, y: &mut [i32]) {
        let c = self.c_in;
        if self.up.is_some() {
            self.packed.matmul_u8_rows(win, m, c, y);
        } else {
            self.packed.matmul_u8_taps(win, m, c, self.taps, c, self.dil * c, y);
        }
    }

    /// [1, C, L] (any layout, CPU) → [1, C', L'] (its transpose's memory: time-major).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let size = x.size();
        assert!(size.len() == 3 && size[0] == 1 && size[1] as usize == self.c_in, "QConv: X {size:?}");
        let xt = x.squeeze_dim(0).transpose(0, 1).to_kind(Kind::Float).contiguous();
        let l = size[2] as usize;
        let lo = self.out_len(l);
        let mut out = Tensor::empty([lo as i64, self.c_out() as i64], (Kind::Float, Device::Cpu));
        // SAFETY: a tensor made here and held alone while the slice lives.
        self.run(f32s(&xt), Pre::NONE, unsafe { f32s_mut(&mut out) }, Out::Store);
        out.transpose(0, 1).unsqueeze(0)
    }
}

/// The smallest and largest of `x`, and 0 (the range quantization covers). 16 lanes, which the
/// compiler vectorizes.
fn extremes(x: &[f32]) -> (f32, f32) {
    simd_extremes(x)
}

simd_fn! {
    fn simd_extremes(x: &[f32]) -> (f32, f32) {
        const W: usize = 16;
        let (chunks, rest) = x.as_chunks::<W>();
        let (mut los, mut his) = ([0f32; W], [0f32; W]);
        for ch in chunks {
            for ((lo, hi), &v) in los.iter_mut().zip(his.iter_mut()).zip(ch) {
                *lo = if v < *lo { v } else { *lo };
                *hi = if v > *hi { v } else { *hi };
            }
        }
        let (mut lo, mut hi) = (0f32, 0f32);
        for &v in los.iter().chain(&his).chain(rest) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        (lo, hi)
    }
}

/// uint8 scale and zero point of the range [min(lo, 0), max(hi, 0)] (onnxruntime's
/// `GetQuantizationParameter`); scale 1 for an all-zero range.
fn params(lo: f32, hi: f32) -> (f32, u8) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even() as u8;
    (scale, zp)
}

simd_fn! {
    /// round(pre(x)·inv) + zp, half to even, saturated to 0..255, into `q`.
    fn quantize(x: &[f32], pre: Pre, inv: f32, zp: u8, q: &mut [u8]) {
        // rounding by adding and removing 1.5·2²³, the code the low byte of the sum plus zp
        // (as `kokoro::int8::quantize_into`): integer operations that vectorize
        const MAGIC: f32 = 12_582_912.0;
        let (lo, hi) = (-f32::from(zp), 255.0 - f32::from(zp));
        for (q, &v) in q.iter_mut().zip(x) {
            let r = (pre.apply(v) * inv).clamp(lo, hi) + MAGIC;
            *q = (r.to_bits() as u8).wrapping_add(zp);
        }
    }
}

/// The zero point of a rounding error's codes ([`quantize_two`]): its range is ± half a step.
const ERR_ZP: u8 = 128;

simd_fn! {
    /// [`quantize`] into `q`, and the rounding error of each code (pre(x)·inv less the code's
    /// value, within ± half a step but where the clamp cut more) in 1/255ths of a step, rounded,
    /// saturated to −128..127, plus [`ERR_ZP`], into `e`: the range ± half a step on 0..255, as
    /// onnxruntime's parameters of that range give (scale step/255, zero point 128).
    fn quantize_two(x: &[f32], pre: Pre, inv: f32, zp: u8, q: &mut [u8], e: &mut [u8]) {
        const MAGIC: f32 = 12_582_912.0;
        let (lo, hi) = (-f32::from(zp), 255.0 - f32::from(zp));
        for ((q, e), &v) in q.iter_mut().zip(e.iter_mut()).zip(x) {
            let u = pre.apply(v) * inv;
            let r = u.clamp(lo, hi) + MAGIC;
            *q = (r.to_bits() as u8).wrapping_add(zp);
            let d = ((u - (r - MAGIC)) * 255.0).clamp(-128.0, 127.0) + MAGIC;
            *e = (d.to_bits() as u8).wrapping_add(ERR_ZP);
        }
    }
}

/// A block's int32 sums [M, N] and their columns' terms: (sum + `corr`)·`sc`; in two passes
/// ([`QConv::two_pass`]) plus `y2`·`sc2`, the rounding error's sums (zero point 128: no
/// correction). `y2` and `sc2` are empty in one pass.
#[derive(Clone, Copy)]
struct Sums<'a> {
    y: &'a [i32],
    corr: &'a [i32],
    sc: &'a [f32],
    y2: &'a [i32],
    sc2: &'a [f32],
}

/// Row `yr` of a block's sums (and `yr2` of the second pass's, if TWO), columns `cols`, as
/// floats: (sum + corr)·sc (+ sum2·sc2) + bias, each passed to `f` with its column's place.
#[inline(always)]
fn row_values<const TWO: bool>(
    s: Sums<'_>,
    bias: &[f32],
    (yr, yr2): (&[i32], &[i32]),
    cols: std::ops::Range<usize>,
    mut f: impl FnMut(usize, f32),
) {
    let (y, corr, sc, b) = (&yr[cols.clone()], &s.corr[cols.clone()], &s.sc[cols.clone()], &bias[cols.clone()]);
    if TWO {
        let (y2, sc2) = (&yr2[cols.clone()], &s.sc2[cols.clone()]);
        for (i, ((((&v, &k), &c), &b), (&v2, &c2))) in
            y.iter().zip(corr).zip(sc).zip(b).zip(y2.iter().zip(sc2)).enumerate()
        {
            f(i, v.wrapping_add(k) as f32 * c + v2 as f32 * c2 + b);
        }
    } else {
        for (i, (((&v, &k), &c), &b)) in y.iter().zip(corr).zip(sc).zip(b).enumerate() {
            f(i, v.wrapping_add(k) as f32 * c + b);
        }
    }
}

/// [`epilogue`] for one or two passes.
#[inline(always)]
fn epilogue_rows<const TWO: bool>(s: Sums<'_>, bias: &[f32], dst: &mut [f32], res: &[f32], add: bool) {
    let n = s.corr.len();
    let y2 = |t: usize| if TWO { &s.y2[t * n..(t + 1) * n] } else { &[][..] };
    for (t, d) in dst.chunks_exact_mut(n).enumerate() {
        let rows = (&s.y[t * n..(t + 1) * n], y2(t));
        if res.is_empty() {
            row_values::<TWO>(s, bias, rows, 0..n, |j, v| d[j] = v);
        } else if add {
            let r = &res[t * n..(t + 1) * n];
            row_values::<TWO>(s, bias, rows, 0..n, |j, v| d[j] += v + r[j]);
        } else {
            let r = &res[t * n..(t + 1) * n];
            row_values::<TWO>(s, bias, rows, 0..n, |j, v| d[j] = v + r[j]);
        }
    }
}

simd_fn! {
    /// A block's sums into floats in `dst` [M, N]: [`Sums`]'s values plus `bias`, plus `res` (if
    /// not empty), stored or (`add`) added to `dst`.
    fn epilogue(s: Sums<'_>, bias: &[f32], dst: &mut [f32], res: &[f32], add: bool) {
        if s.y2.is_empty() {
            epilogue_rows::<false>(s, bias, dst, res, add)
        } else {
            epilogue_rows::<true>(s, bias, dst, res, add)
        }
    }
}

/// [`up_epilogue`] for one or two passes.
#[inline(always)]
fn up_rows<const TWO: bool>(s: Sums<'_>, bias: &[f32], r0: usize, shift: &[usize], c_out: usize, out: &mut [f32]) {
    let st = shift.len();
    let n = st * c_out;
    let steps = out.len() / c_out;
    for i in 0..s.y.len() / n {
        let p = r0 + i;
        let rows = (&s.y[i * n..(i + 1) * n], if TWO { &s.y2[i * n..(i + 1) * n] } else { &[][..] });
        for (r, &a) in shift.iter().enumerate() {
            if p < a || (p - a) * st + r >= steps {
                continue;
            }
            let t = (p - a) * st + r;
            let d = &mut out[t * c_out..(t + 1) * c_out];
            row_values::<TWO>(s, bias, rows, r * c_out..(r + 1) * c_out, |j, v| d[j] = v);
        }
    }
}

simd_fn! {
    /// A transposed convolution's block of sums (pairs r0.., N = s·C_out) into its output
    /// steps: phase r of pair p is output step (p − a_r)·s + r.
    fn up_epilogue(s: Sums<'_>, bias: &[f32], r0: usize, shift: &[usize], c_out: usize, out: &mut [f32]) {
        if s.y2.is_empty() {
            up_rows::<false>(s, bias, r0, shift, c_out, out)
        } else {
            up_rows::<true>(s, bias, r0, shift, c_out, out)
        }
    }
}

/// A per-step layer's activations: each step's scale and zero point's correction (128 − zp).
#[derive(Clone, Copy)]
struct Steps<'a> {
    scale: &'a [f32],
    corr: &'a [i32],
}

/// A per-step layer's taps: `k` of them, `dil` steps apart, the first `pad` steps before the
/// output's; `n` output channels; a block of the products starts at input step `first_row`,
/// the outputs it gives at step `first_out`.
#[derive(Clone, Copy)]
struct Taps {
    k: usize,
    n: usize,
    dil: usize,
    pad: usize,
    first_row: usize,
    first_out: usize,
}

simd_fn! {
    /// The per-step products `y` ([rows, k·N] from input step `first_row`: tap j of step t' in
    /// columns j·N..) into `out` (output steps `first_out`.., N each): step t is the bias plus,
    /// tap by tap, the sums of step t + j·dil − pad (those within 0..L, all of them in `y`)
    /// corrected for its zero point and times its scale and the column's.
    fn per_row_epilogue(y: &[i32], steps: Steps<'_>, rowsum: &[i32], w_scale: &[f32], bias: &[f32], taps: Taps, out: &mut [f32]) {
        let Steps { scale, corr } = steps;
        let Taps { k, n, dil, pad, first_row, first_out } = taps;
        let l = scale.len();
        for (t, d) in out.chunks_exact_mut(n).enumerate() {
            let t = first_out + t;
            d.copy_from_slice(bias);
            for j in 0..k {
                let Some(src) = (t + j * dil).checked_sub(pad).filter(|&s| s < l) else { continue };
                let cols = j * n..(j + 1) * n;
                let (z, s) = (corr[src], scale[src]);
                let yr = &y[(src - first_row) * k * n + j * n..][..n];
                for (((d, &v), &w), &r) in d.iter_mut().zip(yr).zip(&w_scale[cols.clone()]).zip(&rowsum[cols]) {
                    *d += v.wrapping_add(z.wrapping_mul(r)) as f32 * (s * w);
                }
            }
        }
    }
}
