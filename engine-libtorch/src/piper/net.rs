//! Piper's VITS written out block by block, inference only: the text encoder ([`TextEncoder`]:
//! embedding, transformer layers with windowed relative attention, projection to the prior's
//! mean and log σ), the duration predictor ([`super::duration`]), the length regulation, the
//! normalising flow in reverse ([`Flow`]: residual coupling layers of WaveNet blocks) and the
//! HiFi-GAN generator ([`Generator`]). Every shape is read off the export ([`super::load`]), so
//! the x_low, low, medium and high configurations and multi-speaker voices (a speaker
//! embedding conditioning the duration predictor, the flow and the generator) load alike.
//! Batch 1 and every position valid: VITS's masks are all ones and are left out.

use std::cell::RefCell;

use tch::{Device, Kind, Tensor};

use super::duration::{ChannelNorm, Durations};
use super::int8::{Out, PostConv, Pre, QConv};
use super::load::{Conv, Weights};

type R<T> = Result<T, String>;

/// VITS's LeakyReLU slope in the generator (`LRELU_SLOPE`).
const SLOPE: f64 = 0.1;
/// The slope before `conv_post`: `F.leaky_relu`'s default.
const POST_SLOPE: f64 = 0.01;

/// LeakyReLU of a slope below 1: max(x, slope·x), the same values (tch has no slope argument).
fn leaky(x: &Tensor, slope: f64) -> Tensor {
    x.maximum(&(x * slope))
}

/// Multi-head self-attention with relative position embeddings shared by the heads, within
/// ±`window` (`attentions.MultiHeadAttention`, window 4 in Piper).
struct Attention {
    q: Conv,
    k: Conv,
    v: Conv,
    o: Conv,
    /// [1 or heads, 2·window + 1, d]
    rel_k: Tensor,
    rel_v: Tensor,
    heads: i64,
    window: i64,
}

impl Attention {
    fn load(w: &Weights, module: &str, hidden: i64) -> R<Attention> {
        let rel_k = w.float(&format!("{module}.emb_rel_k"))?;
        let rel_v = w.float(&format!("{module}.emb_rel_v"))?;
        let [_, span, d] = rel_k.size()[..] else { return Err(format!("{module}.emb_rel_k: not [h, 2w + 1, d]")) };
        if d == 0 || hidden % d != 0 || span % 2 == 0 || rel_v.size() != rel_k.size() {
            return Err(format!("{module}: relative embeddings {:?} for {hidden} channels", rel_k.size()));
        }
        Ok(Attention {
            q: w.conv(&format!("{module}.conv_q"))?,
            k: w.conv(&format!("{module}.conv_k"))?,
            v: w.conv(&format!("{module}.conv_v"))?,
            o: w.conv(&format!("{module}.conv_o"))?,
            rel_k,
            rel_v,
            heads: hidden / d,
            window: (span - 1) / 2,
        })
    }

    /// x [1, H, L] → [1, H, L].
    fn forward(&self, x: &Tensor, band: &Band) -> Tensor {
        let [_, h, l] = x.size()[..] else { unreachable!("[1, H, L]") };
        let (nh, d) = (self.heads, h / self.heads);
        let split = |t: Tensor| t.view([1, nh, d, l]).transpose(2, 3);
        let q = split(self.q.forward(x)) / (d as f64).sqrt();
        let k = split(self.k.forward(x));
        let v = split(self.v.forward(x));
        // scores plus the relative keys' logits on the band |j − i| ≤ window
        let rel = q.matmul(&self.rel_k.transpose(1, 2).unsqueeze(0)); // [1, nh, L, 2w + 1]
        let local = rel.gather(3, &band.rel_index.expand([1, nh, l, l], false), false);
        let local = local.where_self(&band.rel_mask, &Tensor::zeros([1], (Kind::Float, x.device())));
        let scores = q.matmul(&k.transpose(2, 3)) + local;
        let p = scores.softmax(-1, Kind::Float);
        // the relative values: the band of p, [1, nh, L, 2w + 1], times their embeddings
        let pb = p.gather(3, &band.abs_index.expand([1, nh, l, 2 * self.window + 1], false), false);
        let pb = pb.where_self(&band.abs_mask, &Tensor::zeros([1], (Kind::Float, x.device())));
        let out = p.matmul(&v) + pb.matmul(&self.rel_v.unsqueeze(0));
        self.o.forward(&out.transpose(2, 3).contiguous().view([1, h, l]))
    }
}

