//! A deterministic engine with no model, for tests, benchmarks and trying the protocol.
//!
//! Each whitespace-separated word of the text becomes a tone: its pitch comes from a hash of the
//! word (200-800 Hz), its length from its character count (60 ms a character, then 40 ms of
//! silence, divided by the speed), with a short fade in and out. Audio is 24 kHz mono s16le,
//! streamed in fixed-size chunks at a configurable pace. Because it places the words itself it
//! knows their timings exactly (`Words` events), and it can stand in for a codec model: frames at
//! 12.5 Hz whose codes derive from the word being spoken. The same request always gives the same
//! bytes; a seed only adds a deterministic ±1 LSB dither.
//!
//! Each request runs on a thread of its own, checks its abort flag between chunks, and stops when
//! its sink reports the consumer gone. A short utterance with no pace to keep (the default
//! options) is computed in `submit` and handed over with [`EventSink::try_send`], so an event
//! queue with room for it has the whole utterance when `submit` returns.
//!
//! Enabled by the crate's `synthetic` feature.
//!
//! ```
//! use speechstream_core::engine::SynthesisRequest;
//! use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions, SAMPLE_RATE};
//!
//! let engine = SyntheticEngine::new(SyntheticOptions::default());
//! let (pcm, words) = engine.render(&SynthesisRequest::new("Hello big world"));
//! // 13 characters at 60 ms and three 40 ms gaps: 0.9 s of 16-bit samples.
//! assert_eq!(pcm.len(), 9 * SAMPLE_RATE as usize / 10 * 2);
//! assert_eq!(words[1].word, "big");
//! ```

use std::collections::HashMap;
use std::f64::consts::PI;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::capacity::Overloaded;
use crate::engine::{
    CodecFlags, CodecSpec, Engine, EngineCapabilities, EngineEvent, EngineEventKind, EngineLoad, EventSink, RequestId,
    SynthesisRequest, TrySendError, Voice, WordTiming,
};

/// The sample rate of its audio unless [`SyntheticOptions::sample_rate`] says otherwise.
pub const SAMPLE_RATE: u32 = 24_000;
/// Codes per codec frame.
pub const CODEBOOKS: u32 = 16;
/// Codes are in `0..CODEBOOK_SIZE`.
pub const CODEBOOK_SIZE: u32 = 2048;
/// Codec frames per second of audio.
pub const FRAME_RATE_HZ: f64 = 12.5;
/// The `decoder_id` of its `codec.start`.
pub const DECODER_ID: &str = "speechstream-synthetic";
/// The model name it serves unless [`SyntheticOptions::model_name`] says otherwise.
pub const DEFAULT_MODEL_NAME: &str = "speechstream-synthetic";

const MS_PER_CHAR: f64 = 60.0;
const GAP_MS: f64 = 40.0;
const FADE_MS: f64 = 5.0;
const AMPLITUDE: f64 = 0.25 * 32767.0;
/// The longest sleep between abort checks while pacing.
const PACE_SLICE: Duration = Duration::from_millis(20);
/// Samples per codec frame at `rate` (1920 at 24 kHz).
fn samples_per_frame(rate: u32) -> usize {
    (f64::from(rate) / FRAME_RATE_HZ).round().max(1.0) as usize
}

/// Voices the synthetic engine reports (Qwen3-TTS CustomVoice's speaker names); it sounds the
/// same for all of them.
const VOICES: &[&str] = &["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"];

/// How the synthetic engine paces and shapes its output; the defaults stream 80 ms chunks as
/// fast as they are computed.
#[derive(Clone, Debug)]
pub struct SyntheticOptions {
    /// The model name served (`/v1/models`, the config's `model` check).
    pub model_name: String,
    /// Audio per chunk, in milliseconds (also sets how many codec frames go in one event).
    pub chunk_ms: u32,
    /// Pause after each chunk.
    pub chunk_delay: Duration,
    /// Pace chunks so that producing N seconds of audio takes N × this many seconds
    /// (1.0 = real time). Applied in addition to `chunk_delay`.
    pub real_time_factor: Option<f64>,
    /// Make every utterance exactly this long, whatever its text (words keep their proportions).
    pub audio_seconds: Option<f64>,
    /// The sample rate of its audio (and of the audio its codec frames stand for).
    pub sample_rate: u32,
    /// The voices it reports (it sounds the same in all of them); empty: any name.
    pub voices: Vec<String>,
    /// Most streamed requests in flight at once: one past it is refused with
    /// [`Overloaded`], as the voice engine's admission refuses, and the engine's usage is the
    /// share of it taken. `None`: every request is taken (usage 0).
    pub max_streams: Option<u64>,
}

