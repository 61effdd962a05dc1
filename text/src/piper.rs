//! Piper's voices (VITS, ONNX): text to the phoneme strings, and those to the phoneme ids, that
//! piper-tts 1.8.0 feeds its models, sentence by sentence.
//!
//! A Piper voice comes with `NAME.onnx.json`: its `phoneme_type` ([`Phonemizer`]) and its
//! `phoneme_id_map` ([`PhonemeIdMap`]). piper-tts reads text as follows, and so does this module:
//!
//! - `phoneme_type: espeak`: `[[ phonemes ]]` blocks are cut out and passed through as they are
//!   written; each piece of text between them is read by espeak-ng in the config's
//!   `espeak.voice`, clause by clause (`espeak_TextToPhonemesWithTerminator`, IPA, no ties):
//!   each clause's phonemes with the language switch flags (`(en)`) removed, its punctuation
//!   appended (`.` `?` `!`, or `,` `:` `;` and a space), decomposed (NFD) into code points; a
//!   sentence ends where espeak ends one, and each sentence is one model call. A block joins the
//!   sentence before it (with a space where the text had one), and the text after it joins the
//!   block's sentence.
//! - `phoneme_type: text`: the text's own code points (NFD), the whole text one sentence.
//! - ids ([`PhonemeIdMap::ids`]): `^ _ p1 _ p2 _ ... pn _ $`: each phoneme's ids from the map
//!   followed by the pad's, between the begin and end marks; phonemes missing from the map are
//!   dropped (with a warning).
//!
//! espeak-ng runs in the GPL helper program, as for Kokoro's languages ([`crate::espeak`]), in a
//! mode of its own (`piper:VOICE<TAB>TEXT`). Give it an [`Espeak`] made by
//! [`Espeak::for_piper`]: its helper loads piper-tts's own espeak-ng build (1.52.0.1 and its
//! data, which set-up takes from piper-tts's wheel into `.cache/espeak-piper`), with which every
//! sentence of text/tests/piper reads exactly as piper-tts reads it. Without that build it falls
//! back on Debian 12's espeak-ng 1.51, whose readings of some words differ (40-93% of the test
//! sentences identical, by language: text/tests/piper.rs), and which has no
//! `espeak_TextToPhonemesWithTerminator` (1.52 brought it): the helper then works each clause's
//! punctuation and sentence end out from the text that clause was read from, as espeak's
//! `ReadClause` does (tools/espeak-phonemes/README.md).
//!
//! Words: each whitespace-separated word of the text gets the phonemes of the espeak words it is
//! taken to have produced, aligned clause by clause as for Kokoro's languages (espeak usually
//! gives one word per word; a number gives several, and espeak joins some clitics to their
//! neighbour, as in French `qu'est-ce que`: the words it joined get empty ranges where the
//! alignment puts them). A clause's punctuation belongs to no word. A `[[ ]]` block's phonemes
//! go to the words written in it, in order.
//!
//! Sentences are not cut in chunks as the other front ends cut them: piper-tts gives the model a
//! whole sentence, however long. No markup is taken out (piper-tts reads markdown's marks as
//! espeak-ng reads them).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

use crate::espeak::{align, word_ranges, word_spans, Espeak, Tagged};
use crate::{Sentence, Word};

/// Beginning of sentence, the first phoneme of every sequence.
pub const BOS: &str = "^";
/// The pad that follows every phoneme.
pub const PAD: &str = "_";
/// End of sentence, the last phoneme of every sequence.
pub const EOS: &str = "$";

/// The helper's request prefix of Piper's mode.
const PREFIX: &str = "piper:";

/// A voice's `phoneme_id_map` (and `vowel_clusters`): phonemes to the ids its model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhonemeIdMap {
    ids: HashMap<String, Vec<i64>>,
    /// Runs of code points read as one phoneme (piper's `vowel_clusters`).
    clusters: HashSet<Vec<char>>,
    /// The longest cluster's length.
    longest: usize,
}

