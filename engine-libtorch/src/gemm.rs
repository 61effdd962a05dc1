//! int8 × int8 → int32 matrix products for the int8 path (`crate::kernels::QWeight`):
//! C[m, j] = Σ_k A[m, k] · W[j, k], exactly (int32 accumulation, nothing saturates), with A the
//! int8 activations [M, K] and W a Linear weight [N, K] (nn.Linear's layout, |w| ≤ 127).
//!
//! W is packed once, at load, for one [`Level`]'s kernel. Every level computes the same integers,
//! so the choice changes speed only. The kernels, after onnxruntime's MLAS and oneDNN:
//! - **Panels.** W is stored as panels of 8 (256-bit) or 16 (512-bit) columns; inside a panel,
//!   each group of 4 bytes per column is one step of 4 along K, so one vector load gives a whole
//!   panel's step and the activations' 4 bytes of the same step are broadcast to every lane.
//! - **Register tiles.** Up to 6 rows × 2 (256-bit) or 4 (512-bit) panels of int32 sums stay in
//!   registers across all of K (a span of 8: 3 rows × 2 panels at 256 bits, walked group by
//!   group so that each broadcast feeds two panels; 4 × 2 at 512, row by row, which leaves
//!   registers for the run's steps of W instead of spilling sums to the stack); W's
//!   panels stay in cache while the tile walks down the rows, and the first tile of a block
//!   prefetches the next block's. There is no blocking along K (hibari's K is at most 768,
//!   Kokoro's generator convolutions reach 256 channels × 11 taps = 2,816: a panel of 16 or 32
//!   columns is 45-90 KB there, in L2, against L1 at hibari's); M comes in blocks from `crate::kernels::QWeight::forward`, whose int32
//!   sums then stay in L2 for its epilogue.
//! - **u8 × s8.** Every kernel sees A + 128 as u8 and subtracts 128 · Σ_k W[j, k] once at the end.
//! - **VNNI** (`vpdpbusd`): sums of 4 products into int32, nothing saturates.
//! - **AVX2 / AVX-512BW without VNNI**: `vpmaddubsw` (pairs of u8 × s8 products summed into
//!   int16) and `vpmaddwd` by ones (pairs of those into int32), MLAS's two multiplies per 32
//!   products; or, where W allows it, the `vpmaddubsw` of a *run* of 2, 4 or 8 consecutive
//!   groups (the matrix's *span*) added in int16 first (`vpaddw`), then one `vpmaddwd` and one
//!   `vpaddd` for the run: 2s + 1 vector operations per s groups instead of 3s (a span of 8: 17
//!   per 256 products against 24 for pairs and 20 for twos; Intel's cores run `vpmaddubsw` and
//!   `vpmaddwd` on two ports and the adds on three, so the total counts; Zen 4 the multiplies).
//!   An int16 sum of u8 × s8 products lies within [−255 · (its negative weights' magnitudes),
//!   255 · (its positive weights)], so it is exact while both are at most 128 (±32640 ≤ 32767):
//!   packing keeps every sum of the main steps within that (2 · span weights), scaling down only
//!   the weights of a sum beyond it, and puts the rest in the panel's *extra* steps (pairs
//!   within the same bound), which the tile adds after the main loop with the same u8 A, so the
//!   offset is unchanged. Each matrix gets the span with the fewest vector operations, extra
//!   steps counted: Kokoro's generator (weights of rms 4.5-10 steps) takes 8 or 4 with 0-1% of
//!   its groups in extra steps; hibari's decoder (rms ~19) leaves 0.03-3% of its groups to extra
//!   steps in twos, its head 6.6%, a few text-encoder layers too many (they keep pairs). No sum
//!   saturates, none is approximated: the integers are the baseline's whatever W holds; a W full
//!   of large weights only costs time.
//! - **Baseline**: plain dot products the compiler vectorizes for the target.
//! - **AMX**: where oneDNN has AMX tiles, libtorch's `_int_mm` beats these kernels on many rows;
//!   [`calibrate`] measures that once and hands such products to it (the same exact sums).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};

use crate::cpu::Level;

/// A tensor made once and then only read, from any worker thread (see `crate::workers` on
/// sharing tensors between threads).
struct ReadOnly(Tensor);
// SAFETY: the tensor is never written after it is made (OnceLock publishes it once), and
// libtorch reads a tensor from several threads at once safely.
unsafe impl Sync for ReadOnly {}

/// Rows from which [`Packed::matmul`] hands the product to libtorch's `_int_mm` instead: the same
/// exact int32 sums, so nothing changes but the time, and only where [`calibrate`] measured it
/// faster (oneDNN's AMX tiles on Sapphire Rapids and later); `usize::MAX`: never.
static TORCH_FROM_ROWS: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Multiply-adds of every product so far ([`multiply_adds`]).
static MULTIPLY_ADDS: AtomicU64 = AtomicU64::new(0);

/// The multiply-adds (M · N · K of each product) of every [`Packed`] product this process has
/// computed: a network's arithmetic, for benchmarks to set against the kernels' rate
/// (engine-libtorch/examples/kokoro_rtf.rs).
pub fn multiply_adds() -> u64 {
    MULTIPLY_ADDS.load(Ordering::Relaxed)
}

fn count(m: usize, n: usize, k: usize) {
    MULTIPLY_ADDS.fetch_add((m * n * k) as u64, Ordering::Relaxed);
}

