//! Kokoro's network as its ONNX file lays it out: the nodes in file (topological) order, each run
//! on tch tensors by [`super::ops`], the values held in numbered slots and dropped after their last
//! use. The int8 nodes (`DynamicQuantizeLinear`, `MatMulInteger`, `ConvInteger`,
//! `DynamicQuantizeLSTM`) run on our own int8 kernels ([`crate::gemm`]) in [`Precision::Int8`], or
//! on the dequantized weights in float in [`Precision::Fp32`] (see docs/kokoro-architecture.md).

use std::collections::HashMap;

use tch::{Device, Tensor};

use super::exec_int8::Prep;
use super::ops::to_tch;
use crate::onnx::{Model, Node, Tensor as OnnxTensor};
use crate::Precision;

pub(super) struct Op {
    pub node: Node,
    /// Slot of each input (None: an omitted optional input)
    pub inputs: Vec<Option<usize>>,
    /// Slot of each output (None: an output nobody asked for)
    pub outputs: Vec<Option<usize>>,
    pub prep: Prep,
    /// Slots whose last reader is this node: dropped after it runs
    pub frees: Vec<usize>,
}

pub(super) struct Graph {
    pub ops: Vec<Op>,
    /// The initializers, by slot (None for computed values)
    pub consts: Vec<Option<Tensor>>,
    pub slot: HashMap<String, usize>,
    pub device: Device,
    pub precision: Precision,
}

impl Graph {
    /// The graph of `model` for `precision` on `device`, keeping alive the values named in `keep`
    /// (besides the graph outputs) so that [`Graph::run`] can return them.
    pub fn new(model: &Model, device: Device, precision: Precision, keep: &[&str]) -> Result<Graph, String> {
        let g = &model.graph;
        let inits: HashMap<&str, &OnnxTensor> = g.initializers.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut slot: HashMap<String, usize> = HashMap::new();
        let mut consts: Vec<Option<Tensor>> = Vec::new();
        let mut id = |name: &str, consts: &mut Vec<Option<Tensor>>| -> usize {
            if let Some(&s) = slot.get(name) {
                return s;
            }
            let s = consts.len();
            consts.push(None);
            slot.insert(name.to_string(), s);
            s
        };
        for name in &g.inputs {
            id(name, &mut consts);
        }
        // Which initializers only feed prepared weights (not kept as tensors)
        let mut ops = Vec::with_capacity(g.nodes.len());
        for node in &g.nodes {
            let inputs =
                node.inputs.iter().map(|n| if n.is_empty() { None } else { Some(id(n, &mut consts)) }).collect();
            let outputs =
                node.outputs.iter().map(|n| if n.is_empty() { None } else { Some(id(n, &mut consts)) }).collect();
            let prep = super::exec_int8::prepare(node, &inits, precision, device)?;
            ops.push(Op { node: node.clone(), inputs, outputs, prep, frees: Vec::new() });
        }
        for name in &g.outputs {
            id(name, &mut consts);
        }
        // Constants: every initializer some node reads as a tensor
        for op in &ops {
            let prepared = !matches!(op.prep, Prep::None);
            for (i, name) in op.node.inputs.iter().enumerate() {
                if name.is_empty() {
                    continue;
                }
                // A prepared node reads its weight (input 1; LSTM: 1 and 2) from `prep`.
                let weight = match op.node.op_type.as_str() {
                    "MatMulInteger" | "ConvInteger" => i == 1,
                    "DynamicQuantizeLSTM" => i == 1 || i == 2,
                    _ => false,
                };
                if prepared && weight {
                    continue;
                }
                if let Some(t) = inits.get(name.as_str()) {
                    let s = slot[name.as_str()];
                    if consts[s].is_none() {
                        consts[s] = Some(to_tch(t)?.to_device(device));
                    }
                }
            }
        }
        // Last uses
        let mut last: Vec<Option<usize>> = vec![None; consts.len()];
        for (i, op) in ops.iter().enumerate() {
            for s in op.inputs.iter().flatten() {
                last[*s] = Some(i);
            }
        }
        let mut pinned: Vec<bool> = vec![false; consts.len()];
        for name in g.outputs.iter().map(String::as_str).chain(keep.iter().copied()) {
            match slot.get(name) {
                Some(&s) => pinned[s] = true,
                None => return Err(format!("the graph has no value `{name}`")),
            }
        }
        for (s, l) in last.iter().enumerate() {
            if let (Some(i), false, true) = (l, pinned[s], consts[s].is_none()) {
                ops[*i].frees.push(s);
            }
        }
        Ok(Graph { ops, consts, slot, device, precision })
    }

