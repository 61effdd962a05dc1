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
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use speechstream_core::capacity::Overloaded;
use speechstream_core::engine::{
    EngineCapabilities, EngineEvent, EngineEventKind, EventSink, Failure, RequestId, SynthesisRequest, TrySendError,
};

use crate::chunks::{self, opened_ranges};
use crate::family::{guarded, Family, Lead, Loaded, Segment, SegmentInput, Speeds, Streaming, Style, VoiceModel};
use crate::g2p::spoken::{Pronunciation, Pronunciations};
use crate::g2p::{Reader, Sentence};
use crate::options::EngineOptions;
use crate::pacing::{self, Candidate, ChunkSizes, Costs, Delivery, Outlook, Pace, Pacing, Speed, Work};
use crate::stats::{Admission, AdmissionMode, WorkerStats, CHARS_PER_SECOND};
use crate::timing::{word_timings, Acoustics};

/// How long to wait before retrying when every request is paused on a slow consumer.
const PAUSE_POLL: Duration = Duration::from_millis(3);
/// The protocol's speed range; the model's durations divide by speed, so any positive value works,
/// but outside this range speech stops being intelligible.
const SPEED_RANGE: (f64, f64) = (0.25, 4.0);
/// Most regular (not first) chunks decoded in one round on the CPU. There a batch saves only
/// ~15% (measured: 4 chunks of 80 frames 82 ms instead of 100), while a request arriving
/// mid-round waits for the whole round before its first audio; 16 chunks would be ~400 ms.
const CPU_ROUND: usize = 4;

/// How soon another stream's pass may be due for a first segment started now to count its
/// worker free (`SegmentInput::free`): its own round (Kokoro's network up to the generator,
/// ~50 ms on a Zen 4 core, ~80 capped) and admission's margin, with room to spare. A pass due
/// by then would be overdue when the segment's next round is picked, and go first, its
/// listener's silence running out meanwhile.
const FREE_WITHIN: Duration = Duration::from_millis(200);

pub(crate) enum Command {
    Submit(Box<Submission>),
    Abort(RequestId),
    /// Measure a family's default voice now, as at warm-up, and answer with the audio seconds
    /// computed (0 where nothing was measured) and when it was done: one worker alone, then
    /// every worker at once, on a shared device, for how many workers' worth it computes
    /// ([`crate::workers`]).
    Probe(usize, mpsc::Sender<(f64, Instant)>),
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

/// A loaded voice, of one of the families.
pub(crate) struct VoiceEntry {
    pub name: String,
    /// Its family's index in [`Voices::families`].
    pub family: usize,
    pub model: Arc<dyn VoiceModel>,
    /// The first voice (an index in [`Voices::voices`]) of those whose segments pass the
    /// network together with its own ([`VoiceModel::batch_key`]); its own index where none do.
    pub batch: usize,
}

/// A family the workers serve, and its default voice.
pub(crate) struct FamilyEntry {
    pub family: Arc<dyn Family>,
    /// The voice a request naming only its model gets (an index in [`Voices::voices`]).
    pub default_voice: usize,
}

/// Every voice of every family the engine loaded, as the workers share them.
pub(crate) struct Voices {
    pub voices: Vec<VoiceEntry>,
    /// In the order they were loaded.
    pub families: Vec<FamilyEntry>,
    /// The family of each of the engine's hosted capabilities (a request's route is an index
    /// here): a family hosts one, or one per sample rate of its voices.
    pub routes: Vec<usize>,
    /// The engine's default voice (its first family's).
    pub default_voice: usize,
}

impl Voices {
    /// The table of what the families loaded, in order.
    pub fn new(loaded: Vec<(Arc<dyn Family>, Loaded)>, routes: Vec<usize>) -> Result<Voices, String> {
        let mut voices = Vec::new();
        let mut families = Vec::new();
        for (index, (family, loaded)) in loaded.into_iter().enumerate() {
            let first = voices.len();
            for (declared, model) in loaded.voices {
                let key = model.batch_key();
                let batch = voices[first..]
                    .iter()
                    .position(|v: &VoiceEntry| key.is_some() && v.model.batch_key() == key)
                    .map_or(voices.len(), |k| first + k);
                voices.push(VoiceEntry { name: declared.id, family: index, model, batch });
            }
            let default_voice = voices[first..]
                .iter()
                .position(|v| v.name == loaded.default_voice)
                .map(|k| first + k)
                .ok_or_else(|| format!("{}: no voice {}", family.name(), loaded.default_voice))?;
            families.push(FamilyEntry { family, default_voice });
        }
        let default_voice = families.first().map(|f| f.default_voice).ok_or("no voices to serve")?;
        Ok(Voices { voices, families, routes, default_voice })
    }

