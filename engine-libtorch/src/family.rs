//! The contract between the engine and a voice family: everything the engine, its workers and
//! admission know of a family is what [`Family`] and [`VoiceModel`] say. hibari
//! (`crate::hibari::serve`) and Kokoro-82M (`crate::kokoro::serve`) implement it; the engine
//! lists them in [`crate::families`], and an embedder (or a test) may bring its own with
//! [`crate::TorchEngine::with_families`]. docs/architecture.md, "Adding a voice family", walks
//! through one.
//!
//! A family's work for one stream, as the workers drive it:
//! 1. **Text.** The voice's [`VoiceModel::reader`] (a text front end of `speechstream-text`)
//!    cuts the request's text into sentences and phonemes; [`VoiceModel::recut`] may
//!    cut the first sentence shorter, so a family that computes a segment whole sends its first
//!    audio early, and a later one where its pass would end after the audio before it.
//! 2. **Segments.** [`VoiceModel::start`] takes a batch of segments (one per stream, same voice)
//!    and returns what each needs to make its audio ([`Segment`]: its length in frames, its
//!    durations for word timings, and the family's own state), in one pass where it can batch.
//! 3. **Chunks.** [`VoiceModel::chunks`] makes the next chunk of a batch of segments, each a
//!    range of frames cut by the engine's one chunk rule (`crate::chunks`): a causal family
//!    decodes it (hibari), as does one whose decoder has a short reach (Piper: the chunk with
//!    its context); a non-causal one slices audio it computed whole (Kokoro).
//!
//! Admission costs each family's streams by its own measured speeds ([`Speeds`], turned into
//! [`Costs`] by [`Family::costs`]) and by how its first audio comes ([`Streaming`]).

use std::any::Any;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use speechstream_core::engine::{EngineCapabilities, Voice};
use tch::Device;

use crate::chunks::ChunkSizes;
use crate::g2p::espeak::Espeak;
use crate::g2p::{FrontEnd, Reader, Sentence};
use crate::options::EngineOptions;
use crate::pacing::{Costs, Opening, Speed};
use crate::precision::Precision;
use crate::timing::Acoustics;

/// A family's state for one segment (what its [`VoiceModel::chunks`] reads), opaque to the
/// engine.
pub type SegmentState = Box<dyn Any + Send>;
/// A voice's style for one request (a mix of voices, [`VoiceModel::mix`]), opaque to the engine.
pub type Style = Arc<dyn Any + Send + Sync>;

/// One voice family: how its voices are found and loaded, and what its work costs.
pub trait Family: Send + Sync {
    /// Its name, for logs and errors (`hibari`).
    fn name(&self) -> &str;

    /// Loads its voices as `options` ask; `Ok(None)`: nothing of it to serve (not asked for, or
    /// its default files absent: say why in a log line). An error stops the engine: give it when
    /// the operator named files that are missing or broken.
    fn load(&self, context: &LoadContext) -> Result<Option<Loaded>, String>;

    /// Admission's costs of its streams on a worker that measured `speeds` for it.
    fn costs(&self, speeds: &Speeds) -> Costs;

    /// How its first audio comes ([`Streaming`]).
    fn streaming(&self) -> Streaming {
        Streaming::Chunked
    }
}

/// How a family's audio comes, as admission models it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Streaming {
    /// Causal: each chunk computed on its own, after a segment's pass (hibari's prosody).
    Chunked,
    /// Each segment's audio computed whole; the first segment is at most the text's first
    /// `first_words` words ([`VoiceModel::recut`]), and the first audio waits for it,
    /// or, where it has an `opening` and the request is streamed, for its opening's round.
    WholeSegments { first_words: usize, opening: Option<Opening> },
}

/// What a family loads with: the engine's options and the text front ends every family shares.
pub struct LoadContext<'a> {
    pub options: &'a EngineOptions,
    pub front_ends: &'a FrontEnds,
}

/// A family's voices, loaded.
pub struct Loaded {
    /// What it serves (model names, voices, languages, ...): the core checks and routes each
    /// request against it.
    pub capabilities: EngineCapabilities,
    /// Each voice as it is declared, and as the workers run it.
    pub voices: Vec<(Voice, Arc<dyn VoiceModel>)>,
    /// The voice a request naming only the family's model gets.
    pub default_voice: String,
    /// The arithmetic its networks run in (what `auto` chose).
    pub precision: Precision,
}

