//! Row-wise CPU kernels of the int8 path ([`crate::Precision::Int8`]): the int8 matmuls
//! ([`crate::gemm`]) and everything between them in a ConvNeXt block or transformer pass, fused
//! into one pass per row over time-major [rows, channels] data.
//!
//! Two properties matter more than speed:
//! - **A row's result depends on that row only**, computed in the same order whatever the number
//!   of rows: no libtorch elementwise op (whose vector/scalar split and thread split depend on the
//!   tensor's size) touches int8-path activations. So a chunk of a sentence, or a sentence in a
//!   padded batch, gets bit for bit the activations it gets alone; int8 rounding can't amplify
//!   round-off differences that don't exist.
//! - **Same results on every CPU level**: the AVX2 and AVX-512 versions (`cpu::simd_fn!`) only
//!   vectorize the same operations (Rust never fuses a multiply and an add unless told to with
//!   `mul_add`, which is exact everywhere), and reductions use fixed lanes.

use tch::{Device, Kind, Tensor};

use crate::cpu::{simd_fn, Level};
use crate::float32::{exp, round_even, to_int};
use crate::gemm::Packed;
use crate::tensor_slices::{f32s, f32s_mut};

/// Lanes of the fixed-order partial sums (a multiple of every vector width used).
const LANES: usize = 16;

#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += f(c[i]);
        }
    }
    for (i, &v) in rest.iter().enumerate() {
        acc[i] += f(v);
    }
    acc.iter().sum()
}

/// The largest of x (−∞ if empty), in [`LANES`] lanes.
#[inline(always)]
fn lane_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    for (i, &v) in rest.iter().enumerate() {
        acc[i] = if v > acc[i] { v } else { acc[i] };
    }
    acc.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// GELU, the exact (erf) form, to 1.4e-6 · |x|: x · (½ + h(u)) with u = x clamped to ±4√2 and
/// h(u) = u · P(u²) / Q(u²), a rational fit of our own to ½ erf(u/√2) (least squares on
/// u·P − ½ erf·Q, reweighted toward the worst errors; at ±4√2 it is ½ to float32). P and Q in
/// Estrin's form, (c0 + c1 t) + t²(c2 + c3 t), by fused multiply-adds (exact on every level, see
/// [`crate::cpu::simd_fn`]): two steps deep instead of Horner's three, which the pass waited on
/// (capped to AVX2 on a Zen 4, the GELU + quantize pass of 42 × 768 values 21.6 → 17.5 µs).
/// Six steps where a 3.5e-7 fit took ten: the result is quantized to int8 next (steps of 1/255
/// of a row's range, about 0.02), so the difference moves a value to the next step about once
/// in 10^4 values.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    const B: f32 = 5.656_854; // 4√2
    const P: [f32; 4] = [0.398_938_3, 0.027_486_041, 0.003_805_192_7, 3.265_132e-5];
    const Q: [f32; 4] = [1.0, 0.235_551_42, 0.023_786_282, 0.001_151_247_8];
    let u = x.clamp(-B, B);
    let t = u * u;
    let t2 = t * t;
    let p = t2.mul_add(P[3].mul_add(t, P[2]), P[1].mul_add(t, P[0]));
    let q = t2.mul_add(Q[3].mul_add(t, Q[2]), Q[1].mul_add(t, Q[0]));
    x * (0.5 + (u * p / q).clamp(-0.5, 0.5))
}

/// Quantizes one row as onnxruntime's DynamicQuantizeLinear quantizes a tensor (range including
/// 0, s = (max − min)/255, zp = round(−min/s), q = clamp(round(x/s) + zp, 0, 255)), stored as
/// it is (u8), but with x · (1/s) for x/s: a multiply instead of a division per value (the
/// same on every level; it differs from the quotient by at most an ulp, so q differs by one
/// step only where x/s lies within an ulp of a half). Returns (s, 128 − zp), the row's scale and
/// its zero-point correction.
#[inline(always)]
fn quantize_row(x: &[f32], q: &mut [u8]) -> (f32, i32) {
    let mut mn = [0f32; LANES];
    let mut mx = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            mn[i] = if c[i] < mn[i] { c[i] } else { mn[i] };
            mx[i] = if c[i] > mx[i] { c[i] } else { mx[i] };
        }
    }
    for &v in rest {
        mn[0] = if v < mn[0] { v } else { mn[0] };
        mx[0] = if v > mx[0] { v } else { mx[0] };
    }
    let mn = mn.iter().fold(0f32, |a, &b| if b < a { b } else { a });
    let mx = mx.iter().fold(0f32, |a, &b| if b > a { b } else { a });
    let mut s = (mx - mn) / 255.0;
    if s == 0.0 || !s.is_finite() {
        s = 1.0; // an all-zero row (padding): any scale gives its zero point
    }
    let zp = round_even(-mn / s).clamp(0.0, 255.0);
    let r = 1.0 / s;
    // round(v · r) + zp, clamped to [0, 255], with the M = 1.5 · 2^23 of `round_even` and
    // `to_int` kept in between: v · r + M is M + round(v · r) exactly (|v · r| ≤ 255 and a
    // little), + zp is exact (integers in M's binade), so the clamp to [M, M + 255] is the clamp
    // to [0, 255] and the bits past M's are q: the same bytes, two additions fewer
    const M: f32 = 12_582_912.0;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (((v * r + M) + zp).clamp(M, M + 255.0).to_bits() - M.to_bits()) as u8;
    }
    (s, 128 - to_int(zp))
}

/// Int8 activations of a matrix: the rows [M, K] as onnxruntime's uint8 q (q − 128 is the
/// int8 value the products take; the kernels read q as it is, see [`Packed::matmul_u8`]), and
/// per row its scale and zero-point correction.
pub struct QRows {
    pub q: Vec<u8>,
    pub scale: Vec<f32>,
    pub corr: Vec<i32>,
}