/// The index maps of relative attention for one length L: column j − i + w of the relative
/// logits for score (i, j), and column i + m − w of the scores for relative weight (i, m),
/// with the masks of where those lie within the window and the sequence.
struct Band {
    rel_index: Tensor,
    rel_mask: Tensor,
    abs_index: Tensor,
    abs_mask: Tensor,
}

impl Band {
    fn new(l: i64, w: i64, device: Device) -> Band {
        let i = Tensor::arange(l, (Kind::Int64, device)).view([l, 1]);
        let j = Tensor::arange(l, (Kind::Int64, device)).view([1, l]);
        let rel = &j - &i + w; // [L, L]
        let m = Tensor::arange(2 * w + 1, (Kind::Int64, device)).view([1, 2 * w + 1]);
        let abs = &i + m - w; // [L, 2w + 1]
        Band {
            rel_mask: rel.ge(0).logical_and(&rel.le(2 * w)).view([1, 1, l, l]),
            rel_index: rel.clamp(0, 2 * w).view([1, 1, l, l]),
            abs_mask: abs.ge(0).logical_and(&abs.lt(l)).view([1, 1, l, 2 * w + 1]),
            abs_index: abs.clamp(0, l - 1).view([1, 1, l, 2 * w + 1]),
        }
    }
}

/// One transformer layer of the text encoder: attention, norm, FFN (two convs with ReLU,
/// "same" padding), norm; post-norm residuals.
struct EncoderLayer {
    attn: Attention,
    norm1: ChannelNorm,
    ffn1: Conv,
    ffn2: Conv,
    norm2: ChannelNorm,
}

impl EncoderLayer {
    fn ffn_conv(x: &Tensor, c: &Conv) -> Tensor {
        let k = c.k();
        c.forward(&x.constant_pad_nd([(k - 1) / 2, k / 2]))
    }

    fn forward(&self, x: &Tensor, band: &Band) -> Tensor {
        let x = self.norm1.forward(&(x + self.attn.forward(x, band)));
        let y = Self::ffn_conv(&Self::ffn_conv(&x, &self.ffn1).relu(), &self.ffn2);
        self.norm2.forward(&(x + y))
    }
}

/// The text encoder (`TextEncoder`): ids → (hidden states [1, H, L], prior mean and log σ
/// [1, C, L] each).
struct TextEncoder {
    emb: Tensor,
    layers: Vec<EncoderLayer>,
    proj: Conv,
}

impl TextEncoder {
    fn load(w: &Weights) -> R<TextEncoder> {
        let emb = w.gathered_by("input")?;
        let [_, hidden] = emb.size()[..] else { return Err("the text embedding is not [symbols, H]".into()) };
        let mut layers = Vec::new();
        for i in 0.. {
            let m = format!("enc_p.encoder.attn_layers.{i}");
            if !w.has(&format!("{m}.emb_rel_k")) {
                break;
            }
            layers.push(EncoderLayer {
                attn: Attention::load(w, &m, hidden)?,
                norm1: ChannelNorm::load(w, &format!("enc_p.encoder.norm_layers_1.{i}"))?,
                ffn1: w.conv(&format!("enc_p.encoder.ffn_layers.{i}.conv_1"))?,
                ffn2: w.conv(&format!("enc_p.encoder.ffn_layers.{i}.conv_2"))?,
                norm2: ChannelNorm::load(w, &format!("enc_p.encoder.norm_layers_2.{i}"))?,
            });
        }
        if layers.is_empty() {
            return Err("no text encoder layers (enc_p.encoder.attn_layers.0)".into());
        }
        Ok(TextEncoder { emb, layers, proj: w.conv("enc_p.proj")? })
    }

    fn hidden(&self) -> i64 {
        self.emb.size()[1]
    }

    fn forward(&self, ids: &Tensor) -> (Tensor, Tensor, Tensor) {
        let l = ids.size()[0];
        let h = self.hidden();
        let mut x = (self.emb.index_select(0, ids) * (h as f64).sqrt()).transpose(0, 1).unsqueeze(0);
        let band = Band::new(l, self.layers[0].attn.window, ids.device());
        for layer in &self.layers {
            x = layer.forward(&x, &band);
        }
        let stats = self.proj.forward(&x);
        let c = stats.size()[1] / 2;
        let (m, logs) = (stats.narrow(1, 0, c), stats.narrow(1, c, c));
        (x, m, logs)
    }
}

/// A WaveNet block (`modules.WN`): per layer a dilated conv, plus the speaker's conditioning,
/// gated tanh·sigmoid, and a 1×1 conv split into the residual and the skip sum.
struct WaveNet {
    layers: Vec<(Conv, Conv)>,
    cond: Option<Conv>,
    hidden: i64,
}