/// The ids of a phoneme string: what [`PhonemeIdMap::ids`] and [`PhonemeIdMap::char_tokens`]
/// give, and the phonemes that were dropped.
struct Layout {
    ids: Vec<i64>,
    tokens: Vec<Option<usize>>,
    missing: Vec<String>,
}

impl PhonemeIdMap {
    /// The map of phonemes (strings: one code point, or a vowel cluster's) to their ids. It must
    /// have [`BOS`], [`PAD`] and [`EOS`].
    pub fn new(ids: HashMap<String, Vec<i64>>) -> Result<PhonemeIdMap, String> {
        for mark in [BOS, PAD, EOS] {
            if !ids.contains_key(mark) {
                return Err(format!("the phoneme id map has no {mark:?}"));
            }
        }
        Ok(PhonemeIdMap { ids, clusters: HashSet::new(), longest: 0 })
    }

    /// The map of a config's `phoneme_id_map` (an object of phoneme -> list of ids).
    pub fn from_json(phoneme_id_map: &Value) -> Result<PhonemeIdMap, String> {
        let map = phoneme_id_map.as_object().ok_or("phoneme_id_map is not an object")?;
        let mut ids = HashMap::with_capacity(map.len());
        for (phoneme, v) in map {
            let list = v
                .as_array()
                .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<i64>>>())
                .ok_or_else(|| format!("phoneme_id_map[{phoneme:?}] is not a list of integers"))?;
            ids.insert(phoneme.clone(), list);
        }
        PhonemeIdMap::new(ids)
    }

    /// The map of a voice's config (`NAME.onnx.json`): its `phoneme_id_map`, and for a voice
    /// read with espeak its `vowel_clusters` (runs of phonemes merged into one, as piper-tts
    /// merges them).
    pub fn from_config(config: &Value) -> Result<PhonemeIdMap, String> {
        let map = config.get("phoneme_id_map").ok_or("the voice's config has no phoneme_id_map")?;
        let mut map = PhonemeIdMap::from_json(map)?;
        if Phonemizer::from_config(config).is_ok_and(|r| r != Phonemizer::Text) {
            let clusters = config.get("vowel_clusters").and_then(Value::as_array).into_iter().flatten();
            map = map.with_vowel_clusters(clusters.filter_map(|c| {
                c.as_array()?.iter().map(|p| p.as_str().map(str::to_string)).collect::<Option<Vec<String>>>()
            }));
        }
        Ok(map)
    }

    /// The same with runs of phonemes read as one (piper's `vowel_clusters`, e.g. `["a", "ɪ"]`
    /// read as `aɪ`). piper-tts's phonemes are single code points, so a cluster of longer
    /// strings never matches and is left out.
    pub fn with_vowel_clusters(mut self, clusters: impl IntoIterator<Item = Vec<String>>) -> PhonemeIdMap {
        for cluster in clusters {
            let chars: Option<Vec<char>> = cluster
                .iter()
                .map(|p| {
                    let mut c = p.chars();
                    c.next().filter(|_| c.next().is_none())
                })
                .collect();
            if let Some(chars) = chars.filter(|c| c.len() >= 2) {
                self.longest = self.longest.max(chars.len());
                self.clusters.insert(chars);
            }
        }
        self
    }

    /// The ids of one phoneme (a code point, or a vowel cluster), if the map has it.
    pub fn get(&self, phoneme: &str) -> Option<&[i64]> {
        self.ids.get(phoneme).map(Vec::as_slice)
    }

    /// The phonemes of a phoneme string as piper-tts reads it: its code points, with the runs
    /// that are vowel clusters merged (longest first, from the left).
    pub fn phonemes(&self, phonemes: &str) -> Vec<String> {
        self.groups(phonemes).into_iter().map(|(_, p)| p).collect()
    }

    /// Each phoneme with the char range it covers.
    fn groups(&self, phonemes: &str) -> Vec<(Range<usize>, String)> {
        let chars: Vec<char> = phonemes.chars().collect();
        let mut out = Vec::with_capacity(chars.len());
        let mut i = 0;
        while i < chars.len() {
            let longest = self.longest.min(chars.len() - i);
            let n = (2..=longest).rev().find(|&n| self.clusters.contains(&chars[i..i + n])).unwrap_or(1);
            out.push((i..i + n, chars[i..i + n].iter().collect()));
            i += n;
        }
        out
    }

    fn layout(&self, phonemes: &str) -> Layout {
        let pad = self.get(PAD).unwrap_or_default();
        let mut ids: Vec<i64> = self.get(BOS).unwrap_or_default().to_vec();
        ids.extend_from_slice(pad);
        let mut tokens = vec![None; phonemes.chars().count()];
        let mut missing = Vec::new();
        for (range, p) in self.groups(phonemes) {
            let Some(own) = self.get(&p) else {
                missing.push(p);
                continue;
            };
            let at = (!own.is_empty()).then_some(ids.len());
            tokens[range].fill(at);
            ids.extend_from_slice(own);
            ids.extend_from_slice(pad);
        }
        ids.extend_from_slice(self.get(EOS).unwrap_or_default());
        Layout { ids, tokens, missing }
    }

    /// The ids piper-tts gives the model for a sentence's phonemes ([`Sentence::phonemes`]):
    /// `^ _ p1 _ p2 _ ... pn _ $`, each phoneme's ids followed by the pad's; a phoneme missing
    /// from the map is dropped, with a warning (as piper-tts warns).
    pub fn ids(&self, phonemes: &str) -> Vec<i64> {
        let layout = self.layout(phonemes);
        if !layout.missing.is_empty() {
            tracing::warn!(missing = ?layout.missing, "phonemes missing from the voice's id map are dropped");
        }
        layout.ids
    }

    /// For each char of `phonemes`, the index in [`PhonemeIdMap::ids`]'s sequence of its
    /// phoneme's first id (`^` being index 0; the chars of a vowel cluster share one); `None`
    /// for a char whose phoneme was dropped (for word timings).
    pub fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        self.layout(phonemes).tokens
    }
}

