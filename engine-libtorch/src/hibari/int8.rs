//! The int8 network: the same layers with int8 Linear weights and the row-wise kernels of
//! [`crate::kernels`].

use super::*;

/// The int8 path's weights (CPU), in the layouts of [`crate::kernels`].
pub(super) struct Int8 {
    /// ConvNeXt blocks by prefix (m.text.convs.i, pn.text.convs.i, pn.pro.i, m.dec.i)
    pub(super) blocks: HashMap<String, QBlock>,
    /// the two weight-tied transformer layers by prefix (m.text.attn, pn.text.attn)
    pub(super) layers: HashMap<String, QLayer>,
    /// m.dec_in by token ([`DecIn`]); pn.pro_in and pn.pro_out (K=1 convs)
    pub(super) dec_in: DecIn,
    pub(super) pro_in: LinearF32,
    pub(super) pro_out: LinearF32,
    pub(super) dec_norm: (Tensor, Tensor),
    /// m.head by its five parts of N_BINS outputs (lh, θ, ln, lr, φ: [`Spectra::from_parts`]), each
    /// its own matrix: a part's weights (154 KB) stay in L2 while all of a batch's rows go
    /// through them (the whole head's 770 KB did not, next to its sums and outputs)
    pub(super) head: Vec<QWeight>,
}

/// A ConvNeXt block of the int8 path.
pub(super) struct QBlock {
    /// the depthwise weight as [K, C]
    pub(super) wk: Tensor,
    pub(super) db: Tensor,
    pub(super) norm: (Tensor, Tensor),
    pub(super) gamma: Tensor,
    pub(super) pw1: QWeight,
    pub(super) pw2: QWeight,
}

/// A transformer pass of the int8 path.
pub(super) struct QLayer {
    pub(super) norm1: (Tensor, Tensor),
    pub(super) in_proj: QWeight,
    pub(super) out_proj: QWeight,
    pub(super) norm2: (Tensor, Tensor),
    pub(super) linear1: QWeight,
    pub(super) linear2: QWeight,
}

impl Int8 {
    pub(super) fn new(h: &Hibari, level: Level) -> Result<Int8, HibariError> {
        crate::gemm::calibrate();
        // the outputs `rows` of the matrix `name` (all of them: None)
        let qw_rows = |name: &str, rows: Option<(i64, i64)>| -> Result<QWeight, HibariError> {
            let (scale, bias) =
                h.weight_scales.get(name).ok_or_else(|| HibariError::Invalid(format!("{name}: no int8 weights")))?;
            let b = h.params.get(bias).ok_or_else(|| HibariError::Invalid(format!("{name}: bias {bias} missing")))?;
            let (w, b) = match rows {
                None => (h.param(name).shallow_clone(), b.shallow_clone()),
                Some((start, len)) => (h.param(name).narrow(0, start, len), b.narrow(0, start, len)),
            };
            QWeight::new_at(&w, *scale, &b, level).map_err(|e| HibariError::Invalid(format!("{name}: {e}")))
        };
        let qw = |name: &str| qw_rows(name, None);
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
            dec_in: DecIn::new(h.param("m.dec_in.weight"), h.param("m.dec_in.bias")),
            pro_in: LinearF32::new(h.param("pn.pro_in.weight"), h.param("pn.pro_in.bias")),
            pro_out: LinearF32::new(h.param("pn.pro_out.weight"), h.param("pn.pro_out.bias")),
            dec_norm: (c(h.param("m.dec_norm.weight")), c(h.param("m.dec_norm.bias"))),
            head: (0..5).map(|i| qw_rows("m.head.weight", Some((i * N_BINS, N_BINS)))).collect::<Result<_, _>>()?,
        })
    }

    pub(super) fn block(&self, pre: &str) -> &QBlock {
        &self.blocks[pre]
    }
}

