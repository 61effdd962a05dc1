//! Kokoro-82M written out block by block (docs/kokoro-architecture.md §3): PL-BERT ([`Albert`]),
//! the prosody predictor ([`Prosody`]: its text encoder, durations, F0 and N), the text encoder
//! ([`TextEncoder`]), the decoder ([`Decoder`]) and the iSTFTNet generator ([`Generator`]: harmonic
//! source, STFT, up-sampling with Snake resblocks, iSTFT). Every weighted layer is read off the
//! export ([`super::load`]) and runs in the model's precision ([`super::int8`]); everything between
//! them is float tch on the model's device, computed as the export's graph computes it (the same
//! operations in the same order, so that the int8 path requantizes the same tensors). In int8 the
//! decoder, the F0/N blocks and the generator run time-major in Rust passes instead (the AdaIN,
//! activation and quantization fused, [`super::fused`]; the source and the iSTFT, [`super::dsp`]):
//! the same operations, their float rounding our own and the same at every CPU level.

use tch::{Device, Kind, Tensor};

use super::dsp;
use super::fused::{adain_leaky, adain_quantize, adain_quantize_fixed, predicted_range, Activation, Alpha};
use super::int8::{quant_params, quantize, quantize_into, range_params, to_f32s, Act, Conv, Linear, Lstm};
use super::load::{DepthwiseUp, FloatConv, TmConv, Weights};
use super::signal;
use super::stats::Stats;
use crate::cpu::simd_fn;
use crate::precision::Precision;
use crate::tensor_slices::{f32s, f32s_mut};

mod batch;

pub(super) use batch::Item;

type R<T> = Result<T, String>;

/// √2 in f32, the residual blocks' divisor.
const SQRT2: f64 = 1.414_213_538_169_860_8;

fn leaky(x: &Tensor, alpha: f64) -> Tensor {
    x.where_self(&x.ge(0.0), &(x * alpha))
}

/// Instance norm over the last axis (the export's ReduceMean / Sub / Mul / ReduceMean / Add / Sqrt
/// / Div): [1, C, T].
fn instance_norm(x: &Tensor) -> Tensor {
    let mean = x.mean_dim(2, true, Kind::Float);
    let d = x - mean;
    let var = (&d * &d).mean_dim(2, true, Kind::Float);
    d / (var + 1e-5).sqrt()
}

/// Instance norm's mean and divisor √(var + ε) over the last axis of [1, C, T], each [1, C, 1],
/// computed as [`instance_norm`] computes them.
fn instance_stats(x: &Tensor) -> (Tensor, Tensor) {
    let mean = x.mean_dim(2, true, Kind::Float);
    let d = x - &mean;
    let var = (&d * &d).mean_dim(2, true, Kind::Float);
    (mean, (var + 1e-5).sqrt())
}

/// How a generator pass normalizes: over its own input, as the export does (`Own`); or over
/// `rows` of it only (`Window`: a window's own rows at each stage's rate, the context after them
/// left out; `stage`, the stage whose activations come next). A window covering the whole
/// segment normalizes as `Own`.
pub(super) enum Tape {
    Own,
    Window { rows: [std::ops::Range<usize>; 2], stage: usize },
}

impl Tape {
    /// Whether the pass needs its activations' statistics over all their rows (the export's
    /// normalization).
    fn measures(&self) -> bool {
        matches!(self, Tape::Own)
    }

    /// The generator's stage whose activations come next (0 or 1): `Window` picks its rows.
    fn stage(&mut self, i: usize) {
        if let Tape::Window { stage, .. } = self {
            *stage = i;
        }
    }

    /// The int8 AdaIN + Snake + quantize of `x` (its statistics `xs` if `Own`): as
    /// [`adain_quantize`], or over the window's rows.
    #[allow(clippy::too_many_arguments)]
    fn adain_quantize(
        &mut self,
        x: &[f32],
        c: usize,
        xs: &Stats,
        gb: &[f32],
        act: Activation,
        pad: usize,
        z: &mut Vec<f32>,
        q: &mut Vec<u8>,
    ) -> (f32, u8) {
        match self {
            Tape::Own => adain_quantize(x, c, xs, gb, act, pad, z, q),
            Tape::Window { rows, stage } => {
                let rows = rows[*stage].clone();
                let mine = Stats::of(&x[rows.start * c..rows.end * c], c);
                if rows.len() == x.len() / c {
                    // the whole segment in one window: the export's own normalization
                    return adain_quantize(x, c, &mine, gb, act, pad, z, q);
                }
                // the codes' range that of the window's rows: the context's rows, whose far
                // end the window's cut has made up, saturate
                let range = predicted_range(&mine, rows.len(), gb, act);
                adain_quantize_fixed(x, c, (&mine, rows.len()), gb, act, range, pad, z, q);
                range
            }
        }
    }

    /// Instance norm of x [1, C, T] (fp32, fp16): as [`instance_norm`], or over the window's
    /// rows (their sums in f64).
    fn instance_norm(&mut self, x: &Tensor) -> Tensor {
        match self {
            Tape::Own => instance_norm(x),
            Tape::Window { rows, stage } => {
                let rows = rows[*stage].clone();
                // a window that is the whole segment: the export's own normalization
                let (mean, std) = if rows.len() == x.size()[2] as usize {
                    instance_stats(x)
                } else {
                    let mine = x.narrow(2, rows.start as i64, rows.len() as i64);
                    let s = mine.sum_dim_intlist(2, true, Kind::Double);
                    let q = (&mine * &mine).to_kind(Kind::Double).sum_dim_intlist(2, true, Kind::Double);
                    let n = rows.len() as f64;
                    let mean = s / n;
                    let var = (q / n - &mean * &mean).clamp_min(0.0);
                    (mean.to_kind(Kind::Float), (var + 1e-5).sqrt().to_kind(Kind::Float))
                };
                (x - &mean) / &std
            }
        }
    }
}

/// AdaIN 1-d: instance norm, then (1 + γ)·x̂ + β with γ, β a Linear of the style.
struct AdaIn {
    fc: Linear,
}

impl AdaIn {
    fn load(w: &Weights, prefix: &str) -> R<AdaIn> {
        Ok(AdaIn { fc: w.linear(&format!("{prefix}/fc/Gemm_MatMul_quant"))? })
    }

