//! Kokoro's weighted layers in the two precisions: [`Linear`], [`Conv`] and [`Lstm`], each read off
//! the ONNX node that used it (its initializers by name). The int8 export quantizes activations
//! dynamically as onnxruntime does: each activation tensor gets one uint8 scale and zero point from
//! its own min and max ([`quantize`]), products sum (a − a_zp)·(w − w_zp) exactly in int32 on our
//! kernels ([`Packed`]: the same integers on every CPU level), and the sums become floats times
//! a_scale·w_scale. [`Precision::Fp32`] runs the dequantized weights (w − w_zp)·w_scale through
//! plain tch ops on any device.

use tch::{Device, Kind, Tensor};

use super::approx;
use super::stats::Stats;
use crate::cpu::{self, simd_fn};
use crate::gemm::Packed;
use crate::onnx::{AttrValue, Node, Tensor as OnnxTensor};
use crate::precision::Precision;
use crate::tensor_slices::{f32s as slice_f32, f32s_mut};

type R<T> = Result<T, String>;

/// onnxruntime's `GetQuantizationParameter` for uint8: the range [min(x, 0), max(x, 0)] on 0..255,
/// zero point rounded half to even; scale 1 for an all-zero tensor.
pub(super) fn quant_params(x: &[f32]) -> (f32, u8) {
    // min and max in 16 lanes, which the compiler vectorizes (one running min would be a chain of
    // scalar instructions); the same extremes in any order
    const W: usize = 16;
    let (chunks, rest) = x.as_chunks::<W>();
    let (mut los, mut his) = ([0f32; W], [0f32; W]);
    for c in chunks {
        for ((lo, hi), &v) in los.iter_mut().zip(his.iter_mut()).zip(c) {
            *lo = if v < *lo { v } else { *lo };
            *hi = if v > *hi { v } else { *hi };
        }
    }
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in los.iter().chain(&his).chain(rest) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    range_params(lo, hi)
}

/// [`quant_params`] from the tensor's extremes `lo` ≤ 0 ≤ `hi`.
pub(super) fn range_params(lo: f32, hi: f32) -> (f32, u8) {
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even() as u8;
    (scale, zp)
}

/// onnxruntime's `MlasQuantizeLinear` to uint8: round(x / scale) + zp, half to even, saturated.
/// (Inlined: `fused` runs it in its AVX2 and AVX-512 builds.)
#[inline(always)]
pub(super) fn quantize_into(x: &[f32], scale: f32, zp: u8, q: &mut [u8]) {
    let (lo, hi) = (-f32::from(zp), 255.0 - f32::from(zp));
    // Rounding half to even by adding and removing 1.5·2²³ (exact for |r| ≤ 2²²; here |r| ≤ 255):
    // the same value as `round_ties_even`, which the baseline target has no instruction for.
    // The sum's low mantissa bits are then the rounded value itself (two's complement: 1.5·2²³
    // + r for −255 ≤ r ≤ 255 keeps its exponent), so its low byte plus zp, modulo 256, is the
    // code: integer operations that vectorize, where converting the float to u8 did not.
    const MAGIC: f32 = 12_582_912.0;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v / scale).clamp(lo, hi) + MAGIC;
        *q = (r.to_bits() as u8).wrapping_add(zp);
    }
}

pub(super) fn to_f32s(t: &Tensor) -> R<Vec<f32>> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().flatten(0, -1).to_device(Device::Cpu))
        .map_err(|e| e.to_string())
}

/// An activation ready for the weighted layers: in int8 its uint8 codes with the tensor's scale
/// and zero point (`DynamicQuantizeLinear`), in fp32 the float tensor itself. Several layers that
/// read the same tensor share one.
pub(super) enum Act {
    Int8 { q: Vec<u8>, scale: f32, zp: u8, shape: Vec<i64> },
    Float(Tensor),
}

/// `DynamicQuantizeLinear` of `x` in int8; `x` itself in fp32.
pub(super) fn quantize(precision: Precision, x: &Tensor) -> Act {
    match precision {
        Precision::Fp32 | Precision::Fp16 => Act::Float(x.shallow_clone()),
        Precision::Int8 => {
            let x = x.to_kind(Kind::Float).contiguous();
            let v = slice_f32(&x);
            let (scale, zp) = quant_params(v);
            let mut q = vec![0u8; v.len()];
            quantize_into(v, scale, zp, &mut q);
            Act::Int8 { q, scale, zp, shape: x.size() }
        }
    }
}

/// A weight for a float product: float16 in [`Precision::Fp16`] (the products then run in
/// float16), else as it is.
pub(super) fn product_weight(w: Tensor, precision: Precision) -> Tensor {
    if precision == Precision::Fp16 {
        w.to_kind(Kind::Half)
    } else {
        w
    }
}

/// A convolution's float product `f` of `x` with its weight `w` and bias `b` (one per output
/// channel): in [`Precision::Fp16`] (`w` in float16) the product in float16, back to float32,
/// and the bias added in float32 after; else `f` as it is, the bias inside.
pub(super) fn conv_product(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    f: impl Fn(&Tensor, Option<&Tensor>) -> Tensor,
) -> Tensor {
    if w.kind() != Kind::Half {
        return f(x, b);
    }
    let y = f(&x.to_kind(Kind::Half), None).to_kind(Kind::Float);
    match b {
        Some(b) => y + b.view([-1, 1]),
        None => y,
    }
}

/// An int8 weight as rows [N, K] (w − w_zp) packed for our kernel, with each row's sum.
struct Int8Rows {
    packed: Packed,
    rowsum: Vec<i32>,
    k: usize,
}