thread_local! {
    /// Per-thread buffers that only grow: the products' int32 sums and the kernels' form of A are
    /// rewritten in full on every call, so neither needs zeroing or a fresh allocation each time
    /// (a block of rows' sums is up to 128 KB, see `QWeight::forward`).
    static SCRATCH_I32: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_A: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `f` on a per-thread buffer of `len` int32 values (contents unspecified: to be overwritten).
/// Not re-entrant: `f` must not call it again.
pub fn with_scratch_i32<R>(len: usize, f: impl FnOnce(&mut [i32]) -> R) -> R {
    SCRATCH_I32.with_borrow_mut(|v| {
        if v.len() < len {
            v.resize(len, 0);
        }
        f(&mut v[..len])
    })
}

/// int8 values as the kernels read them: A + 128 in u8 (onnxruntime's uint8 activations).
pub fn plus_128(a: &[i8]) -> Vec<u8> {
    a.iter().map(|&v| v as u8 ^ 0x80).collect()
}

/// A weight matrix W [N, K] in the layout of one level's kernel.
pub struct Packed {
    level: Level,
    k: usize,
    n: usize,
    /// 4-byte steps of K per row of A (K/4, rounded up)
    groups: usize,
    /// Columns per panel (0 for the baseline, which keeps W as it is)
    lanes: usize,
    /// The panels, one after the other: [panel][group][lane][4 bytes], zero beyond N and K; the
    /// baseline: W [N, K] as int8.
    data: Vec<u8>,
    /// What to subtract from each column's sums (128 · Σ_k W[j, k]: the kernels see A + 128),
    /// padded to whole panels.
    offset: Vec<i32>,
    /// What packing took out of the main steps (see the module's notes), by panel: panel p's extra
    /// steps are `extra_at[p]..extra_at[p + 1]`, each a group of K (`extra_group`; a group may
    /// have several) and a panel's step of bytes (`extra_data`, `lanes` · 4 each). None for the
    /// VNNI levels.
    extra_at: Vec<u32>,
    extra_group: Vec<u32>,
    extra_data: Vec<u8>,
    /// The `vpmaddubsw` levels: how many groups one int16 sum of the main steps spans (1, 2 or 4:
    /// groups st..st + span summed in int16 before widening, see the module's notes); 1 for the
    /// VNNI levels.
    span: usize,
    /// W as libtorch's int8 [K, N], made the first time `_int_mm` is used ([`TORCH_FROM_ROWS`])
    torch_w: OnceLock<ReadOnly>,
}

/// Where the kernels find A's rows and their 4-byte groups: row r starts at r · `lda`; its groups
/// come in runs of `per` side by side, `gap` bytes skipped after each run (a dilated
/// convolution's taps read in place).
#[derive(Clone, Copy)]
struct Layout {
    lda: usize,
    per: usize,
    gap: usize,
}

impl Layout {
    /// Rows `lda` apart with all their groups side by side.
    fn rows(lda: usize) -> Layout {
        Layout { lda, per: usize::MAX, gap: 0 }
    }
}

impl Packed {
    /// Packs W (`w`, [N, K] row-major) for `level`'s kernel; a level this CPU lacks packs for the
    /// best one below it.
    pub fn new(w: &[i8], n: usize, k: usize, level: Level) -> Packed {
        assert_eq!(w.len(), n * k, "W is [N, K]");
        let level = Level::best_at_most(level);
        let lanes = match level {
            Level::Baseline => 0,
            Level::Avx2 | Level::AvxVnni => 8,
            Level::Avx512 | Level::Avx512Vnni => 16,
        };
        let mut p = Packed {
            level,
            k,
            n,
            groups: k.div_ceil(4),
            lanes,
            data: Vec::new(),
            offset: Vec::new(),
            extra_at: Vec::new(),
            extra_group: Vec::new(),
            extra_data: Vec::new(),
            span: 1,
            torch_w: OnceLock::new(),
        };
        if lanes == 0 {
            p.data = w.iter().map(|&v| v as u8).collect();
            return p;
        }
        let (groups, panels, step) = (p.groups, n.div_ceil(lanes), lanes * 4);
        p.offset = vec![0i32; panels * lanes];
        let whole = in_panels(w, n, k, lanes);
        for j in 0..n {
            p.offset[j] = 128 * w[j * k..(j + 1) * k].iter().map(|&v| i32::from(v)).sum::<i32>();
        }
        if matches!(level, Level::AvxVnni | Level::Avx512Vnni) {
            // `vpdpbusd` sums four products into int32: nothing to keep within bounds
            p.data = whole.iter().map(|&v| v as u8).collect();
            p.extra_at = vec![0; panels + 1];
            return p;
        }
        // The `vpmaddubsw` levels: every span packed, the one with the fewest vector operations
        // kept (a run of s groups: s `vpmaddubsw`, s − 1 `vpaddw`, one `vpmaddwd` and one
        // `vpaddd`; the groups past the last whole run and every extra step: three each).
        let cost = |s: &Split, span: usize| {
            panels * (groups / span * (2 * span + 1) + groups % span * 3) + s.extra_group.len() * 3
        };
        let (mut chosen, mut span) = (split(&whole, panels, groups, step, MAX_SPAN), MAX_SPAN);
        let mut best = cost(&chosen, MAX_SPAN);
        for s in [4, 2, 1] {
            // (a span costs at least its main steps: packed only where it may win)
            if panels * (groups / s * (2 * s + 1) + groups % s * 3) < best {
                let other = split(&whole, panels, groups, step, s);
                if cost(&other, s) < best {
                    best = cost(&other, s);
                    (chosen, span) = (other, s);
                }
            }
        }
        p.span = span;
        p.data = chosen.data.iter().map(|&v| v as u8).collect();
        p.extra_at = chosen.extra_at;
        p.extra_group = chosen.extra_group;
        p.extra_data = chosen.extra_data.iter().map(|&v| v as u8).collect();
        p
    }

    /// W [N, K] back from the packed form.
    fn unpacked(&self) -> Vec<i8> {
        let (n, k) = (self.n, self.k);
        if self.lanes == 0 {
            return self.data.iter().map(|&b| b as i8).collect();
        }
        let step = self.lanes * 4;
        let mut w = vec![0i8; n * k];
        for j in 0..n {
            let (panel, lane) = (j / self.lanes, j % self.lanes);
            let extra = self.extra_at[panel] as usize..self.extra_at[panel + 1] as usize;
            for kk in 0..k {
                let at = (kk / 4 * self.lanes + lane) * 4 + kk % 4;
                w[j * k + kk] = self.data[panel * self.groups * step + at] as i8;
            }
            for e in extra {
                let g = self.extra_group[e] as usize;
                for i in 0..4.min(k - 4 * g) {
                    w[j * k + 4 * g + i] += self.extra_data[e * step + lane * 4 + i] as i8;
                }
            }
        }
        w
    }

    /// The product through libtorch's `_int_mm` (exact int32, like ours), A given as in
    /// [`Packed::matmul_u8`] (turned back into int8 here, as the use in `matmul_u8` needs it).
    fn matmul_torch(&self, a: &[u8], m: usize, c: &mut [i32]) {
        let a: Vec<i8> = a.iter().map(|&v| (v ^ 0x80) as i8).collect();
        let ReadOnly(w) = self.torch_w.get_or_init(|| {
            ReadOnly(
                Tensor::from_slice(&self.unpacked()).view([self.n as i64, self.k as i64]).transpose(0, 1).contiguous(),
            )
        });
        let at = Tensor::from_slice(&a).view([m as i64, self.k as i64]);
        let r = at.internal_int_mm(w);
        assert!(r.kind() == Kind::Int && r.device() == Device::Cpu && r.is_contiguous() && r.numel() == c.len());
        // SAFETY: a contiguous int32 CPU tensor of c.len() elements, read while `r` lives.
        c.copy_from_slice(unsafe { std::slice::from_raw_parts(r.data_ptr() as *const i32, c.len()) });
    }

    pub fn level(&self) -> Level {
        self.level
    }

    /// C = A · Wᵀ: `a` [M, K] int8 rows, `c` [M, N].
    pub fn matmul(&self, a: &[i8], c: &mut [i32]) {
        self.matmul_u8(&plus_128(a), c);
    }

    /// [`Packed::matmul`] with A given as A + 128 in u8 (onnxruntime's uint8 activations), the
    /// form the kernels read: no conversion pass where K is a multiple of 4.
    pub fn matmul_u8(&self, a: &[u8], c: &mut [i32]) {
        let (k, n) = (self.k, self.n);
        if k == 0 {
            c.fill(0);
            return;
        }
        assert_eq!(a.len() % k, 0, "A is [M, K]");
        let m = a.len() / k;
        assert_eq!(c.len(), m * n, "C is [M, N]");
        count(m, n, k);
        if m == 0 || n == 0 {
            return;
        }
        if m >= TORCH_FROM_ROWS.load(Ordering::Relaxed) && self.level == Level::Avx512Vnni {
            return self.matmul_torch(a, m, c);
        }
        #[cfg(target_arch = "x86_64")]
        if self.level != Level::Baseline {
            SCRATCH_A.with_borrow_mut(|buf| {
                let a = if k.is_multiple_of(4) { a } else { self.pad(a, m, buf) };
                // SAFETY: the level is one this CPU supports (`new` chose it with `best_at_most`), and
                // `a`, `self.data`, `self.offset` and `c` have the sizes the kernels read and write.
                unsafe {
                    match self.level {
                        Level::Avx2 => x86::avx2::run(a, m, Layout::rows(self.groups * 4), self, c),
                        Level::AvxVnni => x86::avxvnni::run(a, m, Layout::rows(self.groups * 4), self, c),
                        Level::Avx512 => x86::avx512::run(a, m, Layout::rows(self.groups * 4), self, c),
                        Level::Avx512Vnni => x86::avx512vnni::run(a, m, Layout::rows(self.groups * 4), self, c),
                        Level::Baseline => unreachable!("handled below"),
                    }
                }
            });
            return;
        }
        for (ar, cr) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)) {
            for (cv, wr) in cr.iter_mut().zip(self.data.chunks_exact(k)) {
                *cv = ar.iter().zip(wr).map(|(&x, &w)| (i32::from(x) - 128) * i32::from(w as i8)).sum();
            }
        }
    }

    /// [`Packed::matmul_u8`] of `m` rows of A that lie `lda` bytes apart in `a` and may overlap
    /// (row r is `a[r·lda..r·lda + K]`): a 1-d convolution's im2col rows read straight from its
    /// time-major input, without the copy. The same integers as [`Packed::matmul_u8`] of those
    /// rows laid out one after the other.
    pub fn matmul_u8_rows(&self, a: &[u8], m: usize, lda: usize, c: &mut [i32]) {
        self.matmul_u8_taps(a, m, lda, 1, self.k, self.k, c);
    }

    /// [`Packed::matmul_u8_rows`] where each row is `taps` pieces of `tap_len` bytes, `tap_step`
    /// apart (row r is `a[r·lda + j·tap_step..][..tap_len]` for j in 0..taps, K = taps ·
    /// tap_len): a dilated convolution's im2col rows read in place. The kernels read them so
    /// where each piece is whole 4-byte groups (whole pairs of them where W's groups go in twos);
    /// otherwise the rows are copied out first. The same integers either way.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_u8_taps(
        &self,
        a: &[u8],
        m: usize,
        lda: usize,
        taps: usize,
        tap_len: usize,
        tap_step: usize,
        c: &mut [i32],
    ) {
        let k = self.k;
        assert!(taps * tap_len == k && (taps == 1 || tap_step >= tap_len), "taps of K");
        assert_eq!(c.len(), m * self.n, "C is [M, N]");
        if m == 0 || self.n == 0 {
            return;
        }
        assert!(a.len() >= (m - 1) * lda + (taps - 1) * tap_step + tap_len, "A holds its m rows");
        #[cfg(target_arch = "x86_64")]
        {
            let layout = if taps == 1 || tap_step == tap_len {
                Some(Layout::rows(lda))
            } else if tap_len.is_multiple_of(4 * self.span) {
                Some(Layout { lda, per: tap_len / 4, gap: tap_step - tap_len })
            } else {
                None
            };
            if let Some(layout) = layout.filter(|_| {
                self.level != Level::Baseline && k.is_multiple_of(4) && m < TORCH_FROM_ROWS.load(Ordering::Relaxed)
            }) {
                count(m, self.n, k);
                // SAFETY: as in `matmul_u8`; with K a multiple of 4 the kernels read `groups * 4`
                // = K bytes per row, in pieces of whole runs of `span` groups that lie in `a`
                // (asserted above).
                unsafe {
                    match self.level {
                        Level::Avx2 => x86::avx2::run(a, m, layout, self, c),
                        Level::AvxVnni => x86::avxvnni::run(a, m, layout, self, c),
                        Level::Avx512 => x86::avx512::run(a, m, layout, self, c),
                        Level::Avx512Vnni => x86::avx512vnni::run(a, m, layout, self, c),
                        Level::Baseline => unreachable!("excluded above"),
                    }
                }
                return;
            }
        }
        let mut rows = Vec::with_capacity(m * k);
        for r in 0..m {
            for j in 0..taps {
                let at = r * lda + j * tap_step;
                rows.extend_from_slice(&a[at..at + tap_len]);
            }
        }
        self.matmul_u8(&rows, c);
    }

    /// A's rows (A + 128 as u8) padded to `groups` 4-byte steps each, for a K that is not a
    /// multiple of 4.
    #[cfg(target_arch = "x86_64")]
    fn pad<'b>(&self, a: &[u8], m: usize, buf: &'b mut Vec<u8>) -> &'b [u8] {
        let (k, row) = (self.k, self.groups * 4);
        if buf.len() < m * row {
            buf.resize(m * row, 0);
        }
        let out = &mut buf[..m * row];
        for (src, dst) in a.chunks_exact(k).zip(out.chunks_exact_mut(row)) {
            dst[..k].copy_from_slice(src);
            // the padding past K multiplies W's zero padding: any value does, but it is written
            // so that nothing depends on what the buffer held
            dst[k..].fill(0);
        }
        out
    }
}

