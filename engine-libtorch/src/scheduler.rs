//! One engine worker: a thread with its own requests, computing on the voices it shares with
//! the other workers ([`crate::workers`]).
//!
//! Each loop iteration (1) takes new requests and aborts, (2) delivers events held back for
//! slow consumers, (3) ends the requests out of text, and (4) runs one batch, the one
//! [`pacing::plan_batch`] picks by deadline ([`crate::pacing`]): the front end on one sentence
//! (at most `MAX_SENTENCE_CHARS`, so one client's text can't hold the thread between two looks
//! at the commands) and the prosody pass of the requests that need their next sentence,
//! batched per voice, or the next audio chunk of a batch of requests (one voice) in one decoder
//! pass, each sent at once. So the most urgent stream is served first, a new request waits at
//! most one batch, an abort takes effect before the next chunk, and a stream far ahead of its
//! playback waits.
//!
//! Slow consumers: events go out with `try_send`. When a consumer's queue is full the event is
//! kept and that request is skipped (not computed further) until a retry succeeds; the worker
//! never blocks on one client. At most one chunk (plus its words) is held per request.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use speechstream_core::capacity::Overloaded;
use speechstream_core::engine::{
    EngineCapabilities, EngineEvent, EngineEventKind, EventSink, Failure, RequestId, SynthesisRequest, TrySendError,
};

use crate::chunks::{self, sentence_ranges};
use crate::dsp::SAMPLE_RATE;
use crate::g2p::spoken::{Pronunciation, Pronunciations};
use crate::g2p::{FrontEnd, Reader, Sentence};
use crate::hibari::{Hibari, Prosody, SAMPLES_PER_FRAME};
use crate::kokoro::serve::{
    coarse_durations, split_first, KokoroVoiceModel, FIRST_SEGMENT_WORDS, KOKORO_DEFAULT_VOICE,
};
use crate::kokoro::voices::VoicePack;
use crate::noise::NoiseSource;
use crate::options::HibariOptions;
use crate::pacing::{self, Candidate, ChunkSizes, Costs, Delivery, Outlook, Pace, Pacing, Speed, Work};
use crate::stats::{Admission, AdmissionMode, WorkerStats, CHARS_PER_SECOND};
use crate::timing::{word_timings, Acoustics};

/// The phonemes ("hello.") every voice's network is warmed with at start.
const WARM_PHONEMES: &str = "həlˈO.";
/// A typical first segment of a Kokoro stream (six words: "The weather today is sunny with,"),
/// whose warm pass is admission's first measure of Kokoro's cost per phoneme character. A
/// 6-character input's fixed costs made it twice the real segments' (34 against 17-18 ms a
/// character on a Xeon with AMX), refusing streams the worker then served on time until real
/// segments refined it.
const KOKORO_MEASURE_PHONEMES: &str = "ðə wˈɛðəɹ tədˈA ɪz sˈʌni wɪð,";

/// How long to wait before retrying when every request is paused on a slow consumer.
const PAUSE_POLL: Duration = Duration::from_millis(3);
/// The protocol's speed range; the model's durations divide by speed, so any positive value works,
/// but outside this range speech stops being intelligible.
const SPEED_RANGE: (f64, f64) = (0.25, 4.0);
/// Most regular (not first) chunks decoded in one round on the CPU. There a batch saves only
/// ~15% (measured: 4 chunks of 80 frames 82 ms instead of 100), while a request arriving
/// mid-round waits for the whole round before its first audio; 16 chunks would be ~400 ms.
const CPU_ROUND: usize = 4;

pub(crate) enum Command {
    Submit(Box<Submission>),
    Abort(RequestId),
    Shutdown,
}

/// A request handed to a worker.
pub(crate) struct Submission {
    pub id: RequestId,
    pub request: SynthesisRequest,
    pub sink: Box<dyn EventSink>,
    pub submitted: Instant,
    /// Its listener is busy with the connection's earlier audio until then.
    pub plays_after: Option<Instant>,
    /// Admitted with its first audio due this much after the target.
    pub first_delay: Duration,
    /// Counted in the admission's streams (to be given back when the request is over).
    pub admitted_stream: bool,
    /// Microseconds of audio the submitter added to the worker's pending audio for it.
    pub owed_us: i64,
    /// Refused for lack of capacity: the job is born failed with this refusal.
    pub refusal: Option<Overloaded>,
}

/// A loaded voice: its weights and the front end of its accent.
pub(crate) struct VoiceModel {
    pub name: String,
    pub model: Model,
    pub front_end: Arc<FrontEnd>,
}

/// The voice families the workers serve, on the same rounds, deadlines and admission. (A few
/// voices, each loaded once: the size of a hibari voice inline is no matter.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Model {
    /// A hibari voice: prosody per sentence, then its audio decoded chunk by chunk.
    Hibari(Hibari),
    /// A Kokoro voice: each segment's audio from one pass ([`crate::kokoro::serve`]), then
    /// streamed in the same chunks.
    Kokoro(KokoroVoiceModel),
}

impl Model {
    /// `[0, ids..., 0]`: the phoneme ids with both boundary tokens.
    fn ids(&self, phonemes: &str) -> Vec<i64> {
        match self {
            Model::Hibari(model) => model.ids(phonemes),
            Model::Kokoro(voice) => {
                let mut ids = vec![0];
                ids.extend(voice.vocab.ids(phonemes));
                ids.push(0);
                ids
            }
        }
    }

    /// The token each phoneme character gives (`None` where the vocabulary has none).
    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        match self {
            Model::Hibari(model) => model.char_tokens(phonemes),
            Model::Kokoro(voice) => voice.vocab.char_tokens(phonemes),
        }
    }

    fn device(&self) -> tch::Device {
        match self {
            Model::Hibari(model) => model.device(),
            Model::Kokoro(voice) => voice.network.device(),
        }
    }
}

/// The sentence being streamed.
struct Current {
    source: Source,
    ranges: Vec<Range<usize>>,
    next: usize,
}