impl Int8Rows {
    fn new(rows: &[i8], n: usize, k: usize) -> Int8Rows {
        let rowsum = rows.chunks_exact(k).map(|r| r.iter().map(|&v| i32::from(v)).sum()).collect();
        Int8Rows { packed: Packed::new(rows, n, k, cpu::level()), rowsum, k }
    }

    /// C[m, j] = Σ_k (a[m, k] − a_zp)·W[j, k] in int32, for u8 activations `a` [M, K]. The
    /// kernel takes a − 128; the difference to a − a_zp is (128 − a_zp) times the row sum.
    fn products(&self, a: &[u8], a_zp: u8) -> Vec<i32> {
        let m = a.len() / self.k;
        let mut c = vec![0i32; m * self.rowsum.len()];
        self.packed.matmul_u8(a, &mut c);
        self.correct(&mut c, a_zp);
        c
    }

    fn correct(&self, c: &mut [i32], a_zp: u8) {
        let n = self.rowsum.len();
        let corr = 128 - i32::from(a_zp);
        if corr != 0 {
            for row in c.chunks_exact_mut(n) {
                for (v, s) in row.iter_mut().zip(&self.rowsum) {
                    *v += corr * s;
                }
            }
        }
    }
}

/// w − w_zp as int8 (`per`: elements per zero point; one zero point for the whole tensor if
/// `zp` has one element), a block of `per` at a time (a loop the compiler vectorizes: ~80M
/// weights at load).
fn centered(w: &[i16], zp: &[i64], per: usize) -> R<Vec<i8>> {
    let per = if zp.len() == 1 { w.len().max(1) } else { per.max(1) };
    let mut out = Vec::with_capacity(w.len());
    for (block, codes) in w.chunks(per).enumerate() {
        let z = zp.get(block).copied().ok_or_else(|| format!("no zero point for block {block} of {per} weights"))?;
        // codes are bytes and zero points are bytes: the difference fits i16
        let z = i16::try_from(z).map_err(|_| format!("zero point {z} is not a byte"))?;
        let start = out.len();
        out.extend(codes.iter().map(|&v| v.wrapping_sub(z) as i8));
        if let Some((&v, _)) = codes.iter().zip(&out[start..]).find(|&(&v, &c)| v.wrapping_sub(z) != i16::from(c)) {
            return Err(format!("weight {v} − zero point {z} does not fit int8"));
        }
    }
    Ok(out)
}

/// A weight's integer codes (int8 or uint8 in the export) as i16: 2 bytes a code rather than
/// `to_i64`'s 8, whose zeroed pages were most of the network's load time.
fn codes(t: &OnnxTensor) -> R<Vec<i16>> {
    use crate::onnx::DataType;
    match t.dtype {
        DataType::Int8 => Ok(t.data.iter().map(|&b| i16::from(b as i8)).collect()),
        DataType::Uint8 => Ok(t.data.iter().map(|&b| i16::from(b)).collect()),
        _ => i64s(t)?
            .into_iter()
            .map(|v| i16::try_from(v).map_err(|_| format!("{}: weight {v} is not a byte", t.name)))
            .collect(),
    }
}

fn i64s(t: &OnnxTensor) -> R<Vec<i64>> {
    t.to_i64().map_err(|e| format!("{}: {e}", t.name))
}

fn f32s(t: &OnnxTensor) -> R<Vec<f32>> {
    t.to_f32().map_err(|e| format!("{}: {e}", t.name))
}

/// A Linear layer (`MatMulInteger` + scale + bias): y = x·W + b over the last axis.
pub(super) struct Linear {
    int8: Option<Int8Rows>,
    /// int8: a_scale·w_scale[j] is formed per call from these
    w_scale: Vec<f32>,
    /// fp32: W [K, N] dequantized
    float: Option<Tensor>,
    /// fp32: the bias on the weight's device
    bias: Option<Tensor>,
    /// int8: the bias as floats (none: empty)
    bias_f32: Vec<f32>,
    n: usize,
    k: usize,
}

impl Linear {
    /// `w` [K, N] (int8, zero point per column or per tensor), `scale` per column or per tensor.
    pub fn new(
        w: &OnnxTensor,
        zp: &OnnxTensor,
        scale: &OnnxTensor,
        bias: Option<&OnnxTensor>,
        precision: Precision,
        device: Device,
    ) -> R<Linear> {
        if w.dims.len() != 2 {
            return Err(format!("{}: not a 2-d weight", w.name));
        }
        let (k, n) = (w.dims[0], w.dims[1]);
        let wv = codes(w)?;
        // rows [N, K]
        let mut t = vec![0i16; n * k];
        for kk in 0..k {
            for j in 0..n {
                t[j * k + kk] = wv[kk * n + j];
            }
        }
        let rows = centered(&t, &i64s(zp)?, k)?;
        let mut w_scale = f32s(scale)?;
        if w_scale.len() == 1 {
            w_scale = vec![w_scale[0]; n];
        }
        if w_scale.len() != n {
            return Err(format!("{}: {} scales for {n} columns", scale.name, w_scale.len()));
        }
        let bias_f32 = match bias {
            Some(b) => f32s(b)?,
            None => Vec::new(),
        };
        if !bias_f32.is_empty() && bias_f32.len() != n {
            return Err(format!("{}: a bias of {} for {n} columns", w.name, bias_f32.len()));
        }
        let bias = (!bias_f32.is_empty()).then(|| Tensor::from_slice(&bias_f32).to_device(device));
        let (int8, float) = match precision {
            Precision::Int8 => (Some(Int8Rows::new(&rows, n, k)), None),
            Precision::Fp32 | Precision::Fp16 => {
                let f: Vec<f32> = rows.iter().enumerate().map(|(i, &v)| f32::from(v) * w_scale[i / k]).collect();
                let t = Tensor::from_slice(&f).view([n as i64, k as i64]).transpose(0, 1).contiguous();
                (None, Some(product_weight(t.to_device(device), precision)))
            }
        };
        Ok(Linear { int8, w_scale, float, bias, bias_f32, n, k })
    }