impl WaveNet {
    fn load(w: &Weights, module: &str) -> R<WaveNet> {
        let mut layers = Vec::new();
        for i in 0.. {
            let m = format!("{module}.in_layers.{i}");
            if !w.has(&format!("{m}.bias")) && !w.has(&format!("{m}.weight")) && !w.has(&format!("{m}.weight_v")) {
                break;
            }
            layers.push((w.conv(&m)?, w.conv(&format!("{module}.res_skip_layers.{i}"))?));
        }
        let Some((first, _)) = layers.first() else { return Err(format!("{module}: no layers")) };
        let hidden = first.c_in();
        let cond = format!("{module}.cond_layer");
        let cond = if w.has(&format!("{cond}.bias")) || w.has(&format!("{cond}.weight")) {
            Some(w.conv(&cond)?)
        } else {
            None
        };
        Ok(WaveNet { layers, cond, hidden })
    }

    fn forward(&self, x: &Tensor, g: Option<&Tensor>) -> Tensor {
        let h = self.hidden;
        let g = match (&self.cond, g) {
            (Some(c), Some(g)) => Some(c.forward(g)),
            _ => None,
        };
        let mut x = x.shallow_clone();
        let mut out: Option<Tensor> = None;
        let n = self.layers.len();
        for (i, (inl, rs)) in self.layers.iter().enumerate() {
            let mut a = inl.forward(&x);
            if let Some(g) = &g {
                a = &a + g.narrow(1, i as i64 * 2 * h, 2 * h);
            }
            let acts = a.narrow(1, 0, h).tanh() * a.narrow(1, h, h).sigmoid();
            let r = rs.forward(&acts);
            let skip = if i + 1 < n {
                x = &x + r.narrow(1, 0, h);
                r.narrow(1, h, h)
            } else {
                r
            };
            out = Some(match out {
                Some(o) => o + skip,
                None => skip,
            });
        }
        out.expect("at least one layer")
    }
}

/// A residual coupling layer (`modules.ResidualCouplingLayer`), mean-only as VITS builds them
/// (a `post` of twice the half channels would carry log σ too, and is read as such).
struct Coupling {
    pre: Conv,
    enc: WaveNet,
    post: Conv,
    half: i64,
}

impl Coupling {
    fn reverse(&self, x: &Tensor, g: Option<&Tensor>) -> Tensor {
        let x0 = x.narrow(1, 0, self.half);
        let x1 = x.narrow(1, self.half, self.half);
        let stats = self.post.forward(&self.enc.forward(&self.pre.forward(&x0), g));
        let x1 = if stats.size()[1] == self.half {
            x1 - stats
        } else {
            (x1 - stats.narrow(1, 0, self.half)) * stats.narrow(1, self.half, self.half).neg().exp()
        };
        Tensor::cat(&[x0, x1], 1)
    }
}

/// The flow (`ResidualCouplingBlock`), coupling layers each followed by a channel flip, run in
/// reverse.
struct Flow {
    layers: Vec<Coupling>,
}

impl Flow {
    fn load(w: &Weights, channels: i64) -> R<Flow> {
        let mut layers = Vec::new();
        for i in (0..).step_by(2) {
            let m = format!("flow.flows.{i}");
            if !w.has(&format!("{m}.pre.weight")) && !w.has(&format!("{m}.pre.bias")) {
                break;
            }
            let c = Coupling {
                pre: w.conv(&format!("{m}.pre"))?,
                enc: WaveNet::load(w, &format!("{m}.enc"))?,
                post: w.conv(&format!("{m}.post"))?,
                half: channels / 2,
            };
            if c.pre.c_in() != c.half || (c.post.c_out() != c.half && c.post.c_out() != channels) {
                return Err(format!(
                    "{m}: a coupling of {} → {} for {channels} channels",
                    c.pre.c_in(),
                    c.post.c_out()
                ));
            }
            layers.push(c);
        }
        if layers.is_empty() {
            return Err("no flow (flow.flows.0)".into());
        }
        Ok(Flow { layers })
    }

    /// Frames of context a stretch of frames needs on each side to come out as in the whole
    /// pass: the WaveNet layers' reach (half each dilated kernel) summed over the coupling
    /// layers (the 1×1 convolutions reach nothing). 32 for joe: 4 couplings of 4 layers of
    /// kernel 5.
    fn context(&self) -> usize {
        let reach = |c: &Conv| ((c.k() - 1) * c.dil / 2) as usize;
        self.layers.iter().flat_map(|c| &c.enc.layers).map(|(inl, _)| reach(inl)).sum()
    }