impl Default for SyntheticOptions {
    fn default() -> Self {
        SyntheticOptions {
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            chunk_ms: 80,
            chunk_delay: Duration::ZERO,
            real_time_factor: None,
            audio_seconds: None,
            sample_rate: SAMPLE_RATE,
            voices: VOICES.iter().map(|v| (*v).to_owned()).collect(),
            max_streams: None,
        }
    }
}

/// The synthetic engine; see the [module docs](self).
pub struct SyntheticEngine {
    capabilities: EngineCapabilities,
    options: Arc<SyntheticOptions>,
    /// Abort flags of the requests still running.
    running: Arc<Mutex<HashMap<RequestId, Arc<AtomicBool>>>>,
    threads: Arc<Threads>,
    renders: Arc<RenderCache>,
    /// Streamed requests in flight (each holds a [`StreamSlot`] until its work is done).
    streams: Arc<AtomicU64>,
    /// Streamed requests refused past [`SyntheticOptions::max_streams`].
    refused: AtomicU64,
}

/// One streamed request counted in flight until dropped.
struct StreamSlot(Arc<AtomicU64>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SyntheticEngine {
    /// An engine with these options; it starts no thread until a request comes.
    pub fn new(options: SyntheticOptions) -> SyntheticEngine {
        SyntheticEngine {
            // Any language, task type and instructions: it sounds the same whatever they say.
            capabilities: EngineCapabilities {
                voices: options.voices.iter().map(|v| Voice::new(v.as_str())).collect(),
                word_timestamps: true,
                codec: Some(CodecSpec {
                    codebooks: CODEBOOKS,
                    codebook_size: CODEBOOK_SIZE,
                    frame_rate_hz: FRAME_RATE_HZ,
                    sample_rate: options.sample_rate,
                    decoder_id: Some(DECODER_ID.to_owned()),
                }),
                ..EngineCapabilities::new(options.model_name.clone(), options.sample_rate)
            },
            options: Arc::new(options),
            running: Arc::new(Mutex::new(HashMap::new())),
            threads: Arc::new(Threads::default()),
            renders: Arc::new(RenderCache::default()),
            streams: Arc::new(AtomicU64::new(0)),
            refused: AtomicU64::new(0),
        }
    }

    /// Counts a streamed request in flight, unless [`SyntheticOptions::max_streams`] are
    /// already; `Ok(None)` for one not streamed.
    fn take_slot(&self, request: &SynthesisRequest) -> Result<Option<StreamSlot>, Overloaded> {
        if !request.stream {
            return Ok(None);
        }
        let cap = self.options.max_streams.unwrap_or(u64::MAX);
        self.streams
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < cap).then_some(n + 1))
            .map(|_| Some(StreamSlot(self.streams.clone())))
            .map_err(|_| Overloaded { retry_after_seconds: 1 })
    }

    /// The whole utterance a request produces, as its events would carry it: the PCM and the
    /// word timings (the streamed chunks concatenate to exactly this).
    pub fn render(&self, request: &SynthesisRequest) -> (Vec<u8>, Vec<WordTiming>) {
        let plan = Plan::new(request, &self.options);
        (plan.render(0..plan.total), plan.words())
    }

    /// Hand computed events over without blocking; the rest, if the consumer's queue fills,
    /// follow from a thread that waits for room (and stops if the request is aborted).
    fn deliver(&self, id: RequestId, mut events: std::collections::VecDeque<EngineEvent>, sink: Box<dyn EventSink>) {
        while let Some(event) = events.pop_front() {
            match sink.try_send(event) {
                Ok(()) => {}
                Err(TrySendError::Closed) => return,
                Err(TrySendError::Full(event)) => {
                    events.push_front(event);
                    break;
                }
            }
        }
        if events.is_empty() {
            return;
        }
        self.on_thread(id, move |aborted| {
            for event in events {
                if aborted.load(Ordering::Relaxed) || !sink.send(event) {
                    break;
                }
            }
        });
    }

    /// Run a request's work on a thread of its own, with an abort flag registered under its id
    /// for as long as it runs.
    fn on_thread(&self, id: RequestId, work: impl FnOnce(Arc<AtomicBool>) + Send + 'static) {
        let aborted = Arc::new(AtomicBool::new(false));
        if let Some(previous) = self.running().insert(id, aborted.clone()) {
            // A caller bug (ids are unique per connection and utterance); stop the older one.
            previous.store(true, Ordering::Relaxed);
        }
        let running = self.running.clone();
        let work = Box::new(move || {
            work(aborted.clone());
            let mut running = running.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if running.get(&id).is_some_and(|flag| Arc::ptr_eq(flag, &aborted)) {
                running.remove(&id);
            }
        });
        if let Err(e) = Threads::run(&self.threads, work) {
            self.running().remove(&id);
            tracing::error!(request = %id, error = %e, "could not start a synthesis thread");
            // The sink went into the closure that failed to spawn; nothing can be reported.
            // The session sees neither audio nor an end; its request is stuck until the
            // connection ends. Spawning only fails when the process is out of threads.
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Arc<AtomicBool>>> {
        self.running.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Engine for SyntheticEngine {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }

    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        let slot = match self.take_slot(&request) {
            Ok(slot) => slot,
            Err(refusal) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                let refused = EngineEvent { id, kind: EngineEventKind::Failed(refusal.into()) };
                return self.deliver(id, [refused].into(), sink);
            }
        };
        let unpaced = self.options.chunk_delay.is_zero() && self.options.real_time_factor.is_none();
        if unpaced && Plan::new(&request, &self.options).total <= CACHE_MAX_SAMPLES {
            // A short utterance with no pace to keep is computed right here and handed over
            // without waiting, as the reference's null engine does in its event loop: no thread
            // hop per utterance. What doesn't fit the consumer's queue goes on a thread.
            let collected = Arc::new(Mutex::new(Vec::new()));
            let job = Synthesis {
                id,
                aborted: Arc::new(AtomicBool::new(false)),
                sink: Box::new(Collect(collected.clone())),
                renders: self.renders.clone(),
            };
            job.run(&request, &self.options);
            let events = std::mem::take(&mut *collected.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            return self.deliver(id, events.into(), sink);
        }
        let options = self.options.clone();
        let renders = self.renders.clone();
        self.on_thread(id, move |aborted| {
            let job = Synthesis { id, aborted, sink, renders };
            job.run(&request, &options);
            drop(slot);
        });
    }

    fn abort(&self, id: RequestId) {
        if let Some(flag) = self.running().get(&id) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Every request starts at once on its own thread: nothing queues and nothing batches.
    fn load(&self) -> EngineLoad {
        let usage = match self.options.max_streams {
            Some(0) => 1.0,
            Some(cap) => (self.streams.load(Ordering::Relaxed) as f64 / cap as f64).min(1.0),
            None => 0.0,
        };
        let mut load = EngineLoad { running: self.running().len() as u64, usage, ..EngineLoad::default() };
        load.streams.refused = self.refused.load(Ordering::Relaxed);
        load
    }
}

type Work = Box<dyn FnOnce() + Send>;

/// Gathers a request's events when it is computed in `submit`.
struct Collect(Arc<Mutex<Vec<EngineEvent>>>);

impl EventSink for Collect {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(event);
        true
    }
}

/// Each request runs on a thread of its own (it may sleep to keep the pace, or block while
/// its client is slow, without holding up anyone else); finished threads wait a while for
/// the next request instead of exiting, so a busy server doesn't spawn one per utterance.
#[derive(Default)]
struct Threads {
    state: Mutex<ThreadsState>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct ThreadsState {
    queue: std::collections::VecDeque<Work>,
    idle: usize,
}

/// How long a finished thread waits for another request before it exits.
const THREAD_IDLE: Duration = Duration::from_secs(10);

impl Threads {
    fn lock(&self) -> std::sync::MutexGuard<'_, ThreadsState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn run(threads: &Arc<Threads>, work: Work) -> std::io::Result<()> {
        let mut state = threads.lock();
        if state.idle > state.queue.len() {
            state.queue.push_back(work);
            threads.wake.notify_one();
            return Ok(());
        }
        drop(state);
        let this = threads.clone();
        std::thread::Builder::new().name("synthetic".into()).spawn(move || this.serve(work)).map(drop)
    }

    fn serve(&self, mut work: Work) {
        loop {
            work();
            let mut state = self.lock();
            state.idle += 1;
            work = loop {
                if let Some(next) = state.queue.pop_front() {
                    state.idle -= 1;
                    break next;
                }
                let (guard, wait) =
                    self.wake.wait_timeout(state, THREAD_IDLE).unwrap_or_else(|poisoned| poisoned.into_inner());
                state = guard;
                if wait.timed_out() && state.queue.is_empty() {
                    state.idle -= 1;
                    return;
                }
            };
        }
    }
}

/// Recently rendered short utterances: the engine is deterministic, so a text it has just
/// spoken (as in a benchmark, or a client's retries) is copied instead of rendered again.
/// Long utterances are rendered chunk by chunk and never held whole.
#[derive(Default)]
struct RenderCache {
    entries: Mutex<std::collections::VecDeque<(RenderKey, Arc<Vec<u8>>)>>,
}

#[derive(PartialEq)]
struct RenderKey {
    text: String,
    speed: u64,
    seed: Option<i64>,
    max_new_tokens: Option<u64>,
}

/// Longest utterance kept whole (10 s of audio), and how many are kept.
const CACHE_MAX_SAMPLES: usize = 10 * SAMPLE_RATE as usize;
const CACHE_ENTRIES: usize = 32;

impl RenderCache {
    fn get(&self, request: &SynthesisRequest, plan: &Plan) -> Option<Arc<Vec<u8>>> {
        if plan.total > CACHE_MAX_SAMPLES {
            return None;
        }
        let key = RenderKey {
            text: request.text.clone(),
            speed: request.speed.to_bits(),
            seed: request.seed,
            max_new_tokens: request.max_new_tokens,
        };
        let lock = || self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, pcm)) = lock().iter().find(|(k, _)| *k == key) {
            return Some(pcm.clone());
        }
        let pcm = Arc::new(plan.render(0..plan.total));
        let mut entries = lock();
        if entries.len() == CACHE_ENTRIES {
            entries.pop_front();
        }
        entries.push_back((key, pcm.clone()));
        Some(pcm)
    }
}