    /// int8: y = x·W + b of a quantized activation as floats, without libtorch: the sums scaled,
    /// then the bias added, in f32 (the same values libtorch's add gave). [`Linear::forward_act`]'s
    /// int8 arm, and the style's Linears' (48 per generator pass on one row, whose tensor
    /// operations took ~2% of an inference).
    pub fn forward_int8_vec(&self, a: &Act) -> Vec<f32> {
        let (Act::Int8 { q, scale, zp, shape }, Some(rows)) = (a, &self.int8) else {
            panic!("an activation of the other precision")
        };
        assert_eq!(*shape.last().expect("rank ≥ 1") as usize, self.k, "Linear: K");
        let m: Vec<f32> = self.w_scale.iter().map(|&w| scale * w).collect();
        let mut y: Vec<f32> = rows.products(q, *zp).iter().zip(m.iter().cycle()).map(|(&v, &s)| v as f32 * s).collect();
        if !self.bias_f32.is_empty() {
            for row in y.chunks_exact_mut(self.n) {
                for (v, &b) in row.iter_mut().zip(&self.bias_f32) {
                    *v += b;
                }
            }
        }
        y
    }

    pub fn forward(&self, precision: Precision, x: &Tensor) -> Tensor {
        self.forward_act(&quantize(precision, x))
    }

    /// y [.., N] of an activation [.., K].
    pub fn forward_act(&self, a: &Act) -> Tensor {
        match (a, &self.float) {
            // (in the weight's kind, float16 in fp16, back to float32 before the bias)
            (Act::Float(x), Some(w)) => {
                let y = x.to_kind(w.kind()).matmul(w).to_kind(Kind::Float);
                match &self.bias {
                    Some(b) => y + b,
                    None => y,
                }
            }
            (Act::Int8 { shape, .. }, _) => {
                let mut out = shape.clone();
                *out.last_mut().expect("rank ≥ 1") = self.n as i64;
                Tensor::from_slice(&self.forward_int8_vec(a)).view(out.as_slice())
            }
            _ => panic!("an activation of the other precision"),
        }
    }
}

