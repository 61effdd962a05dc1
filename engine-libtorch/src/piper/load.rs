//! Reading a Piper voice's weights out of its ONNX export. The file is only the container: every
//! layer of [`super::net`] is named by its PyTorch module (`flow.flows.0.enc.in_layers.2`), and
//! its weight and bias are found through the `Conv` (or `ConvTranspose`) node that consumes them,
//! which also gives the layer's stride, padding, dilation and groups. Going through the node
//! matters for the weight-normalised layers: the exporter folded g·v/‖v‖ into a constant named
//! after nothing (`onnx::Conv_8177`) while the bias kept its module's name, so the node that
//! reads the bias names the weight. A file that still holds `weight_g` and `weight_v` is folded
//! here the same way.

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use super::int8::{ConvParts, QConv};
use crate::onnx::{DataType, Model, Node, Tensor as OnnxTensor};

type R<T> = Result<T, String>;

/// The export's initializers and nodes, indexed for the lookups of [`super::net`].
pub(super) struct Weights<'a> {
    inits: HashMap<&'a str, &'a OnnxTensor>,
    consumers: HashMap<&'a str, Vec<&'a Node>>,
    graph_inputs: &'a [String],
    pub device: Device,
}

/// A 1-d convolution or transposed convolution of the export with its weight (weight norm
/// folded), bias and attributes.
pub(super) struct Conv {
    pub w: Tensor,
    pub b: Option<Tensor>,
    pub stride: i64,
    pub pad: i64,
    pub dil: i64,
    pub groups: i64,
    pub transposed: bool,
    /// The layer in int8 ([`Conv::quantize`]), which [`Conv::forward`] then runs
    pub q: Option<QConv>,
}

impl Conv {
    /// x [1, C, T] → [1, C', T'], or, once [`Conv::channels_last`], x [1, C, 1, T] in either
    /// layout → [1, C', 1, T'] channels-last.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        if let Some(q) = &self.q {
            return if x.dim() == 4 { q.forward(&x.squeeze_dim(2)).unsqueeze(2) } else { q.forward(x) };
        }
        if self.w.dim() == 4 {
            let (s, p, d) = ([1, self.stride], [0, self.pad], [1, self.dil]);
            return if self.transposed {
                x.conv_transpose2d(&self.w, self.b.as_ref(), s, p, [0, 0], self.groups, d)
            } else {
                x.conv2d(&self.w, self.b.as_ref(), s, p, d, self.groups)
            };
        }
        if self.transposed {
            x.conv_transpose1d(&self.w, self.b.as_ref(), [self.stride], [self.pad], [0], self.groups, [self.dil])
        } else {
            x.conv1d(&self.w, self.b.as_ref(), [self.stride], [self.pad], [self.dil], self.groups)
        }
    }

    /// Runs the layer in int8 from now on ([`QConv`]), where it is covered (else it stays
    /// fp32). [`Conv::forward`] then takes [1, C, L] on the CPU only.
    pub fn quantize(&mut self) {
        self.q = QConv::new(&self.parts());
    }

    /// [`Conv::quantize`] with the activations quantized per step ([`QConv::per_row`]).
    pub fn quantize_per_row(&mut self) {
        self.q = QConv::per_row(&self.parts());
    }

    /// Its weight, bias and attributes, what [`QConv`] is made from.
    pub fn parts(&self) -> ConvParts<'_> {
        ConvParts {
            w: &self.w,
            b: &self.b,
            stride: self.stride,
            pad: self.pad,
            dil: self.dil,
            groups: self.groups,
            transposed: self.transposed,
        }
    }

    /// Output channels.
    pub fn c_out(&self) -> i64 {
        let s = self.w.size();
        if self.transposed {
            s[1] * self.groups
        } else {
            s[0]
        }
    }

    /// Input channels.
    pub fn c_in(&self) -> i64 {
        let s = self.w.size();
        if self.transposed {
            s[0]
        } else {
            s[1] * self.groups
        }
    }

    /// Kernel size.
    pub fn k(&self) -> i64 {
        self.w.size()[self.w.dim() - 1]
    }

    /// The same layer as a 2-d convolution of height 1 whose weight is stored channels-last
    /// (channels innermost), which makes libtorch run it through oneDNN on channels-last
    /// activations and return channels-last ones, with no reorder between layers: the
    /// generator's small-channel convolutions at audio rate took up to twice as long in the
    /// default layout (1 thread, Zen 4: the ×4 transposed conv 64 → 32 over 19,200 steps 14.5
    /// against 7.0 ms; a conv 32 → 32, k 3 over 76,800 steps 6.6 against 4.6 ms).
    pub fn channels_last(self) -> Conv {
        // [O, I, 1, k] (or [I, O, 1, k]) with strides of a [O, 1, k, I] tensor
        let w = self.w.unsqueeze(2).permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
        Conv { w, ..self }
    }
}

