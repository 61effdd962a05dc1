//! Kokoro-82M as a voice family of the engine ([`crate::family`]): its files and voices
//! ([`KokoroFamily`], from [`crate::kokoro::voices`]), what a Kokoro voice is to the workers
//! ([`KokoroVoiceModel`]: the shared network, the voice's style table, the front ends of its
//! languages), how a request picks its accent, and how an utterance is cut so its first audio
//! comes early ([`split_first`]).
//!
//! Kokoro is not causal: a segment's audio comes out whole from one pass over its phonemes.
//! So an utterance's first segment is short (its first clause, or its first words), and later
//! ones are sentences; each segment is computed in one round of a worker, then streamed in
//! chunks, slices of it, as hibari's are. The first segment's first chunk leaves sooner: its
//! opening, decoded on its own, then the rest of the whole pass (`KokoroAudio`).

use std::any::Any;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use speechstream_core::config::TaskType;
use speechstream_core::engine::{voice_mix, EngineCapabilities, Language, SynthesisRequest, Voice};

use crate::chunks::ChunkSizes;
use crate::family::{
    breaks_after, cost, guarded, split_after, split_first, Family, Lead, LoadContext, Loaded, Segment, SegmentInput,
    SegmentState, Speeds, Streaming, Style, VoiceModel, FIRST_SEGMENT_WORDS,
};
use crate::g2p::espeak::Espeak;
use crate::g2p::japanese::{has_japanese_script, Japanese, WORD_LIST};
use crate::g2p::mandarin::{self, Mandarin};
use crate::g2p::{FrontEnd, Reader, Sentence};
use crate::kokoro::net::GENERATOR_REACH;
use crate::kokoro::voices::{scan, KokoroFiles, VoicePack};
use crate::kokoro::{
    KokoroModel, KokoroOutput, KokoroSegment, Opening, OPENING_SPEECH, OPENING_SPEECH_AFTER_SILENCE, SAMPLES_PER_FRAME,
    SAMPLES_PER_ROW, SAMPLE_RATE, SEAM,
};
use crate::pacing::{self, Costs, Speed};
use crate::precision::Precision;
use crate::timing::Acoustics;

/// The model name Kokoro's voices are served under, as Kokoro-FastAPI names it.
pub const KOKORO_MODEL_NAME: &str = "kokoro";

/// The voice a request for the `kokoro` model that names none gets, when present (as
/// Kokoro-FastAPI's default); else the first voice by name.
pub const KOKORO_DEFAULT_VOICE: &str = "af_heart";

/// What one pass of the network gives: the segment's audio (24 kHz), the frames each input
/// token lasts (both pad tokens included), and the samples per frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Speech {
    pub audio: Vec<f32>,
    pub durations: Vec<i64>,
    pub samples_per_frame: usize,
}

impl From<KokoroOutput> for Speech {
    fn from(out: KokoroOutput) -> Speech {
        Speech { audio: out.audio, durations: out.durations, samples_per_frame: out.samples_per_frame }
    }
}

/// Kokoro-82M's network as the workers call it (one copy, shared by every voice and worker).
pub trait Network: Send + Sync {
    /// `ids`: phoneme ids without the two pad tokens; `style`: the voice's row for this length
    /// ([`VoicePack::style`]); `speed`: 1.0 is natural.
    fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<Speech, String>;

    /// [`Network::infer`] of several segments (`(ids, style, speed)` each): each one's speech,
    /// or why it was refused; an error (the pass failed) for all. In one pass where
    /// [`Network::batches`], else one after the other.
    fn infer_batch(&self, items: &[(&[i64], &[f32], f32)]) -> Result<Vec<Result<Speech, String>>, String> {
        Ok(items.iter().map(|&(ids, style, speed)| self.infer(ids, style, speed)).collect())
    }

    /// Whether [`Network::infer_batch`] runs its segments in one pass (a device's paths).
    fn batches(&self) -> bool {
        false
    }

    /// A segment's pass up to the generator ([`KokoroModel::prepare`]), to decode its opening
    /// first ([`Network::decode_opening`]) and then the whole ([`Network::decode_whole`]).
    fn prepare(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<KokoroSegment, String>;

    /// [`KokoroModel::decode_opening`].
    fn decode_opening(&self, segment: &KokoroSegment) -> Result<Opening, String>;

    /// [`KokoroModel::decode_whole`].
    fn decode_whole(&self, segment: &KokoroSegment) -> Result<Vec<f32>, String>;

    /// Where it runs.
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }

    /// The arithmetic it runs.
    fn precision(&self) -> Precision {
        Precision::Fp32
    }
}

/// Loads the network from `onnx` (a `kokoro-v1.0[.int8].onnx`): [`KokoroModel`] in
/// `precision` (int8 only on the CPU: fp32 elsewhere); with `device_paths` on the CPU, in fp32
/// or fp16, the paths it takes on a GPU ([`KokoroModel::load_device_paths`]: an engine with a
/// simulated device, [`crate::EngineOptions::simulated_device`]).
pub fn load_network(
    onnx: &Path,
    device: tch::Device,
    precision: Precision,
    device_paths: bool,
) -> Result<Arc<dyn Network>, String> {
    let precision =
        if device != tch::Device::Cpu && precision == Precision::Int8 { Precision::Fp32 } else { precision };
    Ok(Arc::new(if device == tch::Device::Cpu && device_paths && precision != Precision::Int8 {
        KokoroModel::load_device_paths(onnx, precision)?
    } else {
        KokoroModel::load(onnx, device, precision)?
    }))
}

// `KokoroModel` is `Sync` (kokoro/mod.rs): one copy serves every worker.

impl Network for KokoroModel {
    fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<Speech, String> {
        KokoroModel::infer(self, ids, style, speed).map(Speech::from)
    }

    fn infer_batch(&self, items: &[(&[i64], &[f32], f32)]) -> Result<Vec<Result<Speech, String>>, String> {
        Ok(KokoroModel::infer_batch(self, items)?.into_iter().map(|r| r.map(Speech::from)).collect())
    }

    fn batches(&self) -> bool {
        KokoroModel::batches(self)
    }

    fn prepare(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<KokoroSegment, String> {
        KokoroModel::prepare(self, ids, style, speed)
    }

    fn decode_opening(&self, segment: &KokoroSegment) -> Result<Opening, String> {
        KokoroModel::decode_opening(self, segment)
    }

    fn decode_whole(&self, segment: &KokoroSegment) -> Result<Vec<f32>, String> {
        KokoroModel::decode_whole(self, segment)
    }

    fn device(&self) -> tch::Device {
        KokoroModel::device(self)
    }

    fn precision(&self) -> Precision {
        KokoroModel::precision(self)
    }
}

/// Kokoro's phoneme vocabulary (`vocab.json`: `{"vocab": {"a": 43, ...}}`, or the map alone).
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab(HashMap<char, i64>);

impl Vocab {
    pub fn read(path: &Path) -> Result<Vocab, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let map = value.get("vocab").unwrap_or(&value);
        let map = map.as_object().ok_or_else(|| format!("{}: not a vocabulary", path.display()))?;
        let mut vocab = HashMap::new();
        for (key, id) in map {
            let mut chars = key.chars();
            let (Some(c), None, Some(id)) = (chars.next(), chars.next(), id.as_i64()) else {
                return Err(format!("{}: bad entry {key:?}", path.display()));
            };
            vocab.insert(c, id);
        }
        Ok(Vocab(vocab))
    }

    /// The ids of `phonemes` (characters the vocabulary lacks are dropped), without pads.
    pub fn ids(&self, phonemes: &str) -> Vec<i64> {
        phonemes.chars().filter_map(|c| self.0.get(&c).copied()).collect()
    }

    /// For each character, its token index counting the leading pad as 0 (`None` if dropped).
    pub fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        let mut next = 0;
        phonemes
            .chars()
            .map(|c| {
                self.0.contains_key(&c).then(|| {
                    next += 1;
                    next
                })
            })
            .collect()
    }
}

/// A Kokoro voice as a worker holds it.
pub struct KokoroVoiceModel {
    pub network: Arc<dyn Network>,
    pub vocab: Arc<Vocab>,
    pub pack: Arc<VoicePack>,
    /// Its own language (BCP 47, from its name's letter).
    pub language: Option<&'static str>,
    pub american: Arc<FrontEnd>,
    pub british: Arc<FrontEnd>,
    /// The front ends of its other languages.
    pub languages: Languages,
    /// What its passes cost on this machine, for cutting an utterance's first segments (shared
    /// by the family's voices and workers).
    pub pace: Arc<Pace>,
}