fn ints_attr(n: &Node, name: &str, default: i64) -> i64 {
    match n.attr(name) {
        Some(AttrValue::Ints(v)) if !v.is_empty() => v[0],
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

/// Output steps per block of a convolution's products (`Conv::sums_into`): a multiple of every
/// kernel's tile height (3, 4, 5, 6), so that blocks split into whole tiles.
const SUM_ROWS: usize = 240;

/// A 1-d convolution (`ConvInteger` + bias + scale): [1, C, L] → [1, O, L'].
pub(super) struct Conv {
    int8: Option<Int8Rows>,
    float: Option<Tensor>,
    w_scale: f32,
    /// int8: the float bias, quantized per call as the export does (floor(b / (a_scale·w_scale)))
    bias_f32: Option<Vec<f32>>,
    bias: Option<Tensor>,
    out_ch: usize,
    in_ch: usize,
    kernel: usize,
    pad: usize,
    stride: usize,
    dil: usize,
}

impl Conv {
    /// `w` [O, C, k] uint8 with one zero point, a per-tensor scale; the node's attributes.
    pub fn new(
        node: &Node,
        w: &OnnxTensor,
        zp: &OnnxTensor,
        scale: &OnnxTensor,
        bias: Option<&OnnxTensor>,
        precision: Precision,
        device: Device,
    ) -> R<Conv> {
        if w.dims.len() != 3 || ints_attr(node, "group", 1) != 1 {
            return Err(format!("{}: only ungrouped 1-d convolutions", node.name));
        }
        let pads = match node.attr("pads") {
            Some(AttrValue::Ints(v)) => v.clone(),
            _ => vec![0, 0],
        };
        if pads.len() != 2 || pads[0] != pads[1] {
            return Err(format!("{}: asymmetric padding", node.name));
        }
        let (o, c, k) = (w.dims[0], w.dims[1], w.dims[2]);
        let rows = centered(&codes(w)?, &i64s(zp)?, c * k)?;
        let s = f32s(scale)?;
        if s.len() != 1 {
            return Err(format!("{}: per-channel scales not supported", node.name));
        }
        let w_scale = s[0];
        let bias_f32 = bias.map(f32s).transpose()?;
        let (int8, float, bias) = match precision {
            Precision::Int8 => {
                // K ordered (tap, channel): the im2col rows of `forward_act`
                let mut r = vec![0i8; rows.len()];
                for oi in 0..o {
                    for ci in 0..c {
                        for j in 0..k {
                            r[oi * c * k + j * c + ci] = rows[oi * c * k + ci * k + j];
                        }
                    }
                }
                (Some(Int8Rows::new(&r, o, c * k)), None, None)
            }
            Precision::Fp32 | Precision::Fp16 => {
                let f: Vec<f32> = rows.iter().map(|&v| f32::from(v) * w_scale).collect();
                let t = Tensor::from_slice(&f).view([o as i64, c as i64, k as i64]).to_device(device);
                let t = product_weight(t, precision);
                let b = bias_f32.as_ref().map(|b| {
                    let b: Vec<f32> = if std::env::var_os("KOKORO_FLOOR_BIAS").is_some() {
                        b.iter().map(|&v| (v / w_scale).floor() * w_scale).collect()
                    } else {
                        b.clone()
                    };
                    Tensor::from_slice(&b).to_device(device)
                });
                (None, Some(t), b)
            }
        };
        Ok(Conv {
            int8,
            float,
            w_scale,
            bias_f32,
            bias,
            out_ch: o,
            in_ch: c,
            kernel: k,
            pad: pads[0] as usize,
            stride: ints_attr(node, "strides", 1) as usize,
            dil: ints_attr(node, "dilations", 1) as usize,
        })
    }

    /// [1, C, L] → [1, O, L']. In int8 the activation is quantized straight into the layout the
    /// products read (time-major, padded with the zero point).
    pub fn forward(&self, precision: Precision, x: &Tensor) -> Tensor {
        match (precision, &self.int8) {
            (Precision::Int8, Some(rows)) => {
                let size = x.size();
                assert!(size.len() == 3 && size[0] == 1 && size[1] as usize == self.in_ch, "Conv: X {size:?}");
                let (c, l, pad) = (self.in_ch, size[2] as usize, self.pad);
                // time-major (libtorch's blocked transpose), then quantized in one pass
                let xt_f = x.to_kind(Kind::Float).squeeze_dim(0).transpose(0, 1).contiguous();
                let v = slice_f32(&xt_f);
                let (scale, zp) = quant_params(v);
                let mut xt = vec![zp; (l + 2 * pad) * c];
                quantize_into(v, scale, zp, &mut xt[pad * c..(pad + l) * c]);
                self.products(rows, &xt, l, scale, zp)
            }
            _ => self.forward_act(&quantize(precision, x)),
        }
    }

    /// The convolution of an activation already quantized ([1, C, L]), shared with other layers.
    pub fn forward_act(&self, a: &Act) -> Tensor {
        match (a, &self.int8, &self.float) {
            (Act::Float(x), _, Some(w)) => {
                let (stride, pad, dil) = ([self.stride as i64], [self.pad as i64], [self.dil as i64]);
                conv_product(x, w, self.bias.as_ref(), |x, b| x.conv1d(w, b, stride, pad, dil, 1))
            }
            (Act::Int8 { q, scale, zp, shape }, Some(rows), _) => {
                let (xt, l) = self.padded_tm(q, *zp, shape);
                self.products(rows, &xt, l, *scale, *zp)
            }
            _ => panic!("an activation of the other precision"),
        }
    }

    /// int8: [`Conv::forward_act`] time-major, [L', O].
    pub fn forward_act_tm(&self, a: &Act) -> Vec<f32> {
        match (a, &self.int8) {
            (Act::Int8 { q, scale, zp, shape }, Some(_)) => {
                let (xt, l) = self.padded_tm(q, *zp, shape);
                let mut out = Vec::new();
                self.forward_tm(&xt, l, *scale, *zp, &mut out);
                out
            }
            _ => panic!("time-major convolutions are int8's"),
        }
    }

    /// Channel-major codes [1, C, L] time-major, the padding (the zero point: a product of 0) on
    /// both sides, and L.
    fn padded_tm(&self, q: &[u8], zp: u8, shape: &[i64]) -> (Vec<u8>, usize) {
        let c = self.in_ch;
        assert!(shape.len() == 3 && shape[0] == 1 && shape[1] as usize == c, "Conv: X {shape:?}");
        let (l, pad) = (shape[2] as usize, self.pad);
        let mut xt = vec![zp; (l + 2 * pad) * c];
        for ci in 0..c {
            for (p, &v) in q[ci * l..(ci + 1) * l].iter().enumerate() {
                xt[(p + pad) * c + ci] = v;
            }
        }
        (xt, l)
    }

    /// The zero-point rows a time-major input needs at each end.
    pub fn pad(&self) -> usize {
        self.pad
    }

    /// O, the output's channels.
    pub fn out_channels(&self) -> usize {
        self.out_ch
    }

    /// int8: the convolution of codes already time-major and padded (`xt`, [L + 2·pad, C], with
    /// their scale and zero point), time-major into `out`: [L', O].
    pub fn forward_tm(&self, xt: &[u8], l: usize, scale: f32, zp: u8, out: &mut Vec<f32>) {
        // (every value is written: a buffer of the right size is used as it is)
        out.resize(self.out_len(l) * self.out_ch, 0.0);
        self.forward_tm_into(xt, l, scale, zp, out, false, None);
    }

    /// [`Conv::forward_tm`] into `out` ([L', O], its size), added to what `out` holds where `add`
    /// (a residual sum: the same floats as adding the convolution's output afterwards), each row
    /// of `out` also added to `stats` (the next AdaIN's [`Stats`]) while it is in cache.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_tm_into(
        &self,
        xt: &[u8],
        l: usize,
        scale: f32,
        zp: u8,
        out: &mut [f32],
        add: bool,
        stats: Option<&mut Stats>,
    ) {
        let rows = self.int8.as_ref().expect("time-major convolutions are int8's");
        assert_eq!(xt.len(), (l + 2 * self.pad) * self.in_ch, "Conv: padded X");
        assert_eq!(out.len(), self.out_len(l) * self.out_ch, "Conv: Y [L', O]");
        self.sums_into(rows, xt, l, scale, zp, out, add, stats);
    }

    fn out_len(&self, l: usize) -> usize {
        let span = self.dil * (self.kernel - 1) + 1;
        (l + 2 * self.pad).saturating_sub(span) / self.stride + 1
    }

    /// The int8 convolution of `xt` (time-major [L + 2·pad, C], padded), channel-major [1, O, L'].
    fn products(&self, rows: &Int8Rows, xt: &[u8], l: usize, scale: f32, zp: u8) -> Tensor {
        let (lout, o) = (self.out_len(l), self.out_ch);
        let mut out = Tensor::empty([lout as i64, o as i64], (Kind::Float, Device::Cpu));
        // SAFETY: a tensor made here and held alone while the slice lives.
        self.sums_into(rows, xt, l, scale, zp, unsafe { f32s_mut(&mut out) }, false, None);
        // channel-major by libtorch's blocked transpose
        out.transpose(0, 1).contiguous().unsqueeze(0)
    }

    /// The int8 convolution of `xt` into `dst` (time-major [L', O]): im2col rows
    /// t = [x[:, t·s + j·d] for j] (none for a 1×1), exact sums, then (sums + the bias in the sums'
    /// units)·a_scale·w_scale as the export's graph computes it; `add` and `stats` as in
    /// [`Conv::forward_tm_into`].
    #[allow(clippy::too_many_arguments)]
    fn sums_into(
        &self,
        rows: &Int8Rows,
        xt: &[u8],
        l: usize,
        scale: f32,
        zp: u8,
        dst: &mut [f32],
        add: bool,
        mut stats: Option<&mut Stats>,
    ) {
        let (c, kw, o) = (self.in_ch, self.kernel, self.out_ch);
        let lout = self.out_len(l);
        let s = scale * self.w_scale;
        // the bias in the sums' units, plus the zero point's correction (`Int8Rows::correct`)
        // taken into the same per-column term: the kernel's sums + it in int32 (wrapping, so the
        // same bits in whichever order) are the graph's sums + bias, in one pass over them
        let corr = 128 - i32::from(zp);
        let bq: Vec<i32> = (0..o)
            .map(|j| {
                let b = self.bias_f32.as_ref().map_or(0, |b| (b[j] / s).floor() as i32);
                b.wrapping_add(corr.wrapping_mul(rows.rowsum[j]))
            })
            .collect();
        // the sums in the thread's scratch (rewritten in full: no zeroing, no fresh allocation),
        // a block of output steps at a time, each block's sums turned into floats while they are
        // still in L2 (the generator's second stage has 9,024 steps: 4.6 MB of sums at once)
        let block = SUM_ROWS.min(lout);
        crate::gemm::with_scratch_i32(block * o, |y| {
            for r0 in (0..lout).step_by(block) {
                let m = block.min(lout - r0);
                let y = &mut y[..m * o];
                if kw == 1 && self.stride == 1 {
                    rows.packed.matmul_u8(&xt[r0 * c..(r0 + m) * c], y);
                } else {
                    // the taps' columns of step t lie `dil` steps apart in xt (side by side
                    // without dilation): rows read in place
                    let a = &xt[r0 * self.stride * c..];
                    rows.packed.matmul_u8_taps(a, m, self.stride * c, kw, c, self.dil * c, y);
                }
                epilogue(y, &bq, s, &mut dst[r0 * o..(r0 + m) * o], add, stats.as_deref_mut());
            }
        });
    }
}

simd_fn! {
    /// A block of a convolution's sums `y` [M, O] into floats in `dst` [M, O], time-major as the
    /// sums are: (sum + `bq`)·`s`, stored or (`add`) added to `dst`, each row then added to
    /// `stats`. Loops the compiler vectorizes; the same floats in every build (no FMA).
    fn epilogue(y: &[i32], bq: &[i32], s: f32, dst: &mut [f32], add: bool, stats: Option<&mut Stats>) {
        let o = bq.len();
        // the values row by row: `dst` is in L3 or memory (4.6 MB at the generator's second
        // stage), and in order its lines stream in (down the rows, 16 channels at a time, the
        // stores waited on each line)
        for (d, yr) in dst.chunks_exact_mut(o).zip(y.chunks_exact(o)) {
            if add {
                for ((d, &v), &b) in d.iter_mut().zip(yr).zip(bq) {
                    *d += v.wrapping_add(b) as f32 * s;
                }
            } else {
                for ((d, &v), &b) in d.iter_mut().zip(yr).zip(bq) {
                    *d = v.wrapping_add(b) as f32 * s;
                }
            }
        }
        let Some(st) = stats else { return };
        // then the statistics of the block just written (in L2): 16 channels at a time down its
        // rows, their sums in registers (row by row they were loaded and stored at every row);
        // each channel's sums still run over the rows in order, so the same sums
        const W: usize = 16;
        let mut c0 = 0;
        while c0 + W <= o {
            block_stats::<W>(dst, o, st, c0);
            c0 += W;
        }
        for ch in c0..o {
            block_stats::<1>(dst, o, st, ch);
        }
    }
}

/// [`epilogue`]'s statistics of channels `c0..c0 + W` over the block's rows (`o` channels a
/// row). (Inlined: it runs in `epilogue`'s AVX2 and AVX-512 builds.)
#[inline(always)]
fn block_stats<const W: usize>(dst: &[f32], o: usize, st: &mut Stats, c0: usize) {
    let mut sum: [f64; W] = st.sum[c0..c0 + W].try_into().expect("W channels");
    let mut sq: [f64; W] = st.sq[c0..c0 + W].try_into().expect("W channels");
    for d in dst.chunks_exact(o) {
        for (k, &v) in d[c0..c0 + W].iter().enumerate() {
            let v = f64::from(v);
            sum[k] += v;
            sq[k] += v * v;
        }
    }
    // the extremes in a loop of their own (in L1 now): in the loop above they made the sums
    // spill to the stack
    let mut lo: [f32; W] = st.lo[c0..c0 + W].try_into().expect("W channels");
    let mut hi: [f32; W] = st.hi[c0..c0 + W].try_into().expect("W channels");
    for d in dst.chunks_exact(o) {
        for (k, &v) in d[c0..c0 + W].iter().enumerate() {
            lo[k] = if v < lo[k] { v } else { lo[k] };
            hi[k] = if v > hi[k] { v } else { hi[k] };
        }
    }
    st.sum[c0..c0 + W].copy_from_slice(&sum);
    st.sq[c0..c0 + W].copy_from_slice(&sq);
    st.lo[c0..c0 + W].copy_from_slice(&lo);
    st.hi[c0..c0 + W].copy_from_slice(&hi);
}

/// One direction of a quantized LSTM: W [4H, in] and R [4H, H] (gates i, o, f, c) with their
/// scales, and the bias Wb + Rb.
struct Direction {
    w: Option<Int8Rows>,
    r: Option<Int8Rows>,
    w_scale: f32,
    r_scale: f32,
    /// fp32: W·w_scale as [in, 4H]
    w_f32: Option<Tensor>,
    /// fp32: R·r_scale as [H, 4H]
    r_f32: Vec<f32>,
    bias: Vec<f32>,
}

/// A bidirectional LSTM (`DynamicQuantizeLSTM`, hidden 256, zero initial state). As onnxruntime:
/// the inputs of all steps are quantized together for their product with W, the hidden state step
/// by step for its product with R. The recurrence runs on the CPU in either precision, step by
/// step in Rust; or, in fp32 and fp16 with [`Lstm::on_device`] (the network on a GPU), as one
/// libtorch `lstm` pass on the device (cuDNN on CUDA), in float32: no copy to the host and back,
/// and no wait for the device's queue.
pub(super) struct Lstm {
    dirs: Vec<Direction>,
    input: usize,
    hidden: usize,
    /// [`Lstm::on_device`]: libtorch's `lstm` parameters (per direction W, R, the bias and a
    /// zero bias; gates in PyTorch's order i, f, g, o) on the device.
    device: Option<Vec<Tensor>>,
}

/// The logistic function, 1/(1 + e⁻ˣ), by [`approx::exp`]'s branch-free eˣ (loops of it vectorize).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + approx::exp(-x))
}