/// A tch tensor (f32, CPU) of a float ONNX initializer.
fn float_tensor(t: &OnnxTensor) -> R<Tensor> {
    if t.dtype != DataType::Float {
        return Err(format!("{}: a {:?} tensor, not float", t.name, t.dtype));
    }
    let v = t.to_f32().map_err(|e| format!("{}: {e}", t.name))?;
    let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
    Ok(Tensor::from_slice(&v).view(dims.as_slice()))
}

impl<'a> Weights<'a> {
    pub fn new(model: &'a Model, device: Device) -> Weights<'a> {
        let g = &model.graph;
        let mut consumers: HashMap<&str, Vec<&Node>> = HashMap::new();
        for n in &g.nodes {
            for i in &n.inputs {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
        let inits = g.initializers.iter().map(|t| (t.name.as_str(), t)).collect();
        Weights { inits, consumers, graph_inputs: &g.inputs, device }
    }

    pub fn has(&self, name: &str) -> bool {
        self.inits.contains_key(name)
    }

    pub fn has_input(&self, name: &str) -> bool {
        self.graph_inputs.iter().any(|i| i == name)
    }

    fn init(&self, name: &str) -> R<&'a OnnxTensor> {
        self.inits.get(name).copied().ok_or_else(|| format!("the export has no initializer `{name}`"))
    }

    /// A float initializer as a tensor on the device.
    pub fn float(&self, name: &str) -> R<Tensor> {
        Ok(float_tensor(self.init(name)?)?.to_device(self.device))
    }

    /// The table a `Gather` reads with the graph input `input` as its indices (the text
    /// embedding; the single-speaker export names it `sid`, the exporter having given the
    /// unused input name to the first initializer).
    pub fn gathered_by(&self, input: &str) -> R<Tensor> {
        let gather = self
            .consumers
            .get(input)
            .into_iter()
            .flatten()
            .find(|n| n.op_type == "Gather" && n.inputs.get(1).map(String::as_str) == Some(input))
            .ok_or_else(|| format!("no Gather reads the graph input `{input}`"))?;
        self.float(&gather.inputs[0])
    }

    /// The `Conv`/`ConvTranspose` node that consumes `value`.
    fn conv_node(&self, value: &str) -> Option<&'a Node> {
        self.consumers.get(value)?.iter().copied().find(|n| n.op_type == "Conv" || n.op_type == "ConvTranspose")
    }

    /// The 1-d convolution of the PyTorch module `module` (e.g. `dec.ups.0`): its node is the
    /// one that reads `{module}.weight` or `{module}.bias`.
    pub fn conv(&self, module: &str) -> R<Conv> {
        let (wn, bn) = (format!("{module}.weight"), format!("{module}.bias"));
        let node = self
            .conv_node(&wn)
            .or_else(|| self.conv_node(&bn))
            .ok_or_else(|| format!("no convolution of `{module}` in the export"))?;
        let transposed = node.op_type == "ConvTranspose";
        let weight_name = node.inputs.get(1).ok_or_else(|| format!("{}: no weight input", node.name))?;
        let w = match self.inits.get(weight_name.as_str()) {
            Some(t) => float_tensor(t)?,
            None => self.weight_norm(module)?,
        };
        if w.dim() != 3 {
            return Err(format!("{module}: a weight of {:?}, not a 1-d convolution's", w.size()));
        }
        let b = match node.inputs.get(2).filter(|s| !s.is_empty()) {
            Some(b) => Some(float_tensor(self.init(b)?)?.to_device(self.device)),
            None => None,
        };
        let pads = node.attr_ints("pads").unwrap_or_else(|| vec![0, 0]);
        if pads.len() != 2 || pads[0] != pads[1] {
            return Err(format!("{module}: padding {pads:?}, not symmetric 1-d"));
        }
        let one = |a: &str| node.attr_ints(a).and_then(|v| v.first().copied()).unwrap_or(1);
        if node.attr_ints("output_padding").is_some_and(|v| v.iter().any(|&p| p != 0)) {
            return Err(format!("{module}: output padding is not supported"));
        }
        Ok(Conv {
            w: w.to_device(self.device),
            b,
            stride: one("strides"),
            pad: pads[0],
            dil: one("dilations"),
            groups: node.attr_i("group", 1),
            transposed,
            q: None,
        })
    }

    /// g·v/‖v‖ (the norm over all but the first axis, PyTorch's `weight_norm` with dim 0) from
    /// `{module}.weight_g` and `{module}.weight_v`, for an export that kept them apart.
    fn weight_norm(&self, module: &str) -> R<Tensor> {
        let (g, v) = (format!("{module}.weight_g"), format!("{module}.weight_v"));
        if !(self.has(&g) && self.has(&v)) {
            return Err(format!("{module}: its weight is neither an initializer nor weight_g/weight_v"));
        }
        let (g, v) = (float_tensor(self.init(&g)?)?, float_tensor(self.init(&v)?)?);
        let norm = v.pow_tensor_scalar(2).sum_dim_intlist([1i64, 2].as_slice(), true, Kind::Float).sqrt();
        Ok(g * (v / norm))
    }

    /// The float initializer that multiplies (x − `subtrahend`) in the export: the
    /// ElementwiseAffine flow's exp(−logs), which the exporter folded into a constant
    /// (`/dp/flows.0/Exp_output_0`).
    pub fn factor_after_sub(&self, subtrahend: &str) -> R<Tensor> {
        let find = || -> Option<&'a str> {
            let sub = self.consumers.get(subtrahend)?.iter().find(|n| n.op_type == "Sub")?;
            let mul = self.consumers.get(sub.outputs[0].as_str())?.iter().find(|n| n.op_type == "Mul")?;
            mul.inputs.iter().map(String::as_str).find(|i| *i != sub.outputs[0] && self.has(i))
        };
        let name = find().ok_or_else(|| format!("no constant multiplies x − `{subtrahend}`"))?;
        self.float(name)
    }
}

