//! Counters and histograms for `GET /metrics`, in Prometheus' text format.
//!
//! Everything is a plain atomic or a short mutex-held histogram, updated by the connection tasks
//! as things happen; the engine's own load (queue depth, batch sizes) is read from
//! `Engine::load` at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use speechstream_core::capacity::WorkerLoad;
use speechstream_core::engine::{EngineEventKind, EngineLoad, RequestId};
use tracing::info;

/// Which door an utterance came through (the `transport` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    WebSocket = 0,
    Http = 1,
    Wyoming = 2,
}

const TRANSPORTS: [&str; 3] = ["websocket", "http", "wyoming"];

/// Why a connection was turned away (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Capacity = 0,
    Draining = 1,
    /// Past `--max-sockets` with no spare socket to close: answered at accept with a fixed 503,
    /// nothing read.
    Sockets = 2,
    /// Past `--max-connections-per-ip`: answered at accept with a fixed 429, nothing read.
    Peer = 3,
}

const REFUSALS: [&str; 4] = ["capacity", "draining", "sockets", "peer"];

/// Why the server closed a socket before it was answered (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Sent nothing within the first-byte deadline.
    FirstByte = 0,
    /// Spare, and closed to make room for a new socket or request.
    Evicted = 1,
}

const CLOSED: [&str; 2] = ["first_byte_timeout", "evicted"];

/// Error kinds (the `kind` label): the engine failed a request; a request was invalid; a
/// client had no valid API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Engine = 0,
    Request = 1,
    Auth = 2,
}

const ERROR_KINDS: [&str; 3] = ["engine", "request", "auth"];

const TTFA_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
const RTF_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0];
const BATCH_BUCKETS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128];

pub(crate) struct Metrics {
    pub(crate) connections_open: AtomicU64,
    /// Accepted TCP connections still held, served or being refused.
    pub(crate) sockets_open: AtomicU64,
    /// The socket budget (`--max-sockets` or its default).
    pub(crate) sockets_max: AtomicU64,
    sockets_closed: [AtomicU64; 2],
    connections_total: AtomicU64,
    refused: [AtomicU64; 4],
    utterances: [AtomicU64; 3],
    audio_bytes: [AtomicU64; 3],
    audio_micros: [AtomicU64; 3],
    errors: [AtomicU64; 3],
    cancellations: [AtomicU64; 3],
    ttfa: Histogram,
    rtf: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections_open: AtomicU64::new(0),
            sockets_open: AtomicU64::new(0),
            sockets_max: AtomicU64::new(0),
            sockets_closed: Default::default(),
            connections_total: AtomicU64::new(0),
            refused: Default::default(),
            utterances: Default::default(),
            audio_bytes: Default::default(),
            audio_micros: Default::default(),
            errors: Default::default(),
            cancellations: Default::default(),
            ttfa: Histogram::new(TTFA_BUCKETS),
            rtf: Histogram::new(RTF_BUCKETS),
        }
    }
}

