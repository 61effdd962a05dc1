//! The ONNX operators Kokoro's graph uses (opset 20 and onnxruntime's `com.microsoft` fusions), each
//! on tch tensors with the semantics of the ONNX specification and of onnxruntime's CPU kernels
//! where these choose (rounding, quantization parameters, resize coordinates).

use tch::{Device, Kind, Tensor};

use super::exec_int8::{self, Prep};
use crate::onnx::{AttrValue, DataType, Node, Tensor as OnnxTensor};
use crate::Precision;

type R<T> = Result<T, String>;

fn attr_i(n: &Node, name: &str, default: i64) -> i64 {
    match n.attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
    }
}

fn attr_f(n: &Node, name: &str, default: f32) -> f32 {
    match n.attr(name) {
        Some(AttrValue::Float(v)) => *v,
        _ => default,
    }
}

fn attr_ints(n: &Node, name: &str) -> Option<Vec<i64>> {
    match n.attr(name) {
        Some(AttrValue::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

fn attr_s(n: &Node, name: &str) -> Option<String> {
    match n.attr(name) {
        Some(AttrValue::String(v)) => Some(String::from_utf8_lossy(v).into_owned()),
        _ => None,
    }
}

/// The integer elements of a (shape-like) tensor.
pub(super) fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).flatten(0, -1).to_device(tch::Device::Cpu)).unwrap_or_default()
}

fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1).to_device(tch::Device::Cpu)).unwrap_or_default()
}

fn req<'a>(ins: &[Option<&'a Tensor>], i: usize) -> R<&'a Tensor> {
    ins.get(i).copied().flatten().ok_or_else(|| format!("input {i} missing"))
}

fn opt<'a>(ins: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    ins.get(i).copied().flatten()
}

fn axis(a: i64, rank: usize) -> i64 {
    if a < 0 {
        a + rank as i64
    } else {
        a
    }
}

fn is_int(k: Kind) -> bool {
    matches!(k, Kind::Int64 | Kind::Int | Kind::Int8 | Kind::Uint8 | Kind::Int16)
}

pub(super) fn kind_of(code: i64) -> R<Kind> {
    let dtype = DataType::from_code(code as i32);
    tch_kind(dtype).ok_or_else(|| format!("cast to {dtype:?} not supported"))
}

/// The tch kind of an ONNX element type, where tch has one.
fn tch_kind(dtype: DataType) -> Option<Kind> {
    Some(match dtype {
        DataType::Float => Kind::Float,
        DataType::Int64 => Kind::Int64,
        DataType::Int32 => Kind::Int,
        DataType::Uint8 => Kind::Uint8,
        DataType::Int8 => Kind::Int8,
        DataType::Bool => Kind::Bool,
        DataType::Double => Kind::Double,
        DataType::Float16 => Kind::Half,
        _ => return None,
    })
}

/// A tch tensor of an ONNX initializer.
pub(super) fn to_tch(t: &OnnxTensor) -> Result<Tensor, String> {
    let kind = tch_kind(t.dtype).ok_or_else(|| format!("initializer {}: type {:?} not supported", t.name, t.dtype))?;
    let size = t.dtype.size().unwrap_or(1);
    if t.data.len() != t.numel() * size {
        return Err(format!("initializer {}: {} bytes for {} elements", t.name, t.data.len(), t.numel()));
    }
    let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
    if cfg!(target_endian = "little") {
        Ok(Tensor::from_data_size(&t.data, &dims, kind))
    } else {
        Err("big-endian hosts are not supported".into())
    }
}

