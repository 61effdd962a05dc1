//! The OOV net (`oov.onnx`, 734,936 parameters) natively in tch: a 4-layer pre-norm transformer
//! encoder over the word's characters (d 128, 4 heads, GELU feed-forward 384), a final LayerNorm
//! and a head giving `slots` (4) CTC frames of 54 classes per input character; argmax, collapse
//! repeats, drop blanks (0). It is the text front end's ([`speechstream_text`]) guesser for the
//! words no lexicon has ([`speechstream_text::Oov`]); [`load_front_end`] builds the front end
//! with it.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use speechstream_text::{FrontEnd, G2pError};
use tch::{Device, Kind, Tensor};

use crate::onnx::Model;
use crate::quant::parameters;

/// The English front end of one accent from the hibari assets directory (`.cache/hibari`), with
/// the OOV net of that accent (`oov.onnx`, or `oov_gb.onnx` when `british`) on `device`
/// guessing the words no lexicon has: the front end the engine runs.
pub fn load_front_end(dir: &Path, device: Device, british: bool) -> Result<FrontEnd, G2pError> {
    let net = OovNet::load(&dir.join(if british { "oov_gb.onnx" } else { "oov.onnx" }), device)?;
    FrontEnd::load_accent(dir, british, Some(Box::new(net)))
}

struct Layer {
    n1: (Tensor, Tensor),
    in_w: Tensor,
    in_b: Tensor,
    out_w: Tensor,
    out_b: Tensor,
    n2: (Tensor, Tensor),
    l1_w: Tensor,
    l1_b: Tensor,
    l2_w: Tensor,
    l2_b: Tensor,
}

/// The OOV net of one accent, loaded on a device.
pub struct OovNet {
    cin: HashMap<char, i64>,
    cout: Vec<String>,
    maxlen: usize,
    slots: i64,
    emb: Tensor,
    pos: Tensor,
    layers: Vec<Layer>,
    norm: (Tensor, Tensor),
    head_w: Tensor,
    head_b: Tensor,
    device: Device,
}

const D: i64 = 128;
const HEADS: i64 = 4;

impl OovNet {
    /// Loads `<dir>/<name>.onnx` and `<dir>/<name>.json` (name `oov` or `oov_gb`).
    pub fn load(onnx: &Path, device: Device) -> Result<OovNet, G2pError> {
        let meta_path = onnx.with_extension("json");
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(&meta_path).map_err(|e| G2pError::Io(meta_path.display().to_string(), e))?,
        )
        .map_err(|e| G2pError::Data(format!("{}: {e}", meta_path.display())))?;
        let list = |k: &str| -> Vec<String> {
            meta.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        let cin =
            list("in").iter().enumerate().filter_map(|(i, c)| c.chars().next().map(|ch| (ch, i as i64 + 1))).collect();
        let cout = list("out");
        let maxlen = meta.get("maxlen").and_then(Value::as_u64).unwrap_or(24) as usize;
        let slots = meta.get("slots").and_then(Value::as_i64).unwrap_or(4);
        let model = Model::load(onnx).map_err(|e| G2pError::Data(format!("{}: {e}", onnx.display())))?;
        let params = parameters(&model).map_err(|e| G2pError::Data(format!("{}: {e}", onnx.display())))?;
        let get = |name: &str| -> Result<Tensor, G2pError> {
            let t = params.get(name).ok_or_else(|| G2pError::Data(format!("oov net: no parameter {name}")))?;
            let data = t.to_f32().map_err(|e| G2pError::Data(format!("{name}: {e}")))?;
            let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
            Ok(Tensor::from_slice(&data).reshape(&dims).to_device(device))
        };
        let mut layers = Vec::new();
        for i in 0.. {
            let p = format!("m.layers.{i}.");
            if !params.contains_key(&format!("{p}norm1.weight")) {
                break;
            }
            layers.push(Layer {
                n1: (get(&format!("{p}norm1.weight"))?, get(&format!("{p}norm1.bias"))?),
                in_w: get(&format!("{p}self_attn.in_proj_weight"))?,
                in_b: get(&format!("{p}self_attn.in_proj_bias"))?,
                out_w: get(&format!("{p}self_attn.out_proj.weight"))?,
                out_b: get(&format!("{p}self_attn.out_proj.bias"))?,
                n2: (get(&format!("{p}norm2.weight"))?, get(&format!("{p}norm2.bias"))?),
                l1_w: get(&format!("{p}linear1.weight"))?,
                l1_b: get(&format!("{p}linear1.bias"))?,
                l2_w: get(&format!("{p}linear2.weight"))?,
                l2_b: get(&format!("{p}linear2.bias"))?,
            });
        }
        Ok(OovNet {
            cin,
            cout,
            maxlen,
            slots,
            emb: get("m.emb.weight")?,
            pos: get("m.pos")?,
            layers,
            norm: (get("m.norm.weight")?, get("m.norm.bias")?),
            head_w: get("m.head.weight")?,
            head_b: get("m.head.bias")?,
            device,
        })
    }

