//! The hibari acoustic network natively in tch: text encoders, duration predictor, length
//! regulation, prosody net, decoder and head, as described in shared/docs/hibari-architecture.md,
//! plus the waveform through [`crate::dsp`].
//!
//! Use: [`Hibari::load`] once; per sentence [`Hibari::prosody`] (global: encoders, durations,
//! prosody net, f0, pulse spectrum), then [`Hibari::decode`] for any frame range (exact: it runs the
//! decoder on the range plus [`DECODER_CONTEXT`] frames of context each side) or
//! [`Hibari::synthesize_chunk`] for the audio of a frame range, so the first chunk's audio can be
//! sent before the rest of the sentence is decoded. Batched prosody (several sentences padded,
//! with the masks of the architecture doc §7) is [`Hibari::prosody_batch`]; batched decoding
//! (frame ranges of several sentences in one pass) is [`Hibari::decode_batch`] and
//! [`Hibari::synthesize_chunks`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::str::FromStr;

use tch::{Device, Kind, Tensor};

use crate::cpu::Level;
use crate::dsp::{Dsp, SpectralFrames, HOP, N_BINS};
use crate::kernels::{dwconv, f32s, f32s_mut, layernorm_quantize, quantize, Epilogue, LinearF32, Out, QWeight};
use crate::noise::NoiseSource;
use crate::onnx::{Model, OnnxError};
use crate::quant::{linear_weights, parameters};

/// Fine frames of context each side that make a decoder window exact (9 k7 convs: 9 × 3).
pub const DECODER_CONTEXT: usize = 27;
/// Zero frames between two windows packed into one decoder pass ([`Hibari::decode_batch`]): the
/// half-width of the decoder's k7 convs, so no conv reads across into the next window.
pub const PACK_GAP: usize = 3;
/// Rows below which libtorch's CPU GEMM (MKL) takes another path whose rounding differs (M of
/// 1–3, 5–7, 9–11 here); with at least this many, a row's result does not depend on the others.
/// The decoder pads its Linear inputs to this, so a window decodes bit for bit the same alone
/// as in any batch (CPU; measured, not promised by libtorch).
const MIN_GEMM_ROWS: usize = 12;
/// Samples per fine frame (12.5 ms at 24 kHz).
pub const SAMPLES_PER_FRAME: usize = HOP as usize;
const PRO_DILATIONS: [i64; 6] = [1, 2, 4, 8, 1, 2];
const LN_EPS: f64 = 1e-5;
/// Number of parameters in a hibari voice file.
pub const N_PARAMETERS: usize = 6_152_898;

#[derive(Debug)]
pub enum HibariError {
    Io(std::io::Error),
    Onnx(OnnxError),
    Json(String),
    Invalid(String),
}

impl fmt::Display for HibariError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HibariError::Io(e) => write!(f, "{e}"),
            HibariError::Onnx(e) => write!(f, "{e}"),
            HibariError::Json(e) => write!(f, "vocab.json: {e}"),
            HibariError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HibariError {}

impl From<OnnxError> for HibariError {
    fn from(e: OnnxError) -> Self {
        HibariError::Onnx(e)
    }
}

impl From<std::io::Error> for HibariError {
    fn from(e: std::io::Error) -> Self {
        HibariError::Io(e)
    }
}

/// The global, per-sentence part of the synthesis: everything before the decoder.
#[derive(Debug)]
pub struct Prosody {
    pub ids: Vec<i64>,
    pub speed: f32,
    /// s_i, the predicted ln(1 + duration) per token
    pub log_durations: Vec<f32>,
    /// coarse frames (25 ms) per token
    pub durations: Vec<i64>,
    /// F, the number of fine frames (12.5 ms); the audio has F · 300 samples
    pub frames: usize,
    /// [F] Hz (the network's f0 output)
    pub f0: Tensor,
    /// [F] the internal noise-level channel n
    pub n: Tensor,
    /// decoder input [F, 130] (time-major)
    z: Tensor,
    /// STFT of the pulse train of the whole sentence, (re, im) [F, 601]
    pulse: (Tensor, Tensor),
    /// the int8 decoder's rows kept for this sentence's next chunk
    dec: RefCell<Option<DecState>>,
}

impl Prosody {
    /// Samples of audio for the whole sentence.
    pub fn samples(&self) -> usize {
        self.frames * SAMPLES_PER_FRAME
    }

    /// First fine frame of each token (F-based timing: token i spans frames
    /// `starts[i] .. starts[i] + 2 d_i`).
    pub fn token_starts(&self) -> Vec<usize> {
        let mut acc = 0usize;
        self.durations
            .iter()
            .map(|&d| {
                let s = acc;
                acc += 2 * d as usize;
                s
            })
            .collect()
    }
}

/// Network outputs for fine frames `start .. start + n`, each [n, 601] float32 (time-major), f0 [n].
#[derive(Debug)]
pub struct Spectra {
    pub start: usize,
    pub lh: Tensor,
    pub theta: Tensor,
    pub ln: Tensor,
    pub lr: Tensor,
    pub phi: Tensor,
    pub f0: Tensor,
}

impl Spectra {
    /// The five spectral outputs in the order lh, theta, ln, lr, phi.
    pub fn outputs(&self) -> [&Tensor; 5] {
        [&self.lh, &self.theta, &self.ln, &self.lr, &self.phi]
    }

    /// Frames a..a + n of sentence `p`, output i (in [`Spectra::outputs`] order) from `part(i)`.
    fn from_parts(p: &Prosody, a: usize, n: i64, part: impl Fn(usize) -> Tensor) -> Spectra {
        Spectra {
            start: a,
            lh: part(0),
            theta: part(1),
            ln: part(2),
            lr: part(3),
            phi: part(4),
            f0: p.f0.narrow(0, a as i64, n),
        }
    }

    fn frames(&self) -> SpectralFrames<'_> {
        SpectralFrames { lh: &self.lh, theta: &self.theta, ln: &self.ln, lr: &self.lr, phi: &self.phi }
    }
}

/// Frame ranges for streaming: a first chunk of `first` frames, then chunks of `size`.
pub fn chunk_ranges(frames: usize, first: usize, size: usize) -> Vec<Range<usize>> {
    let (first, size) = (first.max(1), size.max(1));
    let mut out = Vec::new();
    let mut a = 0;
    while a < frames {
        let b = (a + if out.is_empty() { first } else { size }).min(frames);
        out.push(a..b);
        a = b;
    }
    out
}

/// Arithmetic of the network's Linear layers (45 matrices, 77 uses; everything else is fp32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// The shipped int8 weights with int8 activations (our own kernels, [`crate::gemm`], exact
    /// int32 accumulation), as the packaged onnxruntime graph computes them, but with one
    /// activation scale per row (frame or token) instead of per tensor, so a frame's output
    /// depends on that frame's inputs only. CPU only. Not the fp32 graph's math (like
    /// onnxruntime's int8 graph, it is as far from it as it is from onnxruntime's int8 output,
    /// see `tests/hibari_int8.rs`), but exact with itself: the row-wise kernels of
    /// [`crate::kernels`] compute every row as they would alone, so chunks equal the whole
    /// sentence and batches equal single items bit for bit, on every CPU level ([`crate::cpu`]).
    Int8,
    /// Weights dequantized to float32 (W = q·scale), float activations: the exact target of the
    /// fp32 graph (hibari-architecture.md §6).
    Fp32,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::Int8 => "int8",
            Precision::Fp32 => "fp32",
        })
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "int8" => Ok(Precision::Int8),
            "fp32" => Ok(Precision::Fp32),
            _ => Err(format!("precision {s:?}: int8 or fp32")),
        }
    }
}

