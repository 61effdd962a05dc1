//! misaki's English lexicon rules (hibari `g2p/lexicon.py`): gold/silver dictionaries with
//! case folding, special words, stress by capitalisation, -s/-ed/-ing stemming, numbers, currency
//! and acronyms.

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use unicode_normalization::UnicodeNormalization;

use super::assets::{Str, StrMap};
use super::numbers as num;
use super::pystr::{capitalize, clen, drop_last, is_alpha};

/// `re.split(r"[^a-z]+", s)`.
fn split_runs(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_sep = false;
    for (i, c) in s.char_indices() {
        let sep = !c.is_ascii_lowercase();
        if sep && !in_sep {
            out.push(&s[start..i]);
        }
        if !sep && in_sep {
            start = i;
        }
        in_sep = sep;
    }
    out.push(if in_sep { "" } else { &s[start..] });
    out
}

/// The primary stress mark.
pub const PRIMARY: char = 'ˈ';
/// The secondary stress mark.
pub const SECONDARY: char = 'ˌ';

/// A vowel of misaki's alphabet (its diphthongs as one letter: `A`, `I`, `O`, `Q`, `W`, `Y`).
pub fn is_vowel(c: char) -> bool {
    "AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ".contains(c)
}

/// A consonant of misaki's alphabet.
pub fn is_consonant(c: char) -> bool {
    "bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ".contains(c)
}

fn is_diphthong(c: char) -> bool {
    "AIOQWYʤʧ".contains(c)
}

fn is_us_tau(c: char) -> bool {
    "AIOWYiuæɑəɛɪɹʊʌ".contains(c)
}

fn symbol_word(w: &str) -> Option<&'static str> {
    match w {
        "%" => Some("percent"),
        "&" => Some("and"),
        "+" => Some("plus"),
        "@" => Some("at"),
        _ => None,
    }
}

/// `(currency symbol) -> (unit, sub-unit)`.
pub fn currency_units(c: &str) -> Option<(&'static str, &'static str)> {
    match c {
        "$" => Some(("dollar", "cent")),
        "£" => Some(("pound", "pence")),
        "€" => Some(("euro", "cent")),
        _ => None,
    }
}

fn is_ordinal(s: &str) -> bool {
    matches!(s, "st" | "nd" | "rd" | "th")
}

/// misaki's `stress_weight`: the phonemes' length, diphthongs counting two.
pub fn stress_weight(ps: &str) -> usize {
    ps.chars().map(|c| if is_diphthong(c) { 2 } else { 1 }).sum()
}

fn restress(ps: &str) -> String {
    let chars: Vec<char> = ps.chars().collect();
    let mut items: Vec<(f64, char)> = chars.iter().enumerate().map(|(i, &c)| (i as f64, c)).collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == PRIMARY || c == SECONDARY {
            if let Some(j) = (i..chars.len()).find(|&j| is_vowel(chars[j])) {
                items[i].0 = j as f64 - 0.5;
            }
        }
    }
    items.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1)));
    items.into_iter().map(|(_, c)| c).collect()
}

/// misaki `apply_stress`.
pub fn apply_stress(ps: &str, stress: Option<f64>) -> String {
    let Some(s) = stress else { return ps.to_string() };
    let has_p = ps.contains(PRIMARY);
    let has_any = has_p || ps.contains(SECONDARY);
    let has_vowel = ps.chars().any(is_vowel);
    if s < -1.0 {
        ps.replace([PRIMARY, SECONDARY], "")
    } else if s == -1.0 || ((s == 0.0 || s == -0.5) && has_p) {
        ps.replace(SECONDARY, "").replace(PRIMARY, "ˌ")
    } else if (s == 0.0 || s == 0.5 || s == 1.0) && !has_any {
        if !has_vowel {
            return ps.to_string();
        }
        restress(&format!("{SECONDARY}{ps}"))
    } else if s >= 1.0 && !has_p && ps.contains(SECONDARY) {
        ps.replace(SECONDARY, "ˈ")
    } else if s > 1.0 && !has_any {
        if !has_vowel {
            return ps.to_string();
        }
        restress(&format!("{PRIMARY}{ps}"))
    } else {
        ps.to_string()
    }
}