    /// Input ids of a word (unknown chars dropped, cut to `maxlen`).
    pub fn ids(&self, word: &str) -> Vec<i64> {
        word.chars().filter_map(|c| self.cin.get(&c).copied()).take(self.maxlen).collect()
    }

    /// Raw CTC class ids (`L * slots` of them), as the ONNX graph's `ids` output.
    pub fn forward_ids(&self, ids: &[i64]) -> Vec<i64> {
        let _g = tch::no_grad_guard();
        let l = ids.len() as i64;
        let x = Tensor::from_slice(ids).to_device(self.device);
        let mut h = self.emb.index_select(0, &x) + self.pos.narrow(0, 0, l);
        let dh = D / HEADS;
        for ly in &self.layers {
            let a = h.layer_norm([D], Some(&ly.n1.0), Some(&ly.n1.1), 1e-5, false);
            let qkv = a.linear(&ly.in_w, Some(&ly.in_b));
            let split = |k: i64| qkv.narrow(1, k * D, D).reshape([l, HEADS, dh]).transpose(0, 1);
            let (q, k, v) = (split(0), split(1), split(2));
            let scores = q.matmul(&k.transpose(1, 2)) / (dh as f64).sqrt();
            let att = scores.softmax(-1, Kind::Float).matmul(&v).transpose(0, 1).reshape([l, D]);
            h = &h + att.linear(&ly.out_w, Some(&ly.out_b));
            let b = h.layer_norm([D], Some(&ly.n2.0), Some(&ly.n2.1), 1e-5, false);
            let f = b.linear(&ly.l1_w, Some(&ly.l1_b)).gelu("none").linear(&ly.l2_w, Some(&ly.l2_b));
            h = &h + f;
        }
        let h = h.layer_norm([D], Some(&self.norm.0), Some(&self.norm.1), 1e-5, false);
        let logits = h.linear(&self.head_w, Some(&self.head_b)).reshape([l * self.slots, -1]);
        let out = logits.argmax(-1, false).to_device(Device::Cpu);
        Vec::<i64>::try_from(&out).unwrap_or_default()
    }

    /// Phonemes for a word, or None when no character is known.
    pub fn phonemize(&self, word: &str) -> Option<String> {
        let ids = self.ids(word);
        if ids.is_empty() {
            return None;
        }
        let mut out = String::new();
        let mut prev = 0;
        for i in self.forward_ids(&ids) {
            if i != prev && i != 0 {
                if let Some(c) = self.cout.get(i as usize - 1) {
                    out.push_str(c);
                }
            }
            prev = i;
        }
        Some(out)
    }
}

impl speechstream_text::Oov for OovNet {
    fn phonemize(&mut self, word: &str) -> Option<String> {
        OovNet::phonemize(self, word)
    }
}
