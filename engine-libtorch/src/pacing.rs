//! Deadlines, lead and admission: the scheduling decisions of the workers, as plain arithmetic
//! on instants the caller passes in (no clock is read here, so tests drive it with made-up
//! times).
//!
//! A streamed request is played by its client from its first chunk on: after chunks holding
//! `sent` seconds of audio, the client runs dry at `first_sent + sent`. So its next chunk is
//! due then (less a margin), and its first chunk is due at `submitted + first_audio`. Workers
//! compute the chunk with the earliest deadline first; a stream more than `max_lead` ahead of
//! its playback waits, since its listener needs nothing yet and a cancel would throw that
//! audio away. Requests that are not streamed have no deadline: they run, oldest first, when
//! no stream has work.
//!
//! Admission: each stream is owed one second of audio per second. A worker that computes `r`
//! seconds of audio per second of work (measured) can keep `r` streams in real time; a new
//! stream is admitted while the streams in flight, with it, stay within the workers' summed
//! factors times a utilization below 1 (room for first chunks and prosody bursts).

use std::time::{Duration, Instant};

/// The pacing knobs (`--first-audio-target`, `--max-lead` and the margin).
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    /// When a stream's first audio is due, after its submission.
    pub first_audio: Duration,
    /// How long before a stream's client would run dry its next chunk is due.
    pub margin: Duration,
    /// How far (seconds of audio) a stream may get ahead of its playback before it waits.
    pub max_lead: Duration,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            first_audio: Duration::from_millis(250),
            margin: Duration::from_millis(200),
            max_lead: Duration::from_secs(10),
        }
    }
}

/// How urgent a request's next piece of work is; smaller is more urgent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Urgency {
    /// A stream whose next audio is due at this instant.
    Due(Instant),
    /// Not streamed: runs in the time streams leave, oldest (submitted first) first.
    Background(Instant),
}

/// One request's timeline against real-time playback.
#[derive(Clone, Debug)]
pub struct Pace {
    submitted: Instant,
    streamed: bool,
    first_sent: Option<Instant>,
    /// Seconds of audio delivered so far.
    sent: f64,
}

/// What delivering a chunk meant for its listener.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delivery {
    /// Not a streamed request: no playback to be late for.
    Unpaced,
    /// In time (the first chunk always is: playback starts with it), this many seconds before
    /// the audio before it ran out.
    OnTime(f64),
    /// After the audio before it ran out, by this many seconds: a gap the listener hears.
    Late(f64),
}

impl Pace {
    pub fn new(submitted: Instant, streamed: bool) -> Pace {
        Pace { submitted, streamed, first_sent: None, sent: 0.0 }
    }

    pub fn streamed(&self) -> bool {
        self.streamed
    }

    /// When the client runs out of audio (None before the first chunk).
    fn runs_dry(&self) -> Option<Instant> {
        self.first_sent.map(|t| t + Duration::from_secs_f64(self.sent))
    }

    pub fn urgency(&self, pacing: &Pacing) -> Urgency {
        if !self.streamed {
            return Urgency::Background(self.submitted);
        }
        match self.runs_dry() {
            None => Urgency::Due(self.submitted + pacing.first_audio),
            Some(dry) => Urgency::Due(dry.checked_sub(pacing.margin).unwrap_or(dry)),
        }
    }

    /// When this stream may compute again, if it is too far ahead of its playback at `now`.
    pub fn waits_until(&self, now: Instant, pacing: &Pacing) -> Option<Instant> {
        let dry = self.runs_dry().filter(|_| self.streamed)?;
        let resume = dry.checked_sub(pacing.max_lead)?;
        (resume > now).then_some(resume)
    }

    /// Records a chunk of `seconds` of audio delivered at `now`.
    pub fn delivered(&mut self, now: Instant, seconds: f64) -> Delivery {
        let outcome = match (self.streamed, self.runs_dry()) {
            (false, _) => Delivery::Unpaced,
            (true, None) => {
                self.first_sent = Some(now);
                Delivery::OnTime(0.0)
            }
            (true, Some(dry)) if now > dry => Delivery::Late((now - dry).as_secs_f64()),
            (true, Some(dry)) => Delivery::OnTime((dry - now).as_secs_f64()),
        };
        self.sent += seconds;
        outcome
    }
}