/// Where a sentence's chunks come from.
enum Source {
    /// hibari: decoded chunk by chunk from its prosody.
    Hibari { prosody: Prosody, noise: NoiseSource },
    /// Kokoro: the segment's audio, computed whole; its chunks are slices of it.
    Audio(Vec<f32>),
}

impl Source {
    /// Samples of the whole sentence.
    fn samples(&self) -> usize {
        match self {
            Source::Hibari { prosody, .. } => prosody.samples(),
            Source::Audio(audio) => audio.len(),
        }
    }
}

struct Job {
    id: RequestId,
    sink: Box<dyn EventSink>,
    voice: usize,
    speed: f32,
    seed: u64,
    word_timestamps: bool,
    /// The front end of the language it reads in.
    front_end: Reader,
    /// A Kokoro voice's style table (its own, or the mix the request named).
    style: Option<Arc<VoicePack>>,
    /// Sentences of the text not yet through the front end (done one per round, when needed).
    texts: VecDeque<String>,
    /// Where each of `texts` starts in the request's text (chars).
    text_starts: VecDeque<usize>,
    /// Where the text of `sentences` starts in the request's text (chars).
    text_base: usize,
    /// The request's pronunciations (over the server's).
    pronunciations: Pronunciations,
    /// Sentences (or clause chunks) phonemised, waiting for their prosody.
    sentences: VecDeque<Sentence>,
    /// Sentences started so far: the noise stream of the next one.
    started_sentences: u64,
    /// Samples of the utterance before the current sentence.
    offset: u64,
    current: Option<Current>,
    /// Events not delivered yet because the consumer's queue was full.
    pending: VecDeque<EngineEventKind>,
    /// Counted in `running` (its first prosody pass ran) rather than `queued`.
    running: bool,
    /// The last event (Finished or Failed) is in `pending`: remove once delivered.
    done: bool,
    /// The consumer is gone: drop at once.
    closed: bool,
    /// Its timeline against real-time playback (deadlines, lead, lateness).
    pace: Pace,
    /// Counted in the admission's streams and this worker's.
    admitted_stream: bool,
    /// Its share of the worker's pending audio, in microseconds.
    owed_us: i64,
    /// Characters in `texts` and `sentences`: the estimate of the audio not yet through prosody.
    chars_left: usize,
}

impl Job {
    /// Ready for compute: not paused on its consumer and not over.
    fn ready(&self) -> bool {
        self.pending.is_empty() && !self.done && !self.closed
    }

    /// Delivers held events in order; stops at the first the consumer can't take. Streamed
    /// audio is timed against its playback here, as it leaves.
    fn flush(&mut self, stats: &WorkerStats, admission: &Admission) -> bool {
        let mut delivered = false;
        while let Some(kind) = self.pending.pop_front() {
            let seconds = match &kind {
                EngineEventKind::Audio { pcm, .. } => Some(pcm.len() as f64 / 2.0 / f64::from(SAMPLE_RATE)),
                _ => None,
            };
            // A stream that played out: its listener is busy until it has heard it. Said before
            // the end goes out, so the client's next request finds it.
            if let (EngineEventKind::Finished, Some(at)) = (&kind, self.pace.played_out()) {
                admission.played_out(self.id.connection, at, Instant::now());
            }
            match self.sink.try_send(EngineEvent { id: self.id, kind }) {
                Ok(()) => {
                    delivered = true;
                    if let (Some(_), false, true) = (seconds, self.pace.started(), self.pace.streamed()) {
                        tracing::debug!(
                            request = %self.id,
                            after_ms = self.pace.submitted().elapsed().as_secs_f64() * 1e3,
                            "first audio"
                        );
                    }
                    if let Some(seconds) = seconds {
                        let delivery = self.pace.delivered(Instant::now(), seconds);
                        if let Delivery::Late(late) = delivery {
                            tracing::debug!(request = %self.id, late_ms = late * 1e3, "late chunk");
                        }
                        stats.record_delivery(delivery);
                    }
                }
                Err(TrySendError::Full(event)) => {
                    self.pending.push_front(event.kind);
                    break;
                }
                Err(TrySendError::Closed) => {
                    self.closed = true;
                    self.pending.clear();
                    break;
                }
            }
        }
        delivered
    }

    fn finish(&mut self, last: EngineEventKind) {
        self.pending.push_back(last);
        self.done = true;
        self.current = None;
        self.texts.clear();
        self.sentences.clear();
        self.chars_left = 0;
    }

    /// The audio it still owes: exact for the sentence being streamed, estimated from the
    /// characters for the rest.
    fn owed_seconds(&self) -> f64 {
        let current = self.current.as_ref().map_or(0, |c| c.ranges[c.next..].iter().map(|r| r.len()).sum::<usize>());
        (current * SAMPLES_PER_FRAME) as f64 / f64::from(SAMPLE_RATE) + self.chars_left as f64 / CHARS_PER_SECOND
    }

    /// Its remaining work, for admission ([`Outlook`]).
    fn outlook(&self, pacing: &Pacing) -> Outlook {
        let seconds = |r: &Range<usize>| (r.len() * SAMPLES_PER_FRAME) as f64 / f64::from(SAMPLE_RATE);
        let current = self.current.as_ref().map_or_else(Vec::new, |c| c.ranges[c.next..].iter().map(seconds).collect());
        let next_chars = match (self.sentences.front(), self.texts.front()) {
            (Some(s), _) => s.phonemes.chars().count(),
            (None, Some(t)) => t.chars().count(),
            (None, None) => 0,
        };
        self.pace.outlook(pacing, current, next_chars, self.chars_left)
    }

    /// Skips the next sentences with no phoneme the model knows, as the reference does.
    fn drop_unspeakable(&mut self, model: &Model) {
        while self.sentences.front().is_some_and(|s| model.ids(&s.phonemes).len() < 3) {
            if let Some(s) = self.sentences.pop_front() {
                self.chars_left = self.chars_left.saturating_sub(s.phonemes.chars().count());
            }
        }
    }

