//! Counters and histograms for `GET /metrics`, in Prometheus' text format.
//!
//! Everything is a plain atomic or a short mutex-held histogram, updated by the connection tasks
//! as things happen; the engine's own load (queue depth, batch sizes) is read from
//! `Engine::load` at scrape time.
//!
//! Under `--vllm-omni-compat` ([`Metrics::with_vllm_omni`]) it also exports upstream
//! vLLM-Omni's speech streaming families (`vllm_omni:audio_ttfp_s`, `vllm_omni:audio_rtf`,
//! `vllm_omni:audio_underrun_s`, `vllm_omni:audio_continuity_ok_total`,
//! `vllm_omni:speech_stream_{completed,aborted}_total`), measured as upstream defines them (its
//! PR 6853), so dashboards built on a vLLM-Omni deployment keep working.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use speechstream_core::capacity::WorkerLoad;
use speechstream_core::engine::EngineLoad;

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

/// Upstream's buckets: seconds (TTFP), fine seconds (underrun), real-time factor.
const UPSTREAM_SECONDS_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];
const UPSTREAM_FAST_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];
const UPSTREAM_RTF_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0];
/// Upstream's continuity threshold: a stream whose worst underrun stays within it is continuous.
const CONTINUITY_THRESHOLD_S: f64 = 0.1;

/// Why a stream ended before its end (upstream's `reason` label): the client or the session
/// cancelled it, the client went away, the engine failed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Abort {
    Cancelled = 0,
    Closed = 1,
    Error = 2,
}

const ABORTS: [&str; 3] = ["cancelled", "closed", "error"];

/// Upstream vLLM-Omni's speech streaming metrics, labelled as a single-stage, single-replica
/// deployment of the served model.
struct VllmOmni {
    /// The label set `model_name="...",stage="0",replica="0"`.
    labels: String,
    model_name: String,
    ttfp: Histogram,
    rtf: Histogram,
    underrun: Histogram,
    continuity_ok: AtomicU64,
    completed: AtomicU64,
    aborted: [AtomicU64; 3],
}

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
    vllm_omni: Option<VllmOmni>,
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
            vllm_omni: None,
        }
    }
}

impl Metrics {
    /// These metrics with upstream vLLM-Omni's speech streaming families beside ours, for the
    /// served model `model_name`.
    pub(crate) fn with_vllm_omni(mut self, model_name: &str) -> Metrics {
        let escaped = model_name.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        self.vllm_omni = Some(VllmOmni {
            labels: format!("model_name=\"{escaped}\",stage=\"0\",replica=\"0\""),
            model_name: escaped,
            ttfp: Histogram::new(UPSTREAM_SECONDS_BUCKETS),
            rtf: Histogram::new(UPSTREAM_RTF_BUCKETS),
            underrun: Histogram::new(UPSTREAM_FAST_BUCKETS),
            continuity_ok: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            aborted: Default::default(),
        });
        self
    }

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
        gauge_f64(
            &mut out,
            "speechstream_capacity_usage",
            "How full the engine is by its admission's measure: 0 idle, 1 full (the next stream would be refused or delayed).",
            load.usage,
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
        counter(
            &mut out,
            "speechstream_admission_delayed_total",
            "Streams admitted with their first audio due after the target rather than refused.",
            streams.delayed,
        );
        if let Some(upstream) = &self.vllm_omni {
            upstream.render(&mut out);
        }
        out
    }
}

