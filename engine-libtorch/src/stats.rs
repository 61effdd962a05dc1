//! What the workers and their schedulers share: the admission state and mode, each worker's
//! counters (read by `/metrics`), and the speech-rate estimate. A leaf: it knows neither.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use speechstream_core::capacity::{Histogram, StreamTiming, WorkerLoad};

use crate::pacing::{Burst, Delivery, Throughput, URGENT_LEAD_S};

/// Characters of text per second of speech, to estimate a request's audio before its prosody
/// pass (hibari's default voice at speed 1: ~16).
pub(crate) const CHARS_PER_SECOND: f64 = 15.0;

/// Upper bounds of the lateness histogram, seconds.
pub(crate) const LATENESS_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// `--admission`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionMode {
    /// Every request is taken.
    Off,
    /// A stream is refused when admitting it would make the running ones late.
    Realtime,
}

impl std::str::FromStr for AdmissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AdmissionMode, String> {
        match s {
            "off" => Ok(AdmissionMode::Off),
            "realtime" => Ok(AdmissionMode::Realtime),
            _ => Err(format!("admission {s:?}: off or realtime")),
        }
    }
}

/// The streams in flight on all workers, against which admission decides.
pub(crate) struct Admission {
    pub mode: AdmissionMode,
    pub max_streams: Option<u64>,
    pub burst: Mutex<Burst>,
    pub streams: AtomicU64,
    pub refused: AtomicU64,
}

/// One worker's counters, written by its thread (and the submit side), read by `/metrics`.
pub(crate) struct WorkerStats {
    pub queued: AtomicU64,
    pub running: AtomicU64,
    /// Streamed requests admitted on this worker and not over.
    pub streams: AtomicU64,
    /// Audio owed to its requests, microseconds (estimates included).
    pub pending_us: AtomicI64,
    busy_us: AtomicU64,
    /// The measured real-time factor, as f64 bits.
    factor: AtomicU64,
    /// At its last planning, its most urgent stream was past its deadline.
    pub behind: AtomicBool,
    pub batch_sizes: Mutex<BTreeMap<u64, u64>>,
    pub timing: Mutex<StreamTiming>,
    delivered: Mutex<Throughput>,
}

impl WorkerStats {
    pub fn new() -> WorkerStats {
        WorkerStats {
            queued: AtomicU64::new(0),
            running: AtomicU64::new(0),
            streams: AtomicU64::new(0),
            pending_us: AtomicI64::new(0),
            busy_us: AtomicU64::new(0),
            factor: AtomicU64::new(0f64.to_bits()),
            behind: AtomicBool::new(false),
            batch_sizes: Mutex::new(BTreeMap::new()),
            timing: Mutex::new(StreamTiming { lateness: Histogram::new(LATENESS_BUCKETS), ..StreamTiming::default() }),
            delivered: Mutex::new(Throughput::new(Instant::now())),
        }
    }

    pub fn record_batch(&self, size: usize) {
        let mut sizes = self.batch_sizes.lock().unwrap_or_else(|p| p.into_inner());
        *sizes.entry(size as u64).or_default() += 1;
    }

    pub fn record_work(&self, busy_seconds: f64, factor: f64) {
        self.busy_us.fetch_add((busy_seconds * 1e6) as u64, Ordering::Relaxed);
        self.set_factor(factor);
    }

    pub fn set_factor(&self, factor: f64) {
        self.factor.store(factor.to_bits(), Ordering::Relaxed);
    }

    pub fn set_behind(&self, behind: bool) {
        self.behind.store(behind, Ordering::Relaxed);
    }

    pub fn factor(&self) -> f64 {
        f64::from_bits(self.factor.load(Ordering::Relaxed))
    }

    pub fn throughput(&self, now: Instant) -> f64 {
        self.delivered.lock().unwrap_or_else(|p| p.into_inner()).rate(now)
    }

    /// Counts a chunk of `seconds` of audio delivered now.
    pub fn record_delivery(&self, delivery: Delivery, seconds: f64) {
        let urgent = match delivery {
            Delivery::Unpaced => return,
            Delivery::OnTime(lead) => lead < URGENT_LEAD_S,
            Delivery::Late(_) => true,
        };
        if urgent {
            self.delivered.lock().unwrap_or_else(|p| p.into_inner()).record(Instant::now(), seconds);
        }
        let mut timing = self.timing.lock().unwrap_or_else(|p| p.into_inner());
        timing.chunks += 1;
        if let Delivery::Late(seconds) = delivery {
            timing.underruns += 1;
            timing.lateness.observe(seconds);
        }
    }

    pub fn load(&self) -> WorkerLoad {
        let factor = self.factor();
        let streams = self.streams.load(Ordering::Relaxed);
        WorkerLoad {
            queued: self.queued.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            pending_audio_seconds: self.pending_us.load(Ordering::Relaxed).max(0) as f64 / 1e6,
            busy_seconds: self.busy_us.load(Ordering::Relaxed) as f64 / 1e6,
            realtime_factor: factor,
            headroom: factor / streams.max(1) as f64,
        }
    }
}
