//! Kokoro's int8 nodes. onnxruntime's dynamic quantization: each activation tensor gets one
//! uint8 scale and zero point from its own min and max (`DynamicQuantizeLinear`), products sum
//! (a − a_zp)·(w − w_zp) exactly in int32 (`MatMulInteger`, `ConvInteger`), the graph turns the
//! sums back to float and scales them. In [`Precision::Int8`] the sums come from our own kernels
//! ([`Packed`]: exact, the same integers on every CPU level); in [`Precision::Fp32`] the
//! quantization of activations is skipped (scale 1, zero point 0) and the products are float
//! products with the dequantized weights (w − w_zp), which the graph's own scale multiply turns
//! into W = (w − w_zp)·w_scale.

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use crate::cpu;
use crate::gemm::Packed;
use crate::onnx::{AttrValue, Node, Tensor as OnnxTensor};
use crate::Precision;

type R<T> = Result<T, String>;

/// What a node needs beyond its inputs, prepared once at load.
pub(super) enum Prep {
    None,
    MatMulInt(MatMulInt),
    ConvInt(ConvInt),
    Lstm(LstmWeights),
}

/// onnxruntime's `GetQuantizationParameter` for uint8: the range [min(x, 0), max(x, 0)] on 0..255,
/// zero point rounded half to even; scale 1 for an all-zero tensor.
pub(super) fn quant_params(x: &[f32]) -> (f32, u8) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in x {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even() as u8;
    (scale, zp)
}

/// onnxruntime's `MlasQuantizeLinear` to uint8: round(x / scale) + zp, half to even, saturated.
pub(super) fn quantize_into(x: &[f32], scale: f32, zp: u8, q: &mut [u8]) {
    let (lo, hi) = (-f32::from(zp), 255.0 - f32::from(zp));
    // Rounding half to even by adding and removing 1.5·2²³ (exact for |r| ≤ 2²²; here |r| ≤ 255):
    // the same value as `round_ties_even`, which the baseline target has no instruction for.
    const MAGIC: f32 = 12_582_912.0;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = ((v / scale).clamp(lo, hi) + MAGIC) - MAGIC;
        *q = (r + f32::from(zp)) as u8;
    }
}

fn cpu_f32(t: &Tensor) -> R<Vec<f32>> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).contiguous().flatten(0, -1).to_device(Device::Cpu))
        .map_err(|e| e.to_string())
}

fn cpu_u8(t: &Tensor) -> R<Vec<u8>> {
    Vec::<u8>::try_from(t.contiguous().flatten(0, -1).to_device(Device::Cpu)).map_err(|e| e.to_string())
}

/// `DynamicQuantizeLinear`: (q, scale, zero point); in fp32 (x, 1, 0).
pub(super) fn dynamic_quantize_linear(precision: Precision, device: Device, x: &Tensor) -> R<Vec<Tensor>> {
    match precision {
        Precision::Fp32 => {
            Ok(vec![x.shallow_clone(), Tensor::from(1f32).to_device(device), Tensor::from(0u8).to_device(device)])
        }
        Precision::Int8 => {
            let v = cpu_f32(x)?;
            let (scale, zp) = quant_params(&v);
            let mut q = vec![0u8; v.len()];
            quantize_into(&v, scale, zp, &mut q);
            Ok(vec![Tensor::from_slice(&q).reshape(x.size()), Tensor::from(scale), Tensor::from(zp)])
        }
    }
}

/// A weight as int8 rows for [`Packed`]: w − w_zp, which must fit in −128..=127.
fn centered(w: &[i64], zp: &[i64], rows: usize) -> R<Vec<i8>> {
    let per = w.len() / rows;
    w.iter()
        .enumerate()
        .map(|(i, &v)| {
            let z = if zp.len() == 1 { zp[0] } else { zp[i / per] };
            i8::try_from(v - z).map_err(|_| format!("weight {v} − zero point {z} does not fit int8"))
        })
        .collect()
}