/// How a Piper voice reads text: its config's `phoneme_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phonemizer {
    /// `espeak`: espeak-ng's phonemes in this espeak voice (`espeak.voice`: `en-us`, `de`, `es`,
    /// `fr`, `ru`, ...).
    Espeak(String),
    /// `text`: the text's own code points.
    Text,
}

/// One clause as espeak-ng reads it for Piper (the helper's answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// The chars of the text it was read from: up to its punctuation and the spaces after it.
    pub text: Range<usize>,
    /// espeak's IPA for it, language switch flags (`(en)`) left in.
    pub phonemes: String,
    /// Its punctuation as piper-tts appends it: `.` `?` `!` `,` `:` `;`, or none.
    pub terminator: Option<char>,
    /// Whether it ends a sentence.
    pub end_of_sentence: bool,
}

impl Phonemizer {
    /// The reading of a voice's config (`NAME.onnx.json`): `phoneme_type` (`espeak` when
    /// absent) and `espeak.voice`. The other types of piper-tts (`pinyin`, `hebrew`,
    /// `japanese`, `thai`) are refused.
    pub fn from_config(config: &Value) -> Result<Phonemizer, String> {
        match config.get("phoneme_type").and_then(Value::as_str).unwrap_or("espeak") {
            "espeak" => {
                let voice = config
                    .get("espeak")
                    .and_then(|e| e.get("voice"))
                    .and_then(Value::as_str)
                    .filter(|v| !v.trim().is_empty() && !v.contains(['\t', '\n', '\r']))
                    .ok_or("the voice's config has no espeak.voice")?;
                Ok(Phonemizer::Espeak(voice.to_string()))
            }
            "text" => Ok(Phonemizer::Text),
            other => Err(format!("Piper's phoneme_type {other:?} is not supported (espeak and text are)")),
        }
    }