    /// Queues the word timings of `sentence`, starting at the job's offset: `char_tokens` maps
    /// its phoneme characters to tokens, `durations` are coarse frames per token.
    fn time_words(
        &mut self,
        acoustics: Acoustics,
        sentence: &Sentence,
        char_tokens: &[Option<usize>],
        durations: &[i64],
    ) {
        let words: Vec<(&str, Range<usize>, Option<usize>)> = sentence
            .words
            .iter()
            .map(|w| (w.text.as_str(), w.phonemes.clone(), Some(self.text_base + w.chars.start)))
            .collect();
        let timings = word_timings(acoustics, &words, &sentence.phonemes, char_tokens, durations, self.offset);
        if !timings.is_empty() {
            self.pending.push_back(EngineEventKind::Words(timings));
        }
    }

    /// Brings its share of the worker's pending audio up to date.
    fn update_owed(&mut self, stats: &WorkerStats) {
        let owed = (self.owed_seconds() * 1e6) as i64;
        stats.pending_us.fetch_add(owed - self.owed_us, Ordering::Relaxed);
        self.owed_us = owed;
    }
}

pub(crate) struct Scheduler {
    voices: Arc<Vec<VoiceModel>>,
    default_voice: usize,
    capabilities: EngineCapabilities,
    /// The chunk sizes in frames (`sizes` in seconds).
    frames: chunks::ChunkSizes<usize>,
    max_batch: usize,
    pacing: Pacing,
    commands: Receiver<Command>,
    stats: Arc<WorkerStats>,
    admission: Arc<Admission>,
    /// Audio per second of all its rounds (the real-time factor `/metrics` shows).
    speed: Speed,
    /// Audio per second of its chunk rounds (and of its rounds of first chunks), and characters
    /// per second of its prosody rounds: the costs admission models hibari's streams with.
    chunk_speed: Speed,
    first_speed: Speed,
    prosody_speed: Speed,
    /// Phoneme characters hibari's front end makes of a character of text (decaying totals:
    /// phonemes, text): its prosody is measured per phoneme character, admission counts text.
    phonemes_per_char: (f64, f64),
    /// Kokoro's own: phoneme characters per second of its segment rounds (the whole network),
    /// audio per second of the rounds that send a segment's chunks.
    kokoro_speed: Speed,
    kokoro_chunk_speed: Speed,
    sizes: ChunkSizes,
    jobs: Vec<Job>,
}

/// What one round did: chunks holding this many seconds of audio (utterances' first chunks
/// apart), or the front end and prosody of sentences of this many characters.
#[derive(Clone, Copy)]
enum Round {
    Chunks(f64),
    FirstChunks(f64),
    Prosody(usize),
    /// Kokoro segments of this many phoneme characters computed, holding this many seconds of
    /// audio.
    KokoroSegments(usize, f64),
    /// Kokoro chunks sent (slices of computed segments), holding this many seconds of audio.
    Kokoro(f64),
}

enum Wait {
    No,
    Block,
    For(Duration),
}

impl Scheduler {
    pub fn new(
        voices: Arc<Vec<VoiceModel>>,
        default_voice: usize,
        capabilities: EngineCapabilities,
        options: &HibariOptions,
        commands: Receiver<Command>,
        stats: Arc<WorkerStats>,
        admission: Arc<Admission>,
    ) -> Scheduler {
        Scheduler {
            voices,
            default_voice,
            capabilities,
            frames: options.chunk_frames(),
            max_batch: options.max_batch.max(1),
            pacing: options.pacing,
            commands,
            stats,
            admission,
            speed: Speed::new(1.0, 1.0),
            chunk_speed: Speed::new(1.0, 1.0),
            first_speed: Speed::new(1.0, 1.0),
            prosody_speed: Speed::new(1.0, 0.0),
            phonemes_per_char: (1.0, 1.0),
            kokoro_speed: Speed::new(1.0, 0.0),
            kokoro_chunk_speed: Speed::new(1.0, 0.0),
            sizes: options.chunk_sizes(),
            jobs: Vec::new(),
        }
    }