/// An int8 weight ready for one precision: packed rows [N, K] and their sums (int8), or the
/// float (w − w_zp) in the layout the float op wants (fp32).
pub(super) enum Weight {
    Int8 { packed: Packed, colsum: Vec<i32>, k: usize },
    Float(Tensor),
}

fn pack(rows: &[i8], n: usize, k: usize) -> Weight {
    let colsum = rows.chunks_exact(k).map(|r| r.iter().map(|&v| i32::from(v)).sum()).collect();
    Weight::Int8 { packed: Packed::new(rows, n, k, cpu::level()), colsum, k }
}

/// C[m, j] = Σ_k (a[m, k] − a_zp)·W[j, k] in int32, for u8 activations `a` [M, K].
fn products(packed: &Packed, colsum: &[i32], k: usize, a: &[u8], a_zp: u8) -> Vec<i32> {
    let n = colsum.len();
    let m = a.len() / k;
    let mut c = vec![0i32; m * n];
    packed.matmul_u8(a, &mut c);
    let corr = 128 - i32::from(a_zp);
    if corr != 0 {
        for row in c.chunks_exact_mut(n) {
            for (v, s) in row.iter_mut().zip(colsum) {
                *v += corr * s;
            }
        }
    }
    c
}

pub(super) struct MatMulInt {
    weight: Weight,
    n: usize,
    k: usize,
}

impl MatMulInt {
    /// `MatMulInteger(A [.., K], B [K, N])`: int32 [.., N]; float in fp32.
    pub fn run(&self, a: &Tensor, a_zp: Option<&Tensor>) -> R<Tensor> {
        let mut shape = a.size();
        if shape.last().copied() != Some(self.k as i64) {
            return Err(format!("A's last dimension is not K = {}", self.k));
        }
        match &self.weight {
            Weight::Float(w) => Ok(a.matmul(w)),
            Weight::Int8 { packed, colsum, k } => {
                let zp = a_zp.map(|t| cpu_u8(t).map(|v| v[0])).transpose()?.unwrap_or(0);
                let c = products(packed, colsum, *k, &cpu_u8(a)?, zp);
                *shape.last_mut().expect("rank ≥ 1") = self.n as i64;
                Ok(Tensor::from_slice(&c).reshape(&shape))
            }
        }
    }
}

pub(super) struct ConvInt {
    weight: Weight,
    out_ch: usize,
    in_ch: usize,
    kernel: usize,
    pad: usize,
    stride: usize,
    dil: usize,
}

impl ConvInt {
    /// `ConvInteger(X [1, C, L], W [O, C, k])`: int32 [1, O, L']; float in fp32.
    pub fn run(&self, x: &Tensor, x_zp: Option<&Tensor>) -> R<Tensor> {
        let size = x.size();
        if size.len() != 3 || size[0] != 1 || size[1] != self.in_ch as i64 {
            return Err(format!("X is {size:?}, not [1, {}, L]", self.in_ch));
        }
        let (c, kw) = (self.in_ch, self.kernel);
        match &self.weight {
            Weight::Float(w) => {
                Ok(x.conv1d(w, None::<Tensor>, [self.stride as i64], [self.pad as i64], [self.dil as i64], 1))
            }
            Weight::Int8 { packed, colsum, k } => {
                let zp = x_zp.map(|t| cpu_u8(t).map(|v| v[0])).transpose()?.unwrap_or(0);
                let l = size[2] as usize;
                let span = self.dil * (kw - 1) + 1;
                let lout = (l + 2 * self.pad).saturating_sub(span) / self.stride + 1;
                let xv = cpu_u8(x)?;
                // x time-major with the padding (the zero point: a product of 0) on both sides,
                // then im2col rows t = [x[:, t·s + j·d] for j]: the weight's K is ordered (j, c)
                let lp = l + 2 * self.pad;
                let mut xt = vec![zp; lp * c];
                for ci in 0..c {
                    for (p, &v) in xv[ci * l..(ci + 1) * l].iter().enumerate() {
                        xt[(p + self.pad) * c + ci] = v;
                    }
                }
                let mut cols = vec![0u8; lout * c * kw];
                for (t, row) in cols.chunks_exact_mut(c * kw).enumerate() {
                    for (j, dst) in row.chunks_exact_mut(c).enumerate() {
                        let p = t * self.stride + j * self.dil;
                        dst.copy_from_slice(&xt[p * c..(p + 1) * c]);
                    }
                }
                let y = products(packed, colsum, *k, &cols, zp);
                Ok(Tensor::from_slice(&y)
                    .view([lout as i64, self.out_ch as i64])
                    .transpose(0, 1)
                    .contiguous()
                    .unsqueeze(0))
            }
        }
    }
}

