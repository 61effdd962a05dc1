//! Several segments through the network in one pass (fp32 and fp16 on the device's paths: a GPU,
//! or [`super::super::KokoroModel::load_device_paths`] on the CPU). The segments are padded to the
//! longest along each axis (tokens, frames, and each of the generator's rates), and every
//! operation that reads along that axis reads each segment's own steps only, so that each
//! segment's audio is its audio alone within float rounding:
//! - ALBERT's attention leaves out the padded tokens (their scores set to the float minimum,
//!   whose exponentials are zero);
//! - the LSTMs run the backward direction over each segment reversed within its own length
//!   ([`super::Lstm::forward_padded`]);
//! - each instance norm takes its mean and variance over the segment's own steps;
//! - the padded steps are zeroed before every convolution, so that a convolution reads zeros past a
//!   segment's end, as its own zero padding does alone;
//! - the harmonic source, its STFT and the iSTFT run per segment (their edges reflect and
//!   interpolate within the segment's own samples).

use tch::{Device, Kind, Tensor};

use super::{
    alignment, instance_norm, leaky, quantize, snake, Act, AdaIn, Albert, Decoder, Generator, Kokoro, Pass, Precision,
    Prosody, ResBlk, SnakeBlock, TextEncoder, HAR_PER_ROW, R, SQRT2,
};
use crate::kokoro::signal;

/// One segment of a batch: its tokens (both pads included), its style (256 floats) and speed.
pub(in crate::kokoro) struct Item<'a> {
    pub tokens: &'a [i64],
    pub style: &'a [f32],
    pub speed: f32,
}

/// Each segment's length along an axis at one rate, and the mask of its steps [B, 1, longest]
/// (none where every segment is as long as the longest: nothing is padded).
pub(super) struct Lengths {
    lens: Vec<i64>,
    mask: Option<Tensor>,
}

impl Lengths {
    pub(super) fn new(lens: Vec<i64>, device: Device) -> Lengths {
        let longest = lens.iter().copied().max().unwrap_or(0);
        let mask = lens.iter().any(|&l| l != longest).then(|| {
            let v: Vec<f32> =
                lens.iter().flat_map(|&l| (0..longest).map(move |t| f32::from(u8::from(t < l)))).collect();
            Tensor::from_slice(&v).view([lens.len() as i64, 1, longest]).to_device(device)
        });
        Lengths { lens, mask }
    }

    /// Lengths `scale` times these plus `extra` (another rate of the same segments).
    fn scaled(&self, scale: i64, extra: i64, device: Device) -> Lengths {
        Lengths::new(self.lens.iter().map(|&l| scale * l + extra).collect(), device)
    }

