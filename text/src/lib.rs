//! speechstream-text: the text front end of speechstream's voices, in plain Rust (no libtorch, no
//! async runtime). It turns written text into the phoneme strings a voice reads, sentence by
//! sentence, and keeps, for each word of the input, the range of phonemes it produced (for word
//! timestamps).
//!
//! - [`spoken`]: the spoken-form normaliser (numbers, money, dates and times, units, URLs,
//!   e-mail addresses, abbreviations, markdown, HTML, emoji, ...), with a request's and the
//!   server's pronunciations ([`spoken::Pronunciations`]); [`normalize`] is hibari's own
//!   normalisation, kept for parity checks against its Python package.
//! - [`FrontEnd`]: English G2P, a port of misaki 0.9.4 without spaCy or espeak: normalise ->
//!   tokenise ([`tokenize`]) -> tag ([`tagger`]) -> lexicon ([`lexicon`], American or British)
//!   -> out-of-vocabulary guess -> stress resolution, giving hibari's (and Kokoro's English)
//!   phoneme strings.
//! - [`japanese`]: Japanese G2P (Kokoro's Japanese voices): MeCab's analysis ([`mecab`]) over
//!   Open JTalk's naist-jdic, misaki's kana rules ([`kana`]).
//! - [`mandarin`]: Mandarin G2P (Kokoro's Mandarin voices): misaki's legacy G2P on jieba's words.
//! - [`espeak`]: espeak-ng's readings, as misaki's `EspeakG2P` gives them, for Kokoro's Spanish,
//!   French, Hindi, Italian and Brazilian Portuguese voices: espeak-ng runs in a separate
//!   program (`tools/espeak-phonemes`) over a pipe, so that its GPL-3+ stays out of this
//!   Apache-2.0 crate.
//! - [`piper`]: Piper's voices: the phoneme strings and ids that piper-tts 1.8 feeds its models
//!   (espeak-ng's clauses through the helper of [`espeak`], or a `text` voice's code points).
//! - [`split`]: sentence and clause splitting as hibari's `tts.py` does, within the model's caps
//!   ([`MAX_SENTENCE_CHARS`], [`MAX_PHONEMES`], [`MAX_CHUNK_PHONEMES`]).
//! - [`assets`]: reading the voice's lexicons, tagger and tables (gzipped JSON).
//!
//! It is not a voice and runs no network. The one neural step of the English front end, the
//! out-of-vocabulary guesser (misaki's OOV net), is behind the [`Oov`] trait: the engine crate
//! (speechstream-engine-libtorch) implements it on libtorch and builds the full front end with
//! it; a [`FrontEnd`] without one leaves the words that no lexicon has unspoken.
//!
//! A language's front end is a module beside [`japanese`] giving [`Sentence`]s with their
//! [`Word`]s, and a variant of [`Reader`].
//!
//! The spoken form needs no assets:
//!
//! ```
//! use speechstream_text::spoken::{verbalize, Pronunciations, TextOptions};
//! let spoken = verbalize("It costs $3.50.", &TextOptions::default(), &Pronunciations::new());
//! assert_eq!(spoken.text, "It costs three dollars and fifty cents.");
//! ```
//!
//! The G2P reads the voice's lexicons, tagger and tables (speechstream's scripts/setup-voice.sh
//! hibari puts them in .cache/hibari):
//!
//! ```no_run
//! use speechstream_text::FrontEnd;
//! let fe = FrontEnd::load(".cache/hibari", None).unwrap(); // no OOV guesser
//! for s in fe.sentences("Dr. Smith paid $9.99. It's 7:30 pm.") {
//!     println!("{} -> {}", s.text, s.phonemes);
//! }
//! ```

#![warn(missing_docs)]

pub mod assets;
/// espeak-ng's languages (Spanish, French, Hindi, Italian, Portuguese, ...) through a separate GPL helper program.
pub mod espeak;
pub mod japanese;
pub mod kana;
pub mod lexicon;
/// Mandarin G2P for Kokoro's `z` voices (misaki's legacy zh path: cn2an, jieba, pypinyin, IPA).
pub mod mandarin;
pub mod mecab;
pub mod normalize;
pub mod numbers;
pub mod piper;
pub mod pystr;
pub mod split;
pub mod spoken;
pub mod tagger;
pub mod tokenize;

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fancy_regex::Regex;
use serde_json::Value;

use lexicon::{apply_stress, is_consonant, is_vowel, stress_weight, Ctx, Dict, LexToken, Lexicon, PRIMARY};
use normalize::Normalizer;
use spoken::{Pronunciations, TextOptions};
use tagger::Tagger;
use tokenize::Tokenizer;

pub use split::{split_clauses, split_sentences, MAX_CHUNK_PHONEMES, MAX_PHONEMES, MAX_SENTENCE_CHARS};

/// A front end as a request's job holds it: English (either accent), Japanese, Mandarin, one of
/// espeak-ng's languages (by its espeak voice name: `es`, `fr-fr`, `hi`, `it`, `pt-br`), or a
/// Piper voice's reading.
#[derive(Clone)]
pub enum Reader {
    /// misaki's English G2P ([`FrontEnd`]).
    English(Arc<FrontEnd>),
    /// Japanese ([`japanese::Japanese`]).
    Japanese(Arc<japanese::Japanese>),
    /// Mandarin ([`mandarin::Mandarin`]).
    Mandarin(Arc<mandarin::Mandarin>),
    /// espeak-ng's reading of a language ([`espeak::Espeak`]), by its espeak voice name.
    Espeak(Arc<espeak::Espeak>, String),
    /// A Piper voice's reading ([`piper::Phonemizer`]), as piper-tts reads text: each sentence
    /// is one model call, not cut in chunks.
    Piper(Arc<espeak::Espeak>, piper::Phonemizer),
}