    /// γ then β, C each, for [`adain_quantize`].
    fn params(&self, s: &Act) -> Vec<f32> {
        self.fc.forward_int8_vec(s)
    }

    fn forward(&self, x: &Tensor, s: &Act) -> Tensor {
        self.forward_taped(x, s, &mut Tape::Own)
    }

    /// [`AdaIn::forward`] normalized as `tape` says.
    fn forward_taped(&self, x: &Tensor, s: &Act, tape: &mut Tape) -> Tensor {
        let h = self.fc.forward_act(s).unsqueeze(2);
        let c = h.size()[1] / 2;
        let (gamma, beta) = (h.narrow(1, 0, c), h.narrow(1, c, c));
        (gamma + 1.0) * tape.instance_norm(x) + beta
    }
}

/// AdainResBlk1d (predictor F0/N, decoder): norm, LeakyReLU 0.2, [depthwise up-sampling], conv,
/// norm, LeakyReLU, conv, plus the shortcut ([nearest ×2], [1×1 conv]), over √2.
struct ResBlk {
    norm1: AdaIn,
    norm2: AdaIn,
    conv1: Conv,
    conv2: Conv,
    conv1x1: Option<Conv>,
    /// the ×2 up-sampling, as libtorch runs it (fp32, fp16) and time-major (int8)
    pool: Option<(FloatConv, DepthwiseUp)>,
}

impl ResBlk {
    /// The block whose nodes start with `prefix`; `upsample`: ×2 (nearest shortcut, `pool`);
    /// `learned`: a 1×1 conv on the shortcut.
    fn load(w: &Weights, prefix: &str, upsample: bool, learned: bool) -> R<ResBlk> {
        Ok(ResBlk {
            norm1: AdaIn::load(w, &format!("{prefix}/norm1"))?,
            norm2: AdaIn::load(w, &format!("{prefix}/norm2"))?,
            conv1: w.conv(&format!("{prefix}/conv1/Conv_quant"))?,
            conv2: w.conv(&format!("{prefix}/conv2/Conv_quant"))?,
            conv1x1: if learned { Some(w.conv(&format!("{prefix}/conv1x1/Conv_quant"))?) } else { None },
            pool: if upsample {
                let pool = w.float_conv(&format!("{prefix}/pool/ConvTranspose"))?;
                let tm = pool.depthwise_up()?;
                Some((pool, tm))
            } else {
                None
            },
        })
    }

    fn forward(&self, p: Precision, x: &Tensor, s: &Act) -> Tensor {
        let mut short =
            if self.pool.is_some() { x.repeat_interleave_self_int(2, Some(2), None) } else { x.shallow_clone() };
        if let Some(c) = &self.conv1x1 {
            short = c.forward(p, &short);
        }
        let mut r = leaky(&self.norm1.forward(x, s), 0.2);
        if let Some((pool, _)) = &self.pool {
            r = pool.forward(&r);
        }
        let r = self.conv1.forward(p, &r);
        let r = leaky(&self.norm2.forward(&r, s), 0.2);
        let r = self.conv2.forward(p, &r);
        (r + short) / SQRT2
    }

    /// int8: x time-major [T, C] (its AdaIN [`Stats`] `xs`) → (r + shortcut)/√2 time-major [T', O]
    /// (T' = 2T where the block up-samples), as the generator's blocks run: each AdaIN +
    /// LeakyReLU + quantize in one pass ([`adain_quantize`]), the convolutions time-major, the
    /// first one's output statistics gathered as it is written, the second one's output added to
    /// the shortcut as it is written. No transposes, no tensor passes.
    fn forward_tm(&self, x: &[f32], c: usize, xs: &Stats, sq: &Act, buf: &mut StageBuffers) -> Vec<f32> {
        let t = x.len() / c;
        let t2 = if self.pool.is_some() { 2 * t } else { t };
        let StageBuffers { z, q, y1 } = buf;
        // the shortcut: x, or its 1×1 convolution (of x repeated ×2 where the block up-samples:
        // the repeated codes, since repeating rows leaves the range as it is)
        let mut out = match &self.conv1x1 {
            Some(conv) => {
                assert_eq!(conv.pad(), 0, "a 1×1 convolution");
                let lo = xs.lo.iter().fold(0f32, |m, &v| m.min(v));
                let hi = xs.hi.iter().fold(0f32, |m, &v| m.max(v));
                let (scale, zp) = range_params(lo, hi);
                q.resize(t2 * c, zp);
                if t2 == t {
                    quantize_into(x, scale, zp, q);
                } else {
                    for (xr, qr) in x.chunks_exact(c).zip(q.chunks_exact_mut(2 * c)) {
                        let (a, b) = qr.split_at_mut(c);
                        quantize_into(xr, scale, zp, a);
                        b.copy_from_slice(a);
                    }
                }
                let mut out = vec![0f32; t2 * conv.out_channels()];
                conv.forward_tm_into(q, t2, scale, zp, &mut out, false, None);
                out
            }
            None => {
                assert!(self.pool.is_none(), "an up-sampling block has a learned shortcut");
                x.to_vec()
            }
        };
        let gb = self.norm1.params(sq);
        let pad = self.conv1.pad();
        let (scale, zp) = match &self.pool {
            None => adain_quantize(x, c, xs, &gb, Activation::Leaky(0.2), pad, z, q),
            Some((_, up)) => {
                // the up-sampling sits between the activation and the quantization
                let u = up.forward(&adain_leaky(x, xs, &gb, 0.2));
                let (scale, zp) = quant_params(&u);
                q.clear();
                q.resize((t2 + 2 * pad) * c, zp);
                quantize_into(&u, scale, zp, &mut q[pad * c..(pad + t2) * c]);
                (scale, zp)
            }
        };
        let mid = self.conv1.out_channels();
        y1.resize(t2 * mid, 0.0);
        let y1 = &mut y1[..t2 * mid];
        let mut ys = Stats::zeros(mid);
        self.conv1.forward_tm_into(q, t2, scale, zp, y1, false, Some(&mut ys));
        let pad = self.conv2.pad();
        let (scale, zp) = adain_quantize(y1, mid, &ys, &self.norm2.params(sq), Activation::Leaky(0.2), pad, z, q);
        self.conv2.forward_tm_into(q, t2, scale, zp, &mut out, true, None);
        let sqrt2 = SQRT2 as f32;
        for v in &mut out {
            *v /= sqrt2;
        }
        out
    }
}