    /// Each family's chunk sizes in seconds of audio (what admission models its streams with):
    /// `frames` of its default voice's frames ([`VoiceModel::samples_per_frame`]).
    pub fn chunk_seconds(&self, frames: chunks::ChunkSizes<usize>) -> Vec<ChunkSizes> {
        self.families
            .iter()
            .map(|f| {
                let seconds = frame_seconds(self.voices[f.default_voice].model.as_ref());
                frames.map(|n| n as f64 * seconds)
            })
            .collect()
    }

    /// The family that serves a request routed to `route` ([`EngineCapabilities::route`]):
    /// the only one for an engine that hosts none.
    pub fn family_of(&self, route: Option<usize>) -> Option<usize> {
        match route {
            Some(route) => self.routes.get(route).copied(),
            None => (self.families.len() == 1).then_some(0),
        }
    }
}

/// The segment being streamed.
struct Current {
    /// Its family's state.
    segment: Segment,
    ranges: Vec<Range<usize>>,
    next: usize,
    /// A segment started with only its opening computed ([`SegmentInput::early`]): its phoneme
    /// characters and the samples left, computed in the round of its next chunk (that round is
    /// measured as the segment's: its characters' cost is the two rounds').
    unfinished: Option<(usize, usize)>,
    /// A segment started with only its leading silence ([`Segment::opening`]): the samples its
    /// opening adds, computed in the round of its next chunk (measured as the segment's, with
    /// no characters), before `unfinished`'s round.
    opening: Option<usize>,
}

struct Job {
    id: RequestId,
    sink: Box<dyn EventSink>,
    voice: usize,
    /// Its voice's family (an index in [`Voices::families`]).
    family: usize,
    /// Seconds of one of its voice's frames.
    frame_seconds: f64,
    speed: f32,
    seed: u64,
    word_timestamps: bool,
    /// The front end of the language it reads in (`None` for a request born failed).
    front_end: Option<Reader>,
    /// The mix of voices the request named.
    style: Option<Style>,
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
    /// Where its segments so far leave it, as its family recuts the next ([`VoiceModel::recut`]).
    lead: Lead,
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
                EngineEventKind::Audio { pcm, sample_rate } => Some(pcm.len() as f64 / 2.0 / f64::from(*sample_rate)),
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

    /// Fails it with `message` at once (its sink gets the failure now).
    fn fail(&mut self, message: String, stats: &WorkerStats, admission: &Admission) {
        self.finish(EngineEventKind::Failed(message.into()));
        self.flush(stats, admission);
    }

    /// The audio it still owes: exact for the sentence being streamed, estimated from the
    /// characters for the rest.
    fn owed_seconds(&self) -> f64 {
        let current = self.current.as_ref().map_or(0, |c| c.ranges[c.next..].iter().map(|r| r.len()).sum::<usize>());
        current as f64 * self.frame_seconds + self.chars_left as f64 / CHARS_PER_SECOND
    }

    /// Its remaining work, for admission ([`Outlook`]).
    fn outlook(&self, pacing: &Pacing) -> Outlook {
        let seconds = |r: &Range<usize>| r.len() as f64 * self.frame_seconds;
        let current = self.current.as_ref().map_or_else(Vec::new, |c| c.ranges[c.next..].iter().map(seconds).collect());
        let next_chars = match (self.sentences.front(), self.texts.front()) {
            (Some(s), _) => s.phonemes.chars().count(),
            (None, Some(t)) => t.chars().count(),
            (None, None) => 0,
        };
        let unfinished = self.current.as_ref().and_then(|c| c.unfinished).map_or(0, |(chars, _)| chars);
        self.pace.outlook(pacing, current, next_chars, self.chars_left).unfinished(unfinished)
    }