/// A ConvNeXt block of the int8 path on x [Σ seqs, C]: sequences of `seqs` frames one after the
/// other, time-major, updated in place; `mask` (one value per row) is 0 at frames that don't
/// exist (padding), which the depthwise conv reads as zeros, as it reads the frames outside
/// each sequence.
///
/// # Safety
///
/// `x` must not share its storage with another tensor that is used during the call (as
/// [`f32s_mut`]: its memory is written through a slice).
pub(super) unsafe fn cnx_int8(b: &QBlock, x: &mut Tensor, seqs: &[usize], dil: usize, mask: Option<&[f32]>) {
    let u = depthwise_int8(b, x, seqs, dil, mask);
    // SAFETY: `u` is a new tensor; `x` shares its storage with nothing used here (our promise).
    unsafe { pointwise_int8(b, &u, x) };
}

/// The depthwise conv of a ConvNeXt block (see [`cnx_int8`]): u [Σ seqs, C].
pub(super) fn depthwise_int8(b: &QBlock, x: &Tensor, seqs: &[usize], dil: usize, mask: Option<&[f32]>) -> Tensor {
    let c = b.db.size()[0] as usize;
    let mut u = Tensor::empty(x.size(), (Kind::Float, Device::Cpu));
    {
        // SAFETY: `u` was just made here; no other handle to its storage exists.
        let (xs, us) = (f32s(x), unsafe { f32s_mut(&mut u) });
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
///
/// # Safety
///
/// `x` must not share its storage with `u` or with another tensor that is used during the call
/// (as [`f32s_mut`]).
pub(super) unsafe fn pointwise_int8(b: &QBlock, u: &Tensor, x: &mut Tensor) {
    let c = b.db.size()[0] as usize;
    // SAFETY: nothing that shares `x`'s storage is used meanwhile (the caller's promise).
    pointwise_rows(b, f32s(u), rows_mut(unsafe { f32s_mut(x) }, c));
}

/// [`pointwise_int8`] on u's rows [n, C] as a slice, into x's n rows wherever they lie.
fn pointwise_rows(b: &QBlock, u: &[f32], x: Vec<&mut [f32]>) {
    let q = layernorm_quantize(u, f32s(&b.norm.0), f32s(&b.norm.1));
    let Out::Quant(h) = b.pw1.forward(&q, Epilogue::GeluQuantize) else { unreachable!("quantized rows") };
    b.pw2.forward(&h, Epilogue::Residual { rows: x, gamma: Some(f32s(&b.gamma)) });
}

/// One transformer pass of the int8 path on x [L, C] (one sentence), updated in place. The
/// attention itself (scores, softmax, weighted sum: [`attention`]) is float, as in onnxruntime's int8
/// graph.
///
/// # Safety
///
/// `x` must not share its storage with another tensor that is used during the call (as
/// [`f32s_mut`]: its memory is written through a slice).
pub(super) unsafe fn tl_int8(l: &QLayer, x: &mut Tensor) {
    let (_, c) = x.size2().expect("[L, C]");
    let q = layernorm_quantize(f32s(x), f32s(&l.norm1.0), f32s(&l.norm1.1));
    let Out::Float(qkv) = l.in_proj.forward(&q, Epilogue::Bias) else { unreachable!("floats") };
    let o = attention(f32s(&qkv), c as usize, 2);
    let qo = quantize(&o, c as usize);
    // SAFETY: nothing that shares `x`'s storage is used meanwhile (the caller's promise); the
    // slice ends with the call, before `x` is read again.
    let rows = rows_mut(unsafe { f32s_mut(x) }, c as usize);
    l.out_proj.forward(&qo, Epilogue::Residual { rows, gamma: None });
    let q = layernorm_quantize(f32s(x), f32s(&l.norm2.0), f32s(&l.norm2.1));
    let Out::Quant(h) = l.linear1.forward(&q, Epilogue::GeluQuantize) else { unreachable!("quantized rows") };
    // SAFETY: as above.
    let rows = rows_mut(unsafe { f32s_mut(x) }, c as usize);
    l.linear2.forward(&h, Epilogue::Residual { rows, gamma: None });
}

/// The int8 path ([`Precision::Int8`]): the same network with int8 Linear layers and the
/// row-wise kernels of [`crate::kernels`] in time-major layout. Sentences are encoded one at a
/// time (attention mixes a sentence's tokens, so padding could change its float round-off);
/// the prosody net and the decoder are row-local, so batches and chunks give every row bit for
/// bit what it gets alone.
impl Hibari {
    /// Text encoder `pre` on one sentence's ids: [L, C].
    pub(super) fn encoder_int8(&self, q: &Int8, pre: &str, ids: &[i64], passes: usize) -> Tensor {
        let t = Tensor::from_slice(ids);
        let mut x = Tensor::embedding(self.p(pre, "emb.weight"), &t, -1, false, false).contiguous();
        for i in 0..2 {
            // SAFETY: `x` is the embedding's new tensor (`contiguous()` returns it itself), held
            // by no one else.
            unsafe { cnx_int8(q.block(&format!("{pre}.convs.{i}")), &mut x, &[ids.len()], 1, None) };
        }
        let layer = &q.layers[&format!("{pre}.attn")];
        for _ in 0..passes {
            // SAFETY: as above.
            unsafe { tl_int8(layer, &mut x) };
        }
        ln(&x, self.p(pre, "norm.weight"), self.p(pre, "norm.bias"))
    }

    pub(super) fn prosody_int8(&self, q: &Int8, items: &[(&[i64], f32)], forced: Option<&[i64]>) -> Vec<Prosody> {
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
            // pn.pro_in is a K=1 conv, row-local (`LinearF32`): on the tokens, then repeated by
            // duration, it gives the frames' rows bit for bit, at a fraction of the rows
            g.push(q.pro_in.forward(&hps[b]).index_select(0, &idx));
            if ts[b] < tmax {
                g.push(Tensor::zeros([(tmax - ts[b]) as i64, c], (Kind::Float, Device::Cpu)));
            }
            mask.extend((0..tmax).map(|t| if t < ts[b] { 1f32 } else { 0f32 }));
            idxs.push(idx);
        }
        // (padding rows: zeros, read as zeros by the masked depthwise convs, dropped at the end)
        let mut g = if g.len() == 1 { g.remove(0) } else { Tensor::cat(&g, 0) };
        let m = mask.contains(&0.0).then_some(mask.as_slice());
        let seqs = vec![tmax; items.len()];
        for (i, dil) in PRO_DILATIONS.iter().enumerate() {
            // SAFETY: `g` is a new tensor (an `index_select`'s or a `cat`'s), held by no one else.
            unsafe { cnx_int8(q.block(&format!("pn.pro.{i}")), &mut g, &seqs, *dil as usize, m) };
        }
        let p = q.pro_out.forward(&g); // [B · tmax, 4]
        let mut out = Vec::new();
        for (b, ((ids, speed), (s, d))) in items.iter().zip(reg).enumerate() {
            let pb = p.narrow(0, (b * tmax) as i64, ts[b] as i64);
            let hm = &hms[b];
            let mut p = self.assemble(ids, *speed, s, d, &pb, &idxs[b], |fine| hm.index_select(0, fine));
            p.dec_taps = Some(q.dec_in.token_taps(hm));
            out.push(p);
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
    pub(super) fn decode_int8(&self, q: &Int8, items: &[(&Prosody, usize, usize)]) -> Vec<Spectra> {
        const LAYERS: usize = 9;
        const C: usize = DEC_C;
        let blocks: Vec<&QBlock> = (0..LAYERS - 1).map(|i| q.block(&format!("m.dec.{i}"))).collect();
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
        // the layers' rows live in plain buffers (no tensor ops per layer), each layer's new rows
        // computed straight into their items' states
        let mut u = Vec::new();
        for l in 0..LAYERS {
            // rows [hi, t) of layer l, per item that needs them (in the items' order)
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
            if l == 0 {
                // m.dec_in's rows [hi, t) from the tokens' taps, zero outside the sentence
                for &(i, hi, t) in &todo {
                    let p = items[i].0;
                    let taps = p.dec_taps.as_ref().expect("an int8 path's prosody");
                    let rows = &mut states[i].rows[0].1;
                    let at = rows.len();
                    rows.resize(at + (t - hi) * C, 0.0);
                    q.dec_in.rows(f32s(taps), &p.fine_tokens(), f32s(&p.z), hi, t, &mut rows[at..]);
                }
                continue;
            }
            // block l − 1: its depthwise conv on the previous layer's rows [hi − 3, t + 3)
            // (clipped to the sentence), the rest of the block on the new rows only, which
            // start as those rows of the previous layer (the residual)
            let block = blocks[l - 1];
            let (wk, db) = (f32s(&block.wk), f32s(&block.db));
            let total: usize = todo.iter().map(|&(_, hi, t)| t - hi).sum();
            u.resize(total * C, 0.0);
            let (mut at, mut rows) = (0, Vec::with_capacity(total));
            let mut todo_at = todo.iter().peekable();
            for (i, s) in states.iter_mut().enumerate() {
                let Some(&(_, hi, t)) = todo_at.next_if(|&&(j, _, _)| j == i) else { continue };
                let (below, this) = s.rows.split_at_mut(l);
                let (lo, prev) = &below[l - 1];
                let (wa, wb) = (hi.saturating_sub(3), (t + 3).min(items[i].0.frames));
                assert!(*lo <= wa && wb <= lo + prev.len() / C, "layer {l} rows missing");
                let window = &prev[(wa - lo) * C..(wb - lo) * C];
                let n = (t - hi) * C;
                let new = &mut this[0].1;
                new.extend_from_slice(&window[(hi - wa) * C..(hi - wa) * C + n]);
                dwconv_rows(window, C, wk, db, 1, hi - wa, &mut u[at..at + n]);
                at += n;
                let from = new.len() - n;
                rows.extend(new[from..].chunks_exact_mut(C));
            }
            pointwise_rows(block, &u, rows);
            for &(i, _, t) in &todo {
                states[i].keep_from(l - 1, t.saturating_sub(3)); // what layer l's next rows read
            }
        }
        // dec_norm and the head on the last layer's rows [a, b)
        let mut x = Vec::new();
        for (&(_, a, b), s) in items.iter().zip(&states) {
            let (lo, rows) = &s.rows[LAYERS - 1];
            x.extend_from_slice(&rows[(a - lo) * C..(b - lo) * C]);
        }
        let qx = layernorm_quantize(&x, f32s(&q.dec_norm.0), f32s(&q.dec_norm.1));
        let parts: Vec<Tensor> = q
            .head
            .iter()
            .map(|part| match part.forward(&qx, Epilogue::Bias) {
                Out::Float(t) => t,
                _ => unreachable!("floats"),
            })
            .collect();
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

/// Channels of every decoder layer's rows.
const DEC_C: usize = 256;

/// The rows an int8 decoder staircase keeps per layer: (first row, rows [n, 256] row-major).
#[derive(Debug)]
pub(crate) struct DecState {
    pub(super) rows: Vec<(usize, Vec<f32>)>,
}

impl DecState {
    /// An empty staircase whose last layer starts at frame `a`: layer l starts 3 rows earlier per
    /// layer above it.
    pub(super) fn starting_at(a: usize, layers: usize) -> DecState {
        DecState { rows: (0..layers).map(|l| (a.saturating_sub(3 * (layers - 1 - l)), Vec::new())).collect() }
    }

    pub(super) fn hi(&self, l: usize) -> usize {
        self.rows[l].0 + self.rows[l].1.len() / DEC_C
    }

    /// Drops layer l's rows before `from`.
    pub(super) fn keep_from(&mut self, l: usize, from: usize) {
        let hi = self.hi(l);
        let (lo, rows) = &mut self.rows[l];
        if from > *lo {
            let from = from.min(hi);
            rows.drain(..(from - *lo) * DEC_C);
            *lo = from;
        }
    }
}
