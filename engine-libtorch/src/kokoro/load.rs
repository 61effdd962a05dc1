//! Reading Kokoro's weights out of the ONNX export. The file is only the container: every layer of
//! [`super::net`] names the export's node that used its weights (e.g.
//! `/encoder/F0.0/conv1/Conv_quant`), and its initializers are read by the names that node gives
//! them (the uint8/int8 weight `…_quantized` with its `…_scale` and zero point, the float bias found
//! behind the node's bias addition). docs/kokoro-architecture.md lists them.

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use super::int8::{conv_product, product_weight, Conv, Linear, Lstm};
use crate::cpu::simd_fn;
use crate::onnx::{DataType, Model, Node, Tensor as OnnxTensor};
use crate::precision::Precision;
use crate::tensor_slices::{f32s, f32s_mut};

type R<T> = Result<T, String>;

pub(super) struct Weights<'a> {
    nodes: HashMap<&'a str, &'a Node>,
    producer: HashMap<&'a str, &'a Node>,
    consumers: HashMap<&'a str, Vec<&'a Node>>,
    inits: HashMap<&'a str, &'a OnnxTensor>,
    pub precision: Precision,
    pub device: Device,
    /// The steps the CPU runs one after the other (the LSTMs' recurrences, the source's running
    /// sum and STFT) run as tensor passes on the device instead: on a GPU, or to test that path
    /// on the CPU ([`super::KokoroModel::load_device_paths`]). Not in int8 (the CPU's).
    pub device_paths: bool,
}

/// A float convolution or transposed convolution of the export (`Conv`, `ConvTranspose`): weight,
/// bias and attributes.
pub(super) struct FloatConv {
    w: Tensor,
    b: Option<Tensor>,
    stride: i64,
    pad: i64,
    out_pad: i64,
    dil: i64,
    groups: i64,
    transposed: bool,
}

impl FloatConv {
    pub fn forward(&self, x: &Tensor) -> Tensor {
        conv_product(x, &self.w, self.b.as_ref(), |x, b| {
            if self.transposed {
                x.conv_transpose1d(&self.w, b, [self.stride], [self.pad], [self.out_pad], self.groups, [self.dil])
            } else {
                x.conv1d(&self.w, b, [self.stride], [self.pad], [self.dil], self.groups)
            }
        })
    }

    /// The bias as floats, zeros for `c_out` channels where the node has none.
    fn bias_floats(&self, c_out: i64) -> R<Vec<f32>> {
        match &self.b {
            Some(b) => Vec::<f32>::try_from(b).map_err(|e| e.to_string()),
            None => Ok(vec![0.0; c_out as usize]),
        }
    }

    /// The same layer time-major for the int8 path's generator ([`TmConv`]); an error for what
    /// that does not cover (groups, dilation, output padding, a strided `Conv`).
    pub fn time_major(self) -> R<TmConv> {
        let [c0, c1, k] = self.w.size()[..] else { return Err("a 1-d convolution's weight is [C, C, k]".into()) };
        if self.groups != 1
            || self.dil != 1
            || self.out_pad != 0
            || (!self.transposed && self.stride != 1)
            || self.pad >= k
        {
            return Err("time-major: only groups 1, dilation 1, no output padding, padding under the kernel, \
                        stride 1 unless transposed"
                .into());
        }
        // ConvTranspose [C_in, C_out, k], Conv [C_out, C_in, k] → [C_in, k·C_out]: column j·C_out + o
        let (c_out, w) =
            if self.transposed { (c1, self.w.permute([0, 2, 1])) } else { (c0, self.w.permute([1, 2, 0])) };
        let c_in = if self.transposed { c0 } else { c1 };
        let b = self.bias_floats(c_out)?;
        Ok(TmConv {
            w: w.reshape([c_in, k * c_out]).contiguous(),
            b,
            k: k as usize,
            stride: self.stride as usize,
            pad: self.pad as usize,
        })
    }