thread_local! {
    /// Int8 row buffers of dropped [`QRows`], for the next ones on this thread: a chunk makes and
    /// drops two per layer, up to hundreds of kilobytes each, which the allocator would otherwise
    /// hand out zeroed (and often fresh from the OS) every time.
    static SPARE_ROWS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl QRows {
    /// Rows for `m × k` values, every one of which the caller writes (a recycled buffer holds the
    /// values of its last use until then).
    fn new(m: usize, k: usize) -> QRows {
        let mut q = SPARE_ROWS.with_borrow_mut(Vec::pop).unwrap_or_default();
        q.resize(m * k, 0); // zeroes only what the buffer did not hold yet
        QRows { q, scale: vec![0.0; m], corr: vec![0; m] }
    }
}

impl Drop for QRows {
    fn drop(&mut self) {
        let q = std::mem::take(&mut self.q);
        if q.capacity() > 0 {
            SPARE_ROWS.with_borrow_mut(|spare| {
                if spare.len() < 4 {
                    spare.push(q);
                }
            });
        }
    }
}

simd_fn! {
    fn quantize_impl(x: &[f32], k: usize, q: &mut [u8], scale: &mut [f32], corr: &mut [i32]) {
        for (m, (xr, qr)) in x.chunks_exact(k).zip(q.chunks_exact_mut(k)).enumerate() {
            (scale[m], corr[m]) = quantize_row(xr, qr);
        }
    }
}

/// Per-row int8 quantization of x [M, K].
pub fn quantize(x: &[f32], k: usize) -> QRows {
    let m = x.len() / k;
    let mut r = QRows::new(m, k);
    quantize_impl(x, k, &mut r.q, &mut r.scale, &mut r.corr);
    r
}

simd_fn! {
    fn layernorm_quantize_impl(x: &[f32], w: &[f32], b: &[f32], q: &mut [u8], scale: &mut [f32], corr: &mut [i32]) {
        let k = w.len();
        let mut y = vec![0f32; k];
        for (m, (xr, qr)) in x.chunks_exact(k).zip(q.chunks_exact_mut(k)).enumerate() {
            let n = k as f32;
            let mean = lane_sum(xr, |v| v) / n;
            let var = lane_sum(xr, |v| (v - mean) * (v - mean)) / n;
            let r = 1.0 / (var + 1e-5).sqrt();
            for (y, ((&x, &w), &b)) in y.iter_mut().zip(xr.iter().zip(w).zip(&b[..k])) {
                *y = (x - mean) * r * w + b;
            }
            (scale[m], corr[m]) = quantize_row(&y, qr);
        }
    }
}

/// LayerNorm (eps 1e-5, over the K channels of each row) of x [M, K], then per-row int8.
pub fn layernorm_quantize(x: &[f32], w: &[f32], b: &[f32]) -> QRows {
    let k = w.len();
    let m = x.len() / k;
    let mut r = QRows::new(m, k);
    layernorm_quantize_impl(x, w, b, &mut r.q, &mut r.scale, &mut r.corr);
    r
}

/// One Linear layer's int8 weights: y = ((q_x − zp_x) · q_w) · (s_x s_w) + b. The matmul runs on
/// q_x − 128, and (128 − zp_x) · Σ_k q_w[k, j] is added back in int32 (exact).
pub struct QWeight {
    /// q_w [out, in], packed for the kernel
    pub w: Packed,
    /// Σ_k q_w[k, j] [out]
    pub colsum: Vec<i32>,
    pub scale: f32,
    pub bias: Vec<f32>,
}

/// How the int32 results of a [`QWeight`] become floats.
pub enum Epilogue<'a> {
    /// y = dequant + bias, into a new [M, N] tensor
    Bias,
    /// gelu(dequant + bias), quantized per row for the next int8 matmul
    GeluQuantize,
    /// rows[m] += gamma ⊙ (dequant + bias), in place (gamma None: plain residual add); each of
    /// the M rows its own slice, so they can lie in different buffers ([`rows_mut`] cuts one
    /// [M, N] buffer into them)
    Residual { rows: Vec<&'a mut [f32]>, gamma: Option<&'a [f32]> },
}

/// The result of [`QWeight::forward`] for each [`Epilogue`].
pub enum Out {
    Float(Tensor),
    Quant(QRows),
    Done,
}

#[inline(always)]
fn dequant_row(acc: &[i32], corr: i32, colsum: &[i32], s: f32, bias: &[f32], out: &mut [f32]) {
    let n = out.len();
    for (o, ((&a, &c), &b)) in out.iter_mut().zip(acc[..n].iter().zip(&colsum[..n]).zip(&bias[..n])) {
        *o = (a + corr * c) as f32 * s + b;
    }
}

simd_fn! {
    fn bias_impl(acc: &[i32], w: &QWeight, x: RowScales<'_>, out: &mut [f32]) {
        let n = w.colsum.len();
        for (m, (a, o)) in acc.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
            dequant_row(a, x.corr[m], &w.colsum, x.scale[m] * w.scale, &w.bias, o);
        }
    }
}

simd_fn! {
    fn gelu_quantize_impl(acc: &[i32], w: &QWeight, x: RowScales<'_>, q: &mut [u8], scale: &mut [f32], corr: &mut [i32]) {
        let n = w.colsum.len();
        let mut y = vec![0f32; n];
        for (m, (a, qr)) in acc.chunks_exact(n).zip(q.chunks_exact_mut(n)).enumerate() {
            dequant_row(a, x.corr[m], &w.colsum, x.scale[m] * w.scale, &w.bias, &mut y);
            for v in y.iter_mut() {
                *v = gelu(*v);
            }
            (scale[m], corr[m]) = quantize_row(&y, qr);
        }
    }
}

simd_fn! {
    fn residual_impl(acc: &[i32], w: &QWeight, x: RowScales<'_>, res: &mut [&mut [f32]], gamma: Option<&[f32]>) {
        let n = w.colsum.len();
        let (colsum, bias) = (&w.colsum[..], &w.bias[..n]);
        for (m, (a, r)) in acc.chunks_exact(n).zip(res.iter_mut()).enumerate() {
            let r = &mut r[..n];
            let (corr, s) = (x.corr[m], x.scale[m] * w.scale);
            let terms = r.iter_mut().zip(a.iter().zip(colsum).zip(bias));
            match gamma {
                Some(g) => {
                    for ((r, ((&a, &c), &b)), &g) in terms.zip(&g[..n]) {
                        *r += g * ((a + corr * c) as f32 * s + b);
                    }
                }
                None => {
                    for (r, ((&a, &c), &b)) in terms {
                        *r += (a + corr * c) as f32 * s + b;
                    }
                }
            }
        }
    }
}

