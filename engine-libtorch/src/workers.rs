//! The engine's workers: N threads, each a `Scheduler` with its own requests, all computing on
//! one copy of the voices' weights; the submit side that spreads requests over them and admits
//! or refuses streams (against the device too, where they share one: `SharedDevice`); the
//! counters `/metrics` reads.
//!
//! Sharing the weights: every family's voices are `Sync` ([`crate::family::VoiceModel`]): read-only
//! once loaded, with per-segment state in each request's segment and per-thread scratch in
//! thread-locals; libtorch's ops may read one tensor from several threads at once (its
//! reference counts are atomic), which is how PyTorch serves one module from many threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use speechstream_core::capacity::{Histogram, Overloaded, StreamTiming};
use speechstream_core::engine::{
    EngineCapabilities, EngineEvent, EngineEventKind, EngineLoad, EventSink, RequestId, SynthesisRequest, TrySendError,
};

use crate::family::{Family, Streaming};
use crate::options::EngineOptions;
use crate::pacing::{self, ChunkSizes, Costs, Outlook, Pacing, Step};
use crate::scheduler::{self, Command, Scheduler, Submission, Voices};
use crate::stats::{Admission, AdmissionMode, Listener, WorkerStats, CHARS_PER_SECOND, LATENESS_BUCKETS};

/// Milliseconds from `now` to `t`, negative when `t` has passed.
fn signed_ms(t: Instant, now: Instant) -> f64 {
    match t.checked_duration_since(now) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(now - t).as_secs_f64() * 1e3,
    }
}

/// A family's costs before its worker published any (its first stream is taken whatever they
/// say: a worker with no stream takes one).
const INITIAL_COSTS: pacing::Costs =
    pacing::Costs { per_audio_second: 1.0, per_first_second: 1.0, per_char: 0.1, per_opening: 0.1 };

/// The new stream [`Pool::usage`] asks admission about: a typical reply's sentence (~90
/// characters, ~6 s of speech).
const PROBE_TEXT: &str = "Thanks for calling. I can help you with that today, so let me look up your account for you.";
/// The most [`Pool::usage`] says while a new stream would still be taken: 1 means refused.
const USAGE_WITH_ROOM: f64 = 0.99;

/// Seconds the refusal tells a client to wait before trying again.
const RETRY_AFTER_SECONDS: u32 = pacing::RETRY_AFTER.as_secs() as u32;

struct Worker {
    commands: mpsc::Sender<Command>,
    stats: Arc<WorkerStats>,
    thread: Option<JoinHandle<()>>,
}

/// The workers and the submit side.
pub(crate) struct Pool {
    workers: Vec<Worker>,
    admission: Arc<Admission>,
    pacing: Pacing,
    /// Each family's chunk sizes in seconds ([`Voices::chunk_seconds`]).
    sizes: Vec<ChunkSizes>,
    /// Where the search for the least busy worker starts (turned at each request).
    turn: AtomicU64,
    /// What the engine serves: which family a request goes to (each costs its own).
    capabilities: EngineCapabilities,
    /// The voices' families (how each one's audio comes, as the workers' warm-up found it).
    families: Vec<Arc<dyn Family>>,
    /// The family of each of `capabilities.hosted` ([`Voices::routes`]).
    routes: Vec<usize>,
    /// The device the workers share, where they share one ([`SharedDevice`]).
    device: Option<SharedDevice>,
}

/// A device the workers share (a GPU, or [`EngineOptions::simulated_device`]): each worker's
/// costs are its own, measured on its own rounds, but together they get only what the device
/// computes for all of them. So a stream is admitted only where, besides its worker, the device
/// keeps every deadline of every worker's streams, each step costed there at
/// [`SharedDevice::scale`] of its worker's cost.
struct SharedDevice {
    /// How many workers' worth the device computes at once (at least 1, at most the workers),
    /// measured at start-up ([`probe_device`]).
    parallel: f64,
    /// Admissions one at a time, so that each sees the others' steps.
    admitting: std::sync::Mutex<()>,
}