impl VllmOmni {
    fn render(&self, out: &mut String) {
        let labels = &self.labels;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.ttfp.render_labelled(
            out,
            "vllm_omni:audio_ttfp_s",
            "Request arrival to the first non-empty PCM payload of a streamed reply.",
            labels,
        );
        self.rtf.render_labelled(out, "vllm_omni:audio_rtf", "Generation time over audio duration.", labels);
        self.underrun.render_labelled(
            out,
            "vllm_omni:audio_underrun_s",
            "Worst playback-buffer deficit of a completed stream, for a player starting at its first chunk.",
            labels,
        );
        let name = "vllm_omni:audio_continuity_ok_total";
        let _ = writeln!(out, "# HELP {name} Completed streams whose worst underrun stayed within the threshold.");
        let threshold_ms = (CONTINUITY_THRESHOLD_S * 1000.0).round();
        let _ = writeln!(
            out,
            "# TYPE {name} counter\n{name}{{{labels},threshold_ms=\"{threshold_ms}\"}} {}",
            get(&self.continuity_ok)
        );
        let model = &self.model_name;
        let name = "vllm_omni:speech_stream_completed_total";
        let _ = writeln!(out, "# HELP {name} Speech streams that ended normally.");
        let _ = writeln!(out, "# TYPE {name} counter\n{name}{{model_name=\"{model}\"}} {}", get(&self.completed));
        let name = "vllm_omni:speech_stream_aborted_total";
        let _ = writeln!(out, "# HELP {name} Speech streams that ended before their end, by reason.");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (reason, n) in ABORTS.iter().zip(&self.aborted) {
            let _ = writeln!(out, "{name}{{model_name=\"{model}\",reason=\"{reason}\"}} {}", get(n));
        }
    }
}

/// A stream's worst underrun, as upstream measures it: a player starts at the first chunk's
/// arrival and plays continuously; at each later chunk's arrival it has been starved for the
/// time played past the audio received before that chunk.
#[derive(Debug, Default)]
struct Continuity {
    /// Seconds since the first chunk's arrival, and the audio received so far.
    first: Option<Instant>,
    received: f64,
    worst: f64,
}

impl Continuity {
    fn chunk(&mut self, at: Instant, seconds: f64) {
        match self.first {
            None => self.first = Some(at),
            Some(first) => self.worst = self.worst.max(at.duration_since(first).as_secs_f64() - self.received),
        }
        self.received += seconds;
    }

    fn underrun(&self) -> f64 {
        self.worst.max(0.0)
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
    /// A streamed reply: upstream's TTFP, continuity and stream lifecycle count it.
    streamed: bool,
    continuity: Continuity,
    ended: bool,
}

impl UtteranceMeter {
    /// An utterance submitted now; `streamed` when its audio goes out as it is made.
    pub(crate) fn start(metrics: &Metrics, transport: Transport, streamed: bool) -> UtteranceMeter {
        metrics.utterances[transport as usize].fetch_add(1, Ordering::Relaxed);
        UtteranceMeter {
            transport,
            submitted: Instant::now(),
            first_audio: false,
            audio_seconds: 0.0,
            streamed,
            continuity: Continuity::default(),
            ended: false,
        }
    }