impl Reader {
    /// `text`'s sentences, as slices of it.
    pub fn split_sentences<'a>(&self, text: &'a str) -> Vec<&'a str> {
        match self {
            Reader::English(fe) => fe.split_sentences(text),
            Reader::Japanese(ja) => ja.split_sentences(text),
            Reader::Mandarin(zh) => zh.split_sentences(text),
            Reader::Espeak(espeak, _) => espeak.split_sentences(text),
            Reader::Piper(espeak, reading) => reading.split_sentences(espeak, text),
        }
    }

    /// `text`'s sentences with their words (a request's pronunciations apply to English only).
    /// espeak-ng's program failing mid-request (it was found when the request began) gives no
    /// sentence, logged.
    pub fn sentences_with(&self, text: &str, prons: &Pronunciations) -> Vec<Sentence> {
        match self {
            Reader::English(fe) => fe.sentences_with(text, prons),
            Reader::Japanese(ja) => ja.sentences(text),
            Reader::Mandarin(zh) => zh.sentences(text),
            Reader::Espeak(espeak, language) => espeak.sentences(language, text).unwrap_or_else(|e| {
                tracing::warn!(language = %language, "espeak-ng: {e}");
                Vec::new()
            }),
            Reader::Piper(espeak, reading) => reading.sentences(espeak, text).unwrap_or_else(|e| {
                tracing::warn!(reading = ?reading, "espeak-ng: {e}");
                Vec::new()
            }),
        }
    }
}

/// Errors loading the front end's assets.
#[derive(Debug)]
pub enum G2pError {
    /// A file (named) that could not be read.
    Io(String, std::io::Error),
    /// A file's content that could not be used, with what was wrong.
    Data(String),
}

impl std::fmt::Display for G2pError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            G2pError::Io(p, e) => write!(f, "{p}: {e} (run scripts/setup-voice.sh hibari to get the voice assets)"),
            G2pError::Data(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for G2pError {}

/// A guesser of the phonemes of words that no lexicon has (misaki's OOV net, in the engine crate
/// on libtorch). [`FrontEnd`] asks it for each alphabetic piece of a word it could not read,
/// one at a time (it holds it behind a mutex, so an implementation need only be `Send`).
pub trait Oov: Send {
    /// The phonemes of `word` (letters, as written: any case, maybe with an apostrophe) in the
    /// front end's alphabet, or `None` when there is no guess (the piece is then not spoken).
    fn phonemize(&mut self, word: &str) -> Option<String>;
}

/// One word (or a run of words read together, like "7:30 pm") of a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word as it is in the input text.
    pub text: String,
    /// Byte range of the word in the text given to [`FrontEnd::sentences`].
    pub text_range: Range<usize>,
    /// The same range in characters (Unicode scalar values).
    pub chars: Range<usize>,
    /// Range of the phoneme characters (Unicode chars, not bytes) in [`Sentence::phonemes`] it produced
    /// (empty for a word that is not spoken).
    pub phonemes: Range<usize>,
}

/// A piece of text the model sees at once: a sentence, or a clause chunk of a long one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    /// The input text it covers.
    pub text: String,
    /// Phoneme string in the model's alphabet (at most [`MAX_PHONEMES`] chars unless one clause is
    /// longer, never more than [`MAX_CHUNK_PHONEMES`]; a Piper voice's sentence is not cut, as
    /// piper-tts does not cut it: see [`piper`]).
    pub phonemes: String,
    /// The words of `text`, in order, with their phoneme ranges.
    pub words: Vec<Word>,
}

/// A phonemised line: the phoneme string and, per output token, its phoneme char range and the
/// char range of the input line it came from.
#[derive(Debug, Clone)]
pub struct Phonemized {
    /// The phoneme string, trimmed.
    pub phonemes: String,
    /// Per token: (its phoneme char range, the char range of the line it came from).
    pub spans: Vec<(Range<usize>, Range<usize>)>,
}

#[derive(Debug, Clone)]
struct Tok {
    text: String,
    tag: String,
    ws: bool,
    phonemes: Option<String>,
    is_head: bool,
    alias: Option<String>,
    currency: Option<String>,
    prespace: bool,
    /// Char range in the normalised text.
    start: usize,
    end: usize,
}

impl Tok {
    fn lex(&self) -> LexToken<'_> {
        LexToken {
            text: &self.text,
            alias: self.alias.as_deref(),
            tag: &self.tag,
            currency: self.currency.as_deref(),
            is_head: self.is_head,
        }
    }
}

enum WordToks {
    One(Tok),
    Many(Vec<Tok>),
}

/// Chars of the longest run of tokens read as one word: the lexicon's longest key is 45 chars,
/// plus room for a suffix ("-s", "-ing") and an apostrophe.
const MAX_MERGE_CHARS: usize = 64;
/// Tokens of the longest run read as one word: a dotted acronym of 8 letters (longer ones are
/// spelled 8 letters at a time). Runs of one-char tokens ("a1a1...", "a/b/c/...") would otherwise
/// cost 64 failed readings per token.
const MAX_MERGE_TOKENS: usize = 16;

const SUBTOKEN_JUNKS: &str = "',-._‘’/";
const PUNCTS: &str = ";:,.!?—…\"“”";
const NON_QUOTE_PUNCTS: &str = ";:,.!?—…";
const PUNCT_TAGS: [&str; 10] = [".", ",", "-LRB-", "-RRB-", "``", "\"\"", "''", ":", "$", "#"];

