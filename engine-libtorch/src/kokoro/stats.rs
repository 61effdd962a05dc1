//! AdaIN's statistics of a time-major activation, shared by the convolutions' epilogue
//! (`int8.rs`), which gathers them as it writes, and the fused AdaIN + Snake + quantize pass
//! (`fused.rs`), which reads them.

use crate::cpu::simd_fn;

/// AdaIN's statistics of a time-major activation [T, C]: each channel's sum and sum of squares
/// over time, in f64 (the variance as their difference loses nothing that f32 would keep), the
/// rows added in order; and each channel's extremes, from which the fused pass predicts its
/// output's range (AdaIN and Snake are monotone in each channel). Gathered by whatever writes
/// the activation, row by row while the row is in cache (a convolution's epilogue,
/// `Conv::forward_tm_into`), or in a pass of its own ([`Stats::of`]): the same sums in the same
/// order, so the same bits either way.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Stats {
    pub(super) sum: Vec<f64>,
    pub(super) sq: Vec<f64>,
    /// each channel's least and greatest value (+∞ and −∞ before any row; NaNs are passed over)
    pub(super) lo: Vec<f32>,
    pub(super) hi: Vec<f32>,
}

impl Stats {
    /// No rows yet, `c` channels.
    pub fn zeros(c: usize) -> Stats {
        Stats { sum: vec![0.0; c], sq: vec![0.0; c], lo: vec![f32::INFINITY; c], hi: vec![f32::NEG_INFINITY; c] }
    }

    /// The statistics of `x` ([T, C] time-major, `c` channels).
    pub fn of(x: &[f32], c: usize) -> Stats {
        let mut s = Stats::zeros(c);
        stats_pass(x, c, &mut s);
        s
    }

    /// Adds a row (C values) to the sums. (Inlined: it runs in its callers' AVX2 and AVX-512
    /// builds.)
    #[inline(always)]
    pub fn add_row(&mut self, row: &[f32]) {
        debug_assert_eq!(row.len(), self.sum.len());
        for ((s, q), &v) in self.sum.iter_mut().zip(self.sq.iter_mut()).zip(row) {
            let v = f64::from(v);
            *s += v;
            *q += v * v;
        }
        for ((lo, hi), &v) in self.lo.iter_mut().zip(self.hi.iter_mut()).zip(row) {
            *lo = if v < *lo { v } else { *lo };
            *hi = if v > *hi { v } else { *hi };
        }
    }
}

simd_fn! {
    /// [`Stats::of`]'s rows, in order.
    fn stats_pass(x: &[f32], c: usize, st: &mut Stats) {
        for row in x.chunks_exact(c) {
            st.add_row(row);
        }
    }
}