    pub(crate) fn audio(&mut self, metrics: &Metrics, bytes: usize, sample_rate: u32) {
        if bytes == 0 {
            return;
        }
        let now = Instant::now();
        if !self.first_audio {
            self.first_audio = true;
            let elapsed = now.duration_since(self.submitted).as_secs_f64();
            metrics.ttfa.observe(elapsed);
            if let (Some(upstream), true) = (&metrics.vllm_omni, self.streamed) {
                upstream.ttfp.observe(elapsed);
            }
        }
        let seconds = bytes as f64 / 2.0 / f64::from(sample_rate.max(1));
        self.continuity.chunk(now, seconds);
        self.audio_seconds += seconds;
        let t = self.transport as usize;
        metrics.audio_bytes[t].fetch_add(bytes as u64, Ordering::Relaxed);
        metrics.audio_micros[t].fetch_add((seconds * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// The engine finished the utterance.
    pub(crate) fn finished(&mut self, metrics: &Metrics) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let rtf = (self.audio_seconds > 0.0).then(|| self.submitted.elapsed().as_secs_f64() / self.audio_seconds);
        if let Some(rtf) = rtf {
            metrics.rtf.observe(rtf);
        }
        let Some(upstream) = &metrics.vllm_omni else { return };
        if let Some(rtf) = rtf {
            upstream.rtf.observe(rtf);
        }
        if self.streamed {
            upstream.completed.fetch_add(1, Ordering::Relaxed);
            let underrun = self.continuity.underrun();
            upstream.underrun.observe(underrun);
            if underrun <= CONTINUITY_THRESHOLD_S {
                upstream.continuity_ok.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The utterance ended before its end: counted once, for a stream, by `reason`.
    pub(crate) fn aborted(&mut self, metrics: &Metrics, reason: Abort) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if let (Some(upstream), true) = (&metrics.vllm_omni, self.streamed) {
            upstream.aborted[reason as usize].fetch_add(1, Ordering::Relaxed);
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
        self.render_labelled(out, name, help, "");
    }

    /// The histogram with `labels` (`a="x",b="y"`, or empty) on every sample.
    fn render_labelled(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let (open, braced) = match labels {
            "" => (String::new(), String::new()),
            labels => (format!("{labels},"), format!("{{{labels}}}")),
        };
        let mut cumulative = 0;
        for (bound, n) in self.bounds.iter().zip(&state.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{open}le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{open}le=\"+Inf\"}} {}", state.count);
        let _ = writeln!(out, "{name}_sum{braced} {}\n{name}_count{braced} {}", state.sum, state.count);
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

fn gauge_f64(out: &mut String, name: &str, help: &str, value: f64) {
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
        let mut meter = UtteranceMeter::start(&metrics, Transport::Http, false);
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
            streams: speechstream_core::capacity::StreamTiming {
                chunks: 9,
                underruns: 1,
                lateness,
                refused: 4,
                delayed: 2,
            },
            usage: 0.625,
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
            "speechstream_capacity_usage 0.625",
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
            "speechstream_admission_delayed_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    // Issue 34: upstream vLLM-Omni's speech streaming families, only when asked for; streams
    // count in TTFP, continuity and the lifecycle counters, whole replies only in the RTF.
    #[test]
    fn vllm_omni_families_under_the_switch() {
        let plain = Metrics::default();
        assert!(!plain.render(&EngineLoad::default()).contains("vllm_omni:"));
        let metrics = Metrics::default().with_vllm_omni("hibari");
        let mut stream = UtteranceMeter::start(&metrics, Transport::WebSocket, true);
        stream.audio(&metrics, 4_800, 24_000);
        stream.audio(&metrics, 4_800, 24_000);
        stream.finished(&metrics);
        stream.aborted(&metrics, Abort::Closed);
        let mut whole = UtteranceMeter::start(&metrics, Transport::Http, false);
        whole.audio(&metrics, 48_000, 24_000);
        whole.finished(&metrics);
        for reason in [Abort::Cancelled, Abort::Error, Abort::Error] {
            UtteranceMeter::start(&metrics, Transport::Http, true).aborted(&metrics, reason);
        }
        UtteranceMeter::start(&metrics, Transport::Http, false).aborted(&metrics, Abort::Closed);
        let text = metrics.render(&EngineLoad::default());
        let labels = "model_name=\"hibari\",stage=\"0\",replica=\"0\"";
        for line in [
            format!("vllm_omni:audio_ttfp_s_count{{{labels}}} 1"),
            format!("vllm_omni:audio_ttfp_s_bucket{{{labels},le=\"+Inf\"}} 1"),
            format!("vllm_omni:audio_rtf_count{{{labels}}} 2"),
            format!("vllm_omni:audio_underrun_s_count{{{labels}}} 1"),
            format!("vllm_omni:audio_continuity_ok_total{{{labels},threshold_ms=\"100\"}} 1"),
            "vllm_omni:speech_stream_completed_total{model_name=\"hibari\"} 1".to_owned(),
            "vllm_omni:speech_stream_aborted_total{model_name=\"hibari\",reason=\"cancelled\"} 1".to_owned(),
            "vllm_omni:speech_stream_aborted_total{model_name=\"hibari\",reason=\"closed\"} 0".to_owned(),
            "vllm_omni:speech_stream_aborted_total{model_name=\"hibari\",reason=\"error\"} 2".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    // Upstream's underrun: a player that starts at the first chunk starves while the next is late.
    #[test]
    fn underrun_is_the_worst_deficit_after_the_first_chunk() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + std::time::Duration::from_secs_f64(s);
        let mut c = Continuity::default();
        // 0.02 s of audio at 0.1 s, the next at 2.0 s: starved 1.88 s.
        c.chunk(at(0.1), 0.02);
        c.chunk(at(2.0), 0.02);
        assert!((c.underrun() - 1.88).abs() < 1e-9, "{}", c.underrun());
        // Chunks ahead of playback: no underrun.
        let mut c = Continuity::default();
        for (time, seconds) in [(0.0, 1.0), (0.5, 1.0), (1.9, 1.0)] {
            c.chunk(at(time), seconds);
        }
        assert_eq!(c.underrun(), 0.0);
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