fn symbol_phonemes(c: char) -> &'static str {
    match c {
        '/' => "slˈæʃ",
        '=' => "ˈikwᵊlz",
        '+' => "plˈʌs",
        '&' => "ænd",
        '@' => "æt",
        '%' => "pəɹsˈɛnt",
        '#' => "hˈæʃ",
        '*' => "ˈæstəɹˌɪsk",
        '~' => "tˈɪldə",
        '^' => "kˈɛɹət",
        '<' => "lˈɛs ðən",
        '>' => "ɡɹˈATəɹ ðən",
        '—' => "—",
        _ => "",
    }
}

fn merge(tokens: &[Tok], unk: Option<&str>) -> Tok {
    let mut text = String::new();
    for (i, t) in tokens.iter().enumerate() {
        text.push_str(&t.text);
        if i + 1 < tokens.len() && t.ws {
            text.push(' ');
        }
    }
    let phonemes = unk.map(|unk| {
        let mut ps = String::new();
        for t in tokens {
            let tp = t.phonemes.as_deref();
            if t.prespace && !ps.is_empty() && !ps.ends_with(char::is_whitespace) && tp.is_some_and(|p| !p.is_empty()) {
                ps.push(' ');
            }
            ps.push_str(tp.unwrap_or(unk));
        }
        ps
    });
    let weight =
        |t: &Tok| t.text.chars().map(|c| if c.to_lowercase().eq(std::iter::once(c)) { 1 } else { 2 }).sum::<usize>();
    let mut best = &tokens[0];
    for t in &tokens[1..] {
        if weight(t) > weight(best) {
            best = t;
        }
    }
    let currency = tokens.iter().filter_map(|t| t.currency.clone()).max();
    Tok {
        text,
        tag: best.tag.clone(),
        ws: tokens[tokens.len() - 1].ws,
        phonemes,
        is_head: tokens[0].is_head,
        alias: None,
        currency,
        prespace: tokens[0].prespace,
        start: tokens.iter().map(|t| t.start).min().unwrap_or(0),
        end: tokens.iter().map(|t| t.end).max().unwrap_or(0),
    }
}

fn token_context(ctx: Ctx, ps: Option<&str>, tk: &Tok) -> Ctx {
    let mut vowel = ctx.future_vowel;
    if let Some(ps) = ps {
        if let Some(c) = ps.chars().find(|&c| is_vowel(c) || is_consonant(c) || NON_QUOTE_PUNCTS.contains(c)) {
            vowel = if NON_QUOTE_PUNCTS.contains(c) { None } else { Some(is_vowel(c)) };
        }
    }
    let future_to =
        matches!(tk.text.as_str(), "to" | "To") || (tk.text == "TO" && matches!(tk.tag.as_str(), "TO" | "IN"));
    Ctx { future_vowel: vowel, future_to }
}

fn resolve_tokens(tokens: &mut [Tok]) {
    let n = tokens.len();
    let mut text = String::new();
    for (i, t) in tokens.iter().enumerate() {
        text.push_str(&t.text);
        if i + 1 < n && t.ws {
            text.push(' ');
        }
    }
    let cats: HashSet<u8> = text
        .chars()
        .filter(|c| !SUBTOKEN_JUNKS.contains(*c))
        .map(|c| {
            if c.is_alphabetic() {
                0
            } else if c.is_ascii_digit() {
                1
            } else {
                2
            }
        })
        .collect();
    let prespace = text.contains(' ') || text.contains('/') || cats.len() > 1;
    for (i, tk) in tokens.iter_mut().enumerate() {
        if tk.phonemes.is_none() {
            if i == n - 1 && tk.text.chars().count() == 1 && NON_QUOTE_PUNCTS.contains(tk.text.as_str()) {
                tk.phonemes = Some(tk.text.clone());
            } else if tk.text.chars().all(|c| SUBTOKEN_JUNKS.contains(c)) {
                tk.phonemes = Some(String::new());
            }
        } else if i > 0 {
            tk.prespace = prespace;
        }
    }
    if prespace {
        return;
    }
    let mut indices: Vec<(bool, usize, usize)> = tokens
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            t.phonemes.as_deref().filter(|p| !p.is_empty()).map(|p| (p.contains(PRIMARY), stress_weight(p), i))
        })
        .collect();
    if indices.len() == 2 && tokens[indices[0].2].text.chars().count() == 1 {
        let i = indices[1].2;
        tokens[i].phonemes = tokens[i].phonemes.as_deref().map(|p| apply_stress(p, Some(-0.5)));
        return;
    }
    let primaries = indices.iter().filter(|x| x.0).count();
    if indices.len() < 2 || primaries <= indices.len().div_ceil(2) {
        return;
    }
    let half = indices.len() / 2;
    indices.sort();
    for &(_, _, i) in &indices[..half] {
        tokens[i].phonemes = tokens[i].phonemes.as_deref().map(|p| apply_stress(p, Some(-0.5)));
    }
}

/// The G2P of one accent, with the splitter's titles.
pub struct FrontEnd {
    normalizer: Normalizer,
    titles: HashSet<String>,
    tokenizer: Tokenizer,
    tagger: Tagger,
    lexicon: Lexicon,
    /// The guesser for words no lexicon has. Behind a mutex so the front end is `Sync` (the
    /// engine's, on tch tensors, is only `Send`).
    oov: Option<Mutex<Box<dyn Oov>>>,
    subtoken: Regex,
    fallback_piece: Regex,
    link: Regex,
    /// Runs of single capital letters ("F B I").
    letters: Regex,
    /// The hyphen of "twenty-four".
    tens_hyphen: Regex,
    /// The spoken-form normaliser's markup options.
    options: TextOptions,
    /// Server-wide pronunciations (`--lexicon`).
    pronunciations: Pronunciations,
    /// hibari's own normalisation (`normalize.json`) instead of the spoken form ([`spoken`]): the
    /// reference's readings, for parity checks.
    reference: bool,
}