/// Runs one node.
pub(super) fn run(
    n: &Node,
    prep: &Prep,
    device: Device,
    precision: Precision,
    ins: &[Option<&Tensor>],
) -> R<Vec<Tensor>> {
    let x = || req(ins, 0);
    let one = |t: Tensor| Ok(vec![t]);
    match n.op_type.as_str() {
        "Add" => one(x()? + req(ins, 1)?),
        "Sub" => one(x()? - req(ins, 1)?),
        "Mul" => one(x()? * req(ins, 1)?),
        "Div" => {
            let (a, b) = (x()?, req(ins, 1)?);
            if is_int(a.kind()) {
                one(a.divide_tensor_mode(b, "trunc"))
            } else {
                one(a / b)
            }
        }
        "Pow" => {
            let (a, b) = (x()?, req(ins, 1)?);
            if b.numel() == 1 {
                let e = floats(b)[0];
                if e == 2.0 {
                    return one(a * a);
                }
                if e == 0.5 {
                    return one(a.sqrt());
                }
            }
            one(a.pow(b))
        }
        "Sqrt" => one(x()?.sqrt()),
        "Sin" => one(x()?.sin()),
        "Cos" => one(x()?.cos()),
        "Exp" => one(x()?.exp()),
        "Atan" => one(x()?.atan()),
        "Tanh" => one(x()?.tanh()),
        "Sigmoid" => one(x()?.sigmoid()),
        "Floor" => one(x()?.floor()),
        "Round" => one(x()?.round()),
        "LeakyRelu" => {
            let a = x()?;
            let alpha = f64::from(attr_f(n, "alpha", 0.01));
            one(a.where_self(&a.ge(0.0), &(a * alpha)))
        }
        "Clip" => {
            let mut a = x()?.shallow_clone();
            if let Some(lo) = opt(ins, 1) {
                a = a.clamp_min(f64::from(floats(lo)[0]));
            }
            if let Some(hi) = opt(ins, 2) {
                a = a.clamp_max(f64::from(floats(hi)[0]));
            }
            one(a)
        }
        "Equal" => one(x()?.eq_tensor(req(ins, 1)?)),
        "Greater" => one(x()?.gt_tensor(req(ins, 1)?)),
        "Less" => one(x()?.lt_tensor(req(ins, 1)?)),
        "GreaterOrEqual" => one(x()?.ge_tensor(req(ins, 1)?)),
        "And" => one(x()?.logical_and(req(ins, 1)?)),
        "Where" => one(req(ins, 1)?.where_self(x()?, req(ins, 2)?)),
        "Cast" => one(x()?.to_kind(kind_of(attr_i(n, "to", 1))?)),
        "Shape" => {
            let s = x()?.size();
            let r = s.len() as i64;
            let clampi = |v: i64| axis(v, s.len()).clamp(0, r) as usize;
            let start = clampi(attr_i(n, "start", 0));
            let end = clampi(attr_i(n, "end", r));
            one(Tensor::from_slice(&s[start..end.max(start)]).to_device(device))
        }
        "Reshape" => {
            let a = x()?;
            let mut shape = ints(req(ins, 1)?);
            let allowzero = attr_i(n, "allowzero", 0) != 0;
            let src = a.size();
            if !allowzero {
                for (i, d) in shape.iter_mut().enumerate() {
                    if *d == 0 {
                        *d = src[i];
                    }
                }
            }
            one(a.reshape(&shape))
        }
        "Unsqueeze" => {
            let a = x()?;
            let axes = match opt(ins, 1) {
                Some(t) => ints(t),
                None => attr_ints(n, "axes").unwrap_or_default(),
            };
            let rank = a.dim() + axes.len();
            let mut ax: Vec<i64> = axes.iter().map(|&v| axis(v, rank)).collect();
            ax.sort_unstable();
            let mut t = a.shallow_clone();
            for v in ax {
                t = t.unsqueeze(v);
            }
            one(t)
        }
        "Squeeze" => {
            let a = x()?;
            let axes = match opt(ins, 1) {
                Some(t) => Some(ints(t)),
                None => attr_ints(n, "axes"),
            };
            match axes {
                None => one(a.squeeze()),
                Some(axes) => {
                    let mut ax: Vec<i64> = axes.iter().map(|&v| axis(v, a.dim())).collect();
                    ax.sort_unstable_by(|p, q| q.cmp(p));
                    let mut t = a.shallow_clone();
                    for v in ax {
                        t = t.squeeze_dim(v);
                    }
                    one(t)
                }
            }
        }
        "Transpose" => {
            let a = x()?;
            let perm = attr_ints(n, "perm").unwrap_or_else(|| (0..a.dim() as i64).rev().collect());
            one(a.permute(&perm))
        }
        "Gather" => {
            let (a, idx) = (x()?, req(ins, 1)?);
            let ax = axis(attr_i(n, "axis", 0), a.dim());
            let dim = a.size()[ax as usize];
            let idx = idx.to_kind(Kind::Int64);
            let idx = idx.where_self(&idx.ge(0), &(&idx + dim));
            if idx.dim() == 0 {
                return one(a.index_select(ax, &idx.reshape([1])).squeeze_dim(ax));
            }
            let mut shape = a.size()[..ax as usize].to_vec();
            shape.extend(idx.size());
            shape.extend(&a.size()[ax as usize + 1..]);
            one(a.index_select(ax, &idx.flatten(0, -1)).reshape(&shape))
        }
        "Concat" => {
            let ts: Vec<&Tensor> = ins.iter().flatten().copied().collect();
            let ax = axis(attr_i(n, "axis", 0), ts[0].dim());
            one(Tensor::cat(&ts, ax))
        }
        "Slice" => {
            let a = x()?;
            let starts = ints(req(ins, 1)?);
            let ends = ints(req(ins, 2)?);
            let axes = opt(ins, 3).map(ints).unwrap_or_else(|| (0..starts.len() as i64).collect());
            let steps = opt(ins, 4).map(ints).unwrap_or_else(|| vec![1; starts.len()]);
            let mut t = a.shallow_clone();
            for i in 0..starts.len() {
                let ax = axis(axes[i], a.dim());
                let dim = t.size()[ax as usize];
                let fix = |v: i64| if v < 0 { v + dim } else { v };
                let step = steps[i];
                if step > 0 {
                    let s = fix(starts[i]).clamp(0, dim);
                    let e = fix(ends[i].clamp(-dim - 1, dim)).clamp(0, dim);
                    t = t.slice(ax, s, e.max(s), step);
                } else {
                    let s = fix(starts[i].clamp(-dim - 1, dim)).clamp(0, dim - 1);
                    let e = fix(ends[i].clamp(-dim - 1, dim)).clamp(-1, dim - 1);
                    let idx: Vec<i64> = (e + 1..=s).rev().step_by((-step) as usize).collect();
                    t = t.index_select(ax, &Tensor::from_slice(&idx).to_device(device));
                }
            }
            one(t)
        }
        "Split" => {
            let a = x()?;
            let ax = axis(attr_i(n, "axis", 0), a.dim());
            let dim = a.size()[ax as usize];
            let sizes = match opt(ins, 1) {
                Some(s) => ints(s),
                None => {
                    let k = attr_i(n, "num_outputs", n.outputs.len() as i64);
                    let each = (dim + k - 1) / k;
                    (0..k).map(|i| each.min(dim - i * each)).collect()
                }
            };
            Ok(a.split_with_sizes(&sizes, ax))
        }
        "Expand" => {
            let a = x()?;
            let shape = ints(req(ins, 1)?);
            let src = a.size();
            let rank = src.len().max(shape.len());
            let mut out = vec![1i64; rank];
            for (i, o) in out.iter_mut().enumerate() {
                let s = (i + src.len()).checked_sub(rank).map(|j| src[j]).unwrap_or(1);
                let d = (i + shape.len()).checked_sub(rank).map(|j| shape[j]).unwrap_or(1);
                *o = if s == 1 { d } else { s };
            }
            one(a.expand(&out, false).contiguous())
        }
        "ConstantOfShape" => {
            let shape = ints(x()?);
            let (kind, v) = match n.attr("value") {
                Some(AttrValue::Tensor(t)) => {
                    let tt = to_tch(t)?;
                    (tt.kind(), tt)
                }
                _ => (Kind::Float, Tensor::from_slice(&[0f32])),
            };
            one(v.reshape([1]).to_kind(kind).to_device(device).expand(&shape, false).contiguous())
        }
        "Range" => {
            let (s, e, d) = (x()?, req(ins, 1)?, req(ins, 2)?);
            if is_int(s.kind()) {
                let (s, e, d) = (ints(s)[0], ints(e)[0], ints(d)[0]);
                one(Tensor::arange_start_step(s, e, d, (Kind::Int64, device)))
            } else {
                let (s, e, d) = (floats(s)[0], floats(e)[0], floats(d)[0]);
                let count = ((e - s) / d).ceil().max(0.0) as i64;
                one(Tensor::arange(count, (Kind::Float, device)) * f64::from(d) + f64::from(s))
            }
        }
        "CumSum" => {
            let a = x()?;
            let ax = axis(ints(req(ins, 1)?)[0], a.dim());
            let (excl, rev) = (attr_i(n, "exclusive", 0) != 0, attr_i(n, "reverse", 0) != 0);
            let src = if rev { a.flip([ax]) } else { a.shallow_clone() };
            // Float sums in float, one after the other, as onnxruntime (libtorch's CPU cumsum
            // accumulates floats in double: the phase of the harmonic source would drift)
            let mut c = if src.kind() == Kind::Float { cumsum_f32(&src, ax)? } else { src.cumsum(ax, src.kind()) };
            if excl {
                c -= &src;
            }
            one(if rev { c.flip([ax]) } else { c })
        }
        "ReduceMean" | "ReduceSum" => {
            let a = x()?;
            let keep = attr_i(n, "keepdims", 1) != 0;
            let axes: Vec<i64> = match opt(ins, 1) {
                Some(t) => ints(t),
                None => attr_ints(n, "axes").unwrap_or_default(),
            };
            let axes: Vec<i64> = if axes.is_empty() {
                (0..a.dim() as i64).collect()
            } else {
                axes.iter().map(|&v| axis(v, a.dim())).collect()
            };
            if n.op_type == "ReduceMean" {
                one(a.mean_dim(axes.as_slice(), keep, a.kind()))
            } else {
                one(a.sum_dim_intlist(axes.as_slice(), keep, a.kind()))
            }
        }
        "Softmax" => {
            let a = x()?;
            one(a.softmax(axis(attr_i(n, "axis", -1), a.dim()), a.kind()))
        }
        "MatMul" => one(x()?.matmul(req(ins, 1)?)),
        "FusedMatMul" => {
            let (mut a, mut b) = (x()?.shallow_clone(), req(ins, 1)?.shallow_clone());
            if attr_i(n, "transA", 0) != 0 {
                a = a.transpose(-1, -2);
            }
            if attr_i(n, "transB", 0) != 0 {
                b = b.transpose(-1, -2);
            }
            let alpha = attr_f(n, "alpha", 1.0);
            let y = a.matmul(&b);
            one(if alpha == 1.0 { y } else { y * f64::from(alpha) })
        }
        "LayerNormalization" => {
            let a = x()?;
            let ax = axis(attr_i(n, "axis", -1), a.dim()) as usize;
            let eps = f64::from(attr_f(n, "epsilon", 1e-5));
            let shape = a.size()[ax..].to_vec();
            one(a.layer_norm(&shape, Some(req(ins, 1)?), opt(ins, 2), eps, false))
        }
        "SkipLayerNormalization" => {
            let mut s = x()? + req(ins, 1)?;
            if let Some(b) = opt(ins, 4) {
                s += b;
            }
            let eps = f64::from(attr_f(n, "epsilon", 1e-12));
            let shape = [*s.size().last().unwrap_or(&1)];
            let y = s.layer_norm(shape, Some(req(ins, 2)?), opt(ins, 3), eps, false);
            let mut out = vec![y];
            if n.outputs.len() > 3 && !n.outputs[3].is_empty() {
                out.push(Tensor::new());
                out.push(Tensor::new());
                out.push(s);
            }
            Ok(out)
        }
        "FastGelu" => {
            // not in place: the input may be read by another node too
            let a = match opt(ins, 1) {
                Some(b) => x()? + b,
                None => x()?.shallow_clone(),
            };
            one(a.gelu("tanh"))
        }
        "DequantizeLinear" => {
            let (q, scale) = (x()?, req(ins, 1)?);
            // not in place: `to_kind` of an int32 input would be the input itself
            let v = match opt(ins, 2) {
                Some(z) => q.to_kind(Kind::Int) - z.to_kind(Kind::Int),
                None => q.to_kind(Kind::Int),
            };
            one(v.to_kind(Kind::Float) * scale)
        }
        "Resize" => resize(device, n, x()?, opt(ins, 2), opt(ins, 3)),
        "Conv" => {
            let (a, w) = (x()?, req(ins, 1)?);
            let pads = attr_ints(n, "pads").unwrap_or_else(|| vec![0, 0]);
            if pads.len() != 2 || pads[0] != pads[1] || a.dim() != 3 {
                return Err("only 1-d convolutions with symmetric padding".into());
            }
            let stride = attr_ints(n, "strides").unwrap_or_else(|| vec![1]);
            let dil = attr_ints(n, "dilations").unwrap_or_else(|| vec![1]);
            one(a.conv1d(w, opt(ins, 2), &stride, [pads[0]], &dil, attr_i(n, "group", 1)))
        }
        "ConvTranspose" => {
            let (a, w) = (x()?, req(ins, 1)?);
            let pads = attr_ints(n, "pads").unwrap_or_else(|| vec![0, 0]);
            if pads.len() != 2 || pads[0] != pads[1] || a.dim() != 3 {
                return Err("only 1-d transposed convolutions with symmetric padding".into());
            }
            let stride = attr_ints(n, "strides").unwrap_or_else(|| vec![1]);
            let dil = attr_ints(n, "dilations").unwrap_or_else(|| vec![1]);
            let outpad = attr_ints(n, "output_padding").unwrap_or_else(|| vec![0]);
            one(a.conv_transpose1d(w, opt(ins, 2), &stride, [pads[0]], &outpad, attr_i(n, "group", 1), &dil))
        }
        "Pad" => {
            let a = x()?;
            let pads = ints(req(ins, 1)?);
            let mode = attr_s(n, "mode").unwrap_or_else(|| "constant".into());
            let r = a.dim();
            if opt(ins, 3).is_some() || pads.len() != 2 * r {
                return Err("Pad with axes not supported".into());
            }
            // torch's order: last dim first, (begin, end) pairs; only trailing dims may be padded
            let mut tp = Vec::new();
            for d in (0..r).rev() {
                tp.push(pads[d]);
                tp.push(pads[d + r]);
            }
            while tp.len() > 2 && tp[tp.len() - 1] == 0 && tp[tp.len() - 2] == 0 {
                tp.truncate(tp.len() - 2);
            }
            match mode.as_str() {
                "constant" => {
                    let v = opt(ins, 2).map(|t| floats(t)[0]).unwrap_or(0.0);
                    if v != 0.0 {
                        return Err("Pad with a non-zero constant not supported".into());
                    }
                    one(a.constant_pad_nd(&tp))
                }
                "reflect" if tp.len() == 2 => one(a.reflection_pad1d(&tp)),
                other => Err(format!("Pad mode {other} on these axes not supported")),
            }
        }
        "STFT" => {
            let sig = x()?;
            let step = ints(req(ins, 1)?)[0];
            let win = req(ins, 2)?;
            let len = opt(ins, 3).map(|t| ints(t)[0]).unwrap_or(win.size()[0]);
            let sig = match sig.size().as_slice() {
                [_, _, 1] => sig.squeeze_dim(2),
                [_, _] => sig.shallow_clone(),
                s => return Err(format!("signal {s:?}: only a real signal [B, L, 1] or [B, L]")),
            };
            if attr_i(n, "onesided", 1) == 0 {
                return Err("only onesided".into());
            }
            one(stft(&sig, step, win, len)?)
        }
        "NonZero" => one(x()?.nonzero().transpose(0, 1).contiguous()),
        "ScatterND" => {
            let (data, idx, upd) = (x()?, req(ins, 1)?, req(ins, 2)?);
            let shape = data.size();
            let k = *idx.size().last().ok_or("indices of rank 0")? as usize;
            let inner: i64 = shape[k..].iter().product();
            let outer: i64 = shape[..k].iter().product();
            let mut stride = vec![1i64; k];
            for j in (0..k.saturating_sub(1)).rev() {
                stride[j] = stride[j + 1] * shape[j + 1];
            }
            let st = Tensor::from_slice(&stride).to_device(device);
            let lin = (idx.to_kind(Kind::Int64).reshape([-1, k as i64]) * st).sum_dim_intlist(1, false, Kind::Int64);
            let flat = data.reshape([outer, inner]).copy();
            let upd = upd.reshape([-1, inner]);
            one(flat.index_put(&[Some(lin)], &upd, false).reshape(&shape))
        }
        "DynamicQuantizeLinear" => exec_int8::dynamic_quantize_linear(precision, device, x()?),
        "MatMulInteger" => match prep {
            Prep::MatMulInt(m) => one(m.run(x()?, opt(ins, 2))?),
            _ => Err("weights not prepared".into()),
        },
        "ConvInteger" => match prep {
            Prep::ConvInt(c) => one(c.run(x()?, opt(ins, 2))?),
            _ => Err("weights not prepared".into()),
        },
        "DynamicQuantizeLSTM" => match prep {
            Prep::Lstm(l) => l.run(device, x()?, opt(ins, 5), opt(ins, 6)),
            _ => Err("weights not prepared".into()),
        },
        other => Err(format!("operator {other} not supported")),
    }
}