/// The coarse class of a Penn Treebank tag (`VERB`, `NOUN`, `ADV`, `ADJ`), or the tag itself.
pub fn parent_tag(tag: &str) -> &str {
    if tag.starts_with("VB") {
        "VERB"
    } else if tag.starts_with("NN") {
        "NOUN"
    } else if tag.starts_with("ADV") || tag.starts_with("RB") {
        "ADV"
    } else if tag.starts_with("ADJ") || tag.starts_with("JJ") {
        "ADJ"
    } else {
        tag
    }
}

/// A dictionary entry: a phoneme string, or phonemes by tag (`None`: null in the file).
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// The word's phonemes.
    Word(&'a str),
    /// Phonemes by tag (`DEFAULT`, `VERB`, `NNP`, ...).
    Pos(&'a HashMap<String, Option<String>>),
}

/// An entry as a [`Dict`] keeps it: a range of its `phonemes`, or an index into its `pos`.
enum Stored {
    Word(u32, u32),
    Pos(u32),
}

/// A misaki dictionary; `grow_dictionary`'s case variants are answered at lookup time. The ~90k
/// words and their phonemes lie in two strings (see [`StrMap`]): a few allocations, not 180k.
pub struct Dict {
    entries: StrMap<Stored>,
    /// Every word entry's phonemes, back to back.
    phonemes: String,
    /// The entries with phonemes by tag (a few hundred).
    pos: Vec<HashMap<String, Option<String>>>,
}

/// `{word: phonemes or {tag: phonemes or null}}`.
impl<'de> Deserialize<'de> for Dict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dict, D::Error> {
        /// One entry's value, stored in the dictionary being built.
        struct EntrySeed<'d>(&'d mut Dict);
        impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
            type Value = Stored;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Stored, D::Error> {
                d.deserialize_any(self)
            }
        }
        impl<'de> Visitor<'de> for EntrySeed<'_> {
            type Value = Stored;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a phoneme string or an object of them by tag")
            }
            fn visit_str<E>(self, s: &str) -> Result<Stored, E> {
                let start = self.0.phonemes.len() as u32;
                self.0.phonemes.push_str(s);
                Ok(Stored::Word(start, self.0.phonemes.len() as u32))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Stored, M::Error> {
                let mut pos = HashMap::new();
                while let Some((tag, ps)) = m.next_entry()? {
                    pos.insert(tag, ps);
                }
                self.0.pos.push(pos);
                Ok(Stored::Pos(self.0.pos.len() as u32 - 1))
            }
        }
        struct Words;
        impl<'de> Visitor<'de> for Words {
            type Value = Dict;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of words")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Dict, M::Error> {
                let mut dict = Dict { entries: StrMap::default(), phonemes: String::new(), pos: Vec::new() };
                while let Some(word) = m.next_key::<Str>()? {
                    let entry = m.next_value_seed(EntrySeed(&mut dict))?;
                    dict.entries.insert(&word.0, entry);
                }
                Ok(dict)
            }
        }
        d.deserialize_map(Words)
    }
}

impl Dict {
    /// From a lexicon's JSON text.
    pub fn from_json(text: &str) -> Result<Dict, serde_json::Error> {
        serde_json::from_str(text)
    }