/// What Kokoro's passes cost on this machine, as the workers' warm-up measured them (the
/// slowest worker's figures), for cutting an utterance's first segments so that each pass ends
/// before the audio before it has played ([`KokoroVoiceModel::recut`]). Where the
/// options pin the first segment's words, or no worker warms up (`say`), the figures of a
/// Zen 4 core (`Pace::costs`): a request's segments are then the same on every machine.
pub struct Pace {
    /// The network passes several streams' segments at once (on a device,
    /// [`Network::batches`]): every segment is computed whole with the others of its round,
    /// an utterance's first too (its opening alone would hold up the round).
    batched: AtomicBool,
    /// Words an utterance's first segment holds at most ([`first_segment_words`])
    first_words: AtomicUsize,
    /// The generator's whole pass, thread CPU nanoseconds a second of audio
    generator_ns: AtomicU64,
    /// Everything before it (ALBERT, the predictor, the decoder, the source), nanoseconds a
    /// phoneme character
    prepare_ns: AtomicU64,
    /// The options set `first_words`: the warm-up measures nothing
    pinned: AtomicBool,
    /// An utterance's first audio is its first segment's leading silence, sent before its
    /// opening is decoded ([`KokoroSegment::silence_frames`]): where the opening's pass and the
    /// whole pass after it still leave the first segment [`SILENCE_FIRST_WORDS`]
    /// ([`first_segment_words`]); else the opening goes first, silence and all.
    silence_first: AtomicBool,
    /// The pass of an opening decoded while the silence plays, thread CPU nanoseconds (the
    /// slowest worker's): a segment whose silence is shorter opens first.
    opening_ns: AtomicU64,
}

impl Default for Pace {
    fn default() -> Pace {
        Pace {
            batched: AtomicBool::new(false),
            first_words: AtomicUsize::new(FIRST_SEGMENT_WORDS),
            generator_ns: AtomicU64::new(0),
            prepare_ns: AtomicU64::new(0),
            pinned: AtomicBool::new(false),
            silence_first: AtomicBool::new(true),
            opening_ns: AtomicU64::new(0),
        }
    }
}

impl Pace {
    /// `Some` pins the first segment's words (at most [`FIRST_SEGMENT_WORDS`]) and the costs
    /// ([`Pace::costs`]); `None` leaves them to the warm-up.
    fn pin(&self, first_words: Option<usize>) {
        if let Some(words) = first_words {
            self.first_words.store(words.clamp(1, FIRST_SEGMENT_WORDS), Ordering::Relaxed);
            self.pinned.store(true, Ordering::Relaxed);
        }
    }

    /// Words an utterance's first segment holds at most.
    pub fn first_words(&self) -> usize {
        self.first_words.load(Ordering::Relaxed)
    }

    /// Whether an utterance's first audio is its leading silence ([`Pace::silence_first`]).
    pub fn silence_first(&self) -> bool {
        self.silence_first.load(Ordering::Relaxed)
    }

    /// Whether `frames` of leading silence go out before their segment's opening: the machine
    /// sends silence first, and the opening's pass, as measured, ends while they play (at
    /// admission's utilization; unmeasured, a Zen 4 core's 121 ms).
    fn silence_goes_first(&self, frames: usize) -> bool {
        let opening = match self.opening_ns.load(Ordering::Relaxed) {
            0 => 0.121,
            ns => ns as f64 * 1e-9,
        };
        self.silence_first() && frames > 0 && opening <= seconds(frames) * pacing::ADMISSION_UTILIZATION
    }

    /// Seconds of audio an utterance's first segment's opening holds from its first audio:
    /// its leading silence (as counted, [`LEADING_SILENCE_S`]) and its speech.
    fn opening_seconds(&self) -> f64 {
        let speech = if self.silence_first() { OPENING_SPEECH_AFTER_SILENCE } else { OPENING_SPEECH };
        seconds(speech) + LEADING_SILENCE_S
    }

    /// The generator's seconds a second of audio, and the rest's a phoneme character: as
    /// measured, else as a Zen 4 core at AVX-512 VNNI measured them (2026-12-07: the whole pass
    /// over `MEASURE_PHONEMES` 400-434 ms for its 2.675 s of audio, 0.15-0.16 s a second, 0.17
    /// counted; the rest 52-62 ms, ~2 ms a character).
    fn costs(&self) -> (f64, f64) {
        let seconds = |ns: &AtomicU64, or: f64| match ns.load(Ordering::Relaxed) {
            0 => or,
            ns => ns as f64 * 1e-9,
        };
        (seconds(&self.generator_ns, 0.17), seconds(&self.prepare_ns, 0.002))
    }
}

/// The front end a Kokoro voice reads a request's text with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAs {
    American,
    British,
    Japanese,
    Mandarin,
    /// One of espeak-ng's languages, by its espeak voice name (as misaki names them: `es`,
    /// `fr-fr`, `hi`, `it`, `pt-br`).
    Espeak(&'static str),
}

/// The espeak-ng voice of a language tag or name Kokoro reads through espeak-ng (its `e`, `f`,
/// `h`, `i` and `p` voices' languages), as misaki's pipeline names them.
pub fn espeak_language(language: &str) -> Option<&'static str> {
    let l = language.trim().to_lowercase().replace('_', "-");
    let primary = l.split('-').next().unwrap_or(&l);
    Some(match primary {
        "es" | "spanish" | "español" => "es",
        "fr" | "french" | "français" => "fr-fr",
        "hi" | "hindi" => "hi",
        "it" | "italian" | "italiano" => "it",
        "pt" | "portuguese" | "português" => "pt-br",
        _ => return None,
    })
}

/// Whether a request's `language` names Japanese (`ja`, `ja-JP`, `Japanese`; Kokoro-FastAPI's
/// `lang_code` `j` reaches here as `ja`).
pub fn names_japanese(language: &str) -> bool {
    let l = language.trim().to_lowercase();
    l == "ja" || l == "j" || l == "japanese" || l.starts_with("ja-") || l.starts_with("ja_")
}

/// Whether a request's `language` names Mandarin (`zh`, `zh-CN`, `cmn`, `Chinese`, `Mandarin`).
pub fn names_mandarin(language: &str) -> bool {
    let l = language.trim().to_lowercase().replace('_', "-");
    let primary = l.split('-').next().unwrap_or(&l);
    matches!(primary, "zh" | "cmn") || l.contains("chinese") || l.contains("mandarin")
}

/// Whether a voice whose own language is `own` reads English as British for a request in
/// `language` (`None` or `auto`: the voice's own accent; a voice whose own language is not
/// English reads English as American).
pub fn reads_british(own: Option<&str>, language: Option<&str>) -> bool {
    let own_british = own == Some("en-GB");
    let asked = language.map(str::trim).filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("auto"));
    match asked.map(str::to_lowercase) {
        None => own_british,
        Some(l) if l == "en" || l == "english" => own_british,
        Some(l) => l.starts_with("en-gb") || l.starts_with("en_gb") || l.contains("brit"),
    }
}

/// What a voice whose own language is `own` reads `text` as, for a request in `language`. An
/// explicit language wins. With none (or `auto`) the voice reads its own language, except that
/// a Japanese voice reads text without Japanese script (kana, kanji), and a Mandarin voice text
/// without Han characters, as English, as Kokoro-FastAPI's users send them English too. English
/// read from text in another script, with no Latin letter, is an error naming the languages
/// that would read it: never a silent empty answer.
pub fn read_as(own: Option<&str>, language: Option<&str>, text: &str) -> Result<ReadAs, String> {
    let asked = language.map(str::trim).filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("auto"));
    let read = match asked {
        Some(l) if names_japanese(l) => return Ok(ReadAs::Japanese),
        Some(l) if names_mandarin(l) => return Ok(ReadAs::Mandarin),
        Some(l) => match espeak_language(l) {
            Some(espeak) => return Ok(ReadAs::Espeak(espeak)),
            None => english(own, language),
        },
        None => match own {
            Some("ja") if has_japanese_script(text) => return Ok(ReadAs::Japanese),
            Some(zh) if names_mandarin(zh) && mandarin::has_han(text) => return Ok(ReadAs::Mandarin),
            Some(other) => match espeak_language(other) {
                Some(espeak) => return Ok(ReadAs::Espeak(espeak)),
                None => english(own, language),
            },
            None => english(own, language),
        },
    };
    crate::family::english_reads(text)?;
    Ok(read)
}

/// English in the accent a request in `language` gets.
fn english(own: Option<&str>, language: Option<&str>) -> ReadAs {
    if reads_british(own, language) {
        ReadAs::British
    } else {
        ReadAs::American
    }
}

/// The front ends of Kokoro's languages beyond English, shared by its voices: each, or why it
/// is not there (a dictionary or program not installed, or not loaded for a one-request engine).
#[derive(Clone)]
pub struct Languages {
    pub japanese: Result<Arc<Japanese>, String>,
    pub mandarin: Result<Arc<Mandarin>, String>,
    /// espeak-ng's readings, through its separate program ([`speechstream_text::espeak`]).
    pub espeak: Arc<Espeak>,
}