impl SharedDevice {
    /// The share of a worker's cost of a step that the device spends on it, with `busy`
    /// workers' worth computing lately (the sum of their busy shares): `1 / max(busy,
    /// parallel)`. Fewer workers busy than the device runs at once compute at their own
    /// speed, and the device could take `parallel` of them: a step holds it `1 / parallel` of
    /// its cost. More than that share it, each slowed by the others, which its costs (measured
    /// on its own rounds) already hold: the device's time is split `busy` ways. So the
    /// device's speed follows the machine's as each worker's costs do.
    fn scale(&self, busy: f64) -> f64 {
        1.0 / busy.max(self.parallel).max(1.0)
    }
}

/// Where the workers share a device ([`SharedDevice`]): the least delay of a new stream's
/// first audio at which both its worker (`admitted`, its steps; `delay`, the least delay it
/// found) and the device (`union`, every worker's steps costed there) keep every deadline, up
/// to `bound`; `steps(delay, out)` appends the new stream's steps at its worker's costs, which
/// `scale` turns into the device's. `None` where no delay fits both.
fn device_delay(
    union: &[Step],
    scale: f64,
    now: Instant,
    bound: Duration,
    delay: Duration,
    admitted: &[Step],
    steps: &impl Fn(Duration, &mut Vec<Step>),
) -> Option<Duration> {
    let scaled = |d: Duration, out: &mut Vec<Step>| {
        let from = out.len();
        steps(d, out);
        for s in &mut out[from..] {
            s.work *= scale;
        }
    };
    let utilization = pacing::ADMISSION_UTILIZATION;
    let on_device = pacing::least_delay(union, now, utilization, bound, scaled).ok()?;
    // Each fits at its own least delay: the later of the two must fit the other as well.
    let fits = |base: &[Step], at: Duration, new: &dyn Fn(Duration, &mut Vec<Step>)| {
        pacing::least_delay(base, now, utilization, Duration::ZERO, |d, out| new(at + d, out)).is_ok()
    };
    if on_device <= delay {
        fits(union, delay, &scaled).then_some(delay)
    } else {
        fits(admitted, on_device, steps).then_some(on_device)
    }
}

/// How many workers' worth a shared device computes at once ([`SharedDevice::parallel`]): for
/// each family, the first worker measures its default voice alone ([`Command::Probe`]), then
/// every worker at once; the audio they computed over the time until the last was done, against
/// the one's alone. The least over the families (1 where none measured).
fn probe_device(workers: &[Worker], families: usize) -> SharedDevice {
    // audio seconds per second of `on` measuring at once
    let speed = |on: &[Worker], family: usize| {
        let (tx, rx) = mpsc::channel();
        let sent = Instant::now();
        let asked = on.iter().filter(|w| w.commands.send(Command::Probe(family, tx.clone())).is_ok()).count();
        drop(tx);
        let (mut audio, mut done) = (0.0, sent);
        for (seconds, at) in rx.iter().take(asked) {
            audio += seconds;
            done = done.max(at);
        }
        let elapsed = done.duration_since(sent).as_secs_f64();
        (audio > 0.0 && elapsed > 0.0).then(|| audio / elapsed)
    };
    let measured: Vec<Option<f64>> = (0..families)
        .map(|family| match (speed(&workers[..1], family), speed(workers, family)) {
            (Some(one), Some(all)) => Some((all / one).clamp(1.0, workers.len() as f64)),
            _ => None,
        })
        .collect();
    let parallel = measured.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    let parallel = if parallel.is_finite() { parallel } else { 1.0 };
    tracing::info!(
        workers = workers.len(),
        per_family = ?measured,
        parallel,
        "the workers share one device: admission costs streams at how many workers' worth it computes at once"
    );
    SharedDevice { parallel, admitting: std::sync::Mutex::new(()) }
}