    fn entry(&self, w: &str) -> Option<Entry<'_>> {
        Some(match *self.entries.get(w)? {
            Stored::Word(start, end) => Entry::Word(&self.phonemes[start as usize..end as usize]),
            Stored::Pos(i) => Entry::Pos(&self.pos[i as usize]),
        })
    }

    /// The entry of `w`, else of its capitalised or lowercased form (misaki's case folding).
    pub fn get(&self, w: &str) -> Option<Entry<'_>> {
        if let Some(v) = self.entry(w) {
            return Some(v);
        }
        if clen(w) < 2 {
            return None;
        }
        let lower = w.to_lowercase();
        if w == lower {
            let c = capitalize(w);
            return if c != w { self.entry(&c) } else { None };
        }
        if w == capitalize(&lower) {
            return self.entry(&lower);
        }
        None
    }

    /// Whether [`Dict::get`] finds `w`.
    pub fn has(&self, w: &str) -> bool {
        self.get(w).is_some()
    }

    fn word(&self, w: &str) -> Option<String> {
        match self.get(w)? {
            Entry::Word(s) => Some(s.to_string()),
            Entry::Pos(d) => d.get("DEFAULT").cloned().flatten(),
        }
    }
}

/// Context of the words to the right (misaki `TokenContext`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx {
    /// Whether the next word starts with a vowel (`None`: punctuation or nothing follows).
    pub future_vowel: Option<bool>,
    /// Whether the next word is "to".
    pub future_to: bool,
}

/// What the lexicon needs of a token.
pub struct LexToken<'a> {
    /// The token as written.
    pub text: &'a str,
    /// A word to read instead ("2" between letters reads "to").
    pub alias: Option<&'a str>,
    /// Its part-of-speech tag (Penn Treebank).
    pub tag: &'a str,
    /// The currency symbol an amount follows (`$`, `£`, `€`).
    pub currency: Option<&'a str>,
    /// Whether it starts a word (not a later piece of one split by the tokenizer).
    pub is_head: bool,
}

/// misaki's lexicon of one accent: the gold and silver dictionaries and the rules around them.
pub struct Lexicon {
    golds: Dict,
    silvers: Dict,
    british: bool,
}

impl Lexicon {
    /// The lexicon of the given dictionaries (`british`: misaki's British rules).
    pub fn new(golds: Dict, silvers: Dict, british: bool) -> Lexicon {
        Lexicon { golds, silvers, british }
    }

    fn get_nnp(&self, word: &str) -> Option<String> {
        let mut ps = String::new();
        for c in word.chars().filter(|c| c.is_alphabetic()) {
            ps.push_str(&self.golds.word(&c.to_uppercase().to_string())?);
        }
        let ps = apply_stress(&ps, Some(0.0));
        Some(match ps.rfind(SECONDARY) {
            Some(i) => format!("{}{PRIMARY}{}", &ps[..i], &ps[i + SECONDARY.len_utf8()..]),
            None => ps,
        })
    }

    fn special_case(&self, word: &str, tag: &str, stress: Option<f64>, ctx: &Ctx) -> Option<String> {
        if tag == "ADD" && (word == "." || word == "/") {
            return self.lookup(if word == "." { "dot" } else { "slash" }, None, Some(-0.5), Some(ctx));
        }
        if let Some(w) = symbol_word(word) {
            return self.lookup(w, None, None, Some(ctx));
        }
        let stripped = word.trim_matches('.');
        let no_dots = word.replace('.', "");
        if stripped.contains('.') && is_alpha(&no_dots) && word.split('.').map(clen).max().unwrap_or(0) < 3 {
            return self.get_nnp(word);
        }
        match word {
            "a" | "A" => return Some(if tag == "DT" { "ɐ".into() } else { "ˈA".into() }),
            "am" | "Am" | "AM" => {
                if tag.starts_with("NN") {
                    return self.get_nnp(word);
                } else if ctx.future_vowel.is_none() || word != "am" || stress.is_some_and(|s| s > 0.0) {
                    return self.golds.word("am");
                }
                return Some("ɐm".into());
            }
            "an" | "An" | "AN" => {
                if word == "AN" && tag.starts_with("NN") {
                    return self.get_nnp(word);
                }
                return Some("ɐn".into());
            }
            _ => {}
        }
        if word == "I" && tag == "PRP" {
            return Some("ˌI".into());
        }
        if matches!(word, "by" | "By" | "BY") && parent_tag(tag) == "ADV" {
            return Some("bˈI".into());
        }
        if matches!(word, "to" | "To") || (word == "TO" && matches!(tag, "TO" | "IN")) {
            return match ctx.future_vowel {
                None => self.golds.word("to"),
                Some(false) => Some("tə".into()),
                Some(true) => Some("tʊ".into()),
            };
        }
        if matches!(word, "in" | "In") || (word == "IN" && tag != "NNP") {
            let s = if ctx.future_vowel.is_none() || tag != "IN" { "ˈ" } else { "" };
            return Some(format!("{s}ɪn"));
        }
        if matches!(word, "the" | "The") || (word == "THE" && tag == "DT") {
            return Some(if ctx.future_vowel == Some(true) { "ði".into() } else { "ðə".into() });
        }
        if tag == "IN" && matches!(word.to_lowercase().as_str(), "vs" | "vs.") {
            return self.lookup("versus", None, None, Some(ctx));
        }
        if matches!(word, "used" | "Used" | "USED") {
            let key = if matches!(tag, "VBD" | "JJ") && ctx.future_to { "VBD" } else { "DEFAULT" };
            return match self.golds.get("used") {
                Some(Entry::Pos(d)) => d.get(key).cloned().flatten(),
                Some(Entry::Word(s)) => Some(s.to_string()),
                None => None,
            };
        }
        None
    }