/// One loaded voice as the workers run it. Shared by every worker: `&self` only.
pub trait VoiceModel: Send + Sync {
    /// Where it runs.
    fn device(&self) -> Device;

    /// Its audio's sample rate.
    fn sample_rate(&self) -> u32;

    /// Samples in one of the frames its segments are counted and chunked in (12.5 ms: 300 at
    /// 24 kHz).
    fn samples_per_frame(&self) -> usize;

    /// The weights it runs on: voices that return the same value share them (one warm-up pass
    /// warms them all).
    fn weights(&self) -> usize;

    /// The token each phoneme character gives (`None` where its vocabulary has none), counting
    /// a leading boundary token as 0: word timings and the pronunciation checks read it.
    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>>;

    /// Whether `phonemes` hold anything it can say (a sentence without is skipped).
    fn speakable(&self, phonemes: &str) -> bool {
        self.char_tokens(phonemes).iter().any(Option::is_some)
    }

    /// The text front end that reads `text` for a request in `language` (the core has refused
    /// the languages its capabilities lack), or why it cannot.
    fn reader(&self, language: Option<&str>, text: &str) -> Result<Reader, String>;

    /// An utterance's sentences as each of its texts brings them, recut so its first audio
    /// comes early (a family that computes a segment whole cuts the first short) and the rest
    /// on time (`lead`: where the utterance's segments so far leave it, as the family models
    /// it; starts at [`Lead::default`]). By default as they are.
    fn recut(&self, sentences: Vec<Sentence>, lead: &mut Lead) -> Vec<Sentence> {
        let _ = lead;
        sentences
    }

    /// A style mixing `parts` (voices of this family, with weights), for a request naming a
    /// mix; by default, voices do not mix.
    fn mix(&self, parts: &[(&dyn VoiceModel, f32)]) -> Result<Style, String> {
        let _ = parts;
        Err("this voice cannot be mixed".to_owned())
    }

    /// The style of one of its speakers, for a request naming one (`speaker`, one of the names
    /// its declared voice lists in `speakers`); by default, a voice has one.
    fn speaker(&self, speaker: &str) -> Result<Style, String> {
        Err(format!("this voice has one speaker, not '{speaker}'"))
    }

    /// The voice as `Any`, for [`VoiceModel::mix`] to read the other voices of its family.
    fn as_any(&self) -> &dyn Any;

    /// How its audio leads its durations, for word timings.
    fn acoustics(&self) -> Acoustics;

    /// Starts a batch of segments (one per stream): each one's [`Segment`], or why it failed.
    /// An error for the whole batch fails every stream in it. Panics (libtorch's exceptions)
    /// are caught by the caller and fail the batch.
    fn start(&self, batch: &[SegmentInput]) -> Result<Vec<Result<Segment, String>>, String>;

    /// The next chunk of each of a batch of segments: `(state, frames)`, the frames counted
    /// from the segment's start (the last chunk may end past its samples: cut it there); each
    /// one's audio, or why it failed (that stream alone fails). An error for the whole batch
    /// fails every stream in it.
    fn chunks(&self, batch: &[(&SegmentState, Range<usize>)]) -> Result<Vec<Result<Vec<f32>, String>>, String>;

    /// Most segments, or chunks, it takes in one round ([`VoiceModel::start`],
    /// [`VoiceModel::chunks`]). A voice that computes a batch's items one after the other gains
    /// nothing from a batch, while a stream due meanwhile waits for all of it: such a voice says
    /// 1 (Piper). By default, as many as the engine's rounds take.
    fn max_batch(&self) -> usize {
        usize::MAX
    }

    /// Voices with the same key pass one batch together (one network, each segment with its
    /// own voice's style, [`SegmentInput::voice`]); by default, a voice batches with itself
    /// only.
    fn batch_key(&self) -> Option<usize> {
        None
    }

    /// Runs a short sentence through its networks, so that the first request does not pay for
    /// libtorch's first passes.
    fn warm_up(&self, frames: &ChunkSizes<usize>);