impl KokoroVoiceModel {
    /// The English front end for a request in `language` ([`reads_british`]).
    pub fn front_end(&self, language: Option<&str>) -> &Arc<FrontEnd> {
        if reads_british(self.language, language) {
            &self.british
        } else {
            &self.american
        }
    }

    /// The front end that reads `text` for a request in `language` ([`read_as`]); a language
    /// whose front end is not installed is refused with what to install.
    pub fn reader(&self, language: Option<&str>, text: &str) -> Result<Reader, String> {
        let name = |what: &str, why: &str| format!("{what} is not available: {why}");
        Ok(match read_as(self.language, language, text)? {
            ReadAs::American => Reader::English(self.american.clone()),
            ReadAs::British => Reader::English(self.british.clone()),
            ReadAs::Japanese => Reader::Japanese(self.languages.japanese.clone()?),
            ReadAs::Mandarin => {
                Reader::Mandarin(self.languages.mandarin.clone().map_err(|why| name("Mandarin", &why))?)
            }
            ReadAs::Espeak(voice) => {
                self.languages.espeak.available().map_err(|why| name(voice, &why))?;
                Reader::Espeak(self.languages.espeak.clone(), voice.to_owned())
            }
        })
    }

    /// A segment's voice: its request's mix ([`VoiceModel::mix`]), or its voice's (this one,
    /// or another of the network's batched with it).
    fn style_of<'a>(&'a self, s: &SegmentInput<'a>) -> &'a VoicePack {
        let own = s.voice.as_any().downcast_ref::<KokoroVoiceModel>().map_or(&self.pack, |v| &v.pack);
        s.style.and_then(|style| style.downcast_ref::<VoicePack>()).unwrap_or(own)
    }

    /// [`VoiceModel::start`] of one segment (its phoneme `ids`).
    fn start_one(&self, s: &SegmentInput, ids: &[i64]) -> Result<Segment, String> {
        let style = self.style_of(s);
        let failed = |e: String| format!("kokoro: {e}");
        let run = |f: &dyn Fn() -> Result<(KokoroAudio, Vec<i64>), String>| guarded(f).and_then(|r| r.map_err(failed));
        let (audio, durations) = if s.early {
            run(&|| {
                let segment = self.network.prepare(ids, style.style(ids.len()), s.speed)?;
                let durations = segment.durations().to_vec();
                if !segment.worth_opening() {
                    return Ok((KokoroAudio::Whole(self.network.decode_whole(&segment)?), durations));
                }
                let mut segment = segment;
                if self.pace.silence_goes_first(segment.silence_frames()) {
                    segment.open_after_silence();
                    // (where another stream's pass is due, the opening in this round too: the
                    // same audio, its first later, and no gap after the silence)
                    if s.free {
                        return Ok((KokoroAudio::Silent(Box::new(segment)), durations));
                    }
                }
                let opening = self.network.decode_opening(&segment)?.after_silence(segment.silence_frames());
                Ok((KokoroAudio::Opened { segment: Box::new(segment), opening }, durations))
            })?
        } else {
            run(&|| {
                let speech = self.network.infer(ids, style.style(ids.len()), s.speed)?;
                Ok((KokoroAudio::Whole(speech.audio), speech.durations))
            })?
        };
        Ok(audio.segment(&durations))
    }
}

/// Most tokens a batched pass holds, its padding included: 8 of the longest segments Kokoro
/// takes ([`super::MAX_IDS`]); at ~3.3 frames a token, each of the generator's second-stage
/// activations is then ~0.8 GB in fp32.
const BATCH_TOKENS: usize = 4096;

/// Groups of segments (indices into `lens`, their phoneme ids' counts) that pass the network
/// together: sorted by length, each group's padding at most half its own tokens (the padded
/// steps cost as much as real ones), and at most [`BATCH_TOKENS`] with it.
fn length_groups(lens: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| lens[i]);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut tokens = 0;
    for i in order {
        // (both pad tokens included)
        let len = lens[i] + 2;
        let padded = |group: &Vec<usize>| len * (group.len() + 1);
        if !groups.last().is_some_and(|g| 2 * padded(g) <= 3 * (tokens + len) && padded(g) <= BATCH_TOKENS) {
            groups.push(Vec::new());
            tokens = 0;
        }
        groups.last_mut().expect("a group").push(i);
        tokens += len;
    }
    groups
}

/// Kokoro's durations (frames of `samples_per_frame`) in the coarse frames of 600 samples that
/// [`crate::timing::word_timings`] counts in.
pub fn coarse_durations(durations: &[i64], samples_per_frame: usize) -> Vec<i64> {
    if samples_per_frame == 600 {
        return durations.to_vec();
    }
    // Cumulative, so the rounding does not drift.
    let mut out = Vec::with_capacity(durations.len());
    let (mut total, mut done) = (0i64, 0i64);
    for &d in durations {
        total += d.max(0) * samples_per_frame as i64;
        let end = (total + 300) / 600;
        out.push(end - done);
        done = end;
    }
    out
}

/// Samples in one of the scheduler's frames (12.5 ms), what its segments are chunked in.
const CHUNK_FRAME_SAMPLES: usize = 300;

/// Seconds of audio in `frames` frames of [`SAMPLES_PER_ROW`] samples.
fn seconds(frames: usize) -> f64 {
    (frames * SAMPLES_PER_ROW) as f64 / f64::from(SAMPLE_RATE)
}
/// Seconds of leading silence admission and the first segment's sizing count in a first
/// segment's opening (the first pad token's frames; its audio then plays while the rest of the
/// segment is computed). The
/// openings measured (`kokoro_ttfa`, 2026-12-07: jf_alpha, jf_nezumi and jm_kumo, English and
/// Japanese text) held 0.30-0.42 s of it before their 0.3 s of speech.
const LEADING_SILENCE_S: f64 = 0.25;
/// The fewest words an utterance's first segment may hold for its leading silence to go out
/// before its opening ([`Pace::silence_first`]): the opening's pass then runs while the listener
/// plays that silence, and the whole pass after it must still end before the opening has
/// played. A Zen 4 core keeps six ([`OPENING_SPEECH_AFTER_SILENCE`] gives the time back);
/// capped to AVX2 it would keep three, and keeps the opening first, with three or four
/// (2026-12-07).
const SILENCE_FIRST_WORDS: usize = 4;
/// Phoneme characters a word of [`MEASURE_PHONEMES`] has (29 for its six words, spaces and
/// comma included).
const PHONEMES_PER_WORD: f64 = 29.0 / 6.0;

/// Words an utterance's first segment may hold where the generator's whole pass over it costs
/// `per_char` seconds a phoneme character: its opening plays while that pass runs (the round
/// after it), so the pass must end before the opening has played ([`LEADING_SILENCE_S`] and
/// `speech` frames, [`OPENING_SPEECH`]'s 0.3 s, less admission's margin, at its utilization:
/// 425 ms), and where the leading silence goes out first ([`KokoroSegment::silence_frames`]),
/// so must the opening's own pass before it (`opening` seconds, over
/// [`OPENING_SPEECH_AFTER_SILENCE`]'s 0.5 s: ~140 ms on a Zen 4 core). At most
/// [`FIRST_SEGMENT_WORDS`]: a Zen 4 core takes 13-14 ms a character and keeps six (the bound is
/// 14.7 ms: a warm-up that runs slow cuts five, one chunk more a reply); capped to AVX2 the
/// same core takes ~21 ms, and six words (a 2.25 s segment: 657 ms) ran past its 0.6 s
/// opening, one gap in every reply. With four, fewer replies had a gap, not none: the next
/// segment, computed while the shorter first one plays, is then what comes late
/// (benches/results/14-kokoro-server.md).
fn first_segment_words(per_char: f64, opening: f64, speech: usize) -> usize {
    let plays = seconds(speech) + LEADING_SILENCE_S;
    let budget = (plays - opening - pacing::ADMISSION_MARGIN.as_secs_f64()) * pacing::ADMISSION_UTILIZATION;
    let words = budget / per_char.max(1e-6) / PHONEMES_PER_WORD;
    (words.floor() as usize).clamp(2, FIRST_SEGMENT_WORDS)
}

/// Seconds of audio a Kokoro segment of `chars` phoneme characters holds, about: jf_alpha
/// reading English at speed 1 gave 0.76 s and 57 ms a character (26 to 285 characters,
/// 2026-12-07); 0.6 s counted, so that the audio before a pass is not overestimated.
fn audio_seconds(chars: usize) -> f64 {
    0.6 + 0.057 * chars as f64
}

/// Fewest words of a segment [`paced`] cuts off a sentence: a shorter one costs its own
/// silences and pass for little audio.
const PACED_MIN_WORDS: usize = 4;