fn read_json(path: &Path) -> Result<Value, G2pError> {
    assets::parse(path, &assets::read_text(path)?)
}

/// A lexicon file.
fn read_dict(path: &Path) -> Result<Dict, G2pError> {
    Dict::from_json(&assets::read_text(path)?).map_err(|e| G2pError::Data(format!("{}: {e}", path.display())))
}

impl FrontEnd {
    /// The American front end (the "heart" voice) from the assets directory (`.cache/hibari`),
    /// with `oov` guessing the words no lexicon has (see [`FrontEnd::load_accent`]).
    pub fn load(assets: impl AsRef<Path>, oov: Option<Box<dyn Oov>>) -> Result<FrontEnd, G2pError> {
        Self::load_accent(assets, false, oov)
    }

    /// The front end of one accent from the assets directory (`.cache/hibari`: normalisation,
    /// tokenizer exceptions, tagger, lexicons). `british`: misaki's British lexicon and rules.
    /// `oov` reads the words that no lexicon has (it should be of the same accent); without one
    /// their runs of letters are not spoken (their digits and symbols still are), and a word of
    /// letters only keeps an empty phoneme range.
    pub fn load_accent(
        assets: impl AsRef<Path>,
        british: bool,
        oov: Option<Box<dyn Oov>>,
    ) -> Result<FrontEnd, G2pError> {
        let dir: PathBuf = assets.as_ref().to_path_buf();
        let acc = if british { "gb" } else { "us" };
        let normalizer = Normalizer::new(&assets::read_text(&dir.join("normalize.json"))?)?;
        let titles = normalize::title_set(&normalizer);
        let exc = read_json(&dir.join("tokenizer_exceptions.json"))?;
        let special: HashMap<String, Vec<String>> = exc
            .as_object()
            .ok_or_else(|| G2pError::Data("tokenizer_exceptions.json: not an object".into()))?
            .iter()
            .map(|(k, v)| {
                let toks = v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect());
                (k.clone(), toks.unwrap_or_default())
            })
            .collect();
        let tokenizer = Tokenizer::new(special)?;
        let tagger = Tagger::from_json(&assets::read_text(&dir.join("tagger.json.gz"))?)?;
        let gold = read_dict(&dir.join(format!("lexicon_{acc}_gold.json.gz")))?;
        let silver = read_dict(&dir.join(format!("lexicon_{acc}_silver.json.gz")))?;
        let oov = oov.map(Mutex::new);
        let re = |p: &str| Regex::new(p).map_err(|e| G2pError::Data(format!("regex: {e}")));
        Ok(FrontEnd {
            normalizer,
            titles,
            tokenizer,
            tagger,
            lexicon: Lexicon::new(gold, silver, british),
            oov,
            subtoken: re(concat!(
                r"^['‘’]+|[A-ZÀ-ÖØ-Þ](?=[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ])|(?:^-)?(?:\d?[,.]?\d)+|[-_]+|['‘’]{2,}",
                r"|[^\W\d_]*?(?:['‘’][^\W\d_])*?[a-zß-öø-ÿ](?=[A-ZÀ-ÖØ-Þ])|[^\W\d_]+(?:['‘’][^\W\d_])*",
                r"|[^\w\-'‘’]|['‘’]+$"
            ))?,
            fallback_piece: re(r"[^\W\d_]+(?:['’][^\W\d_]+)*|\d+(?:[,.]\d+)*|[^\w\s]+")?,
            link: re(r"\[([^\]]+)\]\(([^\)]*)\)")?,
            letters: re(r"(?<![\w'’])[A-Z](?: [A-Z])*(?: [A-Z]s?)(?!\w)")?,
            tens_hyphen: re(
                r"(?<=ty)-(?=(?:one|two|three|four|five|six|seven|eight|nine|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)\b)",
            )?,
            options: TextOptions::default(),
            pronunciations: Pronunciations::new(),
            reference: false,
        })
    }

    /// The markup options of the normaliser.
    pub fn set_text_options(&mut self, options: TextOptions) {
        self.options = options;
    }

    /// Server-wide pronunciations, under those of a request.
    pub fn set_pronunciations(&mut self, p: Pronunciations) {
        self.pronunciations = p;
    }

    /// Reads as hibari's Python package does (its own normalisation), for parity checks.
    pub fn set_reference_normalization(&mut self, on: bool) {
        self.reference = on;
    }

    /// The spoken form of `text` (the normaliser's output, before the G2P).
    pub fn spoken(&self, text: &str) -> String {
        self.normalized(text, &Pronunciations::new()).text
    }

    fn normalized(&self, text: &str, extra: &Pronunciations) -> normalize::Tracked {
        if self.reference {
            return self.normalizer.normalize(text);
        }
        let merged;
        let prons = if extra.is_empty() {
            &self.pronunciations
        } else {
            merged = self.pronunciations.merged(extra);
            &merged
        };
        let mut t = spoken::verbalize(text, &self.options, prons);
        // For this G2P: letters said one by one read best as one capital word ("F B I" -> "FBI",
        // which the lexicon spells), number words best without their hyphens ("twenty four").
        t.sub(&self.letters, |m, _| m.get(0).map_or(String::new(), |x| x.as_str().replace(' ', "")));
        t.sub(&self.tens_hyphen, |_, _| " ".into());
        t.map_chars(|c| match c {
            '\u{a0}' => ' ',
            '’' => '\'',
            '‒' => '-',
            '―' => '—',
            c => c,
        });
        t
    }

    /// The phonemes (in this front end's alphabet) that are not in `vocab`: for checking a
    /// pronunciation given as phonemes.
    pub fn check_phonemes(phonemes: &str, vocab: &HashSet<char>) -> Result<(), String> {
        let bad: String = phonemes.chars().filter(|c| !c.is_whitespace() && !vocab.contains(c)).collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("{bad:?} not in the voice's phoneme alphabet"))
        }
    }

    /// Whether words that no lexicon has are guessed (an [`Oov`] was given at load).
    pub fn has_oov(&self) -> bool {
        self.oov.is_some()
    }

    /// The OOV guesser, if any. A lock poisoned by a panicking guess is taken anyway: each guess
    /// is of one word, and the engine's net keeps nothing between words.
    fn oov(&self) -> Option<MutexGuard<'_, Box<dyn Oov>>> {
        self.oov.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Sentences of `text` as `Hibari.split_sentences` gives them; a fenced code block that the
    /// normaliser skips is one piece of its own (it reads as nothing).
    pub fn split_sentences<'a>(&self, text: &'a str) -> Vec<&'a str> {
        if self.reference || self.options.code_blocks == spoken::Code::Read || !text.contains("```") {
            return split::split_sentences(text, &self.titles);
        }
        self.sentence_ranges(text).into_iter().map(|r| &text[r]).collect()
    }

    /// Byte ranges of the sentences of `text` (see [`FrontEnd::split_sentences`]).
    fn sentence_ranges(&self, text: &str) -> Vec<Range<usize>> {
        if self.reference || self.options.code_blocks == spoken::Code::Read || !text.contains("```") {
            return split::split_sentence_ranges(text, &self.titles);
        }
        let mut out = Vec::new();
        let mut prose = 0usize;
        let mut block: Option<usize> = None;
        let mut at = 0usize;
        for line in text.split_inclusive('\n') {
            let fence = line.trim_start().starts_with("```");
            if fence {
                match block.take() {
                    None => {
                        out.extend(
                            split::split_sentence_ranges(&text[prose..at], &self.titles)
                                .into_iter()
                                .map(|r| prose + r.start..prose + r.end),
                        );
                        block = Some(at);
                    }
                    Some(s) => {
                        out.push(s..at + line.len());
                        prose = at + line.len();
                    }
                }
            }
            at += line.len();
        }
        match block {
            Some(s) => out.push(s..text.len()),
            None => out.extend(
                split::split_sentence_ranges(&text[prose..], &self.titles)
                    .into_iter()
                    .map(|r| prose + r.start..prose + r.end),
            ),
        }
        out
    }

    /// The normalised text of one line as hibari's `normalize.normalize` gives it.
    pub fn normalize(&self, text: &str) -> String {
        self.normalizer.normalize(text).text
    }

    /// The phoneme string of one line of text (`G2P.__call__`).
    pub fn phonemize(&self, text: &str) -> String {
        self.phonemize_spans(text).phonemes
    }

    /// Sentences, each phonemised and clause-split as `Hibari.phonemize` does, with the words of the
    /// text mapped to their phonemes. Sentences with no phonemes are left out.
    pub fn sentences(&self, text: &str) -> Vec<Sentence> {
        self.sentences_with(text, &Pronunciations::new())
    }

    /// [`FrontEnd::sentences`] with a request's pronunciations over the server's.
    pub fn sentences_with(&self, text: &str, prons: &Pronunciations) -> Vec<Sentence> {
        let mut out = Vec::new();
        // Chars before each sentence, counted on from the last one.
        let (mut counted, mut chars) = (0usize, 0usize);
        for r in self.sentence_ranges(text) {
            let sent = &text[r.clone()];
            chars += text[counted..r.start].chars().count();
            counted = r.start;
            let p = self.phonemize_spans_with(sent, prons);
            if p.phonemes.is_empty() {
                continue;
            }
            let words = map_words(sent, r.start, chars, &p);
            out.extend(chunk_sentences(text, sent, &p.phonemes, words));
        }
        out
    }

    /// Phonemes of one line with, per output token, its phoneme char range and source char range.
    pub fn phonemize_spans(&self, text: &str) -> Phonemized {
        self.phonemize_spans_with(text, &Pronunciations::new())
    }

    /// [`FrontEnd::phonemize_spans`] with a request's pronunciations over the server's.
    pub fn phonemize_spans_with(&self, text: &str, prons: &Pronunciations) -> Phonemized {
        let norm = self.normalized(text, prons);
        let toks = self.tokens(&norm.text);
        let toks = self.phonemize_tokens(toks);
        let mut ps = String::new();
        let mut spans = Vec::new();
        let mut n = 0usize;
        for t in &toks {
            let p = t.phonemes.as_deref().unwrap_or("");
            let len = p.chars().count();
            if let Some(o) = norm.origin_of(t.start..t.end) {
                spans.push((n..n + len, o));
            }
            ps.push_str(p);
            n += len;
            if t.ws {
                ps.push(' ');
                n += 1;
            }
        }
        let lead = ps.chars().take_while(|c| c.is_whitespace()).count();
        let trimmed: String = ps.trim().to_string();
        let total = trimmed.chars().count();
        let spans = spans
            .into_iter()
            .map(|(r, o)| {
                let s = r.start.saturating_sub(lead).min(total);
                let e = r.end.saturating_sub(lead).min(total).max(s);
                (s..e, o)
            })
            .collect();
        Phonemized { phonemes: trimmed, spans }
    }

    fn tokens(&self, text: &str) -> Vec<Tok> {
        let mut toks = Vec::new();
        let mut pos = 0usize;
        // Char offsets counted on from the last link, not from the start for each.
        let (mut counted, mut chars) = (0usize, 0usize);
        let mut char_at = |b: usize| {
            chars += text[counted..b].chars().count();
            counted = b;
            chars
        };
        for m in self.link.captures_iter(text).flatten() {
            let m0 = m.get(0).expect("group 0");
            let at = char_at(pos);
            toks.extend(self.plain_tokens(&text[pos..m0.start()], at));
            let f = m.get(2).map_or("", |x| x.as_str());
            let ps = if f.chars().count() > 1 && f.starts_with('/') && f.ends_with('/') {
                Some(f[1..].trim_end_matches('/').to_string())
            } else {
                None
            };
            let ws = text[m0.end()..].starts_with(char::is_whitespace);
            toks.push(Tok {
                text: m.get(1).map_or("", |x| x.as_str()).to_string(),
                tag: "NN".into(),
                ws,
                phonemes: ps,
                is_head: true,
                alias: None,
                currency: None,
                prespace: false,
                start: char_at(m0.start()),
                end: char_at(m0.end()),
            });
            pos = m0.end();
        }
        let at = char_at(pos);
        toks.extend(self.plain_tokens(&text[pos..], at));
        toks
    }

    fn plain_tokens(&self, text: &str, offset: usize) -> Vec<Tok> {
        let raw = self.tokenizer.tokenize(text);
        if raw.is_empty() {
            return Vec::new();
        }
        let words: Vec<&str> = raw.iter().map(|t| t.text.as_str()).collect();
        let tags = self.tagger.tag(&words);
        raw.iter()
            .zip(tags)
            .map(|(t, tag)| Tok {
                text: t.text.clone(),
                tag,
                ws: t.whitespace,
                phonemes: None,
                is_head: true,
                alias: None,
                currency: None,
                prespace: false,
                start: offset + t.start,
                end: offset + t.end,
            })
            .collect()
    }

    fn retokenize(&self, tokens: Vec<Tok>) -> Vec<WordToks> {
        let mut words: Vec<WordToks> = Vec::new();
        let mut currency: Option<String> = None;
        let n = tokens.len();
        for i in 0..n {
            let token = &tokens[i];
            let mut tks: Vec<Tok> = if token.alias.is_none() && token.phonemes.is_none() {
                let mut v = Vec::new();
                let whole = token.end - token.start == token.text.chars().count();
                let (mut counted, mut chars) = (0usize, 0usize);
                for m in self.subtoken.find_iter(&token.text).flatten() {
                    chars += token.text[counted..m.start()].chars().count();
                    counted = m.start();
                    let s = chars;
                    let e = s + m.as_str().chars().count();
                    let (s, e) = if whole { (token.start + s, token.start + e) } else { (token.start, token.end) };
                    v.push(Tok {
                        text: m.as_str().to_string(),
                        ws: false,
                        is_head: true,
                        prespace: false,
                        start: s,
                        end: e,
                        ..token.clone()
                    });
                }
                v
            } else {
                vec![token.clone()]
            };
            let Some(last) = tks.last_mut() else { continue };
            last.ws = token.ws;
            let m = tks.len();
            for j in 0..m {
                let two_alias = j > 0 && j + 1 < m && tks[j].text == "2" && {
                    let a = tks[j - 1].text.chars().last();
                    let b = tks[j + 1].text.chars().next();
                    matches!((a, b), (Some(a), Some(b)) if a.is_alphabetic() && b.is_alphabetic())
                };
                let next_cd = i + 1 < n && tokens[i + 1].tag == "CD";
                let mut tk = tks[j].clone();
                if tk.alias.is_some() || tk.phonemes.is_some() {
                } else if tk.tag == "$" && lexicon::currency_units(&tk.text).is_some() {
                    currency = Some(tk.text.clone());
                    tk.phonemes = Some(String::new());
                } else if tk.tag == ":" && (tk.text == "-" || tk.text == "–") {
                    tk.phonemes = Some("—".into());
                } else if PUNCT_TAGS.contains(&tk.tag.as_str())
                    && !tk.text.chars().all(|c| c.to_lowercase().all(|l| l.is_ascii_lowercase()))
                {
                    tk.phonemes = Some(match tk.tag.as_str() {
                        "-LRB-" => "(".into(),
                        "-RRB-" => ")".into(),
                        "``" => "“".into(),
                        "\"\"" | "''" => "”".into(),
                        _ => tk.text.chars().filter(|c| PUNCTS.contains(*c)).collect(),
                    });
                } else if currency.is_some() {
                    if tk.tag != "CD" {
                        currency = None;
                    } else if j + 1 == m && !next_cd {
                        tk.currency = currency.clone();
                    }
                } else if two_alias {
                    tk.alias = Some("to".into());
                }
                tks[j] = tk.clone();
                if tk.alias.is_some() || tk.phonemes.is_some() {
                    words.push(WordToks::One(tk));
                } else if let Some(WordToks::Many(v)) =
                    words.last_mut().filter(|w| matches!(w, WordToks::Many(v) if !v[v.len() - 1].ws))
                {
                    tk.is_head = false;
                    v.push(tk);
                } else if tk.ws {
                    words.push(WordToks::One(tk));
                } else {
                    words.push(WordToks::Many(vec![tk]));
                }
            }
        }
        words
            .into_iter()
            .map(|w| match w {
                WordToks::Many(mut v) if v.len() == 1 => WordToks::One(v.remove(0)),
                w => w,
            })
            .collect()
    }

    fn fallback(&self, tk: &Tok) -> String {
        let mut out = Vec::new();
        for m in self.fallback_piece.find_iter(&tk.text).flatten() {
            let piece = m.as_str();
            let first = piece.chars().next().unwrap_or(' ');
            let ps = if first.is_numeric() {
                self.lexicon.get_number(piece, None, false)
            } else if first.is_alphabetic() {
                self.oov().and_then(|mut o| o.phonemize(piece))
            } else {
                Some(piece.chars().map(symbol_phonemes).collect())
            };
            if let Some(ps) = ps.filter(|p| !p.is_empty()) {
                out.push(ps);
            }
        }
        out.join(" ")
    }

    fn phonemize_tokens(&self, tokens: Vec<Tok>) -> Vec<Tok> {
        let mut words = self.retokenize(tokens);
        let mut ctx = Ctx::default();
        for w in words.iter_mut().rev() {
            match w {
                WordToks::One(w) => {
                    if w.phonemes.is_none() {
                        w.phonemes = self.lexicon.read(&w.lex(), &ctx);
                    }
                    if w.phonemes.is_none() {
                        w.phonemes = Some(self.fallback(w));
                    }
                    ctx = token_context(ctx, w.phonemes.as_deref(), w);
                }
                WordToks::Many(w) => {
                    // Chars before each token: where a merge of w[left..right] is too long to read.
                    let mut before = vec![0usize; w.len() + 1];
                    for (k, t) in w.iter().enumerate() {
                        before[k + 1] = before[k] + t.text.chars().count();
                    }
                    // Trying every left end for every right end would be cubic in the tokens of a
                    // long run without spaces; no merge longer than the longest word can be read.
                    let first_left = |right: usize| {
                        let by_chars = before[..=right].partition_point(|&b| before[right] - b > MAX_MERGE_CHARS);
                        by_chars.max(right.saturating_sub(MAX_MERGE_TOKENS))
                    };
                    let (mut right, mut should_fallback) = (w.len(), false);
                    let mut left = first_left(right).min(right.saturating_sub(1));
                    while left < right {
                        let fixed = w[left..right].iter().any(|t| t.alias.is_some() || t.phonemes.is_some());
                        let merged = if fixed { None } else { Some(merge(&w[left..right], None)) };
                        let ps = merged.as_ref().and_then(|tk| self.lexicon.read(&tk.lex(), &ctx));
                        if let (Some(ps), Some(tk)) = (ps, merged.as_ref()) {
                            ctx = token_context(ctx, Some(&ps), tk);
                            w[left].phonemes = Some(ps);
                            for x in &mut w[left + 1..right] {
                                x.phonemes = Some(String::new());
                            }
                            right = left;
                            left = first_left(right).min(right.saturating_sub(1));
                        } else if left + 1 < right {
                            left += 1;
                        } else {
                            right -= 1;
                            let tk = &mut w[right];
                            if tk.phonemes.is_none() {
                                if tk.text.chars().all(|c| SUBTOKEN_JUNKS.contains(c)) {
                                    tk.phonemes = Some(String::new());
                                } else {
                                    should_fallback = true;
                                    break;
                                }
                            }
                            left = first_left(right).min(right.saturating_sub(1));
                        }
                    }
                    if should_fallback {
                        let tk = merge(w, None);
                        w[0].phonemes = Some(self.fallback(&tk));
                        for x in &mut w[1..] {
                            x.phonemes = Some(String::new());
                        }
                    } else {
                        resolve_tokens(w);
                    }
                }
            }
        }
        words
            .into_iter()
            .map(|w| {
                let mut t = match w {
                    WordToks::One(t) => t,
                    WordToks::Many(v) => merge(&v, Some("")),
                };
                if let Some(p) = &t.phonemes {
                    t.phonemes = Some(p.replace('ɾ', "T").replace('ʔ', "t"));
                }
                t
            })
            .collect()
    }
}