/// W [N, K] as panels of `lanes` columns: [panel][group][lane][4 bytes], zero beyond N and K.
fn in_panels(w: &[i8], n: usize, k: usize, lanes: usize) -> Vec<i8> {
    let groups = k.div_ceil(4);
    let mut out = vec![0i8; n.div_ceil(lanes) * groups * lanes * 4];
    for j in 0..n {
        let (panel, lane) = (j / lanes, j % lanes);
        for (kk, &v) in w[j * k..(j + 1) * k].iter().enumerate() {
            out[(panel * groups + kk / 4) * lanes * 4 + lane * 4 + kk % 4] = v;
        }
    }
    out
}

/// Whether u8 × s8 products with these weights sum exactly in int16: with every activation in
/// 0..=255 the sum lies within [−255 · (the negative weights' magnitudes), 255 · (the positive
/// weights)], so both at most 128 keep it within ±32640 (int16 holds ±32767).
#[cfg(test)]
fn fits_i16(w: &[i8]) -> bool {
    let (pos, neg) = sign_totals(w);
    pos <= 128 && neg <= 128
}

/// The totals of w's positive weights and of its negative weights' magnitudes.
fn sign_totals(w: &[i8]) -> (i32, i32) {
    w.iter().fold((0, 0), |(p, n), &v| if v > 0 { (p + i32::from(v), n) } else { (p, n - i32::from(v)) })
}