/// English words a phrase starts with, before which [`paced`] cuts a sentence where it has no
/// clause break (conjunctions, relatives, prepositions; "of" left out: "the center | of town").
/// Other languages' sentences are cut at a clause break or after the words that fit.
const PHRASE_STARTS: &[&str] = &[
    "and", "but", "or", "nor", "so", "yet", "because", "since", "although", "though", "while", "whereas", "which",
    "who", "whom", "whose", "that", "where", "when", "whenever", "if", "unless", "until", "before", "after", "than",
    "during", "without", "within", "through", "to", "in", "on", "at", "with", "for", "from", "by", "over", "under",
    "near", "into", "about", "like",
];

/// Where [`paced`] cuts a sentence within its first `fits` words (at least
/// [`PACED_MIN_WORDS`]): after its last clause break there, else before the last word there
/// that starts a phrase ([`PHRASE_STARTS`]), else after `fits` words. A cut at the most words
/// that fit, mid-phrase, is what Whisper hears worst ("twelve. Percent", "outside. The gate").
fn phrase_end(sentence: &Sentence, fits: usize) -> usize {
    let candidates = PACED_MIN_WORDS..=fits;
    let clause = candidates.clone().rev().find(|&words| breaks_after(sentence, words - 1));
    let starts = |word: &crate::g2p::Word| {
        let text = word.text.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
        PHRASE_STARTS.contains(&text.as_str())
    };
    let phrase = || candidates.clone().rev().find(|&words| sentence.words.get(words).is_some_and(starts));
    clause.or_else(phrase).unwrap_or(fits)
}

/// An utterance's segments (its first already cut short; `sentences` those of its next text,
/// `lead` where those before leave it) with each later one cut where its pass would end after
/// the audio before it has played, for a listener who starts with the first segment's audio
/// (texts are taken to come as fast as they are read: a text that comes later finds the
/// listener with less audio left than counted here). The first's whole pass runs while its
/// opening plays (`generator` seconds a second of audio); each later one's runs after the one
/// before it (that, and `prepare` seconds a phoneme character), and must end, at admission's
/// utilization and less its margin, before the audio of the segments before it has played. A
/// segment whose pass would not is cut within the most words that fit ([`phrase_end`]; with a
/// comma where no clause break is), at least [`PACED_MIN_WORDS`] (where none fit, the fewest
/// still shorten the gap; on a CPU slower than real time, nothing is cut), with two or more
/// left for the next. At a Zen 4 core's speed a first sentence of ~35 words or more is cut once more (a 57-word
/// sentence's second segment, 17 s of audio, took 3.5 s against the first's 3.2 s: a gap of
/// 0.9 s in its reply, 2026-12-07); capped to AVX2, ~25 words.
fn paced(sentences: Vec<Sentence>, lead: &mut Lead, generator: f64, prepare: f64) -> Vec<Sentence> {
    let cost = |chars: usize| generator * audio_seconds(chars) + prepare * chars as f64;
    let margin = pacing::ADMISSION_MARGIN.as_secs_f64();
    let mut queue: std::collections::VecDeque<Sentence> = sentences.into();
    let mut out: Vec<Sentence> = Vec::with_capacity(queue.len());
    while let Some(mut sentence) = queue.pop_front() {
        let chars = |s: &Sentence| s.phonemes.chars().count();
        if lead.segments == 0 {
            lead.computed = generator * audio_seconds(chars(&sentence));
        } else {
            let budget = lead.played * pacing::ADMISSION_UTILIZATION - margin - lead.computed;
            if cost(chars(&sentence)) > budget && sentence.words.len() >= PACED_MIN_WORDS + 2 {
                let chars_to = |words: usize| sentence.words[words - 1].phonemes.end;
                // Where not even the fewest words fit, they still shorten the gap, unless this
                // CPU computes them slower than they play.
                let least = chars_to(PACED_MIN_WORDS);
                let fits = (PACED_MIN_WORDS..=sentence.words.len() - 2)
                    .take_while(|&w| cost(chars_to(w)) <= budget)
                    .last()
                    .or((cost(least) < audio_seconds(least)).then_some(PACED_MIN_WORDS));
                if let Some(fits) = fits {
                    let words = phrase_end(&sentence, fits);
                    let mut parts = split_after(sentence, words).into_iter();
                    sentence = parts.next().expect("a sentence cut in two");
                    if let Some(rest) = parts.next() {
                        queue.push_front(rest);
                    }
                }
            }
            lead.computed += cost(chars(&sentence));
        }
        lead.played += audio_seconds(chars(&sentence));
        lead.segments += 1;
        out.push(sentence);
    }
    out
}

/// Seconds of CPU time the calling thread has used.
fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The phonemes ("hello.") the network is warmed with.
const WARM_PHONEMES: &str = "həlˈO.";
/// A typical first segment of a Kokoro stream (six words: "The weather today is sunny with,"),
/// whose warm pass is admission's first measure of Kokoro's cost per phoneme character. A
/// 6-character input's fixed costs made it twice the real segments' (34 against 17-18 ms a
/// character on a Xeon with AMX), refusing streams the worker then served on time until real
/// segments refined it.
const MEASURE_PHONEMES: &str = "ðə wˈɛðəɹ tədˈA ɪz sˈʌni wɪð,";

/// The Kokoro-82M family.
#[derive(Default)]
pub struct KokoroFamily {
    /// What its passes cost here (its voices', its admission's first segment)
    pace: Arc<Pace>,
}

impl Family for KokoroFamily {
    fn name(&self) -> &str {
        "kokoro"
    }

    /// Its voices when [`crate::KokoroOptions::dir`] holds a model file and voices. A directory
    /// the operator named ([`crate::KokoroOptions::required`]) must have them; the default one
    /// may not.
    fn load(&self, context: &LoadContext) -> Result<Option<Loaded>, String> {
        let options = context.options;
        let required = options.kokoro.required;
        let Some(dir) = options.kokoro.dir.as_deref() else {
            return if required { Err("Kokoro: no directory of its files".to_owned()) } else { Ok(None) };
        };
        let files = scan(dir);
        // (logged first: a file left out may be why the directory has no voices or model)
        for skipped in &files.skipped {
            tracing::warn!("Kokoro file left out: {skipped}");
        }
        if files.voices.is_empty() || files.model(false).is_none() {
            let what = if files.voices.is_empty() { "no voices" } else { "no kokoro-v1.0[.int8].onnx" };
            if required {
                return Err(format!("Kokoro: {} has {what} (run scripts/setup-voice.sh kokoro)", dir.display()));
            }
            if !files.voices.is_empty() || files.model(false).is_some() {
                tracing::warn!("Kokoro left out: {} has {what}", dir.display());
            }
            return Ok(None);
        }
        match load_kokoro(&files, dir, context, &self.pace) {
            Ok(loaded) => {
                tracing::info!(voices = loaded.voices.len(), "Kokoro-82M served");
                Ok(Some(loaded))
            }
            Err(e) if required => Err(format!("Kokoro: {e}")),
            Err(e) => {
                tracing::warn!("Kokoro left out: {e}");
                Ok(None)
            }
        }
    }

    /// Its segments cost per phoneme character (the whole network; an opened first segment's
    /// two rounds, its opening's and the one that decodes it whole, are measured as the
    /// segment's), its chunks (slices of computed audio) per audio second.
    fn costs(&self, speeds: &Speeds) -> Costs {
        Costs {
            per_audio_second: cost(&speeds.chunk),
            per_first_second: cost(&speeds.chunk),
            per_char: cost(&speeds.segment),
            per_opening: cost(&speeds.opening),
        }
    }

    /// Segments whole; a streamed utterance's first opens where it is long enough
    /// ([`KokoroSegment::worth_opening`], its leading silence left out), its opening
    /// `LEADING_SILENCE_S` and its speech ([`OPENING_SPEECH`], or
    /// [`OPENING_SPEECH_AFTER_SILENCE`] with the silence first: `Pace::opening_seconds`); on a
    /// device none opens (`Pace::batched`).
    fn streaming(&self) -> Streaming {
        let opening = pacing::Opening {
            seconds: self.pace.opening_seconds(),
            least: seconds(2 * (OPENING_SPEECH + SEAM + GENERATOR_REACH)),
        };
        let opening = (!self.pace.batched.load(Ordering::Relaxed)).then_some(opening);
        Streaming::WholeSegments { first_words: self.pace.first_words(), opening }
    }
}

/// Which of Kokoro's front ends to load (espeak-ng's program starts when first used).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Readers {
    american: bool,
    british: bool,
    japanese: bool,
    mandarin: bool,
}

