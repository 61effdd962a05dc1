//! The hibari acoustic network natively in tch: text encoders, duration predictor, length
//! regulation, prosody net, decoder and head, as described in docs/hibari-architecture.md,
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
use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::cpu::Level;
use crate::dsp::{Dsp, SpectralFrames, HOP, N_BINS};
use crate::kernels::{
    attention, dwconv, dwconv_rows, layernorm_quantize, quantize, rows_mut, DecIn, Epilogue, LinearF32, Out, QWeight,
};
use crate::noise::NoiseSource;
use crate::onnx::{Model, OnnxError};
use crate::quant::{linear_weights, parameters};
use crate::tensor_slices::{f32s, f32s_mut};

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

mod error;
mod int8;
mod load;
mod precision;
mod prosody;
// hibari as a voice family of the engine.
pub mod serve;

pub use error::HibariError;
pub(crate) use int8::DecState;
use int8::Int8;
pub use precision::{Precision, PrecisionChoice};
pub use prosody::{Prosody, Spectra};

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
    /// nn.Linear `w` (+ `b`) on the last axis of x, in the model's precision.
    fn linear(&self, x: &Tensor, w: &str, b: &str) -> Tensor {
        x.linear(self.param(w), Some(self.param(b)))
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
            dec_taps: None,
            dec: RefCell::new(None),
        }
    }

    fn regulate(&self, ids: &[i64], speed: f32, s: Vec<f32>, d: Vec<i64>, hm: &Tensor, hp: &Tensor) -> Prosody {
        self.prosody_net_batch(&[(ids, speed)], vec![(s, d)], &hm.unsqueeze(0), &hp.unsqueeze(0)).pop().expect("one")
    }

    /// Replaces `p`'s pulse train (the DSP's harmonic source, made from its f0) with the one of
    /// `f0` (\[F\] Hz, on any device): to compare two devices' decoders and DSP on one source,
    /// and to see what an f0 moved by another device's rounding does to the audio alone (the
    /// pulses' phase is the running sum of f0, so 1e-6 of f0 moves the highest harmonics' phase
    /// by ~1e-3 of a turn per second: benches' device-check).
    pub fn pulses_from(&self, p: &mut Prosody, f0: &Tensor) {
        let _g = tch::no_grad_guard();
        assert_eq!(f0.size(), [p.frames as i64], "one f0 per frame");
        let pulses = self.dsp.pulses(&f0.to_device(self.device));
        p.pulse = self.dsp.pulse_spectrum(&pulses, p.frames as i64);
    }

    /// The network's outputs for fine frames [a, b) (exact: the decoder runs on [a−27, b+27)).
    pub fn decode(&self, p: &Prosody, a: usize, b: usize) -> Spectra {
        self.decode_batch(&[(p, a, b)]).pop().expect("one item")
    }

    /// [`Hibari::decode`] for several (sentence, frames [a, b)) items in one forward pass. The
    /// decoder windows [a−27, b+27) are packed along time into one sequence, `PACK_GAP` zero
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

/// d_i = max(1, round_half_even((exp(s_i) − 1) / speed)), in float32 in that order.
pub fn durations(s: &[f32], speed: f32) -> Vec<i64> {
    s.iter().map(|&x| (((x.exp() - 1.0) / speed).round_ties_even()).max(1.0) as i64).collect()
}