struct Synthesis {
    renders: Arc<RenderCache>,
    id: RequestId,
    aborted: Arc<AtomicBool>,
    sink: Box<dyn EventSink>,
}

impl Synthesis {
    /// Produce the request's events; returns early (without `Finished`) once aborted or once
    /// the consumer is gone.
    fn run(&self, request: &SynthesisRequest, options: &SyntheticOptions) {
        let plan = Plan::new(request, options);
        let mut pace = Pace::new(options);
        let completed = if request.output.codec() {
            self.stream_codec(&plan, options, &mut pace)
        } else {
            let whole = self.renders.get(request, &plan);
            self.stream_audio(
                &plan,
                whole.as_ref().map(|pcm| pcm.as_slice()),
                request.output.words(),
                options,
                &mut pace,
            )
        };
        if completed {
            self.send(EngineEventKind::Finished);
        }
    }

    /// `whole` is the utterance already rendered, when it was short enough to cache.
    fn stream_audio(
        &self,
        plan: &Plan,
        whole: Option<&[u8]>,
        word_timestamps: bool,
        options: &SyntheticOptions,
        pace: &mut Pace,
    ) -> bool {
        let chunk = (plan.rate as usize * options.chunk_ms.max(1) as usize / 1000).max(1);
        let words = plan.words();
        let mut words_sent = 0;
        let mut position = 0;
        while position < plan.total {
            if self.is_aborted() {
                return false;
            }
            let end = (position + chunk).min(plan.total);
            let pcm = match whole {
                Some(whole) => whole[position * 2..end * 2].to_vec(),
                None => plan.render(position..end),
            };
            if !self.send(EngineEventKind::Audio { pcm, sample_rate: plan.rate }) {
                return false;
            }
            position = end;
            if word_timestamps {
                // Report each word once its tone has been sent in full.
                let spoken = plan.tones[words_sent..].iter().take_while(|tone| tone.end <= end).count();
                if spoken > 0 {
                    let batch = words[words_sent..words_sent + spoken].to_vec();
                    words_sent += spoken;
                    if !self.send(EngineEventKind::Words(batch)) {
                        return false;
                    }
                }
            }
            if !pace.wait(position, &self.aborted) {
                return false;
            }
        }
        if word_timestamps && words_sent < words.len() {
            return self.send(EngineEventKind::Words(words[words_sent..].to_vec()));
        }
        true
    }