    /// The same layer for the int8 path's AdaIN blocks, time-major ([`DepthwiseUp`]); an error
    /// for what is not a depthwise (groups = channels, weight [C, 1, k]) transposed convolution
    /// without dilation.
    pub fn depthwise_up(&self) -> R<DepthwiseUp> {
        let [c, one, k] = self.w.size()[..] else { return Err("a 1-d convolution's weight is [C, 1, k]".into()) };
        if !self.transposed || self.groups != c || one != 1 || self.dil != 1 {
            return Err("depthwise: a transposed convolution of one weight row per channel, no dilation".into());
        }
        // [C, 1, k] → [k, C]: tap j's weights in a row, as the time-major rows are
        let w = Vec::<f32>::try_from(self.w.view([c, k]).tr().contiguous().view(-1)).map_err(|e| e.to_string())?;
        let b = self.bias_floats(c)?;
        Ok(DepthwiseUp {
            w,
            b,
            k: k as usize,
            stride: self.stride as usize,
            pad: self.pad as usize,
            out_pad: self.out_pad as usize,
        })
    }
}

/// A depthwise transposed convolution time-major (the ×2 up-sampling `pool` of the AdaIN blocks
/// F0.1, N.1 and decode.3, for the int8 path): output row j of channel c is
/// Σ x[i, c]·w[t, c] over the taps t (in order) with i·stride − pad + t = j, plus the bias; rows
/// of channels, so each step is one vectorized loop (the same bits at every CPU level).
pub(super) struct DepthwiseUp {
    /// [k, C]
    w: Vec<f32>,
    b: Vec<f32>,
    k: usize,
    stride: usize,
    pad: usize,
    out_pad: usize,
}

impl DepthwiseUp {
    /// x [T, C] time-major → [(T − 1)·stride − 2·pad + k + out_pad, C].
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let c = self.b.len();
        assert!(x.len().is_multiple_of(c), "depthwise: [T, C]");
        let t = x.len() / c;
        let lout = ((t.max(1) - 1) * self.stride + self.k + self.out_pad).saturating_sub(2 * self.pad);
        let mut out = vec![0f32; lout * c];
        depthwise_rows(x, &self.w, &self.b, self.stride, self.pad, &mut out);
        out
    }
}

simd_fn! {
    /// [`DepthwiseUp::forward`]'s rows: each output row's taps added in order, then the bias.
    fn depthwise_rows(x: &[f32], w: &[f32], b: &[f32], stride: usize, pad: usize, out: &mut [f32]) {
        let c = b.len();
        let t = x.len() / c;
        for (j, o) in out.chunks_exact_mut(c).enumerate() {
            for (tap, wr) in w.chunks_exact(c).enumerate() {
                // input step i with i·stride − pad + tap = j
                let Some(at) = (j + pad).checked_sub(tap) else { continue };
                if !at.is_multiple_of(stride) || at / stride >= t {
                    continue;
                }
                let i = at / stride;
                for ((o, &v), &w) in o.iter_mut().zip(&x[i * c..(i + 1) * c]).zip(wr) {
                    *o += v * w;
                }
            }
            for (o, &b) in o.iter_mut().zip(b) {
                *o += b;
            }
        }
    }
}

/// A float convolution of the int8 path's generator, time-major: one sgemm Z = X·W of the input
/// [T, C_in] with the weight arranged [C_in, k·C_out] at load, then each output step is the bias
/// plus its taps' columns of Z (overlap-add), added in plain f32 (the same bits at every CPU
/// level). Replaces oneDNN's (de)convolutions there, which reordered the weights (ups.0: ~8 ms),
/// the activations and the layout on every call.
pub(super) struct TmConv {
    w: Tensor,
    b: Vec<f32>,
    k: usize,
    stride: usize,
    pad: usize,
}

impl TmConv {
    /// The output channels.
    pub fn c_out(&self) -> usize {
        self.b.len()
    }

    /// Z = x·W: x [T, C_in] (any strides) → [T, k·C_out] (contiguous) and T.
    fn product(&self, x: &Tensor) -> (Tensor, usize) {
        let z = x.to_kind(Kind::Float).matmul(&self.w).contiguous();
        let t = z.size()[0] as usize;
        (z, t)
    }