    /// `text`'s sentences as piper-tts reads them, in order, each one model call: its
    /// [`Sentence::phonemes`] the exact string whose ids ([`PhonemeIdMap::ids`]) piper-tts
    /// feeds the model, its words mapped to their phonemes. Sentences with no phonemes are left
    /// out (piper-tts skips them). Fails when espeak-ng's helper does.
    pub fn sentences(&self, espeak: &Espeak, text: &str) -> Result<Vec<Sentence>, String> {
        match self {
            Phonemizer::Espeak(voice) => read_espeak(espeak, voice, text),
            Phonemizer::Text => Ok(read_text(text)),
        }
    }

    /// `text`'s sentences, as slices of it that [`Phonemizer::sentences`] reads one at a time
    /// as it reads them in the whole text: cut where espeak-ng ends a sentence (after its
    /// punctuation and the spaces after it; the helper reads the text once more for it). A text
    /// with `[[ ]]` blocks, a `text` voice's text, or a text the helper fails on is one piece
    /// (none for an empty text). An espeak voice's pieces of nothing but spaces are left out.
    pub fn split_sentences<'a>(&self, espeak: &Espeak, text: &'a str) -> Vec<&'a str> {
        let whole = || if text.is_empty() { vec![] } else { vec![text] };
        let Phonemizer::Espeak(voice) = self else { return whole() };
        if text.contains("[[") {
            return whole();
        }
        let clauses = match clauses(espeak, voice, &[text]) {
            Ok(mut c) => c.pop().unwrap_or_default(),
            Err(e) => {
                tracing::warn!(voice = %voice, "espeak-ng: {e}");
                return whole();
            }
        };
        let offsets: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
        let mut out = Vec::new();
        let mut start = 0usize;
        for c in clauses.iter().filter(|c| c.end_of_sentence) {
            let end = offsets[c.text.end.min(offsets.len() - 1)];
            if end > start {
                out.push(&text[start..end]);
                start = end;
            }
        }
        out.push(&text[start..]);
        out.retain(|p| !p.trim().is_empty());
        out
    }
}

/// espeak-ng's clauses of each of `texts` read in espeak voice `voice` for Piper (one request
/// to the helper, each text a line).
pub fn clauses(espeak: &Espeak, voice: &str, texts: &[&str]) -> Result<Vec<Vec<Clause>>, String> {
    if voice.trim().is_empty() || voice.contains(['\t', '\n', '\r']) {
        return Err(format!("espeak-ng: {voice:?} is not a voice name"));
    }
    let requests: Vec<String> = texts.iter().map(|t| format!("{PREFIX}{voice}\t{}", escape(t))).collect();
    let answers = espeak.request(&requests).map_err(|e| {
        if e.contains(PREFIX) {
            format!(
                "{e}: the helper predates Piper's mode: rebuild it (cargo build --release --manifest-path \
                 tools/espeak-phonemes/Cargo.toml)"
            )
        } else {
            e
        }
    })?;
    answers.iter().map(|a| parse_clauses(a)).collect()
}

/// The helper's text escapes: backslash, line feed, carriage return and tab.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

/// The helper's answer: per clause `END<TAB>TERMINATOR<TAB>EOS<TAB>PHONEMES`, all tab-separated.
fn parse_clauses(answer: &str) -> Result<Vec<Clause>, String> {
    if answer.is_empty() {
        return Ok(Vec::new());
    }
    let bad = || format!("espeak-ng's helper gave a malformed answer for Piper: {answer:?}");
    let fields: Vec<&str> = answer.split('\t').collect();
    if !fields.len().is_multiple_of(4) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(fields.len() / 4);
    let mut start = 0usize;
    for f in fields.chunks(4) {
        let end: usize = f[0].parse().map_err(|_| bad())?;
        let mut t = f[1].chars();
        let terminator = t.next();
        if t.next().is_some() || end < start {
            return Err(bad());
        }
        out.push(Clause { text: start..end, phonemes: f[3].to_string(), terminator, end_of_sentence: f[2] == "1" });
        start = end;
    }
    Ok(out)
}