    fn stream_codec(&self, plan: &Plan, options: &SyntheticOptions, pace: &mut Pace) -> bool {
        let frames = plan.total.div_ceil(samples_per_frame(plan.rate)).max(1);
        let per_event = ((options.chunk_ms.max(1) as f64 / 80.0).round() as usize).max(1);
        let mut frame = 0;
        while frame < frames {
            if self.is_aborted() {
                return false;
            }
            let end = (frame + per_event).min(frames);
            let codes = (frame..end).flat_map(|k| plan.codes(k)).collect();
            let flags = CodecFlags { eos: end == frames, ..CodecFlags::default() };
            if !self.send(EngineEventKind::Codec { codes, flags }) {
                return false;
            }
            frame = end;
            if !pace.wait(end * samples_per_frame(plan.rate), &self.aborted) {
                return false;
            }
        }
        true
    }

    fn send(&self, kind: EngineEventKind) -> bool {
        self.sink.send(EngineEvent { id: self.id, kind })
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }
}

/// Keeps the configured pace.
struct Pace {
    started: Instant,
    chunk_delay: Duration,
    real_time_factor: Option<f64>,
    rate: u32,
}

impl Pace {
    fn new(options: &SyntheticOptions) -> Pace {
        Pace {
            started: Instant::now(),
            chunk_delay: options.chunk_delay,
            real_time_factor: options.real_time_factor.filter(|f| f.is_finite() && *f > 0.0),
            rate: options.sample_rate.max(1),
        }
    }