/// A worker's measured speed: seconds of audio per second of compute, over its recent work
/// (exponentially decaying totals, so it follows a change of load or of machine).
#[derive(Clone, Copy, Debug)]
pub struct Speed {
    audio: f64,
    busy: f64,
}

/// Seconds of compute over which old measurements fade (to 1/e).
const SPEED_MEMORY_S: f64 = 5.0;

impl Speed {
    /// Starts from a measurement (the warm-up's).
    pub fn new(audio_seconds: f64, busy_seconds: f64) -> Speed {
        Speed { audio: audio_seconds.max(0.0), busy: busy_seconds.max(1e-9) }
    }

    /// Adds `busy` seconds of compute that produced `audio` seconds.
    pub fn record(&mut self, audio: f64, busy: f64) {
        let keep = (-busy.max(0.0) / SPEED_MEMORY_S).exp();
        self.audio = self.audio * keep + audio.max(0.0);
        self.busy = self.busy * keep + busy.max(0.0);
    }

    /// Audio seconds per compute second.
    pub fn factor(&self) -> f64 {
        self.audio / self.busy.max(1e-9)
    }
}

/// The admission rule: may one more stream start, with `streams` in flight on workers whose
/// real-time factors are `factors`, delivering `throughput` audio seconds per second lately to
/// streams that needed it ([`Throughput`]),
/// `behind` telling whether any worker is already past the deadline of its most urgent stream
/// (its measured speed then overstates what it can give streams: its core is shared, or a burst
/// of new streams eats it)? `utilization` is the share of the workers' speed that streams may
/// take: both the streams in flight (each owed a second of audio per second) and the audio
/// delivered must stay under it.
pub fn admits(streams: u64, throughput: f64, factors: &[f64], utilization: f64, behind: bool) -> bool {
    let capacity: f64 = factors.iter().map(|f| f.max(0.0)).sum::<f64>() * utilization;
    !behind && (streams + 1) as f64 <= capacity && throughput + 1.0 <= capacity
}

/// Audio delivered per second of wall time, over the last few seconds (a sum decaying with
/// time). The workers count the audio that streams needed soon (delivered less than
/// [`URGENT_LEAD_S`] before their listener would have run out, or late): what keeping the
/// streams in real time takes now, against their measured speed. Audio computed far ahead
/// (the workers are work-conserving) is not demand.
#[derive(Clone, Copy, Debug)]
pub struct Throughput {
    decayed: f64,
    at: Instant,
}

/// A chunk delivered with less lead than this was needed (see [`Throughput`]).
pub const URGENT_LEAD_S: f64 = 1.0;

/// Seconds of wall time over which [`Throughput`] forgets (to 1/e).
pub const THROUGHPUT_MEMORY_S: f64 = 2.0;

impl Throughput {
    pub fn new(now: Instant) -> Throughput {
        Throughput { decayed: 0.0, at: now }
    }

    fn decay_to(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.decayed *= (-elapsed / THROUGHPUT_MEMORY_S).exp();
        self.at = now.max(self.at);
    }

    pub fn record(&mut self, now: Instant, audio_seconds: f64) {
        self.decay_to(now);
        self.decayed += audio_seconds.max(0.0);
    }

    /// Audio seconds per second, lately.
    pub fn rate(&self, now: Instant) -> f64 {
        let mut t = *self;
        t.decay_to(now);
        t.decayed / THROUGHPUT_MEMORY_S
    }
}

/// The burst rule: a new stream owes most of its first second of audio at once (its first
/// chunk is small, so the next is due a fraction of a second later), so streams admitted
/// together can make each other late even while the workers keep up in the long run. A
/// bucket of audio seconds, refilled at the workers' speed, pays for each new stream's first
/// second; it holds what the workers compute in [`BURST_WINDOW_S`].
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    tokens: f64,
    at: Instant,
}

/// Seconds of the workers' compute the burst bucket holds.
pub const BURST_WINDOW_S: f64 = 0.25;
/// Seconds of audio a new stream owes at its start (its first and second chunks).
pub const STARTING_AUDIO_S: f64 = 1.2;

impl Burst {
    pub fn new(now: Instant) -> Burst {
        Burst { tokens: f64::INFINITY, at: now }
    }