/// One direction of a quantized LSTM: W [4H, in] and R [4H, H] (gates i, o, f, c) with their
/// scales, and the bias Wb + Rb.
struct Direction {
    w: Weight,
    r: Weight,
    w_scale: f32,
    r_scale: f32,
    /// fp32: R·r_scale as [H, 4H] (empty in int8)
    r_f32: Vec<f32>,
    bias: Vec<f32>,
}

pub(super) struct LstmWeights {
    dirs: Vec<Direction>,
    input: usize,
    hidden: usize,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl LstmWeights {
    /// `DynamicQuantizeLSTM` (bidirectional, zero initial state, no sequence lengths): Y
    /// [seq, dirs, 1, H], Y_h, Y_c. As onnxruntime: the inputs of all steps are quantized together
    /// for their product with W, the hidden state step by step for its product with R.
    pub fn run(&self, device: Device, x: &Tensor, h0: Option<&Tensor>, c0: Option<&Tensor>) -> R<Vec<Tensor>> {
        for t in [h0, c0].into_iter().flatten() {
            if t.abs().max().double_value(&[]) != 0.0 {
                return Err("a non-zero initial state is not supported".into());
            }
        }
        let size = x.size();
        if size.len() != 3 || size[1] != 1 || size[2] != self.input as i64 {
            return Err(format!("X is {size:?}, not [seq, 1, {}]", self.input));
        }
        let seq = size[0] as usize;
        let h = self.hidden;
        let xv = cpu_f32(x)?;
        let nd = self.dirs.len();
        let mut y = vec![0f32; seq * nd * h];
        let mut hn = vec![0f32; nd * h];
        let mut cn = vec![0f32; nd * h];
        for (d, dir) in self.dirs.iter().enumerate() {
            // Input products for every step: gx [seq, 4H]
            let gx: Vec<f32> = match &dir.w {
                Weight::Float(w) => {
                    let xt = Tensor::from_slice(&xv).view([seq as i64, self.input as i64]);
                    cpu_f32(&xt.matmul(w))?
                }
                Weight::Int8 { packed, colsum, k } => {
                    let (s, zp) = quant_params(&xv);
                    let mut q = vec![0u8; xv.len()];
                    quantize_into(&xv, s, zp, &mut q);
                    let c = products(packed, colsum, *k, &q, zp);
                    let m = s * dir.w_scale;
                    c.iter().map(|&v| v as f32 * m).collect()
                }
            };
            let mut hs = vec![0f32; h];
            let mut cs = vec![0f32; h];
            let mut gates = vec![0f32; 4 * h];
            let mut q = vec![0u8; h];
            for step in 0..seq {
                let t = if d == 0 { step } else { seq - 1 - step };
                match &dir.r {
                    Weight::Float(_) => {
                        gates.copy_from_slice(&gx[t * 4 * h..(t + 1) * 4 * h]);
                        for (j, &hv) in hs.iter().enumerate() {
                            let row = &dir.r_f32[j * 4 * h..(j + 1) * 4 * h];
                            for (g, &w) in gates.iter_mut().zip(row) {
                                *g += hv * w;
                            }
                        }
                    }
                    Weight::Int8 { packed, colsum, k } => {
                        let (s, zp) = quant_params(&hs);
                        quantize_into(&hs, s, zp, &mut q);
                        let c = products(packed, colsum, *k, &q, zp);
                        let m = s * dir.r_scale;
                        for ((g, &a), &v) in gates.iter_mut().zip(&gx[t * 4 * h..(t + 1) * 4 * h]).zip(&c) {
                            *g = a + v as f32 * m;
                        }
                    }
                }
                for j in 0..h {
                    let i = sigmoid(gates[j] + dir.bias[j]);
                    let o = sigmoid(gates[h + j] + dir.bias[h + j]);
                    let f = sigmoid(gates[2 * h + j] + dir.bias[2 * h + j]);
                    let cc = (gates[3 * h + j] + dir.bias[3 * h + j]).tanh();
                    cs[j] = f * cs[j] + i * cc;
                    hs[j] = o * cs[j].tanh();
                }
                y[(t * nd + d) * h..(t * nd + d + 1) * h].copy_from_slice(&hs);
            }
            hn[d * h..(d + 1) * h].copy_from_slice(&hs);
            cn[d * h..(d + 1) * h].copy_from_slice(&cs);
        }
        let dev = device;
        Ok(vec![
            Tensor::from_slice(&y).view([seq as i64, nd as i64, 1, h as i64]).to_device(dev),
            Tensor::from_slice(&hn).view([nd as i64, 1, h as i64]).to_device(dev),
            Tensor::from_slice(&cn).view([nd as i64, 1, h as i64]).to_device(dev),
        ])
    }
}

fn init<'a>(inits: &HashMap<&str, &'a OnnxTensor>, name: &str) -> R<&'a OnnxTensor> {
    inits.get(name).copied().ok_or_else(|| format!("`{name}` is not an initializer"))
}