    /// Wait after a chunk, `produced` samples into the utterance. False if aborted meanwhile.
    fn wait(&mut self, produced: usize, aborted: &AtomicBool) -> bool {
        let mut until = Instant::now() + self.chunk_delay;
        if let Some(factor) = self.real_time_factor {
            let audio = produced as f64 / f64::from(self.rate);
            let paced = self.started + Duration::from_secs_f64((audio * factor).min(1e9));
            until = until.max(paced + self.chunk_delay);
        }
        loop {
            if aborted.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(PACE_SLICE));
        }
    }
}

/// One word's tone, in samples from the start of the utterance.
struct Tone {
    word: String,
    start: usize,
    end: usize,
    hz: f64,
}

/// Where every word sits in an utterance; audio and codes are computed from it on demand.
struct Plan {
    tones: Vec<Tone>,
    total: usize,
    dither_seed: Option<u64>,
    /// Samples per second.
    rate: u32,
}

impl Plan {
    fn new(request: &SynthesisRequest, options: &SyntheticOptions) -> Plan {
        let speed = if request.speed.is_finite() && request.speed > 0.0 { request.speed } else { 1.0 };
        let rate = options.sample_rate.max(1);
        let samples_per_ms = rate as f64 / 1000.0;
        let words: Vec<&str> = request.text.split_whitespace().collect();
        let natural: f64 = words.iter().map(|w| (w.chars().count() as f64 * MS_PER_CHAR + GAP_MS) / speed).sum::<f64>()
            * samples_per_ms;
        // Every length is scaled by one factor so a fixed duration keeps the words' proportions.
        let scale = match options.audio_seconds {
            Some(seconds) if natural > 0.0 && seconds.is_finite() && seconds > 0.0 => seconds * rate as f64 / natural,
            _ => 1.0,
        };
        let mut tones = Vec::with_capacity(words.len());
        let mut cursor = 0.0_f64;
        for word in words {
            let chars = word.chars().count() as f64;
            let tone = chars * MS_PER_CHAR / speed * samples_per_ms * scale;
            let gap = GAP_MS / speed * samples_per_ms * scale;
            tones.push(Tone {
                word: word.to_owned(),
                start: cursor.round() as usize,
                end: (cursor + tone).round() as usize,
                hz: 200.0 + (fnv1a(word.as_bytes()) % 600) as f64,
            });
            cursor += tone + gap;
        }
        let mut total = cursor.round() as usize;
        if tones.is_empty() {
            if let Some(seconds) = options.audio_seconds.filter(|s| s.is_finite() && *s > 0.0) {
                total = (seconds * rate as f64).round() as usize;
            }
        }
        if let Some(tokens) = request.max_new_tokens {
            // Like a codec model, stop after max_new_tokens frames.
            let cap = usize::try_from(tokens).unwrap_or(usize::MAX).saturating_mul(samples_per_frame(rate));
            total = total.min(cap);
            tones.retain(|tone| tone.start < total);
            for tone in &mut tones {
                tone.end = tone.end.min(total);
            }
        }
        Plan { tones, total, dither_seed: request.seed.map(|seed| seed as u64), rate }
    }

    fn words(&self) -> Vec<WordTiming> {
        let ms = |sample: usize| (sample as f64 * 1000.0 / self.rate as f64).round() as i64;
        self.tones
            .iter()
            .map(|tone| WordTiming {
                word: tone.word.clone(),
                start_ms: ms(tone.start),
                end_ms: ms(tone.end),
                chars: None,
            })
            .collect()
    }