    /// Runs each voice once on a short sentence: libtorch's first passes allocate and pick
    /// kernels, which would otherwise land on the first request's time to first audio. With
    /// admission on, then streams a longer sentence of the default voice, warm, as this
    /// worker's first measure of its speed (what admission starts from; the work it does
    /// refines it).
    pub fn warm_up(&mut self) {
        let mut kokoro_warm = false;
        for voice in self.voices.iter() {
            let model = match &voice.model {
                Model::Hibari(model) => model,
                // One pass warms the network every Kokoro voice shares.
                Model::Kokoro(kokoro) if !kokoro_warm => {
                    kokoro_warm = true;
                    let ids = kokoro.vocab.ids(WARM_PHONEMES);
                    let _ = guarded(|| kokoro.network.infer(&ids, kokoro.pack.style(ids.len()), 1.0));
                    let _ = kokoro.american.sentences("Hello there.");
                    if self.admission.mode != AdmissionMode::Off {
                        // Warm, a pass over a first segment's worth is Kokoro's first measure of
                        // its cost per character (its real segments refine it).
                        let ids = kokoro.vocab.ids(KOKORO_MEASURE_PHONEMES);
                        let started = Instant::now();
                        let _ = guarded(|| kokoro.network.infer(&ids, kokoro.pack.style(ids.len()), 1.0));
                        let chars = KOKORO_MEASURE_PHONEMES.chars().count() as f64;
                        self.kokoro_speed = Speed::new(chars, started.elapsed().as_secs_f64());
                    }
                    continue;
                }
                Model::Kokoro(_) => continue,
            };
            let ids = model.ids(WARM_PHONEMES);
            let prosody = model.prosody(&ids, 1.0);
            let end = prosody.frames.min(self.frames.first);
            let _ = model.synthesize_chunk(&prosody, 0, end, &NoiseSource::new(0, 0));
            if end < prosody.frames {
                let _ = model.synthesize_chunk(&prosody, end, prosody.frames, &NoiseSource::new(0, 0));
            }
            let _ = voice.front_end.sentences("Hello there.");
        }
        if self.admission.mode == AdmissionMode::Off {
            return;
        }
        const TEXT: &str = "Hello there, this sentence measures how fast the voice runs on this worker.";
        let voice = &self.voices[self.default_voice];
        let Model::Hibari(model) = &voice.model else { return };
        // Three times: the first pass of these larger shapes still allocates; the faster of the
        // other two is measured (a moment's preemption on a busy host would otherwise set the
        // estimates a burst of new streams is admitted with).
        // (audio s, chunk s, chars, front end and prosody s: TEXT is one sentence, so the time to
        // its prosody is the front end's and the prosody pass's, and the rest its chunks')
        // (and the first chunk's audio s and time apart)
        let mut measured = (0.0, f64::MAX, 0.0, 0.0);
        let mut first = (0.0, 0.0);
        for pass in 0..3 {
            let started = Instant::now();
            let (mut samples, mut chars, mut prosody_s) = (0, 0, 0.0);
            let mut first_pass = (0.0, 0.0);
            for (index, sentence) in (0..).zip(voice.front_end.sentences(TEXT)) {
                let prosody = model.prosody(&model.ids(&sentence.phonemes), 1.0);
                chars += sentence.phonemes.chars().count();
                prosody_s = started.elapsed().as_secs_f64();
                let noise = NoiseSource::new(0, 0);
                let f = self.frames;
                for (k, r) in sentence_ranges(prosody.frames, index, f.first, f.chunk, f.max).into_iter().enumerate() {
                    let chunk_started = Instant::now();
                    let n = model.synthesize_chunk(&prosody, r.start, r.end, &noise).numel();
                    if index == 0 && k == 0 {
                        first_pass = (n as f64 / f64::from(SAMPLE_RATE), chunk_started.elapsed().as_secs_f64());
                    }
                    samples += n;
                }
            }
            let chunk_s = started.elapsed().as_secs_f64() - prosody_s;
            if pass > 0 && chunk_s + prosody_s < measured.1 + measured.3 {
                measured = (samples as f64 / f64::from(SAMPLE_RATE), chunk_s, chars as f64, prosody_s);
                first = first_pass;
            }
        }
        self.speed = Speed::new(measured.0, measured.1 + measured.3);
        self.chunk_speed = Speed::new(measured.0 - first.0, measured.1 - first.1);
        self.first_speed = Speed::new(first.0, first.1);
        self.prosody_speed = Speed::new(measured.2, measured.3);
        self.phonemes_per_char = (measured.2, TEXT.chars().count() as f64);
        self.stats.set_factor(self.speed.factor());
        self.publish_demand(Instant::now());
    }

    pub fn run(mut self) {
        // The round being measured: when it started and what it did. A round lasts until
        // the next one starts, so its cost includes the bookkeeping between batches and the
        // time the thread lost to others on its core: the speed admission reads is what this
        // worker really delivers. Waits for work are not counted.
        let mut round: Option<(Instant, Round)> = None;
        loop {
            let wait = if self.jobs.is_empty() { Wait::Block } else { Wait::No };
            if matches!(wait, Wait::Block) {
                self.measure(round.take());
            }
            if !self.take_commands(wait) {
                return;
            }
            let started = Instant::now();
            self.measure(round.take());
            let mut progress = false;
            for job in &mut self.jobs {
                progress |= job.flush(&self.stats, &self.admission);
            }
            progress |= self.finish_done();
            let (done, resume) = self.run_next(started);
            self.reap();
            self.publish_demand(Instant::now());
            if let Some(done) = done {
                round = Some((started, done));
                progress = true;
            }
            if !progress && !self.jobs.is_empty() {
                // Everyone is paused on a slow consumer or ahead of its playback: wait for a
                // command, the next retry, or the first stream to fall back within its lead.
                self.measure(round.take());
                let paused = self.jobs.iter().any(|j| !j.pending.is_empty());
                let until_resume = resume.map(|t| t.saturating_duration_since(Instant::now()));
                let timeout = match (paused, until_resume) {
                    (true, Some(d)) => d.min(PAUSE_POLL),
                    (true, None) => PAUSE_POLL,
                    (false, Some(d)) => d,
                    (false, None) => PAUSE_POLL,
                };
                if !self.take_commands(Wait::For(timeout)) {
                    return;
                }
            }
        }
    }

    /// Counts a finished round in the worker's speed and busy time.
    fn measure(&mut self, round: Option<(Instant, Round)>) {
        if let Some((started, done)) = round {
            let busy = started.elapsed().as_secs_f64();
            let audio = match done {
                Round::Chunks(audio) => {
                    self.chunk_speed.record(audio, busy);
                    audio
                }
                Round::FirstChunks(audio) => {
                    self.first_speed.record(audio, busy);
                    audio
                }
                Round::Prosody(chars) => {
                    self.prosody_speed.record(chars as f64, busy);
                    0.0
                }
                // Kokoro's rounds count in its own costs, not in hibari's.
                Round::KokoroSegments(chars, audio) => {
                    self.kokoro_speed.record(chars as f64, busy);
                    audio
                }
                Round::Kokoro(audio) => {
                    self.kokoro_chunk_speed.record(audio, busy);
                    0.0
                }
            };
            self.speed.record(audio, busy);
            self.stats.record_work(busy, self.speed.factor());
        }
    }