/// Time-major rows side by side: row t of the result is row t of each part in turn (each part
/// [T, its channels]), a channel-wise concatenation.
fn cat_rows(parts: &[(&[f32], usize)]) -> Vec<f32> {
    let t = parts[0].0.len() / parts[0].1;
    assert!(parts.iter().all(|&(x, c)| x.len() == t * c), "parts of T rows");
    let mut out = Vec::with_capacity(t * parts.iter().map(|p| p.1).sum::<usize>());
    for i in 0..t {
        for &(x, c) in parts {
            out.extend_from_slice(&x[i * c..(i + 1) * c]);
        }
    }
    out
}

/// PL-BERT: ALBERT with one shared layer applied 12 times (12 heads of 64).
pub(super) struct Albert {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    ln_w: Tensor,
    ln_b: Tensor,
    mapping: Linear,
    query: Linear,
    key: Linear,
    value: Linear,
    dense: Linear,
    attn_ln_w: Tensor,
    attn_ln_b: Tensor,
    ffn: Linear,
    ffn_out: Linear,
    full_ln_w: Tensor,
    full_ln_b: Tensor,
    /// `bert_encoder`: 768 → 512
    project: Linear,
}

const BERT: &str = "/encoder/bert";
const LAYER: &str = "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0";
const ALBERT_W: &str = "encoder.bert.encoder.albert_layer_groups.0.albert_layers.0";

impl Albert {
    fn load(w: &Weights) -> R<Albert> {
        Ok(Albert {
            word: w.embedding(&format!("{BERT}/embeddings/word_embeddings/Gather_quant"))?,
            position: w.embedding(&format!("{BERT}/embeddings/position_embeddings/Gather_quant"))?,
            token_type: w.embedding(&format!("{BERT}/embeddings/token_type_embeddings/Gather_quant"))?,
            ln_w: w.float("encoder.bert.embeddings.LayerNorm.weight")?,
            ln_b: w.float("encoder.bert.embeddings.LayerNorm.bias")?,
            mapping: w.linear(&format!("{BERT}/encoder/embedding_hidden_mapping_in/MatMul_quant"))?,
            query: w.linear(&format!("{LAYER}/attention/query/MatMul_quant"))?,
            key: w.linear(&format!("{LAYER}/attention/key/MatMul_quant"))?,
            value: w.linear(&format!("{LAYER}/attention/value/MatMul_quant"))?,
            dense: w.linear(&format!("{LAYER}/attention/dense/MatMul_quant"))?,
            attn_ln_w: w.float(&format!("{ALBERT_W}.attention.LayerNorm.weight"))?,
            attn_ln_b: w.float(&format!("{ALBERT_W}.attention.LayerNorm.bias"))?,
            ffn: w.linear(&format!("{LAYER}/ffn/MatMul_quant"))?,
            ffn_out: w.linear(&format!("{LAYER}/ffn_output/MatMul_quant"))?,
            full_ln_w: w.float(&format!("{ALBERT_W}.full_layer_layer_norm.weight"))?,
            full_ln_b: w.float(&format!("{ALBERT_W}.full_layer_layer_norm.bias"))?,
            project: w.linear("/encoder/bert_encoder/MatMul_quant")?,
        })
    }

    /// tokens [L] → d_en [1, L, 512]: [`Albert::forward_batch`] of one (nothing padded, nothing
    /// masked).
    fn forward(&self, p: Precision, tokens: &Tensor) -> Tensor {
        let one = batch::Lengths::new(vec![tokens.size()[0]], tokens.device());
        self.forward_batch(p, &tokens.unsqueeze(0), &one)
    }
}

/// The prosody predictor: its text encoder (3 × bi-LSTM + AdaLayerNorm), the duration LSTM and
/// projection, the shared LSTM over frames and the F0 and N branches.
pub(super) struct Prosody {
    lstms: Vec<(Lstm, Linear)>,
    dur_lstm: Lstm,
    dur_proj: Linear,
    shared: Lstm,
    f0: Vec<ResBlk>,
    n: Vec<ResBlk>,
    f0_proj: Conv,
    n_proj: Conv,
}

const PRED: &str = "/encoder/predictor";

impl Prosody {
    fn load(w: &Weights) -> R<Prosody> {
        let mut lstms = Vec::new();
        for i in 0..3 {
            lstms.push((
                w.lstm(&format!("{PRED}/text_encoder/lstms.{}/LSTM_quant", 2 * i))?,
                w.linear(&format!("{PRED}/text_encoder/lstms.{}/fc/Gemm_MatMul_quant", 2 * i + 1))?,
            ));
        }
        let branch = |name: &str| -> R<Vec<ResBlk>> {
            Ok(vec![
                ResBlk::load(w, &format!("/encoder/{name}.0"), false, false)?,
                ResBlk::load(w, &format!("/encoder/{name}.1"), true, true)?,
                ResBlk::load(w, &format!("/encoder/{name}.2"), false, false)?,
            ])
        };
        Ok(Prosody {
            lstms,
            dur_lstm: w.lstm(&format!("{PRED}/lstm/LSTM_quant"))?,
            dur_proj: w.linear(&format!("{PRED}/duration_proj/linear_layer/MatMul_quant"))?,
            shared: w.lstm("/encoder/shared/LSTM_quant")?,
            f0: branch("F0")?,
            n: branch("N")?,
            f0_proj: w.conv("/encoder/F0_proj/Conv_quant")?,
            n_proj: w.conv("/encoder/N_proj/Conv_quant")?,
        })
    }