    /// s16le PCM for the samples in `range`.
    fn render(&self, range: Range<usize>) -> Vec<u8> {
        let mut pcm = Vec::with_capacity(range.len() * 2);
        let fade = FADE_MS * self.rate as f64 / 1000.0;
        let mut i = range.start;
        // Tones are in order and don't overlap: start at the first that ends after the range.
        let mut index = self.tones.partition_point(|tone| tone.end <= range.start);
        while i < range.end {
            let tone = self.tones.get(index).filter(|tone| tone.start <= i);
            // The run of samples up to the next tone boundary (or the range's end).
            let run_end = match (tone, self.tones.get(index)) {
                (Some(tone), _) => tone.end.min(range.end),
                (None, Some(next)) => next.start.min(range.end),
                (None, None) => range.end,
            };
            match tone {
                Some(tone) => {
                    // A rotating phasor instead of sin() per sample: one complex multiply each.
                    let step = 2.0 * PI * tone.hz / self.rate as f64;
                    let (mut im, mut re) = (step * (i - tone.start) as f64).sin_cos();
                    let (step_im, step_re) = step.sin_cos();
                    for j in i..run_end {
                        let t = (j - tone.start) as f64;
                        let left = (tone.end - j) as f64;
                        let envelope = (t / fade).min(left / fade).min(1.0);
                        self.push_sample(&mut pcm, j, AMPLITUDE * envelope * im);
                        (re, im) = (re * step_re - im * step_im, re * step_im + im * step_re);
                    }
                    index += 1;
                }
                None => (i..run_end).for_each(|j| self.push_sample(&mut pcm, j, 0.0)),
            }
            i = run_end;
        }
        pcm
    }

    fn push_sample(&self, pcm: &mut Vec<u8>, i: usize, mut value: f64) {
        if let Some(seed) = self.dither_seed {
            value += (splitmix64(seed ^ i as u64) % 3) as f64 - 1.0;
        }
        let sample = value.round().clamp(i16::MIN as f64, i16::MAX as f64) as i16;
        pcm.extend_from_slice(&sample.to_le_bytes());
    }

    /// The codes of codec frame `k`: derived from the word being spoken (or last spoken) then.
    fn codes(&self, k: usize) -> impl Iterator<Item = i32> + '_ {
        let sample = k * samples_per_frame(self.rate);
        let spoken = self.tones.partition_point(|tone| tone.start <= sample);
        let word_hash = match spoken.checked_sub(1) {
            Some(index) => fnv1a(self.tones[index].word.as_bytes()),
            None => 0,
        };
        (0..CODEBOOKS as u64).map(move |codebook| {
            let mixed = splitmix64(word_hash ^ (k as u64).rotate_left(20) ^ codebook);
            (mixed % CODEBOOK_SIZE as u64) as i32
        })
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::OutputKind;
    use std::sync::mpsc;

    fn request(text: &str) -> SynthesisRequest {
        SynthesisRequest { stream: true, ..SynthesisRequest::new(text) }
    }

    fn id() -> RequestId {
        RequestId { connection: 1, utterance: 0 }
    }

    struct Collect(mpsc::Sender<EngineEvent>);
    impl EventSink for Collect {
        fn send(&self, event: EngineEvent) -> bool {
            self.0.send(event).is_ok()
        }
    }

    fn run(engine: &SyntheticEngine, request: SynthesisRequest) -> Vec<EngineEventKind> {
        let (tx, rx) = mpsc::channel();
        engine.submit(id(), request, Box::new(Collect(tx)));
        let mut kinds = Vec::new();
        while let Ok(event) = rx.recv_timeout(Duration::from_secs(30)) {
            let end = matches!(event.kind, EngineEventKind::Finished | EngineEventKind::Failed(_));
            kinds.push(event.kind);
            if end {
                break;
            }
        }
        kinds
    }

    /// Takes `room` events without waiting, then reports Full; `send` always delivers.
    struct Narrow {
        tx: mpsc::Sender<EngineEvent>,
        room: std::sync::atomic::AtomicUsize,
        inline: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl EventSink for Narrow {
        fn send(&self, event: EngineEvent) -> bool {
            self.tx.send(event).is_ok()
        }
        fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
            if self.room.load(Ordering::Relaxed) == 0 {
                return Err(TrySendError::Full(event));
            }
            self.room.fetch_sub(1, Ordering::Relaxed);
            self.inline.fetch_add(1, Ordering::Relaxed);
            self.tx.send(event).map_err(|_| TrySendError::Closed)
        }
    }