/// The default worker count: the CPUs this process may run on (its affinity mask, and a cgroup
/// quota where one is set), one worker each.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Pool {
    /// Starts `count` workers on the shared voices and waits until each is warm.
    pub fn start(
        count: usize,
        voices: Arc<Voices>,
        capabilities: &EngineCapabilities,
        options: &EngineOptions,
    ) -> Result<Pool, String> {
        let families = voices.families.iter().map(|f| f.family.clone()).collect();
        let sizes = voices.chunk_seconds(options.chunk_frames());
        let routes = voices.routes.clone();
        let admission = Arc::new(Admission::new(options.admission, options.max_streams));
        // On a shared device each worker warms up alone (its first figures its own), then they
        // measure how many workers' worth the device computes at once.
        let shared = (options.device != tch::Device::Cpu || options.simulated_device)
            && count > 1
            && options.warm_up
            && options.admission != AdmissionMode::Off;
        let device_lock = options.simulated_device.then(|| Arc::new(scheduler::DeviceTurns::default()));
        let warm_turn = Arc::new(std::sync::Mutex::new(()));
        let mut workers = Vec::new();
        let mut warm = Vec::new();
        for n in 0..count.max(1) {
            let stats = Arc::new(WorkerStats::new());
            let (commands, receiver) = mpsc::channel();
            let mut scheduler = Scheduler::new(
                voices.clone(),
                capabilities.clone(),
                options,
                receiver,
                stats.clone(),
                admission.clone(),
                device_lock.clone(),
            );
            // Unset, libtorch would give every worker all the cores: split them instead.
            let threads = options.threads.or_else(|| {
                let share = (default_workers() / count.max(1)).max(1);
                (count > 1).then_some(share as i32)
            });
            let (warm_tx, warm_rx) = mpsc::channel();
            let warm_up = options.warm_up;
            let warm_turn = shared.then(|| warm_turn.clone());
            let thread = std::thread::Builder::new()
                .name(format!("engine-worker-{n}"))
                .spawn(move || {
                    // OpenMP's thread count is per calling thread: set it where the work runs
                    // (one libtorch thread per worker by default, so N workers use N cores).
                    if let Some(threads) = threads {
                        tch::set_num_threads(threads);
                    }
                    if warm_up {
                        let _alone = warm_turn.as_ref().map(|t| t.lock().unwrap_or_else(|p| p.into_inner()));
                        let started = Instant::now();
                        scheduler.warm_up();
                        tracing::debug!(worker = n, s = started.elapsed().as_secs_f64(), "warm");
                    }
                    let _ = warm_tx.send(());
                    scheduler.run();
                })
                .map_err(|e| format!("cannot start engine worker {n}: {e}"))?;
            warm.push(warm_rx);
            workers.push(Worker { commands, stats, thread: Some(thread) });
        }
        // Ready to serve only once warm: the first request's latency is then the steady one.
        for rx in warm {
            rx.recv().map_err(|_| "an engine worker failed while warming up".to_owned())?;
        }
        let device = shared.then(|| probe_device(&workers, voices.families.len()));
        Ok(Pool {
            workers,
            admission,
            pacing: options.pacing,
            sizes,
            turn: AtomicU64::new(0),
            capabilities: capabilities.clone(),
            families,
            routes,
            device,
        })
    }

    pub fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        let submitted = Instant::now();
        let pending: Vec<f64> =
            self.workers.iter().map(|w| w.stats.pending_us.load(Ordering::Relaxed) as f64).collect();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) as usize;
        let least = pacing::least_pending(&pending, start);
        // A listener still playing this connection's last stream hears this one after it.
        let listener = self.admission.listener(id.connection, submitted);
        let plays_after = match (request.stream, listener) {
            (true, Listener::Busy(until)) => Some(until),
            _ => None,
        };
        let (index, first_delay, refusal) = if request.stream {
            // (One family alone hosts none.)
            let family = match self.capabilities.route(&request) {
                Some(route) => self.routes.get(route).copied().unwrap_or(usize::MAX),
                None if self.capabilities.hosted.is_empty() => 0,
                None => usize::MAX,
            };
            match self.admit_stream(id, &request.text, family, submitted, listener, &pending, start) {
                Some((index, delay)) => (index, delay, None),
                None => {
                    self.admission.refused.fetch_add(1, Ordering::Relaxed);
                    self.admission.note_refusal(id.connection, submitted);
                    (least, Duration::ZERO, Some(Overloaded { retry_after_seconds: RETRY_AFTER_SECONDS }))
                }
            }
        } else {
            (least, Duration::ZERO, None)
        };
        let admitted_stream = request.stream && refusal.is_none();
        // Refused at once, from the caller's thread; through a worker only if the sink is full.
        let sink = match refusal.as_ref() {
            Some(&refusal) => match sink.try_send(EngineEvent { id, kind: EngineEventKind::Failed(refusal.into()) }) {
                Ok(()) | Err(TrySendError::Closed) => return,
                Err(TrySendError::Full(_)) => sink,
            },
            None => sink,
        };
        let worker = &self.workers[index];
        let owed_us =
            if refusal.is_some() { 0 } else { (request.text.chars().count() as f64 / CHARS_PER_SECOND * 1e6) as i64 };
        worker.stats.pending_us.fetch_add(owed_us, Ordering::Relaxed);
        worker.stats.queued.fetch_add(1, Ordering::Relaxed);
        if admitted_stream {
            worker.stats.streams.fetch_add(1, Ordering::Relaxed);
        }
        let submission =
            Submission { id, request, sink, submitted, plays_after, first_delay, admitted_stream, owed_us, refusal };
        if worker.commands.send(Command::Submit(Box::new(submission))).is_err() {
            // Only after the worker thread died (a panic in libtorch): nothing can answer.
            worker.stats.queued.fetch_sub(1, Ordering::Relaxed);
            worker.stats.pending_us.fetch_sub(owed_us, Ordering::Relaxed);
            if admitted_stream {
                worker.stats.streams.fetch_sub(1, Ordering::Relaxed);
                self.admission.streams.fetch_sub(1, Ordering::Relaxed);
            }
            tracing::error!(request = %id, "the engine worker is not running");
        }
    }

    /// Counts one more stream in flight if admission allows it; returns the worker it goes to
    /// and how much later than the target its first audio is due: with admission on, the first
    /// by least pending audio (from `start`, as [`pacing::least_pending`]) that keeps every
    /// deadline of its streams with this one added ([`pacing::feasible`]), at the costs of its
    /// voice family (`family`, an index in the hosted families); where none does and its client is not known to
    /// listen in real time (`listener` not [`Listener::Free`]), the first that does with this
    /// one's first audio due later, by the least delay up to [`Pacing::max_first_delay`] (for
    /// a new connection, counted from its first try) ([`pacing::least_delay`]). Its steps are recorded there until the worker takes it.
    #[allow(clippy::too_many_arguments)]
    fn admit_stream(
        &self,
        id: RequestId,
        text: &str,
        family: usize,
        now: Instant,
        listener: Listener,
        pending: &[f64],
        start: usize,
    ) -> Option<(usize, Duration)> {
        let streams = &self.admission.streams;
        let cap = self.admission.max_streams.unwrap_or(u64::MAX);
        let mut n = streams.load(Ordering::Relaxed);
        loop {
            if n >= cap {
                return None;
            }
            match streams.compare_exchange_weak(n, n + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        if self.admission.mode == AdmissionMode::Off {
            return Some((pacing::least_pending(pending, start), Duration::ZERO));
        }
        let plays_after = match listener {
            Listener::Busy(until) => Some(until),
            Listener::Free | Listener::New(_) => None,
        };
        let count = self.workers.len();
        let mut order: Vec<usize> = (0..count).map(|k| (start + k) % count).collect();
        order.sort_by(|&a, &b| pending[a].total_cmp(&pending[b]));
        let horizon = now + pacing::ADMISSION_HORIZON;
        // (a request no family serves is refused by the worker: costed as the first family's)
        let family = if family < self.families.len() { family } else { 0 };
        // On time on any worker first; only then later (a client listening in real time is
        // refused at once instead: its first audio is due by the target, and a refusal lets it
        // go elsewhere).
        let mut bounds = match listener {
            Listener::Free => vec![Duration::ZERO],
            Listener::Busy(_) => vec![Duration::ZERO, self.pacing.max_first_delay()],
            // First audio by when its first try, if refused, was told to retry.
            Listener::New(first_try) => {
                vec![
                    Duration::ZERO,
                    self.pacing.max_first_delay().saturating_sub(now.saturating_duration_since(first_try)),
                ]
            }
        };
        // (a new connection whose offer has run out is judged once)
        bounds.dedup();
        // On a shared device: one admission at a time, against every worker's steps there.
        let _admitting = self.device.as_ref().map(|d| d.admitting.lock().unwrap_or_else(|p| p.into_inner()));
        let on_device = self.device.as_ref().map(|d| self.device_steps(d, now));
        for bound in bounds {
            for &index in &order {
                let mut demand = self.workers[index].stats.demand.lock().unwrap_or_else(|p| p.into_inner());
                let costs = demand.costs.get(family).copied().unwrap_or(INITIAL_COSTS);
                let outlook = self.outlook(text, family, now, plays_after, &costs);
                let steps = |delay: Duration, out: &mut Vec<Step>| {
                    outlook.clone().delayed(delay).steps(&costs, &self.sizes[family], horizon, out)
                };
                // A worker with no stream takes one whatever its estimates say: it makes nobody
                // late, and its work measures its speed again (a worker that refused everything
                // on a stale, pessimistic estimate would never learn otherwise). On a shared
                // device, only while nothing else runs there: its work would slow the others'.
                let device_idle = on_device.as_ref().is_none_or(|(_, union)| union.is_empty());
                if self.workers[index].stats.streams.load(Ordering::Relaxed) == 0
                    && demand.arrivals.is_empty()
                    && device_idle
                {
                    let mut new = Vec::new();
                    steps(Duration::ZERO, &mut new);
                    demand.arrivals.push((id, new));
                    return Some((index, Duration::ZERO));
                }
                let mut admitted: Vec<Step> = demand.steps.clone();
                admitted.extend(demand.arrivals.iter().flat_map(|(_, steps)| steps.iter().copied()));
                let found = pacing::least_delay(&admitted, now, pacing::ADMISSION_UTILIZATION, bound, steps);
                let found = match (found, &on_device) {
                    (Ok(delay), Some((scale, union))) => {
                        match device_delay(union, *scale, now, bound, delay, &admitted, &steps) {
                            Some(delay) => Ok(delay),
                            None => {
                                tracing::debug!(
                                    request = %id,
                                    worker = index,
                                    bound_ms = bound.as_secs_f64() * 1e3,
                                    device_steps = union.len(),
                                    device_work_ms = union.iter().map(|s| s.work).sum::<f64>() * 1e3,
                                    "admission: no room on the device"
                                );
                                continue;
                            }
                        }
                    }
                    (found, _) => found,
                };
                match found {
                    Ok(delay) => {
                        let mut new = Vec::new();
                        steps(delay, &mut new);
                        if let Some(first) = new.first() {
                            let key = (first.due, first.limit);
                            let before: f64 =
                                admitted.iter().chain(&new).filter(|s| (s.due, s.limit) <= key).map(|s| s.work).sum();
                            tracing::debug!(
                                request = %id,
                                worker = index,
                                steps = admitted.len() + new.len(),
                                delay_ms = delay.as_secs_f64() * 1e3,
                                first_work_ms = first.work * 1e3,
                                first_done_ms = before * 1e3,
                                per_audio_second_ms = costs.per_audio_second * 1e3,
                                per_first_second_ms = costs.per_first_second * 1e3,
                                per_char_us = costs.per_char * 1e6,
                                "admission: admitted"
                            );
                        }
                        demand.arrivals.push((id, new));
                        if delay > Duration::ZERO {
                            self.admission.delayed.fetch_add(1, Ordering::Relaxed);
                        }
                        return Some((index, delay));
                    }
                    Err((step, work)) => tracing::debug!(
                        request = %id,
                        worker = index,
                        bound_ms = bound.as_secs_f64() * 1e3,
                        steps = admitted.len(),
                        total_work_ms = admitted.iter().map(|s| s.work).sum::<f64>() * 1e3,
                        miss_due_ms = signed_ms(step.due, now),
                        miss_limit_ms = signed_ms(step.limit, now),
                        work_by_then_ms = work * 1e3,
                        per_audio_second_ms = costs.per_audio_second * 1e3,
                        per_first_second_ms = costs.per_first_second * 1e3,
                        per_char_us = costs.per_char * 1e6,
                        "admission: no room"
                    ),
                }
            }
        }
        streams.fetch_sub(1, Ordering::Relaxed);
        None
    }

    /// The share of a worker's costs a step takes of the shared `device` now
    /// ([`SharedDevice::scale`]), and every worker's steps (its streams' and those admitted to
    /// it not taken up yet) so costed there.
    fn device_steps(&self, device: &SharedDevice, now: Instant) -> (f64, Vec<Step>) {
        let busy: f64 = self.workers.iter().map(|w| w.stats.busy_share(now)).sum();
        let scale = device.scale(busy);
        let mut all = Vec::new();
        for worker in &self.workers {
            let demand = worker.stats.demand.lock().unwrap_or_else(|p| p.into_inner());
            let steps = demand.steps.iter().chain(demand.arrivals.iter().flat_map(|(_, steps)| steps.iter()));
            all.extend(steps.map(|s| Step { work: s.work * scale, ..*s }));
        }
        (scale, all)
    }

    /// What a new stream of `text` for `family` (an index in the hosted families; one no family
    /// serves is costed as the first's: the worker refuses it) owes from `now`, at `costs`.
    fn outlook(&self, text: &str, family: usize, now: Instant, plays_after: Option<Instant>, costs: &Costs) -> Outlook {
        let chars = text.chars().count();
        let family = if family < self.families.len() { family } else { 0 };
        let streaming = self.families.get(family).map_or(Streaming::Chunked, |f| f.streaming());
        // A family computing segments whole: its first segment is its first words, and its
        // first audio waits for it whole, or for its opening.
        match streaming {
            Streaming::WholeSegments { first_words, opening } => {
                let first = pacing::first_words_chars(text, first_words);
                let first_work = pacing::first_segment_work(costs, first, opening);
                // Its next segment is the rest of its first sentence.
                Outlook::new_for(now, &self.pacing, chars, first, plays_after, first_work)
                    .whole_segments(pacing::first_sentence_chars(text).saturating_sub(first))
                    .opening(opening)
            }
            Streaming::Chunked => {
                let first = pacing::first_sentence_chars(text);
                Outlook::new_for(now, &self.pacing, chars, first, plays_after, Duration::ZERO)
            }
        }
    }

    /// How full the pool is, from admission's view ([`EngineLoad::usage`]): 1 where a typical
    /// new stream ([`PROBE_TEXT`], in the first family, from a client waiting on its first
    /// audio) would be refused or delayed, or the stream cap is reached; otherwise, below 1,
    /// the larger of the share of the cap taken and the workers' mean use: each worker's larger
    /// of its share of time spent computing lately over [`pacing::ADMISSION_UTILIZATION`] (the
    /// share admission lets listeners' work take: the load as it goes on) and its
    /// [`pacing::demand`] (the share its streams' deadlines take now: a burst of first
    /// chunks). With admission off, the same without the refusal's 1.
    fn usage(&self, now: Instant) -> f64 {
        let streams = self.admission.streams.load(Ordering::Relaxed);
        let capped = match self.admission.max_streams {
            Some(cap) if streams >= cap => return 1.0,
            Some(cap) => streams as f64 / cap as f64,
            None => 0.0,
        };
        let horizon = now + pacing::ADMISSION_HORIZON;
        let (mut used_sum, mut room) = (0.0, false);
        for worker in &self.workers {
            let demand = worker.stats.demand.lock().unwrap_or_else(|p| p.into_inner());
            let mut steps: Vec<Step> = demand.steps.clone();
            steps.extend(demand.arrivals.iter().flat_map(|(_, steps)| steps.iter().copied()));
            let idle = worker.stats.streams.load(Ordering::Relaxed) == 0 && demand.arrivals.is_empty();
            if !room && self.admission.mode == AdmissionMode::Realtime {
                let costs = demand.costs.first().copied().unwrap_or(INITIAL_COSTS);
                let outlook = self.outlook(PROBE_TEXT, 0, now, None, &costs);
                let new = |delay: Duration, out: &mut Vec<Step>| {
                    outlook.clone().delayed(delay).steps(&costs, &self.sizes[0], horizon, out)
                };
                room = idle
                    || pacing::least_delay(&steps, now, pacing::ADMISSION_UTILIZATION, Duration::ZERO, new).is_ok();
            }
            drop(demand);
            // Admission keeps streams' work within its utilization: busy that much is full.
            let sustained = worker.stats.busy_share(now) / pacing::ADMISSION_UTILIZATION;
            let deadlines = pacing::demand(&mut steps, now, pacing::ADMISSION_UTILIZATION);
            used_sum += sustained.max(deadlines).min(1.0);
        }
        // On a shared device, the typical stream must fit there too (on the first worker).
        if let (true, Some(device), Some(first)) = (room, &self.device, self.workers.first()) {
            let (scale, union) = self.device_steps(device, now);
            let costs = first
                .stats
                .demand
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .costs
                .first()
                .copied()
                .unwrap_or(INITIAL_COSTS);
            let outlook = self.outlook(PROBE_TEXT, 0, now, None, &costs);
            let new = |delay: Duration, out: &mut Vec<Step>| {
                let from = out.len();
                outlook.clone().delayed(delay).steps(&costs, &self.sizes[0], horizon, out);
                for s in &mut out[from..] {
                    s.work *= scale;
                }
            };
            room = pacing::least_delay(&union, now, pacing::ADMISSION_UTILIZATION, Duration::ZERO, new).is_ok();
        }
        let mean = used_sum / self.workers.len().max(1) as f64;
        match self.admission.mode {
            AdmissionMode::Off => mean.max(capped).min(1.0),
            AdmissionMode::Realtime if !room => 1.0,
            AdmissionMode::Realtime => mean.max(capped).min(USAGE_WITH_ROOM),
        }
    }

    /// Why the pool computes nothing more: every worker's thread has ended (a panic in
    /// libtorch), so nothing submitted would be answered.
    pub fn failure(&self) -> Option<String> {
        let ended = self.workers.iter().filter(|w| w.thread.as_ref().is_none_or(|t| t.is_finished())).count();
        (ended == self.workers.len()).then(|| format!("all {ended} engine workers have stopped"))
    }

    /// Every worker drops the request if it has it (a request is on one worker, unknown to the
    /// others, which ignore the id).
    pub fn abort(&self, id: RequestId) {
        for worker in &self.workers {
            let _ = worker.commands.send(Command::Abort(id));
        }
    }

    pub fn load(&self) -> EngineLoad {
        let mut load = EngineLoad::default();
        let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
        let mut timing = StreamTiming { lateness: Histogram::new(LATENESS_BUCKETS), ..StreamTiming::default() };
        for worker in &self.workers {
            let w = worker.stats.load();
            load.queued += w.queued;
            load.running += w.running;
            load.workers.push(w);
            for (&size, &n) in worker.stats.batch_sizes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                *sizes.entry(size).or_default() += n;
            }
            let t = worker.stats.timing.lock().unwrap_or_else(|p| p.into_inner());
            timing.chunks += t.chunks;
            timing.underruns += t.underruns;
            timing.lateness.sum += t.lateness.sum;
            for (total, n) in timing.lateness.counts.iter_mut().zip(&t.lateness.counts) {
                *total += n;
            }
        }
        timing.refused = self.admission.refused.load(Ordering::Relaxed);
        timing.delayed = self.admission.delayed.load(Ordering::Relaxed);
        load.batch_sizes = sizes.into_iter().collect();
        load.streams = timing;
        load.usage = self.usage(Instant::now());
        load
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for worker in &self.workers {
            let _ = worker.commands.send(Command::Shutdown);
        }
        for worker in &mut self.workers {
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