    /// Warm, measures what its work costs on this thread (admission's first figures, refined
    /// by the work it does), into `speeds`; returns the speed of a whole utterance, audio
    /// seconds per second, where it measured one.
    fn measure(&self, frames: &ChunkSizes<usize>, speeds: &mut Speeds) -> Option<Speed>;
}

/// One segment to start.
pub struct SegmentInput<'a> {
    /// Its request's voice: the voice whose `start` takes the batch, or another with the same
    /// [`VoiceModel::batch_key`].
    pub voice: &'a dyn VoiceModel,
    pub phonemes: &'a str,
    /// The speaking rate (1 natural).
    pub speed: f32,
    /// The request's seed, and which of its segments this is (their noise streams).
    pub seed: u64,
    pub index: u64,
    /// The request's style, if it named a mix ([`VoiceModel::mix`]).
    pub style: Option<&'a Style>,
    /// Whether its first audio may leave before its whole audio is computed (a streamed
    /// utterance's first segment): a family that computes segments whole may then compute its
    /// opening first ([`Segment::computed`] less than its samples), the rest in the round of its
    /// next chunk (Kokoro). It depends on the request alone, so that a request gets the same
    /// audio at any load.
    pub early: bool,
    /// Whether its worker has no other stream's pass due before the round after this one (an
    /// `early` segment's first audio may then go out before the rest of its opening, which
    /// that round computes: Kokoro's leading silence; else the round computes both, so that
    /// another stream's pass cannot come between them and leave a gap). Its audio is the same
    /// either way.
    pub free: bool,
}

/// A started segment.
pub struct Segment {
    /// Its length in the voice's frames (what its chunks are cut from).
    pub frames: usize,
    /// Its length in samples.
    pub samples: usize,
    /// Frames per token (both boundary tokens included), for word timings: of 600 samples at
    /// 24 kHz, or of 300 for a family whose [`Acoustics::fine_per_frame`] is 1.
    pub durations: Vec<i64>,
    /// Samples of audio computed while starting it (a family that computes segments whole).
    pub computed: usize,
    /// Where a segment started with part of its audio computes it in two more rounds: the end
    /// (samples) of what the round of its next chunk computes, the rest coming in the round
    /// after (Kokoro: its leading silence first, as zeros, then its opening, then the whole
    /// pass). 0 where none: the round of its next chunk computes all the rest.
    pub opening: usize,
    pub state: SegmentState,
}

/// What a worker measured of one family's work: decaying speeds that admission's costs are
/// made of ([`Family::costs`]).
#[derive(Clone, Debug)]
pub struct Speeds {
    /// Audio seconds per second of its rounds of chunks (after an utterance's first).
    pub chunk: Speed,
    /// Audio seconds per second of its rounds of utterances' first chunks.
    pub first: Speed,
    /// Phoneme characters per second of its rounds of segments (the front end and the segment
    /// pass).
    pub segment: Speed,
    /// Openings per second of its rounds that only opened first segments
    /// ([`Streaming::WholeSegments`]'s `opening`; also counted in `segment`, with no
    /// characters: a segment's characters count in the round that finishes it).
    pub opening: Speed,
    /// Phoneme characters its front end made of a character of text (decaying totals:
    /// phonemes, text).
    pub phonemes_per_char: (f64, f64),
}

impl Default for Speeds {
    fn default() -> Speeds {
        Speeds {
            chunk: Speed::new(1.0, 1.0),
            first: Speed::new(1.0, 1.0),
            segment: Speed::new(1.0, 0.0),
            opening: Speed::new(1.0, 0.0),
            phonemes_per_char: (1.0, 1.0),
        }
    }
}

/// A chunked family's costs (hibari's, Piper's): its segments' passes per character of text
/// (measured per phoneme character, turned into text by its front end's ratio), its chunks per
/// audio second, an utterance's first apart.
pub fn chunked_costs(speeds: &Speeds) -> Costs {
    let (phonemes, text) = speeds.phonemes_per_char;
    Costs {
        per_audio_second: cost(&speeds.chunk),
        per_first_second: cost(&speeds.first),
        per_char: cost(&speeds.segment) * phonemes / text.max(1.0),
        per_opening: 0.0,
    }
}