    #[test]
    fn past_max_streams_a_stream_is_refused_and_usage_is_the_share_taken() {
        let options = SyntheticOptions {
            max_streams: Some(2),
            real_time_factor: Some(1.0),
            audio_seconds: Some(30.0),
            ..SyntheticOptions::default()
        };
        let engine = SyntheticEngine::new(options);
        assert_eq!(engine.load().usage, 0.0);
        let (tx, rx) = mpsc::channel();
        let ids: Vec<RequestId> = (0..3).map(|connection| RequestId { connection, utterance: 0 }).collect();
        engine.submit(ids[0], request("one"), Box::new(Collect(tx.clone())));
        assert_eq!(engine.load().usage, 0.5);
        engine.submit(ids[1], request("two"), Box::new(Collect(tx.clone())));
        assert_eq!(engine.load().usage, 1.0);
        engine.submit(ids[2], request("three"), Box::new(Collect(tx.clone())));
        let refused = rx.iter().find(|e| e.id == ids[2]).expect("an answer");
        assert!(
            matches!(refused.kind, EngineEventKind::Failed(ref f) if f.overloaded().is_some()),
            "{:?}",
            refused.kind
        );
        assert_eq!(engine.load().streams.refused, 1);
        // Not streamed: never refused, and not counted.
        let whole = SynthesisRequest { stream: false, ..request("four") };
        engine.submit(RequestId { connection: 9, utterance: 0 }, whole, Box::new(Collect(tx)));
        assert_eq!(engine.load().usage, 1.0);
        // A stream that ends gives its place back.
        engine.abort(ids[0]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while engine.load().usage > 0.5 {
            assert!(Instant::now() < deadline, "the aborted stream still counts");
            std::thread::sleep(Duration::from_millis(5));
        }
        engine.abort(ids[1]);
    }

    #[test]
    fn short_utterances_are_handed_over_in_submit_and_the_rest_follows_in_order() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let text = "Hello big world";
        let (whole, _) = engine.render(&request(text));
        for room in [0, 3, 1000] {
            let (tx, rx) = mpsc::channel();
            let inline = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let sink = Narrow { tx, room: room.into(), inline: inline.clone() };
            engine.submit(id(), request(text), Box::new(sink));
            // What fit was delivered before submit returned.
            let delivered_in_submit = inline.load(Ordering::Relaxed);
            assert_eq!(delivered_in_submit, room.min(13), "room {room}");
            let mut pcm = Vec::new();
            loop {
                let event = rx.recv_timeout(Duration::from_secs(30)).expect("an event");
                match event.kind {
                    EngineEventKind::Audio { pcm: chunk, .. } => pcm.extend(chunk),
                    EngineEventKind::Finished => break,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(pcm, whole, "room {room}");
        }
    }

    #[test]
    fn tones_match_the_sine_they_describe() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let plan = Plan::new(&request("Hello big world"), &engine.options);
        let pcm = plan.render(0..plan.total);
        // Rendered in uneven pieces, the same samples come out.
        let pieces: Vec<u8> =
            [0..1000, 1000..1001, 1001..7777, 7777..plan.total].into_iter().flat_map(|r| plan.render(r)).collect();
        assert_eq!(pieces, pcm);
        let fade = FADE_MS * SAMPLE_RATE as f64 / 1000.0;
        for (i, bytes) in pcm.chunks_exact(2).enumerate() {
            let got = i16::from_le_bytes([bytes[0], bytes[1]]);
            let want = plan.tones.iter().find(|t| t.start <= i && i < t.end).map_or(0.0, |t| {
                let x = (i - t.start) as f64;
                let envelope = (x / fade).min((t.end - i) as f64 / fade).min(1.0);
                AMPLITUDE * envelope * (2.0 * PI * t.hz * x / SAMPLE_RATE as f64).sin()
            });
            assert!((f64::from(got) - want).abs() <= 1.0, "sample {i}: {got} vs {want}");
        }
        assert!(pcm.chunks_exact(2).any(|b| i16::from_le_bytes([b[0], b[1]]).abs() > 5000), "audible");
    }

    #[test]
    fn word_lengths_follow_character_counts() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let (pcm, words) = engine.render(&request("Hello big world"));
        // 13 characters × 60 ms + 3 gaps × 40 ms = 900 ms.
        assert_eq!(pcm.len(), 900 * 24 * 2);
        assert_eq!(
            words,
            vec![
                WordTiming { word: "Hello".into(), start_ms: 0, end_ms: 300, chars: None },
                WordTiming { word: "big".into(), start_ms: 340, end_ms: 520, chars: None },
                WordTiming { word: "world".into(), start_ms: 560, end_ms: 860, chars: None },
            ]
        );
    }

