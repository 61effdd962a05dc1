//! What an engine reports about its capacity: each worker's load, how late streamed audio was
//! against real-time playback, and requests refused for lack of capacity.
//!
//! A refusal travels the ordinary failure path ([`EngineEventKind::Failed`]) as a
//! [`Failure::Overloaded`], so a session turns it into an `error` frame (with [`Overloaded`]'s
//! message) and stays open, as for any failed utterance, and an HTTP transport answers it 503
//! with `Retry-After` instead of 500, from the type.
//!
//! [`EngineEventKind::Failed`]: crate::engine::EngineEventKind::Failed
//! [`Failure::Overloaded`]: crate::engine::Failure::Overloaded

use std::fmt;

/// One engine worker (a thread with its own share of the model) as `/metrics` shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerLoad {
    /// Requests accepted by this worker and not started.
    pub queued: u64,
    /// Requests being computed.
    pub running: u64,
    /// Seconds of audio it still owes its requests (an estimate until a sentence's prosody).
    pub pending_audio_seconds: f64,
    /// Seconds spent computing since the engine started.
    pub busy_seconds: f64,
    /// Seconds of audio computed per second of compute, as measured lately.
    pub realtime_factor: f64,
    /// How many times over the worker can keep its streams in real time: its real-time factor
    /// over the streams it serves (the factor itself while it serves none). Below 1 its
    /// streams fall behind.
    pub headroom: f64,
}

/// A histogram with fixed upper bounds: `counts[i]` observations in `(bounds[i-1], bounds[i]]`,
/// the last count past the largest bound.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Upper bounds, increasing.
    pub bounds: Vec<f64>,
    /// One more than `bounds`: per bucket, not cumulative.
    pub counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram { bounds: bounds.to_vec(), counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }

    /// Counts one observation.
    pub fn observe(&mut self, value: f64) {
        let at = self.bounds.iter().position(|b| value <= *b).unwrap_or(self.bounds.len());
        if let Some(count) = self.counts.get_mut(at) {
            *count += 1;
        }
        self.sum += value;
    }

    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Streamed audio against real-time playback: a chunk is late when it is delivered after the
/// audio before it would have run out for a client that started playing at the first chunk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamTiming {
    /// Streamed audio chunks delivered.
    pub chunks: u64,
    /// Chunks delivered late (an audible gap at the client).
    pub underruns: u64,
    /// How late the late chunks were, in seconds.
    pub lateness: Histogram,
    /// Requests refused because admitting them would have made running streams late.
    pub refused: u64,
    /// Streams admitted with their first audio due after the first-audio target, rather than
    /// refused (clients not known to listen in real time, where a short delay fits).
    pub delayed: u64,
}

/// The refusal of a request for lack of capacity; its `Display` is the message clients get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overloaded {
    /// Whole seconds after which a retry may succeed (HTTP `Retry-After`).
    pub retry_after_seconds: u32,
}

const OVERLOADED_PREFIX: &str =
    "Server overloaded: every worker is busy keeping the running streams in real time; retry in ";

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{OVERLOADED_PREFIX}{} s", self.retry_after_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_when_to_retry() {
        let refusal = Overloaded { retry_after_seconds: 3 };
        assert_eq!(refusal.to_string(), format!("{OVERLOADED_PREFIX}3 s"));
    }

    #[test]
    fn histogram_counts_per_bucket() {
        let mut h = Histogram::new(&[0.01, 0.1]);
        for v in [0.005, 0.05, 0.07, 2.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![1, 2, 1]);
        assert_eq!(h.count(), 4);
        assert!((h.sum - 2.125).abs() < 1e-12);
    }
}
