//! Reading Kokoro's weights out of the ONNX export. The file is only the container: every layer of
//! [`super::net`] names the export's node that used its weights (e.g.
//! `/encoder/F0.0/conv1/Conv_quant`), and its initializers are read by the names that node gives
//! them (the uint8/int8 weight `…_quantized` with its `…_scale` and zero point, the float bias found
//! behind the node's bias addition). docs/kokoro-architecture.md lists them.

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use super::int8::{conv_product, product_weight, Conv, Linear, Lstm};
use crate::onnx::{AttrValue, DataType, Model, Node, Tensor as OnnxTensor};
use crate::Precision;

type R<T> = Result<T, String>;

pub(super) struct Weights<'a> {
    nodes: HashMap<&'a str, &'a Node>,
    producer: HashMap<&'a str, &'a Node>,
    consumers: HashMap<&'a str, Vec<&'a Node>>,
    inits: HashMap<&'a str, &'a OnnxTensor>,
    pub precision: Precision,
    pub device: Device,
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
}

fn attr_ints(n: &Node, name: &str) -> Option<Vec<i64>> {
    match n.attr(name) {
        Some(AttrValue::Ints(v)) => Some(v.clone()),
        _ => None,
    }
}

fn attr_i(n: &Node, name: &str, default: i64) -> i64 {
    match n.attr(name) {
        Some(AttrValue::Int(v)) => *v,
        _ => default,
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
        Weights { nodes, producer, consumers, inits, precision, device }
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
        Lstm::new(n, &ins, self.precision)
    }

    /// A float `Conv` or `ConvTranspose` node (1-d, symmetric padding).
    pub fn float_conv(&self, name: &str) -> R<FloatConv> {
        let n = self.nodes.get(name).copied().ok_or_else(|| format!("the export has no node `{name}`"))?;
        let transposed = match n.op_type.as_str() {
            "Conv" => false,
            "ConvTranspose" => true,
            other => return Err(format!("node `{name}` is a {other}")),
        };
        let pads = attr_ints(n, "pads").unwrap_or_else(|| vec![0, 0]);
        if pads.len() != 2 || pads[0] != pads[1] {
            return Err(format!("{name}: only symmetric 1-d padding"));
        }
        let one = |a: &str, d: i64| attr_ints(n, a).and_then(|v| v.first().copied()).unwrap_or(d);
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
            groups: attr_i(n, "group", 1),
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