    fn is_known(&self, word: &str) -> bool {
        if self.golds.has(word) || symbol_word(word).is_some() || self.silvers.has(word) {
            return true;
        }
        if !is_alpha(word) || !word.chars().all(|c| c.is_ascii_alphabetic() || c == '\'' || c == '-') {
            return false;
        }
        if clen(word) == 1 {
            return true;
        }
        if word == word.to_uppercase() && self.golds.has(&word.to_lowercase()) {
            return true;
        }
        let rest: String = word.chars().skip(1).collect();
        rest == rest.to_uppercase()
    }

    /// misaki's `lookup`: the phonemes of `word` as tagged `tag`, stressed by `stress`, in the
    /// context of the words after it.
    pub fn lookup(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&Ctx>) -> Option<String> {
        let mut word = word.to_string();
        let mut is_nnp = false;
        if word == word.to_uppercase() && !self.golds.has(&word) {
            word = word.to_lowercase();
            is_nnp = tag == Some("NNP");
        }
        let mut entry = self.golds.get(&word);
        if entry.is_none() && !is_nnp {
            entry = self.silvers.get(&word);
        }
        let ps: Option<String> = match entry {
            None => None,
            Some(Entry::Word(s)) => Some(s.to_string()),
            Some(Entry::Pos(d)) => {
                let key: Option<&str> = if ctx.is_some_and(|c| c.future_vowel.is_none()) && d.contains_key("None") {
                    Some("None")
                } else if tag.is_some_and(|t| d.contains_key(t)) {
                    tag
                } else {
                    tag.map(parent_tag)
                };
                match key.and_then(|k| d.get(k)) {
                    Some(v) => v.clone(),
                    None => d.get("DEFAULT").cloned().flatten(),
                }
            }
        };
        if ps.as_ref().is_none_or(|p| is_nnp && !p.contains(PRIMARY)) {
            if let Some(p) = self.get_nnp(&word) {
                return Some(p);
            }
        }
        ps.map(|p| apply_stress(&p, stress))
    }

    fn suffix_s(&self, stem: Option<String>) -> Option<String> {
        let stem = stem?;
        let last = stem.chars().last()?;
        Some(if "ptkfθ".contains(last) {
            format!("{stem}s")
        } else if "szʃʒʧʤ".contains(last) {
            format!("{stem}{}z", if self.british { "ɪ" } else { "ᵻ" })
        } else {
            format!("{stem}z")
        })
    }