/// Seconds of compute per unit of `speed` (audio second, or character).
pub fn cost(speed: &Speed) -> f64 {
    1.0 / speed.factor().max(1e-9)
}

/// The front ends every family shares, each loaded once, when a family first asks for it:
/// misaki's American and British G2P with hibari's OOV nets, from the options' assets
/// directory, with the server's pronunciations and text options; and espeak-ng's program.
pub struct FrontEnds {
    dir: std::path::PathBuf,
    device: Device,
    pronunciations: crate::g2p::spoken::Pronunciations,
    text: crate::g2p::spoken::TextOptions,
    english: [OnceLock<Result<Arc<FrontEnd>, String>>; 2],
    espeak_program: Option<std::path::PathBuf>,
    espeak: OnceLock<Arc<Espeak>>,
    espeak_piper: OnceLock<Arc<Espeak>>,
}

impl FrontEnds {
    pub fn new(options: &EngineOptions) -> FrontEnds {
        FrontEnds {
            dir: options.assets_dir.clone(),
            device: options.device,
            pronunciations: options.pronunciations.clone(),
            text: options.text,
            english: [OnceLock::new(), OnceLock::new()],
            espeak_program: options.espeak_program.clone(),
            espeak: OnceLock::new(),
            espeak_piper: OnceLock::new(),
        }
    }

    /// espeak-ng's program of ours on Debian's espeak-ng (one process, started on first use),
    /// what Kokoro reads its languages with, as misaki does.
    pub fn espeak(&self) -> Arc<Espeak> {
        self.espeak.get_or_init(|| Arc::new(self.espeak_program())).clone()
    }

    /// The same program on piper-tts's espeak-ng build where set-up put it
    /// ([`Espeak::with_piper_library`]; Debian's otherwise): Piper's voices read as piper-tts
    /// reads them. A process of its own.
    pub fn espeak_piper(&self) -> Arc<Espeak> {
        self.espeak_piper.get_or_init(|| Arc::new(self.espeak_program().with_piper_library())).clone()
    }

    fn espeak_program(&self) -> Espeak {
        self.espeak_program.clone().map_or_else(Espeak::new, Espeak::with_program)
    }

    /// The directory of their files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The English front end of one accent (`british`), loaded on first use.
    pub fn english(&self, british: bool) -> Result<Arc<FrontEnd>, String> {
        self.english[usize::from(british)]
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let loaded = crate::oov::load_front_end(&self.dir, self.device, british)
                    .map(|mut fe| {
                        fe.set_pronunciations(self.pronunciations.clone());
                        fe.set_text_options(self.text);
                        Arc::new(fe)
                    })
                    .map_err(|e| format!("the English text front end: {e}"));
                tracing::debug!(s = started.elapsed().as_secs_f64(), british, "front end loaded");
                loaded
            })
            .clone()
    }
}

/// Whether English can read `text`: an error, naming the way out, for text with letters but no
/// Latin one (Chinese, Japanese, Devanagari, ...), which an English front end would read as
/// nothing, a silent empty answer.
pub fn english_reads(text: &str) -> Result<(), String> {
    let latin = |c: char| c.is_ascii_alphabetic() || ('\u{c0}'..='\u{24f}').contains(&c);
    if text.chars().any(latin) || !text.chars().any(|c| c.is_alphabetic()) {
        return Ok(());
    }
    Err("this text has no Latin letters for the voice's English to read: give its language (`language`: zh, ja, \
         hi, ...) with a voice that speaks it"
        .to_owned())
}

/// Runs model code, turning a panic (tch turns libtorch's C++ exceptions, such as running out
/// of device memory, into panics) into an error message.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let what = panic_text(&*panic).unwrap_or("unknown error");
        format!("the voice failed: {}", what.lines().next().unwrap_or(what))
    })
}

/// A panic's message, where it carries one (`panic!` with a string; tch's libtorch errors).
pub(crate) fn panic_text(panic: &(dyn Any + Send)) -> Option<&str> {
    panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied())
}

/// Where an utterance's segments so far leave it ([`VoiceModel::recut`]), in seconds from its
/// first audio as the family estimates them: their passes done, their audio played.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lead {
    /// Segments recut so far
    pub segments: usize,
    pub computed: f64,
    pub played: f64,
}