simd_fn! {
    /// q = round(x / s) of a weight row into `q` and Σ q, or None unless every q · s is x again
    /// and |q| ≤ 127.
    fn quantize_weight_row(x: &[f32], s: f32, q: &mut [i8]) -> Option<i32> {
        let (mut sum, mut exact) = (0i32, true);
        for (&v, q) in x.iter().zip(q.iter_mut()) {
            let r = round_even(v / s);
            exact &= r * s == v && r.abs() <= 127.0;
            // (garbage, but no overflow, where the row is not int8: then it is dropped)
            let i = to_int(r);
            sum = sum.wrapping_add(i);
            *q = i as i8;
        }
        exact.then_some(sum)
    }
}

impl QWeight {
    /// From nn.Linear's dequantized weight [out, in] (= q · scale, checked) and bias [out], packed
    /// for the kernels of [`crate::cpu::level`] (the loader names the level: `new_at`).
    #[cfg(test)]
    pub fn new(w: &Tensor, scale: f64, bias: &Tensor) -> Result<QWeight, String> {
        QWeight::new_at(w, scale, bias, crate::cpu::level())
    }

    /// `QWeight::new` for the kernels of `level` (or the best one below it that the CPU has).
    pub fn new_at(w: &Tensor, scale: f64, bias: &Tensor, level: Level) -> Result<QWeight, String> {
        let w = w.to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
        let &[n_out, n_in] = &w.size()[..] else { return Err("not a matrix".into()) };
        let (n_out, n_in) = (n_out as usize, n_in as usize);
        // One pass over the rows (libtorch took a pass per op): q = round(w / scale) in float32, as
        // the tensor ops did, checked to give w back exactly and to fit in int8.
        let s = scale as f32;
        let mut q = vec![0i8; n_in * n_out];
        let mut colsum = Vec::with_capacity(n_out);
        for (row, q) in f32s(&w).chunks_exact(n_in.max(1)).zip(q.chunks_exact_mut(n_in.max(1))) {
            colsum.push(quantize_weight_row(row, s, q).ok_or_else(|| format!("not int8 × {scale}"))?);
        }
        let bias =
            Vec::<f32>::try_from(&bias.to_device(Device::Cpu).to_kind(Kind::Float)).map_err(|e| e.to_string())?;
        if bias.len() != n_out {
            return Err(format!("{} biases for {n_out} outputs", bias.len()));
        }
        Ok(QWeight { w: Packed::new(&q, n_out, n_in, level), colsum, scale: s, bias })
    }

    pub fn out_features(&self) -> usize {
        self.colsum.len()
    }

    /// The int8 matmul of the quantized rows `x` with these weights, then `epilogue`.
    pub fn forward(&self, x: &QRows, mut epilogue: Epilogue<'_>) -> Out {
        let (m, n) = (x.scale.len(), self.out_features());
        let k = x.q.len().checked_div(m).unwrap_or(0);
        let (mut float, mut quant) = (None, None);
        match epilogue {
            Epilogue::Bias => float = Some(Tensor::empty([m as i64, n as i64], (Kind::Float, Device::Cpu))),
            Epilogue::GeluQuantize => quant = Some(QRows::new(m, n)),
            Epilogue::Residual { ref rows, .. } => {
                assert!(rows.len() == m && rows.iter().all(|r| r.len() == n), "residual shape")
            }
        }
        // SAFETY: `float` was just made here; no other handle to its storage exists until it is
        // returned, after the slice's last use.
        let mut view = float.as_mut().map(|t| unsafe { f32s_mut(t) });
        // Rows in blocks whose int32 sums stay in L2 for the epilogue (every row's result
        // depends on that row only, so the blocks change nothing but the time). A loaded
        // server batches 800-900 rows: whole, the head's sums were 10 MB, written to memory
        // and read back; in blocks, capped to AVX2, its products ran 69 -> 82 GMAC/s and the
        // server's CPU time per utterance fell 6%.
        let blocks = m.div_ceil((SUMS_BYTES / (4 * n.max(1))).max(MIN_BLOCK_ROWS));
        let mut r0 = 0;
        for b in 0..blocks {
            let r1 = r0 + (m - r0).div_ceil(blocks - b);
            let rows = r0..r1;
            let xb = RowScales { scale: &x.scale[rows.clone()], corr: &x.corr[rows.clone()] };
            crate::gemm::with_scratch_i32(rows.len() * n, |acc| {
                self.w.matmul_u8(&x.q[r0 * k..r1 * k], acc);
                let at = r0 * n..r1 * n;
                match &mut epilogue {
                    Epilogue::Bias => bias_impl(acc, self, xb, &mut view.as_mut().expect("made above")[at]),
                    Epilogue::GeluQuantize => {
                        let r = quant.as_mut().expect("made above");
                        gelu_quantize_impl(acc, self, xb, &mut r.q[at], &mut r.scale[rows.clone()], &mut r.corr[rows])
                    }
                    Epilogue::Residual { rows: res, gamma } => residual_impl(acc, self, xb, &mut res[rows], *gamma),
                }
            });
            r0 = r1;
        }
        match epilogue {
            Epilogue::Bias => Out::Float(float.expect("made above")),
            Epilogue::GeluQuantize => Out::Quant(quant.expect("made above")),
            Epilogue::Residual { .. } => Out::Done,
        }
    }
}

/// The rows of a row-major [M, n] buffer, one slice each (for [`Epilogue::Residual`]).
pub fn rows_mut(x: &mut [f32], n: usize) -> Vec<&mut [f32]> {
    x.chunks_exact_mut(n).collect()
}

/// The scales and corrections of a block of [`QRows`]' rows.
#[derive(Clone, Copy)]
struct RowScales<'a> {
    scale: &'a [f32],
    corr: &'a [i32],
}

/// Bytes of int32 sums per block of rows in [`QWeight::forward`] (L2 holds them and most of W:
/// 1 MB on a Zen 4, 256 KB-2 MB elsewhere), and the fewest rows per block.
const SUMS_BYTES: usize = 128 << 10;
const MIN_BLOCK_ROWS: usize = 8;