    fn stem_s(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&Ctx>) -> Option<String> {
        let n = clen(word);
        if n < 3 || !word.ends_with('s') {
            return None;
        }
        let stem = if !word.ends_with("ss") && self.is_known(drop_last(word, 1)) {
            drop_last(word, 1).to_string()
        } else if (word.ends_with("'s") || (n > 4 && word.ends_with("es") && !word.ends_with("ies")))
            && self.is_known(drop_last(word, 2))
        {
            drop_last(word, 2).to_string()
        } else if n > 4 && word.ends_with("ies") && self.is_known(&format!("{}y", drop_last(word, 3))) {
            format!("{}y", drop_last(word, 3))
        } else {
            return None;
        };
        self.suffix_s(self.lookup(&stem, tag, stress, ctx))
    }

    fn suffix_ed(&self, stem: Option<String>) -> Option<String> {
        let stem = stem?;
        let cs: Vec<char> = stem.chars().collect();
        let last = *cs.last()?;
        let i_vowel = if self.british { "ɪ" } else { "ᵻ" };
        Some(if "pkfθʃsʧ".contains(last) {
            format!("{stem}t")
        } else if last == 'd' {
            format!("{stem}{i_vowel}d")
        } else if last != 't' {
            format!("{stem}d")
        } else if self.british || cs.len() < 2 {
            format!("{stem}ɪd")
        } else if is_us_tau(cs[cs.len() - 2]) {
            format!("{}ɾᵻd", drop_last(&stem, 1))
        } else {
            format!("{stem}ᵻd")
        })
    }

    fn stem_ed(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&Ctx>) -> Option<String> {
        let n = clen(word);
        if n < 4 || !word.ends_with('d') {
            return None;
        }
        let stem = if !word.ends_with("dd") && self.is_known(drop_last(word, 1)) {
            drop_last(word, 1)
        } else if n > 4 && word.ends_with("ed") && !word.ends_with("eed") && self.is_known(drop_last(word, 2)) {
            drop_last(word, 2)
        } else {
            return None;
        };
        self.suffix_ed(self.lookup(stem, tag, stress, ctx))
    }

    fn suffix_ing(&self, stem: Option<String>) -> Option<String> {
        let stem = stem?;
        let cs: Vec<char> = stem.chars().collect();
        let last = *cs.last()?;
        if self.british {
            if last == 'ə' || last == 'ː' {
                return None;
            }
        } else if cs.len() > 1 && last == 't' && is_us_tau(cs[cs.len() - 2]) {
            return Some(format!("{}ɾɪŋ", drop_last(&stem, 1)));
        }
        Some(format!("{stem}ɪŋ"))
    }

    fn stem_ing(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&Ctx>) -> Option<String> {
        let n = clen(word);
        if n < 5 || !word.ends_with("ing") {
            return None;
        }
        let base = drop_last(word, 3);
        let doubled = {
            let cs: Vec<char> = word.chars().collect();
            let k = cs.len();
            (k >= 5 && cs[k - 4] == cs[k - 5] && "bcdgklmnprstvxz".contains(cs[k - 4])) || word.ends_with("cking")
        };
        let stem = if n > 5 && self.is_known(base) {
            base.to_string()
        } else if self.is_known(&format!("{base}e")) {
            format!("{base}e")
        } else if n > 5 && doubled && self.is_known(drop_last(word, 4)) {
            drop_last(word, 4).to_string()
        } else {
            return None;
        };
        self.suffix_ing(self.lookup(&stem, tag, stress, ctx))
    }