    fn reverse(&self, z: &Tensor, g: Option<&Tensor>) -> Tensor {
        let mut z = z.shallow_clone();
        for layer in self.layers.iter().rev() {
            z = layer.reverse(&z.flip([1]), g);
        }
        z
    }
}

/// A residual block of the generator: `modules.ResBlock1` (pairs of a dilated and a plain
/// conv) or `ResBlock2` (single dilated convs), each step LeakyReLU → conv(s) → + input.
struct ResBlock {
    /// (dilated conv, the plain conv that follows it in a ResBlock1)
    steps: Vec<(Conv, Option<Conv>)>,
}

impl ResBlock {
    fn load(w: &Weights, module: &str) -> R<ResBlock> {
        let mut steps = Vec::new();
        let exists =
            |m: &str| w.has(&format!("{m}.weight")) || w.has(&format!("{m}.bias")) || w.has(&format!("{m}.weight_v"));
        if exists(&format!("{module}.convs1.0")) {
            for i in 0.. {
                let m = format!("{module}.convs1.{i}");
                if !exists(&m) {
                    break;
                }
                let c2 = w.conv(&format!("{module}.convs2.{i}"))?.channels_last();
                steps.push((w.conv(&m)?.channels_last(), Some(c2)));
            }
        } else {
            for i in 0.. {
                let m = format!("{module}.convs.{i}");
                if !exists(&m) {
                    break;
                }
                steps.push((w.conv(&m)?.channels_last(), None));
            }
        }
        if steps.is_empty() {
            return Err(format!("{module}: neither convs1.0 (ResBlock1) nor convs.0 (ResBlock2)"));
        }
        Ok(ResBlock { steps })
    }

    /// x and LeakyReLU(x), which the stage's blocks share, → the block's output.
    fn forward(&self, x: &Tensor, x_leaky: &Tensor) -> Tensor {
        let mut x = x.shallow_clone();
        for (i, (c1, c2)) in self.steps.iter().enumerate() {
            let mut t = if i == 0 { c1.forward(x_leaky) } else { c1.forward(&leaky(&x, SLOPE)) };
            if let Some(c2) = c2 {
                t = c2.forward(&leaky(&t, SLOPE));
            }
            x = t + x;
        }
        x
    }
}

/// The HiFi-GAN generator (`models.Generator`): conv_pre, per stage LeakyReLU, transposed conv
/// up-sampling and the mean of the stage's residual blocks, then LeakyReLU, conv_post, tanh.
pub(super) struct Generator {
    pre: Conv,
    cond: Option<Conv>,
    stages: Vec<(Conv, Vec<ResBlock>)>,
    post: Conv,
    /// conv_post on the int8 stages' output ([`Generator::forward_int8`])
    post_q: Option<PostConv>,
    /// The up-samplings and residual blocks run in int8 ([`Generator::quantize`])
    int8: bool,
}

impl Generator {
    fn load(w: &Weights) -> R<Generator> {
        let mut ups = Vec::new();
        for i in 0.. {
            let m = format!("dec.ups.{i}");
            if !w.has(&format!("{m}.bias")) && !w.has(&format!("{m}.weight")) && !w.has(&format!("{m}.weight_v")) {
                break;
            }
            let up = w.conv(&m)?;
            if !up.transposed {
                return Err(format!("{m}: not a transposed convolution"));
            }
            ups.push(up);
        }
        let mut blocks = Vec::new();
        for j in 0.. {
            let m = format!("dec.resblocks.{j}");
            if !w.has(&format!("{m}.convs1.0.bias")) && !w.has(&format!("{m}.convs.0.bias")) {
                break;
            }
            blocks.push(ResBlock::load(w, &m)?);
        }
        if ups.is_empty() || blocks.is_empty() || blocks.len() % ups.len() != 0 {
            return Err(format!("the generator: {} up-samplings and {} residual blocks", ups.len(), blocks.len()));
        }
        let per = blocks.len() / ups.len();
        let mut blocks = blocks.into_iter();
        let stages = ups.into_iter().map(|up| (up.channels_last(), blocks.by_ref().take(per).collect())).collect();
        let cond = if w.has("dec.cond.weight") || w.has("dec.cond.bias") { Some(w.conv("dec.cond")?) } else { None };
        Ok(Generator {
            pre: w.conv("dec.conv_pre")?.channels_last(),
            cond: cond.map(Conv::channels_last),
            stages,
            post: w.conv("dec.conv_post")?.channels_last(),
            post_q: None,
            int8: false,
        })
    }