simd_fn! {
    /// Self-attention of one sentence from its projections `qkv` [L, 3C] (q, k, v side by side,
    /// each split into `heads` heads of C / heads consecutive channels): per head,
    /// softmax(q·kᵀ / √hd) · v into `out` [L, C]. Every sum runs in a fixed order (the scores
    /// over the channels, the weighted sum over the keys), each step one fused multiply-add,
    /// and exp is [`crate::dsp::exp`]: the same bits on every level, each row from its sentence
    /// only (MKL's sgemm, which libtorch's ops used, picks its kernels by CPU). About as fast as
    /// those ops were: capped to AVX2 in a loaded server ~2.4% of the time against their ~2.2%
    /// (sgemm, softmax, exp, dispatch and copies).
    fn attention_impl(qkv: &[f32], c: usize, heads: usize, out: &mut [f32]) {
        const B: usize = ATTN_BLOCK;
        let l = qkv.len() / (3 * c);
        let hd = c / heads;
        assert_eq!(hd % B, 0, "head size {hd}");
        let lp = l.div_ceil(B) * B;
        let (mut p, mut kt) = (vec![0f32; 2 * lp], vec![0f32; hd * lp]);
        for h in 0..heads {
            // the head's keys channel-major (zero past L), so that the scores of B keys are B
            // sums held in registers over the channels
            for (j, row) in qkv.chunks_exact(3 * c).enumerate() {
                for (d, &k) in row[c + h * hd..][..hd].iter().enumerate() {
                    kt[d * lp + j] = k;
                }
            }
            let at = Head { qkv, c, off: h * hd, hd, l, lp, kt: &kt };
            // two queries at a time (twice the independent sums per load), each computed as alone
            let mut i = 0;
            while i + 2 <= l {
                at.rows::<2>(i, &mut p, out);
                i += 2;
            }
            if i < l {
                at.rows::<1>(i, &mut p, out);
            }
        }
    }
}

/// One head of [`attention_impl`]: its channels `off..off + hd` of q, k and v in `qkv` [L, 3C],
/// and its keys channel-major in `kt` [hd, lp].
struct Head<'a> {
    qkv: &'a [f32],
    c: usize,
    off: usize,
    hd: usize,
    l: usize,
    lp: usize,
    kt: &'a [f32],
}