/// The part h of `w` whose u8 × s8 sums fit int16 (its positive weights and its negative ones
/// each total at most 128; h and w of the same signs, |h| ≤ |w|): w itself if it fits, else the
/// weights of the sign beyond 128 scaled to a total of at most 128 (toward zero).
fn fitting_part(w: &[i8], h: &mut [i8]) {
    let (pos, neg) = sign_totals(w);
    for (h, &v) in h.iter_mut().zip(w) {
        let total = if v > 0 { pos } else { neg };
        *h = if total > 128 { (i32::from(v) * 128 / total) as i8 } else { v };
    }
}

/// Whether every int16 sum over pair q of each of `steps` (consecutive steps of `step` bytes)
/// fits (see [`fitting_part`]): the common case, checked in one pass over the steps.
fn all_fit(steps: &[i8], step: usize) -> bool {
    (0..step / 2).all(|q| {
        let (p, n) = steps.chunks_exact(step).fold((0, 0), |(p, n), s| {
            let (sp, sn) = sign_totals(&s[2 * q..2 * q + 2]);
            (p + sp, n + sn)
        });
        p <= 128 && n <= 128
    })
}

/// The most groups one int16 sum of the `vpmaddubsw` kernels spans.
const MAX_SPAN: usize = 8;

/// W's panels as a `vpmaddubsw` kernel reads them (see [`Packed`]'s fields of the same names).
struct Split {
    data: Vec<i8>,
    extra_at: Vec<u32>,
    extra_group: Vec<u32>,
    extra_data: Vec<i8>,
}