/// Python's `str.isspace` (what `str.strip` strips).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// piper-tts's `_PHONEME_BLOCK_PATTERN.split(text)` (`(\[\[.*?\]\])`, `.` not matching a line
/// break): the pieces of `chars` in order, each with whether piper reads it as a block (it does
/// for every piece that starts with `[[`). Pieces of text come between blocks and at both ends,
/// empty or not.
fn blocks(chars: &[char]) -> Vec<(Range<usize>, bool)> {
    let n = chars.len();
    let mut out = Vec::new();
    let (mut last, mut i) = (0, 0);
    while i + 1 < n {
        if chars[i] == '[' && chars[i + 1] == '[' {
            let close = (i + 2..n.saturating_sub(1))
                .take_while(|&j| chars[j] != '\n')
                .find(|&j| chars[j] == ']' && chars[j + 1] == ']');
            if let Some(j) = close {
                out.push((last..i, false));
                out.push((i..j + 2, true));
                last = j + 2;
                i = j + 2;
                continue;
            }
        }
        i += 1;
    }
    out.push((last..n, false));
    for (r, raw) in &mut out {
        *raw = chars[r.clone()].starts_with(&['[', '[']);
    }
    out
}

/// A sentence being put together: its phonemes (each char with the word it is taken to come
/// from) and the chars of the text it was read from.
#[derive(Default)]
struct Building {
    tagged: Tagged,
    span: Option<Range<usize>>,
}

impl Building {
    fn cover(&mut self, r: Range<usize>) {
        self.span = Some(match self.span.take() {
            Some(s) => s.start.min(r.start)..s.end.max(r.end),
            None => r,
        });
    }

    fn append(&mut self, other: Building) {
        self.tagged.extend(other.tagged);
        if let Some(r) = other.span {
            self.cover(r);
        }
    }
}

/// Where a word is taken to be: its first letter or digit (a word's opening quote may be read
/// with the clause before it), else its first char.
fn anchor(chars: &[char], w: &Range<usize>) -> usize {
    chars[w.clone()].iter().position(|c| c.is_alphanumeric()).map_or(w.start, |k| w.start + k)
}

/// The words (indices into `words`) anchored in `span`, in order.
fn words_in(chars: &[char], words: &[Range<usize>], span: &Range<usize>) -> Range<usize> {
    let first = words.partition_point(|w| w.end <= span.start);
    let mut k = first;
    while k < words.len() && words[k].start < span.end {
        k += 1;
    }
    let inside: Vec<usize> = (first..k).filter(|&w| span.contains(&anchor(chars, &words[w]))).collect();
    match (inside.first(), inside.last()) {
        (Some(&a), Some(&b)) => a..b + 1,
        _ => first..first,
    }
}

/// `said` (phoneme words) tagged with the words of `words[within]` they are aligned to.
fn tag_words(chars: &[char], words: &[Range<usize>], within: Range<usize>, said: &str) -> Tagged {
    let written: Vec<&[char]> = words[within.clone()].iter().map(|w| &chars[w.clone()]).collect();
    let pieces: Vec<&str> = said.split(' ').collect();
    let spoken: Vec<usize> = (0..pieces.len()).filter(|&k| !pieces[k].is_empty()).collect();
    let mut owner: Vec<Option<usize>> = vec![None; pieces.len()];
    if !written.is_empty() {
        let heard: Vec<&str> = spoken.iter().map(|&k| pieces[k]).collect();
        for (&k, j) in spoken.iter().zip(align(&written, &heard)) {
            owner[k] = Some(within.start + j);
        }
    }
    let mut out = Tagged::with_capacity(said.len());
    for (k, piece) in pieces.iter().enumerate() {
        if k > 0 {
            out.push((' ', None));
        }
        out.extend(piece.chars().map(|c| (c, owner[k])));
    }
    out
}