    fn get_word(&self, word: &str, tag: &str, stress: Option<f64>, ctx: &Ctx) -> Option<String> {
        if let Some(ps) = self.special_case(word, tag, stress, ctx) {
            return Some(ps);
        }
        let wl = word.to_lowercase();
        let rest: String = word.chars().skip(1).collect();
        let mut word = word.to_string();
        if clen(&word) > 1
            && is_alpha(&word.replace('\'', ""))
            && word != wl
            && (tag != "NNP" || clen(&word) > 7)
            && !self.golds.has(&word)
            && !self.silvers.has(&word)
            && (word == word.to_uppercase() || rest == rest.to_lowercase())
            && (self.golds.has(&wl)
                || self.silvers.has(&wl)
                || self.stem_s(&wl, Some(tag), stress, Some(ctx)).is_some_and(|s| !s.is_empty())
                || self.stem_ed(&wl, Some(tag), stress, Some(ctx)).is_some_and(|s| !s.is_empty())
                || self.stem_ing(&wl, Some(tag), stress, Some(ctx)).is_some_and(|s| !s.is_empty()))
        {
            word = wl;
        }
        let t = Some(tag);
        if self.is_known(&word) {
            return self.lookup(&word, t, stress, Some(ctx));
        } else if word.ends_with("s'") && self.is_known(&format!("{}'s", drop_last(&word, 2))) {
            return self.lookup(&format!("{}'s", drop_last(&word, 2)), t, stress, Some(ctx));
        } else if word.ends_with('\'') && self.is_known(drop_last(&word, 1)) {
            return self.lookup(drop_last(&word, 1), t, stress, Some(ctx));
        }
        if let Some(s) = self.stem_s(&word, t, stress, Some(ctx)) {
            return Some(s);
        }
        if let Some(s) = self.stem_ed(&word, t, stress, Some(ctx)) {
            return Some(s);
        }
        self.stem_ing(&word, t, Some(stress.unwrap_or(0.5)), Some(ctx))
    }

    fn is_number(word: &str, is_head: bool) -> bool {
        if !word.chars().any(|c| c.is_ascii_digit()) {
            return false;
        }
        let mut w = word;
        for s in ["ing", "'d", "ed", "'s", "st", "nd", "rd", "th", "s"] {
            if let Some(x) = w.strip_suffix(s) {
                w = x;
                break;
            }
        }
        w.chars()
            .enumerate()
            .all(|(i, c)| c.is_ascii_digit() || c == ',' || c == '.' || (is_head && i == 0 && c == '-'))
    }