simd_fn! {
    /// One LSTM step's cell: the gates' pre-activations (`gates` + `bias`: i, o, f, c, H each)
    /// into the cell state `cs` and the hidden state `hs` (H each), as onnxruntime's LSTM:
    /// c = f·c + i·tanh(g), h = o·tanh(c).
    fn lstm_cell(gates: &[f32], bias: &[f32], cs: &mut [f32], hs: &mut [f32]) {
        let h = cs.len();
        assert!(gates.len() == 4 * h && bias.len() == 4 * h && hs.len() == h, "LSTM: 4H gates, H states");
        // each gate's pre-activation, H of them
        let pre = |k: usize| gates[k * h..(k + 1) * h].iter().zip(&bias[k * h..(k + 1) * h]).map(|(&g, &b)| g + b);
        let states = cs.iter_mut().zip(hs.iter_mut());
        for ((((c, hv), i), o), (f, g)) in states.zip(pre(0)).zip(pre(1)).zip(pre(2).zip(pre(3))) {
            *c = sigmoid(f) * *c + sigmoid(i) * approx::tanh(g);
            *hv = sigmoid(o) * approx::tanh(*c);
        }
    }
}

impl Lstm {
    /// The node's W, R, B and the scales and zero points of W (inputs 8, 9) and R (10, 11).
    pub fn new(node: &Node, ins: &[&OnnxTensor], precision: Precision) -> R<Lstm> {
        let [w, r, b, ws, wz, rs, rz] = ins else {
            return Err(format!("{}: 7 initializers expected", node.name));
        };
        let (nd, input, h4) = (w.dims[0], w.dims[1], w.dims[2]);
        let h = h4 / 4;
        let (wv, rv, bv) = (codes(w)?, codes(r)?, f32s(b)?);
        let (ws, wz, rs, rz) = (f32s(ws)?, i64s(wz)?, f32s(rs)?, i64s(rz)?);
        if ws.len() != nd || rs.len() != nd {
            return Err(format!("{}: per-channel LSTM scales not supported", node.name));
        }
        let mut dirs = Vec::new();
        for d in 0..nd {
            // W_d [in, 4H] -> rows [4H, in]; R_d [H, 4H] -> rows [4H, H]
            let tr = |v: &[i16], rows_in: usize, z: i64| -> R<Vec<i8>> {
                let mut t = vec![0i16; rows_in * h4];
                for i in 0..rows_in {
                    for j in 0..h4 {
                        t[j * rows_in + i] = v[i * h4 + j];
                    }
                }
                centered(&t, &[z], h4)
            };
            let wd = tr(&wv[d * input * h4..(d + 1) * input * h4], input, wz[d])?;
            let rd = tr(&rv[d * h * h4..(d + 1) * h * h4], h, rz[d])?;
            // fp32: [K, 4H], dequantized
            let f = |rows: &[i8], k: usize, s: f32| {
                let v: Vec<f32> = rows.iter().map(|&x| f32::from(x) * s).collect();
                Tensor::from_slice(&v).view([h4 as i64, k as i64]).transpose(0, 1).contiguous()
            };
            let (wq, rq, w_f32, r_f32) = match precision {
                Precision::Int8 => (Some(Int8Rows::new(&wd, h4, input)), Some(Int8Rows::new(&rd, h4, h)), None, vec![]),
                // (fp16 too: the recurrence runs step by step on the CPU in float32)
                Precision::Fp32 | Precision::Fp16 => {
                    let rt = f(&rd, h, rs[d]);
                    let r_f32 = Vec::<f32>::try_from(rt.view([-1])).map_err(|e| e.to_string())?;
                    (None, None, Some(f(&wd, input, ws[d])), r_f32)
                }
            };
            let bd = &bv[d * 2 * h4..(d + 1) * 2 * h4];
            let bias = (0..h4).map(|j| bd[j] + bd[h4 + j]).collect();
            dirs.push(Direction { w: wq, r: rq, w_scale: ws[d], r_scale: rs[d], w_f32, r_f32, bias });
        }
        Ok(Lstm { dirs, input, hidden: h, device: None })
    }