    /// The transposed convolution of `x` [T, C_in] time-major ([T_out + `rpad`, C_out]),
    /// reflection-padded by `rpad` steps at the start (as `reflection_pad1d([rpad, 0])`), plus
    /// `src` (same shape): the padding and the sum in the overlap-add's pass.
    pub fn up_plus(&self, x: &Tensor, rpad: usize, src: &[f32]) -> Vec<f32> {
        let (zt, t_in) = self.product(x);
        let z = f32s(&zt);
        let (c, k, s, p) = (self.b.len(), self.k, self.stride, self.pad);
        let t_out = ((t_in - 1) * s + k).checked_sub(2 * p).expect("padding within the output");
        assert!(rpad < t_out, "reflection padding within the signal");
        assert_eq!(src.len(), (t_out + rpad) * c, "the source fits the up-sampled steps");
        let mut out = vec![0f32; src.len()];
        let mut acc = vec![0f32; c];
        for o in 0..t_out {
            // output step o = t·s + j − p: the taps j ≡ o + p (mod s), from the latest t down
            let q = o + p;
            acc.copy_from_slice(&self.b);
            for j in (q % s..k.min(q + 1)).step_by(s) {
                let t = (q - j) / s;
                if t < t_in {
                    for (a, &v) in acc.iter_mut().zip(&z[(t * k + j) * c..][..c]) {
                        *a += v;
                    }
                }
            }
            let mut put = |r: usize| {
                for ((d, &a), &v) in out[r * c..][..c].iter_mut().zip(&acc).zip(&src[r * c..][..c]) {
                    *d = a + v;
                }
            };
            put(o + rpad);
            if (1..=rpad).contains(&o) {
                put(rpad - o);
            }
        }
        out
    }

    /// The (stride-1) convolution of `x` [T, C_in], channel-major [1, C_out, T_out].
    pub fn conv_channel_major(&self, x: &Tensor) -> Tensor {
        let (zt, t_in) = self.product(x);
        let z = f32s(&zt);
        let (c, k, p) = (self.b.len(), self.k, self.pad);
        let t_out = (t_in + 2 * p).checked_sub(k - 1).expect("a kernel within the padded input");
        let mut out = Tensor::empty([1, c as i64, t_out as i64], (Kind::Float, Device::Cpu));
        // SAFETY: a tensor made here and held alone while the slice lives.
        let y = unsafe { f32s_mut(&mut out) };
        let mut acc = vec![0f32; c];
        for o in 0..t_out {
            acc.copy_from_slice(&self.b);
            // input step o + j − p for tap j, where it is within the input
            for j in p.saturating_sub(o)..k.min(t_in + p - o) {
                let t = o + j - p;
                for (a, &v) in acc.iter_mut().zip(&z[(t * k + j) * c..][..c]) {
                    *a += v;
                }
            }
            for (ch, &a) in acc.iter().enumerate() {
                y[ch * t_out + o] = a;
            }
        }
        out
    }
}

/// A tch tensor (f32) of an ONNX initializer.
pub(super) fn float_tensor(t: &OnnxTensor) -> R<Tensor> {
    let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
    let v = match t.dtype {
        DataType::Float => t.to_f32(),
        _ => return Err(format!("{}: not a float tensor", t.name)),
    }
    .map_err(|e| format!("{}: {e}", t.name))?;
    Ok(Tensor::from_slice(&v).view(dims.as_slice()))
}

impl<'a> Weights<'a> {
    pub fn new(model: &'a Model, precision: Precision, device: Device) -> Weights<'a> {
        let g = &model.graph;
        let mut nodes = HashMap::new();
        let mut producer = HashMap::new();
        let mut consumers: HashMap<&str, Vec<&Node>> = HashMap::new();
        for n in &g.nodes {
            nodes.insert(n.name.as_str(), n);
            for o in &n.outputs {
                producer.insert(o.as_str(), n);
            }
            for i in &n.inputs {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
        let inits = g.initializers.iter().map(|t| (t.name.as_str(), t)).collect();
        let device_paths = device != Device::Cpu && precision != Precision::Int8;
        Weights { nodes, producer, consumers, inits, precision, device, device_paths }
    }

    fn node(&self, name: &str, op: &str) -> R<&'a Node> {
        let n = self.nodes.get(name).copied().ok_or_else(|| format!("the export has no node `{name}`"))?;
        if n.op_type != op {
            return Err(format!("node `{name}` is a {}, not a {op}", n.op_type));
        }
        Ok(n)
    }

    pub fn init(&self, name: &str) -> R<&'a OnnxTensor> {
        self.inits.get(name).copied().ok_or_else(|| format!("the export has no initializer `{name}`"))
    }

    /// A float initializer as a tensor on the device.
    pub fn float(&self, name: &str) -> R<Tensor> {
        Ok(float_tensor(self.init(name)?)?.to_device(self.device))
    }

    /// The scale of a quantized weight `X_quantized`: `X_scale`.
    fn scale_of(&self, quantized: &str) -> R<&'a OnnxTensor> {
        let base = quantized.strip_suffix("_quantized").ok_or_else(|| format!("`{quantized}` is not quantized"))?;
        self.init(&format!("{base}_scale"))
    }