    /// Takes a new stream's start from the bucket if it holds enough, refilled at `rate`
    /// audio seconds per second since the last call.
    pub fn take(&mut self, now: Instant, rate: f64) -> bool {
        let full = rate.max(0.0) * BURST_WINDOW_S;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.max(0.0)).min(full.max(STARTING_AUDIO_S));
        self.at = now.max(self.at);
        if self.tokens >= STARTING_AUDIO_S {
            self.tokens -= STARTING_AUDIO_S;
            true
        } else {
            false
        }
    }
}

/// How far past its deadline the most urgent of `candidates` is at `now` (negative: how long
/// until it is due); None when no stream is among them.
pub fn behind(candidates: &[Candidate], now: Instant) -> Option<f64> {
    let due = candidates
        .iter()
        .filter_map(|c| match c.urgency {
            Urgency::Due(t) => Some(t),
            Urgency::Background(_) => None,
        })
        .min()?;
    Some(if due <= now { (now - due).as_secs_f64() } else { -(due - now).as_secs_f64() })
}

/// The worker a new request goes to: the one owing the least audio; among equals, the first
/// from `start` on (the caller turns `start`, so that idle workers share the requests, and each
/// keeps its measure of its speed fresh).
pub fn least_pending(pending_seconds: &[f64], start: usize) -> usize {
    let n = pending_seconds.len().max(1);
    let mut best = start % n;
    for k in 1..pending_seconds.len() {
        let i = (start + k) % n;
        if pending_seconds[i] < pending_seconds[best] {
            best = i;
        }
    }
    best
}

/// The work a request's next step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Its next sentence's front end and prosody pass.
    Prosody,
    /// The first audio chunk of its utterance (small, and what its client is waiting for).
    FirstChunk,
    /// Another audio chunk.
    Chunk,
}

/// A request that can be computed now (not waiting on its lead or its consumer).
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// The caller's index of the request.
    pub index: usize,
    pub voice: usize,
    pub work: Work,
    pub urgency: Urgency,
}