    /// Skips the next sentences with no phoneme the model knows, as the reference does.
    fn drop_unspeakable(&mut self, model: &dyn VoiceModel) {
        while self.sentences.front().is_some_and(|s| !model.speakable(&s.phonemes)) {
            if let Some(s) = self.sentences.pop_front() {
                self.chars_left = self.chars_left.saturating_sub(s.phonemes.chars().count());
            }
        }
    }

    /// Queues the word timings of `sentence`, starting at the job's offset (samples at
    /// `sample_rate`): `char_tokens` maps its phoneme characters to tokens, `durations` are the
    /// family's frames per token ([`Acoustics::fine_per_frame`]).
    fn time_words(
        &mut self,
        acoustics: Acoustics,
        sample_rate: u32,
        sentence: &Sentence,
        char_tokens: &[Option<usize>],
        durations: &[i64],
    ) {
        let words: Vec<(&str, Range<usize>, Option<usize>)> = sentence
            .words
            .iter()
            .map(|w| (w.text.as_str(), w.phonemes.clone(), Some(self.text_base + w.chars.start)))
            .collect();
        // (word timings count samples at 24 kHz)
        let offset = self.offset * u64::from(crate::timing::SAMPLE_RATE) / u64::from(sample_rate.max(1));
        let timings = word_timings(acoustics, &words, &sentence.phonemes, char_tokens, durations, offset);
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
    voices: Arc<Voices>,
    capabilities: EngineCapabilities,
    /// The chunk sizes in frames (each stream's own in seconds: as many of its voice's frames).
    frames: chunks::ChunkSizes<usize>,
    max_batch: usize,
    pacing: Pacing,
    commands: Receiver<Command>,
    stats: Arc<WorkerStats>,
    admission: Arc<Admission>,
    /// Audio computed per second of all its rounds (the real-time factor `/metrics` shows).
    speed: Speed,
    /// What each family's work measured here (indexed as [`Voices::families`]): the speeds
    /// admission costs its streams with.
    speeds: Vec<Speeds>,
    jobs: Vec<Job>,
    /// The simulated device's turns ([`EngineOptions::simulated_device`]), shared by the workers.
    device: Option<Arc<DeviceTurns>>,
}

/// The simulated device ([`EngineOptions::simulated_device`]): one pass at a time, in the order
/// the workers asked (tickets), as a device's queue takes them: a worker waits for at most one
/// pass of each other worker, where a plain lock could let one worker's passes follow each other.
#[derive(Default)]
pub(crate) struct DeviceTurns {
    /// (next ticket, ticket being served)
    tickets: Mutex<(u64, u64)>,
    served: std::sync::Condvar,
}

/// A worker's turn on the simulated device, until dropped.
pub(crate) struct Turn<'a>(&'a DeviceTurns);

impl DeviceTurns {
    fn take(&self) -> Turn<'_> {
        let mut t = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        let mine = t.0;
        t.0 += 1;
        while t.1 != mine {
            t = self.served.wait(t).unwrap_or_else(|p| p.into_inner());
        }
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.tickets.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
        self.0.served.notify_all();
    }
}

/// What one round did, for one family: chunks sent holding this many seconds of audio
/// (utterances' first chunks apart), or segments of this many phoneme characters started
/// (the front end and the segment pass); and the seconds of audio it computed.
#[derive(Clone, Copy, Debug)]
enum Round {
    Chunks {
        family: usize,
        sent: f64,
        computed: f64,
    },
    FirstChunks {
        family: usize,
        sent: f64,
        computed: f64,
    },
    /// `opened`: first segments of which only the opening was computed.
    Segments {
        family: usize,
        chars: usize,
        computed: f64,
        opened: usize,
    },
}

enum Wait {
    No,
    Block,
    For(Duration),
}