    /// misaki `get_number`.
    pub fn get_number(&self, word: &str, currency: Option<&str>, is_head: bool) -> Option<String> {
        let sfx_len = word.chars().rev().take_while(|c| c.is_ascii_lowercase() || *c == '\'').count();
        let suffix: Option<&str> = if sfx_len > 0 { Some(&word[word.len() - sfx_len..]) } else { None };
        let mut word = &word[..word.len() - sfx_len];
        let mut result: Vec<String> = Vec::new();
        if let Some(w) = word.strip_prefix('-') {
            result.push(self.lookup("minus", None, None, None)?);
            word = w;
        }
        let is_dig = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        let extend_words = |result: &mut Vec<String>, words: &str| -> Option<()> {
            for w in split_runs(words) {
                if w != "and" {
                    let stress = if w == "point" { Some(-2.0) } else { None };
                    result.push(self.lookup(w, None, stress, None)?);
                }
            }
            Some(())
        };
        let extend_num = |result: &mut Vec<String>, n: &str| -> Option<()> {
            let v: i128 = n.parse().ok()?;
            extend_words(result, &num::cardinal(v))
        };
        let cur_known = currency.and_then(currency_units);
        if is_dig(word) && suffix.is_some_and(is_ordinal) {
            extend_words(&mut result, &num::ordinal(word.parse().ok()?))?;
        } else if result.is_empty() && clen(word) == 4 && cur_known.is_none() && is_dig(word) {
            extend_words(&mut result, &num::year(word.parse().ok()?))?;
        } else if !is_head && !word.contains('.') {
            let n = word.replace(',', "");
            let cs: Vec<char> = n.chars().collect();
            if cs.is_empty() {
                return None;
            }
            if cs[0] == '0' || cs.len() > 3 {
                for c in &cs {
                    extend_num(&mut result, &c.to_string())?;
                }
            } else if cs.len() == 3 && !n.ends_with("00") {
                extend_num(&mut result, &cs[0].to_string())?;
                if cs[1] == '0' {
                    result.push(self.lookup("O", None, Some(-2.0), None)?);
                    extend_num(&mut result, &cs[2].to_string())?;
                } else {
                    extend_num(&mut result, &n[1..])?;
                }
            } else {
                extend_num(&mut result, &n)?;
            }
        } else if word.matches('.').count() > 1 || !is_head {
            for part in word.replace(',', "").split('.') {
                let cs: Vec<char> = part.chars().collect();
                if cs.is_empty() {
                    continue;
                }
                if cs[0] == '0' || (cs.len() != 2 && cs[1..].iter().any(|&c| c != '0')) {
                    for c in &cs {
                        extend_num(&mut result, &c.to_string())?;
                    }
                } else {
                    extend_num(&mut result, part)?;
                }
            }
        } else if let (Some((unit, sub)), true) = (cur_known, Self::is_currency(word)) {
            let clean = word.replace(',', "");
            let mut pairs: Vec<(i128, &str)> = Vec::new();
            for (p, u) in clean.split('.').zip([unit, sub]) {
                pairs.push((if p.is_empty() { 0 } else { p.parse().ok()? }, u));
            }
            if pairs.len() > 1 {
                if pairs[1].0 == 0 {
                    pairs.truncate(1);
                } else if pairs[0].0 == 0 {
                    pairs.remove(0);
                }
            }
            for (i, (n, u)) in pairs.into_iter().enumerate() {
                if i > 0 {
                    result.push(self.lookup("and", None, None, None)?);
                }
                extend_words(&mut result, &num::cardinal(n))?;
                let w = if n.abs() != 1 && u != "pence" {
                    self.stem_s(&format!("{u}s"), None, None, None)
                } else {
                    self.lookup(u, None, None, None)
                };
                result.push(w?);
            }
        } else {
            let words = if is_dig(word) {
                num::cardinal(word.parse().ok()?)
            } else if !word.contains('.') {
                let n: i128 = word.replace(',', "").parse().ok()?;
                if suffix.is_some_and(is_ordinal) {
                    num::ordinal(n)
                } else {
                    num::cardinal(n)
                }
            } else {
                let w = word.replace(',', "");
                if let Some(frac) = w.strip_prefix('.') {
                    let mut s = "point".to_string();
                    for c in frac.chars() {
                        s.push(' ');
                        s.push_str(&num::cardinal(c.to_digit(10)? as i128));
                    }
                    s
                } else {
                    num::decimal(&w)
                }
            };
            extend_words(&mut result, &words)?;
        }
        if result.is_empty() {
            return None;
        }
        let joined = result.join(" ");
        match suffix {
            Some("s") | Some("'s") => self.suffix_s(Some(joined)),
            Some("ed") | Some("'d") => self.suffix_ed(Some(joined)),
            Some("ing") => self.suffix_ing(Some(joined)),
            _ => Some(joined),
        }
    }

    fn is_currency(word: &str) -> bool {
        if !word.contains('.') {
            return true;
        }
        if word.matches('.').count() > 1 {
            return false;
        }
        word.split('.').nth(1).is_some_and(|c| clen(c) < 3)
    }

    fn append_currency(&self, ps: String, currency: Option<&str>) -> String {
        let Some(c) = currency.filter(|c| !c.is_empty()) else { return ps };
        match currency_units(c).and_then(|(u, _)| self.stem_s(&format!("{u}s"), None, None, None)) {
            Some(cw) => format!("{ps} {cw}"),
            None => ps,
        }
    }

    /// The lexicon's reading of a token (misaki `Lexicon.__call__`), or None.
    pub fn read(&self, tk: &LexToken, ctx: &Ctx) -> Option<String> {
        let word = tk.alias.unwrap_or(tk.text).replace(['‘', '’'], "'");
        let word: String = word.nfkc().collect();
        let stress = if word == word.to_lowercase() {
            None
        } else if word == word.to_uppercase() {
            Some(2.0)
        } else {
            Some(0.5)
        };
        if let Some(ps) = self.get_word(&word, tk.tag, stress, ctx) {
            return Some(self.append_currency(ps, tk.currency));
        }
        if Self::is_number(&word, tk.is_head) {
            return self.get_number(&word, tk.currency, tk.is_head);
        }
        None
    }
}