/// The front ends Kokoro's voices read with: all of them, or, for the one request an engine is
/// made for ([`crate::EngineOptions::only_request`]) naming Kokoro's voices, those its voice
/// (each of a mix's) reads its text with.
fn kokoro_readers(files: &KokoroFiles, only: Option<&SynthesisRequest>) -> Readers {
    let all = Readers { american: true, british: true, japanese: true, mandarin: true };
    let Some(request) = only else { return all };
    let Some(parts) = request.voice.as_deref().and_then(voice_mix) else { return all };
    let mut readers = Readers { american: false, british: false, japanese: false, mandarin: false };
    let language = request.language.as_deref();
    for (name, _) in parts {
        // Another voice (an OpenAI name, `default`): what it is is known once resolved.
        let Some(voice) = files.voices.iter().find(|v| v.name.eq_ignore_ascii_case(name)) else { return all };
        match read_as(voice.language, language, &request.text) {
            Ok(ReadAs::Japanese) => readers.japanese = true,
            Ok(ReadAs::Mandarin) => readers.mandarin = true,
            Ok(ReadAs::British) => readers.british = true,
            Ok(ReadAs::American) => readers.american = true,
            // (espeak-ng's program starts on first use; a refusal is the request's)
            Ok(ReadAs::Espeak(_)) | Err(_) => {}
        }
    }
    readers
}

/// Kokoro's voices on one network loaded from `files` (in `dir`), what they can do, and the
/// precision the network runs in (`auto`'s choice, or fp32 for the fp32 export).
fn load_kokoro(files: &KokoroFiles, dir: &Path, context: &LoadContext, pace: &Arc<Pace>) -> Result<Loaded, String> {
    let options = context.options;
    let readers = kokoro_readers(files, options.only_request.as_ref());
    // `--precision auto` is Kokoro's own auto (not what hibari's probe chose for hibari).
    let precision = options.precision.unwrap_or_else(|| KokoroModel::auto_precision(options.device));
    // The hand-written network reads the int8 export's weights (fp32 runs them dequantized); an
    // fp32 export alone is refused with a clear error at load.
    let onnx = files.model(false).ok_or("no model file")?;
    // Kokoro's vocabulary: its own vocab.json when present, else hibari's (the same alphabet,
    // checked in this module's tests).
    let hibari_dir = context.front_ends.dir();
    let vocab_path = Some(dir.join("vocab.json")).filter(|p| p.is_file());
    let vocab = Arc::new(Vocab::read(&vocab_path.unwrap_or_else(|| hibari_dir.join("vocab.json")))?);
    // Japanese: Debian's Open JTalk dictionary (or $SPEECHSTREAM_JA_DICTIONARY's) and misaki's
    // word list beside Kokoro's files; without the dictionary Japanese requests are refused
    // with what to install, and the rest is served. Read, with the English front ends, while
    // the network loads.
    let dictionary = std::env::var_os("SPEECHSTREAM_JA_DICTIONARY").map(std::path::PathBuf::from);
    let word_list = dir.join(WORD_LIST);
    let (network, japanese, mandarin, english) = std::thread::scope(|scope| {
        let japanese = scope.spawn(|| {
            if !readers.japanese {
                return Err(
                    "Japanese is not loaded: this engine was made for one request in another language".to_owned()
                );
            }
            let started = Instant::now();
            let loaded = Japanese::load(dictionary.as_deref(), &word_list).map(Arc::new);
            tracing::debug!(s = started.elapsed().as_secs_f64(), "Japanese front end loaded");
            loaded
        });
        let mandarin = scope.spawn(|| {
            if !readers.mandarin {
                return Err(
                    "Mandarin is not loaded: this engine was made for one request in another language".to_owned()
                );
            }
            let started = Instant::now();
            let loaded = Mandarin::new().map(Arc::new);
            tracing::debug!(s = started.elapsed().as_secs_f64(), "Mandarin front end loaded");
            loaded
        });
        // (one English accent at least: every voice holds one; an accent left out, the one
        // request reading with the other, is the other's)
        let english = scope.spawn(|| {
            let american = readers.american || !readers.british;
            let first = context.front_ends.english(!american)?;
            let other =
                if readers.american && readers.british { context.front_ends.english(true)? } else { first.clone() };
            Ok::<_, String>((first, other))
        });
        let started = Instant::now();
        let device_paths = options.simulated_device;
        let network = match load_network(onnx, options.device, precision, device_paths) {
            // `auto` chose int8, but the file is the fp32 export: its own arithmetic then.
            Err(e) if options.precision.is_none() && precision == Precision::Int8 => {
                tracing::info!(file = %onnx.display(), reason = %e, "Kokoro in fp32");
                load_network(onnx, options.device, Precision::Fp32, device_paths)
            }
            result => result,
        };
        tracing::debug!(s = started.elapsed().as_secs_f64(), "Kokoro's network loaded");
        let japanese = japanese.join().unwrap_or_else(|_| Err("loading the Japanese front end panicked".to_owned()));
        let mandarin = mandarin.join().unwrap_or_else(|_| Err("loading the Mandarin front end panicked".to_owned()));
        let english = english.join().unwrap_or_else(|_| Err("loading the English front end panicked".to_owned()));
        (network, japanese, mandarin, english)
    });
    let network = network?;
    pace.batched.store(network.batches(), Ordering::Relaxed);
    let (american, british) = english?;
    let precision = network.precision();
    match (&japanese, readers.japanese) {
        (Ok(ja), _) => tracing::info!(dictionary = %ja.dictionary_dir().display(), "Kokoro reads Japanese"),
        (Err(e), true) => tracing::warn!("Kokoro reads no Japanese: {e}"),
        (Err(e), false) => tracing::debug!("Kokoro reads no Japanese: {e}"),
    }
    if let (Err(e), true) = (&mandarin, readers.mandarin) {
        tracing::warn!("Kokoro reads no Mandarin: {e}");
    }
    let espeak = context.front_ends.espeak();
    if let Err(e) = espeak.available() {
        tracing::info!("Kokoro reads no Spanish, French, Hindi, Italian or Portuguese: {e}");
    }
    let languages = Languages { japanese, mandarin, espeak };
    pace.pin(options.kokoro.first_words);
    let mut voices = Vec::new();
    for voice in &files.voices {
        let mut listed = Voice::new(voice.name.clone()).with_description(voice.description());
        if let Some(language) = voice.language {
            listed = listed.with_language(language);
        }
        let model = KokoroVoiceModel {
            network: network.clone(),
            vocab: vocab.clone(),
            pack: Arc::new(voice.pack.clone()),
            language: voice.language,
            american: american.clone(),
            british: british.clone(),
            languages: languages.clone(),
            pace: pace.clone(),
        };
        voices.push((listed, Arc::new(model) as Arc<dyn VoiceModel>));
    }
    let capabilities = EngineCapabilities::new(KOKORO_MODEL_NAME, SAMPLE_RATE)
        .with_voices(voices.iter().map(|(v, _)| v.clone()).collect::<Vec<Voice>>())
        .with_languages([
            Language::new("English", "en"),
            Language::new("Japanese", "ja"),
            Language::new("Spanish", "es"),
            Language::new("French", "fr"),
            Language::new("Hindi", "hi"),
            Language::new("Italian", "it"),
            Language::new("Portuguese", "pt"),
            Language::new("Chinese", "zh"),
        ])
        .with_task_types([TaskType::CustomVoice])
        .with_instructions(false)
        .with_word_timestamps(true)
        .with_mixing(true);
    // Its default voice: `af_heart` when present, else its first.
    let default_voice = files
        .voices
        .iter()
        .find(|v| v.name == KOKORO_DEFAULT_VOICE)
        .or(files.voices.first())
        .map(|v| v.name.clone())
        .unwrap_or_default();
    Ok(Loaded { capabilities, voices, default_voice, precision })
}

impl VoiceModel for KokoroVoiceModel {
    fn device(&self) -> tch::Device {
        self.network.device()
    }

    fn sample_rate(&self) -> u32 {
        SAMPLE_RATE
    }

    fn samples_per_frame(&self) -> usize {
        CHUNK_FRAME_SAMPLES
    }