#[cfg(test)]
mod int8_tests {
    use super::Conv;
    use crate::piper::int8::*;
    use tch::{Device, Kind, Tensor};

    fn conv(w: Tensor, b: Option<Tensor>, stride: i64, pad: i64, dil: i64, transposed: bool) -> Conv {
        Conv { w, b, stride, pad, dil, groups: 1, transposed, q: None }
    }

    /// int8 against libtorch's float convolution on random data: within the quantization's error,
    /// for plain, dilated, padded and transposed convolutions, with a residual added.
    #[test]
    fn matches_the_float_convolution() {
        let _g = tch::no_grad_guard();
        tch::manual_seed(3);
        let cases = [
            // (c_in, c_out, k, stride, pad, dil, transposed, length)
            (32, 32, 7, 1, 9, 3, false, 1000),
            (64, 48, 3, 1, 1, 1, false, 333),
            (24, 40, 1, 1, 0, 1, false, 70),
            (64, 32, 8, 4, 2, 1, true, 517),
            (40, 16, 16, 8, 4, 1, true, 90),
            (8, 8, 4, 2, 1, 1, true, 1),
        ];
        for (c_in, c_out, k, stride, pad, dil, transposed, l) in cases {
            let shape = if transposed { [c_in, c_out, k] } else { [c_out, c_in, k] };
            let w = Tensor::randn(shape, (Kind::Float, Device::Cpu)) * 0.1;
            let b = Tensor::randn([c_out], (Kind::Float, Device::Cpu)) * 0.1;
            let f = conv(w, Some(b), stride, pad, dil, transposed);
            let x = Tensor::randn([1, c_in, l], (Kind::Float, Device::Cpu));
            let want = f.forward(&x);
            let q = QConv::new(&f.parts()).expect("covered");
            let scale = f64::try_from(want.abs().max()).unwrap();
            let per_row = QConv::per_row(&f.parts());
            assert_eq!(per_row.is_some(), !transposed);
            for q in std::iter::once(&q).chain(&per_row) {
                let got = q.forward(&x);
                assert_eq!(got.size(), want.size(), "{c_in}→{c_out} k{k} s{stride}");
                let err = f64::try_from((&got - &want).abs().max()).unwrap();
                assert!(err < 0.03 * scale, "{c_in}→{c_out} k{k} s{stride}: error {err} of {scale}");
            }
            // leaky and a residual, time-major
            let xt = Vec::<f32>::try_from(x.squeeze_dim(0).transpose(0, 1).contiguous().view([-1])).unwrap();
            let pre = Pre { slope: 0.1, mul: 0.5 };
            let want = f.forward(&(&x * 0.5).maximum(&(&x * 0.05)));
            let want = Vec::<f32>::try_from(want.squeeze_dim(0).transpose(0, 1).contiguous().view([-1])).unwrap();
            let mut out = vec![0f32; want.len()];
            if transposed {
                q.run(&xt, pre, &mut out, Out::Store);
                let e = out.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(f64::from(e) < 0.03 * scale, "leaky: {e}");
            } else {
                let res: Vec<f32> = (0..want.len()).map(|i| (i % 7) as f32).collect();
                out.fill(1.0);
                q.run(&xt, pre, &mut out, Out::AddResidual(&res));
                let e = (0..want.len()).map(|i| (out[i] - (1.0 + res[i] + want[i])).abs()).fold(0f32, f32::max);
                assert!(f64::from(e) < 0.03 * scale, "leaky + residual: {e}");
            }
        }
    }