/// Words (whitespace-separated runs of the sentence, grouped where one reading spans several) with
/// their phoneme ranges. `base` is the sentence's byte offset in the whole text.
fn map_words(sent: &str, base: usize, base_chars: usize, p: &Phonemized) -> Vec<Word> {
    // Whitespace-separated words: (char range, byte range).
    let mut words: Vec<(Range<usize>, Range<usize>)> = Vec::new();
    let mut start: Option<(usize, usize)> = None;
    let mut nchars = 0;
    for (ci, (bi, c)) in sent.char_indices().enumerate() {
        nchars = ci + 1;
        if c.is_whitespace() {
            if let Some((cs, bs)) = start.take() {
                words.push((cs..ci, bs..bi));
            }
        } else if start.is_none() {
            start = Some((ci, bi));
        }
    }
    if let Some((cs, bs)) = start {
        words.push((cs..nchars, bs..sent.len()));
    }
    // Each token's span of word indices, and its phoneme range.
    let mut groups: Vec<(usize, usize, Option<Range<usize>>)> = Vec::new();
    for (pr, o) in &p.spans {
        // The words are in order and disjoint: those overlapping `o` are a run found by bisection
        // (scanning all of them for every token was quadratic in a long sentence).
        let lo = words.partition_point(|w| w.0.end <= o.start);
        let hits = words[lo..].iter().take_while(|w| w.0.start < o.end).count();
        if hits == 0 {
            continue;
        }
        groups.push((lo, lo + hits - 1, if pr.is_empty() { None } else { Some(pr.clone()) }));
    }
    // Merge overlapping word spans into groups.
    let mut merged: Vec<(usize, usize, Option<Range<usize>>)> = Vec::new();
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&i| (groups[i].0, groups[i].1));
    for i in order {
        let (lo, hi, ref pr) = groups[i];
        match merged.last_mut() {
            Some(last) if lo <= last.1 => {
                last.1 = last.1.max(hi);
                last.2 = match (last.2.clone(), pr.clone()) {
                    (Some(a), Some(b)) => Some(a.start.min(b.start)..a.end.max(b.end)),
                    (a, b) => a.or(b),
                };
            }
            _ => merged.push((lo, hi, pr.clone())),
        }
    }
    let mut out = Vec::new();
    let mut wi = 0;
    let mut last_end = 0;
    let push = |lo: usize, hi: usize, pr: Option<Range<usize>>, out: &mut Vec<Word>, last_end: &mut usize| {
        let b = words[lo].1.start..words[hi].1.end;
        let c = base_chars + words[lo].0.start..base_chars + words[hi].0.end;
        let pr = pr.unwrap_or(*last_end..*last_end);
        *last_end = pr.end.max(*last_end);
        out.push(Word {
            text: sent[b.clone()].to_string(),
            text_range: base + b.start..base + b.end,
            chars: c,
            phonemes: pr,
        });
    };
    for (lo, hi, pr) in merged {
        while wi < lo {
            push(wi, wi, None, &mut out, &mut last_end);
            wi += 1;
        }
        push(lo, hi, pr, &mut out, &mut last_end);
        wi = hi + 1;
    }
    while wi < words.len() {
        push(wi, wi, None, &mut out, &mut last_end);
        wi += 1;
    }
    out
}