impl Head<'_> {
    /// Queries i0..i0 + R into their rows of `out` [L, C] (`p`: scratch for R rows of scores):
    /// every row's sums in the same order whatever R is.
    #[inline(always)]
    fn rows<const R: usize>(&self, i0: usize, p: &mut [f32], out: &mut [f32]) {
        const B: usize = ATTN_BLOCK;
        let Head { qkv, c, off, hd, l, lp, kt } = *self;
        let q: [&[f32]; R] = std::array::from_fn(|r| &qkv[(i0 + r) * 3 * c + off..][..hd]);
        for jb in 0..lp / B {
            let mut acc = [[0f32; B]; R];
            for d in 0..hd {
                let k = &kt[d * lp + jb * B..][..B];
                for (acc, q) in acc.iter_mut().zip(&q) {
                    for (a, &k) in acc.iter_mut().zip(k) {
                        *a = q[d].mul_add(k, *a);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                p[r * lp + jb * B..][..B].copy_from_slice(acc);
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let mut inv = [0f32; R];
        for (r, inv) in inv.iter_mut().enumerate() {
            let p = &mut p[r * lp..][..l];
            let mx = lane_max(p);
            for p in p.iter_mut() {
                *p = exp((*p - mx) * scale);
            }
            *inv = 1.0 / lane_sum(p, |v| v);
        }
        // B channels of the output at a time, each a sum over the keys in order
        for db in 0..hd / B {
            let mut acc = [[0f32; B]; R];
            for j in 0..l {
                let v = &qkv[j * 3 * c + 2 * c + off + db * B..][..B];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let w = p[r * lp + j] * inv[r];
                    for (a, &v) in acc.iter_mut().zip(v) {
                        *a = w.mul_add(v, *a);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                out[(i0 + r) * c + off + db * B..][..B].copy_from_slice(acc);
            }
        }
    }
}

/// Keys per block of scores and channels per block of outputs in [`attention_impl`] (four
/// 256-bit registers of sums; head sizes are 64 and 96).
const ATTN_BLOCK: usize = 32;

/// Self-attention of one sentence's rows, `heads` heads: qkv [L, 3C] to [L, C] (see
/// [`attention_impl`]).
pub fn attention(qkv: &[f32], c: usize, heads: usize) -> Vec<f32> {
    assert!(c.is_multiple_of(heads) && qkv.len().is_multiple_of(3 * c), "qkv is [L, 3 · {c}]");
    let mut out = vec![0f32; qkv.len() / 3];
    attention_impl(qkv, c, heads, &mut out);
    out
}

/// Columns per panel of [`LinearF32`] and rows per tile.
const F32_LANES: usize = 16;
const F32_ROWS: usize = 6;

/// A float32 Linear (y = x·Wᵀ + b) for the int8 path's few float layers (m.dec_in, pn.pro_in,
/// pn.pro_out), computed so that each row's result depends on that row only and is the same on
/// every CPU level: every output is the sum over k in order, each step one fused multiply-add
/// (exact on every level, see [`crate::cpu::simd_fn`]), then the bias. libtorch's GEMM promises neither (MKL picks kernels by M and by CPU: chunks and
/// whole sentences then differ in the last bits, which int8 rounding amplifies).
pub struct LinearF32 {
    k: usize,
    n: usize,
    /// W as panels of 16 columns: [panel][k][16], zero past N
    panels: Vec<f32>,
    bias: Vec<f32>,
}

simd_fn! {
    fn linear_f32_impl(x: &[f32], k: usize, panels: &[f32], bias: &[f32], out: &mut [f32]) {
        const L: usize = F32_LANES;
        let n = bias.len();
        let m = x.len() / k;
        let np = panels.len() / (k * L);
        let panel = |p: usize| &panels[p * k * L..][..k * L];
        let store = |acc: &[[f32; L]; F32_ROWS], r: usize, rows: usize, p: usize, out: &mut [f32]| {
            let c0 = p * L;
            let cols = (n - c0).min(L);
            for (i, acc) in acc.iter().enumerate().take(rows) {
                let o = &mut out[(r + i) * n + c0..][..cols];
                for l in 0..cols {
                    o[l] = acc[l] + bias[c0 + l];
                }
            }
        };
        // a tile's rows step by step of K ([k][row]), so the inner loops read fixed-size arrays
        let mut xt = vec![[0f32; F32_ROWS]; k];
        let mut r = 0;
        while r < m {
            let rows = (m - r).min(F32_ROWS);
            // a short tile repeats its last row, so every row is computed the same way
            for i in 0..F32_ROWS {
                let row = &x[(r + i.min(rows - 1)) * k..][..k];
                for (t, &v) in xt.iter_mut().zip(row) {
                    t[i] = v;
                }
            }
            // with 32 vector registers (AVX-512) two panels at a time (one broadcast of x feeds
            // two multiply-adds: 12 registers of sums), then one at a time (with 16, two would be
            // 24 of sums and spill)
            let two = matches!(crate::cpu::level(), Level::Avx512 | Level::Avx512Vnni);
            let mut p = 0;
            while two && p + 1 < np {
                let (mut a0, mut a1) = ([[0f32; L]; F32_ROWS], [[0f32; L]; F32_ROWS]);
                for ((u, v), xv) in panel(p).chunks_exact(L).zip(panel(p + 1).chunks_exact(L)).zip(&xt) {
                    for i in 0..F32_ROWS {
                        for l in 0..L {
                            a0[i][l] = xv[i].mul_add(u[l], a0[i][l]);
                            a1[i][l] = xv[i].mul_add(v[l], a1[i][l]);
                        }
                    }
                }
                store(&a0, r, rows, p, out);
                store(&a1, r, rows, p + 1, out);
                p += 2;
            }
            while p < np {
                let mut a0 = [[0f32; L]; F32_ROWS];
                for (u, xv) in panel(p).chunks_exact(L).zip(&xt) {
                    for i in 0..F32_ROWS {
                        for l in 0..L {
                            a0[i][l] = xv[i].mul_add(u[l], a0[i][l]);
                        }
                    }
                }
                store(&a0, r, rows, p, out);
                p += 1;
            }
            r += rows;
        }
    }
}

impl LinearF32 {
    /// From nn.Linear's weight [out, in] (or a K=1 conv's [out, in, 1]) and bias [out].
    pub fn new(w: &Tensor, b: &Tensor) -> LinearF32 {
        let w = w.to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
        let (n, k) = (w.size()[0] as usize, (w.numel() / w.size()[0].max(1) as usize));
        let wv = f32s(&w);
        let panels_n = n.div_ceil(F32_LANES);
        let mut panels = vec![0f32; panels_n * k * F32_LANES];
        for j in 0..n {
            let (p, l) = (j / F32_LANES, j % F32_LANES);
            for kk in 0..k {
                panels[(p * k + kk) * F32_LANES + l] = wv[j * k + kk];
            }
        }
        let bias = f32s(&b.to_device(Device::Cpu).to_kind(Kind::Float).contiguous()).to_vec();
        assert_eq!(bias.len(), n, "one bias per output");
        LinearF32 { k, n, panels, bias }
    }

    /// y [M, N] for x [M, K] (a contiguous float CPU tensor).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let x = x.contiguous();
        let xs = f32s(&x);
        assert_eq!(xs.len() % self.k.max(1), 0, "x is [M, {}]", self.k);
        let m = xs.len() / self.k.max(1);
        let mut y = Tensor::empty([m as i64, self.n as i64], (Kind::Float, Device::Cpu));
        if m > 0 && self.k > 0 {
            // SAFETY: `y` was just made here; no other handle to its storage exists.
            linear_f32_impl(xs, self.k, &self.panels, &self.bias, unsafe { f32s_mut(&mut y) });
        } else if m > 0 {
            y.copy_(&Tensor::from_slice(&self.bias).expand([m as i64, self.n as i64], false));
        }
        y
    }
}

/// m.dec_in (Conv1d 130 → 256, K = 7, pad 3) on the decoder input z of the architecture doc
/// §4.6, whose channels 0..128 at fine frame j are H_m's row of the token that frame belongs to
/// and channels 128, 129 its f0 and n features. Tokens last two fine frames or more (about six
/// on average), so the token channels' share of every tap is computed once per token
/// ([`DecIn::token_taps`]: [L, 7 · 256], a [`LinearF32`]) and each output row adds seven of
/// those rows and the two per-frame channels ([`DecIn::rows`]): about a sixth of the multiply-adds
/// of the dense conv. Every row is computed in the same order from its own inputs, on every CPU
/// level, so chunks equal whole sentences bit for bit.
pub struct DecIn {
    taps: LinearF32,
    /// per tap k, W[:, 128, k] then W[:, 129, k]: [7][2][256]
    feat: Vec<f32>,
    bias: Vec<f32>,
}

/// Output channels of m.dec_in, its taps and its token channels.
const DEC_OUT: usize = 256;
const DEC_TAPS: usize = 7;
const DEC_TOKEN_CH: usize = 128;

impl DecIn {
    /// From the conv's weight [256, 130, 7] and bias [256].
    pub fn new(w: &Tensor, b: &Tensor) -> DecIn {
        let w = w.to_device(Device::Cpu).to_kind(Kind::Float).contiguous();
        assert_eq!(w.size(), [DEC_OUT as i64, DEC_TOKEN_CH as i64 + 2, DEC_TAPS as i64], "m.dec_in is [256, 130, 7]");
        // [7 · 256, 128]: row k · 256 + o is W[o, 0..128, k]
        let taps = w.narrow(1, 0, DEC_TOKEN_CH as i64).permute([2, 0, 1]).reshape([-1, DEC_TOKEN_CH as i64]);
        let taps = LinearF32::new(&taps, &Tensor::zeros([(DEC_TAPS * DEC_OUT) as i64], (Kind::Float, Device::Cpu)));
        let feat = f32s(&w.narrow(1, DEC_TOKEN_CH as i64, 2).permute([2, 1, 0]).contiguous()).to_vec();
        let bias = f32s(&b.to_device(Device::Cpu).to_kind(Kind::Float).contiguous()).to_vec();
        assert_eq!(bias.len(), DEC_OUT, "one bias per output");
        DecIn { taps, feat, bias }
    }

    /// The token channels' share of every tap for H_m's rows `hm` [L, 128]: [L, 7 · 256].
    pub fn token_taps(&self, hm: &Tensor) -> Tensor {
        self.taps.forward(hm)
    }

    /// Output rows [hi, t) of a sentence into `out` [(t − hi) · 256]: `taps` from
    /// [`DecIn::token_taps`], `token[j]` the token of fine frame j (one per frame of the
    /// sentence), `z` the sentence's decoder input [F, 130] (its channels 128 and 129 are read).
    /// Frames outside the sentence are zeros, as the conv's padding.
    pub fn rows(&self, taps: &[f32], token: &[usize], z: &[f32], hi: usize, t: usize, out: &mut [f32]) {
        let frames = token.len();
        assert!(hi <= t && t <= frames && z.len() == frames * (DEC_TOKEN_CH + 2), "rows [{hi}, {t}) of {frames}");
        assert_eq!(out.len(), (t - hi) * DEC_OUT);
        assert!(token.iter().all(|&i| (i + 1) * DEC_TAPS * DEC_OUT <= taps.len()), "a token without taps");
        dec_in_rows(taps, token, z, &self.feat, &self.bias, hi, out);
    }
}

simd_fn! {
    fn dec_in_rows(taps: &[f32], token: &[usize], z: &[f32], feat: &[f32], bias: &[f32], hi: usize, out: &mut [f32]) {
        const ZC: usize = DEC_TOKEN_CH + 2;
        for (r, o) in out.chunks_exact_mut(DEC_OUT).enumerate() {
            let j = hi + r;
            o.copy_from_slice(bias);
            for k in 0..DEC_TAPS {
                let Some(s) = (j + k).checked_sub(3).filter(|&s| s < token.len()) else { continue };
                let y = &taps[(token[s] * DEC_TAPS + k) * DEC_OUT..][..DEC_OUT];
                let (f, n) = (z[s * ZC + DEC_TOKEN_CH], z[s * ZC + DEC_TOKEN_CH + 1]);
                let (wf, wn) = (&feat[2 * k * DEC_OUT..][..DEC_OUT], &feat[(2 * k + 1) * DEC_OUT..][..DEC_OUT]);
                for c in 0..DEC_OUT {
                    o[c] = wn[c].mul_add(n, wf[c].mul_add(f, o[c] + y[c]));
                }
            }
        }
    }
}

/// Channels per register block of [`dwconv_impl`] (eight 256-bit or four 512-bit registers of
/// sums: that many chains of additions side by side, so that their latency overlaps).
const DW_BLOCK: usize = 64;

simd_fn! {
    #[allow(clippy::too_many_arguments)]
    fn dwconv_impl(x: &[f32], c: usize, wk: &[f32], b: &[f32], dil: usize, mask: Option<&[f32]>, first: usize, y: &mut [f32]) {
        let t_len = x.len() / c;
        let k = wk.len() / c;
        let pad = dil * (k - 1) / 2;
        // The taps that read a frame, then per block of DW_BLOCK channels their sums in
        // registers: b, then + w · x tap by tap in order (the same operations in the same order
        // for every channel as one pass per tap over the row).
        let mut taps = Vec::with_capacity(k);
        let main = c - c % DW_BLOCK;
        for (t, out) in (first..).zip(y.chunks_exact_mut(c)) {
            taps.clear();
            for kk in 0..k {
                let src = t + kk * dil;
                if src < pad || src - pad >= t_len {
                    continue;
                }
                let s = src - pad;
                if mask.is_some_and(|m| m[s] == 0.0) {
                    continue;
                }
                taps.push((s * c, kk * c));
            }
            for j0 in (0..main).step_by(DW_BLOCK) {
                let mut acc = [0f32; DW_BLOCK];
                acc.copy_from_slice(&b[j0..j0 + DW_BLOCK]);
                for &(xs, ws) in &taps {
                    let (xr, wr) = (&x[xs + j0..][..DW_BLOCK], &wk[ws + j0..][..DW_BLOCK]);
                    for i in 0..DW_BLOCK {
                        acc[i] += wr[i] * xr[i];
                    }
                }
                out[j0..j0 + DW_BLOCK].copy_from_slice(&acc);
            }
            out[main..].copy_from_slice(&b[main..c]);
            for &(xs, ws) in &taps {
                let (xr, wr) = (&x[xs + main..xs + c], &wk[ws + main..ws + c]);
                for ((o, &w), &x) in out[main..].iter_mut().zip(wr).zip(xr) {
                    *o += w * x;
                }
            }
        }
    }
}

/// Depthwise Conv1d ("same" zero padding, dilation `dil`) of one time-major sequence x [T, C]:
/// y[t] = b + Σ_k w[k] ⊙ x[t + k·dil − pad], with x taken as zero outside 0..T and at frames where
/// `mask` is 0. `wk` is the weight as [K, C] (the conv's [C, 1, K] transposed).
pub fn dwconv(x: &[f32], c: usize, wk: &[f32], b: &[f32], dil: usize, mask: Option<&[f32]>, y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    if let Some(m) = mask {
        assert_eq!(m.len() * c, x.len());
    }
    dwconv_impl(x, c, wk, b, dil, mask, 0, y);
}

/// Rows `first..first + y.len() / c` of [`dwconv`] (no mask) into `y`.
pub fn dwconv_rows(x: &[f32], c: usize, wk: &[f32], b: &[f32], dil: usize, first: usize, y: &mut [f32]) {
    assert!(y.len().is_multiple_of(c) && first * c + y.len() <= x.len(), "rows of the sequence");
    dwconv_impl(x, c, wk, b, dil, None, first, y);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_is_accurate() {
        let mut worst = 0f64;
        for i in -12000..=12000 {
            let x = i as f64 / 1000.0;
            let want = libtorch_gelu(x);
            worst = worst.max((f64::from(gelu(x as f32)) - want).abs() / x.abs().max(1.0));
        }
        assert!(worst < 1.5e-6, "{worst}");
        assert_eq!(gelu(0.0), 0.0);
        assert_eq!(gelu(-30.0), 0.0);
        assert_eq!(gelu(30.0), 30.0);
    }

    /// libtorch's float64 GELU (erf form), the test oracle.
    fn libtorch_gelu(x: f64) -> f64 {
        Tensor::from_slice(&[x]).gelu("none").double_value(&[0])
    }

    #[test]
    fn quantize_matches_the_tensor_formula() {
        let x = Tensor::randn([37, 48], (Kind::Float, Device::Cpu)) * 3.0;
        let r = quantize(f32s(&x), 48);
        let mn = x.amin(1, false).clamp_max(0.0);
        let mx = x.amax(1, false).clamp_min(0.0);
        let s = (mx - &mn) / 255.0;
        let zp = (-mn / &s).round().clamp(0.0, 255.0);
        let q = ((&x * s.reciprocal().unsqueeze(1)).round() + zp.unsqueeze(1)).clamp(0.0, 255.0).to_kind(Kind::Uint8);
        assert!(q.equal(&Tensor::from_slice(&r.q).view([37, 48])));
        assert_eq!(Vec::<f32>::try_from(&s).unwrap(), r.scale);
        let corr: Vec<i32> = Vec::<f32>::try_from(&zp).unwrap().iter().map(|z| 128 - *z as i32).collect();
        assert_eq!(corr, r.corr);
    }

    #[test]
    fn rows_do_not_depend_on_other_rows() {
        let x = Tensor::randn([40, 64], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([64], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([64], (Kind::Float, Device::Cpu));
        let all = layernorm_quantize(f32s(&x), f32s(&w), f32s(&b));
        let part = layernorm_quantize(&f32s(&x)[5 * 64..9 * 64], f32s(&w), f32s(&b));
        assert_eq!(&all.q[5 * 64..9 * 64], &part.q[..]);
        assert_eq!(&all.scale[5..9], &part.scale[..]);
    }

    #[test]
    fn dwconv_matches_libtorch() {
        // 160 channels: two register blocks and a remainder
        for (c, dil) in [(32usize, 1usize), (160, 1), (160, 2), (160, 4)] {
            let (t, k) = (50usize, 7usize);
            let x = Tensor::randn([t as i64, c as i64], (Kind::Float, Device::Cpu));
            let w = Tensor::randn([c as i64, 1, k as i64], (Kind::Float, Device::Cpu));
            let b = Tensor::randn([c as i64], (Kind::Float, Device::Cpu));
            let want =
                x.transpose(0, 1).unsqueeze(0).conv1d(&w, Some(&b), [1], [(dil * 3) as i64], [dil as i64], c as i64);
            let want = want.squeeze_dim(0).transpose(0, 1).contiguous();
            let wk = w.squeeze_dim(1).transpose(0, 1).contiguous();
            let mut y = Tensor::empty([t as i64, c as i64], (Kind::Float, Device::Cpu));
            // SAFETY: `y` was just made here; no other handle to its storage exists.
            dwconv(f32s(&x), c, f32s(&wk), f32s(&b), dil, None, unsafe { f32s_mut(&mut y) });
            let err = (&y - want).abs().max().double_value(&[]);
            assert!(err < 1e-5, "dil {dil}: {err}");
            // bit for bit the plain per-channel sum: b, then + w · x tap by tap in order
            let (xs, ws, bs, ys) = (f32s(&x), f32s(&wk), f32s(&b), f32s(&y));
            for tt in 0..t {
                for j in 0..c {
                    let mut v = bs[j];
                    for kk in 0..k {
                        if let Some(s) = (tt + kk * dil).checked_sub(dil * 3).filter(|&s| s < t) {
                            v += ws[kk * c + j] * xs[s * c + j];
                        }
                    }
                    assert_eq!(v.to_bits(), ys[tt * c + j].to_bits(), "c {c} dil {dil}: ({tt}, {j})");
                }
            }
            // any run of output rows alone: the same bits as in the whole
            for (first, n) in [(0, 3), (7, 20), (45, 5), (0, t)] {
                let mut part = vec![0f32; n * c];
                dwconv_rows(f32s(&x), c, f32s(&wk), f32s(&b), dil, first, &mut part);
                assert_eq!(&f32s(&y)[first * c..(first + n) * c], &part[..], "dil {dil}: rows {first}..+{n}");
            }
        }
    }

    #[test]
    fn linear_f32_is_row_local_and_matches_libtorch() {
        let (n, k) = (37, 91);
        let w = Tensor::randn([n, k], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([n], (Kind::Float, Device::Cpu));
        let x = Tensor::randn([23, k], (Kind::Float, Device::Cpu));
        let lin = LinearF32::new(&w, &b);
        let y = lin.forward(&x);
        let err = (&y - x.linear(&w, Some(&b))).abs().max().double_value(&[]);
        assert!(err < 1e-4, "{err}");
        for (a, len) in [(0, 1), (5, 3), (9, 14), (22, 1)] {
            let part = lin.forward(&x.narrow(0, a, len));
            assert!(part.equal(&y.narrow(0, a, len)), "rows {a}..+{len}");
        }
        // every level the CPU has gives the baseline's bits (other tests may move the cap
        // meanwhile; they only ever set levels that must give the same bits too)
        let base = {
            crate::cpu::set_cap(Level::Baseline);
            let y = lin.forward(&x);
            crate::cpu::reset_cap();
            y
        };
        for level in Level::available() {
            crate::cpu::set_cap(level);
            let y = lin.forward(&x);
            crate::cpu::reset_cap();
            assert!(y.equal(&base), "{level}");
        }
    }

    #[test]
    fn dec_in_by_token_matches_the_dense_conv() {
        let w = Tensor::randn([256, 130, 7], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([256], (Kind::Float, Device::Cpu));
        let dec = DecIn::new(&w, &b);
        // 5 tokens lasting 2, 4, 2, 10 and 6 frames; z = H_m of each frame's token, f0, n
        let token: Vec<usize> =
            [2, 4, 2, 10, 6].iter().enumerate().flat_map(|(i, &d)| std::iter::repeat_n(i, d)).collect();
        let f = token.len() as i64;
        let hm = Tensor::randn([5, 128], (Kind::Float, Device::Cpu));
        let idx = Tensor::from_slice(&token.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let z = Tensor::cat(&[hm.index_select(0, &idx), Tensor::randn([f, 2], (Kind::Float, Device::Cpu))], 1);
        let taps = dec.token_taps(&hm);
        let rows = |hi: usize, t: usize| {
            let mut out = vec![0f32; (t - hi) * 256];
            dec.rows(f32s(&taps), &token, f32s(&z), hi, t, &mut out);
            out
        };
        let whole = rows(0, token.len());
        let dense =
            z.transpose(0, 1).unsqueeze(0).conv1d(&w, Some(&b), [1], [3], [1], 1).squeeze_dim(0).transpose(0, 1);
        let err = (Tensor::from_slice(&whole).view([f, 256]) - dense).abs().max().double_value(&[]);
        assert!(err < 1e-3, "{err}");
        for (hi, t) in [(0, 1), (3, 9), (17, 24), (23, 24)] {
            assert_eq!(rows(hi, t), whole[hi * 256..t * 256], "rows {hi}..{t}");
        }
        crate::cpu::set_cap(Level::Baseline);
        let base = rows(0, token.len());
        crate::cpu::reset_cap();
        assert_eq!(base, whole, "the baseline level gives the same bits");
    }

    /// The attention against libtorch's ops (the encoders' former form), on both encoders'
    /// shapes; the baseline level gives the same bits.
    #[test]
    fn attention_matches_libtorch() {
        for (l, c) in [(1i64, 128i64), (8, 128), (70, 128), (33, 192), (200, 192)] {
            let qkv = Tensor::randn([l, 3 * c], (Kind::Float, Device::Cpu)) * 2.0;
            let hd = c / 2;
            let heads = |i: i64| qkv.narrow(1, i * c, c).view([l, 2, hd]).transpose(0, 1);
            let s = heads(0).matmul(&heads(1).transpose(-2, -1)) / (hd as f64).sqrt();
            let want = s.softmax(-1, Kind::Float).matmul(&heads(2)).transpose(0, 1).contiguous().view([l, c]);
            let got = attention(f32s(&qkv), c as usize, 2);
            let err = (Tensor::from_slice(&got).view([l, c]) - &want).abs().max().double_value(&[]);
            assert!(err < 1e-5, "L {l}, C {c}: {err}");
            crate::cpu::set_cap(Level::Baseline);
            let base = attention(f32s(&qkv), c as usize, 2);
            crate::cpu::reset_cap();
            assert!(base == got, "L {l}, C {c}: the baseline level gives the same bits");
        }
    }

    /// `forward` works through the rows in blocks (here 47 rows of 3000 outputs: five blocks of
    /// 9-10 rows); every epilogue gives each row what that row gets alone.
    #[test]
    fn row_blocks_change_nothing() {
        let (m, n, k) = (47usize, 3000usize, 40usize);
        assert!(m > SUMS_BYTES / (4 * n), "more than one block");
        let w = (Tensor::randint_low(-127, 128, [n as i64, k as i64], (Kind::Float, Device::Cpu))) * 0.01;
        let qw = QWeight::new(&w, 0.01, &Tensor::randn([n as i64], (Kind::Float, Device::Cpu))).unwrap();
        let x = Tensor::randn([m as i64, k as i64], (Kind::Float, Device::Cpu));
        let all = quantize(f32s(&x), k);
        let res0 = Tensor::randn([m as i64, n as i64], (Kind::Float, Device::Cpu));
        let gamma = Tensor::randn([n as i64], (Kind::Float, Device::Cpu));
        let run = |rows: std::ops::Range<usize>| {
            let qx = quantize(&f32s(&x)[rows.start * k..rows.end * k], k);
            let Out::Float(y) = qw.forward(&qx, Epilogue::Bias) else { panic!() };
            let Out::Quant(g) = qw.forward(&qx, Epilogue::GeluQuantize) else { panic!() };
            let mut res = res0.narrow(0, rows.start as i64, rows.len() as i64).copy();
            // SAFETY: `res` is a new copy; no other handle to its storage exists.
            let rows = rows_mut(unsafe { f32s_mut(&mut res) }, n);
            qw.forward(&qx, Epilogue::Residual { rows, gamma: Some(f32s(&gamma)) });
            (y, g, res)
        };
        assert_eq!(all.q.len(), m * k);
        let (y, g, res) = run(0..m);
        for rows in [0..1, 9..10, 10..29, 46..47] {
            let (y1, g1, res1) = run(rows.clone());
            let (a, len) = (rows.start as i64, rows.len() as i64);
            assert!(y.narrow(0, a, len).equal(&y1), "{rows:?}");
            assert!(res.narrow(0, a, len).equal(&res1), "{rows:?}");
            assert_eq!(&g.q[rows.start * n..rows.end * n], &g1.q[..], "{rows:?}");
            assert_eq!((&g.scale[rows.clone()], &g.corr[rows.clone()]), (&g1.scale[..], &g1.corr[..]));
        }
    }

    #[test]
    fn qweight_matches_float_linear_on_quantized_input() {
        let w = (Tensor::randint_low(-127, 128, [24, 32], (Kind::Float, Device::Cpu))) * 0.01;
        let b = Tensor::randn([24], (Kind::Float, Device::Cpu));
        let qw = QWeight::new(&w, 0.01, &b).unwrap();
        let x = Tensor::randn([13, 32], (Kind::Float, Device::Cpu));
        let qx = quantize(f32s(&x), 32);
        // the dequantized activations, through a float Linear
        let s = Tensor::from_slice(&qx.scale).unsqueeze(1);
        let zp: Vec<f32> = qx.corr.iter().map(|c| (128 - c) as f32).collect();
        let xd =
            (Tensor::from_slice(&qx.q).view([13, 32]).to_kind(Kind::Float) - Tensor::from_slice(&zp).unsqueeze(1)) * s;
        let want = xd.linear(&w, Some(&b));
        let Out::Float(y) = qw.forward(&qx, Epilogue::Bias) else { panic!() };
        let err = (&y - &want).abs().max().double_value(&[]);
        assert!(err < 1e-4, "{err}");
        // outputs are column by column: a matrix of some of W's rows gives those columns (the
        // model's head runs as five such parts)
        let part = QWeight::new(&w.narrow(0, 8, 8), 0.01, &b.narrow(0, 8, 8)).unwrap();
        let Out::Float(yp) = part.forward(&qx, Epilogue::Bias) else { panic!() };
        assert!(yp.equal(&y.narrow(1, 8, 8)));
        let mut res = Tensor::zeros([13, 24], (Kind::Float, Device::Cpu));
        // SAFETY: `res` was just made here; no other handle to its storage exists.
        qw.forward(&qx, Epilogue::Residual { rows: rows_mut(unsafe { f32s_mut(&mut res) }, 24), gamma: None });
        assert!(res.equal(&y));
        let Out::Quant(g) = qw.forward(&qx, Epilogue::GeluQuantize) else { panic!() };
        let want = quantize(f32s(&y.gelu("none").contiguous()), 24);
        let diff = g.q.iter().zip(&want.q).map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs()).max().unwrap();
        assert!(diff <= 1, "{diff}");
    }
}