    /// The generator's conv_post on time-major data, its LeakyReLU of a scaled input applied as
    /// it reads, against libtorch's float convolution (channels-last, as the generator holds
    /// it): float rounding apart, across blocks and short inputs; none for what it does not
    /// cover.
    #[test]
    fn post_conv_matches_the_float_convolution() {
        let _g = tch::no_grad_guard();
        tch::manual_seed(5);
        for (c_in, k, pad, l) in [(32, 7, 3, 1000), (16, 3, 1, 257), (8, 5, 2, 1), (4, 1, 0, 300)] {
            let w = Tensor::randn([1, c_in, k], (Kind::Float, Device::Cpu)) * 0.2;
            let b = Tensor::randn([1], (Kind::Float, Device::Cpu));
            let f = conv(w, Some(b), 1, pad, 1, false).channels_last();
            let p = PostConv::new(&f.parts()).expect("covered");
            let x = Tensor::randn([1, c_in, 1, l], (Kind::Float, Device::Cpu));
            let want = f.forward(&(&x * 0.25).maximum(&(&x * 0.0025))).view([-1]);
            let want = Vec::<f32>::try_from(want).unwrap();
            let xt = Vec::<f32>::try_from(x.view([c_in, l]).transpose(0, 1).contiguous().view([-1])).unwrap();
            let mut got = vec![f32::NAN; p.out_len(l as usize)];
            p.run(&xt, Pre { slope: 0.01, mul: 0.25 }, &mut got);
            assert_eq!(got.len(), want.len(), "C {c_in}, k {k}, L {l}");
            let e = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(e < 1e-5, "C {c_in}, k {k}, L {l}: {e}");
        }
        let two = conv(Tensor::ones([2, 4, 3], (Kind::Float, Device::Cpu)), None, 1, 1, 1, false);
        assert!(PostConv::new(&two.parts()).is_none(), "two output channels");
        let dilated = conv(Tensor::ones([1, 4, 3], (Kind::Float, Device::Cpu)), None, 1, 2, 2, false);
        assert!(PostConv::new(&dilated.parts()).is_none(), "dilated");
    }
}