/// piper-tts's `re.sub(r"\([^)]+\)", "", phonemes)`: language switch flags removed.
fn remove_flags(phonemes: &str) -> String {
    let chars: Vec<char> = phonemes.chars().collect();
    let mut out = String::with_capacity(phonemes.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '(' {
            if let Some(k) = chars[i + 1..].iter().position(|&c| c == ')').filter(|&k| k > 0) {
                i += k + 2;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// NFD of a tagged string, each char's decomposition keeping its tag (NFD reorders combining
/// marks only among those of one base char, which come from one word).
fn nfd(tagged: Tagged) -> Tagged {
    let whole: Vec<char> = tagged.iter().map(|t| t.0).collect::<String>().nfd().collect();
    let tags: Vec<Option<usize>> = tagged.iter().flat_map(|&(c, t)| std::iter::once(c).nfd().map(move |_| t)).collect();
    if tags.len() == whole.len() {
        whole.into_iter().zip(tags).collect()
    } else {
        whole.into_iter().map(|c| (c, None)).collect()
    }
}

/// One clause's phonemes as piper-tts appends them to its sentence: flags removed, its
/// punctuation (and a space after `,` `:` `;`), NFD. `base` is where the clause's text starts
/// in `chars`.
fn clause_phonemes(chars: &[char], words: &[Range<usize>], base: usize, clause: &Clause) -> Tagged {
    let span = base + clause.text.start..base + clause.text.end;
    let said = remove_flags(&clause.phonemes);
    let mut out = tag_words(chars, words, words_in(chars, words, &span), &said);
    if let Some(t) = clause.terminator {
        out.push((t, None));
        if matches!(t, ',' | ':' | ';') {
            out.push((' ', None));
        }
    }
    nfd(out)
}

/// `text` read with espeak-ng's voice `voice`, as piper-tts's `PiperVoice.phonemize` reads it.
fn read_espeak(espeak: &Espeak, voice: &str, text: &str) -> Result<Vec<Sentence>, String> {
    let chars: Vec<char> = text.chars().collect();
    let words = word_ranges(&chars);
    let parts = blocks(&chars);
    let texts: Vec<String> = parts.iter().filter(|p| !p.1).map(|p| chars[p.0.clone()].iter().collect()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut answers = clauses(espeak, voice, &refs)?.into_iter();
    let mut sentences: Vec<Building> = Vec::new();
    let mut after_block = false;
    for (k, (range, raw)) in parts.iter().enumerate() {
        if *raw {
            after_block = true;
            if sentences.is_empty() {
                sentences.push(Building::default());
            }
            let last = sentences.last_mut().expect("not empty");
            if k > 0 && chars[parts[k - 1].0.clone()].last() == Some(&' ') {
                last.tagged.push((' ', None));
            }
            // text_part[2:-2].strip()
            let inner = &chars[range.start + 2..range.end.saturating_sub(2).max(range.start + 2)];
            let lead = inner.iter().take_while(|&&c| py_space(c)).count();
            let trail = inner[lead..].iter().rev().take_while(|&&c| py_space(c)).count();
            let inner: String = inner[lead..inner.len() - trail].iter().collect();
            let said: String = inner.split(py_space).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ");
            let mut tagged = tag_words(&chars, &words, words_in(&chars, &words, range), &said);
            // The block's own chars, as written (its words' tags laid over them in order).
            let mut tags = tagged.iter().filter(|t| t.0 != ' ').map(|t| t.1);
            tagged = inner.chars().map(|c| (c, if py_space(c) { None } else { tags.next().flatten() })).collect();
            last.tagged.extend(tagged);
            if k + 1 < parts.len() && chars[parts[k + 1].0.clone()].first() == Some(&' ') {
                last.tagged.push((' ', None));
            }
            last.cover(range.clone());
            continue;
        }
        let clauses = answers.next().unwrap_or_default();
        // EspeakPhonemizer.phonemize: clauses into sentences.
        let mut read: Vec<Building> = Vec::new();
        let mut current = Building::default();
        for c in &clauses {
            current.tagged.extend(clause_phonemes(&chars, &words, range.start, c));
            current.cover(range.start + c.text.start..range.start + c.text.end);
            if c.end_of_sentence {
                read.push(std::mem::take(&mut current));
            }
        }
        if !current.tagged.is_empty() {
            read.push(current);
        }
        let mut read = read.into_iter();
        if after_block {
            if let (Some(first), Some(last)) = (read.next(), sentences.last_mut()) {
                last.append(first);
            }
        }
        sentences.extend(read);
        after_block = false;
    }
    Ok(sentences.into_iter().filter_map(|b| finish(text, &chars, &words, b)).collect())
}

/// A sentence of `text` (read as `chars`, whose words are `words`) from what was put together;
/// None when it has no phonemes.
fn finish(text: &str, chars: &[char], words: &[Range<usize>], b: Building) -> Option<Sentence> {
    if b.tagged.is_empty() {
        return None;
    }
    let span = b.span.unwrap_or(0..chars.len());
    let mine = words_in(chars, words, &span);
    let local: Tagged =
        b.tagged.iter().map(|&(c, t)| (c, t.filter(|w| mine.contains(w)).map(|w| w - mine.start))).collect();
    let spans = word_spans(&local, mine.len());
    let offsets: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let mut out: Vec<Word> = Vec::new();
    for (w, phonemes) in words[mine].iter().zip(spans) {
        // A word of letters espeak-ng read together with the one before ("in the": `ɪnðə`)
        // joins it: one front-end word for both, whose time the word timings share by length.
        if let Some(last) = out.last_mut().filter(|last| {
            phonemes.is_empty() && !last.phonemes.is_empty() && chars[w.clone()].iter().any(|c| c.is_alphabetic())
        }) {
            last.text = chars[last.chars.start..w.end].iter().collect();
            last.text_range.end = offsets[w.end];
            last.chars.end = w.end;
            continue;
        }
        out.push(Word {
            text: chars[w.clone()].iter().collect(),
            text_range: offsets[w.start]..offsets[w.end],
            chars: w.clone(),
            phonemes,
        });
    }
    let words = out;
    let covered = &text[offsets[span.start.min(chars.len())]..offsets[span.end.min(chars.len())]];
    Some(Sentence { text: covered.trim().to_string(), phonemes: b.tagged.iter().map(|t| t.0).collect(), words })
}

/// `text` read by a `phoneme_type: text` voice: its code points (NFD), one sentence.
fn read_text(text: &str) -> Vec<Sentence> {
    let chars: Vec<char> = text.chars().collect();
    let words = word_ranges(&chars);
    let tagged: Tagged =
        chars.iter().enumerate().map(|(i, &c)| (c, words.iter().position(|w| w.contains(&i)))).collect();
    let b = Building { tagged: nfd(tagged), span: Some(0..chars.len()) };
    finish(text, &chars, &words, b).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> PhonemeIdMap {
        let ids =
            [("_", 0), ("^", 1), ("$", 2), (" ", 3), ("a", 14), ("ɪ", 74), ("b", 15), ("aɪ", 161), ("\u{303}", 141)];
        PhonemeIdMap::new(ids.iter().map(|&(p, i)| (p.to_string(), vec![i])).collect()).unwrap()
    }

    #[test]
    fn ids_are_laid_out_as_piper_does() {
        let m = map();
        assert_eq!(m.ids(""), vec![1, 0, 2]);
        assert_eq!(m.ids("ab a"), vec![1, 0, 14, 0, 15, 0, 3, 0, 14, 0, 2]);
        // A phoneme missing from the map is dropped.
        assert_eq!(m.ids("aXb"), vec![1, 0, 14, 0, 15, 0, 2]);
        assert_eq!(m.char_tokens("aXb"), vec![Some(2), None, Some(4)]);
        // Clusters only with vowel_clusters.
        assert_eq!(m.ids("aɪ"), vec![1, 0, 14, 0, 74, 0, 2]);
        let m = m.with_vowel_clusters([vec!["a".to_string(), "ɪ".to_string()]]);
        assert_eq!(m.ids("baɪa"), vec![1, 0, 15, 0, 161, 0, 14, 0, 2]);
        assert_eq!(m.char_tokens("baɪa"), vec![Some(2), Some(4), Some(4), Some(6)]);
        assert_eq!(m.phonemes("baɪa"), vec!["b", "aɪ", "a"]);
    }

    #[test]
    fn a_config_gives_its_map_and_reading() {
        let config = serde_json::json!({
            "espeak": {"voice": "de"},
            "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [14]},
            "vowel_clusters": [["a", "a"]],
        });
        assert_eq!(Phonemizer::from_config(&config), Ok(Phonemizer::Espeak("de".into())));
        assert_eq!(PhonemeIdMap::from_config(&config).unwrap().phonemes("aaa"), vec!["aa", "a"]);
        let text = serde_json::json!({"phoneme_type": "text", "phoneme_id_map": {"_": [0], "^": [1], "$": [2]}});
        assert_eq!(Phonemizer::from_config(&text), Ok(Phonemizer::Text));
        let pinyin = serde_json::json!({"phoneme_type": "pinyin"});
        assert!(Phonemizer::from_config(&pinyin).unwrap_err().contains("pinyin"));
        assert!(PhonemeIdMap::from_config(&serde_json::json!({"phoneme_id_map": {"a": [1]}})).is_err());
    }

    #[test]
    fn blocks_are_cut_as_piper_cuts_them() {
        let cut = |t: &str| -> Vec<(String, bool)> {
            let chars: Vec<char> = t.chars().collect();
            blocks(&chars).into_iter().map(|(r, raw)| (chars[r].iter().collect(), raw)).collect()
        };
        let s = |x: &str, raw| (x.to_string(), raw);
        assert_eq!(cut("a [[ b ]] c"), vec![s("a ", false), s("[[ b ]]", true), s(" c", false)]);
        assert_eq!(
            cut("[[a]][[b]]"),
            vec![s("", false), s("[[a]]", true), s("", false), s("[[b]]", true), s("", false)]
        );
        assert_eq!(cut("[[a\n]] x"), vec![s("[[a\n]] x", true)]);
        assert_eq!(cut("plain"), vec![s("plain", false)]);
    }

    #[test]
    fn flags_are_removed_as_piper_removes_them() {
        assert_eq!(remove_flags("ʒɛm lə (en)fʊtbɔːl(fr) a"), "ʒɛm lə fʊtbɔːl a");
        assert_eq!(remove_flags("a () b (c"), "a () b (c");
    }

    #[test]
    fn answers_are_parsed() {
        let c = parse_clauses("7\t,\t0\thəlˈoʊ\t14\t!\t1\twˈɜːld\t15\t\t1\t").unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[0],
            Clause { text: 0..7, phonemes: "həlˈoʊ".into(), terminator: Some(','), end_of_sentence: false }
        );
        assert_eq!((c[1].text.clone(), c[1].terminator, c[1].end_of_sentence), (7..14, Some('!'), true));
        assert_eq!((c[2].text.clone(), c[2].terminator), (14..15, None));
        assert!(parse_clauses("1\t.\t1").is_err());
        assert_eq!(parse_clauses(""), Ok(vec![]));
        assert_eq!(escape("a\\b\nc\td"), "a\\\\b\\nc\\td");
    }

    #[test]
    fn text_voices_read_code_points() {
        let s = read_text("Ça va");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].phonemes, "C\u{327}a va");
        assert_eq!(s[0].words.iter().map(|w| w.phonemes.clone()).collect::<Vec<_>>(), vec![0..3, 4..6]);
        assert!(read_text("").is_empty());
    }
}