/// What [`Hibari::set_fastest_precision`] measured and chose.
#[derive(Clone, Copy, Debug)]
pub struct PrecisionChoice {
    pub precision: Precision,
    /// The int8 kernels' level ([`crate::cpu::level`]).
    pub level: crate::cpu::Level,
    /// Best time of the probe (one decoder block on 128 frames) in each precision; None where
    /// not measured (CUDA: fp32 without measuring).
    pub int8_s: Option<f64>,
    pub fp32_s: Option<f64>,
}

/// Frame ranges for streaming with growing chunks: `first` frames, then `size`, then `max` frames
/// per chunk (`max` below `size` counts as `size`). Each chunk decodes [`DECODER_CONTEXT`] extra
/// frames on each side, so the fewer chunks after the first, the less is decoded twice; the
/// client already has audio to play by then.
///
/// A last piece shorter than `size` joins the chunk before it (never the first chunk): a chunk
/// costs its decoder context rows and a DSP pass whatever its length, and by then the client has
/// audio to play.
pub fn stream_ranges(frames: usize, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
    let (first, size) = (first.max(1), size.max(1));
    let max = max.max(size);
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut a = 0;
    while a < frames {
        let n = match out.len() {
            0 => first,
            1 => size,
            _ => max,
        };
        let mut b = (a + n).min(frames);
        if !out.is_empty() && frames - b < size {
            b = frames;
        }
        out.push(a..b);
        a = b;
    }
    out
}

#[cfg(test)]
mod stream_ranges_tests {
    use super::stream_ranges;

    #[test]
    fn a_short_tail_joins_the_chunk_before() {
        assert_eq!(stream_ranges(320, 16, 80, 200), vec![0..16, 16..96, 96..320]);
        assert_eq!(stream_ranges(500, 16, 80, 200), vec![0..16, 16..96, 96..296, 296..500]);
        assert_eq!(stream_ranges(600, 16, 80, 200), vec![0..16, 16..96, 96..296, 296..496, 496..600]);
        assert_eq!(stream_ranges(150, 16, 80, 200), vec![0..16, 16..150]);
        assert_eq!(stream_ranges(20, 16, 80, 200), vec![0..16, 16..20]);
        assert_eq!(stream_ranges(10, 16, 80, 200), vec![0..10]);
        for frames in 1..700 {
            let r = stream_ranges(frames, 16, 80, 200);
            assert_eq!(r[0].start, 0);
            assert_eq!(r.last().map(|r| r.end), Some(frames));
            assert!(r.windows(2).all(|w| w[0].end == w[1].start && w[1].end > w[1].start), "{frames}: {r:?}");
            assert!(r.iter().skip(1).all(|c| c.len() < 200 + 80), "{frames}: {r:?}");
            assert!(r[0].len() == frames.min(16));
        }
    }
}

/// The hibari network's weights on one device.
pub struct Hibari {
    device: Device,
    precision: Precision,
    params: HashMap<String, Tensor>,
    /// the int8 path's weights (None in fp32)
    int8: Option<Int8>,
    /// weight scale and bias name of each quantized Linear weight of the voice file, by weight name
    weight_scales: HashMap<String, (f64, String)>,
    vocab: HashMap<char, i64>,
    dsp: Dsp,
}

impl fmt::Debug for Hibari {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hibari").field("device", &self.device).field("params", &self.params.len()).finish()
    }
}

fn ln(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let c = *x.size().last().expect("rank >= 1");
    x.layer_norm([c], Some(w), Some(b), LN_EPS, false)
}

impl Hibari {
    /// Loads `hibari.onnx` and `vocab.json` from a hibari assets directory (`.cache/hibari`).
    pub fn load(assets_dir: impl AsRef<Path>, device: Device) -> Result<Hibari, HibariError> {
        let dir = assets_dir.as_ref();
        let mut h = Hibari::from_onnx(dir.join("hibari.onnx"), device)?;
        let text = std::fs::read_to_string(dir.join("vocab.json"))?;
        h.vocab = parse_vocab(&text)?;
        Ok(h)
    }

    /// Loads another voice of the assets directory: `file` is a whole model file of hibari's graph
    /// (a voice *is* a model, see NOTES.md), with the directory's `vocab.json`.
    pub fn load_voice(assets_dir: impl AsRef<Path>, file: &str, device: Device) -> Result<Hibari, HibariError> {
        let dir = assets_dir.as_ref();
        let mut h = Hibari::from_onnx(dir.join(file), device)?;
        let text = std::fs::read_to_string(dir.join("vocab.json"))?;
        h.vocab = parse_vocab(&text)?;
        Ok(h)
    }

    /// Loads the weights of a hibari voice file (int8 as shipped, or a dequantized fp32 copy);
    /// no vocabulary (use [`Hibari::load`] for [`Hibari::ids`]).
    pub fn from_onnx(path: impl AsRef<Path>, device: Device) -> Result<Hibari, HibariError> {
        let model = Model::load(path)?;
        let raw = parameters(&model)?;
        let inits = model.initializer_map();
        let mut weight_scales = HashMap::new();
        for l in linear_weights(&model)? {
            if let (Some(name), Some(scale), Some(bias)) = (&l.logical, &l.scale, &l.bias) {
                let zero = match l.zero_point.as_deref().map(|z| inits[z].to_i64()) {
                    Some(z) => z?.iter().all(|&v| v == 0),
                    None => true,
                };
                let s = inits[scale.as_str()].to_f32()?;
                if zero && s.len() == 1 {
                    weight_scales.insert(name.clone(), (f64::from(s[0]), bias.clone()));
                }
            }
        }
        let mut params = HashMap::new();
        let mut count = 0;
        for (name, t) in raw {
            if t.dtype != crate::onnx::DataType::Float || t.data.len() != t.numel() * 4 {
                return Err(HibariError::Invalid(format!("{name} is not a float tensor of its shape")));
            }
            count += t.numel();
            let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
            // The file's little-endian floats (x86, ARM) copied as they are: one copy, no Vec<f32>.
            let tensor = if cfg!(target_endian = "little") {
                Tensor::from_data_size(&t.data, &dims, Kind::Float)
            } else {
                Tensor::from_slice(&t.to_f32()?).view(dims.as_slice())
            };
            params.insert(name, tensor.to_device(device));
        }
        if count != N_PARAMETERS {
            return Err(HibariError::Invalid(format!("{count} parameters, not hibari's {N_PARAMETERS}")));
        }
        let h = Hibari {
            device,
            precision: Precision::Fp32,
            params,
            int8: None,
            weight_scales,
            vocab: HashMap::new(),
            dsp: Dsp::new(device),
        };
        h.check_names()?;
        Ok(h)
    }

    /// The same network in another precision (loading gives [`Precision::Fp32`]). Int8 needs the
    /// CPU and a voice file with int8 weights (zero points 0); otherwise this is an error.
    pub fn set_precision(&mut self, precision: Precision) -> Result<(), HibariError> {
        let _g = tch::no_grad_guard();
        self.int8 = None;
        self.precision = Precision::Fp32;
        if precision == Precision::Fp32 {
            return Ok(());
        }
        if self.device != Device::Cpu {
            return Err(HibariError::Invalid(format!("int8 needs the CPU, not {:?}", self.device)));
        }
        if self.weight_scales.len() < 45 {
            return Err(HibariError::Invalid(format!("{} int8 Linear weights, not 45", self.weight_scales.len())));
        }
        self.int8 = Some(Int8::new(self, crate::cpu::level())?);
        self.precision = precision;
        Ok(())
    }