    fn weights(&self) -> usize {
        Arc::as_ptr(&self.network) as *const () as usize
    }

    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        self.vocab.char_tokens(phonemes)
    }

    fn reader(&self, language: Option<&str>, text: &str) -> Result<Reader, String> {
        KokoroVoiceModel::reader(self, language, text)
    }

    /// Its first audio waits for a whole segment, or its opening: the first is short
    /// ([`split_first`], at most [`Pace::first_words`] words); a later one is cut where its
    /// pass would end after the audio before it has played (`paced`).
    fn recut(&self, mut sentences: Vec<Sentence>, lead: &mut Lead) -> Vec<Sentence> {
        if lead.segments == 0 && !sentences.is_empty() {
            let first = split_first(sentences.remove(0), self.pace.first_words());
            sentences.splice(0..0, first);
        }
        let (generator, prepare) = self.pace.costs();
        paced(sentences, lead, generator, prepare)
    }

    fn mix(&self, parts: &[(&dyn VoiceModel, f32)]) -> Result<Style, String> {
        let mut packs = Vec::new();
        for (voice, weight) in parts {
            let voice = voice.as_any().downcast_ref::<KokoroVoiceModel>().ok_or("only Kokoro's voices mix")?;
            packs.push((voice.pack.as_ref(), *weight));
        }
        Ok(Arc::new(VoicePack::mix(&packs)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// On a device ([`Network::batches`]) every voice of the network passes in one batch,
    /// each segment with its own voice's style.
    fn batch_key(&self) -> Option<usize> {
        self.network.batches().then_some(Arc::as_ptr(&self.network) as *const () as usize)
    }

    /// One on the CPU: its segments' passes run one after the other there, and a stream due
    /// meanwhile would wait for all of them (4 listeners on a core, `--admission off`: a
    /// stream's rest after its opening waited for another's first segment and a second's
    /// sentence in one round, and came 0.83 s late); on a device, a round's whole batch.
    fn max_batch(&self) -> usize {
        if self.network.batches() {
            usize::MAX
        } else {
            1
        }
    }

    fn acoustics(&self) -> Acoustics {
        Acoustics::KOKORO
    }

    /// Each segment's audio in one pass of the network (each with its own style), its word
    /// timings from the predicted durations; a streamed utterance's first segment
    /// ([`SegmentInput::early`]), where it is long enough for it to pay, only its opening
    /// ([`KokoroModel::decode_opening`]): its first audio leaves before the generator's pass
    /// over the whole. Where the network batches ([`Network::batches`]: on a device), every
    /// segment is computed whole (a first one too: no openings, `Pace::batched`), the
    /// round's segments in passes of several, grouped by length (`length_groups`).
    fn start(&self, batch: &[SegmentInput]) -> Result<Vec<Result<Segment, String>>, String> {
        let ids: Vec<Vec<i64>> = batch.iter().map(|s| self.vocab.ids(s.phonemes)).collect();
        if !self.network.batches() {
            return Ok(batch.iter().zip(&ids).map(|(s, ids)| self.start_one(s, ids)).collect());
        }
        let mut started: Vec<Option<Result<Segment, String>>> = batch.iter().map(|_| None).collect();
        let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
        for members in length_groups(&lens) {
            let items: Vec<(&[i64], &[f32], f32)> = members
                .iter()
                .map(|&i| (&ids[i][..], self.style_of(&batch[i]).style(ids[i].len()), batch[i].speed))
                .collect();
            tracing::debug!(segments = items.len(), "Kokoro's segments in one pass");
            match guarded(|| self.network.infer_batch(&items)).and_then(|r| r.map_err(|e| format!("kokoro: {e}"))) {
                Ok(speech) => {
                    for (&i, speech) in members.iter().zip(speech) {
                        started[i] = Some(
                            speech
                                .map(|s| KokoroAudio::Whole(s.audio).segment(&s.durations))
                                .map_err(|e| format!("kokoro: {e}")),
                        );
                    }
                }
                Err(e) => members.iter().for_each(|&i| started[i] = Some(Err(e.clone()))),
            }
        }
        // (every segment is in one group)
        Ok(started
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err("kokoro: a segment left out of its round".into())))
            .collect())
    }

    /// Slices of each segment's audio; the first chunk past a leading silence decodes the
    /// segment's opening (`KokoroAudio::Silent`), the first past an opening the segment whole
    /// (`KokoroAudio::Opened`; where that fails, its stream alone fails).
    fn chunks(&self, batch: &[(&SegmentState, Range<usize>)]) -> Result<Vec<Result<Vec<f32>, String>>, String> {
        Ok(batch
            .iter()
            .map(|(state, frames)| {
                let state = state.downcast_ref::<Mutex<KokoroAudio>>().ok_or("kokoro: a segment of another family")?;
                let mut state = state.lock().map_err(|_| "kokoro: a segment's chunk failed before".to_owned())?;
                let end = frames.end * CHUNK_FRAME_SAMPLES;
                if let KokoroAudio::Silent(segment) = &*state {
                    if end > segment.silence_frames() * CHUNK_FRAME_SAMPLES {
                        let opening = guarded(|| self.network.decode_opening(segment))
                            .and_then(|r| r.map_err(|e| format!("kokoro: {e}")))?
                            .after_silence(segment.silence_frames());
                        let KokoroAudio::Silent(segment) =
                            std::mem::replace(&mut *state, KokoroAudio::Whole(Vec::new()))
                        else {
                            unreachable!("the state was read as silent above")
                        };
                        *state = KokoroAudio::Opened { segment, opening };
                    }
                }
                if let KokoroAudio::Opened { segment, opening } = &*state {
                    if end > opening.audio.len() {
                        let whole = guarded(|| self.network.decode_whole(segment))
                            .and_then(|r| r.map_err(|e| format!("kokoro: {e}")))?;
                        *state = KokoroAudio::Whole(opening.join(&whole));
                    }
                }
                let silence;
                let audio = match &*state {
                    KokoroAudio::Whole(audio) => audio,
                    KokoroAudio::Opened { opening, .. } => &opening.audio,
                    KokoroAudio::Silent(segment) => {
                        silence = vec![0.0; segment.silence_frames() * CHUNK_FRAME_SAMPLES];
                        &silence
                    }
                };
                let end = end.min(audio.len());
                Ok(audio[(frames.start * CHUNK_FRAME_SAMPLES).min(end)..end].to_vec())
            })
            .collect())
    }

    fn warm_up(&self, _frames: &ChunkSizes<usize>) {
        let ids = self.vocab.ids(WARM_PHONEMES);
        let _ = guarded(|| self.network.infer(&ids, self.pack.style(ids.len()), 1.0));
        // and a first segment's opening (its pass normalizes otherwise)
        let style = self.pack.style(ids.len());
        let _ = guarded(|| self.network.prepare(&ids, style, 1.0).and_then(|s| self.network.decode_opening(&s)));
        let _ = self.american.sentences("Hello there.");
        if self.pace.pinned.load(Ordering::Relaxed) {
            return;
        }
        // The pass of an opening after a leading silence and the whole pass after it, timed warm
        // (the faster of two) over a typical first segment: how many words a first segment may
        // hold on this machine, and whether its silence goes first. Timed in the
        // thread's CPU time, so that other threads on the same cores (workers warming up
        // together, a test suite's engines) do not make the machine look slower than it is.
        let ids = self.vocab.ids(MEASURE_PHONEMES);
        let timed = guarded(|| {
            let started = thread_cpu_seconds();
            let mut segment = self.network.prepare(&ids, self.pack.style(ids.len()), 1.0)?;
            let prepare = thread_cpu_seconds() - started;
            segment.open_after_silence();
            let (mut opening, mut whole) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..2 {
                let started = thread_cpu_seconds();
                self.network.decode_opening(&segment)?;
                let opened = thread_cpu_seconds();
                self.network.decode_whole(&segment)?;
                opening = opening.min(opened - started);
                whole = whole.min(thread_cpu_seconds() - opened);
            }
            Ok::<_, String>((prepare, opening, whole, seconds(segment.frames())))
        });
        if let Ok(Ok((prepare, opening, whole, audio))) = timed {
            let chars = MEASURE_PHONEMES.chars().count() as f64;
            // (a segment whose silence is too short for the opening's pass opens first: the
            // words must fit both ways)
            let plain = first_segment_words(whole / chars, 0.0, OPENING_SPEECH);
            let silent = first_segment_words(whole / chars, opening, OPENING_SPEECH_AFTER_SILENCE).min(plain);
            let silence_first = silent >= SILENCE_FIRST_WORDS;
            let words = if silence_first { silent } else { plain };
            self.pace.silence_first.fetch_and(silence_first, Ordering::Relaxed);
            let before = self.pace.first_words.fetch_min(words, Ordering::Relaxed);
            let ns = |seconds: f64| (seconds * 1e9) as u64;
            self.pace.opening_ns.fetch_max(ns(opening), Ordering::Relaxed);
            self.pace.generator_ns.fetch_max(ns(whole / audio.max(0.1)), Ordering::Relaxed);
            self.pace.prepare_ns.fetch_max(ns(prepare / chars), Ordering::Relaxed);
            tracing::debug!(
                whole_ms = whole * 1e3,
                opening_ms = opening * 1e3,
                prepare_ms = prepare * 1e3,
                audio_s = audio,
                words,
                silence_first,
                before,
                "Kokoro's first segment sized"
            );
        }
    }

    /// Warm, a pass over a first segment's worth is its first measure of its cost per
    /// character (its real segments refine it); its chunks, slices of computed audio, cost
    /// nothing until their rounds are measured (a streamed first segment's opening and whole
    /// pass cost the opening more than this pass: 8-10% of a two-sentence utterance, which the
    /// measured rounds then count); an opening's round over the same segment (its network up
    /// to the generator, and its opening where no leading silence goes out before it), its
    /// first measure of an opening's cost.
    fn measure(&self, _frames: &ChunkSizes<usize>, speeds: &mut Speeds) -> Option<Speed> {
        speeds.chunk = Speed::new(1.0, 0.0);
        speeds.first = Speed::new(1.0, 0.0);
        let ids = self.vocab.ids(MEASURE_PHONEMES);
        let started = Instant::now();
        let _ = guarded(|| self.network.infer(&ids, self.pack.style(ids.len()), 1.0));
        speeds.segment = Speed::new(MEASURE_PHONEMES.chars().count() as f64, started.elapsed().as_secs_f64());
        let started = Instant::now();
        let style = self.pack.style(ids.len());
        let _ = guarded(|| {
            let segment = self.network.prepare(&ids, style, 1.0)?;
            match self.pace.silence_goes_first(segment.silence_frames()) {
                true => Ok(()),
                false => self.network.decode_opening(&segment).map(drop),
            }
        });
        speeds.opening = Speed::new(1.0, started.elapsed().as_secs_f64());
        None
    }
}