impl Scheduler {
    pub fn new(
        voices: Arc<Voices>,
        capabilities: EngineCapabilities,
        options: &EngineOptions,
        commands: Receiver<Command>,
        stats: Arc<WorkerStats>,
        admission: Arc<Admission>,
        device: Option<Arc<DeviceTurns>>,
    ) -> Scheduler {
        Scheduler {
            speeds: vec![Speeds::default(); voices.families.len()],
            voices,
            capabilities,
            frames: options.chunk_frames(),
            max_batch: options.max_batch.max(1),
            pacing: options.pacing,
            commands,
            stats,
            admission,
            speed: Speed::new(1.0, 1.0),
            jobs: Vec::new(),
            device,
        }
    }

    /// Runs each voice's weights once on a short sentence: libtorch's first passes allocate
    /// and pick kernels, which would otherwise land on the first request's time to first audio.
    /// With admission on, then measures each family's work on its default voice, warm, as this
    /// worker's first figures of its speed (what admission starts from; the work it does
    /// refines them); the engine's default family's gives the worker's real-time factor.
    pub fn warm_up(&mut self) {
        let mut warmed = std::collections::HashSet::new();
        for voice in &self.voices.voices {
            if warmed.insert(voice.model.weights()) {
                voice.model.warm_up(&self.frames);
            }
        }
        if self.admission.mode == AdmissionMode::Off {
            return;
        }
        let voices = self.voices.clone();
        for (index, family) in voices.families.iter().enumerate() {
            let voice = &voices.voices[family.default_voice];
            let overall = voice.model.measure(&self.frames, &mut self.speeds[index]);
            if let (Some(speed), true) = (overall, family.default_voice == voices.default_voice) {
                self.speed = speed;
                self.stats.set_factor(self.speed.factor());
            }
        }
        self.publish_demand(Instant::now());
    }

    /// The work of `family`'s default voice measured now ([`VoiceModel::measure`], without
    /// touching this worker's own figures): the audio seconds it computed (0 where the family
    /// measures none), and when it was done. On the simulated device it holds its turn
    /// throughout, so that the workers' probes follow one another as on a device that runs
    /// one at a time.
    fn probe(&mut self, family: usize) -> (f64, Instant) {
        let voices = self.voices.clone();
        let Some(family) = voices.families.get(family) else { return (0.0, Instant::now()) };
        let voice = &voices.voices[family.default_voice];
        let mut scratch = Speeds::default();
        let turn = self.device_turn();
        let started = Instant::now();
        let speed = voice.model.measure(&self.frames, &mut scratch);
        let audio = speed.map_or(0.0, |s| s.factor() * started.elapsed().as_secs_f64());
        drop(turn);
        (audio, Instant::now())
    }