    fn only_consumer(&self, value: &str) -> Option<&'a Node> {
        match self.consumers.get(value).map(Vec::as_slice) {
            Some([n]) => Some(n),
            _ => None,
        }
    }

    /// The float bias a quantized product's result gets: after `Cast` and the scale `Mul`, an `Add`
    /// (or `FastGelu`) with an initializer; for a convolution, the int32 `Add` of the bias quantized
    /// from a float initializer (Div, Floor, Cast, Reshape).
    fn bias_after(&self, node: &Node) -> Option<&'a OnnxTensor> {
        let mut value = node.outputs[0].as_str();
        for _ in 0..3 {
            let next = self.only_consumer(value)?;
            match next.op_type.as_str() {
                "Cast" | "Mul" => value = next.outputs[0].as_str(),
                "Add" | "FastGelu" => {
                    let other = next.inputs.iter().find(|i| i.as_str() != value)?;
                    if let Some(t) = self.inits.get(other.as_str()) {
                        return Some(t);
                    }
                    // ConvInteger: the quantized bias, back to its float initializer
                    let mut v = other.as_str();
                    for _ in 0..5 {
                        let p = self.producer.get(v)?;
                        let src = p.inputs.first()?;
                        if let Some(t) = self.inits.get(src.as_str()) {
                            if t.dtype == DataType::Float {
                                return Some(t);
                            }
                        }
                        v = src.as_str();
                    }
                    return None;
                }
                _ => return None,
            }
        }
        None
    }

    /// The Linear layer of a `MatMulInteger` node.
    pub fn linear(&self, name: &str) -> R<Linear> {
        let n = self.node(name, "MatMulInteger")?;
        let w = self.init(&n.inputs[1])?;
        let zp = self.init(&n.inputs[3])?;
        Linear::new(w, zp, self.scale_of(&n.inputs[1])?, self.bias_after(n), self.precision, self.device)
            .map_err(|e| format!("{name}: {e}"))
    }

    /// The convolution of a `ConvInteger` node.
    pub fn conv(&self, name: &str) -> R<Conv> {
        let n = self.node(name, "ConvInteger")?;
        let w = self.init(&n.inputs[1])?;
        let zp = self.init(&n.inputs[3])?;
        Conv::new(n, w, zp, self.scale_of(&n.inputs[1])?, self.bias_after(n), self.precision, self.device)
            .map_err(|e| format!("{name}: {e}"))
    }

    /// The bidirectional LSTM of a `DynamicQuantizeLSTM` node.
    pub fn lstm(&self, name: &str) -> R<Lstm> {
        let n = self.node(name, "DynamicQuantizeLSTM")?;
        let ins: Vec<&OnnxTensor> =
            [1, 2, 3, 8, 9, 10, 11].iter().map(|&i| self.init(&n.inputs[i])).collect::<R<_>>()?;
        let lstm = Lstm::new(n, &ins, self.precision)?;
        if self.device_paths {
            lstm.on_device(self.device)
        } else {
            Ok(lstm)
        }
    }

    /// A float `Conv` or `ConvTranspose` node (1-d, symmetric padding).
    pub fn float_conv(&self, name: &str) -> R<FloatConv> {
        let n = self.nodes.get(name).copied().ok_or_else(|| format!("the export has no node `{name}`"))?;
        let transposed = match n.op_type.as_str() {
            "Conv" => false,
            "ConvTranspose" => true,
            other => return Err(format!("node `{name}` is a {other}")),
        };
        let pads = n.attr_ints("pads").unwrap_or_else(|| vec![0, 0]);
        if pads.len() != 2 || pads[0] != pads[1] {
            return Err(format!("{name}: only symmetric 1-d padding"));
        }
        let one = |a: &str, d: i64| n.attr_ints(a).and_then(|v| v.first().copied()).unwrap_or(d);
        let b = match n.inputs.get(2).filter(|s| !s.is_empty()) {
            Some(b) => Some(self.float(b)?),
            None => None,
        };
        // (the int8 precision's float nodes stay float32, as the graph has them)
        let w = self.float(&n.inputs[1])?;
        Ok(FloatConv {
            w: product_weight(w, self.precision),
            b,
            stride: one("strides", 1),
            pad: pads[0],
            out_pad: one("output_padding", 0),
            dil: one("dilations", 1),
            groups: n.attr_i("group", 1),
            transposed,
        })
    }

    /// The embedding table a `Gather` of a quantized table reads, dequantized by the
    /// `DequantizeLinear` that follows it.
    pub fn embedding(&self, gather: &str) -> R<Tensor> {
        let g = self.node(gather, "Gather")?;
        let table = self.init(&g.inputs[0])?;
        let dq = self
            .only_consumer(&g.outputs[0])
            .filter(|n| n.op_type == "DequantizeLinear")
            .ok_or_else(|| format!("{gather}: no DequantizeLinear after it"))?;
        let scale = self.init(&dq.inputs[1])?.to_f32().map_err(|e| e.to_string())?[0];
        let zp = match dq.inputs.get(2).filter(|s| !s.is_empty()) {
            Some(z) => self.init(z)?.to_i64().map_err(|e| e.to_string())?[0],
            None => 0,
        };
        let q = table.to_i64().map_err(|e| e.to_string())?;
        let v: Vec<f32> = q.iter().map(|&x| (x - zp) as f32 * scale).collect();
        let dims: Vec<i64> = table.dims.iter().map(|&d| d as i64).collect();
        Ok(Tensor::from_slice(&v).view(dims.as_slice()).to_device(self.device))
    }
}