/// A real one-sided STFT [B, frames, len/2 + 1, 2] of `sig` [B, L] as the ONNX definition sums it:
/// the plain DFT, frame sample by frame sample in f32, twiddles cos/sin(k·n · (−2π/len)). The
/// network's phase is an arctangent of imaginary over real parts, so the DC and Nyquist bins,
/// whose imaginary parts are rounding noise, get a phase of 0 or ±π that no two FFTs agree on
/// (docs/kokoro-architecture.md §5).
fn stft(sig: &Tensor, step: i64, win: &Tensor, len: i64) -> R<Tensor> {
    let dev = sig.device();
    let size = sig.size();
    let (b, l) = (size[0] as usize, size[1] as usize);
    let (n, step) = (len as usize, step as usize);
    if n == 0 || step == 0 || l < n {
        return Err(format!("STFT of {l} samples in frames of {n} every {step}"));
    }
    let frames = (l - n) / step + 1;
    let bins = n / 2 + 1;
    let x = Vec::<f32>::try_from(sig.to_kind(Kind::Float).contiguous().flatten(0, -1).to_device(tch::Device::Cpu))
        .map_err(|e| e.to_string())?;
    let w = floats(win);
    if w.len() != n {
        return Err(format!("a window of {} for frames of {n}", w.len()));
    }
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
    Ok(Tensor::from_slice(&out).view([b as i64, frames as i64, bins as i64, 2]).to_device(dev))
}