    /// A turn on the simulated device ([`EngineOptions::simulated_device`]), held while a
    /// pass runs; `None` on a real one.
    fn device_turn(&self) -> Option<Turn<'_>> {
        self.device.as_deref().map(DeviceTurns::take)
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
            let computed = match done {
                Round::Chunks { family, sent, computed } => {
                    self.speeds[family].chunk.record(sent, busy);
                    computed
                }
                Round::FirstChunks { family, sent, computed } => {
                    self.speeds[family].first.record(sent, busy);
                    computed
                }
                Round::Segments { family, chars, computed, opened } => {
                    self.speeds[family].segment.record(chars as f64, busy);
                    // (a round of openings alone: what an opening's round costs)
                    if opened > 0 && chars == 0 {
                        self.speeds[family].opening.record(opened as f64, busy);
                    }
                    computed
                }
            };
            self.speed.record(computed, busy);
            self.stats.record_work(busy, self.speed.factor());
        }
    }

    /// What each family's work costs on this worker ([`Costs`]), as [`Voices::families`].
    fn costs(&self) -> Vec<Costs> {
        self.voices.families.iter().zip(&self.speeds).map(|(f, speeds)| f.family.costs(speeds)).collect()
    }

    /// Publishes what its streams owe within admission's horizon, and its costs.
    fn publish_demand(&self, now: Instant) {
        if self.admission.mode == AdmissionMode::Off {
            return;
        }
        let costs = self.costs();
        let horizon = now + pacing::ADMISSION_HORIZON;
        let mut steps = Vec::new();
        // A stream paused on its consumer owes nothing until the consumer reads.
        for job in self.jobs.iter().filter(|j| j.admitted_stream && j.ready()) {
            let outlook = match self.voices.families[job.family].family.streaming() {
                // Each segment whole, the one after next known once through the front end.
                Streaming::WholeSegments { opening, .. } => {
                    let then = job.sentences.get(1).map_or(0, |s| s.phonemes.chars().count());
                    let opening = opening.filter(|_| job.started_sentences == 0 && job.pace.streamed());
                    job.outlook(&self.pacing).whole_segments(then).opening(opening)
                }
                Streaming::Chunked => job.outlook(&self.pacing),
            };
            let sizes = self.frames.map(|n| n as f64 * job.frame_seconds);
            outlook.steps(&costs[job.family], &sizes, horizon, &mut steps);
        }
        let mut demand = self.stats.demand.lock().unwrap_or_else(|p| p.into_inner());
        demand.steps = steps;
        demand.costs = costs;
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
                Command::Probe(family, answer) => {
                    let _ = answer.send(self.probe(family));
                }
                Command::Shutdown => return false,
            }
        }
    }

    /// A job for a new request; one that can't be served is born done, holding its `Failed`.
    fn admit(&self, submission: Submission) -> Job {
        let Submission { id, request, sink, submitted, plays_after, first_delay, admitted_stream, owed_us, refusal } =
            submission;
        let default = &self.voices.voices[self.voices.default_voice];
        let mut job = Job {
            id,
            sink,
            voice: self.voices.default_voice,
            family: default.family,
            frame_seconds: frame_seconds(default.model.as_ref()),
            speed: 1.0,
            seed: request.seed.map_or_else(random_seed, |s| s as u64),
            word_timestamps: request.output.words(),
            front_end: None,
            style: None,
            texts: VecDeque::new(),
            text_starts: VecDeque::new(),
            text_base: 0,
            pronunciations: Pronunciations::new(),
            sentences: VecDeque::new(),
            started_sentences: 0,
            lead: Lead::default(),
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
                let entry = &self.voices.voices[voice];
                job.voice = voice;
                job.family = entry.family;
                job.frame_seconds = frame_seconds(entry.model.as_ref());
                job.style = style;
                let speed = if request.speed.is_finite() { request.speed } else { 1.0 };
                job.speed = speed.clamp(SPEED_RANGE.0, SPEED_RANGE.1) as f32;
                let front_end = match entry.model.reader(request.language.as_deref(), &request.text) {
                    Ok(reader) => reader,
                    Err(message) => {
                        job.finish(EngineEventKind::Failed(Failure::Engine(message)));
                        return job;
                    }
                };
                job.front_end = Some(front_end.clone());
                if let Streaming::WholeSegments { first_words, opening } =
                    self.voices.families[entry.family].family.streaming()
                {
                    // Its first audio waits for its whole first segment, or its opening's round:
                    // due that much later.
                    let chars = pacing::first_words_chars(&request.text, first_words);
                    let opening = opening.filter(|_| request.stream);
                    let work = pacing::first_segment_work(&self.costs()[entry.family], chars, opening);
                    job.pace = job.pace.clone().first_work(work);
                }
                match pronunciations(&request.pronunciations, entry.model.as_ref()) {
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
    /// and, for a mix, its style.
    fn check(&self, request: &SynthesisRequest) -> Result<(usize, Option<Style>), String> {
        self.capabilities.check(request)?;
        let voice = self.capabilities.resolve_voice(request.voice.as_deref())?;
        let voices = &self.voices.voices;
        let index = |name: &str| voices.iter().position(|v| v.name == name);
        if let Some(parts) = voice.and_then(|name| self.capabilities.mix(name)) {
            let first = index(parts[0].0).unwrap_or(self.voices.default_voice);
            let mut models = Vec::new();
            for (name, weight) in &parts {
                match index(name).map(|i| &voices[i]) {
                    Some(v) if v.family == voices[first].family => models.push((v.model.as_ref(), *weight)),
                    _ => return Err(format!("voice '{name}' cannot be mixed")),
                }
            }
            return Ok((first, Some(voices[first].model.mix(&models)?)));
        }
        // No voice named: the default voice of the family whose model the request names.
        let family_default = || {
            let family = self.voices.family_of(self.capabilities.route(request))?;
            self.voices.families.get(family).map(|f| f.default_voice)
        };
        let index = voice.and_then(index).or_else(family_default).unwrap_or(self.voices.default_voice);
        // One of a multi-speaker voice's speakers (Wyoming's `voice.speaker`).
        let style = match request.speaker.as_deref() {
            Some(speaker) => Some(voices[index].model.speaker(speaker)?),
            None => None,
        };
        Ok((index, style))
    }

    /// Ends the jobs with no sentence left (`Finished`).
    fn finish_done(&mut self) -> bool {
        let mut progress = false;
        for job in &mut self.jobs {
            if !job.ready() || job.current.is_some() {
                continue;
            }
            job.drop_unspeakable(self.voices.voices[job.voice].model.as_ref());
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
            let mut urgency = job.pace.urgency(&self.pacing);
            // The chunk after an opening computes the rest of its segment, and the opening is all
            // its listener has: it comes next (another stream's round first made it late: 2
            // Kokoro listeners on a core, `--admission off`, 2 late chunks of 30; a new stream's
            // first audio waits for it as it would for a whole first segment).
            if let (Some(Current { unfinished: Some(_), .. }), pacing::Urgency::Due(t)) = (&job.current, urgency) {
                urgency = pacing::Urgency::Due(t.min(now));
            }
            candidates.push(Candidate { index, voice: self.voices.voices[job.voice].batch, work, urgency });
        }
        let cpu_round = match candidates.first().map(|c| self.voices.voices[c.voice].model.device()) {
            Some(tch::Device::Cpu) => CPU_ROUND,
            _ => self.max_batch,
        };
        // On the CPU, prosody batches are bounded like chunk rounds: a batch is not preempted,
        // and 16 sentences' encoders would hold up streams that are due.
        let max_batch = if cpu_round < self.max_batch { cpu_round } else { self.max_batch };
        let (work, mut batch) = pacing::plan_batch(&candidates, max_batch, cpu_round);
        // (a voice that computes a batch's items one after the other gains nothing from it, and
        // the streams after it wait: [`VoiceModel::max_batch`])
        if let Some(&lead) = batch.first() {
            batch.truncate(self.voices.voices[self.jobs[lead].voice].model.max_batch().max(1));
        }
        let done = match work {
            None => return (None, resume),
            Some(Work::Prosody) => {
                // (no other stream's pass is due before a first segment's next round:
                // `SegmentInput::free`)
                let soon = now + FREE_WITHIN;
                let free = !candidates.iter().any(|c| {
                    !batch.contains(&c.index)
                        && matches!(c.urgency, pacing::Urgency::Due(t) if t <= soon)
                        && (c.work == Work::Prosody
                            || self.jobs[c.index].current.as_ref().is_some_and(|c| c.unfinished.is_some()))
                });
                self.start_sentences(&batch, free)
            }
            Some(Work::FirstChunk) => match self.step(&batch) {
                Round::Chunks { family, sent, computed } => Round::FirstChunks { family, sent, computed },
                other => other,
            },
            Some(Work::Chunk) => self.step(&batch),
        };
        tracing::trace!(
            work = ?work,
            batch = batch.len(),
            did = ?done,
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

    /// Starts the next segment of each job of `batch` (one voice, or voices of one network that
    /// batch together: [`VoiceModel::batch_key`]): the front end on its next text if it has no
    /// sentence ready (one per job and round: a sentence is bounded, and the commands are read
    /// between rounds, so an abort drops the rest of the text unprepared), then one batched pass
    /// of the voice's family over those that have one ([`VoiceModel::start`]; `free`:
    /// [`SegmentInput::free`]); returns what the round did.
    fn start_sentences(&mut self, batch: &[usize], free: bool) -> Round {
        let Some(&lead) = batch.first() else {
            return Round::Segments { family: 0, chars: 0, computed: 0.0, opened: 0 };
        };
        let voices = self.voices.clone();
        let entry = &voices.voices[self.jobs[lead].voice];
        let model = entry.model.as_ref();
        let family = entry.family;
        let mut ready = Vec::new();
        for &i in batch {
            let job = &mut self.jobs[i];
            if job.sentences.is_empty() {
                if let (Some(text), Some(front_end)) = (job.texts.pop_front(), job.front_end.as_ref()) {
                    job.text_base = job.text_starts.pop_front().unwrap_or(0);
                    let mut sentences = front_end.sentences_with(&text, &job.pronunciations);
                    sentences = model.recut(sentences, &mut job.lead);
                    let phonemes: usize = sentences.iter().map(|s| s.phonemes.chars().count()).sum();
                    // (its front end, over the last few hundred sentences)
                    let (p, t) = self.speeds[family].phonemes_per_char;
                    self.speeds[family].phonemes_per_char =
                        (p * 0.995 + phonemes as f64, t * 0.995 + text.chars().count() as f64);
                    job.chars_left = job.chars_left.saturating_sub(text.chars().count()) + phonemes;
                    job.sentences.extend(sentences);
                }
            }
            job.drop_unspeakable(model);
            if !job.sentences.is_empty() {
                ready.push(i);
            }
        }
        let (chars, computed, opened) =
            if ready.is_empty() { (0, 0, 0) } else { self.start_segments(model, &ready, free) };
        Round::Segments { family, chars, computed: computed as f64 / f64::from(model.sample_rate()), opened }
    }

    /// Starts the next segment of each job of `batch` (one voice or batch group) in one pass of
    /// its family, with their word timings, and cuts each into chunks; returns the phoneme
    /// characters of the segments it computed whole (an opened one's count in the round that
    /// finishes it), the samples it computed, and how many segments it opened.
    fn start_segments(&mut self, model: &dyn VoiceModel, batch: &[usize], free: bool) -> (usize, usize, usize) {
        let sentences: Vec<Sentence> = batch.iter().filter_map(|&i| self.jobs[i].sentences.pop_front()).collect();
        let inputs: Vec<SegmentInput> = batch
            .iter()
            .zip(&sentences)
            .map(|(&i, sentence)| {
                let job = &self.jobs[i];
                SegmentInput {
                    voice: self.voices.voices[job.voice].model.as_ref(),
                    phonemes: &sentence.phonemes,
                    speed: job.speed,
                    seed: job.seed,
                    index: job.started_sentences,
                    style: job.style.as_ref(),
                    early: job.started_sentences == 0 && job.pace.streamed(),
                    free,
                }
            })
            .collect();
        let turn = self.device_turn();
        let segments = guarded(|| model.start(&inputs)).and_then(|r| r);
        drop(turn);
        let segments = match segments {
            Ok(segments) => segments,
            Err(message) => {
                for &i in batch {
                    self.jobs[i].fail(message.clone(), &self.stats, &self.admission);
                }
                return (0, 0, 0);
            }
        };
        self.stats.record_batch(batch.len());
        let (mut chars, mut computed, mut opened) = (0, 0, 0);
        for ((&i, sentence), segment) in batch.iter().zip(sentences).zip(segments) {
            let job = &mut self.jobs[i];
            let segment = match segment {
                Ok(segment) => segment,
                Err(message) => {
                    job.fail(message, &self.stats, &self.admission);
                    continue;
                }
            };
            computed += segment.computed;
            let phonemes = sentence.phonemes.chars().count();
            let opening =
                (segment.computed > 0 && segment.opening > segment.computed && segment.opening < segment.samples)
                    .then(|| segment.opening - segment.computed);
            let unfinished = (segment.computed > 0 && segment.computed < segment.samples)
                .then_some((phonemes, segment.samples - segment.computed - opening.unwrap_or(0)));
            match unfinished {
                None => chars += phonemes,
                Some(_) => opened += 1,
            }
            job.chars_left = job.chars_left.saturating_sub(phonemes);
            if !job.running {
                job.running = true;
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                self.stats.running.fetch_add(1, Ordering::Relaxed);
            }
            if job.word_timestamps {
                job.time_words(
                    model.acoustics(),
                    model.sample_rate(),
                    &sentence,
                    &model.char_tokens(&sentence.phonemes),
                    &segment.durations,
                );
            }
            let ready = segment.computed / model.samples_per_frame();
            let opened_at = opening.map_or(0, |_| segment.opening / model.samples_per_frame());
            let ranges = opened_ranges(segment.frames, ready, opened_at, job.started_sentences, self.frames);
            job.started_sentences += 1;
            if ranges.is_empty() {
                continue;
            }
            job.current = Some(Current { segment, ranges, next: 0, unfinished, opening });
        }
        (chars, computed, opened)
    }

    /// Makes and sends the next chunk of each job of `batch` (one voice) in one pass of its
    /// family ([`VoiceModel::chunks`]); returns what the round did.
    fn step(&mut self, batch: &[usize]) -> Round {
        let Some(&lead) = batch.first() else { return Round::Chunks { family: 0, sent: 0.0, computed: 0.0 } };
        let voices = self.voices.clone();
        let entry = &voices.voices[self.jobs[lead].voice];
        let model = entry.model.as_ref();
        let items: Vec<_> = batch
            .iter()
            .map(|&i| self.jobs[i].current.as_ref().expect("picked jobs have a segment"))
            .map(|c| (&c.segment.state, c.ranges[c.next].clone()))
            .collect();
        let turn = self.device_turn();
        let audio = guarded(|| model.chunks(&items)).and_then(|r| r);
        drop(turn);
        // The chunks after an opening compute the rest of their segments; those after a leading
        // silence, their openings.
        let (mut chars, mut samples, mut openings) = (0, 0, 0);
        for &i in batch {
            if let Some(c) = self.jobs[i].current.as_mut().filter(|c| c.next > 0) {
                if let Some(s) = c.opening.take() {
                    (openings, samples) = (openings + 1, samples + s);
                } else if let Some((n, s)) = c.unfinished.take() {
                    (chars, samples) = (chars + n, samples + s);
                }
            }
        }
        let sent = self.send(batch, audio, model.sample_rate());
        let computed = samples as f64 / f64::from(model.sample_rate());
        if chars > 0 || openings > 0 {
            return Round::Segments { family: entry.family, chars, computed, opened: 0 };
        }
        // Audio computed in these rounds, or sliced from segments computed whole.
        let computed = match voices.families[entry.family].family.streaming() {
            Streaming::Chunked => sent,
            Streaming::WholeSegments { .. } => computed,
        };
        Round::Chunks { family: entry.family, sent, computed }
    }

    /// Sends each job of `batch` its next chunk (`audio`, in order) and moves it on, or fails a
    /// job whose chunk failed (all of them where the batch failed); returns the seconds of audio
    /// sent.
    fn send(&mut self, batch: &[usize], audio: Result<Vec<Result<Vec<f32>, String>>, String>, sample_rate: u32) -> f64 {
        let audio = match audio {
            Ok(audio) => audio,
            Err(message) => {
                for &i in batch {
                    self.jobs[i].fail(message.clone(), &self.stats, &self.admission);
                }
                return 0.0;
            }
        };
        self.stats.record_batch(batch.len());
        let mut samples_made = 0;
        for (&i, samples) in batch.iter().zip(audio) {
            let job = &mut self.jobs[i];
            let samples = match samples {
                Ok(samples) => samples,
                Err(message) => {
                    job.fail(message, &self.stats, &self.admission);
                    continue;
                }
            };
            let Some(current) = job.current.as_mut() else { continue };
            current.next += 1;
            if current.next == current.ranges.len() {
                job.offset += current.segment.samples as u64;
                job.current = None;
            }
            samples_made += samples.len();
            job.pending.push_back(EngineEventKind::Audio { pcm: to_s16le(&samples), sample_rate });
            job.flush(&self.stats, &self.admission);
        }
        samples_made as f64 / f64::from(sample_rate)
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

/// As hibari's `write_wav`: clip to [-1, 1], scale by 32767, truncate toward zero.
pub fn to_s16le(samples: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(samples.len() * 2);
    for &x in samples {
        let x = if x.is_nan() { 0.0 } else { x.clamp(-1.0, 1.0) };
        out.extend_from_slice(&((x * 32767.0) as i16).to_le_bytes());
    }
    out
}

/// Seconds of one of `model`'s frames.
fn frame_seconds(model: &dyn VoiceModel) -> f64 {
    model.samples_per_frame() as f64 / f64::from(model.sample_rate())
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
fn pronunciations(entries: &[(String, String)], model: &dyn VoiceModel) -> Result<Pronunciations, String> {
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
