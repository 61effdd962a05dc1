//! Naming and dequantizing the Linear weights of hibari's ONNX graphs.
//!
//! The exported graph stores each nn.Linear weight anonymously and transposed ([in, out]) as the
//! B operand of a MatMul. onnxruntime's dynamic quantization turns each such MatMul into
//! `DynamicQuantizeLinear(x) -> MatMulInteger(xq, <X>_quantized, x_zp, <X>_zero_point) -> Cast ->
//! Mul(·, Mul(x_scale, <X>_scale))`, then the original `Add(bias, ·)`. This module finds those chains
//! by walking the graph (not by trusting the name suffixes), takes the weight scale from the Mul
//! that combines it with the activation scale, and names each matrix after the bias of the Add
//! that follows it: `....bias` -> `....weight` (`in_proj_bias` -> `in_proj_weight`).
//!
//! [`parameters`] then gives the PyTorch-style parameter set: every float initializer under its own
//! name, except the quantization scales, plus each Linear weight dequantized as `(q - zp) * scale`
//! and transposed back to nn.Linear's [out, in]. It works on the shipped int8 file and on a
//! dequantized fp32 copy alike (plain MatMul with a float initializer B is handled the same way).

use std::collections::{BTreeMap, HashMap};

use crate::onnx::{invalid, DataType, Model, Node, OnnxError, Tensor};

/// One Linear weight of the graph (a matrix may be used by several MatMul nodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearWeight {
    /// The initializer holding the matrix, [in, out]: `<X>_quantized` (int8) or `<X>` (float).
    pub weight: String,
    /// Scale and zero-point initializers; `None` for a float matrix.
    pub scale: Option<String>,
    /// `None` also when a MatMulInteger omits the zero point (meaning 0).
    pub zero_point: Option<String>,
    /// The bias initializer of the Add that follows, if there is one.
    pub bias: Option<String>,
    /// The PyTorch parameter name derived from the bias, if any.
    pub logical: Option<String>,
    /// How many MatMul/MatMulInteger nodes use this matrix.
    pub uses: usize,
}

struct Index<'a> {
    inits: HashMap<&'a str, &'a Tensor>,
    producer: HashMap<&'a str, &'a Node>,
    consumers: HashMap<&'a str, Vec<&'a Node>>,
}

impl<'a> Index<'a> {
    fn new(model: &'a Model) -> Self {
        let g = &model.graph;
        let inits = g.initializers.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut producer = HashMap::new();
        let mut consumers: HashMap<&str, Vec<&Node>> = HashMap::new();
        for n in &g.nodes {
            for o in &n.outputs {
                producer.insert(o.as_str(), n);
            }
            for i in n.inputs.iter().filter(|i| !i.is_empty()) {
                consumers.entry(i.as_str()).or_default().push(n);
            }
        }
        Index { inits, producer, consumers }
    }