    /// What each voice family's work costs on this worker ([`Costs`]): hibari's, Kokoro's.
    fn costs(&self) -> (Costs, Costs) {
        let per = |speed: &Speed| 1.0 / speed.factor().max(1e-9);
        let hibari = Costs {
            per_audio_second: per(&self.chunk_speed),
            per_first_second: per(&self.first_speed),
            per_char: per(&self.prosody_speed) * self.phonemes_per_char.0 / self.phonemes_per_char.1.max(1.0),
        };
        let kokoro = Costs {
            per_audio_second: per(&self.kokoro_chunk_speed),
            per_first_second: per(&self.kokoro_chunk_speed),
            per_char: per(&self.kokoro_speed),
        };
        (hibari, kokoro)
    }

    /// Publishes what its streams owe within admission's horizon, and its costs.
    fn publish_demand(&self, now: Instant) {
        if self.admission.mode == AdmissionMode::Off {
            return;
        }
        let (costs, kokoro) = self.costs();
        let horizon = now + pacing::ADMISSION_HORIZON;
        let mut steps = Vec::new();
        // A stream paused on its consumer owes nothing until the consumer reads.
        for job in self.jobs.iter().filter(|j| j.admitted_stream && j.ready()) {
            match self.voices[job.voice].model {
                Model::Kokoro(_) => {
                    // Each segment whole, the one after next known once through the front end.
                    let then = job.sentences.get(1).map_or(0, |s| s.phonemes.chars().count());
                    job.outlook(&self.pacing).whole_segments(then).steps(&kokoro, &self.sizes, horizon, &mut steps);
                }
                Model::Hibari(_) => job.outlook(&self.pacing).steps(&costs, &self.sizes, horizon, &mut steps),
            }
        }
        let mut demand = self.stats.demand.lock().unwrap_or_else(|p| p.into_inner());
        demand.steps = steps;
        demand.costs = costs;
        demand.kokoro = kokoro;
    }

