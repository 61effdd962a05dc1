//! Kokoro's voices as the engine's workers serve them, beside hibari's: what a Kokoro voice
//! is to the scheduler ([`KokoroVoiceModel`]: the shared network, the voice's style table, the
//! front ends of its language), how a request picks its accent, and how an utterance is cut
//! so its first audio comes early ([`split_first`]).
//!
//! Kokoro is not causal: a segment's audio comes out whole from one pass over its phonemes.
//! So an utterance's first segment is short (its first clause, or its first words), and later
//! ones are sentences; each segment is computed in one round of a worker, then streamed in
//! chunks as hibari's are.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::g2p::japanese::{has_japanese_script, Japanese};
use crate::g2p::{FrontEnd, Reader, Sentence};
use crate::kokoro::voices::VoicePack;
use crate::kokoro::KokoroModel;

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

/// Kokoro-82M's network as the workers call it (one copy, shared by every voice and worker).
pub trait Network: Send + Sync {
    /// `ids`: phoneme ids without the two pad tokens; `style`: the voice's row for this length
    /// ([`VoicePack::style`]); `speed`: 1.0 is natural.
    fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<Speech, String>;

    /// Where it runs.
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }

    /// The arithmetic it runs.
    fn precision(&self) -> crate::Precision {
        crate::Precision::Fp32
    }
}

/// Loads the network from `onnx` (a `kokoro-v1.0[.int8].onnx`): [`KokoroModel`] in
/// `precision` (int8 only on the CPU: fp32 elsewhere).
pub fn load_network(onnx: &Path, device: tch::Device, precision: crate::Precision) -> Result<Arc<dyn Network>, String> {
    let precision = if device != tch::Device::Cpu && precision == crate::Precision::Int8 {
        crate::Precision::Fp32
    } else {
        precision
    };
    Ok(Arc::new(KokoroModel::load(onnx, device, precision)?))
}

// `KokoroModel` is `Sync` (kokoro/mod.rs): one copy serves every worker.

impl Network for KokoroModel {
    fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<Speech, String> {
        let out = KokoroModel::infer(self, ids, style, speed)?;
        Ok(Speech { audio: out.audio, durations: out.durations, samples_per_frame: out.samples_per_frame })
    }

    fn device(&self) -> tch::Device {
        KokoroModel::device(self)
    }