    /// The single consumer of `value`, if it has exactly one and it is an `op` node.
    fn only_consumer(&self, value: &str, op: &str) -> Option<&'a Node> {
        match self.consumers.get(value).map(Vec::as_slice) {
            Some([n]) if n.op_type == op => Some(n),
            _ => None,
        }
    }

    fn other_input<'n>(node: &'n Node, this: &str) -> Option<&'n str> {
        let mut others = node.inputs.iter().filter(|i| i.as_str() != this);
        match (others.next(), others.next()) {
            (Some(o), None) => Some(o.as_str()),
            _ => None,
        }
    }

    fn is_float_init(&self, name: &str) -> bool {
        self.inits.get(name).is_some_and(|t| t.dtype == DataType::Float)
    }

    /// The bias initializer of the Add consuming `value`, if that is how the graph continues.
    fn bias_after(&self, value: &str) -> Option<String> {
        let add = self.only_consumer(value, "Add")?;
        let other = Self::other_input(add, value)?;
        self.is_float_init(other).then(|| other.to_string())
    }

    /// The weight-scale initializer for a MatMulInteger: MatMulInteger -> Cast -> Mul(·, s), where s
    /// is an initializer or the product of the activation scale and an initializer.
    fn scale_after(&self, mm: &Node) -> Result<(String, String), OnnxError> {
        let fail = |what: &str| invalid(format!("MatMulInteger {}: {what}", mm.name));
        let out = mm.outputs.first().ok_or_else(|| fail("no output"))?;
        let cast = self.only_consumer(out, "Cast").ok_or_else(|| fail("output does not go to one Cast"))?;
        let cast_out = cast.outputs.first().ok_or_else(|| fail("Cast has no output"))?;
        let mul = self.only_consumer(cast_out, "Mul").ok_or_else(|| fail("Cast does not go to one Mul"))?;
        let factor = Self::other_input(mul, cast_out).ok_or_else(|| fail("Mul has no second input"))?;
        let scale = if self.is_float_init(factor) {
            factor.to_string()
        } else {
            let prod = self.producer.get(factor).filter(|n| n.op_type == "Mul");
            let prod = prod.ok_or_else(|| fail("the scale factor is neither an initializer nor a Mul"))?;
            let mut inits = prod.inputs.iter().filter(|i| self.is_float_init(i));
            match (inits.next(), inits.next()) {
                (Some(s), None) => s.clone(),
                _ => return Err(fail("cannot tell the weight scale in the scale product")),
            }
        };
        let mul_out = mul.outputs.first().ok_or_else(|| fail("Mul has no output"))?;
        Ok((scale, mul_out.clone()))
    }
}

/// `....bias` -> `....weight`, `...in_proj_bias` -> `...in_proj_weight`.
fn weight_name_for_bias(bias: &str) -> Option<String> {
    let at = bias.rfind("bias")?;
    Some(format!("{}weight{}", &bias[..at], &bias[at + 4..]))
}

/// Finds every Linear weight (quantized or float) used as the initializer B operand of a
/// MatMulInteger or MatMul node, in graph order of first use.
pub fn linear_weights(model: &Model) -> Result<Vec<LinearWeight>, OnnxError> {
    let ix = Index::new(model);
    let mut out: Vec<LinearWeight> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for n in &model.graph.nodes {
        let found = match n.op_type.as_str() {
            "MatMulInteger" => {
                let weight = n.inputs.get(1).filter(|w| ix.inits.contains_key(w.as_str()));
                let Some(weight) = weight else { continue };
                let zero_point = n.inputs.get(3).filter(|z| !z.is_empty()).cloned();
                if let Some(z) = &zero_point {
                    if !ix.inits.contains_key(z.as_str()) {
                        return Err(invalid(format!("MatMulInteger {}: zero point {z} is not an initializer", n.name)));
                    }
                }
                let (scale, scaled) = ix.scale_after(n)?;
                let bias = ix.bias_after(&scaled);
                LinearWeight {
                    weight: weight.clone(),
                    scale: Some(scale),
                    zero_point,
                    logical: bias.as_deref().and_then(weight_name_for_bias),
                    bias,
                    uses: 1,
                }
            }
            "MatMul" => {
                let weight = n.inputs.get(1).filter(|w| ix.is_float_init(w));
                let (Some(weight), Some(y)) = (weight, n.outputs.first()) else { continue };
                let bias = ix.bias_after(y);
                LinearWeight {
                    weight: weight.clone(),
                    scale: None,
                    zero_point: None,
                    logical: bias.as_deref().and_then(weight_name_for_bias),
                    bias,
                    uses: 1,
                }
            }
            _ => continue,
        };
        match seen.get(&found.weight) {
            Some(&i) => {
                let prev = &mut out[i];
                if (&prev.scale, &prev.zero_point, &prev.logical) != (&found.scale, &found.zero_point, &found.logical) {
                    return Err(invalid(format!(
                        "weight {} is used with different scales, zero points or biases",
                        found.weight
                    )));
                }
                prev.uses += 1;
            }
            None => {
                seen.insert(found.weight.clone(), out.len());
                out.push(found);
            }
        }
    }
    Ok(out)
}