    /// Handles queued commands, first waiting as told; false once the engine is shutting down.
    fn take_commands(&mut self, wait: Wait) -> bool {
        let first = match wait {
            Wait::No => None,
            Wait::Block => match self.commands.recv() {
                Ok(command) => Some(command),
                Err(_) => return false,
            },
            Wait::For(timeout) => match self.commands.recv_timeout(timeout) {
                Ok(command) => Some(command),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return false,
            },
        };
        let mut next = first;
        loop {
            let command = match next.take() {
                Some(command) => command,
                None => match self.commands.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => return false,
                },
            };
            match command {
                Command::Submit(submission) => {
                    if submission.admitted_stream {
                        // Its steps as admitted count as this worker's until the next publication.
                        let mut demand = self.stats.demand.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(k) = demand.arrivals.iter().position(|(id, _)| *id == submission.id) {
                            let (_, steps) = demand.arrivals.swap_remove(k);
                            demand.steps.extend(steps);
                        }
                    }
                    let mut job = self.admit(*submission);
                    job.update_owed(&self.stats);
                    self.jobs.push(job);
                }
                Command::Abort(id) => {
                    if self.jobs.iter().any(|j| j.id == id) {
                        self.admission.listener_stopped(id.connection, Instant::now());
                    }
                    // No more events for an aborted request: the session has moved on.
                    for job in self.jobs.iter_mut().filter(|j| j.id == id) {
                        job.closed = true;
                    }
                    self.reap();
                }
                Command::Shutdown => return false,
            }
        }
    }

    /// A job for a new request; one that can't be served is born done, holding its `Failed`.
    fn admit(&self, submission: Submission) -> Job {
        let Submission { id, request, sink, submitted, plays_after, first_delay, admitted_stream, owed_us, refusal } =
            submission;
        let mut job = Job {
            id,
            sink,
            voice: self.default_voice,
            speed: 1.0,
            seed: request.seed.map_or_else(random_seed, |s| s as u64),
            word_timestamps: request.output.words(),
            front_end: Reader::English(self.voices[self.default_voice].front_end.clone()),
            style: None,
            texts: VecDeque::new(),
            text_starts: VecDeque::new(),
            text_base: 0,
            pronunciations: Pronunciations::new(),
            sentences: VecDeque::new(),
            started_sentences: 0,
            offset: 0,
            current: None,
            pending: VecDeque::new(),
            running: false,
            done: false,
            closed: false,
            pace: Pace::new(submitted, request.stream).plays_after(plays_after).first_delay(first_delay),
            admitted_stream,
            owed_us,
            chars_left: 0,
        };
        match refusal.map_or_else(|| self.check(&request).map_err(Failure::Engine), |r| Err(Failure::Overloaded(r))) {
            Ok((voice, style)) => {
                job.voice = voice;
                let speed = if request.speed.is_finite() { request.speed } else { 1.0 };
                job.speed = speed.clamp(SPEED_RANGE.0, SPEED_RANGE.1) as f32;
                if let Model::Kokoro(kokoro) = &self.voices[voice].model {
                    match kokoro.reader(request.language.as_deref(), &request.text) {
                        Ok(reader) => job.front_end = reader,
                        Err(message) => {
                            job.finish(EngineEventKind::Failed(Failure::Engine(message)));
                            return job;
                        }
                    }
                    job.style = Some(style.unwrap_or_else(|| kokoro.pack.clone()));
                    // Its first audio waits for its whole first segment: due that much later.
                    let chars = pacing::first_words_chars(&request.text, FIRST_SEGMENT_WORDS);
                    let work = self.costs().1.per_char * chars as f64;
                    job.pace = job.pace.clone().first_work(Duration::from_secs_f64(work.clamp(0.0, 3600.0)));
                } else {
                    job.front_end = Reader::English(self.voices[voice].front_end.clone());
                }
                let front_end = job.front_end.clone();
                match pronunciations(&request.pronunciations, &self.voices[voice].model) {
                    Ok(p) => job.pronunciations = p,
                    Err(message) => {
                        job.finish(EngineEventKind::Failed(Failure::Engine(message)));
                        return job;
                    }
                }
                let text = request.text.as_str();
                let (mut counted, mut chars) = (0usize, 0usize);
                for piece in front_end.split_sentences(text) {
                    let at = piece.as_ptr() as usize - text.as_ptr() as usize;
                    chars += text[counted..at].chars().count();
                    counted = at;
                    job.texts.push_back(piece.to_owned());
                    job.text_starts.push_back(chars);
                }
                job.chars_left = job.texts.iter().map(|t| t.chars().count()).sum();
            }
            Err(failure) => job.finish(EngineEventKind::Failed(failure)),
        }
        job
    }

    /// What the voices can't do is refused by the core's rules (the session has already refused
    /// it; this covers callers of the engine that skip the session); returns the voice's index
    /// (a family's default voice for a request naming only its model; a mix's first voice)
    /// and, for a mix of Kokoro voices, its style table.
    fn check(&self, request: &SynthesisRequest) -> Result<(usize, Option<Arc<VoicePack>>), String> {
        self.capabilities.check(request)?;
        let voice = self.capabilities.resolve_voice(request.voice.as_deref())?;
        let index = |name: &str| self.voices.iter().position(|v| v.name == name);
        if let Some(parts) = voice.and_then(|name| self.capabilities.mix(name)) {
            let mut packs = Vec::new();
            for (name, weight) in &parts {
                match index(name).map(|i| &self.voices[i].model) {
                    Some(Model::Kokoro(kokoro)) => packs.push((kokoro.pack.as_ref(), *weight)),
                    _ => return Err(format!("voice '{name}' cannot be mixed")),
                }
            }
            let first = index(parts[0].0).unwrap_or(self.default_voice);
            return Ok((first, Some(Arc::new(VoicePack::mix(&packs)?))));
        }
        let family_default = || {
            // No voice named: the default voice of the family whose model the request names
            // (hibari's `heart`, Kokoro's `af_heart` when present, else its first voice).
            let family = self.capabilities.hosted.get(self.capabilities.route(request)?)?;
            if family.voice(&self.voices[self.default_voice].name).is_some() {
                return Some(self.default_voice);
            }
            let default = family.voice(KOKORO_DEFAULT_VOICE).or(family.voices.first())?;
            index(&default.id)
        };
        Ok((voice.and_then(index).or_else(family_default).unwrap_or(self.default_voice), None))
    }

    /// Ends the jobs with no sentence left (`Finished`).
    fn finish_done(&mut self) -> bool {
        let mut progress = false;
        for job in &mut self.jobs {
            if !job.ready() || job.current.is_some() {
                continue;
            }
            job.drop_unspeakable(&self.voices[job.voice].model);
            if job.sentences.is_empty() && job.texts.is_empty() {
                job.finish(EngineEventKind::Finished);
                job.flush(&self.stats, &self.admission);
                progress = true;
            }
        }
        progress
    }

    /// Plans the most urgent batch ([`pacing::plan_batch`]) and runs it; returns what it did
    /// (None if nothing ran), and when the first job waiting on its lead may run
    /// again.
    fn run_next(&mut self, now: Instant) -> (Option<Round>, Option<Instant>) {
        let mut resume: Option<Instant> = None;
        let mut candidates = Vec::new();
        for (index, job) in self.jobs.iter().enumerate() {
            if !job.ready() {
                continue;
            }
            if let Some(at) = job.pace.waits_until(now, &self.pacing) {
                resume = Some(resume.map_or(at, |r| r.min(at)));
                continue;
            }
            let work = match &job.current {
                None => Work::Prosody,
                Some(c) if job.started_sentences == 1 && c.next == 0 => Work::FirstChunk,
                Some(_) => Work::Chunk,
            };
            candidates.push(Candidate { index, voice: job.voice, work, urgency: job.pace.urgency(&self.pacing) });
        }
        let cpu_round = match candidates.first().map(|c| self.voices[c.voice].model.device()) {
            Some(tch::Device::Cpu) => CPU_ROUND,
            _ => self.max_batch,
        };
        // On the CPU, prosody batches are bounded like chunk rounds: a batch is not preempted,
        // and 16 sentences' encoders would hold up streams that are due.
        let max_batch = if cpu_round < self.max_batch { cpu_round } else { self.max_batch };
        let (work, batch) = pacing::plan_batch(&candidates, max_batch, cpu_round);
        let done = match work {
            None => return (None, resume),
            Some(Work::Prosody) => self.start_sentences(&batch),
            Some(Work::FirstChunk) => match self.step(&batch) {
                Round::Chunks(audio) => Round::FirstChunks(audio),
                other => other,
            },
            Some(Work::Chunk) => self.step(&batch),
        };
        tracing::trace!(
            work = ?work,
            batch = batch.len(),
            did = match done {
                Round::Chunks(s) | Round::FirstChunks(s) | Round::Kokoro(s) | Round::KokoroSegments(_, s) => s,
                Round::Prosody(c) => c as f64,
            },
            ms = now.elapsed().as_secs_f64() * 1e3,
            "round"
        );
        for &i in &batch {
            if let Some(job) = self.jobs.get_mut(i) {
                job.update_owed(&self.stats);
            }
        }
        (Some(done), resume)
    }

    /// Starts the next sentence of each job of `batch` (one voice): the front end on its next
    /// text if it has no sentence ready (one per job and round: a sentence is bounded, and the
    /// commands are read between rounds, so an abort drops the rest of the text unprepared),
    /// then one batched prosody pass for those that have one (a Kokoro voice: each one's next
    /// segment, [`Scheduler::kokoro_segments`]); returns what the round did.
    fn start_sentences(&mut self, batch: &[usize]) -> Round {
        let Some(&lead) = batch.first() else { return Round::Prosody(0) };
        let voice = self.jobs[lead].voice;
        let kokoro = matches!(self.voices[voice].model, Model::Kokoro(_));
        let mut ready = Vec::new();
        for &i in batch {
            let job = &mut self.jobs[i];
            if job.sentences.is_empty() {
                if let Some(text) = job.texts.pop_front() {
                    job.text_base = job.text_starts.pop_front().unwrap_or(0);
                    let mut sentences = job.front_end.sentences_with(&text, &job.pronunciations);
                    if kokoro && job.started_sentences == 0 && !sentences.is_empty() {
                        // Kokoro's first audio waits for a whole segment: make the first short.
                        let first = split_first(sentences.remove(0));
                        sentences.splice(0..0, first);
                    }
                    let phonemes: usize = sentences.iter().map(|s| s.phonemes.chars().count()).sum();
                    if !kokoro {
                        // (hibari's front end, over the last few hundred sentences)
                        let (p, t) = self.phonemes_per_char;
                        self.phonemes_per_char = (p * 0.995 + phonemes as f64, t * 0.995 + text.chars().count() as f64);
                    }
                    job.chars_left = job.chars_left.saturating_sub(text.chars().count()) + phonemes;
                    job.sentences.extend(sentences);
                }
            }
            job.drop_unspeakable(&self.voices[voice].model);
            if !job.sentences.is_empty() {
                ready.push(i);
            }
        }
        let chars =
            ready.iter().filter_map(|&i| self.jobs[i].sentences.front()).map(|s| s.phonemes.chars().count()).sum();
        if kokoro {
            // Its cost is the segments' inference, per character of their phonemes.
            let audio = self.kokoro_segments(voice, &ready);
            return Round::KokoroSegments(chars, audio);
        }
        if !ready.is_empty() {
            self.prosody(voice, &ready);
        }
        Round::Prosody(chars)
    }

    /// Computes the next segment of each job of `batch` (one Kokoro voice; each its own style):
    /// its whole audio in one pass, its word timings from the predicted durations, and its
    /// chunks, cut as hibari's are, to be sent by [`Scheduler::step`]; returns the seconds of
    /// audio computed.
    fn kokoro_segments(&mut self, voice: usize, batch: &[usize]) -> f64 {
        let voices = self.voices.clone();
        let Model::Kokoro(kokoro) = &voices[voice].model else { return 0.0 };
        let mut samples = 0;
        for &i in batch {
            let job = &mut self.jobs[i];
            let Some(sentence) = job.sentences.pop_front() else { continue };
            let ids = kokoro.vocab.ids(&sentence.phonemes);
            let style = job.style.clone().unwrap_or_else(|| kokoro.pack.clone());
            let speech = guarded(|| kokoro.network.infer(&ids, style.style(ids.len()), job.speed))
                .and_then(|r| r.map_err(|e| format!("kokoro: {e}")));
            let speech = match speech {
                Ok(speech) => speech,
                Err(message) => {
                    job.finish(EngineEventKind::Failed(message.into()));
                    job.flush(&self.stats, &self.admission);
                    continue;
                }
            };
            job.chars_left = job.chars_left.saturating_sub(sentence.phonemes.chars().count());
            if !job.running {
                job.running = true;
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                self.stats.running.fetch_add(1, Ordering::Relaxed);
            }
            if job.word_timestamps {
                let durations = coarse_durations(&speech.durations, speech.samples_per_frame);
                job.time_words(Acoustics::KOKORO, &sentence, &kokoro.vocab.char_tokens(&sentence.phonemes), &durations);
            }
            samples += speech.audio.len();
            let frames = speech.audio.len().div_ceil(SAMPLES_PER_FRAME);
            let f = self.frames;
            let ranges = sentence_ranges(frames, job.started_sentences, f.first, f.chunk, f.max);
            job.started_sentences += 1;
            if ranges.is_empty() {
                continue;
            }
            job.current = Some(Current { source: Source::Audio(speech.audio), ranges, next: 0 });
        }
        self.stats.record_batch(batch.len());
        samples as f64 / f64::from(SAMPLE_RATE)
    }

    fn prosody(&mut self, voice: usize, batch: &[usize]) {
        let voices = self.voices.clone();
        let Model::Hibari(model) = &voices[voice].model else { return };
        let sentences: Vec<Sentence> = batch.iter().filter_map(|&i| self.jobs[i].sentences.pop_front()).collect();
        let ids: Vec<Vec<i64>> = sentences.iter().map(|s| model.ids(&s.phonemes)).collect();
        let items: Vec<(&[i64], f32)> =
            ids.iter().zip(batch).map(|(ids, &i)| (ids.as_slice(), self.jobs[i].speed)).collect();
        // tch turns libtorch's C++ exceptions (e.g. out of device memory) into panics: fail the
        // requests concerned instead of losing the worker and every other request with it.
        let prosodies = match guarded(|| model.prosody_batch(&items)) {
            Ok(prosodies) => prosodies,
            Err(message) => {
                for &i in batch {
                    self.jobs[i].finish(EngineEventKind::Failed(message.clone().into()));
                    self.jobs[i].flush(&self.stats, &self.admission);
                }
                return;
            }
        };
        self.stats.record_batch(batch.len());
        for ((&i, sentence), prosody) in batch.iter().zip(sentences).zip(prosodies) {
            let job = &mut self.jobs[i];
            job.chars_left = job.chars_left.saturating_sub(sentence.phonemes.chars().count());
            if !job.running {
                job.running = true;
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                self.stats.running.fetch_add(1, Ordering::Relaxed);
            }
            if job.word_timestamps {
                job.time_words(
                    Acoustics::HIBARI,
                    &sentence,
                    &model.char_tokens(&sentence.phonemes),
                    &prosody.durations,
                );
            }
            let ranges = sentence_ranges(
                prosody.frames,
                job.started_sentences,
                self.frames.first,
                self.frames.chunk,
                self.frames.max,
            );
            let noise = NoiseSource::new(job.seed, job.started_sentences);
            job.started_sentences += 1;
            job.current = Some(Current { source: Source::Hibari { prosody, noise }, ranges, next: 0 });
        }
    }

    /// Computes and sends the next chunk of each job of `batch` (one voice) in one decoder pass
    /// ([`Hibari::synthesize_chunks`]; the DSP stays per request), or, for a Kokoro voice, sends
    /// the next slice of each one's segment; returns what the round did (the seconds of audio
    /// made).
    fn step(&mut self, batch: &[usize]) -> Round {
        let Some(&lead) = batch.first() else { return Round::Chunks(0.0) };
        let voices = self.voices.clone();
        let audio = match &voices[self.jobs[lead].voice].model {
            Model::Hibari(model) => self.decode(model, batch),
            Model::Kokoro(_) => Ok(batch
                .iter()
                .filter_map(|&i| self.jobs[i].current.as_ref())
                .map(|c| match &c.source {
                    Source::Audio(audio) => {
                        let r = &c.ranges[c.next];
                        let end = (r.end * SAMPLES_PER_FRAME).min(audio.len());
                        audio[(r.start * SAMPLES_PER_FRAME).min(end)..end].to_vec()
                    }
                    Source::Hibari { .. } => Vec::new(),
                })
                .collect()),
        };
        let seconds = self.send(batch, audio);
        match &voices[self.jobs[lead].voice].model {
            Model::Hibari(_) => Round::Chunks(seconds),
            Model::Kokoro(_) => Round::Kokoro(seconds),
        }
    }

    /// The next chunk of each job of `batch` (one hibari voice), in one decoder pass.
    fn decode(&self, model: &Hibari, batch: &[usize]) -> Result<Vec<Vec<f32>>, String> {
        let items: Vec<(&Prosody, usize, usize, &NoiseSource)> = batch
            .iter()
            .map(|&i| self.jobs[i].current.as_ref().expect("picked jobs have a sentence"))
            .filter_map(|c| match &c.source {
                Source::Hibari { prosody, noise } => {
                    Some((prosody, c.ranges[c.next].start, c.ranges[c.next].end, noise))
                }
                Source::Audio(_) => None,
            })
            .collect();
        let audio = guarded(|| {
            let chunks = model.synthesize_chunks(&items);
            chunks
                .iter()
                .map(|audio| Vec::<f32>::try_from(&audio.to_device(tch::Device::Cpu)))
                .collect::<Result<Vec<_>, _>>()
        });
        audio.and_then(|r| r.map_err(|e| format!("hibari: reading the audio failed: {e}")))
    }

    /// Sends each job of `batch` its next chunk (`audio`, in order) and moves it on, or fails
    /// them all with the error; returns the seconds of audio sent.
    fn send(&mut self, batch: &[usize], audio: Result<Vec<Vec<f32>>, String>) -> f64 {
        let audio = match audio {
            Ok(audio) => audio,
            Err(message) => {
                for &i in batch {
                    self.jobs[i].finish(EngineEventKind::Failed(message.clone().into()));
                    self.jobs[i].flush(&self.stats, &self.admission);
                }
                return 0.0;
            }
        };
        self.stats.record_batch(batch.len());
        let mut samples_made = 0;
        for (&i, samples) in batch.iter().zip(audio) {
            let job = &mut self.jobs[i];
            let Some(current) = job.current.as_mut() else { continue };
            current.next += 1;
            if current.next == current.ranges.len() {
                job.offset += current.source.samples() as u64;
                job.current = None;
            }
            samples_made += samples.len();
            job.pending.push_back(EngineEventKind::Audio { pcm: to_s16le(&samples), sample_rate: SAMPLE_RATE });
            job.flush(&self.stats, &self.admission);
        }
        samples_made as f64 / f64::from(SAMPLE_RATE)
    }

    /// Drops jobs that are over: aborted, consumer gone, or last event delivered.
    fn reap(&mut self) {
        let stats = &self.stats;
        let admission = &self.admission;
        self.jobs.retain(|job| {
            let keep = !(job.closed || (job.done && job.pending.is_empty()));
            if !keep {
                let counter = if job.running { &stats.running } else { &stats.queued };
                counter.fetch_sub(1, Ordering::Relaxed);
                stats.pending_us.fetch_sub(job.owed_us, Ordering::Relaxed);
                if job.admitted_stream {
                    stats.streams.fetch_sub(1, Ordering::Relaxed);
                    admission.streams.fetch_sub(1, Ordering::Relaxed);
                }
            }
            keep
        });
    }
}