    /// [`Hibari::set_precision`] by value.
    pub fn with_precision(mut self, precision: Precision) -> Result<Hibari, HibariError> {
        self.set_precision(precision)?;
        Ok(self)
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Int8 with its matmuls on `level`'s kernels (or the best the CPU has below it) instead of
    /// [`crate::cpu::level`]'s: every level gives the same bits, which tests check with this.
    pub fn set_int8_kernels(&mut self, level: Level) -> Result<(), HibariError> {
        self.set_precision(Precision::Int8)?;
        self.int8 = Some(Int8::new(self, level)?);
        Ok(())
    }

    /// `--precision auto`: on the CPU, times one decoder block (the network's dominant cost:
    /// the decoder's 8 blocks are ~80% of its multiply-adds) on 128 frames in int8 and in fp32,
    /// best of 5 each, and keeps the faster; on CUDA, fp32 (int8 is CPU only). Which one wins
    /// depends on the CPU's instructions and on libtorch's build for it, so it is measured, not
    /// assumed (a few ms at start-up).
    pub fn set_fastest_precision(&mut self) -> Result<PrecisionChoice, HibariError> {
        let _g = tch::no_grad_guard();
        let level = crate::cpu::level();
        if self.device != Device::Cpu || self.weight_scales.len() < 45 {
            self.set_precision(Precision::Fp32)?;
            return Ok(PrecisionChoice { precision: Precision::Fp32, level, int8_s: None, fp32_s: None });
        }
        self.set_precision(Precision::Int8)?;
        let Some(int8) = self.int8.take() else { unreachable!("int8 weights were just built") };
        let x = Tensor::randn([128, 256], (Kind::Float, Device::Cpu));
        let fp32_x = x.transpose(0, 1).unsqueeze(0).contiguous();
        let time = |f: &dyn Fn()| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64()
        };
        let (mut int8_s, mut fp32_s) = (f64::INFINITY, f64::INFINITY);
        // Round 0 warms both up (allocator, libtorch's first-call set-up) and is not counted.
        for round in 0..6 {
            let f = time(&|| {
                let _ = self.cnx("m.dec.0", &fp32_x, 7, 1, None);
            });
            let i = time(&|| {
                let mut y = x.copy();
                cnx_int8(int8.block("m.dec.0"), &mut y, &[128], 1, None);
            });
            if round > 0 {
                (fp32_s, int8_s) = (fp32_s.min(f), int8_s.min(i));
            }
        }
        let precision = if int8_s <= fp32_s { Precision::Int8 } else { Precision::Fp32 };
        (self.int8, self.precision) = match precision {
            Precision::Int8 => (Some(int8), precision),
            Precision::Fp32 => (None, precision),
        };
        Ok(PrecisionChoice { precision, level, int8_s: Some(int8_s), fp32_s: Some(fp32_s) })
    }

    /// nn.Linear `w` (+ `b`) on the last axis of x, in the model's precision.
    fn linear(&self, x: &Tensor, w: &str, b: &str) -> Tensor {
        x.linear(self.param(w), Some(self.param(b)))
    }