    #[test]
    fn speed_and_fixed_duration_scale_the_audio() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let mut fast = request("Hello world");
        fast.speed = 2.0;
        assert_eq!(engine.render(&fast).0.len(), 340 * 24 * 2);
        let fixed = SyntheticEngine::new(SyntheticOptions { audio_seconds: Some(1.0), ..SyntheticOptions::default() });
        assert_eq!(fixed.render(&request("Hi")).0.len(), 24000 * 2);
        assert_eq!(fixed.render(&request("a much longer sentence")).0.len(), 24000 * 2);
    }

    #[test]
    fn another_rate_keeps_the_words_timing() {
        let options = SyntheticOptions { sample_rate: 22_050, voices: vec!["kestrel".into()], ..Default::default() };
        let engine = SyntheticEngine::new(options);
        assert_eq!(engine.capabilities().sample_rate, 22_050);
        assert_eq!(engine.capabilities().voices, [Voice::new("kestrel")]);
        let at_24k = SyntheticEngine::new(SyntheticOptions::default());
        let req = SynthesisRequest { stream: true, output: OutputKind::AudioAndWords, ..request("Hello world") };
        assert_eq!(engine.render(&req).1, at_24k.render(&req).1);
        assert_eq!(engine.render(&req).0.len(), 680 * 2 * 22_050 / 1000);
        let mut pcm = Vec::new();
        for kind in run(&engine, req.clone()) {
            if let EngineEventKind::Audio { pcm: chunk, sample_rate } = kind {
                assert_eq!(sample_rate, 22_050);
                pcm.extend(chunk);
            }
        }
        assert_eq!(pcm, engine.render(&req).0);
    }

    #[test]
    fn streamed_chunks_concatenate_to_the_rendered_audio() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let mut req = request("Deterministic tones for every word");
        req.output = OutputKind::AudioAndWords;
        req.seed = Some(42);
        let (expected_pcm, expected_words) = engine.render(&req);
        let events = run(&engine, req);
        let mut pcm = Vec::new();
        let mut words = Vec::new();
        for kind in &events {
            match kind {
                EngineEventKind::Audio { pcm: chunk, sample_rate } => {
                    assert_eq!(*sample_rate, SAMPLE_RATE);
                    assert!(chunk.len() <= 80 * 24 * 2);
                    pcm.extend_from_slice(chunk);
                }
                EngineEventKind::Words(batch) => words.extend(batch.iter().cloned()),
                EngineEventKind::Finished => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(events.last(), Some(&EngineEventKind::Finished));
        assert_eq!(pcm, expected_pcm);
        assert_eq!(words, expected_words);
        // Dither keeps it deterministic.
        assert_eq!(engine.render(&request_seeded(42)).0, engine.render(&request_seeded(42)).0);
        assert_ne!(engine.render(&request_seeded(42)).0, engine.render(&request_seeded(7)).0);
    }

    fn request_seeded(seed: i64) -> SynthesisRequest {
        let mut req = request("same text");
        req.seed = Some(seed);
        req
    }

    #[test]
    fn codec_frames_end_with_eos_and_stay_in_range() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let mut req = request("hello");
        req.output = OutputKind::CodecFrames;
        let events = run(&engine, req);
        let mut frames = 0;
        let mut eos_seen = 0;
        for kind in &events {
            if let EngineEventKind::Codec { codes, flags } = kind {
                assert_eq!(codes.len() % CODEBOOKS as usize, 0);
                assert!(codes.iter().all(|c| (0..CODEBOOK_SIZE as i32).contains(c)));
                frames += codes.len() / CODEBOOKS as usize;
                eos_seen += usize::from(flags.eos);
            }
        }
        // "hello": 340 ms -> ceil(8160 / 1920) = 5 frames.
        assert_eq!(frames, 5);
        assert_eq!(eos_seen, 1);
        assert!(matches!(&events[events.len() - 2], EngineEventKind::Codec { flags, .. } if flags.eos));
        assert_eq!(events.last(), Some(&EngineEventKind::Finished));
    }

    #[test]
    fn abort_stops_a_request_without_finishing_it() {
        let engine = SyntheticEngine::new(SyntheticOptions {
            chunk_delay: Duration::from_millis(20),
            ..SyntheticOptions::default()
        });
        let (tx, rx) = mpsc::channel();
        engine.submit(id(), request(&"word ".repeat(200)), Box::new(Collect(tx)));
        assert!(rx.recv_timeout(Duration::from_secs(30)).is_ok());
        engine.abort(id());
        let mut rest = Vec::new();
        while let Ok(event) = rx.recv_timeout(Duration::from_secs(30)) {
            rest.push(event.kind);
        }
        // The sender drops when the thread ends; it never said Finished.
        assert!(!rest.contains(&EngineEventKind::Finished));
        assert!(rest.len() < 10);
    }

    #[test]
    fn max_new_tokens_caps_the_length() {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let mut req = request("a fairly long sentence of several words");
        req.max_new_tokens = Some(2);
        let (pcm, words) = engine.render(&req);
        assert_eq!(pcm.len(), 2 * samples_per_frame(SAMPLE_RATE) * 2);
        assert!(words.iter().all(|w| w.end_ms <= 160));
    }
}