    /// Runs the up-samplings and the residual blocks in int8 ([`super::int8`]), where every one
    /// of them is covered, and then conv_pre too, per frame ([`QConv::per_row`]: 2-3 ms of
    /// joe's short sentence's 105 in fp32, its SNR against fp32 0.05 dB lower on average over
    /// seven sentences and three seeds); conv_post ([`PostConv`]) and the conditioning stay fp32
    /// (one output channel; one frame). The last stage (up-sampling and residual blocks, at the audio rate)
    /// quantizes its activations in two passes ([`QConv::two_pass`]): in one, joe lost 0.2
    /// Distill-MOS against fp32, nearly all of it there (the earlier stages in fp32 won back
    /// 0.03, the last 0.20; two passes there 0.20, for 18% more time, 33% capped to AVX2).
    /// Returns whether it does.
    fn quantize(&mut self) -> bool {
        let stages = self.stages.len();
        for (i, (up, blocks)) in self.stages.iter_mut().enumerate() {
            let last = i + 1 == stages;
            let quantize = |c: &mut Conv| {
                c.quantize();
                if let (Some(q), true) = (&mut c.q, last) {
                    q.two_pass();
                }
            };
            quantize(up);
            for b in blocks {
                for (c1, c2) in &mut b.steps {
                    quantize(c1);
                    if let Some(c2) = c2 {
                        quantize(c2);
                    }
                }
            }
        }
        let covered = |c: &Conv| c.q.is_some();
        self.int8 = self.stages.iter().all(|(up, blocks)| {
            covered(up)
                && blocks.iter().flat_map(|b| &b.steps).all(|(c1, c2)| covered(c1) && c2.as_ref().is_none_or(covered))
        });
        if self.int8 {
            self.pre.quantize_per_row();
            self.post_q = PostConv::new(&self.post.parts());
        } else {
            // all or nothing: the int8 stages run time-major, the float ones channels-last
            for (up, blocks) in &mut self.stages {
                up.q = None;
                for (c1, c2) in blocks.iter_mut().flat_map(|b| &mut b.steps) {
                    c1.q = None;
                    if let Some(c2) = c2 {
                        c2.q = None;
                    }
                }
            }
        }
        self.int8
    }

    /// [`Generator::forward`] with the stages in int8: time-major buffers ([T, C], the
    /// channels-last tensors' memory) from conv_pre's output to conv_post's input, each
    /// convolution's LeakyReLU applied as its input is quantized, each residual sum added as its
    /// output is written, the last step of each residual block adding into the stage's sum, and
    /// the mean's 1/blocks carried into the next LeakyReLU; the buffers kept between passes
    /// ([`Buffer`]); conv_post, in fp32, on the last stage's buffer with the mean and its
    /// LeakyReLU applied as it reads it ([`PostConv`]).
    fn forward_int8(&self, z: &Tensor, g: Option<&Tensor>) -> Tensor {
        let mut x = self.pre.forward(&z.unsqueeze(2));
        if let (Some(c), Some(g)) = (&self.cond, g) {
            x = &x + c.forward(&g.unsqueeze(2));
        }
        // [1, C, 1, T] channels-last → [T, C]
        let x = x.permute([0, 2, 3, 1]).to_kind(Kind::Float).contiguous();
        let x = crate::tensor_slices::f32s(&x);
        let mut cur = Buffer::take(x.len());
        cur.get().copy_from_slice(x);
        let mut mul = 1.0f32;
        fn q(c: &Conv) -> &QConv {
            c.q.as_ref().expect("quantized")
        }
        for (up, blocks) in &self.stages {
            let up = q(up);
            let c = up.c_out();
            let n = up.out_len(cur.len / up.c_in()) * c;
            let mut y = Buffer::take(n);
            up.run(cur.get(), Pre { slope: SLOPE as f32, mul }, y.get(), Out::Store);
            // a step reads the block's input (the up-sampling's y) or ping, and writes ping
            // (after y), pong (after ping: then swapped) or, the block's last, acc: blocks of
            // two steps (ResBlock2) need no pong, and leave one 8.7 MB buffer less in cache
            let (mut acc, mut ping, mut pong) = (Buffer::take(n), Buffer::take(n), None);
            let mut tmp = None;
            let leaky = Pre::leaky(SLOPE);
            for (bi, block) in blocks.iter().enumerate() {
                for (si, (c1, c2)) in block.steps.iter().enumerate() {
                    let last = si + 1 == block.steps.len();
                    let (input, out): (&[f32], &mut [f32]) = match (si, last) {
                        (0, true) => (y.get(), acc.get()),
                        (0, false) => (y.get(), ping.get()),
                        (_, true) => (ping.get(), acc.get()),
                        (_, false) => (ping.get(), pong.get_or_insert_with(|| Buffer::take(n)).get()),
                    };
                    let how = if !last || bi == 0 { Out::Residual(input) } else { Out::AddResidual(input) };
                    match c2 {
                        None => q(c1).run(input, leaky, out, how),
                        Some(c2) => {
                            let tmp = tmp.get_or_insert_with(|| Buffer::take(n)).get();
                            q(c1).run(input, leaky, tmp, Out::Store);
                            q(c2).run(tmp, leaky, out, how);
                        }
                    }
                    if si > 0 && !last {
                        std::mem::swap(&mut ping, pong.as_mut().expect("written"));
                    }
                }
            }
            cur = acc;
            mul = 1.0 / blocks.len() as f32;
        }
        let cur = cur.get();
        let c = self.post.c_in();
        let t = cur.len() as i64 / c;
        let pre = Pre { slope: POST_SLOPE as f32, mul };
        if let Some(p) = &self.post_q {
            let mut y = Tensor::empty([1, 1, 1, p.out_len(t as usize) as i64], (Kind::Float, Device::Cpu));
            // SAFETY: a tensor made here and held alone while the slice lives.
            p.run(cur, pre, unsafe { crate::tensor_slices::f32s_mut(&mut y) });
            return y.tanh_();
        }
        let x = Tensor::from_slice(cur).view([1, 1, t, c]).permute([0, 3, 1, 2]) * f64::from(mul);
        self.post.forward(&leaky(&x, POST_SLOPE)).tanh()
    }