    /// d_en [1, L, 512], the style's second half → d [1, L, 640].
    fn encode(&self, d_en: &Tensor, s: &Tensor, sq: &Act) -> Tensor {
        let l = d_en.size()[1];
        let s = s.view([1, 1, 128]).expand([1, l, 128], false);
        let mut x = Tensor::cat(&[d_en, &s], 2);
        for (lstm, fc) in &self.lstms {
            let y = lstm.forward(&x.squeeze_dim(0)).unsqueeze(0);
            let y = y.layer_norm([512], None::<&Tensor>, None::<&Tensor>, 1e-5, false);
            let h = fc.forward_act(sq).view([1, 1, 1024]);
            let (gamma, beta) = (h.narrow(2, 0, 512), h.narrow(2, 512, 512));
            let y = (gamma + 1.0) * y + beta;
            x = Tensor::cat(&[&y, &s], 2);
        }
        x
    }

    /// d [1, L, 640] → the durations before rounding [L].
    fn durations(&self, p: Precision, d: &Tensor, speed: f32) -> Tensor {
        let y = self.dur_lstm.forward(&d.squeeze_dim(0));
        let logits = self.dur_proj.forward(p, &y).sigmoid();
        logits.sum_dim_intlist(-1, false, Kind::Float) / f64::from(speed)
    }

    /// en [1, 640, T] → (F0, N), each [1, 2T].
    fn f0_n(&self, p: Precision, en: &Tensor, sq: &Act) -> (Tensor, Tensor) {
        let x = self.shared.forward(&en.squeeze_dim(0).transpose(0, 1));
        if p == Precision::Int8 {
            // time-major as the LSTM gives it ([T, 512]), the blocks as the decoder's
            let (x, c) = (signal::floats(&x), x.size()[1] as usize);
            let run = |blocks: &[ResBlk], proj: &Conv| {
                let mut buf = StageBuffers::default();
                let (mut y, mut c) = (x.clone(), c);
                for b in blocks {
                    y = b.forward_tm(&y, c, &Stats::of(&y, c), sq, &mut buf);
                    c = b.conv2.out_channels();
                }
                assert_eq!(proj.pad(), 0, "a 1×1 projection");
                let (scale, zp) = quant_params(&y);
                let mut q = vec![0u8; y.len()];
                quantize_into(&y, scale, zp, &mut q);
                let mut out = Vec::new();
                proj.forward_tm(&q, y.len() / c, scale, zp, &mut out);
                Tensor::from_slice(&out).view([1, out.len() as i64])
            };
            return (run(&self.f0, &self.f0_proj), run(&self.n, &self.n_proj));
        }
        let x = x.transpose(0, 1).unsqueeze(0);
        let run = |blocks: &[ResBlk], proj: &Conv| {
            let mut y = x.shallow_clone();
            for b in blocks {
                y = b.forward(p, &y, sq);
            }
            proj.forward(p, &y).squeeze_dim(1)
        };
        (run(&self.f0, &self.f0_proj), run(&self.n, &self.n_proj))
    }
}

/// The text encoder: embedding, 3 × (conv k 5, LayerNorm, LeakyReLU 0.2), bi-LSTM → [1, 512, L].
pub(super) struct TextEncoder {
    embedding: Tensor,
    cnn: Vec<(Conv, Tensor, Tensor)>,
    lstm: Lstm,
}

impl TextEncoder {
    fn load(w: &Weights) -> R<TextEncoder> {
        let mut cnn = Vec::new();
        for i in 0..3 {
            cnn.push((
                w.conv(&format!("/encoder/text_encoder/cnn.{i}/cnn.{i}.0/Conv_quant"))?,
                w.float(&format!("encoder.text_encoder.cnn.{i}.1.gamma"))?,
                w.float(&format!("encoder.text_encoder.cnn.{i}.1.beta"))?,
            ));
        }
        Ok(TextEncoder {
            embedding: w.embedding("/encoder/text_encoder/embedding/Gather_quant")?,
            cnn,
            lstm: w.lstm("/encoder/text_encoder/lstm/LSTM_quant")?,
        })
    }

    fn forward(&self, p: Precision, tokens: &Tensor) -> Tensor {
        let mut x = self.embedding.index_select(0, tokens).transpose(0, 1).unsqueeze(0);
        for (conv, g, b) in &self.cnn {
            let y = conv.forward(p, &x).transpose(1, 2).layer_norm([512], Some(g), Some(b), 1e-5, false);
            x = leaky(&y, 0.2).transpose(1, 2);
        }
        self.lstm.forward(&x.squeeze_dim(0).transpose(0, 1)).transpose(0, 1).unsqueeze(0)
    }
}

/// The decoder: F0 and N convs (stride 2), `encode`, `asr_res`, four `decode` blocks.
pub(super) struct Decoder {
    f0_conv: Conv,
    n_conv: Conv,
    encode: ResBlk,
    asr_res: Conv,
    decode: Vec<ResBlk>,
}

const DEC: &str = "/decoder/decoder";

impl Decoder {
    fn load(w: &Weights) -> R<Decoder> {
        Ok(Decoder {
            f0_conv: w.conv(&format!("{DEC}/F0_conv/Conv_quant"))?,
            n_conv: w.conv(&format!("{DEC}/N_conv/Conv_quant"))?,
            encode: ResBlk::load(w, &format!("{DEC}/encode"), false, true)?,
            asr_res: w.conv(&format!("{DEC}/asr_res/asr_res.0/Conv_quant"))?,
            decode: (0..4).map(|i| ResBlk::load(w, &format!("{DEC}/decode.{i}"), i == 3, true)).collect::<R<_>>()?,
        })
    }

    /// asr [1, 512, T], F0 and N [1, 2T] → [1, 512, 2T]; int8: time-major, [2T, 512].
    fn forward(&self, p: Precision, asr: &Tensor, f0: &Tensor, n: &Tensor, sq: &Act) -> Tensor {
        let f0c = self.f0_conv.forward(p, &f0.unsqueeze(1));
        let nc = self.n_conv.forward(p, &n.unsqueeze(1));
        let asr_q = quantize(p, asr);
        if p == Precision::Int8 {
            // time-major throughout: each block's input is its rows side by side with asr_res's,
            // F0's and N's
            let (f0c, nc) = (signal::floats(&f0c), signal::floats(&nc));
            let asr_res = self.asr_res.forward_act_tm(&asr_q);
            let ca = self.asr_res.out_channels();
            let asr = signal::floats(&asr.squeeze_dim(0).tr());
            let mut buf = StageBuffers::default();
            let input = cat_rows(&[(&asr, asr.len() / f0c.len()), (&f0c, 1), (&nc, 1)]);
            let mut c = input.len() / f0c.len();
            let mut x = self.encode.forward_tm(&input, c, &Stats::of(&input, c), sq, &mut buf);
            for block in &self.decode {
                let co = x.len() / f0c.len();
                let input = cat_rows(&[(&x, co), (&asr_res, ca), (&f0c, 1), (&nc, 1)]);
                c = co + ca + 2;
                x = block.forward_tm(&input, c, &Stats::of(&input, c), sq, &mut buf);
            }
            let co = self.decode.last().map_or(c, |b| b.conv2.out_channels());
            return Tensor::from_slice(&x).view([(x.len() / co) as i64, co as i64]);
        }
        let mut x = self.encode.forward(p, &Tensor::cat(&[asr, &f0c, &nc], 1), sq);
        let asr_res = self.asr_res.forward_act(&asr_q);
        for block in &self.decode {
            x = block.forward(p, &Tensor::cat(&[&x, &asr_res, &f0c, &nc], 1), sq);
        }
        x
    }
}