    fn check_names(&self) -> Result<(), HibariError> {
        let mut need: Vec<String> =
            vec!["m.text.emb.weight".into(), "pn.text.emb.weight".into(), "m.head.weight".into()];
        need.extend(
            ["pn.dur.0.weight", "pn.dur.2.weight", "pn.pro_in.weight", "pn.pro_out.weight", "m.dec_in.weight"]
                .map(String::from),
        );
        for p in ["m.text.attn", "pn.text.attn"] {
            need.push(format!("{p}.self_attn.in_proj_weight"));
            need.push(format!("{p}.self_attn.out_proj.weight"));
            need.push(format!("{p}.linear1.weight"));
            need.push(format!("{p}.linear2.weight"));
        }
        for i in 0..8 {
            need.push(format!("m.dec.{i}.pw1.weight"));
            need.push(format!("m.dec.{i}.pw2.weight"));
        }
        for i in 0..6 {
            need.push(format!("pn.pro.{i}.pw2.weight"));
        }
        match need.iter().find(|n| !self.params.contains_key(n.as_str())) {
            Some(n) => Err(HibariError::Invalid(format!("parameter {n} missing"))),
            None => Ok(()),
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn dsp(&self) -> &Dsp {
        &self.dsp
    }

    /// A parameter by its PyTorch name.
    pub fn param(&self, name: &str) -> &Tensor {
        self.params.get(name).unwrap_or_else(|| panic!("hibari parameter {name} missing"))
    }

    /// `[0, vocab[c] for c in phonemes if c in vocab, 0]` (needs [`Hibari::load`]).
    pub fn ids(&self, phonemes: &str) -> Vec<i64> {
        let mut ids = vec![0];
        ids.extend(phonemes.chars().filter_map(|c| self.vocab.get(&c).copied()));
        ids.push(0);
        ids
    }

    /// For each character of `phonemes`, the index in [`Hibari::ids`] of the token it became
    /// (`None` for characters the vocabulary drops); index 0 is the leading boundary token.
    pub fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        let mut next = 1;
        phonemes
            .chars()
            .map(|c| {
                self.vocab.contains_key(&c).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect()
    }

    fn p(&self, prefix: &str, name: &str) -> &Tensor {
        self.param(&format!("{prefix}.{name}"))
    }

    /// ConvNeXt block on x [B, C, T]; `mask` [B, 1, T] zeroes padded frames before the depthwise conv.
    fn cnx(&self, pre: &str, x: &Tensor, k: i64, dil: i64, mask: Option<&Tensor>) -> Tensor {
        let c = x.size()[1];
        let xin = match mask {
            Some(m) => x * m,
            None => x.shallow_clone(),
        };
        let u = xin.conv1d(self.p(pre, "dw.weight"), Some(self.p(pre, "dw.bias")), [1], [dil * (k - 1) / 2], [dil], c);
        let u = ln(&u.transpose(1, 2), self.p(pre, "norm.weight"), self.p(pre, "norm.bias"));
        let u = self.linear(&u, &format!("{pre}.pw1.weight"), &format!("{pre}.pw1.bias")).gelu("none");
        let u = self.linear(&u, &format!("{pre}.pw2.weight"), &format!("{pre}.pw2.bias")) * self.p(pre, "gamma");
        x + u.transpose(1, 2)
    }

    /// One pre-norm transformer pass on x [B, L, C]; `key_pad` [B, 1, 1, L] is true at padded keys.
    fn tl(&self, pre: &str, x: &Tensor, key_pad: Option<&Tensor>) -> Tensor {
        let (b, l, c) = x.size3().expect("[B, L, C]");
        let hd = c / 2;
        let h = ln(x, self.p(pre, "norm1.weight"), self.p(pre, "norm1.bias"));
        let qkv = self.linear(&h, &format!("{pre}.self_attn.in_proj_weight"), &format!("{pre}.self_attn.in_proj_bias"));
        let heads = |i: i64| qkv.narrow(2, i * c, c).view([b, l, 2, hd]).transpose(1, 2);
        let (q, k, v) = (heads(0), heads(1), heads(2));
        let mut s = q.matmul(&k.transpose(-2, -1)) / (hd as f64).sqrt();
        if let Some(m) = key_pad {
            s = s.masked_fill(m, f64::NEG_INFINITY);
        }
        let o = s.softmax(-1, Kind::Float).matmul(&v).transpose(1, 2).contiguous().view([b, l, c]);
        let x =
            x + self.linear(&o, &format!("{pre}.self_attn.out_proj.weight"), &format!("{pre}.self_attn.out_proj.bias"));
        let h = ln(&x, self.p(pre, "norm2.weight"), self.p(pre, "norm2.bias"));
        let f = self.linear(&h, &format!("{pre}.linear1.weight"), &format!("{pre}.linear1.bias")).gelu("none");
        &x + self.linear(&f, &format!("{pre}.linear2.weight"), &format!("{pre}.linear2.bias"))
    }

    /// Text encoder `pre` ("m.text" or "pn.text") on ids [B, L]; `mask` [B, L] float (1 = valid).
    fn encoder(&self, pre: &str, ids: &Tensor, passes: usize, mask: Option<&Tensor>) -> Tensor {
        let x = Tensor::embedding(self.p(pre, "emb.weight"), ids, -1, false, false).transpose(1, 2);
        let cmask = mask.map(|m| m.unsqueeze(1));
        let mut x = x;
        for i in 0..2 {
            x = self.cnx(&format!("{pre}.convs.{i}"), &x, 5, 1, cmask.as_ref());
        }
        let mut x = x.transpose(1, 2);
        let key_pad = mask.map(|m| m.eq(0.0).unsqueeze(1).unsqueeze(1));
        for _ in 0..passes {
            x = self.tl(&format!("{pre}.attn"), &x, key_pad.as_ref());
        }
        ln(&x, self.p(pre, "norm.weight"), self.p(pre, "norm.bias"))
    }

    /// Log-durations s [B, L] from H_p [B, L, 192].
    fn log_durations(&self, hp: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let x = match mask {
            Some(m) => hp.transpose(1, 2) * m.unsqueeze(1),
            None => hp.transpose(1, 2),
        };
        let y =
            x.conv1d(self.param("pn.dur.0.weight"), Some(self.param("pn.dur.0.bias")), [1], [1], [1], 1).gelu("none");
        y.conv1d(self.param("pn.dur.2.weight"), Some(self.param("pn.dur.2.bias")), [1], [0], [1], 1).squeeze_dim(1)
    }

    /// The global part of a sentence: encoders, durations (d = max(1, round((exp(s) − 1) / speed))
    /// in float32, in that order), length regulation, prosody net, f0, decoder input, pulse spectrum.
    pub fn prosody(&self, ids: &[i64], speed: f32) -> Prosody {
        self.prosody_batch(&[(ids, speed)]).pop().expect("one item")
    }

    /// [`Hibari::prosody`] with given durations (e.g. a reference's), for tests and forced timing.
    pub fn prosody_with_durations(&self, ids: &[i64], speed: f32, durations: &[i64]) -> Prosody {
        let _g = tch::no_grad_guard();
        assert_eq!(ids.len(), durations.len());
        if let Some(q) = &self.int8 {
            return self.prosody_int8(q, &[(ids, speed)], Some(durations)).pop().expect("one");
        }
        let t = Tensor::from_slice(ids).to_device(self.device).unsqueeze(0);
        let hm = self.encoder("m.text", &t, 4, None).squeeze_dim(0);
        let hp = self.encoder("pn.text", &t, 6, None);
        let s: Vec<f32> =
            Vec::try_from(&self.log_durations(&hp, None).squeeze_dim(0).to_device(Device::Cpu)).expect("f32");
        self.regulate(ids, speed, s, durations.to_vec(), &hm, &hp.squeeze_dim(0))
    }

    /// Several sentences at once, padded, with the masks of the architecture doc §7 on the phoneme
    /// axis (encoders and durations) and on the coarse axis (prosody net). Equal to one call of
    /// [`Hibari::prosody`] per item up to float rounding.
    pub fn prosody_batch(&self, items: &[(&[i64], f32)]) -> Vec<Prosody> {
        let _g = tch::no_grad_guard();
        if items.is_empty() {
            return Vec::new();
        }
        if let Some(q) = &self.int8 {
            return self.prosody_int8(q, items, None);
        }
        let lmax = items.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        assert!(lmax > 0, "empty id list");
        let batched = items.len() > 1 && items.iter().any(|(ids, _)| ids.len() != lmax);
        let mut flat = Vec::with_capacity(items.len() * lmax);
        let mut mask = Vec::with_capacity(items.len() * lmax);
        for (ids, _) in items {
            flat.extend_from_slice(ids);
            flat.extend(std::iter::repeat_n(0i64, lmax - ids.len()));
            mask.extend((0..lmax).map(|i| if i < ids.len() { 1f32 } else { 0f32 }));
        }
        let bsz = items.len() as i64;
        let t = Tensor::from_slice(&flat).view([bsz, lmax as i64]).to_device(self.device);
        let m = Tensor::from_slice(&mask).view([bsz, lmax as i64]).to_device(self.device);
        let m = batched.then_some(&m);
        let hm = self.encoder("m.text", &t, 4, m);
        let hp = self.encoder("pn.text", &t, 6, m);
        let s = self.log_durations(&hp, m).to_device(Device::Cpu);
        let mut regulated = Vec::new();
        for (b, (ids, speed)) in items.iter().enumerate() {
            let sb: Vec<f32> = Vec::try_from(&s.get(b as i64).narrow(0, 0, ids.len() as i64)).expect("f32");
            let d = durations(&sb, *speed);
            regulated.push((sb, d));
        }
        self.prosody_net_batch(items, regulated, &hm, &hp)
    }

    fn prosody_net_batch(
        &self,
        items: &[(&[i64], f32)],
        reg: Vec<(Vec<f32>, Vec<i64>)>,
        hm: &Tensor,
        hp: &Tensor,
    ) -> Vec<Prosody> {
        let tmax = reg.iter().map(|(_, d)| d.iter().sum::<i64>()).max().unwrap_or(0);
        let multi = reg.len() > 1 && reg.iter().any(|(_, d)| d.iter().sum::<i64>() != tmax);
        let mut idx_all = Vec::new();
        let mut mask = Vec::new();
        for (b, (_, d)) in reg.iter().enumerate() {
            let lmax = hp.size()[1];
            let mut idx: Vec<i64> = Vec::new();
            for (i, &di) in d.iter().enumerate() {
                idx.extend(std::iter::repeat_n(b as i64 * lmax + i as i64, di as usize));
            }
            let tb = idx.len();
            mask.extend((0..tmax as usize).map(|t| if t < tb { 1f32 } else { 0f32 }));
            let fill = *idx.last().expect("T >= 1");
            idx.extend(std::iter::repeat_n(fill, tmax as usize - tb));
            idx_all.extend(idx);
        }
        let bsz = reg.len() as i64;
        let idx = Tensor::from_slice(&idx_all).to_device(self.device);
        let c = hp.size()[2];
        let g = hp.reshape([-1, c]).index_select(0, &idx).view([bsz, tmax, c]).transpose(1, 2);
        let mc = Tensor::from_slice(&mask).view([bsz, 1, tmax]).to_device(self.device);
        let mc = multi.then_some(&mc);
        let mut g = g.conv1d(self.param("pn.pro_in.weight"), Some(self.param("pn.pro_in.bias")), [1], [0], [1], 1);
        for (i, dil) in PRO_DILATIONS.iter().enumerate() {
            g = self.cnx(&format!("pn.pro.{i}"), &g, 7, *dil, mc);
        }
        let p = g.conv1d(self.param("pn.pro_out.weight"), Some(self.param("pn.pro_out.bias")), [1], [0], [1], 1);
        let cm = hm.size()[2];
        let hm_flat = hm.reshape([-1, cm]);
        let idx_rows = idx.view([bsz, tmax]);
        let mut out = Vec::new();
        for (b, ((ids, speed), (s, d))) in items.iter().zip(reg).enumerate() {
            let tb: i64 = d.iter().sum();
            let pb = p.get(b as i64).narrow(1, 0, tb).transpose(0, 1); // [T, 4]
            let idx = idx_rows.get(b as i64).narrow(0, 0, tb);
            out.push(self.assemble(ids, *speed, s, d, &pb, &idx, |fine| hm_flat.index_select(0, fine)));
        }
        out
    }

    /// A sentence's [`Prosody`] from the prosody net's output `p` [T, 4] and `idx` [T], the row of
    /// `hm_rows`'s H_m of each coarse frame: f0 and n at the fine rate, the decoder input z, the
    /// pulse spectrum.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        &self,
        ids: &[i64],
        speed: f32,
        s: Vec<f32>,
        d: Vec<i64>,
        p: &Tensor,
        idx: &Tensor,
        hm_rows: impl Fn(&Tensor) -> Tensor,
    ) -> Prosody {
        let f0 = p.narrow(1, 0, 2).reshape([-1]) * 100.0;
        let n = p.narrow(1, 2, 2).reshape([-1]) * 5.0;
        let hmf = hm_rows(&idx.repeat_interleave_self_int(2, 0, None)); // [F, 128]
        let f0feat = ((f0.relu() + 1.0).log() / 5.0).unsqueeze(1);
        let nfeat = (&n / 5.0).unsqueeze(1);
        let z = Tensor::cat(&[hmf, f0feat, nfeat], 1);
        let frames = f0.size()[0] as usize;
        let pulses = self.dsp.pulses(&f0);
        let pulse = self.dsp.pulse_spectrum(&pulses, frames as i64);
        Prosody {
            ids: ids.to_vec(),
            speed,
            log_durations: s,
            durations: d,
            frames,
            f0,
            n,
            z,
            pulse,
            dec: RefCell::new(None),
        }
    }

    fn regulate(&self, ids: &[i64], speed: f32, s: Vec<f32>, d: Vec<i64>, hm: &Tensor, hp: &Tensor) -> Prosody {
        self.prosody_net_batch(&[(ids, speed)], vec![(s, d)], &hm.unsqueeze(0), &hp.unsqueeze(0)).pop().expect("one")
    }

    /// The network's outputs for fine frames [a, b) (exact: the decoder runs on [a−27, b+27)).
    pub fn decode(&self, p: &Prosody, a: usize, b: usize) -> Spectra {
        self.decode_batch(&[(p, a, b)]).pop().expect("one item")
    }

    /// [`Hibari::decode`] for several (sentence, frames [a, b)) items in one forward pass. The
    /// decoder windows [a−27, b+27) are packed along time into one sequence, [`PACK_GAP`] zero
    /// frames apart, and the residual stream is masked to zero in the gaps before every k7 conv
    /// (architecture doc §7, fine axis). The decoder is convolutional with per-frame norms only
    /// (§4.7, §8), so each window sees exactly the zeros it sees alone: equal to one call of
    /// [`Hibari::decode`] per item (bit for bit on the CPU, see `MIN_GEMM_ROWS`). The norm and
    /// head run on the kept frames only.
    pub fn decode_batch(&self, items: &[(&Prosody, usize, usize)]) -> Vec<Spectra> {
        let _g = tch::no_grad_guard();
        if items.is_empty() {
            return Vec::new();
        }
        if let Some(q) = &self.int8 {
            return self.decode_int8(q, items);
        }
        let gap = |n: usize| Tensor::zeros([1, 256, n as i64], (Kind::Float, self.device));
        // dec_in per window (libtorch's dense conv picks its algorithm, and so its rounding, by
        // length: over the packed windows it would differ from a window alone by ~5e-5).
        let mut parts = Vec::with_capacity(2 * items.len() + 1);
        let mut mask: Vec<f32> = Vec::new();
        let mut keep: Vec<i64> = Vec::new();
        for (k, &(p, a, b)) in items.iter().enumerate() {
            assert!(a < b && b <= p.frames, "frames [{a}, {b}) of {}", p.frames);
            let wa = a.saturating_sub(DECODER_CONTEXT);
            let wb = (b + DECODER_CONTEXT).min(p.frames);
            if k > 0 {
                parts.push(gap(PACK_GAP));
                mask.extend(std::iter::repeat_n(0f32, PACK_GAP));
            }
            let pos = mask.len();
            let z = p.z.narrow(0, wa as i64, (wb - wa) as i64).transpose(0, 1).unsqueeze(0).contiguous();
            parts.push(z.conv1d(self.param("m.dec_in.weight"), Some(self.param("m.dec_in.bias")), [1], [3], [1], 1));
            mask.extend(std::iter::repeat_n(1f32, wb - wa));
            keep.extend((pos + a - wa..pos + b - wa).map(|j| j as i64));
        }
        // The Linear layers see at least MIN_GEMM_ROWS rows (see there), alone as in a batch.
        if mask.len() < MIN_GEMM_ROWS {
            parts.push(gap(MIN_GEMM_ROWS - mask.len()));
            mask.resize(MIN_GEMM_ROWS, 0.0);
        }
        let n_out = keep.len();
        keep.resize(n_out.max(MIN_GEMM_ROWS), 0);
        let mut x = if parts.len() == 1 { parts.remove(0) } else { Tensor::cat(&parts, 2) };
        let masked = mask.contains(&0.0);
        let m = masked.then(|| Tensor::from_slice(&mask).view([1, 1, -1]).to_device(self.device));
        for i in 0..8 {
            x = self.cnx(&format!("m.dec.{i}"), &x, 7, 1, m.as_ref());
        }
        let x = x.squeeze_dim(0).index_select(1, &Tensor::from_slice(&keep).to_device(self.device));
        let x = ln(&x.transpose(0, 1), self.param("m.dec_norm.weight"), self.param("m.dec_norm.bias"));
        let o = self.linear(&x, "m.head.weight", "m.head.bias");
        let mut start = 0i64;
        items
            .iter()
            .map(|&(p, a, b)| {
                let n = (b - a) as i64;
                let oi = o.narrow(0, start, n);
                start += n;
                Spectra::from_parts(p, a, n, |i| oi.narrow(1, i as i64 * N_BINS, N_BINS).contiguous())
            })
            .collect()
    }

    /// Audio samples [300a, 300b) of the sentence (float32 tensor on the model's device). Decodes
    /// frames [a−1, b+2) (the inverse STFT's overlap), so chunks concatenate to the whole sentence.
    pub fn synthesize_chunk(&self, p: &Prosody, a: usize, b: usize, noise: &NoiseSource) -> Tensor {
        self.synthesize_chunks(&[(p, a, b, noise)]).pop().expect("one item")
    }

    /// [`Hibari::synthesize_chunk`] for several items: their decoder windows in one
    /// [`Hibari::decode_batch`] pass, then the DSP per item (it is per sentence: its own noise,
    /// pulse spectrum and overlap-add).
    pub fn synthesize_chunks(&self, items: &[(&Prosody, usize, usize, &NoiseSource)]) -> Vec<Tensor> {
        let _g = tch::no_grad_guard();
        let windows: Vec<(&Prosody, usize, usize)> =
            items.iter().map(|&(p, a, b, _)| (p, a.saturating_sub(1), (b + 2).min(p.frames))).collect();
        let spectra = self.decode_batch(&windows);
        items
            .iter()
            .zip(spectra)
            .map(|(&(p, a, b, noise), sp)| {
                let (k0, n) = (sp.start, sp.lh.size()[0]);
                let pr = p.pulse.0.narrow(0, k0 as i64, n);
                let pi = p.pulse.1.narrow(0, k0 as i64, n);
                let (re, im) = self.dsp.spectrum(&sp.frames(), (&pr, &pi), noise, k0);
                self.dsp.ola((&re, &im), k0, p.frames, a, b)
            })
            .collect()
    }

    /// The whole sentence's audio (F · 300 samples), as a host vector.
    pub fn synthesize(&self, p: &Prosody, noise: &NoiseSource) -> Vec<f32> {
        let t = self.synthesize_chunk(p, 0, p.frames, noise).to_device(Device::Cpu);
        Vec::try_from(&t).expect("f32")
    }

    /// Audio of a sentence from given spectral outputs (e.g. a reference's): frames k0.. of `sp`
    /// must cover [a−1, b+2).
    pub fn synthesize_from(&self, sp: &Spectra, f0_all: &Tensor, frames: usize, noise: &NoiseSource) -> Tensor {
        let _g = tch::no_grad_guard();
        let pulses = self.dsp.pulses(f0_all);
        let (pr, pi) = self.dsp.pulse_spectrum(&pulses, frames as i64);
        let n = sp.lh.size()[0];
        let (pr, pi) = (pr.narrow(0, sp.start as i64, n), pi.narrow(0, sp.start as i64, n));
        let (re, im) = self.dsp.spectrum(&sp.frames(), (&pr, &pi), noise, sp.start);
        self.dsp.ola((&re, &im), sp.start, frames, 0, frames)
    }
}

/// The int8 path's weights (CPU), in the layouts of [`crate::kernels`].
struct Int8 {
    /// ConvNeXt blocks by prefix (m.text.convs.i, pn.text.convs.i, pn.pro.i, m.dec.i)
    blocks: HashMap<String, QBlock>,
    /// the two weight-tied transformer layers by prefix (m.text.attn, pn.text.attn)
    layers: HashMap<String, QLayer>,
    /// m.dec_in as a Linear on im2col rows ([256, 130 · 7]), pn.pro_in and pn.pro_out (K=1 convs)
    dec_in: LinearF32,
    pro_in: LinearF32,
    pro_out: LinearF32,
    dec_norm: (Tensor, Tensor),
    head: QWeight,
}

/// A ConvNeXt block of the int8 path.
struct QBlock {
    /// the depthwise weight as [K, C]
    wk: Tensor,
    db: Tensor,
    norm: (Tensor, Tensor),
    gamma: Tensor,
    pw1: QWeight,
    pw2: QWeight,
}

/// A transformer pass of the int8 path.
struct QLayer {
    norm1: (Tensor, Tensor),
    in_proj: QWeight,
    out_proj: QWeight,
    norm2: (Tensor, Tensor),
    linear1: QWeight,
    linear2: QWeight,
}

impl Int8 {
    fn new(h: &Hibari, level: Level) -> Result<Int8, HibariError> {
        crate::gemm::calibrate();
        let qw = |name: &str| -> Result<QWeight, HibariError> {
            let (scale, bias) =
                h.weight_scales.get(name).ok_or_else(|| HibariError::Invalid(format!("{name}: no int8 weights")))?;
            let b = h.params.get(bias).ok_or_else(|| HibariError::Invalid(format!("{name}: bias {bias} missing")))?;
            QWeight::new_at(h.param(name), *scale, b, level).map_err(|e| HibariError::Invalid(format!("{name}: {e}")))
        };
        let c = |t: &Tensor| t.to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
        let mut blocks = HashMap::new();
        let prefixes = (0..2)
            .map(|i| format!("m.text.convs.{i}"))
            .chain((0..2).map(|i| format!("pn.text.convs.{i}")))
            .chain((0..6).map(|i| format!("pn.pro.{i}")))
            .chain((0..8).map(|i| format!("m.dec.{i}")));
        for pre in prefixes {
            let p = |n: &str| h.param(&format!("{pre}.{n}"));
            let block = QBlock {
                wk: c(&p("dw.weight").squeeze_dim(1).transpose(0, 1)),
                db: c(p("dw.bias")),
                norm: (c(p("norm.weight")), c(p("norm.bias"))),
                gamma: c(p("gamma")),
                pw1: qw(&format!("{pre}.pw1.weight"))?,
                pw2: qw(&format!("{pre}.pw2.weight"))?,
            };
            blocks.insert(pre, block);
        }
        let mut layers = HashMap::new();
        for pre in ["m.text.attn", "pn.text.attn"] {
            let p = |n: &str| c(h.param(&format!("{pre}.{n}")));
            let layer = QLayer {
                norm1: (p("norm1.weight"), p("norm1.bias")),
                in_proj: qw(&format!("{pre}.self_attn.in_proj_weight"))?,
                out_proj: qw(&format!("{pre}.self_attn.out_proj.weight"))?,
                norm2: (p("norm2.weight"), p("norm2.bias")),
                linear1: qw(&format!("{pre}.linear1.weight"))?,
                linear2: qw(&format!("{pre}.linear2.weight"))?,
            };
            layers.insert(pre.to_owned(), layer);
        }
        Ok(Int8 {
            blocks,
            layers,
            dec_in: LinearF32::new(&h.param("m.dec_in.weight").reshape([256, -1]), h.param("m.dec_in.bias")),
            pro_in: LinearF32::new(h.param("pn.pro_in.weight"), h.param("pn.pro_in.bias")),
            pro_out: LinearF32::new(h.param("pn.pro_out.weight"), h.param("pn.pro_out.bias")),
            dec_norm: (c(h.param("m.dec_norm.weight")), c(h.param("m.dec_norm.bias"))),
            head: qw("m.head.weight")?,
        })
    }

    fn block(&self, pre: &str) -> &QBlock {
        &self.blocks[pre]
    }
}

/// A ConvNeXt block of the int8 path on x [Σ seqs, C]: sequences of `seqs` frames one after the
/// other, time-major, updated in place (x must not share its storage); `mask` (one value per
/// row) is 0 at frames that don't exist (padding), which the depthwise conv reads as zeros, as
/// it reads the frames outside each sequence.
fn cnx_int8(b: &QBlock, x: &mut Tensor, seqs: &[usize], dil: usize, mask: Option<&[f32]>) {
    let u = depthwise_int8(b, x, seqs, dil, mask);
    pointwise_int8(b, &u, x);
}

/// The depthwise conv of a ConvNeXt block (see [`cnx_int8`]): u [Σ seqs, C].
fn depthwise_int8(b: &QBlock, x: &Tensor, seqs: &[usize], dil: usize, mask: Option<&[f32]>) -> Tensor {
    let c = b.db.size()[0] as usize;
    let mut u = Tensor::empty(x.size(), (Kind::Float, Device::Cpu));
    {
        let (xs, us) = (f32s(x), f32s_mut(&mut u));
        assert_eq!(seqs.iter().sum::<usize>() * c, xs.len(), "sequence lengths");
        let mut row = 0;
        for &t in seqs {
            let r = row * c..(row + t) * c;
            let m = mask.map(|m| &m[row..row + t]);
            dwconv(&xs[r.clone()], c, f32s(&b.wk), f32s(&b.db), dil, m, &mut us[r]);
            row += t;
        }
    }
    u
}

/// The rest of a ConvNeXt block, row by row: x += gamma ⊙ pw2(gelu(pw1(LN(u)))), in place.
fn pointwise_int8(b: &QBlock, u: &Tensor, x: &mut Tensor) {
    let q = layernorm_quantize(f32s(u), f32s(&b.norm.0), f32s(&b.norm.1));
    let Out::Quant(h) = b.pw1.forward(&q, Epilogue::GeluQuantize) else { unreachable!("quantized rows") };
    b.pw2.forward(&h, Epilogue::Residual { x: f32s_mut(x), gamma: Some(f32s(&b.gamma)) });
}

/// One transformer pass of the int8 path on x [L, C] (one sentence), updated in place. The
/// attention itself (scores, softmax, weighted sum) is float, as in onnxruntime's int8 graph.
fn tl_int8(l: &QLayer, x: &mut Tensor) {
    let (len, c) = x.size2().expect("[L, C]");
    let hd = c / 2;
    let q = layernorm_quantize(f32s(x), f32s(&l.norm1.0), f32s(&l.norm1.1));
    let Out::Float(qkv) = l.in_proj.forward(&q, Epilogue::Bias) else { unreachable!("floats") };
    let heads = |i: i64| qkv.narrow(1, i * c, c).view([len, 2, hd]).transpose(0, 1);
    let (qh, kh, vh) = (heads(0), heads(1), heads(2));
    let s = qh.matmul(&kh.transpose(-2, -1)) / (hd as f64).sqrt();
    let o = s.softmax(-1, Kind::Float).matmul(&vh).transpose(0, 1).contiguous().view([len, c]);
    let qo = quantize(f32s(&o), c as usize);
    l.out_proj.forward(&qo, Epilogue::Residual { x: f32s_mut(x), gamma: None });
    let q = layernorm_quantize(f32s(x), f32s(&l.norm2.0), f32s(&l.norm2.1));
    let Out::Quant(h) = l.linear1.forward(&q, Epilogue::GeluQuantize) else { unreachable!("quantized rows") };
    l.linear2.forward(&h, Epilogue::Residual { x: f32s_mut(x), gamma: None });
}

/// The int8 path ([`Precision::Int8`]): the same network with int8 Linear layers and the
/// row-wise kernels of [`crate::kernels`] in time-major layout. Sentences are encoded one at a
/// time (attention mixes a sentence's tokens, so padding could change its float round-off);
/// the prosody net and the decoder are row-local, so batches and chunks give every row bit for
/// bit what it gets alone.
impl Hibari {
    /// Text encoder `pre` on one sentence's ids: [L, C].
    fn encoder_int8(&self, q: &Int8, pre: &str, ids: &[i64], passes: usize) -> Tensor {
        let t = Tensor::from_slice(ids);
        let mut x = Tensor::embedding(self.p(pre, "emb.weight"), &t, -1, false, false).contiguous();
        for i in 0..2 {
            cnx_int8(q.block(&format!("{pre}.convs.{i}")), &mut x, &[ids.len()], 1, None);
        }
        let layer = &q.layers[&format!("{pre}.attn")];
        for _ in 0..passes {
            tl_int8(layer, &mut x);
        }
        ln(&x, self.p(pre, "norm.weight"), self.p(pre, "norm.bias"))
    }

    fn prosody_int8(&self, q: &Int8, items: &[(&[i64], f32)], forced: Option<&[i64]>) -> Vec<Prosody> {
        let (mut hms, mut hps, mut reg) = (Vec::new(), Vec::new(), Vec::new());
        for (ids, speed) in items {
            let hm = self.encoder_int8(q, "m.text", ids, 4);
            let hp = self.encoder_int8(q, "pn.text", ids, 6);
            let s: Vec<f32> = Vec::try_from(&self.log_durations(&hp.unsqueeze(0), None).squeeze_dim(0)).expect("f32");
            let d = forced.map_or_else(|| durations(&s, *speed), <[i64]>::to_vec);
            hms.push(hm);
            hps.push(hp);
            reg.push((s, d));
        }
        let ts: Vec<usize> = reg.iter().map(|(_, d)| d.iter().sum::<i64>() as usize).collect();
        let tmax = *ts.iter().max().expect("items");
        let c = hps[0].size()[1];
        let (mut g, mut mask, mut idxs) = (Vec::new(), Vec::new(), Vec::new());
        for (b, (_, d)) in reg.iter().enumerate() {
            let idx: Vec<i64> =
                d.iter().enumerate().flat_map(|(i, &di)| std::iter::repeat_n(i as i64, di as usize)).collect();
            let idx = Tensor::from_slice(&idx);
            g.push(hps[b].index_select(0, &idx));
            if ts[b] < tmax {
                g.push(Tensor::zeros([(tmax - ts[b]) as i64, c], (Kind::Float, Device::Cpu)));
            }
            mask.extend((0..tmax).map(|t| if t < ts[b] { 1f32 } else { 0f32 }));
            idxs.push(idx);
        }
        let mut g = q.pro_in.forward(&Tensor::cat(&g, 0));
        let m = mask.contains(&0.0).then_some(mask.as_slice());
        let seqs = vec![tmax; items.len()];
        for (i, dil) in PRO_DILATIONS.iter().enumerate() {
            cnx_int8(q.block(&format!("pn.pro.{i}")), &mut g, &seqs, *dil as usize, m);
        }
        let p = q.pro_out.forward(&g); // [B · tmax, 4]
        let mut out = Vec::new();
        for (b, ((ids, speed), (s, d))) in items.iter().zip(reg).enumerate() {
            let pb = p.narrow(0, (b * tmax) as i64, ts[b] as i64);
            let hm = &hms[b];
            out.push(self.assemble(ids, *speed, s, d, &pb, &idxs[b], |fine| hm.index_select(0, fine)));
        }
        out
    }

    /// The int8 decoder as a staircase: each of its 9 layers (m.dec_in, 8 blocks) keeps the rows
    /// of its output that the next chunk of the same sentence needs (`Prosody::dec`), so a
    /// sentence decoded chunk after chunk computes every layer's row once, instead of 27 frames
    /// of context on each side of every chunk. Layer L's rows up to b + 3·(9 − L) are computed for
    /// output frames up to b (the k7 convs' radius), each from the previous layer's rows around it
    /// (3 each side) only, so every row is exact and bit for bit the row of a whole-sentence
    /// pass. Items that don't continue their sentence's previous item start a new staircase at
    /// their first frame.
    fn decode_int8(&self, q: &Int8, items: &[(&Prosody, usize, usize)]) -> Vec<Spectra> {
        const LAYERS: usize = 9;
        let mut states: Vec<DecState> = items
            .iter()
            .map(|&(p, a, b)| {
                assert!(a < b && b <= p.frames, "frames [{a}, {b}) of {}", p.frames);
                match p.dec.take() {
                    Some(s) if s.rows[LAYERS - 1].0 <= a && a <= s.hi(LAYERS - 1) => s,
                    _ => DecState::starting_at(a, LAYERS),
                }
            })
            .collect();
        let cin = items[0].0.z.size()[1];
        let zeros = |n: usize, c: i64| Tensor::zeros([n as i64, c], (Kind::Float, Device::Cpu));
        for l in 0..LAYERS {
            // rows [hi, t) of layer l, per item that needs them
            let todo: Vec<(usize, usize, usize)> = items
                .iter()
                .zip(&states)
                .enumerate()
                .filter_map(|(i, (&(p, _, b), s))| {
                    let t = (b + 3 * (LAYERS - 1 - l)).min(p.frames);
                    (s.hi(l) < t).then(|| (i, s.hi(l), t))
                })
                .collect();
            if todo.is_empty() {
                continue;
            }
            let mut new_rows: Vec<Tensor> = if l == 0 {
                // m.dec_in through im2col: z rows [hi − 3, t + 3), zero outside the sentence
                let cols: Vec<Tensor> = todo
                    .iter()
                    .map(|&(i, hi, t)| {
                        let p = items[i].0;
                        let (za, zb) = (hi.saturating_sub(3), (t + 3).min(p.frames));
                        let z = Tensor::cat(
                            &[
                                zeros(za + 3 - hi, cin),
                                p.z.narrow(0, za as i64, (zb - za) as i64),
                                zeros(t + 3 - zb, cin),
                            ],
                            0,
                        );
                        z.unfold(0, 7, 1).reshape([(t - hi) as i64, -1])
                    })
                    .collect();
                let x = q.dec_in.forward(&Tensor::cat(&cols, 0));
                let sizes: Vec<i64> = todo.iter().map(|&(_, hi, t)| (t - hi) as i64).collect();
                x.split_with_sizes(&sizes, 0)
            } else {
                // block l − 1 on the previous layer's rows [hi − 3, t + 3) (clipped to the sentence)
                let mut windows = Vec::new();
                let mut seqs = Vec::new();
                for &(i, hi, t) in &todo {
                    let (lo, prev) = &states[i].rows[l - 1];
                    let (wa, wb) = (hi.saturating_sub(3), (t + 3).min(items[i].0.frames));
                    assert!(*lo <= wa && wb <= lo + prev.size()[0] as usize, "layer {l} rows missing");
                    windows.push(prev.narrow(0, (wa - lo) as i64, (wb - wa) as i64));
                    seqs.push(wb - wa);
                }
                // the depthwise conv reads the window; the rest of the block runs on the new rows only
                let block = q.block(&format!("m.dec.{}", l - 1));
                let xw = Tensor::cat(&windows, 0);
                let u = depthwise_int8(block, &xw, &seqs, 1, None);
                let mut rows = Vec::new();
                let mut start = 0;
                for (&(_, hi, t), &n) in todo.iter().zip(&seqs) {
                    let first = start + hi - hi.saturating_sub(3);
                    rows.extend((first..first + t - hi).map(|r| r as i64));
                    start += n;
                }
                let rows = Tensor::from_slice(&rows);
                let mut x = xw.index_select(0, &rows);
                pointwise_int8(block, &u.index_select(0, &rows), &mut x);
                let sizes: Vec<i64> = todo.iter().map(|&(_, hi, t)| (t - hi) as i64).collect();
                x.split_with_sizes(&sizes, 0)
            };
            for (&(i, _, t), rows) in todo.iter().zip(new_rows.drain(..)) {
                let s = &mut states[i];
                s.append(l, rows);
                if l > 0 {
                    s.keep_from(l - 1, t.saturating_sub(3)); // what layer l's next rows read
                }
            }
        }
        // dec_norm and the head on the last layer's rows [a, b)
        let last: Vec<Tensor> = items
            .iter()
            .zip(&states)
            .map(|(&(_, a, b), s)| {
                let (lo, rows) = &s.rows[LAYERS - 1];
                rows.narrow(0, (a - lo) as i64, (b - a) as i64)
            })
            .collect();
        let x = Tensor::cat(&last, 0);
        let qx = layernorm_quantize(f32s(&x), f32s(&q.dec_norm.0), f32s(&q.dec_norm.1));
        let Out::Parts(parts) = q.head.forward(&qx, Epilogue::Split(5)) else { unreachable!("five parts") };
        let mut start = 0i64;
        let out = items
            .iter()
            .map(|&(p, a, b)| {
                let n = (b - a) as i64;
                let sp = Spectra::from_parts(p, a, n, |i| parts[i].narrow(0, start, n));
                start += n;
                sp
            })
            .collect();
        // Keep each sentence's staircase for its next chunk, whose first frame is b − 3 when the
        // chunks are synthesized (frames [a − 1, b + 2), see synthesize_chunks).
        for (&(p, _, b), mut s) in items.iter().zip(states) {
            s.keep_from(LAYERS - 1, b.saturating_sub(3));
            p.dec.replace(Some(s));
        }
        out
    }
}

/// The rows an int8 decoder staircase keeps per layer: (first row, rows [n, 256]).
#[derive(Debug)]
pub(crate) struct DecState {
    rows: Vec<(usize, Tensor)>,
}

impl DecState {
    /// An empty staircase whose last layer starts at frame `a`: layer l starts 3 rows earlier per
    /// layer above it.
    fn starting_at(a: usize, layers: usize) -> DecState {
        let rows = (0..layers)
            .map(|l| (a.saturating_sub(3 * (layers - 1 - l)), Tensor::zeros([0, 256], (Kind::Float, Device::Cpu))))
            .collect();
        DecState { rows }
    }

    fn hi(&self, l: usize) -> usize {
        self.rows[l].0 + self.rows[l].1.size()[0] as usize
    }

    fn append(&mut self, l: usize, new: Tensor) {
        let (_, rows) = &mut self.rows[l];
        *rows = if rows.size()[0] == 0 { new.contiguous() } else { Tensor::cat(&[&*rows, &new], 0) };
    }

    /// Drops layer l's rows before `from`.
    fn keep_from(&mut self, l: usize, from: usize) {
        let hi = self.hi(l);
        let (lo, rows) = &mut self.rows[l];
        if from > *lo {
            let from = from.min(hi);
            *rows = rows.narrow(0, (from - *lo) as i64, (hi - from) as i64).contiguous();
            *lo = from;
        }
    }
}

/// d_i = max(1, round_half_even((exp(s_i) − 1) / speed)), in float32 in that order.
pub fn durations(s: &[f32], speed: f32) -> Vec<i64> {
    s.iter().map(|&x| (((x.exp() - 1.0) / speed).round_ties_even()).max(1.0) as i64).collect()
}

fn parse_vocab(text: &str) -> Result<HashMap<char, i64>, HibariError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| HibariError::Json(e.to_string()))?;
    let obj = v.as_object().ok_or_else(|| HibariError::Json("not an object".into()))?;
    let mut out = HashMap::new();
    for (k, id) in obj {
        let mut cs = k.chars();
        let (Some(c), None) = (cs.next(), cs.next()) else {
            return Err(HibariError::Json(format!("key {k:?} is not one character")));
        };
        let id = id.as_i64().ok_or_else(|| HibariError::Json(format!("id of {k:?} is not an integer")))?;
        out.insert(c, id);
    }
    Ok(out)
}