/// `(q - zp) * scale` as a float tensor of the same shape ([in, out]). The scale and zero point may
/// be scalars (per tensor) or have one entry per output column (per channel, the last axis).
/// (The voice is dequantized per weight in `parameters`; this whole-tensor form checks it.)
#[cfg(test)]
pub fn dequantize(q: &Tensor, scale: &Tensor, zero_point: Option<&Tensor>) -> Result<Tensor, OnnxError> {
    dequantize_as(q, scale, zero_point, None)
}

/// [`dequantize`], and with `transposed_name` the result transposed ([out, in]) under that name, in
/// the same pass (as [`transpose_2d`] of the dequantized matrix, without the intermediate copy).
fn dequantize_as(
    q: &Tensor,
    scale: &Tensor,
    zero_point: Option<&Tensor>,
    transposed_name: Option<String>,
) -> Result<Tensor, OnnxError> {
    if !matches!(q.dtype, DataType::Int8 | DataType::Uint8) {
        return Err(invalid(format!("{} is {:?}, not int8/uint8", q.name, q.dtype)));
    }
    let cols = q.dims.last().copied().unwrap_or(1).max(1);
    let per = |n: usize, what: &str| -> Result<bool, OnnxError> {
        match n {
            1 => Ok(false),
            n if n == cols => Ok(true),
            n => Err(invalid(format!("{} has {n} {what} values for {cols} columns", q.name))),
        }
    };
    let s = scale.to_f32()?;
    let s_per_col = per(s.len(), "scale")?;
    let z = match zero_point {
        Some(z) => z.to_i64()?,
        None => vec![0],
    };
    let z_per_col = per(z.len(), "zero point")?;
    let signed = q.dtype == DataType::Int8;
    let column: Vec<(i64, f32)> =
        (0..cols).map(|c| (z[if z_per_col { c } else { 0 }], s[if s_per_col { c } else { 0 }])).collect();
    let value = |b: u8, c: usize| {
        let v = if signed { i64::from(b as i8) } else { i64::from(b) };
        let (zp, sc) = column[c];
        (((v - zp) as f32) * sc).to_le_bytes()
    };
    let rows = q.data.len() / cols;
    let mut data = vec![0u8; q.data.len() * 4];
    match transposed_name {
        None => {
            for (out, row) in data.chunks_exact_mut(cols * 4).zip(q.data.chunks_exact(cols)) {
                for (c, (o, &b)) in out.chunks_exact_mut(4).zip(row).enumerate() {
                    o.copy_from_slice(&value(b, c));
                }
            }
            let name = q.name.strip_suffix("_quantized").unwrap_or(&q.name).to_string();
            Ok(Tensor { name, dtype: DataType::Float, dims: q.dims.clone(), data })
        }
        Some(name) => {
            if q.dims.len() != 2 {
                return Err(invalid(format!("{} is not 2-D", q.name)));
            }
            // Output row by output row (column by column of q): the rows of q being read stay in
            // cache from one column to the next.
            for (c, out) in data.chunks_exact_mut(rows.max(1) * 4).enumerate() {
                for (o, &b) in out.chunks_exact_mut(4).zip(q.data[c..].iter().step_by(cols)) {
                    o.copy_from_slice(&value(b, c));
                }
            }
            Ok(Tensor { name, dtype: DataType::Float, dims: vec![cols, rows], data })
        }
    }
}

/// Transposes a 2-D tensor of any fixed-width type.
pub fn transpose_2d(t: &Tensor, name: String) -> Result<Tensor, OnnxError> {
    let [rows, cols] = t.dims[..] else {
        return Err(invalid(format!("{} is not 2-D", t.name)));
    };
    let size = t.dtype.size().ok_or_else(|| invalid(format!("{} has no fixed element size", t.name)))?;
    let mut data = vec![0u8; t.data.len()];
    for (c, out) in data.chunks_exact_mut(rows.max(1) * size).enumerate() {
        for (r, o) in out.chunks_exact_mut(size).enumerate() {
            let src = (r * cols + c) * size;
            o.copy_from_slice(&t.data[src..src + size]);
        }
    }
    Ok(Tensor { name, dtype: t.dtype, dims: vec![cols, rows], data })
}