/// AdaINResBlock1 of the generator: three times (AdaIN, Snake, dilated conv, AdaIN, Snake, conv)
/// added to the input.
struct SnakeBlock {
    adain1: Vec<AdaIn>,
    adain2: Vec<AdaIn>,
    /// (α, 1/α) per Snake, as tensors (fp32) and as floats (int8)
    alpha1: Vec<((Tensor, Tensor), Alpha)>,
    alpha2: Vec<((Tensor, Tensor), Alpha)>,
    convs1: Vec<Conv>,
    convs2: Vec<Conv>,
}

fn snake(x: &Tensor, (alpha, inv): &(Tensor, Tensor)) -> Tensor {
    let s = (alpha * x).sin();
    x + inv * (&s * &s)
}

impl SnakeBlock {
    fn load(w: &Weights, prefix: &str, weights: &str) -> R<SnakeBlock> {
        let alpha = |name: String| -> R<((Tensor, Tensor), Alpha)> {
            let a = w.float(&name)?;
            let inv = a.reciprocal();
            let floats = Alpha { alpha: to_f32s(&a)?, inv: to_f32s(&inv)? };
            Ok(((a, inv), floats))
        };
        Ok(SnakeBlock {
            adain1: (0..3).map(|j| AdaIn::load(w, &format!("{prefix}/adain1.{j}"))).collect::<R<_>>()?,
            adain2: (0..3).map(|j| AdaIn::load(w, &format!("{prefix}/adain2.{j}"))).collect::<R<_>>()?,
            alpha1: (0..3).map(|j| alpha(format!("{weights}.alpha1.{j}"))).collect::<R<_>>()?,
            alpha2: (0..3).map(|j| alpha(format!("{weights}.alpha2.{j}"))).collect::<R<_>>()?,
            convs1: (0..3).map(|j| w.conv(&format!("{prefix}/convs1.{j}/Conv_quant"))).collect::<R<_>>()?,
            convs2: (0..3).map(|j| w.conv(&format!("{prefix}/convs2.{j}/Conv_quant"))).collect::<R<_>>()?,
        })
    }

    /// fp32: x [1, C, T] → [1, C, T] in tensor ops.
    fn forward(&self, p: Precision, x: &Tensor, sq: &Act, tape: &mut Tape) -> Tensor {
        let mut x = x.shallow_clone();
        for j in 0..3 {
            let t = snake(&self.adain1[j].forward_taped(&x, sq, tape), &self.alpha1[j].0);
            let t = self.convs1[j].forward(p, &t);
            let t = snake(&self.adain2[j].forward_taped(&t, sq, tape), &self.alpha2[j].0);
            let t = self.convs2[j].forward(p, &t);
            x = t + x;
        }
        x
    }

    /// int8: x time-major [T, C] (its AdaIN [`Stats`] `xs`) → [T, C] in place, each
    /// convolution's input made in one pass ([`adain_quantize`]) and its output kept
    /// time-major, the statistics of the next AdaIN's input gathered as the convolutions write
    /// it, the second convolution's output added to x as it is written. `buf`: the stage's
    /// buffers, reused by every convolution.
    fn forward_tm(&self, x: &mut [f32], c: usize, xs: &Stats, sq: &Act, buf: &mut StageBuffers, tape: &mut Tape) {
        let t = x.len() / c;
        let StageBuffers { z, q, y1, .. } = buf;
        y1.resize(x.len(), 0.0);
        let y1 = &mut y1[..x.len()];
        let mut xs = xs.clone();
        let measures = tape.measures();
        for j in 0..3 {
            let conv = &self.convs1[j];
            let (s, zp) = tape.adain_quantize(
                x,
                c,
                &xs,
                &self.adain1[j].params(sq),
                Activation::Snake(&self.alpha1[j].1),
                conv.pad(),
                z,
                q,
            );
            let mut ys = Stats::zeros(c);
            conv.forward_tm_into(q, t, s, zp, y1, false, measures.then_some(&mut ys));
            let conv = &self.convs2[j];
            let (s, zp) = tape.adain_quantize(
                y1,
                c,
                &ys,
                &self.adain2[j].params(sq),
                Activation::Snake(&self.alpha2[j].1),
                conv.pad(),
                z,
                q,
            );
            // (the last one's statistics have no AdaIN to go to)
            xs = Stats::zeros(c);
            conv.forward_tm_into(q, t, s, zp, x, true, (measures && j < 2).then_some(&mut xs));
        }
    }
}

/// The buffers of a generator stage's Snake blocks (int8), kept across its convolutions: the
/// fused pass's scratch (a row) and codes, the first convolution's output.
#[derive(Default)]
struct StageBuffers {
    z: Vec<f32>,
    q: Vec<u8>,
    y1: Vec<f32>,
}

/// The Snake blocks' sum, `sum` (of the first two, time-major [T, C]) plus `last`, over 3, then
/// LeakyReLU `alpha` (as `leaky` computes it: x·α in f32 where x < 0), a tensor [T, C] for the
/// next time-major convolution: one pass instead of a sum, a division and leaky's three.
fn mean_leaky(sum: &[f32], last: &[f32], c: usize, alpha: f32) -> Tensor {
    assert_eq!(sum.len(), last.len(), "the blocks' outputs alike");
    let mut out = Tensor::empty([(sum.len() / c) as i64, c as i64], (Kind::Float, Device::Cpu));
    // SAFETY: a tensor made here and held alone while the slice lives.
    mean_leaky_pass(sum, last, unsafe { f32s_mut(&mut out) }, alpha);
    out
}