    fn longest(&self) -> i64 {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    /// x [B, C, T] with its padded steps zeroed.
    fn zeroed(&self, x: &Tensor) -> Tensor {
        match &self.mask {
            Some(m) => x * m,
            None => x.shallow_clone(),
        }
    }
}

/// Instance norm of x [B, C, T] over each segment's own steps ([`instance_norm`] where nothing is
/// padded).
fn instance_norm_in(x: &Tensor, l: &Lengths) -> Tensor {
    let Some(m) = &l.mask else { return instance_norm(x) };
    let n = m.sum_dim_intlist(2, true, Kind::Float);
    let mean = (x * m).sum_dim_intlist(2, true, Kind::Float) / &n;
    let d = x - mean;
    let var = (&d * &d * m).sum_dim_intlist(2, true, Kind::Float) / n;
    d / (var + 1e-5).sqrt()
}

/// AdaIN of x [B, C, T] with each segment's style (`s`, [B, 128]).
fn adain(a: &AdaIn, x: &Tensor, s: &Act, l: &Lengths) -> Tensor {
    let h = a.fc.forward_act(s).unsqueeze(2);
    let c = h.size()[1] / 2;
    (h.narrow(1, 0, c) + 1.0) * instance_norm_in(x, l) + h.narrow(1, c, c)
}

/// [`ResBlk::forward`] of x [B, C, T] (its padded steps zero) at lengths `l` → lengths `up` (`l`
/// doubled where the block up-samples), its padded steps zero.
fn resblk(b: &ResBlk, p: Precision, x: &Tensor, s: &Act, l: &Lengths, up: &Lengths) -> Tensor {
    let mut short = if b.pool.is_some() { x.repeat_interleave_self_int(2, Some(2), None) } else { x.shallow_clone() };
    if let Some(c) = &b.conv1x1 {
        short = c.forward(p, &short);
    }
    let mut r = l.zeroed(&leaky(&adain(&b.norm1, x, s, l), 0.2));
    if let Some((pool, _)) = &b.pool {
        r = up.zeroed(&pool.forward(&r));
    }
    let r = b.conv1.forward(p, &r);
    let r = up.zeroed(&leaky(&adain(&b.norm2, &r, s, up), 0.2));
    let r = b.conv2.forward(p, &r);
    up.zeroed(&((r + short) / SQRT2))
}

/// [`SnakeBlock::forward`] of x [B, C, T] over each segment's own steps, its padded steps zero.
/// (Inside, x's padded steps are left as the convolutions' biases make them: only the masked
/// norms read them, and each convolution's input is zeroed.)
fn snake_block(b: &SnakeBlock, p: Precision, x: &Tensor, s: &Act, l: &Lengths) -> Tensor {
    let mut x = x.shallow_clone();
    for j in 0..3 {
        let t = l.zeroed(&snake(&adain(&b.adain1[j], &x, s, l), &b.alpha1[j].0));
        let t = b.convs1[j].forward(p, &t);
        let t = l.zeroed(&snake(&adain(&b.adain2[j], &t, s, l), &b.alpha2[j].0));
        let t = b.convs2[j].forward(p, &t);
        x = t + x;
    }
    l.zeroed(&x)
}

impl Albert {
    /// tokens [B, L] → [B, L, 512], the padded tokens left out of the attention.
    pub(super) fn forward_batch(&self, p: Precision, tokens: &Tensor, l: &Lengths) -> Tensor {
        let (b, len) = (tokens.size()[0], tokens.size()[1]);
        let words = self.word.index_select(0, &tokens.view([-1])).view([b, len, -1]);
        let emb = (words + self.token_type.narrow(0, 0, 1)) + self.position.narrow(0, 0, len);
        let x = emb.layer_norm([128], Some(&self.ln_w), Some(&self.ln_b), 1e-12, false);
        let mut h = self.mapping.forward(p, &x);
        // (mask − 1)·max added to the scores: the float minimum for a padded token (its
        // exponential 0), 0 exactly for a segment's own
        let left_out = l.mask.as_ref().map(|m| ((m - 1.0) * f64::from(f32::MAX)).view([b, 1, 1, len]));
        let quarter = f64::from((1.0f32 / 8.0).sqrt());
        for _ in 0..12 {
            let a = quantize(p, &h);
            let heads = |t: Tensor| t.view([b, len, 12, 64]);
            let q = heads(self.query.forward_act(&a)).permute([0, 2, 1, 3]) * quarter;
            let k = heads(self.key.forward_act(&a)).permute([0, 2, 3, 1]) * quarter;
            let v = heads(self.value.forward_act(&a)).permute([0, 2, 1, 3]);
            let mut scores = q.matmul(&k);
            if let Some(left_out) = &left_out {
                scores += left_out;
            }
            let probs = scores.softmax(-1, Kind::Float);
            let ctx = probs.matmul(&v).permute([0, 2, 1, 3]).reshape([b, len, 768]);
            let attn = self.dense.forward(p, &ctx);
            let h1 = (&h + attn).layer_norm([768], Some(&self.attn_ln_w), Some(&self.attn_ln_b), 1e-12, false);
            let f = self.ffn.forward(p, &h1).gelu("tanh");
            let o = self.ffn_out.forward(p, &f);
            h = (o + &h1).layer_norm([768], Some(&self.full_ln_w), Some(&self.full_ln_b), 1e-12, false);
        }
        self.project.forward(p, &h)
    }
}

impl Prosody {
    /// d_en [B, L, 512], the styles' second halves [B, 128] → d [B, L, 640].
    fn encode_batch(&self, d_en: &Tensor, s: &Tensor, sq: &Act, l: &Lengths) -> Tensor {
        let (b, len) = (d_en.size()[0], d_en.size()[1]);
        let s = s.view([b, 1, 128]).expand([b, len, 128], false);
        let mut x = Tensor::cat(&[d_en, &s], 2);
        for (lstm, fc) in &self.lstms {
            let y = lstm.forward_padded(&x, &l.lens);
            let y = y.layer_norm([512], None::<&Tensor>, None::<&Tensor>, 1e-5, false);
            let h = fc.forward_act(sq).view([b, 1, 1024]);
            let y = (h.narrow(2, 0, 512) + 1.0) * y + h.narrow(2, 512, 512);
            x = Tensor::cat(&[&y, &s], 2);
        }
        x
    }

    /// d [B, L, 640], the speeds [B, 1] → the durations before rounding [B, L].
    fn durations_batch(&self, p: Precision, d: &Tensor, speeds: &Tensor, l: &Lengths) -> Tensor {
        let y = self.dur_lstm.forward_padded(d, &l.lens);
        self.dur_proj.forward(p, &y).sigmoid().sum_dim_intlist(-1, false, Kind::Float) / speeds
    }