/// Each of `sentences` (slices of `text`) with the phonemes and words `read` gives it, the words'
/// ranges moved from the sentence into `text`; sentences with no phonemes are left out.
fn read_sentences<'a>(
    text: &'a str,
    sentences: Vec<&'a str>,
    read: impl Fn(&str) -> (String, Vec<Word>),
) -> Vec<(&'a str, String, Vec<Word>)> {
    let mut out = Vec::new();
    let (mut chars, mut counted) = (0usize, 0usize);
    for sent in sentences {
        let at = sent.as_ptr() as usize - text.as_ptr() as usize;
        chars += text[counted..at].chars().count();
        counted = at;
        let (phonemes, words) = read(sent);
        if phonemes.trim().is_empty() {
            continue;
        }
        let words = words
            .into_iter()
            .map(|w| Word {
                text_range: w.text_range.start + at..w.text_range.end + at,
                chars: w.chars.start + chars..w.chars.end + chars,
                ..w
            })
            .collect();
        out.push((sent, phonemes, words));
    }
    out
}

/// A sentence's clause chunks ([`chunk_words`]) as [`Sentence`]s, each with the text its words
/// span in `text` (the whole input; `sent`, the sentence, for a chunk with no word).
fn chunk_sentences(text: &str, sent: &str, phonemes: &str, words: Vec<Word>) -> Vec<Sentence> {
    chunk_words(phonemes, words)
        .into_iter()
        .map(|(ps, ws)| {
            let chunk_text = match (ws.first(), ws.last()) {
                (Some(a), Some(b)) => text[a.text_range.start..b.text_range.end].to_string(),
                _ => sent.to_string(),
            };
            Sentence { text: chunk_text, phonemes: ps, words: ws }
        })
        .collect()
}