/// Words a Kokoro first segment holds at most when its sentence has no earlier clause break.
pub const FIRST_SEGMENT_WORDS: usize = 6;
/// Fewest words of a first segment cut at a clause break (a shorter clause joins the next).
const FIRST_CLAUSE_MIN_WORDS: usize = 2;

/// An utterance's first sentence cut so its audio comes early (Kokoro, which computes a segment
/// whole; Piper, whose encoder runs over it before its first audio): up to its first clause break
/// (`,` `;` `:` or a dash after at least two words) within its first `max_words` words
/// ([`FIRST_SEGMENT_WORDS`] for Kokoro), else after those words, with a comma, so the network reads on rather than ending
/// the sentence there (measured with Whisper: without it "The train to the city leaves. But
/// half past seven."); the rest is the next segment. A sentence that short is left whole.
pub fn split_first(sentence: Sentence, max_words: usize) -> Vec<Sentence> {
    let max_words = max_words.max(FIRST_CLAUSE_MIN_WORDS);
    if sentence.words.len() <= max_words {
        return vec![sentence];
    }
    let clause = (FIRST_CLAUSE_MIN_WORDS - 1..max_words).find(|&k| breaks_after(&sentence, k));
    split_after(sentence, clause.map_or(max_words, |k| k + 1))
}

/// Whether a clause break (`,` `;` `:` or a dash) follows `sentence`'s word `k`. The front
/// end's words hold the punctuation after them ("Sundays," is "sˈʌndˌAz,"): a break is in a
/// word's trailing punctuation or in the gap after it.
pub fn breaks_after(sentence: &Sentence, k: usize) -> bool {
    let phonemes: Vec<char> = sentence.phonemes.chars().collect();
    let Some(word) = sentence.words.get(k) else { return false };
    let range = &word.phonemes;
    let spoken_end = phonemes
        .get(range.start..range.end.min(phonemes.len()))
        .and_then(|p| p.iter().rposition(|c| c.is_alphabetic()))
        .map_or(range.start, |i| range.start + i + 1);
    let next = sentence.words.get(k + 1).map_or(phonemes.len(), |w| w.phonemes.start);
    phonemes.get(spoken_end..next).is_some_and(|gap| gap.iter().any(|c| matches!(c, ',' | ';' | ':' | '—' | '–')))
}

/// `sentence` cut after its first `words` words (at least one, and one left): where no clause
/// break follows them, with a comma, so the network reads on rather than ending the sentence
/// there; the rest is the next segment. Otherwise whole.
pub fn split_after(sentence: Sentence, words: usize) -> Vec<Sentence> {
    if words == 0 || words >= sentence.words.len() {
        return vec![sentence];
    }
    let cut = words - 1;
    let clause = breaks_after(&sentence, cut);
    let words = &sentence.words;
    let phonemes: Vec<char> = sentence.phonemes.chars().collect();
    // The phonemes split where the next word's begin (the break's punctuation stays first).
    let at = words[cut + 1].phonemes.start.min(phonemes.len());
    let text_at = words[cut + 1].text_range.start;
    let text_start = words[0].text_range.start;
    let shift = |r: &Range<usize>, by: usize| r.start.saturating_sub(by)..r.end.saturating_sub(by);
    let head_text_end = words[cut].text_range.end;
    let mut head_phonemes: String = phonemes[..at].iter().collect();
    if !clause {
        head_phonemes = format!("{},", head_phonemes.trim_end());
    }
    let head = Sentence {
        text: sentence.text.get(..head_text_end.saturating_sub(text_start)).unwrap_or(&sentence.text).to_owned(),
        phonemes: head_phonemes,
        words: words[..=cut].to_vec(),
    };
    let tail = Sentence {
        text: sentence.text.get(text_at.saturating_sub(text_start)..).unwrap_or_default().to_owned(),
        phonemes: phonemes[at..].iter().collect(),
        words: words[cut + 1..]
            .iter()
            .map(|w| crate::g2p::Word { phonemes: shift(&w.phonemes, at), ..w.clone() })
            .collect(),
    };
    vec![head, tail]
}