/// Splits W (`whole`: [panel][group][lane][4 bytes]) for `vpmaddubsw`: the weights that one int16
/// of the main steps sums (the pair at the same place in each of the `span` groups of a run:
/// groups st..st + span up to the last whole run, one group alone after it) keep their
/// [`fitting_part`]; what is left of a group goes to that panel's extra steps, one or more per
/// group, each pair of which fits (the kernel adds those one group at a time). The main and extra
/// parts add up to W exactly.
fn split(whole: &[i8], panels: usize, groups: usize, step: usize, span: usize) -> Split {
    let panel_len = groups * step;
    let mut s = Split { data: whole.to_vec(), extra_at: vec![0], extra_group: Vec::new(), extra_data: Vec::new() };
    if panel_len == 0 {
        s.extra_at = vec![0; panels + 1];
        return s;
    }
    let mut rest = vec![0i8; panel_len];
    for main in s.data.chunks_exact_mut(panel_len) {
        rest.fill(0);
        // A step is `step / 2` pairs of bytes, pair q of every lane at bytes 2q and 2q + 1; one
        // int16 sums pair q of the run's groups g..g + together.
        let runs_end = groups / span * span;
        let mut g = 0;
        while g < groups {
            let together = if g < runs_end { span } else { 1 };
            if all_fit(&main[g * step..(g + together) * step], step) {
                g += together;
                continue;
            }
            for q in 0..step / 2 {
                let mut at = [0usize; 2 * MAX_SPAN];
                for (i, at) in at.iter_mut().enumerate().take(2 * together) {
                    *at = (g + i / 2) * step + 2 * q + i % 2;
                }
                let at = &at[..2 * together];
                let mut w = [0i8; 2 * MAX_SPAN];
                for (w, &i) in w.iter_mut().zip(at) {
                    *w = main[i];
                }
                let mut h = [0i8; 2 * MAX_SPAN];
                fitting_part(&w[..at.len()], &mut h[..at.len()]);
                for (&i, &h) in at.iter().zip(&h) {
                    rest[i] = main[i] - h;
                    main[i] = h;
                }
            }
            g += together;
        }
        for (g, r) in rest.chunks_exact_mut(step).enumerate() {
            while r.iter().any(|&v| v != 0) {
                let mut part = vec![0i8; step];
                for (r, p) in r.chunks_exact(2).zip(part.chunks_exact_mut(2)) {
                    fitting_part(r, p);
                }
                for (r, p) in r.iter_mut().zip(&part) {
                    *r -= p;
                }
                s.extra_group.push(g as u32);
                s.extra_data.extend(part);
            }
        }
        s.extra_at.push(s.extra_group.len() as u32);
    }
    debug_assert_eq!(s.extra_at.len(), panels + 1);
    s
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// An unaligned load of a `T` at `p`, as a plain read of a packed field: `ptr::read_unaligned`
    /// (and the intrinsics' loads, which use it) carries the dev profile's checks of its
    /// arguments into the kernels' inner loops (see `tile`).
    ///
    /// # Safety
    ///
    /// `p` points to `size_of::<T>()` readable bytes.
    #[inline(always)]
    unsafe fn read<T: Copy>(p: *const u8) -> T {
        #[repr(C, packed)]
        struct Unaligned<T>(T);
        // SAFETY: the caller's promise; a packed struct has alignment 1.
        unsafe { (*p.cast::<Unaligned<T>>()).0 }
    }

    /// One level's kernel: `run` walks W's panels in blocks of `NP` and, for each block, A's rows
    /// in tiles of `MR`; `tile` keeps MR × NP vectors of sums in registers over all of K.
    /// `mac(acc, a, b)` adds the products of one 4-byte step; `$vb` is a vector's size in bytes;
    /// `by_group`, the shortest run of W's groups that `tile` walks group by group.
    macro_rules! level {
        ($name:ident, $feature:literal, $v:ty, $vb:literal, $mr:literal, $np:literal, $mrq:literal,
         $mr4:literal, $np4:literal, $mr8:literal, $np8:literal, by_group: $by_group:expr,
         zero: $zero:path, load: $load:path, set1: $set1:path, sub: $sub:path, store: $store:path,
         mac: |$acc:ident, $a:ident, $b:ident| $mac:expr,
         mul16: |$ma:ident, $mb:ident| $mul16:expr,
         add16: |$x:ident, $y:ident| $add16:expr,
         widen: |$wacc:ident, $s:ident| $widen:expr) => {
            pub mod $name {
                #[allow(unused_imports)]
                use std::arch::x86_64::*;

                use super::read;

                use super::super::{Layout, Packed};

                const LANES: usize = $vb / 4;

                /// Rows `a` (MR of them, as `layout` places them) against panels `panel..panel + NP` into `c`
                /// (`ldc` apart, `cols` columns); `prefetch`: also asks for the next NP panels,
                /// step by step, so that they are in L1 when the next block starts. `SPAN`: W's
                /// main steps go in runs of SPAN groups whose products are summed in int16 before
                /// they are widened (`w.span`; 1: `mac` per group): row by row (the run's
                /// SPAN × NP vectors of W loaded once, each row's SPAN broadcasts, one sum at a
                /// time), or, for runs of `$by_group` groups or more, group by group (W's NP
                /// vectors of one group loaded for all MR rows, MR × NP sums in registers: on a
                /// Zen 4 capped to AVX2, runs of 8 went from ~136 to ~155 GMAC/s over Kokoro's
                /// convolutions as 3 rows × 2 panels against 6 × 1 row by row, whose 8
                /// broadcasts a run each fed one panel; Kokoro's whole pass ~5% faster. Row by
                /// row stayed faster at 512 bits and for shorter runs, 2026-12-07).
                ///
                /// # Safety
                ///
                /// The CPU has `$feature`; `w` is packed for this level (`w.lanes` is its
                /// `LANES`, `w.span` is SPAN) and holds panels `panel..panel + NP`; `a` points to
                /// MR rows of `w.groups * 4` readable bytes each, as `layout` places them (its
                /// runs whole multiples of SPAN groups); `c` to MR rows, `ldc` apart, of `cols`
                /// (at most NP · LANES) writable `i32`s each, which nothing else accesses during
                /// the call.
                #[target_feature(enable = $feature)]
                #[allow(clippy::too_many_arguments)]
                unsafe fn tile<const MR: usize, const NP: usize, const SPAN: usize>(
                    a: *const u8,
                    layout: Layout,
                    w: &Packed,
                    panel: usize,
                    c: *mut i32,
                    ldc: usize,
                    cols: usize,
                    prefetch: bool,
                ) {
                    // SAFETY: every pointer read or written below stays in the rows and panels
                    // that the caller vouches for; the rest is intrinsics of `$feature`.
                    // Each row's and panel's address is formed once, then offset with `add`
                    // (in bounds of a non-null pointer) and read with [`read`]: the dev profile
                    // checks every raw read for a null pointer and every `read_unaligned` for
                    // overlaps, and with those checks in this loop the sums were stored to
                    // memory at every step (the tests' and benchmarks' build ran the kernel at
                    // 40% of its release speed).
                    unsafe {
                        let panel_bytes = w.groups * $vb;
                        let b = w.data.as_ptr().add(panel * panel_bytes);
                        let bp: [*const u8; NP] = std::array::from_fn(|p| b.add(p * panel_bytes));
                        let ap: [*const u8; MR] = std::array::from_fn(|r| a.add(r * layout.lda));
                        // (past the last panel this points nowhere: a prefetch never faults)
                        let next = b.wrapping_add(NP * panel_bytes);
                        let pf: [*const u8; NP] = std::array::from_fn(|p| next.wrapping_add(p * panel_bytes));
                        let mut acc = [[$zero(); NP]; MR];
                        // byte offsets of the current group in A's rows and in W's panels, and the
                        // groups left in the current run of A's
                        let (mut oa, mut ob, mut left) = (0usize, 0usize, layout.per);
                        let mut g0 = 0;
                        if SPAN > 1 {
                            // SPAN groups per step, their products summed in int16 first
                            for _ in 0..w.groups / SPAN {
                                if prefetch {
                                    for &p in &pf {
                                        for s in 0..SPAN {
                                            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ob + s * $vb) as *const i8);
                                        }
                                    }
                                }
                                if SPAN >= $by_group {
                                    // group by group: W's NP vectors of a group loaded once for
                                    // all MR rows, each row's 4 bytes broadcast once for NP
                                    // panels, MR × NP int16 sums in registers across the run
                                    let mut sums = [[$zero(); NP]; MR];
                                    for s in 0..SPAN {
                                        let bv: [$v; NP] = std::array::from_fn(|p| read::<$v>(bp[p].add(ob + s * $vb)));
                                        for (sums, &ar) in sums.iter_mut().zip(&ap) {
                                            let av = $set1(read::<i32>(ar.add(oa + 4 * s)));
                                            for (sum, &bv) in sums.iter_mut().zip(&bv) {
                                                let ($ma, $mb) = (av, bv);
                                                let product = $mul16;
                                                *sum = if s == 0 {
                                                    product
                                                } else {
                                                    let ($x, $y) = (*sum, product);
                                                    $add16
                                                };
                                            }
                                        }
                                    }
                                    for (acc, sums) in acc.iter_mut().zip(&sums) {
                                        for (acc, &sum) in acc.iter_mut().zip(sums) {
                                            let ($wacc, $s) = (*acc, sum);
                                            *acc = $widen;
                                        }
                                    }
                                } else {
                                    // row by row: the run's SPAN × NP vectors of W loaded once,
                                    // each row's SPAN broadcasts, one int16 sum at a time
                                    let bv: [[$v; NP]; SPAN] = std::array::from_fn(|s| {
                                        std::array::from_fn(|p| read::<$v>(bp[p].add(ob + s * $vb)))
                                    });
                                    for (acc, &ar) in acc.iter_mut().zip(&ap) {
                                        let av: [$v; SPAN] =
                                            std::array::from_fn(|s| $set1(read::<i32>(ar.add(oa + 4 * s))));
                                        for (p, acc) in acc.iter_mut().enumerate() {
                                            let ($ma, $mb) = (av[0], bv[0][p]);
                                            let mut sum = $mul16;
                                            for s in 1..SPAN {
                                                let ($ma, $mb) = (av[s], bv[s][p]);
                                                let ($x, $y) = (sum, $mul16);
                                                sum = $add16;
                                            }
                                            let ($wacc, $s) = (*acc, sum);
                                            *acc = $widen;
                                        }
                                    }
                                }
                                oa += 4 * SPAN;
                                ob += SPAN * $vb;
                                left -= SPAN;
                                if left == 0 {
                                    oa += layout.gap;
                                    left = layout.per;
                                }
                            }
                            g0 = w.groups / SPAN * SPAN;
                        }
                        for _ in g0..w.groups {
                            if prefetch {
                                for &p in &pf {
                                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ob) as *const i8);
                                }
                            }
                            let bv: [$v; NP] = std::array::from_fn(|p| read::<$v>(bp[p].add(ob)));
                            for (acc, &ar) in acc.iter_mut().zip(&ap) {
                                let av = $set1(read::<i32>(ar.add(oa)));
                                for (acc, &bv) in acc.iter_mut().zip(&bv) {
                                    let ($acc, $a, $b) = (*acc, av, bv);
                                    *acc = $mac;
                                }
                            }
                            oa += 4;
                            ob += $vb;
                            left -= 1;
                            if left == 0 {
                                oa += layout.gap;
                                left = layout.per;
                            }
                        }
                        // the split pairs' other halves, panel by panel
                        for (p, col) in (panel..panel + NP).enumerate() {
                            for e in w.extra_at[col] as usize..w.extra_at[col + 1] as usize {
                                let g = *w.extra_group.get_unchecked(e) as usize;
                                let bv = read::<$v>(w.extra_data.as_ptr().add(e * $vb));
                                for (row, &ar) in acc.iter_mut().zip(&ap) {
                                    let av = $set1(read::<i32>(ar.add(g * 4 + g / layout.per * layout.gap)));
                                    let ($acc, $a, $b) = (row[p], av, bv);
                                    row[p] = $mac;
                                }
                            }
                        }
                        let offset = w.offset.as_ptr().add(panel * LANES);
                        for (r, acc) in acc.iter().enumerate() {
                            for (p, &v) in acc.iter().enumerate() {
                                let col = p * LANES;
                                let v = $sub(v, $load(offset.add(col) as *const _));
                                let dst = c.add(r * ldc + col);
                                if col + LANES <= cols {
                                    $store(dst as *mut _, v);
                                } else if col < cols {
                                    let mut t = [0i32; LANES];
                                    $store(t.as_mut_ptr() as *mut _, v);
                                    std::ptr::copy_nonoverlapping(t.as_ptr(), dst, cols - col);
                                }
                            }
                        }
                    }
                }

                /// All of A's rows against NP panels starting at `panel`, in tiles of at most
                /// MR rows, W's main steps in runs of SPAN groups.
                ///
                /// # Safety
                ///
                /// The CPU has `$feature`; `w` is packed for this level (`w.span` is SPAN) and
                /// holds panels `panel..panel + NP`; `a` holds `m` rows of `w.groups * 4` bytes
                /// as `layout` places them, and `c` `m` rows of `w.n` values.
                #[target_feature(enable = $feature)]
                unsafe fn rows<const MR: usize, const NP: usize, const SPAN: usize>(
                    a: &[u8],
                    m: usize,
                    layout: Layout,
                    w: &Packed,
                    panel: usize,
                    c: &mut [i32],
                ) {
                    let col0 = panel * LANES;
                    let cols = (w.n - col0).min(NP * LANES);
                    // the rows split evenly over the fewest tiles of at most MR rows (19 rows as
                    // 5 + 5 + 5 + 4, not 6 + 6 + 6 + 1: a tile of one row runs its chain of sums
                    // at the instructions' latency, nearly as long as a full tile); the first
                    // fetches the next block of panels (W comes from L3 or memory: the voice's
                    // matrices are 4 MB together; without it, capped to AVX2, the voice's products
                    // ran ~15% slower in the model)
                    let tiles = m.div_ceil(MR);
                    let mut r = 0;
                    for t in 0..tiles {
                        let mr = (m - r).div_ceil(tiles - t);
                        // SAFETY: rows r..r + mr of `a` and `c` exist (r + mr <= m), and the
                        // tile reads and writes only those, in the caller's panels (columns
                        // col0..col0 + cols of `c`, cols <= w.n - col0); the CPU has `$feature`.
                        unsafe {
                            let (a, c) = (a.as_ptr().add(r * layout.lda), c.as_mut_ptr().add(r * w.n + col0));
                            let ldc = w.n;
                            let first = t == 0;
                            match mr {
                                1 if MR > 1 => tile::<1, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                2 if MR > 2 => tile::<2, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                3 if MR > 3 => tile::<3, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                4 if MR > 4 => tile::<4, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                5 if MR > 5 => tile::<5, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                6 if MR > 6 => tile::<6, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                7 if MR > 7 => tile::<7, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                                _ => tile::<MR, NP, SPAN>(a, layout, w, panel, c, ldc, cols, first),
                            }
                        }
                        r += mr;
                    }
                    debug_assert_eq!(r, m);
                }

                /// Panels in blocks of NP, their rows in tiles of MR.
                ///
                /// # Safety
                ///
                /// As [`run`]'s, with `w.span` SPAN.
                #[target_feature(enable = $feature)]
                unsafe fn blocks<const MR: usize, const NP: usize, const SPAN: usize>(
                    a: &[u8],
                    m: usize,
                    layout: Layout,
                    w: &Packed,
                    c: &mut [i32],
                ) {
                    let panels = w.n.div_ceil(LANES);
                    let mut p = 0;
                    while p < panels {
                        let np = (panels - p).min(NP);
                        // SAFETY: panels p..p + np exist (np <= panels - p); the rest is the
                        // caller's promise, passed on.
                        unsafe {
                            match np {
                                1 if NP > 1 => rows::<MR, 1, SPAN>(a, m, layout, w, p, c),
                                2 if NP > 2 => rows::<MR, 2, SPAN>(a, m, layout, w, p, c),
                                3 if NP > 3 => rows::<MR, 3, SPAN>(a, m, layout, w, p, c),
                                _ => rows::<MR, NP, SPAN>(a, m, layout, w, p, c),
                            }
                        }
                        p += np;
                    }
                }

                /// C = A · Wᵀ with A as A + 128 in u8, `groups` 4-byte steps per row (see [`Packed::matmul_u8`]).
                ///
                /// # Safety
                ///
                /// The CPU has `$feature`; `w` was packed for this level (`w.lanes` is its
                /// `LANES`: its panels, offsets and split pairs as [`Packed`] lays them out);
                /// `a` holds `m` rows of `w.groups * 4` bytes as `layout` places them (rows may
                /// overlap; runs of whole multiples of `w.span` groups), and `c` at least
                /// `m * w.n` values.
                #[target_feature(enable = $feature)]
                pub unsafe fn run(a: &[u8], m: usize, layout: Layout, w: &Packed, c: &mut [i32]) {
                    debug_assert_eq!(w.lanes, LANES);
                    debug_assert!(m > 0 && c.len() >= m * w.n);
                    // SAFETY: the caller's promise, passed on (`w.span` chooses SPAN).
                    unsafe {
                        match w.span {
                            1 => blocks::<$mr, $np, 1>(a, m, layout, w, c),
                            2 => blocks::<$mrq, $np, 2>(a, m, layout, w, c),
                            4 => blocks::<$mr4, $np4, 4>(a, m, layout, w, c),
                            _ => blocks::<$mr8, $np8, 8>(a, m, layout, w, c),
                        }
                    }
                }
            }
        };
    }

    level!(avx2, "avx2", __m256i, 32, 4, 2, 3, 5, 2, 3, 2, by_group: 8,
        zero: _mm256_setzero_si256, load: _mm256_loadu_si256, set1: _mm256_set1_epi32,
        sub: _mm256_sub_epi32, store: _mm256_storeu_si256,
        mac: |acc, a, b| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))),
        mul16: |a, b| _mm256_maddubs_epi16(a, b),
        add16: |x, y| _mm256_add_epi16(x, y),
        widen: |acc, s| _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1))));
    level!(avxvnni, "avx2,avxvnni", __m256i, 32, 6, 2, 6, 6, 2, 6, 1, by_group: usize::MAX,
        zero: _mm256_setzero_si256, load: _mm256_loadu_si256, set1: _mm256_set1_epi32,
        sub: _mm256_sub_epi32, store: _mm256_storeu_si256,
        mac: |acc, a, b| _mm256_dpbusd_avx_epi32(acc, a, b),
        mul16: |a, b| _mm256_maddubs_epi16(a, b),
        add16: |x, y| _mm256_add_epi16(x, y),
        widen: |acc, s| _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1))));
    level!(avx512, "avx512f,avx512bw", __m512i, 64, 6, 4, 4, 5, 4, 4, 2, by_group: usize::MAX,
        zero: _mm512_setzero_si512, load: _mm512_loadu_si512, set1: _mm512_set1_epi32,
        sub: _mm512_sub_epi32, store: _mm512_storeu_si512,
        mac: |acc, a, b| _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))),
        mul16: |a, b| _mm512_maddubs_epi16(a, b),
        add16: |x, y| _mm512_add_epi16(x, y),
        widen: |acc, s| _mm512_add_epi32(acc, _mm512_madd_epi16(s, _mm512_set1_epi16(1))));
    level!(avx512vnni, "avx512f,avx512bw,avx512vnni", __m512i, 64, 6, 4, 6, 6, 4, 6, 1, by_group: usize::MAX,
        zero: _mm512_setzero_si512, load: _mm512_loadu_si512, set1: _mm512_set1_epi32,
        sub: _mm512_sub_epi32, store: _mm512_storeu_si512,
        mac: |acc, a, b| _mm512_dpbusd_epi32(acc, a, b),
        mul16: |a, b| _mm512_maddubs_epi16(a, b),
        add16: |x, y| _mm512_add_epi16(x, y),
        widen: |acc, s| _mm512_add_epi32(acc, _mm512_madd_epi16(s, _mm512_set1_epi16(1))));
}