/// The clause split of a sentence's phonemes, moving each word's range into its chunk.
fn chunk_words(ps: &str, words: Vec<Word>) -> Vec<(String, Vec<Word>)> {
    let chunks = split::clause_chunks(ps);
    if chunks.len() <= 1
        && chunks.first().is_none_or(|c| c.len() == 1 && c[0].start == 0 && c[0].end == ps.chars().count())
    {
        return vec![(ps.to_string(), words)];
    }
    let chars: Vec<char> = ps.chars().collect();
    // (piece range in ps, chunk index, offset of the piece in its chunk)
    let mut pieces: Vec<(Range<usize>, usize, usize)> = Vec::new();
    let mut out: Vec<(String, Vec<Word>)> = Vec::new();
    for (ci, chunk) in chunks.iter().enumerate() {
        let mut s = String::new();
        let mut off = 0;
        for (k, r) in chunk.iter().enumerate() {
            if k > 0 {
                s.push(' ');
                off += 1;
            }
            pieces.push((r.clone(), ci, off));
            s.extend(&chars[r.clone()]);
            off += r.len();
        }
        out.push((s, Vec::new()));
    }
    let lens: Vec<usize> = out.iter().map(|(s, _)| s.chars().count()).collect();
    for w in words {
        let at = w.phonemes.start;
        // The pieces are in order and disjoint: the one holding `at`, or else the last before it,
        // is the last that starts at or before it.
        let found = pieces.get(pieces.partition_point(|(r, _, _)| r.start <= at).saturating_sub(1));
        let Some((r, ci, off)) = found.cloned() else { continue };
        let len = lens[ci];
        let s = (off + at.saturating_sub(r.start)).min(len);
        let e = (s + w.phonemes.len()).min(off + r.len()).max(s);
        out[ci].1.push(Word { phonemes: s..e, ..w });
    }
    out
}