simd_fn! {
    /// [`mean_leaky`]'s pass (AVX2 and AVX-512 builds: the same floats, no FMA).
    fn mean_leaky_pass(sum: &[f32], last: &[f32], out: &mut [f32], alpha: f32) {
        for ((o, &s), &l) in out.iter_mut().zip(sum).zip(last) {
            let v = (s + l) / 3.0;
            *o = if v >= 0.0 { v } else { v * alpha };
        }
    }
}

simd_fn! {
    /// `sum += r`, element by element (AVX2 and AVX-512 builds: the same floats).
    fn add_into(sum: &mut [f32], r: &[f32]) {
        assert_eq!(sum.len(), r.len(), "the blocks' outputs alike");
        for (s, &r) in sum.iter_mut().zip(r) {
            *s += r;
        }
    }
}

/// A generator's float convolution as its precision runs it: libtorch's (fp32, fp16, any device)
/// or time-major (int8, on the CPU).
enum GenConv {
    Torch(FloatConv),
    TimeMajor(TmConv),
}

impl GenConv {
    fn load(w: &Weights, name: &str) -> R<GenConv> {
        let conv = w.float_conv(name)?;
        Ok(match w.precision {
            Precision::Int8 => GenConv::TimeMajor(conv.time_major().map_err(|e| format!("{name}: {e}"))?),
            Precision::Fp32 | Precision::Fp16 => GenConv::Torch(conv),
        })
    }

    fn torch(&self) -> &FloatConv {
        match self {
            GenConv::Torch(c) => c,
            GenConv::TimeMajor(_) => unreachable!("loaded for int8"),
        }
    }

    fn time_major(&self) -> &TmConv {
        match self {
            GenConv::TimeMajor(c) => c,
            GenConv::Torch(_) => unreachable!("loaded for a float precision"),
        }
    }
}

/// The iSTFTNet generator with its harmonic source.
pub(super) struct Generator {
    /// Linear 9 → 1 of the harmonics
    source_w: Tensor,
    source_b: Tensor,
    window: Tensor,
    ups: Vec<GenConv>,
    noise_convs: Vec<Conv>,
    noise_res: Vec<SnakeBlock>,
    resblocks: Vec<SnakeBlock>,
    conv_post: GenConv,
    inverse_basis: Tensor,
    window_sum: Tensor,
    /// The source's running sum and STFT on the device ([`Weights::device_paths`]).
    device_paths: bool,
}

const GEN: &str = "/decoder/decoder/generator";
const GEN_W: &str = "decoder.decoder.generator";

impl Generator {
    fn load(w: &Weights) -> R<Generator> {
        // the source's Linear 9 → 1: a float MatMul and Add of the export
        Ok(Generator {
            source_w: w.float("onnx::MatMul_6993")?,
            source_b: w.float(&format!("{GEN_W}.m_source.l_linear.bias"))?,
            window: w.float(&format!("{GEN}/Constant_17_output_0"))?,
            ups: vec![
                GenConv::load(w, &format!("{GEN}/ups.0/ConvTranspose"))?,
                GenConv::load(w, &format!("{GEN}/ups.1/ConvTranspose"))?,
            ],
            noise_convs: vec![
                w.conv(&format!("{GEN}/noise_convs.0/Conv_quant"))?,
                w.conv(&format!("{GEN}/noise_convs.1/Conv_quant"))?,
            ],
            noise_res: (0..2)
                .map(|i| SnakeBlock::load(w, &format!("{GEN}/noise_res.{i}"), &format!("{GEN_W}.noise_res.{i}")))
                .collect::<R<_>>()?,
            resblocks: (0..6)
                .map(|i| SnakeBlock::load(w, &format!("{GEN}/resblocks.{i}"), &format!("{GEN_W}.resblocks.{i}")))
                .collect::<R<_>>()?,
            conv_post: GenConv::load(w, &format!("{GEN}/conv_post/Conv"))?,
            inverse_basis: w.float(&format!("{GEN_W}.stft.istft.stft.inverse_basis"))?,
            window_sum: w.float(&format!("{GEN_W}.stft.istft.stft.window_sum"))?,
            device_paths: w.device_paths,
        })
    }

    /// The harmonic source of F0 [1, 2T] → [1, 600T] (SineGen without its random phase and noise,
    /// as the export computes it; the Linear 9 → 1 and tanh): libtorch's passes, or in int8 (on
    /// the CPU) one Rust pass over the samples ([`dsp::harmonic_source`]).
    fn source(&self, p: Precision, f0: &Tensor) -> Tensor {
        match p {
            Precision::Int8 => {
                let f0 = f0.to_kind(Kind::Float).contiguous();
                let b = f32s(&self.source_b)[0];
                Tensor::from_slice(&dsp::harmonic_source(f32s(&f0), f32s(&self.source_w), b)).unsqueeze(0)
            }
            Precision::Fp32 | Precision::Fp16 => {
                signal::harmonic_source(f0, &self.source_w, &self.source_b, self.device_paths)
            }
        }
    }

    /// The source's STFT (n_fft 20, hop 5, reflect padding): magnitudes and phases [1, 22, frames]
    /// (int8: Rust loops, [`dsp::source_spectrum`]; on a device, tensor passes).
    fn source_spectrum(&self, p: Precision, m: &Tensor) -> Tensor {
        match p {
            Precision::Int8 => {
                let (spec, frames) = dsp::source_spectrum(f32s(m), f32s(&self.window));
                Tensor::from_slice(&spec).view([1, 22, frames as i64])
            }
            Precision::Fp32 | Precision::Fp16 => signal::source_spectrum(m, &self.window, self.device_paths),
        }
    }

    /// The generator's input from the harmonic source of F0 [1, 2T]: its spectrum [1, 22, 120T + 1]
    /// as the noise convolutions read it (int8: quantized over the whole segment).
    fn source_input(&self, p: Precision, f0: &Tensor, profile: &mut Profile) -> Act {
        let har = self.source_spectrum(p, &self.source(p, f0));
        profile.mark("generator: source");
        quantize(p, &har)
    }