    /// Runs [`Lstm::forward`] as one libtorch `lstm` pass on `device` (fp32 and fp16: the
    /// dequantized weights in float32): the path the network takes on a GPU, which
    /// [`super::KokoroModel::load_device_paths`] also takes on the CPU to test it.
    pub fn on_device(mut self, device: Device) -> R<Lstm> {
        let h = self.hidden as i64;
        // ONNX's gate blocks i, o, f, c as PyTorch's i, f, g, o
        let torch_order = |t: Tensor| {
            Tensor::cat(&[t.narrow(0, 0, h), t.narrow(0, 2 * h, h), t.narrow(0, 3 * h, h), t.narrow(0, h, h)], 0)
        };
        let mut params = Vec::new();
        for dir in &self.dirs {
            let Some(w) = &dir.w_f32 else {
                return Err("the LSTM's device pass runs fp32 or fp16 weights, not int8".into());
            };
            let r = Tensor::from_slice(&dir.r_f32).view([h, 4 * h]);
            let bias = Tensor::from_slice(&dir.bias);
            params.push(torch_order(w.transpose(0, 1)).contiguous().to_device(device));
            params.push(torch_order(r.transpose(0, 1)).contiguous().to_device(device));
            params.push(torch_order(bias).to_device(device));
            params.push(Tensor::zeros([4 * h], (Kind::Float, device)));
        }
        self.device = Some(params);
        Ok(self)
    }