    /// Audio samples per frame: the product of the up-sampling strides.
    pub fn hop(&self) -> usize {
        self.stages.iter().map(|(up, _)| up.stride as usize).product()
    }

    /// Frames of context a stretch of frames needs on each side to be decoded as in the whole
    /// pass: its receptive field, each layer's reach (half its dilated kernel; an up-sampling's
    /// whole kernel, in its input steps) in frames at that layer's rate, summed and rounded up:
    /// 12 for joe (medium), 3 more than fp32 needs to give the whole pass's samples.
    fn context(&self) -> usize {
        let reach = |c: &Conv| ((c.k() - 1) * c.dil / 2) as f64;
        let mut rate = 1.0; // steps per frame
        let mut frames = reach(&self.pre);
        for (up, blocks) in &self.stages {
            frames += (up.k() as f64 / up.stride as f64).ceil() / rate;
            rate *= up.stride as f64;
            let block = |b: &ResBlock| -> f64 {
                b.steps.iter().map(|(c1, c2)| reach(c1) + c2.as_ref().map_or(0.0, reach)).sum()
            };
            frames += blocks.iter().map(block).fold(0.0, f64::max) / rate;
        }
        frames += reach(&self.post) / rate;
        frames.ceil() as usize
    }

    /// z [1, C, T] → audio [1, 1, 1, T·hop]. Channels-last throughout ([`Conv::channels_last`]).
    fn forward(&self, z: &Tensor, g: Option<&Tensor>) -> Tensor {
        if self.int8 {
            return self.forward_int8(z, g);
        }
        let mut x = self.pre.forward(&z.unsqueeze(2));
        if let (Some(c), Some(g)) = (&self.cond, g) {
            x = &x + c.forward(&g.unsqueeze(2));
        }
        for (up, blocks) in &self.stages {
            x = Self::stage(up, blocks, &x);
        }
        self.post.forward(&leaky(&x, POST_SLOPE)).tanh()
    }

    /// One stage in fp32: up-sampling of LeakyReLU(x), then the mean of the residual blocks.
    fn stage(up: &Conv, blocks: &[ResBlock], x: &Tensor) -> Tensor {
        let x = up.forward(&leaky(x, SLOPE));
        let x_leaky = leaky(&x, SLOPE);
        let mut sum: Option<Tensor> = None;
        for b in blocks {
            let y = b.forward(&x, &x_leaky);
            sum = Some(match sum {
                Some(s) => s + y,
                None => y,
            });
        }
        sum.expect("at least one block") / blocks.len() as f64
    }
}