    /// Decodes frames `rows` of a segment (12.5 ms each): `x` the decoder's output [1, 512, 2T]
    /// (int8: time-major, [2T, 512]), `har` its [`Generator::source_input`], normalized as `tape`
    /// says → audio [300·rows.len()]. Frames within the generator's reach of a window's cut ends
    /// ([`GENERATOR_REACH`]) differ from the whole segment's; all of `0..2T`, with
    /// [`Tape::Own`], is the export's pass.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        p: Precision,
        x: &Tensor,
        har: &Act,
        rows: std::ops::Range<usize>,
        sq: &Act,
        tape: &mut Tape,
        profile: &mut Profile,
    ) -> Tensor {
        let n = rows.len() as i64;
        let (a, hop) = (rows.start as i64, HAR_PER_ROW as i64);
        // the window's rows, and its source frames: 60 a row, and the one after the last
        let har_q = narrow_act(har, hop * a, hop * n + 1);
        // int8: time-major from the first up-sampling's input to conv_post's, the LeakyReLU before
        // the second and before conv_post taken into the pass that ends the stage before it
        // (`mean_leaky`)
        let mut x = match p {
            // (the decoder's output is time-major in int8)
            Precision::Int8 => leaky(&x.narrow(0, a, n), 0.1),
            Precision::Fp32 | Precision::Fp16 => x.narrow(2, a, n),
        };
        for i in 0..2 {
            tape.stage(i);
            // the second stage's input starts with one step of reflection padding
            let pad = usize::from(i == 1);
            x = match p {
                Precision::Fp32 | Precision::Fp16 => {
                    let mut x = self.ups[i].torch().forward(&leaky(&x, 0.1));
                    if pad > 0 {
                        x = x.reflection_pad1d([pad as i64, 0]);
                    }
                    let src = self.noise_res[i].forward(p, &self.noise_convs[i].forward_act(&har_q), sq, tape);
                    x += src;
                    let mut sum = self.resblocks[3 * i].forward(p, &x, sq, tape);
                    for j in 1..3 {
                        sum += self.resblocks[3 * i + j].forward(p, &x, sq, tape);
                    }
                    sum / 3.0
                }
                Precision::Int8 => {
                    let mut buf = StageBuffers::default();
                    let mut src = self.noise_convs[i].forward_act_tm(&har_q);
                    let up = self.ups[i].time_major();
                    let c = up.c_out();
                    let measures = tape.measures();
                    let stats = |v: &[f32]| if measures { Stats::of(v, c) } else { Stats::zeros(c) };
                    let st = stats(&src);
                    self.noise_res[i].forward_tm(&mut src, c, &st, sq, &mut buf, tape);
                    let mut x = up.up_plus(&x, pad, &src);
                    let xs = stats(&x);
                    // the three blocks of the same x: the first two on copies, the last on x
                    // itself, whose sum the closing pass adds in (the same additions in the
                    // same order as summing first)
                    let mut sum = x.clone();
                    self.resblocks[3 * i].forward_tm(&mut sum, c, &xs, sq, &mut buf, tape);
                    let mut r = x.clone();
                    self.resblocks[3 * i + 1].forward_tm(&mut r, c, &xs, sq, &mut buf, tape);
                    add_into(&mut sum, &r);
                    self.resblocks[3 * i + 2].forward_tm(&mut x, c, &xs, sq, &mut buf, tape);
                    mean_leaky(&sum, &x, c, if i == 0 { 0.1 } else { 0.01 })
                }
            };
            profile.mark(if i == 0 { "generator: stage 1" } else { "generator: stage 2" });
        }
        let out = match p {
            Precision::Int8 => {
                let y = self.conv_post.time_major().conv_channel_major(&x);
                let (basis, ws) = (f32s(&self.inverse_basis), f32s(&self.window_sum));
                Tensor::from_slice(&dsp::istft(f32s(&y), basis, ws))
            }
            Precision::Fp32 | Precision::Fp16 => {
                let y = self.conv_post.torch().forward(&leaky(&x, f64::from(0.01f32)));
                signal::istft(&y, &self.inverse_basis, &self.window_sum)
            }
        };
        profile.mark("generator: iSTFT");
        out
    }
}

/// The source's spectrum frames per frame of the decoder's output (hop 5 at 24 kHz: 300/5).
const HAR_PER_ROW: usize = 60;

/// Frames of the decoder's output (12.5 ms) on each side of a window beyond which its cut ends
/// change nothing, with the normalizations fixed: the generator's reach (its first stage's
/// dilated convolutions, 60 steps at 10 a frame; the up-samplings, the second stage, conv_post and
/// the iSTFT, about 2 frames more), rounded up. With it, windows of a segment decoded with
/// fixed normalizations were the whole segment decoded with them within float rounding (int8 bit
/// for bit; measured on the `kokoro-chunks` branch, docs/kokoro-architecture.md §8).
pub(super) const GENERATOR_REACH: usize = 10;

/// Frames `start..start + len` (the last axis) of an activation [1, C, L]: codes with their
/// scale and zero point, or the tensor.
fn narrow_act(a: &Act, start: i64, len: i64) -> Act {
    match a {
        Act::Float(t) => Act::Float(t.narrow(2, start, len)),
        Act::Int8 { q, scale, zp, shape } => {
            let (c, l) = (shape[1] as usize, shape[2] as usize);
            let (start, len) = (start as usize, len as usize);
            assert!(shape[0] == 1 && start + len <= l, "frames {start}..{} of {l}", start + len);
            let mut out = Vec::with_capacity(c * len);
            for ch in 0..c {
                out.extend_from_slice(&q[ch * l + start..][..len]);
            }
            Act::Int8 { q: out, scale: *scale, zp: *zp, shape: vec![1, c as i64, len as i64] }
        }
    }
}

/// Seconds per block of one inference (`KOKORO_PROFILE=1`: printed on stderr).
pub(super) struct Profile {
    on: bool,
    t: std::time::Instant,
    pub parts: Vec<(&'static str, f64)>,
}

impl Profile {
    pub fn new() -> Profile {
        Profile { on: std::env::var_os("KOKORO_PROFILE").is_some(), t: std::time::Instant::now(), parts: Vec::new() }
    }

