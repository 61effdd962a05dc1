//! What the workers and their schedulers share: the admission state and mode, each worker's
//! counters (read by `/metrics`), and the speech-rate estimate. A leaf: it knows neither.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use speechstream_core::capacity::{Histogram, StreamTiming, WorkerLoad};
use speechstream_core::engine::RequestId;

pub(crate) use crate::pacing::CHARS_PER_SECOND;
use crate::pacing::{Costs, Delivery, Step, RETRY_AFTER};

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
    pub streams: AtomicU64,
    pub refused: AtomicU64,
    /// Streams admitted with their first audio due after the target ([`crate::pacing::least_delay`]).
    pub delayed: AtomicU64,
    /// What is known of each connection's listener ([`Heard`]).
    listeners: Mutex<HashMap<u64, Heard>>,
}

/// What [`Admission`] remembers of a connection.
#[derive(Clone, Copy, Debug)]
enum Heard {
    /// Its listener will have played its last finished stream then, played in real time from
    /// its first chunk (and after the one before): a stream it sends before then is heard
    /// after (a voice agent queueing sentences), and one from a client that reads faster than
    /// it could play owes its audio to no playback clock soon.
    PlaysUntil(Instant),
    /// Nothing heard yet; its first try was refused then (and told to retry a
    /// [`RETRY_AFTER`] later).
    RefusedAt(Instant),
}

impl Heard {
    /// Still worth remembering at `now` when the table is full.
    fn current(&self, now: Instant) -> bool {
        match *self {
            Heard::PlaysUntil(t) => t > now,
            Heard::RefusedAt(t) => t + RETRY_AFTER > now,
        }
    }
}

/// A connection's listener as [`Admission`] knows it when the connection sends a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listener {
    /// Still playing the connection's earlier audio until then: the client sent this stream
    /// before it could have heard the last (a queueing voice agent, or a client that reads
    /// faster than it could play: a closed loop, a batch job).
    Busy(Instant),
    /// Done playing everything the connection was sent (or stopped): a client that waits on
    /// this stream's first audio to go on.
    Free,
    /// Nothing heard on this connection yet; its first try was then (now, or a refused try).
    New(Instant),
}

/// Connections remembered by [`Admission::listeners`] before the ones no longer current are
/// dropped.
const LISTENERS_KEPT: usize = 4096;

impl Admission {
    pub fn new(mode: AdmissionMode, max_streams: Option<u64>) -> Admission {
        Admission {
            mode,
            max_streams,
            streams: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            listeners: Mutex::new(HashMap::new()),
        }
    }

    /// What is known of `connection`'s listener at `now`.
    pub fn listener(&self, connection: u64, now: Instant) -> Listener {
        let listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        match listeners.get(&connection) {
            Some(&Heard::PlaysUntil(t)) if t > now => Listener::Busy(t),
            Some(&Heard::PlaysUntil(_)) => Listener::Free,
            Some(&Heard::RefusedAt(t)) => Listener::New(t),
            None => Listener::New(now),
        }
    }

    /// Records what is heard of `connection` at `now`, `update` given its last record.
    fn hear(&self, connection: u64, now: Instant, update: impl FnOnce(Option<Heard>) -> Heard) {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        if listeners.len() >= LISTENERS_KEPT {
            listeners.retain(|_, heard| heard.current(now));
        }
        let heard = update(listeners.get(&connection).copied());
        listeners.insert(connection, heard);
    }

    /// `connection`'s listener stopped (its stream was aborted: a barge-in, a client gone): it
    /// is free now.
    pub fn listener_stopped(&self, connection: u64, now: Instant) {
        self.hear(connection, now, |_| Heard::PlaysUntil(now));
    }

    /// A stream on `connection` was refused at `now`: if it was the connection's first try,
    /// its next ones count from it ([`Listener::New`]).
    pub fn note_refusal(&self, connection: u64, now: Instant) {
        self.hear(connection, now, |last| last.unwrap_or(Heard::RefusedAt(now)));
    }

    /// `connection`'s listener will have played its audio at `at`.
    pub fn played_out(&self, connection: u64, at: Instant, now: Instant) {
        self.hear(connection, now, |last| match last {
            Some(Heard::PlaysUntil(t)) => Heard::PlaysUntil(t.max(at)),
            _ => Heard::PlaysUntil(at),
        });
    }
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
    /// What its streams owe soon, for admission.
    pub demand: Mutex<Demand>,
    pub batch_sizes: Mutex<BTreeMap<u64, u64>>,
    pub timing: Mutex<StreamTiming>,
    /// Its share of time spent computing lately ([`BusyShare`]).
    busy_share: Mutex<BusyShare>,
}