thread_local! {
    /// [`Buffer`]s kept for the next pass on this thread.
    static BUFFERS: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// [`Buffer`]s of at most this many values (16 MB: joe's last stage for ~5.6 s of audio) are
/// kept for the next pass, six at most (the stages' own); longer ones are freed.
const KEPT_BUFFER: usize = 4 << 20;

/// A buffer of the int8 generator's stages ([`Generator::forward_int8`]: time-major activations
/// at up to the audio rate, 8.7 MB each at joe's last stage for 3 s of audio), taken from those
/// earlier passes on the thread left and given back when dropped: their pages are neither
/// zeroed nor faulted in again each pass (calloc zeroed ~60 MB per pass of a short sentence).
/// Every value of [`Buffer::get`] is written before it is read (stored, or the residual's
/// store, by [`QConv::run`]), so what an earlier pass left there is never seen.
struct Buffer {
    v: Vec<f32>,
    len: usize,
}

impl Buffer {
    fn take(len: usize) -> Buffer {
        let mut v = BUFFERS.with_borrow_mut(|b| b.pop()).unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0.0);
        }
        Buffer { v, len }
    }

    fn get(&mut self) -> &mut [f32] {
        &mut self.v[..self.len]
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.v.len() <= KEPT_BUFFER {
            let v = std::mem::take(&mut self.v);
            BUFFERS.with_borrow_mut(|b| b.push(v));
        }
    }
}

/// A pass up to the flow: what the flow and the generator turn into audio.
pub(super) struct Prior {
    /// The prior's sample [1, C, T] (the flow's input): T frames
    pub z_p: Tensor,
    /// The speaker's embedding [1, gin, 1] (a multi-speaker voice)
    pub g: Option<Tensor>,
    pub durations: Vec<i64>,
}

/// The whole network.
pub(super) struct Vits {
    enc: TextEncoder,
    dur: Durations,
    flow: Flow,
    pub dec: Generator,
    /// [speakers, gin] for a multi-speaker voice
    emb_g: Option<Tensor>,
    pub device: Device,
    /// the prior's channels (`inter_channels`)
    pub channels: i64,
}

/// The scales of [`Vits::forward`], as f64 (tch's scalar type).
pub(super) struct PassScales {
    pub noise_scale: f64,
    pub length_scale: f64,
    pub noise_w: f64,
}

impl Vits {
    pub fn load(w: &Weights) -> R<Vits> {
        let enc = TextEncoder::load(w)?;
        let channels = enc.proj.c_out() / 2;
        let emb_g = if w.has_input("sid") {
            Some(w.gathered_by("sid")?)
        } else if w.has("emb_g.weight") {
            Some(w.float("emb_g.weight")?)
        } else {
            None
        };
        let net = Vits {
            dur: Durations::load(w)?,
            flow: Flow::load(w, channels)?,
            dec: Generator::load(w)?,
            enc,
            emb_g,
            device: w.device,
            channels,
        };
        if net.dec.pre.c_in() != channels {
            return Err(format!("dec.conv_pre takes {} channels, the prior has {channels}", net.dec.pre.c_in()));
        }
        Ok(net)
    }

    /// Runs the heavy convolutions in int8 ([`super::int8`]), CPU only: the generator's
    /// up-samplings and residual blocks (activations quantized per block of steps, the last
    /// stage's in two passes: [`Generator::quantize`]), the flow's WaveNet layers (per frame),
    /// and the text encoder's FFN convolutions (per token: two thirds of the encoder's time,
    /// a fifth of a short sentence's). Returns false, and leaves the network fp32, where the
    /// generator is not covered.
    ///
    /// The FFN in int8 moves the prior a little, and with it some durations by a frame (2 of
    /// joe's 109 tokens of tests/piper_model.rs's sentence), so its audio is another rendering
    /// of the sentence rather than fp32's within int8's noise; what it is heard as is what
    /// counts: Distill-MOS on the held-out sentences over seven seeded draws 4.126 against
    /// 4.121 with the FFN in fp32, Whisper base 2/92 words wrong either way (piper-tts 4-5),
    /// for 8% less time on a short sentence (benches/results/17-piper.md). Left fp32: the
    /// encoder's q/k/v and output convolutions (13-15 dB SNR against fp32 in int8, for a third of
    /// its time) and `enc_p.proj` (10 dB: its 8-bit weights move the prior), the flow's pre and
    /// post 1×1 convolutions (−4 dB, for little time), conv_post and the duration predictor
    /// (little time).
    pub fn quantize(&mut self) -> bool {
        if !self.dec.quantize() {
            return false;
        }
        for c in &mut self.flow.layers {
            for (inl, rs) in &mut c.enc.layers {
                inl.quantize_per_row();
                rs.quantize_per_row();
            }
        }
        for l in &mut self.enc.layers {
            l.ffn1.quantize_per_row();
            l.ffn2.quantize_per_row();
        }
        true
    }