    pub fn mark(&mut self, name: &'static str) {
        if self.on {
            self.parts.push((name, self.t.elapsed().as_secs_f64()));
            self.t = std::time::Instant::now();
        }
    }

    pub fn report(&self) {
        if self.on {
            let line: Vec<String> = self.parts.iter().map(|(k, s)| format!("{k} {s:.3}")).collect();
            eprintln!("kokoro profile (s): {}", line.join(", "));
        }
    }
}

/// The whole network.
pub(super) struct Kokoro {
    albert: Albert,
    prosody: Prosody,
    text: TextEncoder,
    decoder: Decoder,
    generator: Generator,
    pub precision: Precision,
    pub device: Device,
}

/// What one pass computes: the audio, the durations, and the values the tests compare.
pub(super) struct Pass {
    pub audio: Tensor,
    pub durations: Vec<i64>,
    /// The durations before rounding, [L]
    pub durations_raw: Tensor,
    pub f0: Tensor,
    pub n: Tensor,
}

impl Kokoro {
    pub fn load(w: &Weights) -> R<Kokoro> {
        Ok(Kokoro {
            albert: Albert::load(w)?,
            prosody: Prosody::load(w)?,
            text: TextEncoder::load(w)?,
            decoder: Decoder::load(w)?,
            generator: Generator::load(w)?,
            precision: w.precision,
            device: w.device,
        })
    }

    /// `tokens` with both pads; `forced`: durations to use instead of the predicted ones (the
    /// fixture tests feed onnxruntime's, so that the lengths agree).
    pub fn forward(&self, tokens: &[i64], style: &[f32], speed: f32, forced: Option<&[i64]>) -> R<Pass> {
        let mut profile = Profile::new();
        let prepared = self.prepare(tokens, style, speed, forced, &mut profile)?;
        let audio = self.generate(&prepared, 0..prepared.frames, &mut Tape::Own, &mut profile);
        profile.report();
        let Prepared { durations, durations_raw, f0, n, .. } = prepared;
        Ok(Pass { audio, durations, durations_raw, f0, n })
    }

    /// Everything before the generator's up-sampling stages: ALBERT, the prosody predictor, the
    /// text encoder, the decoder and the harmonic source's spectrum, over the whole segment.
    pub fn prepare(
        &self,
        tokens: &[i64],
        style: &[f32],
        speed: f32,
        forced: Option<&[i64]>,
        profile: &mut Profile,
    ) -> R<Prepared> {
        let (p, dev) = (self.precision, self.device);
        let tok = Tensor::from_slice(tokens).to_device(dev);
        let style = Tensor::from_slice(style).to_device(dev).view([1, 256]);
        let (s_dec, s_enc) = (style.narrow(1, 0, 128), style.narrow(1, 128, 128));
        let (sq_dec, sq_enc) = (quantize(p, &s_dec), quantize(p, &s_enc));
        let d_en = self.albert.forward(p, &tok);
        profile.mark("ALBERT");
        let d = self.prosody.encode(&d_en, &s_enc, &sq_enc);
        let raw = self.prosody.durations(p, &d, speed);
        let durations: Vec<i64> = match forced {
            Some(f) if f.len() == tokens.len() => f.to_vec(),
            Some(f) => return Err(format!("{} durations for {} tokens", f.len(), tokens.len())),
            None => {
                let r = raw.round().clamp_min(1.0).to_kind(Kind::Int64).to_device(Device::Cpu);
                Vec::<i64>::try_from(r).map_err(|e| e.to_string())?
            }
        };
        profile.mark("prosody: text encoder, durations");
        let aln = alignment(&durations, dev);
        let en = d.squeeze_dim(0).transpose(0, 1).matmul(&aln).unsqueeze(0); // [1, 640, T]
        let (f0, n) = self.prosody.f0_n(p, &en, &sq_enc);
        profile.mark("prosody: F0, N");
        let t_en = self.text.forward(p, &tok);
        let asr = t_en.matmul(&aln);
        profile.mark("text encoder");
        let x = self.decoder.forward(p, &asr, &f0, &n, &sq_dec);
        profile.mark("decoder");
        let har = self.generator.source_input(p, &f0, profile);
        let frames = 2 * durations.iter().sum::<i64>() as usize;
        Ok(Prepared { x, har, sq_dec, frames, durations, durations_raw: raw, f0, n })
    }

    /// The audio of frames `rows` of a prepared segment (300 samples each), normalized as `tape`
    /// says ([`Generator::forward`]).
    pub fn generate(
        &self,
        prepared: &Prepared,
        rows: std::ops::Range<usize>,
        tape: &mut Tape,
        profile: &mut Profile,
    ) -> Tensor {
        assert!(rows.start < rows.end && rows.end <= prepared.frames, "frames {rows:?} of {}", prepared.frames);
        let Prepared { x, har, sq_dec, .. } = prepared;
        self.generator.forward(self.precision, x, har, rows, sq_dec, tape, profile)
    }
}

/// A segment's pass up to the generator's stages ([`Kokoro::prepare`]).
pub(super) struct Prepared {
    /// The decoder's output, [1, 512, frames] (int8: time-major, [frames, 512])
    x: Tensor,
    /// The harmonic source's spectrum as the generator reads it
    har: Act,
    /// The style's first half (the decoder's and the generator's), as their Linears read it
    sq_dec: Act,
    /// Frames of 12.5 ms (300 samples): two per duration frame
    pub frames: usize,
    pub durations: Vec<i64>,
    pub durations_raw: Tensor,
    pub f0: Tensor,
    pub n: Tensor,
}

/// The [L, T] one-hot alignment of tokens to frames.
fn alignment(durations: &[i64], device: Device) -> Tensor {
    let total: i64 = durations.iter().sum();
    let mut a = vec![0f32; durations.len() * total as usize];
    let mut t = 0usize;
    for (i, &d) in durations.iter().enumerate() {
        for _ in 0..d {
            a[i * total as usize + t] = 1.0;
            t += 1;
        }
    }
    Tensor::from_slice(&a).view([durations.len() as i64, total]).to_device(device)
}
