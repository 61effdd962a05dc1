//! Latency summaries. A sorted vector is enough for the sample counts a short loopback run
//! produces (a few hundred thousand at most), and keeps the dependency list short.

use std::time::Duration;

/// Latency samples in microseconds.
#[derive(Default, Clone, Debug)]
pub struct Samples {
    micros: Vec<u64>,
}

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.micros.push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn extend(&mut self, other: Samples) {
        self.micros.extend(other.micros);
    }

    pub fn len(&self) -> usize {
        self.micros.len()
    }

    pub fn is_empty(&self) -> bool {
        self.micros.is_empty()
    }

    /// Sorts in place and summarises; `None` without samples.
    pub fn summary(&mut self) -> Option<Summary> {
        if self.micros.is_empty() {
            return None;
        }
        self.micros.sort_unstable();
        let n = self.micros.len();
        let sum: u128 = self.micros.iter().map(|&v| u128::from(v)).sum();
        Some(Summary {
            count: n,
            mean_ms: sum as f64 / n as f64 / 1000.0,
            p50_ms: self.quantile(0.50),
            p90_ms: self.quantile(0.90),
            p99_ms: self.quantile(0.99),
            max_ms: self.micros[n - 1] as f64 / 1000.0,
        })
    }

    /// Nearest-rank quantile of sorted samples, in milliseconds.
    fn quantile(&self, q: f64) -> f64 {
        let n = self.micros.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.micros[rank - 1] as f64 / 1000.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut s = Samples::default();
        for ms in 1..=100u64 {
            s.push(Duration::from_millis(ms));
        }
        let sum = s.summary().unwrap();
        assert_eq!(sum.count, 100);
        assert_eq!(sum.p50_ms, 50.0);
        assert_eq!(sum.p99_ms, 99.0);
        assert_eq!(sum.max_ms, 100.0);
        assert!(Samples::default().summary().is_none());
    }
}