    /// The text encoder's FFN convolutions back in fp32 ([`Vits::quantize`] runs them in int8):
    /// what the tests compare the rest of int8 with fp32 on, the durations then the same.
    pub fn float_encoder(&mut self) {
        for l in &mut self.enc.layers {
            l.ffn1.q = None;
            l.ffn2.q = None;
        }
    }

    pub fn symbols(&self) -> i64 {
        self.enc.emb.size()[0]
    }

    pub fn speakers(&self) -> i64 {
        self.emb_g.as_ref().map_or(1, |e| e.size()[0])
    }

    pub fn stochastic(&self) -> bool {
        self.dur.stochastic()
    }

    /// A pass up to the flow: ids [L] (int64, on the device), the speaker, standard-normal
    /// noise for the duration predictor [1, 2, L] and, for the prior, `prior_noise(T)` →
    /// [1, C, T]; `max_frames` refuses longer outputs. [`Vits::decode`] then turns its frames
    /// into audio, whole or a stretch at a time.
    pub fn prepare(
        &self,
        ids: &Tensor,
        speaker: Option<i64>,
        s: &PassScales,
        dp_noise: &Tensor,
        prior_noise: impl FnOnce(i64) -> Tensor,
        max_frames: i64,
    ) -> R<Prior> {
        let (x, m, logs) = self.enc.forward(ids);
        let g = match (&self.emb_g, speaker) {
            (Some(e), Some(s)) => Some(e.narrow(0, s, 1).unsqueeze(2)),
            _ => None,
        };
        let logw = self.dur.forward(&x, g.as_ref(), dp_noise, s.noise_w);
        let w_ceil = (logw.exp() * s.length_scale).ceil().view([-1]).to_device(Device::Cpu);
        let durations: Vec<i64> = Vec::<f32>::try_from(&w_ceil)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|&d| if d.is_finite() { d as i64 } else { i64::MAX / 4 })
            .collect();
        let total: i64 = durations.iter().map(|&d| d.max(0)).sum();
        if total > max_frames {
            return Err(format!("{total} frames: more than the {max_frames} a pass may make"));
        }
        // each frame takes its token's prior (VITS's path matrix, as an index)
        let mut index = Vec::with_capacity(total.max(1) as usize);
        for (i, &d) in durations.iter().enumerate() {
            index.extend(std::iter::repeat_n(i as i64, d.max(0) as usize));
        }
        let (m, logs) = if index.is_empty() {
            // no frame at all: VITS still decodes one, of an all-zero prior
            let z = Tensor::zeros([1, self.channels, 1], (Kind::Float, self.device));
            (z.shallow_clone(), z)
        } else {
            let index = Tensor::from_slice(&index).to_device(self.device);
            (m.index_select(2, &index), logs.index_select(2, &index))
        };
        let t = m.size()[2];
        let z_p = &m + prior_noise(t) * logs.exp() * s.noise_scale;
        Ok(Prior { z_p, g, durations })
    }

    /// Frames of context a stretch needs on each side: the generator's, then the flow's.
    pub fn context(&self) -> (usize, usize) {
        (self.dec.context(), self.flow.context())
    }

    /// Frames `range` of a pass → their audio [(end − start)·hop] (a range past its end is cut
    /// there): the flow over the range with both contexts on each side (where the pass has
    /// them), the generator over it with its own. The whole range is the whole pass. In fp32 a
    /// stretch's samples are the whole pass's up to float rounding; in int8 a block of steps
    /// whose window the cut shortens quantizes on its own range, within int8's own noise
    /// (tests/piper_model.rs measures it).
    pub fn decode(&self, prior: &Prior, range: std::ops::Range<usize>) -> Tensor {
        let t = prior.z_p.size()[2] as usize;
        let (a, b) = (range.start.min(t), range.end.min(t));
        let (cd, cf) = self.context();
        let (da, db) = (a.saturating_sub(cd), (b + cd).min(t));
        let (fa, fb) = (da.saturating_sub(cf), (db + cf).min(t));
        let g = prior.g.as_ref();
        let z = self.flow.reverse(&prior.z_p.narrow(2, fa as i64, (fb - fa) as i64), g);
        let z = z.narrow(2, (da - fa) as i64, (db - da) as i64);
        let audio = self.dec.forward(&z, g).view([-1]);
        let hop = self.dec.hop() as i64;
        audio.narrow(0, (a - da) as i64 * hop, (b - a) as i64 * hop)
    }
}