    /// en [B, 640, T] → (F0, N), each [B, 2T], zero past each segment's frames.
    fn f0_n_batch(&self, p: Precision, en: &Tensor, sq: &Act, frames: &Lengths, up: &Lengths) -> (Tensor, Tensor) {
        let x = frames.zeroed(&self.shared.forward_padded(&en.transpose(1, 2), &frames.lens).transpose(1, 2));
        let run = |blocks: &[ResBlk], proj: &super::Conv| {
            let mut y = x.shallow_clone();
            let mut l = frames;
            for b in blocks {
                let next = if b.pool.is_some() { up } else { l };
                y = resblk(b, p, &y, sq, l, next);
                l = next;
            }
            up.zeroed(&proj.forward(p, &y)).squeeze_dim(1)
        };
        (run(&self.f0, &self.f0_proj), run(&self.n, &self.n_proj))
    }
}

impl TextEncoder {
    /// tokens [B, L] → [B, 512, L].
    fn forward_batch(&self, p: Precision, tokens: &Tensor, l: &Lengths) -> Tensor {
        let (b, len) = (tokens.size()[0], tokens.size()[1]);
        let emb = self.embedding.index_select(0, &tokens.view([-1])).view([b, len, -1]);
        let mut x = l.zeroed(&emb.transpose(1, 2));
        for (conv, g, beta) in &self.cnn {
            let y = conv.forward(p, &x).transpose(1, 2).layer_norm([512], Some(g), Some(beta), 1e-5, false);
            x = l.zeroed(&leaky(&y, 0.2).transpose(1, 2));
        }
        self.lstm.forward_padded(&x.transpose(1, 2), &l.lens).transpose(1, 2)
    }
}

impl Decoder {
    /// asr [B, 512, T] and F0, N [B, 2T] (zero past each segment's frames; `rates`: the
    /// segments' frames and rows, T and 2T) → [B, 512, 2T].
    fn forward_batch(
        &self,
        p: Precision,
        asr: &Tensor,
        (f0, n): (&Tensor, &Tensor),
        sq: &Act,
        rates: (&Lengths, &Lengths),
    ) -> Tensor {
        let (frames, up) = rates;
        let f0c = frames.zeroed(&self.f0_conv.forward(p, &f0.unsqueeze(1)));
        let nc = frames.zeroed(&self.n_conv.forward(p, &n.unsqueeze(1)));
        let mut x = resblk(&self.encode, p, &Tensor::cat(&[asr, &f0c, &nc], 1), sq, frames, frames);
        let asr_res = frames.zeroed(&self.asr_res.forward(p, asr));
        for block in &self.decode {
            let next = if block.pool.is_some() { up } else { frames };
            x = resblk(block, p, &Tensor::cat(&[&x, &asr_res, &f0c, &nc], 1), sq, frames, next);
        }
        x
    }
}

impl Generator {
    /// The decoder's output x [B, 512, N] (zero past each segment's `rows`), the sources' spectra
    /// [B, 22, 60N + 1] → each segment's audio [300·rows].
    fn forward_batch(&self, p: Precision, x: &Tensor, har: &Act, sq: &Act, rows: &Lengths) -> Vec<Tensor> {
        let dev = x.device();
        let mut x = x.shallow_clone();
        for i in 0..2 {
            // the stages' rates: 10 and 60 a row, the second with its one step of reflection
            // padding at the start
            let l = if i == 0 { rows.scaled(10, 0, dev) } else { rows.scaled(60, 1, dev) };
            let mut up = self.ups[i].torch().forward(&leaky(&x, 0.1));
            if i == 1 {
                up = up.reflection_pad1d([1, 0]);
            }
            assert_eq!(up.size()[2], l.longest(), "stage {i}'s length");
            // (snake blocks read their input's padded steps through masked norms only)
            let src = snake_block(&self.noise_res[i], p, &self.noise_convs[i].forward_act(har), sq, &l);
            let x1 = up + src;
            let mut sum = snake_block(&self.resblocks[3 * i], p, &x1, sq, &l);
            for j in 1..3 {
                sum += snake_block(&self.resblocks[3 * i + j], p, &x1, sq, &l);
            }
            x = sum / 3.0;
        }
        let y = self.conv_post.torch().forward(&leaky(&x, f64::from(0.01f32)));
        rows.lens
            .iter()
            .enumerate()
            .map(|(b, &n)| {
                let y = y.narrow(0, b as i64, 1).narrow(2, 0, 60 * n + 1);
                signal::istft(&y, &self.inverse_basis, &self.window_sum)
            })
            .collect()
    }
}

impl Kokoro {
    /// Whether [`Kokoro::forward_batch`] runs a batch in one pass (the device's paths).
    pub fn batches(&self) -> bool {
        self.generator.device_paths
    }