/// Measures, once per process, whether libtorch's `_int_mm` beats our kernel on the decoder's
/// shape (768 × 256) and from how many rows, and sets `TORCH_FROM_ROWS` to match. Only at the
/// best level the CPU has (a capped level is a request to run our kernels) and only where
/// libtorch can be faster at all: on CPUs with AMX (Sapphire Rapids and later), whose tiles
/// oneDNN uses, and there only by a clear margin (20%) at the best of five runs. Elsewhere
/// `_int_mm` is at best as fast as our kernel (oneDNN's VNNI kernels on a Zen 4) plus the copies
/// to and from libtorch's layout, or a scalar loop (without VNNI). Returns the threshold
/// (`None`: never).
pub fn calibrate() -> Option<usize> {
    static FROM: OnceLock<Option<usize>> = OnceLock::new();
    *FROM.get_or_init(|| {
        let level = crate::cpu::level();
        // Without AMX, oneDNN's int8 kernels are VNNI ones like ours, or a scalar loop: never
        // worth the measuring, whose noise once picked them on a Zen 4 (and cost a quarter of
        // a loaded server's time in copies to and from libtorch's layout).
        if level != Level::Avx512Vnni || level != Level::detected() || !Level::amx_int8() {
            return None;
        }
        let _g = tch::no_grad_guard();
        let (n, k) = (768usize, 256usize);
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 37) % 255) as i8 ^ 0x55).map(|v| v.max(-127)).collect();
        let p = Packed::new(&w, n, k, level);
        let best = |f: &mut dyn FnMut()| {
            (0..6)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .skip(1)
                .fold(f64::INFINITY, f64::min)
        };
        let mut from = None;
        for m in [256usize, 128, 64, 32] {
            let a: Vec<u8> = (0..m * k).map(|i| ((i * 91) % 256) as u8 ^ 0x80).collect();
            let (mut ours_c, mut c) = (vec![0i32; m * n], vec![0i32; m * n]);
            // both as the model calls them: A + 128 in u8
            let ours = best(&mut || p.matmul_u8(&a, &mut ours_c));
            let torch = best(&mut || p.matmul_torch(&a, m, &mut c));
            // the same sums, or libtorch is not to be used at all
            if c != ours_c || torch >= ours * 0.8 {
                break;
            }
            from = Some(m);
        }
        if let Some(m) = from {
            TORCH_FROM_ROWS.store(m, Ordering::Relaxed);
            tracing::info!(
                "int8 matmuls of {m} rows or more go to libtorch's _int_mm: measured faster on this CPU (AMX)"
            );
        }
        from
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so failures reproduce.
    fn bytes(n: usize, seed: u64, lo: i32, hi: i32) -> Vec<i8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (lo + (s % (hi - lo + 1) as u64) as i32) as i8
            })
            .collect()
    }

    fn naive(a: &[i8], w: &[i8], m: usize, n: usize, k: usize) -> Vec<i32> {
        let mut c = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|kk| i32::from(a[i * k + kk]) * i32::from(w[j * k + kk])).sum();
            }
        }
        c
    }

    /// Every level this CPU has against the plain sum, on shapes around every tile and panel
    /// edge and on the extremes (-128 activations, ±127 weights), where a saturating kernel fails;
    /// and with small weights (±6), which the `vpmaddubsw` levels sum in runs of 8 groups.
    #[test]
    fn every_level_is_exact() {
        let shapes = [(1, 1, 1), (1, 17, 3), (7, 33, 130), (6, 64, 256), (13, 3005, 256), (200, 24, 1024), (5, 9, 5)];
        for ((case, &(m, n, k)), spread) in shapes.iter().enumerate().flat_map(|s| [(s, 127), (s, 6)]) {
            let a = bytes(m * k, case as u64 + 1, -128, 127);
            let w = bytes(n * k, case as u64 + 100, -spread, spread);
            let want = naive(&a, &w, m, n, k);
            for level in Level::available() {
                let p = Packed::new(&w, n, k, level);
                assert_eq!(p.level(), level);
                if level == Level::Avx2 && spread == 6 && k >= 32 {
                    assert_eq!(p.span, 8, "small weights in runs of 8 groups");
                }
                let mut c = vec![i32::MIN; m * n];
                p.matmul(&a, &mut c);
                assert!(c == want, "{level} on {m}x{n}x{k}, weights ±{spread}");
                // where 16-bit pair sums of u8 × s8 products would saturate (255 · 127 · 2)
                for (x, y) in [(-128i8, -127i8), (127, 127), (127, -127), (-128, 127)] {
                    let (ea, ew) = (vec![x; m * k], vec![y; n * k]);
                    Packed::new(&ew, n, k, level).matmul(&ea, &mut c);
                    assert!(c == naive(&ea, &ew, m, n, k), "{level} on {m}x{n}x{k}, {x} x {y}");
                }
            }
        }
    }

    /// Rows read `lda` apart and overlapping (a convolution's im2col rows straight from its
    /// input) give, at every level, the sums of those rows copied out one after the other.
    #[test]
    fn overlapping_rows_give_the_copied_rows_sums() {
        for (case, &(m, n, k, lda)) in
            [(9, 40, 12, 4), (20, 17, 64, 16), (7, 33, 132, 132), (3, 5, 9, 3)].iter().enumerate()
        {
            let w = bytes(n * k, case as u64 + 7, -127, 127);
            let a: Vec<u8> = bytes((m - 1) * lda + k, case as u64 + 70, -128, 127).iter().map(|&v| v as u8).collect();
            let rows: Vec<u8> = (0..m).flat_map(|r| a[r * lda..r * lda + k].to_vec()).collect();
            for level in Level::available() {
                let p = Packed::new(&w, n, k, level);
                let (mut want, mut got) = (vec![0i32; m * n], vec![i32::MIN; m * n]);
                p.matmul_u8(&rows, &mut want);
                p.matmul_u8_rows(&a, m, lda, &mut got);
                assert!(got == want, "{level} on {m}x{n}x{k}, rows {lda} apart");
            }
        }
    }

    /// Rows of `taps` pieces `tap_step` apart (a dilated convolution's im2col rows read in
    /// place) give, at every level, the sums of those rows copied out one after the other: in
    /// place where the pieces are whole runs of groups (W's span), copied where not; small
    /// weights (in runs) with large ones at places (split pairs, extra steps).
    #[test]
    fn dilated_taps_give_the_copied_rows_sums() {
        // (m, n, channels, taps, dilation)
        for (case, &(m, n, ch, taps, dil)) in
            [(9, 40, 8, 3, 3), (20, 17, 128, 11, 5), (13, 33, 16, 7, 3), (7, 5, 4, 3, 2), (5, 9, 6, 3, 5)]
                .iter()
                .enumerate()
        {
            let k = ch * taps;
            let mut w = bytes(n * k, case as u64 + 17, -30, 30);
            for j in (0..n).step_by(3) {
                (w[j * k + (j * 7) % k], w[j * k + (j * 5) % k]) = (127, -127);
            }
            let (lda, tap_step) = (ch, ch * dil);
            let len = (m - 1) * lda + (taps - 1) * tap_step + ch;
            let a: Vec<u8> = bytes(len, case as u64 + 71, -128, 127).iter().map(|&v| v as u8).collect();
            let rows: Vec<u8> = (0..m)
                .flat_map(|r| (0..taps).flat_map(|j| a[r * lda + j * tap_step..][..ch].to_vec()).collect::<Vec<_>>())
                .collect();
            for level in Level::available() {
                let p = Packed::new(&w, n, k, level);
                let (mut want, mut got) = (vec![0i32; m * n], vec![i32::MIN; m * n]);
                p.matmul_u8(&rows, &mut want);
                p.matmul_u8_taps(&a, m, lda, taps, ch, tap_step, &mut got);
                assert!(got == want, "{level} on {m}x{n}x{k}, {taps} taps {tap_step} apart");
            }
        }
    }

    /// The `vpmaddubsw` levels, in every span (pairs; groups in runs of 2 or 4), keep every int16
    /// sum of the main steps and every pair of the extra steps within [`fits_i16`], take out only
    /// what is beyond it, and give W back whole and the sums exact; `new` packs a span in runs.
    #[test]
    fn split_weights_stay_exact() {
        let (n, k, m) = (40, 74, 9);
        // small weights, as the voice's mostly are, with large pairs at known places
        let mut w = bytes(n * k, 5, -40, 40);
        let big = [(0, 0, 127, 1), (3, 10, -90, -60), (17, 68, -127, -127), (39, 4, 100, -29)];
        for &(j, kk, x, y) in &big {
            (w[j * k + kk], w[j * k + kk + 1]) = (x, y);
        }
        let a = bytes(m * k, 6, -128, 127);
        for level in Level::available() {
            let chosen = Packed::new(&w, n, k, level);
            if !matches!(level, Level::Avx2 | Level::Avx512) {
                assert!(chosen.extra_group.is_empty() && chosen.span == 1, "{level} splits nothing");
                continue;
            }
            let (lanes, groups) = (chosen.lanes, chosen.groups);
            assert_eq!(groups % 4, 3, "groups past the last run of four: they go alone");
            let panels = n.div_ceil(lanes);
            let whole = in_panels(&w, n, k, lanes);
            for span in [1, 2, 4] {
                let s = split(&whole, panels, groups, lanes * 4, span);
                let mut p = Packed::new(&w, n, k, level);
                p.span = span;
                p.data = s.data.iter().map(|&v| v as u8).collect();
                (p.extra_at, p.extra_group) = (s.extra_at.clone(), s.extra_group.clone());
                p.extra_data = s.extra_data.iter().map(|&v| v as u8).collect();
                assert!(p.unpacked() == w, "{level} span {span}");
                let mut c = vec![0; m * n];
                // random activations, and the largest (255 as A + 128), where the bounds are met
                for a in [a.clone(), vec![127; m * k]] {
                    p.matmul(&a, &mut c);
                    assert!(c == naive(&a, &w, m, n, k), "{level} span {span}");
                }
                for panel in s.data.chunks_exact(groups * lanes * 4) {
                    let mut g = 0;
                    while g < groups {
                        let run = if g < groups / span * span { span } else { 1 };
                        for lane in 0..lanes {
                            for half in [0, 2] {
                                let at = |g: usize| (g * lanes + lane) * 4 + half;
                                let set: Vec<i8> =
                                    (g..g + run).flat_map(|g| [panel[at(g)], panel[at(g) + 1]]).collect();
                                assert!(fits_i16(&set), "{level} span {span}: {set:?}");
                            }
                        }
                        g += run;
                    }
                }
                assert!(s.extra_data.chunks_exact(2).all(fits_i16), "{level} span {span}");
                if span == 1 {
                    // (0, 0, 127, 1) fits (just), so does (39, 4, 100, −29) (opposite signs); the
                    // other two are one extra step each
                    let steps: Vec<(usize, usize)> =
                        big[1..3].iter().map(|&(j, kk, _, _)| (j / lanes, kk / 4)).collect();
                    let mut got = Vec::new();
                    for panel in 0..panels {
                        for e in s.extra_at[panel]..s.extra_at[panel + 1] {
                            got.push((panel, s.extra_group[e as usize] as usize));
                        }
                    }
                    assert_eq!(got, steps, "{level}");
                }
            }
            // weights this small fit in runs, but for the four large pairs
            assert!(chosen.span > 1, "{level}");
        }
    }

    /// Whether oneDNN, inside libtorch, runs AVX-512 VNNI here: the CPU has it and
    /// `ONEDNN_MAX_CPU_ISA` (scripts/cpu-paths.sh) does not cap oneDNN below it.
    fn onednn_avx512_vnni() -> bool {
        let cap = std::env::var("ONEDNN_MAX_CPU_ISA").or_else(|_| std::env::var("DNNL_MAX_CPU_ISA"));
        let capped = cap.is_ok_and(|isa| {
            ["SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE"].contains(&isa.to_uppercase().as_str())
        });
        Level::detected() == Level::Avx512Vnni && !capped
    }

    /// libtorch's `_int_mm`, where the engine may use it (oneDNN with AVX-512 VNNI: `calibrate`
    /// tries it on AMX CPUs), gives our sums. Without VNNI oneDNN multiplies u8·s8 pairs with
    /// `vpmaddubsw`, whose 16-bit sums saturate (an AVX2-only CPU, AVX-512 without VNNI, or
    /// oneDNN capped to either): there `calibrate`'s own check of the sums keeps it unused.
    #[test]
    fn torch_path_is_exact() {
        let vnni = onednn_avx512_vnni();
        for &(m, n, k) in &[(1, 17, 3), (70, 3005, 256), (13, 24, 1024)] {
            let a = bytes(m * k, 7, -128, 127);
            let w = bytes(n * k, 8, -127, 127);
            for level in Level::available() {
                let p = Packed::new(&w, n, k, level);
                let mut c = vec![0i32; m * n];
                p.matmul_torch(&plus_128(&a), m, &mut c);
                if vnni {
                    assert!(c == naive(&a, &w, m, n, k), "{level} {m}x{n}x{k}");
                }
            }
        }
        if !vnni {
            assert_eq!(calibrate(), None, "libtorch's _int_mm without VNNI: never to be used");
        }
    }

    #[test]
    fn empty_shapes() {
        for level in Level::available() {
            let p = Packed::new(&[], 0, 4, level);
            p.matmul(&[1, 2, 3, 4], &mut []);
            let p = Packed::new(&[], 3, 0, level);
            let mut c = [7; 6];
            p.matmul(&[], &mut c[..0]);
            let p = Packed::new(&[1; 12], 3, 4, level);
            p.matmul(&[], &mut []);
        }
    }
}