fn i64s(t: &OnnxTensor) -> R<Vec<i64>> {
    t.to_i64().map_err(|e| e.to_string())
}

fn f32s(t: &OnnxTensor) -> R<Vec<f32>> {
    t.to_f32().map_err(|e| e.to_string())
}

fn ints_attr(n: &Node, name: &str, default: i64) -> i64 {
    match n.attr(name) {
        Some(AttrValue::Ints(v)) if v.len() == 1 => v[0],
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

/// The weights a node needs in `precision`, read off the initializers.
pub(super) fn prepare(
    node: &Node,
    inits: &HashMap<&str, &OnnxTensor>,
    precision: Precision,
    device: Device,
) -> R<Prep> {
    let zp_of = |i: usize| -> R<Vec<i64>> {
        match node.inputs.get(i).filter(|s| !s.is_empty()) {
            Some(name) => i64s(init(inits, name)?),
            None => Ok(vec![0]),
        }
    };
    Ok(match node.op_type.as_str() {
        "MatMulInteger" => {
            let b = init(inits, &node.inputs[1])?;
            if b.dims.len() != 2 {
                return Err(format!("{}: B is not 2-d", node.name));
            }
            let (k, n) = (b.dims[0], b.dims[1]);
            let zp = zp_of(3)?;
            let w = i64s(b)?;
            // rows [N, K]: transpose, the zero point per column of B (per row after)
            let mut t = vec![0i64; n * k];
            for kk in 0..k {
                for j in 0..n {
                    t[j * k + kk] = w[kk * n + j];
                }
            }
            let rows = centered(&t, &zp, n)?;
            let weight = match precision {
                Precision::Int8 => pack(&rows, n, k),
                Precision::Fp32 => {
                    let f: Vec<f32> = rows.iter().map(|&v| f32::from(v)).collect();
                    Weight::Float(
                        Tensor::from_slice(&f)
                            .view([n as i64, k as i64])
                            .transpose(0, 1)
                            .contiguous()
                            .to_device(device),
                    )
                }
            };
            Prep::MatMulInt(MatMulInt { weight, n, k })
        }
        "ConvInteger" => {
            let w = init(inits, &node.inputs[1])?;
            if w.dims.len() != 3 {
                return Err(format!("{}: only 1-d ConvInteger", node.name));
            }
            if ints_attr(node, "group", 1) != 1 {
                return Err(format!("{}: grouped ConvInteger not supported", node.name));
            }
            let pads = match node.attr("pads") {
                Some(AttrValue::Ints(v)) => v.clone(),
                _ => vec![0, 0],
            };
            if pads.len() != 2 || pads[0] != pads[1] {
                return Err(format!("{}: asymmetric padding", node.name));
            }
            let (o, c, k) = (w.dims[0], w.dims[1], w.dims[2]);
            let rows = centered(&i64s(w)?, &zp_of(3)?, o)?;
            let weight = match precision {
                Precision::Int8 => {
                    // K ordered (tap, channel), as ConvInt::run lays out its im2col rows
                    let mut r = vec![0i8; rows.len()];
                    for oi in 0..o {
                        for ci in 0..c {
                            for j in 0..k {
                                r[oi * c * k + j * c + ci] = rows[oi * c * k + ci * k + j];
                            }
                        }
                    }
                    pack(&r, o, c * k)
                }
                Precision::Fp32 => {
                    let f: Vec<f32> = rows.iter().map(|&v| f32::from(v)).collect();
                    Weight::Float(Tensor::from_slice(&f).view([o as i64, c as i64, k as i64]).to_device(device))
                }
            };
            Prep::ConvInt(ConvInt {
                weight,
                out_ch: o,
                in_ch: c,
                kernel: k,
                pad: pads[0] as usize,
                stride: ints_attr(node, "strides", 1) as usize,
                dil: ints_attr(node, "dilations", 1) as usize,
            })
        }
        "DynamicQuantizeLSTM" => {
            let w = init(inits, &node.inputs[1])?;
            let r = init(inits, &node.inputs[2])?;
            let b = init(inits, &node.inputs[3])?;
            let (nd, input, h4) = (w.dims[0], w.dims[1], w.dims[2]);
            let h = h4 / 4;
            let (wv, rv, bv) = (i64s(w)?, i64s(r)?, f32s(b)?);
            let (ws, wz) = (f32s(init(inits, &node.inputs[8])?)?, i64s(init(inits, &node.inputs[9])?)?);
            let (rs, rz) = (f32s(init(inits, &node.inputs[10])?)?, i64s(init(inits, &node.inputs[11])?)?);
            if ws.len() != nd || rs.len() != nd {
                return Err(format!("{}: per-channel LSTM scales not supported", node.name));
            }
            let mut dirs = Vec::new();
            for d in 0..nd {
                // W_d [in, 4H] -> rows [4H, in]; R_d [H, 4H] -> rows [4H, H]
                let tr = |v: &[i64], rows_in: usize, z: i64| -> R<Vec<i8>> {
                    let mut t = vec![0i64; rows_in * h4];
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
                let (wq, rq, r_f32) = match precision {
                    Precision::Int8 => (pack(&wd, h4, input), pack(&rd, h4, h), Vec::new()),
                    Precision::Fp32 => {
                        let rt = f(&rd, h, rs[d]);
                        let r_f32 = Vec::<f32>::try_from(rt.view([-1])).map_err(|e| e.to_string())?;
                        (Weight::Float(f(&wd, input, ws[d])), Weight::Float(rt), r_f32)
                    }
                };
                let bd = &bv[d * 2 * h4..(d + 1) * 2 * h4];
                let bias = (0..h4).map(|j| bd[j] + bd[h4 + j]).collect();
                dirs.push(Direction { w: wq, r: rq, w_scale: ws[d], r_scale: rs[d], r_f32, bias });
            }
            Prep::Lstm(LstmWeights { dirs, input, hidden: h })
        }
        _ => Prep::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