/// Runs model code, turning a panic into an error message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown error");
        format!("hibari failed: {}", what.lines().next().unwrap_or(what))
    })
}

/// As hibari's `write_wav`: clip to [-1, 1], scale by 32767, truncate toward zero.
pub fn to_s16le(samples: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    for &x in samples {
        let x = if x.is_nan() { 0.0 } else { x.clamp(-1.0, 1.0) };
        out.extend_from_slice(&((x * 32767.0) as i16).to_le_bytes());
    }
    out
}

/// A seed for a request that gave none: different per request, unpredictable enough.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// A request's pronunciations, each given as phonemes checked against the voice's alphabet; a
/// bad entry is an error that names the word.
fn pronunciations(entries: &[(String, String)], model: &Model) -> Result<Pronunciations, String> {
    let mut out = Pronunciations::new();
    for (word, value) in entries {
        let p = Pronunciation::parse(value);
        check_pronunciation(word, &p, |s| model.char_tokens(s))?;
        out.insert(word, p);
    }
    Ok(out)
}

/// A pronunciation given as phonemes must be in the voice's alphabet.
pub(crate) fn check_pronunciation(
    word: &str,
    p: &Pronunciation,
    char_tokens: impl Fn(&str) -> Vec<Option<usize>>,
) -> Result<(), String> {
    if let Pronunciation::Phonemes(ps) = p {
        let bad: String = ps
            .chars()
            .zip(char_tokens(ps))
            .filter(|(c, t)| t.is_none() && !c.is_whitespace())
            .map(|(c, _)| c)
            .collect();
        if !bad.is_empty() {
            return Err(format!(
                "pronunciation of {word:?}: {bad:?} not in the voice's phoneme alphabet (give /phonemes/ in its \
                 alphabet, or a respelling without slashes)"
            ));
        }
    }
    Ok(())
}
