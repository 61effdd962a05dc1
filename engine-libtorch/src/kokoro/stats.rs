//! AdaIN's statistics of a time-major activation, shared by the convolutions' epilogue
//! (`int8.rs`), which gathers them as it writes, and the fused AdaIN + Snake + quantize pass
//! (`fused.rs`), which reads them.

use crate::cpu::simd_fn;

/// AdaIN's statistics of a time-major activation [T, C]: each channel's sum and sum of squares
/// over time, in f64 (the variance as their difference loses nothing that f32 would keep), the
/// rows added in order. Gathered by whatever writes the activation, row by row while the row is
/// in cache (a convolution's epilogue, `Conv::forward_tm_into`), or in a pass of its own
/// ([`Stats::of`]): the same sums in the same order, so the same bits either way.
#[derive(Clone)]
pub(super) struct Stats {
    pub(super) sum: Vec<f64>,
    pub(super) sq: Vec<f64>,
}

impl Stats {
    /// No rows yet, `c` channels.
    pub fn zeros(c: usize) -> Stats {
        Stats { sum: vec![0.0; c], sq: vec![0.0; c] }
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