/// A float tensor of `v` on `device` (constants).
pub(super) fn consts(v: &[f32], device: Device) -> Tensor {
    Tensor::from_slice(v).to_kind(Kind::Float).to_device(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{reset_cap, set_cap, Level};

    /// The AdaIN blocks' up-sampling (groups = channels, k 3, stride 2, padding 1, output padding
    /// 1), time-major, against libtorch's transposed convolution of the same weights, and the
    /// same bits at every level.
    #[test]
    fn depthwise_up_matches_libtorch_at_every_level() {
        let (c, t) = (13i64, 29i64);
        let w = Tensor::from_slice(&(0..c * 3).map(|i| ((i as f32) * 0.37).sin()).collect::<Vec<_>>()).view([c, 1, 3]);
        let b = Tensor::from_slice(&(0..c).map(|i| (i as f32) * 0.1 - 0.5).collect::<Vec<_>>());
        let conv = FloatConv { w, b: Some(b), stride: 2, pad: 1, out_pad: 1, dil: 1, groups: c, transposed: true };
        let x: Vec<f32> = (0..c * t).map(|i| ((i as f32) * 0.731).cos() * 2.0).collect();
        // libtorch's, channel-major [1, C, T] in, [1, C, 2T] out
        let xc = Tensor::from_slice(&x).view([t, c]).tr().unsqueeze(0);
        let want = conv.forward(&xc).squeeze_dim(0).tr().contiguous().view(-1);
        let want = Vec::<f32>::try_from(want).expect("floats");
        let up = conv.depthwise_up().expect("a depthwise transposed convolution");
        let mut first: Option<Vec<f32>> = None;
        for level in Level::available() {
            set_cap(level);
            let got = up.forward(&x);
            reset_cap();
            assert_eq!(got.len(), want.len(), "2T rows");
            let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "{level}: {worst} from libtorch's");
            match &first {
                None => first = Some(got),
                Some(f) => assert!(f == &got, "{level}: other bits than the baseline's"),
            }
        }
        // a grouped convolution is refused
        let plain = FloatConv { groups: 1, ..conv };
        assert!(plain.depthwise_up().is_err());
    }
}