/// A Kokoro segment as a worker holds it: its audio, or (an utterance's first segment) its
/// opening, until a chunk past it decodes the whole and joins the two ([`Opening::join`]); or,
/// before that, only its leading silence ([`KokoroSegment::silence_frames`]: zeros, its first
/// audio), until a chunk past it decodes its opening ([`Opening::after_silence`]).
enum KokoroAudio {
    Whole(Vec<f32>),
    Silent(Box<KokoroSegment>),
    Opened { segment: Box<KokoroSegment>, opening: Opening },
}

impl KokoroAudio {
    /// The segment the workers stream: its frames and samples, its word durations (frames of
    /// [`SAMPLES_PER_FRAME`] per token), the audio computed so far, and this as its state.
    fn segment(self, durations: &[i64]) -> Segment {
        let (samples, computed, opening) = match &self {
            KokoroAudio::Whole(audio) => (audio.len(), audio.len(), 0),
            KokoroAudio::Opened { segment, opening } => {
                (segment.frames() * CHUNK_FRAME_SAMPLES, opening.audio.len(), 0)
            }
            KokoroAudio::Silent(segment) => (
                segment.frames() * CHUNK_FRAME_SAMPLES,
                segment.silence_frames() * CHUNK_FRAME_SAMPLES,
                segment.opening_frames() * CHUNK_FRAME_SAMPLES,
            ),
        };
        Segment {
            frames: samples.div_ceil(CHUNK_FRAME_SAMPLES),
            samples,
            durations: coarse_durations(durations, SAMPLES_PER_FRAME),
            computed,
            opening,
            state: Box::new(Mutex::new(self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g2p::Word;
    use crate::kokoro::voices::KokoroVoice;

    #[test]
    fn one_requests_kokoro_voice_loads_only_the_front_ends_it_reads_with() {
        let voice = |name: &str, language| KokoroVoice {
            name: name.to_owned(),
            language: Some(language),
            pack: VoicePack::new(vec![0.0; 256]).unwrap(),
            file: "voices.npz".into(),
        };
        let files = KokoroFiles {
            voices: vec![voice("af_heart", "en-US"), voice("bf_emma", "en-GB"), voice("jf_alpha", "ja")],
            ..KokoroFiles::default()
        };
        let readers = |voice: &str, language: Option<&str>, text: &str| {
            let mut request = SynthesisRequest::new(text).with_voice(voice);
            if let Some(language) = language {
                request = request.with_language(language);
            }
            let r = kokoro_readers(&files, Some(&request));
            (r.american, r.british, r.japanese)
        };
        let all = (true, true, true);
        assert_eq!(readers("af_heart", None, "Hello."), (true, false, false));
        assert_eq!(readers("AF_HEART", Some("en-GB"), "Hello."), (false, true, false));
        assert_eq!(readers("bf_emma", None, "Hello."), (false, true, false));
        // a Japanese voice reads English as American, Japanese script (or language ja) as Japanese
        assert_eq!(readers("jf_alpha", None, "Hello."), (true, false, false));
        assert_eq!(readers("jf_alpha", None, "今日は。"), (false, false, true));
        assert_eq!(readers("af_heart", Some("ja"), "Hello."), (false, false, true));
        assert_eq!(readers("af_heart(2)+bf_emma", None, "Hello."), (true, true, false));
        // names only resolved later (OpenAI's, `default`, hibari's), and any engine: everything
        assert_eq!(readers("alloy", None, "Hello."), all);
        assert_eq!(readers("af_heart+nobody", None, "Hello."), all);
        let r = kokoro_readers(&files, None);
        assert_eq!((r.american, r.british, r.japanese), all);
    }

    fn sentence(text: &str) -> Sentence {
        // Phonemes: each word's letters, a space between, punctuation kept.
        let mut phonemes = String::new();
        let mut words = Vec::new();
        let mut at = 0;
        for raw in text.split(' ') {
            let word = raw.trim_end_matches([',', '.']);
            let start = text[at..].find(raw).map(|i| i + at).unwrap_or(at);
            if !phonemes.is_empty() {
                phonemes.push(' ');
            }
            let p0 = phonemes.chars().count();
            phonemes.push_str(word);
            let p1 = phonemes.chars().count();
            phonemes.push_str(&raw[word.len()..]);
            let chars = text[..start].chars().count()..text[..start + word.len()].chars().count();
            words.push(Word { text: word.to_owned(), text_range: start..start + word.len(), chars, phonemes: p0..p1 });
            at = start + raw.len();
        }
        Sentence { text: text.to_owned(), phonemes, words }
    }

    #[test]
    fn a_first_segment_holds_what_its_whole_pass_computes_while_its_opening_plays() {
        // As measured warm (03:29): a Zen 4 core 383 ms over MEASURE_PHONEMES' 29 characters,
        // the same core capped to AVX2 610 ms.
        let plain = |per_char: f64| first_segment_words(per_char, 0.0, OPENING_SPEECH);
        assert_eq!(plain(0.383 / 29.0), FIRST_SEGMENT_WORDS);
        assert_eq!(plain(0.610 / 29.0), 4);
        // The opening's 0.55 s, less the margin, at 85%: 425 ms of whole pass at the most.
        let words = plain(0.610 / 29.0) as f64;
        assert!(words * PHONEMES_PER_WORD * 0.610 / 29.0 <= 0.425);
        // Never more than six, never fewer than a clause's two.
        assert_eq!(plain(1e-4), FIRST_SEGMENT_WORDS);
        assert_eq!(plain(1.0), 2);
        // With the leading silence first, the pass of its longer opening (0.5 s of speech:
        // 140 ms on the Zen 4 core, 226 ms capped, warm-ups of 2026-12-07) comes out of its 0.75 s: the core keeps
        // its six words (with a warm-up as slow as 425 ms too), and sends its silence first;
        // capped, three, under SILENCE_FIRST_WORDS: its opening goes first.
        let silent = |per_char: f64, opening: f64| first_segment_words(per_char, opening, OPENING_SPEECH_AFTER_SILENCE);
        assert_eq!(silent(0.386 / 29.0, 0.140), FIRST_SEGMENT_WORDS);
        assert_eq!(silent(0.425 / 29.0, 0.140), FIRST_SEGMENT_WORDS);
        assert!(silent(0.640 / 29.0, 0.226) < SILENCE_FIRST_WORDS);
        // (the whole pass in what is left of the 0.7 s after the opening's, at 85%)
        let words = silent(0.386 / 29.0, 0.140) as f64;
        assert!(words * PHONEMES_PER_WORD * 0.386 / 29.0 <= (0.7 - 0.140) * 0.85);
    }

    #[test]
    fn a_later_segment_is_cut_where_its_pass_would_end_after_the_audio_before_it() {
        let long = "The committee reviewed the proposal carefully over several long meetings and eventually \
            decided that the new library building should be constructed near the old railway station in the \
            center of town because the land there is cheap, and the buses already stop outside the gate every \
            ten minutes during the whole day and most of the night.";
        let zen4 = (0.17, 0.002);
        let avx2 = (0.29, 0.0035);
        let cut = |text: &str, (generator, prepare): (f64, f64)| {
            let mut sentences = vec![sentence(text)];
            sentences.splice(0..1, split_first(sentences[0].clone(), FIRST_SEGMENT_WORDS));
            paced(sentences, &mut Lead::default(), generator, prepare)
        };
        let texts = |parts: &[Sentence]| parts.iter().map(|s| s.text.clone()).collect::<Vec<_>>();
        let words =
            |parts: &[Sentence]| parts.iter().flat_map(|s| s.words.iter().map(|w| w.text.clone())).collect::<Vec<_>>();
        // A short sentence as split_first cut it, at either speed.
        let short = "The quick brown fox jumps over the lazy dog near the riverbank.";
        for costs in [zen4, avx2] {
            assert_eq!(
                texts(&cut(short, costs)),
                ["The quick brown fox jumps over", "the lazy dog near the riverbank."]
            );
        }
        // The 57-word sentence: its rest cut once more, every word kept in order, each pass
        // ending before the audio before it has played.
        let whole = words(&[sentence(long)]);
        for costs in [zen4, avx2] {
            let parts = cut(long, costs);
            assert!(parts.len() >= 3, "{:?}", texts(&parts));
            assert_eq!(words(&parts), whole);
            let (generator, prepare) = costs;
            let chars = |s: &Sentence| s.phonemes.chars().count();
            let mut computed = generator * audio_seconds(chars(&parts[0]));
            let mut played = audio_seconds(chars(&parts[0]));
            for part in &parts[1..] {
                computed += generator * audio_seconds(chars(part)) + prepare * chars(part) as f64;
                assert!(computed <= played * pacing::ADMISSION_UTILIZATION - 0.05 + 1e-9, "{:?}", texts(&parts));
                assert!(part.words.len() >= 2);
                played += audio_seconds(chars(part));
            }
        }
        // A slower CPU cuts sooner; at the last clause break that fits ("cheap,"), else with a comma.
        let (fast, slow) = (cut(long, zen4), cut(long, avx2));
        // Each cut before a phrase ("... of town | because the land", "... decided | that the new"),
        // not at the most words that fit mid-phrase.
        for parts in [&fast, &slow] {
            for part in &parts[2..] {
                let first = part.words[0].text.to_lowercase();
                assert!(PHRASE_STARTS.contains(&first.as_str()), "{:?}", texts(parts));
            }
        }
        assert!(slow[1].words.len() < fast[1].words.len(), "{:?} {:?}", texts(&fast), texts(&slow));
        for part in [&fast[1], &slow[1]] {
            assert!(part.phonemes.trim_end().ends_with(','), "{}", part.phonemes);
        }
        // A short first sentence ("Yes.") gives the next little time: cut, but never below four words.
        let parts = paced(vec![sentence("Yes."), sentence(long)], &mut Lead::default(), zen4.0, zen4.1);
        assert!(parts.len() >= 3 && parts[1].words.len() >= PACED_MIN_WORDS, "{:?}", texts(&parts));
        // The same where each sentence is a text of its own (the core sends a stream's
        // sentences as they end): the lead carries from one to the next.
        let mut lead = Lead::default();
        let mut texts_one_by_one = paced(vec![sentence("Yes.")], &mut lead, zen4.0, zen4.1);
        texts_one_by_one.extend(paced(vec![sentence(long)], &mut lead, zen4.0, zen4.1));
        assert_eq!(texts(&texts_one_by_one), texts(&parts));
        assert_eq!(lead.segments, parts.len());
        // Where not even four words fit (a warm-up on a slow spell: 716 ms over 2.7 s), the
        // gap is shortened with four.
        let parts = paced(vec![sentence("Yes."), sentence(long)], &mut Lead::default(), 0.27, 0.0032);
        assert_eq!(parts[1].words.len(), PACED_MIN_WORDS, "{:?}", texts(&parts));
        // Slower than real time: left as it was rather than cut in crumbs.
        let parts = cut(long, (1.2, 0.01));
        assert_eq!(parts.len(), 2);
    }

    #[test]
    fn the_first_segment_ends_at_an_early_clause_or_after_a_few_words() {
        let parts =
            split_first(sentence("Well then, the weather today is sunny with a light breeze."), FIRST_SEGMENT_WORDS);
        let texts: Vec<&str> = parts.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["Well then", "the weather today is sunny with a light breeze."]);
        assert_eq!(parts[0].phonemes, "Well then, ");
        assert_eq!(parts[1].phonemes, "the weather today is sunny with a light breeze.");
        assert_eq!(parts[1].words[0].phonemes, 0..3);
        assert_eq!(&parts[1].phonemes[parts[1].words[1].phonemes.clone()], "weather");
        // No break early: after six words.
        let parts =
            split_first(sentence("The weather today is sunny with a light breeze from the west."), FIRST_SEGMENT_WORDS);
        assert_eq!(parts[0].text, "The weather today is sunny with");
        assert_eq!(parts[1].text, "a light breeze from the west.");
        assert_eq!(parts[0].phonemes, "The weather today is sunny with,");
        // One word then a comma is too short a clause: the cut waits for the next break.
        let parts = split_first(
            sentence("Yes, the weather today, as you see, is sunny with a light breeze."),
            FIRST_SEGMENT_WORDS,
        );
        assert_eq!(parts[0].text, "Yes, the weather today");
        // Short sentences stay whole.
        assert_eq!(split_first(sentence("It is sunny today."), FIRST_SEGMENT_WORDS).len(), 1);
    }

    /// As the front end gives them: each word's phonemes hold the punctuation after it.
    fn with_punctuation_in_words(mut s: Sentence) -> Sentence {
        let phonemes: Vec<char> = s.phonemes.chars().collect();
        for w in &mut s.words {
            while phonemes.get(w.phonemes.end).is_some_and(|c| !c.is_whitespace()) {
                w.phonemes.end += 1;
            }
        }
        s
    }

    #[test]
    fn a_break_inside_a_words_phonemes_is_found() {
        let parts = split_first(
            with_punctuation_in_words(sentence("Well then, the weather today is sunny with a light breeze.")),
            FIRST_SEGMENT_WORDS,
        );
        assert_eq!(parts[0].text, "Well then");
        assert_eq!(parts[0].phonemes, "Well then, ");
        // A sixth word ending in a comma is cut there without a second comma.
        let parts = split_first(
            with_punctuation_in_words(sentence("The library closes early on Sundays, so we went on Saturday instead.")),
            FIRST_SEGMENT_WORDS,
        );
        assert_eq!(parts[0].phonemes, "The library closes early on Sundays, ");
        assert_eq!(parts[1].text, "so we went on Saturday instead.");
    }

    /// Segments batch by length: each group's padding at most half its tokens, its padded tokens
    /// at most [`BATCH_TOKENS`]; every segment in exactly one group.
    #[test]
    fn segments_batch_with_others_of_about_their_length() {
        // (ids; 2 pad tokens each come on top)
        let lens = [10, 200, 12, 11, 190, 60, 58, 500, 500, 500, 500, 500, 500, 500, 500, 500];
        let groups = length_groups(&lens);
        let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>());
        for g in &groups {
            let tokens: Vec<usize> = g.iter().map(|&i| lens[i] + 2).collect();
            let padded = tokens.iter().max().unwrap() * tokens.len();
            assert!(2 * padded <= 3 * tokens.iter().sum::<usize>(), "{g:?}: too much padding");
            assert!(g.len() == 1 || padded <= BATCH_TOKENS, "{g:?}: too many tokens");
        }
        assert!(groups.contains(&vec![0, 3, 2]), "the short ones together: {groups:?}");
        assert!(groups.contains(&vec![6, 5]) && groups.contains(&vec![4, 1]), "{groups:?}");
        // 9 of the longest: 8 fit one pass
        assert_eq!(groups.iter().filter(|g| g.iter().all(|&i| lens[i] == 500)).map(Vec::len).max(), Some(8));
    }

    #[test]
    fn durations_in_coarse_frames_keep_their_total() {
        assert_eq!(coarse_durations(&[1, 2, 3], 600), [1, 2, 3]);
        let d = coarse_durations(&[1, 1, 1, 1, 3], 300);
        assert_eq!(d.iter().sum::<i64>(), 4);
        assert_eq!(d, [1, 0, 1, 0, 2]);
    }

    #[test]
    fn kokoro_reads_the_alphabet_of_hibaris_front_end() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache");
        let (kokoro, hibari) = (root.join("kokoro/vocab.json"), root.join("hibari/vocab.json"));
        if !kokoro.is_file() || !hibari.is_file() {
            eprintln!("skipped: run scripts/setup.sh");
            return;
        }
        let (kokoro, hibari) = (Vocab::read(&kokoro).unwrap(), Vocab::read(&hibari).unwrap());
        // Every symbol hibari's front end may write has Kokoro's id for it.
        for (c, id) in &hibari.0 {
            assert_eq!(kokoro.0.get(c), Some(id), "{c:?}");
        }
        let ids = kokoro.ids("həlˈO wˈɜɹld.");
        assert_eq!(ids.len(), "həlˈO wˈɜɹld.".chars().count());
        assert_eq!(kokoro.char_tokens("hə#l"), [Some(1), Some(2), None, Some(3)]);
    }
}