/// What runs next, as one batch (one forward pass): the most urgent candidate and, in order of
/// urgency, others of its voice doing the same kind of work, at most `max_batch` (regular chunks:
/// `max_chunk_batch`). A first chunk is batched only with other first chunks, so it never waits
/// for long chunks; regular chunks take first chunks along (they only gain). Empty when there
/// is nothing to run.
pub fn plan_batch(candidates: &[Candidate], max_batch: usize, max_chunk_batch: usize) -> (Option<Work>, Vec<usize>) {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by_key(|c| c.urgency);
    let Some(lead) = sorted.first().copied() else { return (None, Vec::new()) };
    let (fits, cap): (fn(Work) -> bool, usize) = match lead.work {
        Work::Prosody => (|w| w == Work::Prosody, max_batch),
        Work::FirstChunk => (|w| w == Work::FirstChunk, max_batch),
        Work::Chunk => (|w| w != Work::Prosody, max_chunk_batch.min(max_batch)),
    };
    let batch =
        sorted.iter().filter(|c| c.voice == lead.voice && fits(c.work)).take(cap.max(1)).map(|c| c.index).collect();
    (Some(lead.work), batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_stream_is_due_when_its_listener_would_run_dry() {
        let t0 = Instant::now();
        let pacing = Pacing { first_audio: ms(200), margin: ms(50), max_lead: ms(3000) };
        let mut pace = Pace::new(t0, true);
        assert_eq!(pace.urgency(&pacing), Urgency::Due(t0 + ms(200)));
        // First chunk (0.2 s) at 30 ms: playback starts, the client runs dry at 230 ms.
        assert_eq!(pace.delivered(t0 + ms(30), 0.2), Delivery::OnTime(0.0));
        assert_eq!(pace.urgency(&pacing), Urgency::Due(t0 + ms(180)));
        // One second more at 100 ms: dry at 1230 ms.
        match pace.delivered(t0 + ms(100), 1.0) {
            Delivery::OnTime(lead) => assert!((lead - 0.13).abs() < 1e-9, "{lead}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(pace.urgency(&pacing), Urgency::Due(t0 + ms(1180)));
        // The next chunk comes 70 ms after the audio ran out: an underrun of 0.07 s.
        match pace.delivered(t0 + ms(1300), 1.0) {
            Delivery::Late(s) => assert!((s - 0.07).abs() < 1e-9, "{s}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stream_far_ahead_waits_until_its_lead_is_back_under_the_bound() {
        let t0 = Instant::now();
        let pacing = Pacing { first_audio: ms(200), margin: ms(50), max_lead: ms(3000) };
        let mut pace = Pace::new(t0, true);
        assert_eq!(pace.waits_until(t0, &pacing), None, "nothing sent: no lead");
        pace.delivered(t0, 2.0);
        assert_eq!(pace.waits_until(t0, &pacing), None, "2 s ahead is within 3 s");
        pace.delivered(t0 + ms(10), 5.0);
        // 7 s sent from t0: dry at 7 s, so it may compute again at 4 s.
        assert_eq!(pace.waits_until(t0 + ms(10), &pacing), Some(t0 + ms(4000)));
        assert_eq!(pace.waits_until(t0 + ms(4000), &pacing), None);
    }

    #[test]
    fn requests_that_are_not_streamed_never_wait_and_come_after_every_stream() {
        let t0 = Instant::now();
        let pacing = Pacing::default();
        let mut whole = Pace::new(t0, false);
        assert_eq!(whole.delivered(t0, 100.0), Delivery::Unpaced);
        assert_eq!(whole.waits_until(t0, &pacing), None);
        // A stream submitted an hour later, and one a minute ahead of its playback, still go first.
        let later = Pace::new(t0 + Duration::from_secs(3600), true);
        let mut ahead = Pace::new(t0, true);
        ahead.delivered(t0, 60.0);
        assert!(later.urgency(&pacing) < whole.urgency(&pacing));
        assert!(ahead.urgency(&pacing) < whole.urgency(&pacing));
        // Among streams: the one that runs dry first.
        assert!(ahead.urgency(&pacing) < later.urgency(&pacing));
        let mut soon = Pace::new(t0, true);
        soon.delivered(t0, 0.2);
        assert!(soon.urgency(&pacing) < ahead.urgency(&pacing));
        // Older background work first.
        assert!(whole.urgency(&pacing) < Pace::new(t0 + ms(1), false).urgency(&pacing));
    }

    #[test]
    fn admission_keeps_the_streams_within_the_measured_speed() {
        // Two workers, 40x and 60x real time, 80% of their time for streams: 80 streams.
        let factors = [40.0, 60.0];
        assert!(admits(0, 0.0, &factors, 0.8, false));
        assert!(admits(79, 0.0, &factors, 0.8, false));
        assert!(!admits(80, 0.0, &factors, 0.8, false));
        assert!(!admits(0, 0.0, &[], 0.8, false));
        assert!(!admits(0, 0.0, &[0.5], 0.8, false), "a worker slower than real time carries no stream");
        // Few streams in flight, but the workers already deliver 79.5 s of audio per second.
        assert!(admits(10, 79.0, &factors, 0.8, false));
        assert!(!admits(10, 79.5, &factors, 0.8, false));
        // A worker already late for a stream takes no new one, whatever its measured speed.
        assert!(!admits(0, 0.0, &factors, 0.8, true));
    }

    #[test]
    fn throughput_is_the_audio_delivered_lately_per_second() {
        let t0 = Instant::now();
        let mut t = Throughput::new(t0);
        assert_eq!(t.rate(t0), 0.0);
        // 10 audio seconds every 100 ms for a minute: 100 s/s.
        for i in 1..=600 {
            t.record(t0 + ms(100 * i), 10.0);
        }
        let end = t0 + ms(60_000);
        assert!((t.rate(end) - 100.0).abs() < 3.0, "{}", t.rate(end));
        // Silence for 10 s forgets it.
        assert!(t.rate(end + Duration::from_secs(10)) < 1.0);
    }

    #[test]
    fn new_streams_are_admitted_no_faster_than_their_starts_can_be_computed() {
        let t0 = Instant::now();
        // 96 audio seconds per second: the bucket holds 24 s, 20 starts of 1.2 s.
        let mut burst = Burst::new(t0);
        let admitted = (0..100).filter(|_| burst.take(t0, 96.0)).count();
        assert_eq!(admitted, 20);
        // 100 ms later, 9.6 s more: 8 starts.
        let admitted = (0..100).filter(|_| burst.take(t0 + ms(100), 96.0)).count();
        assert_eq!(admitted, 8);
        // However long it waits, no more than a full bucket at once.
        let admitted = (0..100).filter(|_| burst.take(t0 + Duration::from_secs(60), 96.0)).count();
        assert_eq!(admitted, 20);
    }

    #[test]
    fn behind_is_the_most_urgent_streams_lateness() {
        let t0 = Instant::now();
        let c = |index, urgency| Candidate { index, voice: 0, work: Work::Chunk, urgency };
        let now = t0 + ms(1000);
        let late = [c(0, Urgency::Due(t0 + ms(1200))), c(1, Urgency::Due(t0 + ms(900))), c(2, Urgency::Background(t0))];
        assert!((behind(&late, now).unwrap() - 0.1).abs() < 1e-9);
        let early = [c(0, Urgency::Due(t0 + ms(1300))), c(2, Urgency::Background(t0))];
        assert!((behind(&early, now).unwrap() + 0.3).abs() < 1e-9);
        assert_eq!(behind(&[c(2, Urgency::Background(t0))], now), None);
    }

    #[test]
    fn speed_follows_the_work_measured() {
        let mut speed = Speed::new(1.0, 1.0);
        assert!((speed.factor() - 1.0).abs() < 1e-12);
        // Much work at 100x replaces the start-up guess.
        for _ in 0..5000 {
            speed.record(1.0, 0.01);
        }
        assert!((speed.factor() - 100.0).abs() < 1.0, "{}", speed.factor());
        // Prosody (work without audio) lowers it.
        speed.record(0.0, 1.0);
        assert!(speed.factor() < 100.0);
    }

    #[test]
    fn new_requests_go_to_the_worker_owing_the_least_audio() {
        assert_eq!(least_pending(&[3.0, 1.0, 2.0], 0), 1);
        assert_eq!(least_pending(&[3.0, 1.0, 2.0], 2), 1);
        // Ties go round from `start`.
        assert_eq!(least_pending(&[0.0, 0.0, 0.0], 0), 0);
        assert_eq!(least_pending(&[0.0, 0.0, 0.0], 1), 1);
        assert_eq!(least_pending(&[0.0, 0.0, 0.0], 5), 2);
        assert_eq!(least_pending(&[1.0, 0.0, 0.0], 3), 1);
        assert_eq!(least_pending(&[5.0], 7), 0);
    }

    #[test]
    fn the_most_urgent_work_runs_first_with_its_kind_batched_by_deadline() {
        let t0 = Instant::now();
        let due = |n: u64| Urgency::Due(t0 + ms(n));
        let c = |index, voice, work, urgency| Candidate { index, voice, work, urgency };
        // A stream about to run dry goes before new utterances' first chunks and prosody.
        let candidates = [
            c(0, 0, Work::FirstChunk, due(250)),
            c(1, 0, Work::Chunk, due(40)),
            c(2, 0, Work::Prosody, due(200)),
            c(3, 0, Work::Chunk, due(900)),
            c(4, 1, Work::Chunk, due(10)),
            c(5, 0, Work::Chunk, Urgency::Background(t0)),
        ];
        // Voice 1's chunk is the most urgent of all: it runs alone (no other chunk of voice 1).
        assert_eq!(plan_batch(&candidates, 16, 4), (Some(Work::Chunk), vec![4]));
        // Without it: voice 0's chunks by deadline, the first chunk taken along, background last.
        let rest = &candidates[..4];
        assert_eq!(plan_batch(rest, 16, 4), (Some(Work::Chunk), vec![1, 0, 3]));
        let without_4: Vec<Candidate> = candidates.iter().copied().filter(|c| c.index != 4).collect();
        assert_eq!(plan_batch(&without_4, 16, 8).1, vec![1, 0, 3, 5]);
        // When a first chunk leads, long chunks do not join it.
        let firsts =
            [c(0, 0, Work::FirstChunk, due(250)), c(1, 0, Work::Chunk, due(400)), c(2, 0, Work::FirstChunk, due(260))];
        assert_eq!(plan_batch(&firsts, 16, 4), (Some(Work::FirstChunk), vec![0, 2]));
        // Prosody batches with prosody only, up to max_batch.
        let prosody: Vec<Candidate> = (0..5).map(|i| c(i, 0, Work::Prosody, due(100 - i as u64))).collect();
        assert_eq!(plan_batch(&prosody, 3, 4), (Some(Work::Prosody), vec![4, 3, 2]));
        assert_eq!(plan_batch(&[], 16, 4), (None, vec![]));
    }
}