impl Metrics {
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn socket_closed(&self, why: Closed) {
        self.sockets_closed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cancelled(&self, transport: Transport) {
        self.cancellations[transport as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus exposition, with the engine's load read now.
    pub(crate) fn render(&self, load: &EngineLoad) -> String {
        let mut out = String::with_capacity(4096);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        gauge(&mut out, "speechstream_connections_open", "Connections being served.", get(&self.connections_open));
        gauge(
            &mut out,
            "speechstream_sockets_open",
            "TCP connections held, served or being refused.",
            get(&self.sockets_open),
        );
        gauge(
            &mut out,
            "speechstream_sockets_max",
            "TCP connections that may be held at once (the socket budget).",
            get(&self.sockets_max),
        );
        let closed: Vec<_> = CLOSED.iter().zip(&self.sockets_closed).map(|(l, a)| (*l, get(a))).collect();
        counter_labelled(
            &mut out,
            "speechstream_sockets_closed_total",
            "Sockets closed before they were answered: silent past the first-byte deadline, or spare and closed to make room.",
            "reason",
            &closed,
        );
        counter(
            &mut out,
            "speechstream_connections_total",
            "Connections served since start.",
            get(&self.connections_total),
        );
        let refused: Vec<_> = REFUSALS.iter().zip(&self.refused).map(|(l, a)| (*l, get(a))).collect();
        counter_labelled(
            &mut out,
            "speechstream_connections_refused_total",
            "Connections turned away.",
            "reason",
            &refused,
        );
        let by_transport = |counters: &[AtomicU64; 3]| -> Vec<(&str, u64)> {
            TRANSPORTS.iter().zip(counters).map(|(l, a)| (*l, get(a))).collect()
        };
        counter_labelled(
            &mut out,
            "speechstream_utterances_total",
            "Utterances sent to the engine.",
            "transport",
            &by_transport(&self.utterances),
        );
        counter_labelled(
            &mut out,
            "speechstream_audio_bytes_total",
            "PCM bytes produced by the engine.",
            "transport",
            &by_transport(&self.audio_bytes),
        );
        let seconds = |n: usize| get(&self.audio_micros[n]) as f64 / 1e6;
        let _ = writeln!(out, "# HELP speechstream_audio_seconds_total Seconds of audio produced by the engine.");
        let _ = writeln!(out, "# TYPE speechstream_audio_seconds_total counter");
        for (n, label) in TRANSPORTS.iter().enumerate() {
            let _ = writeln!(out, "speechstream_audio_seconds_total{{transport=\"{label}\"}} {}", seconds(n));
        }
        let errors: Vec<_> = ERROR_KINDS.iter().zip(&self.errors).map(|(l, a)| (*l, get(a))).collect();
        counter_labelled(
            &mut out,
            "speechstream_errors_total",
            "Failed engine requests, rejected requests, refused API keys.",
            "kind",
            &errors,
        );
        counter_labelled(
            &mut out,
            "speechstream_cancellations_total",
            "Engine requests aborted (client cancel or disconnect).",
            "transport",
            &by_transport(&self.cancellations),
        );
        self.ttfa.render(
            &mut out,
            "speechstream_time_to_first_audio_seconds",
            "From engine submit to the first audio.",
        );
        self.rtf.render(
            &mut out,
            "speechstream_real_time_factor",
            "Generation time over audio duration, per utterance.",
        );
        gauge(&mut out, "speechstream_engine_queue_depth", "Engine requests waiting to start.", load.queued);
        gauge(&mut out, "speechstream_engine_requests_running", "Engine requests being computed.", load.running);
        batch_histogram(&mut out, &load.batch_sizes);
        render_workers(&mut out, &load.workers);
        let streams = &load.streams;
        counter(
            &mut out,
            "speechstream_stream_chunks_total",
            "Streamed audio chunks the engine delivered.",
            streams.chunks,
        );
        counter(
            &mut out,
            "speechstream_stream_underruns_total",
            "Streamed chunks delivered after the audio before them ran out, for a client playing from the first chunk.",
            streams.underruns,
        );
        lateness_histogram(&mut out, &streams.lateness);
        counter(
            &mut out,
            "speechstream_admission_refusals_total",
            "Streams refused because the engine could not keep one more in real time.",
            streams.refused,
        );
        out
    }
}

/// Per-worker gauges and counters, labelled `worker="N"`.
fn render_workers(out: &mut String, workers: &[WorkerLoad]) {
    type Field = fn(&WorkerLoad) -> f64;
    let families: [(&str, &str, &str, Field); 6] = [
        ("speechstream_engine_worker_queue_depth", "gauge", "Requests waiting to start, per worker.", |w| {
            w.queued as f64
        }),
        ("speechstream_engine_worker_requests_running", "gauge", "Requests being computed, per worker.", |w| {
            w.running as f64
        }),
        (
            "speechstream_engine_worker_pending_audio_seconds",
            "gauge",
            "Seconds of audio a worker owes its requests (estimated before prosody).",
            |w| w.pending_audio_seconds,
        ),
        ("speechstream_engine_worker_busy_seconds_total", "counter", "Seconds a worker spent computing.", |w| {
            w.busy_seconds
        }),
        (
            "speechstream_engine_worker_realtime_factor",
            "gauge",
            "Seconds of audio a worker computes per second of work, as measured lately.",
            |w| w.realtime_factor,
        ),
        (
            "speechstream_engine_worker_realtime_headroom",
            "gauge",
            "A worker's real-time factor over the streams it serves: below 1 they fall behind.",
            |w| w.headroom,
        ),
    ];
    for (name, kind, help, field) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (n, worker) in workers.iter().enumerate() {
            let _ = writeln!(out, "{name}{{worker=\"{n}\"}} {}", field(worker));
        }
    }
}

/// The engine's lateness histogram (per-bucket counts) in Prometheus' cumulative form.
fn lateness_histogram(out: &mut String, h: &speechstream_core::capacity::Histogram) {
    let name = "speechstream_stream_lateness_seconds";
    let _ = writeln!(out, "# HELP {name} How late the late streamed chunks were.\n# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, n) in h.bounds.iter().zip(&h.counts) {
        cumulative += n;
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ =
        writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}", h.count(), h.sum, h.count());
}

/// One utterance's timing, from submit to its end: time to first audio, real-time factor and
/// audio totals go to the metrics.
pub(crate) struct UtteranceMeter {
    transport: Transport,
    submitted: Instant,
    first_audio: bool,
    audio_seconds: f64,
}

impl UtteranceMeter {
    pub(crate) fn start(metrics: &Metrics, transport: Transport) -> UtteranceMeter {
        metrics.utterances[transport as usize].fetch_add(1, Ordering::Relaxed);
        UtteranceMeter { transport, submitted: Instant::now(), first_audio: false, audio_seconds: 0.0 }
    }

    pub(crate) fn audio(&mut self, metrics: &Metrics, bytes: usize, sample_rate: u32) {
        if bytes == 0 {
            return;
        }
        if !self.first_audio {
            self.first_audio = true;
            metrics.ttfa.observe(self.submitted.elapsed().as_secs_f64());
        }
        let seconds = bytes as f64 / 2.0 / f64::from(sample_rate.max(1));
        self.audio_seconds += seconds;
        let t = self.transport as usize;
        metrics.audio_bytes[t].fetch_add(bytes as u64, Ordering::Relaxed);
        metrics.audio_micros[t].fetch_add((seconds * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// The engine finished the utterance.
    pub(crate) fn finished(&self, metrics: &Metrics) {
        if self.audio_seconds > 0.0 {
            metrics.rtf.observe(self.submitted.elapsed().as_secs_f64() / self.audio_seconds);
        }
    }

    /// An engine event of a session's utterance `id` (WebSocket, Wyoming): its audio, its end,
    /// or its failure (counted and logged).
    pub(crate) fn event(&mut self, metrics: &Metrics, id: RequestId, kind: &EngineEventKind) {
        match kind {
            EngineEventKind::Audio { pcm, sample_rate } => self.audio(metrics, pcm.len(), *sample_rate),
            EngineEventKind::Finished => self.finished(metrics),
            EngineEventKind::Failed(failure) => {
                metrics.error(ErrorKind::Engine);
                info!(request = %id, message = %failure, "utterance failed");
            }
            _ => {}
        }
    }
}

struct Histogram {
    bounds: &'static [f64],
    state: Mutex<HistogramState>,
}

struct HistogramState {
    /// Observations per bucket (not cumulative); the last is past the largest bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        let state = HistogramState { counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 };
        Histogram { bounds, state: Mutex::new(state) }
    }

    fn observe(&self, value: f64) {
        let at = self.bounds.iter().position(|bound| value <= *bound).unwrap_or(self.bounds.len());
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.count += 1;
        state.sum += value;
        state.counts[at] += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, n) in self.bounds.iter().zip(&state.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", state.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", state.sum, state.count);
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

fn counter_labelled(out: &mut String, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value_label, value) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{value_label}\"}} {value}");
    }
}

/// The engine's batch sizes as a histogram (from its per-size counts).
fn batch_histogram(out: &mut String, sizes: &[(u64, u64)]) {
    let name = "speechstream_engine_batch_size";
    let _ = writeln!(out, "# HELP {name} Requests per engine batch (empty for engines that do not batch).");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for bound in BATCH_BUCKETS {
        let n: u64 = sizes.iter().filter(|(size, _)| size <= bound).map(|(_, n)| n).sum();
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
    }
    let count: u64 = sizes.iter().map(|(_, n)| n).sum();
    let sum: u64 = sizes.iter().map(|(size, n)| size * n).sum();
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_family() {
        let metrics = Metrics::default();
        metrics.connection_opened();
        let mut meter = UtteranceMeter::start(&metrics, Transport::Http);
        meter.audio(&metrics, 48_000, 24_000);
        meter.finished(&metrics);
        metrics.error(ErrorKind::Auth);
        metrics.socket_closed(Closed::Evicted);
        metrics.refused(Refusal::Peer);
        let mut lateness = speechstream_core::capacity::Histogram::new(&[0.01, 0.1]);
        lateness.observe(0.05);
        let worker = |busy_seconds| WorkerLoad { queued: 1, running: 2, busy_seconds, ..WorkerLoad::default() };
        let load = EngineLoad {
            queued: 2,
            running: 3,
            batch_sizes: vec![(1, 4), (3, 2)],
            workers: vec![worker(1.5), worker(2.0)],
            streams: speechstream_core::capacity::StreamTiming { chunks: 9, underruns: 1, lateness, refused: 4 },
        };
        let text = metrics.render(&load);
        for line in [
            "speechstream_connections_open 1",
            "speechstream_connections_total 1",
            "speechstream_sockets_max 0",
            "speechstream_sockets_closed_total{reason=\"first_byte_timeout\"} 0",
            "speechstream_sockets_closed_total{reason=\"evicted\"} 1",
            "speechstream_connections_refused_total{reason=\"peer\"} 1",
            "speechstream_utterances_total{transport=\"http\"} 1",
            "speechstream_audio_bytes_total{transport=\"http\"} 48000",
            "speechstream_audio_seconds_total{transport=\"http\"} 1",
            "speechstream_errors_total{kind=\"auth\"} 1",
            "speechstream_time_to_first_audio_seconds_count 1",
            "speechstream_time_to_first_audio_seconds_bucket{le=\"+Inf\"} 1",
            "speechstream_real_time_factor_count 1",
            "speechstream_engine_queue_depth 2",
            "speechstream_engine_requests_running 3",
            "speechstream_engine_batch_size_bucket{le=\"2\"} 4",
            "speechstream_engine_batch_size_bucket{le=\"4\"} 6",
            "speechstream_engine_batch_size_sum 10",
            "speechstream_engine_worker_queue_depth{worker=\"1\"} 1",
            "speechstream_engine_worker_busy_seconds_total{worker=\"0\"} 1.5",
            "speechstream_engine_worker_busy_seconds_total{worker=\"1\"} 2",
            "speechstream_stream_chunks_total 9",
            "speechstream_stream_underruns_total 1",
            "speechstream_stream_lateness_seconds_bucket{le=\"0.01\"} 0",
            "speechstream_stream_lateness_seconds_bucket{le=\"0.1\"} 1",
            "speechstream_stream_lateness_seconds_count 1",
            "speechstream_admission_refusals_total 4",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.1\"} 1\nx_bucket{le=\"1\"} 3\nx_bucket{le=\"+Inf\"} 4\n"), "{out}");
    }
}