    /// Runs the graph on `inputs` (by name) and returns the values named in `want` (graph outputs
    /// or values kept at [`Graph::new`]); the values named in `replace` are replaced as soon as they
    /// are computed (the fixture tests feed a stage onnxruntime's output of the stage before).
    pub fn run(
        &self,
        inputs: &[(&str, Tensor)],
        want: &[&str],
        replace: &[(&str, Tensor)],
    ) -> Result<Vec<Tensor>, String> {
        let mut replaced: HashMap<usize, &Tensor> = HashMap::new();
        for (name, t) in replace {
            let s = *self.slot.get(*name).ok_or_else(|| format!("the graph has no value `{name}`"))?;
            replaced.insert(s, t);
        }
        // KOKORO_PROFILE=1: seconds per operator type on stderr (the benchmarks' breakdown)
        let mut profile: Option<HashMap<&str, f64>> = std::env::var_os("KOKORO_PROFILE").map(|_| HashMap::new());
        let mut vals: Vec<Option<Tensor>> = (0..self.consts.len()).map(|_| None).collect();
        for (name, t) in inputs {
            let s = *self.slot.get(*name).ok_or_else(|| format!("the graph has no input `{name}`"))?;
            vals[s] = Some(t.to_device(self.device));
        }
        for op in &self.ops {
            let ins: Vec<Option<&Tensor>> =
                op.inputs.iter().map(|s| s.and_then(|s| vals[s].as_ref().or(self.consts[s].as_ref()))).collect();
            for (i, (name, v)) in op.node.inputs.iter().zip(&ins).enumerate() {
                if !name.is_empty() && v.is_none() && !matches!(op.prep, Prep::None) && (i == 1 || i == 2) {
                    continue; // a prepared weight
                }
                if !name.is_empty() && v.is_none() {
                    return Err(format!("node {}: input `{name}` has no value", op.node.name));
                }
            }
            let t0 = profile.as_ref().map(|_| std::time::Instant::now());
            let outs = super::ops::run(&op.node, &op.prep, self.device, self.precision, &ins)
                .map_err(|e| format!("node {} ({}): {e}", op.node.name, op.node.op_type))?;
            if let (Some(p), Some(t0)) = (profile.as_mut(), t0) {
                *p.entry(op.node.op_type.as_str()).or_insert(0.0) += t0.elapsed().as_secs_f64();
            }
            for (s, t) in op.outputs.iter().zip(outs) {
                if let Some(s) = s {
                    vals[*s] = Some(match replaced.get(s) {
                        Some(r) => r.to_device(self.device),
                        None => t,
                    });
                }
            }
            for &s in &op.frees {
                vals[s] = None;
            }
        }
        if let Some(p) = profile {
            let mut v: Vec<_> = p.into_iter().collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            let line: Vec<String> = v.iter().take(12).map(|(k, s)| format!("{k} {s:.3}")).collect();
            eprintln!("kokoro profile (s): {}", line.join(", "));
        }
        want.iter()
            .map(|name| {
                let s = *self.slot.get(*name).ok_or_else(|| format!("the graph has no value `{name}`"))?;
                vals[s]
                    .as_ref()
                    .or(self.consts[s].as_ref())
                    .map(Tensor::shallow_clone)
                    .ok_or_else(|| format!("value `{name}` was not kept"))
            })
            .collect()
    }
}