    /// Several segments in one pass ([`Kokoro::forward`] of each, within float rounding), on the
    /// device's paths; elsewhere (int8, the CPU's own paths) one after the other.
    pub fn forward_batch(&self, items: &[Item]) -> R<Vec<Pass>> {
        let (p, dev) = (self.precision, self.device);
        if !self.batches() || items.len() < 2 {
            return items.iter().map(|i| self.forward(i.tokens, i.style, i.speed, None)).collect();
        }
        let b = items.len() as i64;
        let tokens = Lengths::new(items.iter().map(|i| i.tokens.len() as i64).collect(), dev);
        let len = tokens.longest();
        let padded: Vec<i64> = items
            .iter()
            .flat_map(|i| i.tokens.iter().copied().chain(std::iter::repeat(0)).take(len as usize))
            .collect();
        let tok = Tensor::from_slice(&padded).view([b, len]).to_device(dev);
        let styles: Vec<f32> = items.iter().flat_map(|i| i.style.iter().copied()).collect();
        let style = Tensor::from_slice(&styles).view([b, 256]).to_device(dev);
        let (s_dec, s_enc) = (style.narrow(1, 0, 128), style.narrow(1, 128, 128));
        let (sq_dec, sq_enc) = (quantize(p, &s_dec), quantize(p, &s_enc));
        let speeds: Vec<f32> = items.iter().map(|i| i.speed).collect();
        let speeds = Tensor::from_slice(&speeds).view([b, 1]).to_device(dev);
        let d_en = self.albert.forward_batch(p, &tok, &tokens);
        let d = self.prosody.encode_batch(&d_en, &s_enc, &sq_enc, &tokens);
        let raw = self.prosody.durations_batch(p, &d, &speeds, &tokens);
        // the one wait per batch: the durations, rounded, on the host
        let rounded = raw.round().clamp_min(1.0).to_kind(Kind::Int64).to_device(Device::Cpu);
        let rounded = Vec::<i64>::try_from(rounded.view([-1])).map_err(|e| e.to_string())?;
        let durations: Vec<Vec<i64>> =
            items.iter().enumerate().map(|(i, it)| rounded[i * len as usize..][..it.tokens.len()].to_vec()).collect();
        let frames = Lengths::new(durations.iter().map(|d| d.iter().sum()).collect(), dev);
        let t = frames.longest();
        // each segment's alignment [L, its T] in a batch [B, L, T]
        let aln = Tensor::zeros([b, len, t], (Kind::Float, dev));
        for (i, d) in durations.iter().enumerate() {
            let (l, f) = (d.len() as i64, frames.lens[i]);
            let mut own = aln.get(i as i64).narrow(0, 0, l).narrow(1, 0, f);
            own.copy_(&alignment(d, dev));
        }
        let en = d.transpose(1, 2).matmul(&aln);
        let rows = frames.scaled(2, 0, dev);
        let (f0, n) = self.prosody.f0_n_batch(p, &en, &sq_enc, &frames, &rows);
        let asr = self.text.forward_batch(p, &tok, &tokens).matmul(&aln);
        let x = self.decoder.forward_batch(p, &asr, (&f0, &n), &sq_dec, (&frames, &rows));
        // each segment's source and spectrum alone, padded to the longest
        let spectra: Vec<Tensor> = rows
            .lens
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let f0 = f0.narrow(0, i as i64, 1).narrow(1, 0, r);
                let m = self.generator.source(p, &f0);
                let spec = self.generator.source_spectrum(p, &m);
                let pad = HAR_PER_ROW as i64 * (rows.longest() - r);
                spec.constant_pad_nd([0, pad])
            })
            .collect();
        let har = quantize(p, &Tensor::cat(&spectra, 0));
        let audio = self.generator.forward_batch(p, &x, &har, &sq_dec, &rows);
        Ok(audio
            .into_iter()
            .zip(durations)
            .enumerate()
            .map(|(i, (audio, durations))| {
                let (l, r) = (items[i].tokens.len() as i64, rows.lens[i]);
                let item = |v: &Tensor, n: i64| v.narrow(0, i as i64, 1).narrow(1, 0, n).squeeze_dim(0);
                Pass { audio, durations, durations_raw: item(&raw, l), f0: item(&f0, r), n: item(&n, r) }
            })
            .collect())
    }
}