/// How long [`BusyShare`] remembers: a time constant short enough to follow a change of load
/// within a few seconds, long enough to smooth single rounds.
const BUSY_WINDOW: f64 = 2.0;

/// A worker's share of time spent computing, exponentially weighted over [`BUSY_WINDOW`]:
/// each round's busy seconds added when done, the sum decaying with time.
#[derive(Clone, Copy, Debug)]
struct BusyShare {
    at: Instant,
    share: f64,
}

impl BusyShare {
    fn at(self, now: Instant) -> f64 {
        self.share * (-now.saturating_duration_since(self.at).as_secs_f64() / BUSY_WINDOW).exp()
    }
}

/// A worker's streams' work due soon ([`crate::pacing::feasible`] checks a new stream against
/// it): the steps of the streams it runs, as it last published them, and of the streams
/// admitted to it that it has not taken yet; and what its work costs.
pub(crate) struct Demand {
    pub steps: Vec<Step>,
    pub arrivals: Vec<(RequestId, Vec<Step>)>,
    /// What each family's work costs (indexed as the engine's families; empty until the
    /// worker first publishes).
    pub costs: Vec<Costs>,
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
            demand: Mutex::new(Demand { steps: Vec::new(), arrivals: Vec::new(), costs: Vec::new() }),
            batch_sizes: Mutex::new(BTreeMap::new()),
            timing: Mutex::new(StreamTiming { lateness: Histogram::new(LATENESS_BUCKETS), ..StreamTiming::default() }),
            busy_share: Mutex::new(BusyShare { at: Instant::now(), share: 0.0 }),
        }
    }

    pub fn record_batch(&self, size: usize) {
        let mut sizes = self.batch_sizes.lock().unwrap_or_else(|p| p.into_inner());
        *sizes.entry(size as u64).or_default() += 1;
    }

    pub fn record_work(&self, busy_seconds: f64, factor: f64) {
        self.busy_us.fetch_add((busy_seconds * 1e6) as u64, Ordering::Relaxed);
        self.set_factor(factor);
        let now = Instant::now();
        let mut busy = self.busy_share.lock().unwrap_or_else(|p| p.into_inner());
        *busy = BusyShare { at: now, share: busy.at(now) + busy_seconds.max(0.0) / BUSY_WINDOW };
    }

    /// Its share of time spent computing lately (0 to about 1).
    pub fn busy_share(&self, now: Instant) -> f64 {
        self.busy_share.lock().unwrap_or_else(|p| p.into_inner()).at(now)
    }

    pub fn set_factor(&self, factor: f64) {
        self.factor.store(factor.to_bits(), Ordering::Relaxed);
    }

    pub fn factor(&self) -> f64 {
        f64::from_bits(self.factor.load(Ordering::Relaxed))
    }

    /// Counts a chunk delivered now.
    pub fn record_delivery(&self, delivery: Delivery) {
        if delivery == Delivery::Unpaced {
            return;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_listener_is_new_until_heard_then_busy_until_it_has_played_then_free() {
        let admission = Admission::new(AdmissionMode::Realtime, None);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(admission.listener(7, t0), Listener::New(t0));
        admission.played_out(7, t0 + s(4), t0);
        assert_eq!(admission.listener(7, t0 + s(1)), Listener::Busy(t0 + s(4)));
        assert_eq!(admission.listener(7, t0 + s(4)), Listener::Free);
        // Refused on its first try: still new, counted from that try; a refusal changes
        // nothing for a listener heard before.
        admission.note_refusal(8, t0 + s(1));
        admission.note_refusal(8, t0 + s(2));
        assert_eq!(admission.listener(8, t0 + s(3)), Listener::New(t0 + s(1)));
        admission.note_refusal(7, t0 + s(2));
        assert_eq!(admission.listener(7, t0 + s(2)), Listener::Busy(t0 + s(4)));
        // A stream stopped (a barge-in): free at once, and still known as a listener.
        admission.played_out(7, t0 + s(9), t0 + s(5));
        admission.listener_stopped(7, t0 + s(6));
        assert_eq!(admission.listener(7, t0 + s(6)), Listener::Free);
    }
}