    fn precision(&self) -> crate::Precision {
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
    /// The Japanese front end, or why there is none (the dictionary's package missing).
    pub japanese: Result<Arc<Japanese>, String>,
}

/// Whether a request's `language` names Japanese (`ja`, `ja-JP`, `Japanese`; Kokoro-FastAPI's
/// `lang_code` `j` reaches here as `ja`).
pub fn names_japanese(language: &str) -> bool {
    let l = language.trim().to_lowercase();
    l == "ja" || l == "j" || l == "japanese" || l.starts_with("ja-") || l.starts_with("ja_")
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

/// Whether a voice whose own language is `own` reads `text` as Japanese for a request in
/// `language`: an explicit language wins; with none (or `auto`) a Japanese voice reads text
/// holding Japanese script (kana, kanji) as Japanese, other text as English.
pub fn reads_japanese(own: Option<&str>, language: Option<&str>, text: &str) -> bool {
    let asked = language.map(str::trim).filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("auto"));
    match asked {
        Some(l) => names_japanese(l),
        None => own == Some("ja") && has_japanese_script(text),
    }
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

    /// The front end that reads `text` for a request in `language`: an explicit language
    /// wins (the core has refused those Kokoro has no front end for: English and Japanese
    /// are served); with none (or `auto`) a Japanese voice reads text holding Japanese script
    /// (kana, kanji) as Japanese and text with none as English, and an English voice reads
    /// English. Japanese without its dictionary is refused with what to install.
    pub fn reader(&self, language: Option<&str>, text: &str) -> Result<Reader, String> {
        if !reads_japanese(self.language, language, text) {
            return Ok(Reader::English(self.front_end(language).clone()));
        }
        match &self.japanese {
            Ok(ja) => Ok(Reader::Japanese(ja.clone())),
            Err(why) => Err(why.clone()),
        }
    }
}

/// Words a first segment holds at most when its sentence has no earlier clause break.
pub const FIRST_SEGMENT_WORDS: usize = 6;
/// Fewest words of a first segment cut at a clause break (a shorter clause joins the next).
const FIRST_CLAUSE_MIN_WORDS: usize = 2;

/// An utterance's first sentence cut so its audio comes early: up to its first clause break
/// (`,` `;` `:` or a dash after at least two words) within the first [`FIRST_SEGMENT_WORDS`]
/// words, else after those words, with a comma, so the network reads on rather than ending
/// the sentence there (measured with Whisper: without it "The train to the city leaves. But
/// half past seven."); the rest is the next segment. A sentence that short is left whole.
pub fn split_first(sentence: Sentence) -> Vec<Sentence> {
    let words = &sentence.words;
    if words.len() <= FIRST_SEGMENT_WORDS {
        return vec![sentence];
    }
    let phonemes: Vec<char> = sentence.phonemes.chars().collect();
    // The front end's words hold the punctuation after them ("Sundays," is "sˈʌndˌAz,"): a
    // break is in a word's trailing punctuation or in the gap after it.
    let breaks_after = |k: usize| {
        let range = &words[k].phonemes;
        let spoken_end = phonemes
            .get(range.start..range.end.min(phonemes.len()))
            .and_then(|p| p.iter().rposition(|c| c.is_alphabetic()))
            .map_or(range.start, |i| range.start + i + 1);
        let next = words.get(k + 1).map_or(phonemes.len(), |w| w.phonemes.start);
        phonemes.get(spoken_end..next).is_some_and(|gap| gap.iter().any(|c| matches!(c, ',' | ';' | ':' | '—' | '–')))
    };
    let clause = (FIRST_CLAUSE_MIN_WORDS - 1..FIRST_SEGMENT_WORDS).find(|&k| breaks_after(k));
    let cut = clause.unwrap_or(FIRST_SEGMENT_WORDS - 1);
    // The phonemes split where the next word's begin (the break's punctuation stays first).
    let at = words[cut + 1].phonemes.start.min(phonemes.len());
    let text_at = words[cut + 1].text_range.start;
    let text_start = words[0].text_range.start;
    let shift = |r: &Range<usize>, by: usize| r.start.saturating_sub(by)..r.end.saturating_sub(by);
    let head_text_end = words[cut].text_range.end;
    let mut head_phonemes: String = phonemes[..at].iter().collect();
    if clause.is_none() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::g2p::Word;

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
    fn the_first_segment_ends_at_an_early_clause_or_after_a_few_words() {
        let parts = split_first(sentence("Well then, the weather today is sunny with a light breeze."));
        let texts: Vec<&str> = parts.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["Well then", "the weather today is sunny with a light breeze."]);
        assert_eq!(parts[0].phonemes, "Well then, ");
        assert_eq!(parts[1].phonemes, "the weather today is sunny with a light breeze.");
        assert_eq!(parts[1].words[0].phonemes, 0..3);
        assert_eq!(&parts[1].phonemes[parts[1].words[1].phonemes.clone()], "weather");
        // No break early: after six words.
        let parts = split_first(sentence("The weather today is sunny with a light breeze from the west."));
        assert_eq!(parts[0].text, "The weather today is sunny with");
        assert_eq!(parts[1].text, "a light breeze from the west.");
        assert_eq!(parts[0].phonemes, "The weather today is sunny with,");
        // One word then a comma is too short a clause: the cut waits for the next break.
        let parts = split_first(sentence("Yes, the weather today, as you see, is sunny with a light breeze."));
        assert_eq!(parts[0].text, "Yes, the weather today");
        // Short sentences stay whole.
        assert_eq!(split_first(sentence("It is sunny today.")).len(), 1);
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
        let parts = split_first(with_punctuation_in_words(sentence(
            "Well then, the weather today is sunny with a light breeze.",
        )));
        assert_eq!(parts[0].text, "Well then");
        assert_eq!(parts[0].phonemes, "Well then, ");
        // A sixth word ending in a comma is cut there without a second comma.
        let parts = split_first(with_punctuation_in_words(sentence(
            "The library closes early on Sundays, so we went on Saturday instead.",
        )));
        assert_eq!(parts[0].phonemes, "The library closes early on Sundays, ");
        assert_eq!(parts[1].text, "so we went on Saturday instead.");
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