/// Running sums along `ax` in f32, sequentially.
fn cumsum_f32(x: &Tensor, ax: i64) -> R<Tensor> {
    let size = x.size();
    let dev = x.device();
    let outer: i64 = size[..ax as usize].iter().product();
    let len = size[ax as usize];
    let inner: i64 = size[ax as usize + 1..].iter().product();
    let mut v =
        Vec::<f32>::try_from(x.contiguous().flatten(0, -1).to_device(tch::Device::Cpu)).map_err(|e| e.to_string())?;
    let (len, inner) = (len as usize, inner as usize);
    for o in 0..outer as usize {
        let base = o * len * inner;
        for t in 1..len {
            for i in 0..inner {
                v[base + t * inner + i] += v[base + (t - 1) * inner + i];
            }
        }
    }
    Ok(Tensor::from_slice(&v).reshape(&size).to_device(dev))
}

/// `Resize` along the last axis only (the others' scales must be 1), `nearest` (asymmetric,
/// floor) or `linear` (half_pixel), with onnxruntime's float32 coordinates.
fn resize(device: Device, n: &Node, x: &Tensor, scales: Option<&Tensor>, sizes: Option<&Tensor>) -> R<Vec<Tensor>> {
    let size = x.size();
    let r = size.len();
    let len = size[r - 1];
    let (scale, out) = match (scales.filter(|s| s.numel() > 0), sizes.filter(|s| s.numel() > 0)) {
        (Some(s), _) => {
            let s = floats(s);
            if s[..r - 1].iter().any(|&v| v != 1.0) {
                return Err("Resize of other axes than the last not supported".into());
            }
            let sc = s[r - 1];
            (sc, (len as f32 * sc) as i64)
        }
        (None, Some(z)) => {
            let z = ints(z);
            (z[r - 1] as f32 / len as f32, z[r - 1])
        }
        _ => return Err("Resize needs scales or sizes".into()),
    };
    let mode = attr_s(n, "mode").unwrap_or_else(|| "nearest".into());
    let ctm = attr_s(n, "coordinate_transformation_mode").unwrap_or_else(|| "half_pixel".into());
    let coord = |i: i64| -> f32 {
        match ctm.as_str() {
            "asymmetric" => i as f32 / scale,
            _ => (i as f32 + 0.5) / scale - 0.5,
        }
    };
    match mode.as_str() {
        "nearest" => {
            if attr_s(n, "nearest_mode").as_deref().unwrap_or("round_prefer_floor") != "floor" {
                return Err("nearest Resize only with nearest_mode floor".into());
            }
            let idx: Vec<i64> = (0..out).map(|i| (coord(i).floor() as i64).clamp(0, len - 1)).collect();
            Ok(vec![x.index_select(-1, &Tensor::from_slice(&idx).to_device(device))])
        }
        "linear" => {
            let mut i1 = Vec::with_capacity(out as usize);
            let mut i2 = Vec::with_capacity(out as usize);
            let mut w1 = Vec::with_capacity(out as usize);
            let mut w2 = Vec::with_capacity(out as usize);
            for i in 0..out {
                let c = coord(i).clamp(0.0, (len - 1) as f32);
                let a = (c as i64).min(len - 1);
                let b = (a + 1).min(len - 1);
                let (d1, d2) = if a == b { (0.5, 0.5) } else { ((c - a as f32).abs(), (c - b as f32).abs()) };
                i1.push(a);
                i2.push(b);
                w1.push(d2);
                w2.push(d1);
            }
            let dev = device;
            let a = x.index_select(-1, &Tensor::from_slice(&i1).to_device(dev));
            let b = x.index_select(-1, &Tensor::from_slice(&i2).to_device(dev));
            let wa = Tensor::from_slice(&w1).to_device(dev).to_kind(x.kind());
            let wb = Tensor::from_slice(&w2).to_device(dev).to_kind(x.kind());
            Ok(vec![a * wa + b * wb])
        }
        other => Err(format!("Resize mode {other} not supported")),
    }
}