/// The float parameters of the model, by name. Float initializers keep their names (the
/// quantization scales are left out); each Linear weight is dequantized if needed and, when its
/// bias names it, stored under that PyTorch name in nn.Linear layout [out, in]. A matrix with no
/// bias after it keeps its initializer name (without `_quantized`) and the file's [in, out] layout.
pub fn parameters(model: &Model) -> Result<BTreeMap<String, Tensor>, OnnxError> {
    let linears = linear_weights(model)?;
    let inits = model.initializer_map();
    let quant_side: std::collections::HashSet<&str> =
        linears.iter().flat_map(|l| [l.scale.as_deref(), l.zero_point.as_deref()]).flatten().collect();
    let linear_names: std::collections::HashSet<&str> = linears.iter().map(|l| l.weight.as_str()).collect();

    let mut out = BTreeMap::new();
    let mut insert = |t: Tensor| -> Result<(), OnnxError> {
        let name = t.name.clone();
        match out.insert(name.clone(), t) {
            Some(_) => Err(invalid(format!("two parameters would be named {name}"))),
            None => Ok(()),
        }
    };
    for t in &model.graph.initializers {
        let name = t.name.as_str();
        if t.dtype == DataType::Float && !quant_side.contains(name) && !linear_names.contains(name) {
            insert(t.clone())?;
        }
    }
    for l in &linears {
        let w = inits[l.weight.as_str()];
        let zero_point = l.zero_point.as_deref().map(|z| inits[z]);
        insert(match (&l.scale, &l.logical) {
            // dequantized and, when named, transposed in one pass
            (Some(s), logical) => dequantize_as(w, inits[s.as_str()], zero_point, logical.clone())?,
            (None, Some(name)) => transpose_2d(w, name.clone())?,
            (None, None) => w.clone(),
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::tests::{model, node, raw_tensor};

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A graph shaped like onnxruntime's dynamic quantization of `y = x @ W + b` (W [2, 3]),
    /// used twice (as the shared attention layers are), plus one float MatMul.
    fn quantized_model() -> Model {
        let nodes = [
            node("DynamicQuantizeLinear", "dq", &["x"], &["xq", "xs", "xz"]),
            node("MatMulInteger", "mm", &["xq", "W_quantized", "xz", "W_zero_point"], &["mi"]),
            node("Cast", "cast", &["mi"], &["mc"]),
            node("Mul", "scales", &["xs", "W_scale"], &["ss"]),
            node("Mul", "rescale", &["mc", "ss"], &["mm_out"]),
            node("Add", "add", &["lin.bias", "mm_out"], &["h"]),
            node("DynamicQuantizeLinear", "dq2", &["h"], &["hq", "hs", "hz"]),
            node("MatMulInteger", "mm2", &["hq", "W_quantized", "hz", "W_zero_point"], &["mi2"]),
            node("Cast", "cast2", &["mi2"], &["mc2"]),
            node("Mul", "scales2", &["hs", "W_scale"], &["ss2"]),
            node("Mul", "rescale2", &["ss2", "mc2"], &["mm_out2"]),
            node("Add", "add2", &["mm_out2", "lin.bias"], &["h2"]),
            node("MatMul", "mmf", &["h2", "V"], &["v"]),
            node("Add", "addf", &["v", "attn.in_proj_bias"], &["y"]),
        ];
        let q: Vec<u8> = [1i8, -2, 3, -4, 5, 127].iter().map(|&v| v as u8).collect();
        let inits = [
            raw_tensor("lin.bias", 1, &[3], &f32_bytes(&[0.0; 3])),
            raw_tensor("W_quantized", 3, &[2, 3], &q),
            raw_tensor("W_scale", 1, &[], &f32_bytes(&[0.5])),
            raw_tensor("W_zero_point", 3, &[], &[1]),
            raw_tensor("V", 1, &[3, 1], &f32_bytes(&[1.0, 2.0, 3.0])),
            raw_tensor("attn.in_proj_bias", 1, &[1], &f32_bytes(&[0.0])),
        ];
        Model::parse(&model(&nodes.map(|n| n), &inits)).unwrap()
    }

    #[test]
    fn finds_and_names_linear_weights() {
        let m = quantized_model();
        let l = linear_weights(&m).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[0],
            LinearWeight {
                weight: "W_quantized".into(),
                scale: Some("W_scale".into()),
                zero_point: Some("W_zero_point".into()),
                bias: Some("lin.bias".into()),
                logical: Some("lin.weight".into()),
                uses: 2,
            }
        );
        assert_eq!(l[1].weight, "V");
        assert_eq!(l[1].logical.as_deref(), Some("attn.in_proj_weight"));
        assert_eq!(l[1].uses, 1);
    }

    #[test]
    fn dequantizes_and_transposes() {
        let m = quantized_model();
        let p = parameters(&m).unwrap();
        let names: Vec<&str> = p.keys().map(String::as_str).collect();
        assert_eq!(names, vec!["attn.in_proj_bias", "attn.in_proj_weight", "lin.bias", "lin.weight"]);
        let w = &p["lin.weight"];
        assert_eq!(w.dims, vec![3, 2]);
        // q [[1,-2,3],[-4,5,127]], zp 1, scale 0.5 -> [[0,-1.5,1],[-2.5,2,63]], transposed
        assert_eq!(w.to_f32().unwrap(), vec![0.0, -2.5, -1.5, 2.0, 1.0, 63.0]);
        assert_eq!(p["attn.in_proj_weight"].dims, vec![1, 3]);
    }

    #[test]
    fn per_column_scales() {
        let q = Tensor { name: "q_quantized".into(), dtype: DataType::Int8, dims: vec![2, 2], data: vec![1, 2, 3, 4] };
        let s = Tensor { name: "s".into(), dtype: DataType::Float, dims: vec![2], data: f32_bytes(&[1.0, 10.0]) };
        let d = dequantize(&q, &s, None).unwrap();
        assert_eq!(d.name, "q");
        assert_eq!(d.to_f32().unwrap(), vec![1.0, 20.0, 3.0, 40.0]);
        let bad = Tensor { dims: vec![3], data: f32_bytes(&[1.0; 3]), ..s };
        assert!(dequantize(&q, &bad, None).is_err());
    }

    #[test]
    fn fused_dequantize_and_transpose_is_the_two_steps() {
        // per-column scales and zero points, int8 and uint8
        let s = Tensor { name: "s".into(), dtype: DataType::Float, dims: vec![2], data: f32_bytes(&[0.5, 3.0]) };
        for (dtype, z) in [(DataType::Int8, vec![1, 0xff]), (DataType::Uint8, vec![128, 3])] {
            let q = Tensor { name: "q".into(), dtype, dims: vec![3, 2], data: vec![1, 0xfe, 3, 4, 0x80, 127] };
            let z = Tensor { name: "z".into(), dtype, dims: vec![2], data: z };
            let two_steps = transpose_2d(&dequantize(&q, &s, Some(&z)).unwrap(), "w".into()).unwrap();
            assert_eq!(dequantize_as(&q, &s, Some(&z), Some("w".into())).unwrap(), two_steps);
        }
    }

    #[test]
    fn bias_to_weight_names() {
        assert_eq!(weight_name_for_bias("m.head.bias").as_deref(), Some("m.head.weight"));
        assert_eq!(
            weight_name_for_bias("pn.text.attn.self_attn.in_proj_bias").as_deref(),
            Some("pn.text.attn.self_attn.in_proj_weight")
        );
        assert_eq!(weight_name_for_bias("gamma"), None);
    }
}