    /// `x` [seq, in] → [seq, dirs·H] (each step's forward state, then its backward state), on
    /// `x`'s device.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let size = x.size();
        assert!(size.len() == 2 && size[1] as usize == self.input, "Lstm: X {size:?}");
        let dev = x.device();
        let seq = size[0] as usize;
        let h = self.hidden;
        let nd = self.dirs.len();
        if let Some(params) = &self.device {
            // [seq, batch 1, in]; zero initial states [directions, 1, H]
            let x = x.to_kind(Kind::Float).to_device(params[0].device()).unsqueeze(1);
            let zeros = Tensor::zeros([nd as i64, 1, h as i64], (Kind::Float, x.device()));
            let (y, _, _) = x.lstm(&[zeros.shallow_clone(), zeros], params, true, 1, 0.0, false, nd == 2, false);
            return y.squeeze_dim(1).to_device(dev);
        }
        let xv = to_f32s(x).expect("a float tensor");
        let mut y = vec![0f32; seq * nd * h];
        for (d, dir) in self.dirs.iter().enumerate() {
            // Input products for every step: gx [seq, 4H]
            let gx: Vec<f32> = match (&dir.w, &dir.w_f32) {
                (_, Some(w)) => {
                    let xt = Tensor::from_slice(&xv).view([seq as i64, self.input as i64]);
                    to_f32s(&xt.matmul(w)).expect("float")
                }
                (Some(rows), None) => {
                    let (s, zp) = quant_params(&xv);
                    let mut q = vec![0u8; xv.len()];
                    quantize_into(&xv, s, zp, &mut q);
                    let c = rows.products(&q, zp);
                    let m = s * dir.w_scale;
                    c.iter().map(|&v| v as f32 * m).collect()
                }
                (None, None) => unreachable!("a direction has W in one precision"),
            };
            let mut hs = vec![0f32; h];
            let mut cs = vec![0f32; h];
            let mut gates = vec![0f32; 4 * h];
            let mut q = vec![0u8; h];
            for step in 0..seq {
                let t = if d == 0 { step } else { seq - 1 - step };
                match &dir.r {
                    None => {
                        gates.copy_from_slice(&gx[t * 4 * h..(t + 1) * 4 * h]);
                        for (j, &hv) in hs.iter().enumerate() {
                            let row = &dir.r_f32[j * 4 * h..(j + 1) * 4 * h];
                            for (g, &w) in gates.iter_mut().zip(row) {
                                *g += hv * w;
                            }
                        }
                    }
                    Some(rows) => {
                        let (s, zp) = quant_params(&hs);
                        quantize_into(&hs, s, zp, &mut q);
                        let c = rows.products(&q, zp);
                        let m = s * dir.r_scale;
                        for ((g, &a), &v) in gates.iter_mut().zip(&gx[t * 4 * h..(t + 1) * 4 * h]).zip(&c) {
                            *g = a + v as f32 * m;
                        }
                    }
                }
                lstm_cell(&gates, &dir.bias, &mut cs, &mut hs);
                y[(t * nd + d) * h..(t * nd + d + 1) * h].copy_from_slice(&hs);
            }
        }
        Tensor::from_slice(&y).view([seq as i64, (nd * h) as i64]).to_device(dev)
    }

    /// Several sequences at once on the device's path ([`Lstm::on_device`]): `x` [B, T, in],
    /// item b's first `lens[b]` steps its sequence and the rest padding → [B, T, dirs·H], each
    /// item's steps as [`Lstm::forward`] gives them alone (its padded steps unspecified). The
    /// forward direction runs over the batch as it is (padding after the steps it reads); the
    /// backward one over each item reversed within its own length, then put back in order, as
    /// PyTorch's packed sequences run.
    pub fn forward_padded(&self, x: &Tensor, lens: &[i64]) -> Tensor {
        let Some(params) = &self.device else { panic!("Lstm::forward_padded runs on the device's path") };
        let size = x.size();
        let (b, t) = (size[0], size[1]);
        assert!(size.len() == 3 && size[2] as usize == self.input && lens.len() == b as usize, "Lstm: X {size:?}");
        let x = x.to_kind(Kind::Float).to_device(params[0].device());
        let zeros = Tensor::zeros([1, b, self.hidden as i64], (Kind::Float, x.device()));
        let run = |x: &Tensor, p: &[Tensor]| {
            let (y, _, _) =
                x.lstm(&[zeros.shallow_clone(), zeros.shallow_clone()], p, true, 1, 0.0, false, false, true);
            y
        };
        let forward = run(&x, &params[..4]);
        if self.dirs.len() == 1 {
            return forward;
        }
        let order: Vec<i64> =
            lens.iter().flat_map(|&l| (0..t).map(move |i| if i < l { l - 1 - i } else { i })).collect();
        let order = Tensor::from_slice(&order).view([b, t, 1]).to_device(x.device());
        let reversed = |y: &Tensor| y.gather(1, &order.expand([b, t, y.size()[2]], false), false);
        let backward = reversed(&run(&reversed(&x), &params[4..]));
        Tensor::cat(&[forward, backward], 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LSTM's logistic within a few f32 roundings of f64's, over the range an LSTM's
    /// pre-activations take and beyond (where it saturates).
    #[test]
    fn the_logistic_is_within_f32_rounding() {
        let mut worst = 0f64;
        for i in -400_000..=400_000 {
            let x = i as f32 * 2.5e-4; // −100 .. 100
            worst = worst.max((f64::from(sigmoid(x)) - 1.0 / (1.0 + (-f64::from(x)).exp())).abs());
        }
        assert!(worst < 2e-7, "logistic off by {worst}");
    }

    /// The epilogue with statistics (gathered 16 channels at a time down the rows) gives, at
    /// every level, the floats of the epilogue without them and the statistics of a pass of their
    /// own ([`Stats::of`]), bit for bit, stored and added, on a block whose channels are not a
    /// multiple of 16.
    #[test]
    fn epilogue_statistics_are_a_pass_of_their_own() {
        use crate::cpu::{reset_cap, set_cap, Level};
        let (m, o) = (7, 37);
        let y: Vec<i32> = (0..m * o).map(|i| ((i as i32 * 7919) % 20011) - 10000).collect();
        let bq: Vec<i32> = (0..o).map(|j| j as i32 * 131 - 2000).collect();
        let base: Vec<f32> = (0..m * o).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let s = 1.7e-3f32;
        for add in [false, true] {
            let want: Vec<f32> = (0..m * o)
                .map(|i| {
                    let v = y[i].wrapping_add(bq[i % o]) as f32 * s;
                    if add {
                        base[i] + v
                    } else {
                        v
                    }
                })
                .collect();
            let want_stats = Stats::of(&want, o);
            for level in Level::available() {
                set_cap(level);
                // statistics gathered on top of earlier rows' (a previous block)
                let mut st = Stats::of(&base[..2 * o], o);
                let mut d = base.clone();
                epilogue(&y, &bq, s, &mut d, add, Some(&mut st));
                let mut plain = base.clone();
                epilogue(&y, &bq, s, &mut plain, add, None);
                reset_cap();
                let mut whole = base[..2 * o].to_vec();
                whole.extend_from_slice(&want);
                let wst = Stats::of(&whole, o);
                assert!(d == want && plain == want, "{level} add {add}: values");
                assert!(st == wst, "{level} add {add}: statistics");
                // and from no rows: the statistics of the block alone
                let mut st = Stats::zeros(o);
                set_cap(level);
                epilogue(&y, &bq, s, &mut base.clone(), add, Some(&mut st));
                reset_cap();
                assert!(st == want_stats, "{level} add {add}: from zero");
            }
        }
    }

    #[test]
    fn weights_are_centred_on_their_blocks_zero_points() {
        let uint8 = OnnxTensor {
            name: "w".into(),
            dtype: crate::onnx::DataType::Uint8,
            dims: vec![2, 3],
            data: vec![0, 128, 255, 10, 20, 30],
        };
        let w = codes(&uint8).unwrap();
        assert_eq!(w, [0, 128, 255, 10, 20, 30]);
        // one zero point for the whole tensor, or one per block of 3
        assert_eq!(centered(&[130, 128, 255], &[128], 3).unwrap(), [2, 0, 127]);
        assert_eq!(centered(&w[3..], &[20, 20], 3).unwrap(), [-10, 0, 10]);
        assert_eq!(centered(&[1, 2, 3, 4], &[0, 4], 2).unwrap(), [1, 2, -1, 0]);
        let int8 = OnnxTensor { dtype: crate::onnx::DataType::Int8, data: vec![0x80, 0x7f], ..uint8 };
        assert_eq!(codes(&int8).unwrap(), [-128, 127]);
        // what int8 cannot hold, or a block without its zero point, is refused
        assert!(centered(&[255, 0], &[0], 2).is_err());
        assert!(centered(&[0, 0, 0, 0], &[0], 1).is_ok());
        assert!(centered(&[0, 0, 0, 0], &[0, 0], 1).is_err());
    }

    #[test]
    fn quantization_rounds_half_to_even_and_saturates() {
        let x = [-1.0f32, 0.0, 0.5, 1.5, 2.5, 3.0, -0.5, 254.5];
        let (scale, zp) = quant_params(&x);
        assert_eq!(zp, ((1.0f32 / scale).round_ties_even()) as u8);
        let mut q = [0u8; 8];
        quantize_into(&x, scale, zp, &mut q);
        for (&v, &got) in x.iter().zip(&q) {
            let want = ((v / scale).round_ties_even() + f32::from(zp)).clamp(0.0, 255.0) as u8;
            assert_eq!(got, want, "{v}");
        }
        // exact halves go to the even code
        let mut q = [0u8; 4];
        quantize_into(&[0.5, 1.5, 2.5, -2.5], 1.0, 10, &mut q);
        assert_eq!(q, [10, 12, 12, 8]);
        // all zeros: scale 1, zero point 0
        assert_eq!(quant_params(&[0.0; 4]), (1.0, 0));
    }
}
