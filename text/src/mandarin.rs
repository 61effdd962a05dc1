//! The Mandarin front end (Kokoro v1.0's `z` voices): text to Kokoro's phonemes, with word
//! boundaries.
//!
//! It reads as misaki 0.9.4's zh G2P reads on its legacy path (`ZHG2P()` with no version, what
//! hexgrad's kokoro KPipeline builds for Kokoro v1.0), in these steps:
//!
//! 1. Arabic numerals to Chinese ones, as cn2an's `transform(text, "an2cn")` does: ranges before
//!    a measure word (`3-5个`: 三到五), dates (a year digit by digit: 二零二四年, months and days
//!    as numbers), fractions (`1/3`: 三分之一), percentages (`12.5%`: 百分之十二点五), degrees
//!    (`25℃`: 二十五摄氏度), then every other number (`-3.5`: 负三点五).
//! 2. Chinese punctuation mapped to ASCII (`，`: `, `, `。`: `. `, `《》「」【】«»`: `“ ”`, ...).
//! 3. Runs of CJK unified ideographs (U+4E00..U+9FFF) cut into words by jieba (jieba-rs, with
//!    its HMM for unknown words, as `jieba.lcut` does); each word read by pypinyin's rules (its
//!    phrase dictionary cuts the word into phrases by forward maximum matching, a phrase has its
//!    dictionary reading, any other character its first reading: this is where polyphones such
//!    as 行, 长, 还, 地, 得 get their reading), TONE3 with 5 for the neutral tone, no tone sandhi;
//!    each syllable to IPA by misaki's pinyin-to-IPA table (its first variant), the tone as an
//!    arrow (→ ↗ ↓ ↘, none for the neutral tone); a word's syllables run together, words
//!    spaced.
//! 4. Everything else (punctuation, spaces, Latin letters, digits cn2an could not read) passed
//!    through as it is, as misaki does: Kokoro then drops what is not in its vocabulary.
//!
//! The pinyin data (pypinyin 0.55.0's characters and phrases, MIT) is embedded:
//! `data/mandarin-pinyin.txt.gz`, made by `scripts/mandarin-data.py`. jieba's dictionary comes with
//! jieba-rs (MIT). So [`Mandarin::new`](crate::mandarin::Mandarin::new) needs no files.
//!
//! Where it is not misaki: a character of U+4E00..U+9FFF that pypinyin has no reading for (68
//! rare ones) makes misaki raise; here it is not spoken. A request's pronunciations apply to
//! English only.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::ops::Range;

use fancy_regex::Regex;
use jieba_rs::Jieba;

use super::{chunk_sentences, read_sentences, split, Sentence, Word};

/// pypinyin's readings (see `scripts/mandarin-data.py`).
const PINYIN_DATA: &[u8] = include_bytes!("../data/mandarin-pinyin.txt.gz");

/// The Mandarin front end: jieba's dictionary, pypinyin's readings and cn2an's patterns.
pub struct Mandarin {
    jieba: Jieba,
    /// Each syllable's phonemes, by syllable number.
    ipa: Vec<String>,
    /// Each character's first reading (a syllable number).
    chars: HashMap<char, u16>,
    /// Each phrase's readings.
    phrases: HashMap<Box<str>, Box<[u16]>>,
    /// Every prefix of every phrase (pypinyin's `PrefixSet`).
    prefixes: HashSet<Box<str>>,
    numbers: Numbers,
}

/// A char of the normalised text and the chars of the sentence it came from.
#[derive(Clone, Debug)]
struct Normal {
    c: char,
    origin: Range<usize>,
}

/// cn2an's an2cn patterns (`Transform.transform`), in the order it applies them.
struct Numbers {
    range: Regex,
    date: Regex,
    year: Regex,
    digits: Regex,
    fraction: Regex,
    percent: Regex,
    celsius: Regex,
    number: Regex,
    ten_thousands: Regex,
}

/// cn2an's measure words (a range before one is read 三到五).
const MEASURE_WORDS: &str = "斤|克|千克|公斤|吨|米|厘米|毫米|公里|升|毫升|元|角|分|个|只|条|张|块|瓶|杯|份|本|辆|台|匹|头|位|亩|小时|分钟|秒|天|半";

impl Numbers {
    fn new() -> Result<Numbers, String> {
        let re = |p: &str| Regex::new(p).map_err(|e| format!("Mandarin: pattern {p}: {e}"));
        Ok(Numbers {
            range: re(&format!(r"\d+(\.\d+)?-\d+(\.\d+)?(?=({MEASURE_WORDS}))"))?,
            date: re(r"(\d{2,4}年)?(\d{1,2}月)?(\d{1,2}日)?")?,
            year: re(r"\d+(?=年)")?,
            digits: re(r"\d+")?,
            fraction: re(r"\d+/\d+")?,
            percent: re(r"-?(\d+\.)?\d+%")?,
            celsius: re(r"\d+℃")?,
            number: re(r"-?(\d+\.)?\d+")?,
            ten_thousands: re("([万亿])零([一二三四五六七八九壹贰叁肆伍陆柒捌玖][千仟])")?,
        })
    }

    /// cn2an's `transform(text, "an2cn")` over `text`, keeping each char's origin (a number's
    /// reading comes from all of the number).
    fn transform(&self, text: Vec<Normal>) -> Vec<Normal> {
        let text = substitute(text, &self.range, |m| {
            let (start, end) = m.split_once('-')?;
            Some(format!("{}到{}", self.an2cn(start, false)?, self.an2cn(end, false)?))
        });
        // A date's numbers each have their own origin (2024年 is a word apart from 3月).
        let text = replace(&text, &self.date, false, |m, _| {
            let year = replace(m, &self.year, true, |d, s| from_all(d, self.an2cn(s, true)))?;
            // cn2an gives back the year's reading when the rest fails.
            Some(replace(&year, &self.digits, true, |d, s| from_all(d, self.an2cn(s, false))).unwrap_or(year))
        })
        .unwrap_or(text);
        let text = substitute(text, &self.fraction, |m| {
            let (numerator, denominator) = m.split_once('/')?;
            Some(format!("{}分之{}", self.an2cn(denominator, false)?, self.an2cn(numerator, false)?))
        });
        let text =
            substitute(text, &self.percent, |m| Some(format!("百分之{}", self.an2cn(m.strip_suffix('%')?, false)?)));
        let text =
            substitute(text, &self.celsius, |m| Some(format!("{}摄氏度", self.an2cn(m.strip_suffix('℃')?, false)?)));
        substitute(text, &self.number, |m| self.an2cn(m, false))
    }

    /// cn2an's `An2Cn.an2cn(number, "direct" or "low")`; None where it raises (cn2an then
    /// leaves the text as it was).
    fn an2cn(&self, number: &str, direct: bool) -> Option<String> {
        // Full-width digits to ASCII (proces' full_angle_to_half_angle).
        let number: String = number
            .chars()
            .map(|c| match c {
                '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0).unwrap_or(c),
                '\u{3000}' => ' ',
                _ => c,
            })
            .collect();
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '-') {
            return None;
        }
        let (sign, number) = match number.strip_prefix('-') {
            Some(rest) => ("负", rest),
            None => ("", number.as_str()),
        };
        let out = if direct {
            number.chars().map(|d| if d == '.' { Some('点') } else { low_digit(d) }).collect::<Option<String>>()?
        } else {
            let mut parts = number.split('.');
            let (integer, decimal) = (parts.next()?, parts.next());
            if parts.next().is_some() {
                return None;
            }
            let mut out = self.integer(integer)?;
            if let Some(decimal) = decimal {
                if !decimal.is_empty() {
                    out.push('点');
                }
                for d in decimal.chars().take(16) {
                    out.push(low_digit(d)?);
                }
            }
            out
        };
        Some(format!("{sign}{out}"))
    }

    /// cn2an's `__integer_convert` in "low" mode.
    fn integer(&self, digits: &str) -> Option<String> {
        const UNITS: [&str; 16] =
            ["", "十", "百", "千", "万", "十", "百", "千", "亿", "十", "百", "千", "万", "十", "百", "千"];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Python's int(): leading zeros go.
        let digits = digits.trim_start_matches('0');
        let digits = if digits.is_empty() { "0" } else { digits };
        let n = digits.len();
        if n > UNITS.len() {
            return None;
        }
        let mut out = String::new();
        for (i, d) in digits.chars().enumerate() {
            let unit = UNITS[n - i - 1];
            if d != '0' {
                out.push(low_digit(d)?);
                out.push_str(unit);
            } else {
                if (n - i - 1) % 4 == 0 {
                    out.push('零');
                    out.push_str(unit);
                }
                if i > 0 && !out.ends_with('零') {
                    out.push('零');
                }
            }
        }
        let out = out
            .replace("零零", "零")
            .replace("零万", "万")
            .replace("零亿", "亿")
            .replace("亿万", "亿")
            .trim_matches('零')
            .to_owned();
        let out = self.ten_thousands.replace_all(&out, "$1$2").into_owned();
        let out = match out.strip_prefix("一十") {
            Some(rest) => format!("十{rest}"),
            None => out,
        };
        Some(if out.is_empty() { "零".to_owned() } else { out })
    }
}

/// A digit's reading (cn2an's `NUMBER_LOW_AN2CN`).
fn low_digit(d: char) -> Option<char> {
    "零一二三四五六七八九".chars().nth(d.to_digit(10)? as usize)
}

/// The non-empty matches of `re` in `text`, as char ranges of it.
fn find(text: &[Normal], re: &Regex) -> Vec<Range<usize>> {
    let s: String = text.iter().map(|n| n.c).collect();
    // The char index of each byte offset that starts a char.
    let mut index = vec![0usize; s.len() + 1];
    for (i, (b, _)) in s.char_indices().enumerate() {
        index[b] = i;
    }
    index[s.len()] = text.len();
    re.find_iter(&s)
        .map_while(Result::ok)
        .filter(|m| m.start() < m.end())
        .map(|m| index[m.start()]..index[m.end()])
        .collect()
}

/// `re.sub(pattern, f, text)` over normalised chars: `f` gives a match's replacement (None: the
/// match stays as it is, cn2an's warning path); None where `all` and some match has none.
fn replace(
    text: &[Normal],
    re: &Regex,
    all: bool,
    f: impl Fn(&[Normal], &str) -> Option<Vec<Normal>>,
) -> Option<Vec<Normal>> {
    let mut out = Vec::with_capacity(text.len());
    let mut last = 0;
    for r in find(text, re) {
        let matched: String = text[r.clone()].iter().map(|n| n.c).collect();
        out.extend_from_slice(&text[last..r.start]);
        match f(&text[r.clone()], &matched) {
            Some(replacement) => out.extend(replacement),
            None if all => return None,
            None => out.extend_from_slice(&text[r.clone()]),
        }
        last = r.end;
    }
    out.extend_from_slice(&text[last..]);
    Some(out)
}

/// A match's replacement: `reading`, each char from all of the match's chars (None: the match
/// is its own reading).
fn from_all(matched: &[Normal], reading: Option<String>) -> Option<Vec<Normal>> {
    let reading = reading?;
    if reading.chars().eq(matched.iter().map(|n| n.c)) {
        return Some(matched.to_vec());
    }
    let origin = span(matched);
    Some(reading.chars().map(|c| Normal { c, origin: origin.clone() }).collect())
}

/// `re.sub(pattern, f, text)` where a match's replacement `f` gives comes from all of it.
fn substitute(text: Vec<Normal>, re: &Regex, f: impl Fn(&str) -> Option<String>) -> Vec<Normal> {
    replace(&text, re, false, |m, s| from_all(m, f(s))).unwrap_or(text)
}

/// misaki's `map_punctuation`: a char's replacement, if it has one.
fn punctuation(c: char) -> Option<&'static str> {
    Some(match c {
        '、' | '，' => ", ",
        '。' | '．' => ". ",
        '！' => "! ",
        '：' => ": ",
        '；' => "; ",
        '？' => "? ",
        '«' | '《' | '「' | '【' => " “",
        '»' | '》' | '」' | '】' => "” ",
        '（' => " (",
        '）' => ") ",
        _ => return None,
    })
}

/// Python's `str.isspace`.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The ideographs misaki reads (its legacy path's `[\u4E00-\u9FFF]`).
fn is_ideograph(c: char) -> bool {
    ('\u{4e00}'..='\u{9fff}').contains(&c)
}

/// Whether `text` holds Chinese characters (CJK unified ideographs, their extensions and
/// compatibility ideographs): what a Mandarin voice reads as Mandarin when the request names no
/// language.
pub fn has_han(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c, '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}'
            | '\u{20000}'..='\u{2ebef}' | '\u{30000}'..='\u{323af}')
    })
}

/// misaki's pinyin-to-IPA (`ZHG2P.py2ipa` over `transcription.pinyin_to_ipa`, first variant, tones
/// as arrows, U+032F dropped) for one TONE3 syllable (`zhong1`, `lv4`, `de5`); None where misaki
/// raises.
pub fn syllable_ipa(syllable: &str) -> Option<String> {
    let tone = match syllable.chars().last()? {
        '1' => "→",
        '2' => "↗",
        '3' => "↓",
        '4' => "↘",
        '5' => "",
        _ => return None,
    };
    let normal = &syllable[..syllable.len() - 1];
    if normal.is_empty() || normal.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    // Interjections and syllabic consonants.
    let whole = match normal {
        "io" => Some("jɔ"),
        "ê" => Some("ɛ"),
        "er" => Some("ɚ"),
        "o" => Some("ɔ"),
        "hm" => Some("hm"),
        "hng" => Some("hŋ"),
        "m" => Some("m"),
        "n" => Some("n"),
        "ng" => Some("ŋ"),
        _ => None,
    };
    if let Some(ipa) = whole {
        return Some(format!("{ipa}{tone}"));
    }
    let initial = initial_of(normal);
    let final_ = final_of(&normal.replace('v', "ü"))?;
    let (initial_ipa, rest) = match initial {
        Some(i) => (initial_ipa(i)?, i),
        None => ("", ""),
    };
    // The apical vowel of zhi chi shi ri, zi ci si (misaki's ɻ̩ and ɹ̩ both become ɨ).
    let (body, coda) = if final_ == "i" && matches!(rest, "zh" | "ch" | "sh" | "r" | "z" | "c" | "s") {
        ("ɨ", "")
    } else {
        final_ipa(final_)?
    };
    Some(format!("{initial_ipa}{body}{tone}{coda}"))
}

/// pypinyin's strict initials, in its order.
const INITIALS: [&str; 21] =
    ["b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "zh", "ch", "sh", "r", "z", "c", "s"];

/// pypinyin's finals (`_FINALS`).
const FINALS: [&str; 37] = [
    "i", "u", "ü", "a", "ia", "ua", "o", "uo", "e", "ie", "üe", "ai", "uai", "ei", "uei", "ao", "iao", "ou", "iou",
    "an", "ian", "uan", "üan", "en", "in", "uen", "ün", "ang", "iang", "uang", "eng", "ing", "ueng", "ong", "iong",
    "er", "ê",
];

/// pypinyin's `to_initials(pinyin, strict=True)`.
fn initial_of(pinyin: &str) -> Option<&'static str> {
    INITIALS.iter().copied().find(|i| pinyin.starts_with(i))
}

/// pypinyin's `to_finals(pinyin, strict=True, v_to_u=True)` (ü written ü); None for none.
fn final_of(pinyin: &str) -> Option<&'static str> {
    let converted = convert_finals(pinyin);
    let initial = initial_of(&converted).unwrap_or("");
    let rest = &converted[initial.len()..];
    let find = |f: &str| FINALS.iter().copied().find(|x| *x == f);
    if let Some(f) = find(rest) {
        return Some(f);
    }
    // y and w as initials (yo).
    let loose = ["y", "w"].iter().chain(INITIALS.iter()).copied().find(|i| converted.starts_with(i)).unwrap_or("");
    find(&converted[loose.len()..])
}

/// pypinyin's `standard.convert_finals`: the finals as the scheme writes them without y, w and
/// the spelling abbreviations (yu: ü, you: iou, gui: guei, lun: luen, ju: jü).
fn convert_finals(pinyin: &str) -> String {
    let mut p = pinyin.to_owned();
    if let Some(rest) = pinyin.strip_prefix('y') {
        p = if let Some(after) = rest.strip_prefix('u') {
            format!("ü{after}")
        } else if rest.starts_with('i') {
            rest.to_owned()
        } else {
            format!("i{rest}")
        };
    }
    if let Some(rest) = pinyin.strip_prefix('w') {
        p = if rest.starts_with('u') { rest.to_owned() } else { format!("u{rest}") };
    }
    if (pinyin.starts_with('y') || pinyin.starts_with('w')) && !FINALS.contains(&p.as_str()) {
        p = pinyin.to_owned();
    }
    let mut chars = p.chars();
    if let (Some(first @ ('j' | 'q' | 'x')), Some('u')) = (chars.next(), chars.next()) {
        p = format!("{first}ü{}", chars.as_str());
    }
    for (short, full) in [("iu", "iou"), ("ui", "uei"), ("un", "uen")] {
        if let Some(s) = p.strip_suffix(short).filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase())) {
            p = format!("{s}{full}");
        }
    }
    p
}

/// misaki's `INITIAL_MAPPING`, first variants.
fn initial_ipa(initial: &str) -> Option<&'static str> {
    Some(match initial {
        "b" => "p",
        "c" => "ʦʰ",
        "ch" => "\u{ab67}ʰ",
        "d" => "t",
        "f" => "f",
        "g" => "k",
        "h" => "x",
        "j" => "ʨ",
        "k" => "kʰ",
        "l" => "l",
        "m" => "m",
        "n" => "n",
        "p" => "pʰ",
        "q" => "ʨʰ",
        "r" => "ɻ",
        "s" => "s",
        "sh" => "ʂ",
        "t" => "tʰ",
        "x" => "ɕ",
        "z" => "ʦ",
        "zh" => "\u{ab67}",
        _ => return None,
    })
}

/// misaki's `FINAL_MAPPING`, first variants, as (up to the tone, after the tone).
fn final_ipa(final_: &str) -> Option<(&'static str, &'static str)> {
    Some(match final_ {
        "a" => ("a", ""),
        "ai" => ("ai", ""),
        "an" => ("a", "n"),
        "ang" => ("a", "ŋ"),
        "ao" => ("au", ""),
        "e" => ("ɤ", ""),
        "ei" => ("ei", ""),
        "en" => ("ə", "n"),
        "eng" => ("ə", "ŋ"),
        "i" => ("i", ""),
        "ia" => ("ja", ""),
        "ian" => ("jɛ", "n"),
        "iang" => ("ja", "ŋ"),
        "iao" => ("jau", ""),
        "ie" => ("je", ""),
        "in" => ("i", "n"),
        "iou" => ("jou", ""),
        "ing" => ("i", "ŋ"),
        "iong" => ("jʊ", "ŋ"),
        "ong" => ("ʊ", "ŋ"),
        "ou" => ("ou", ""),
        "u" => ("u", ""),
        "uei" => ("wei", ""),
        "ua" => ("wa", ""),
        "uai" => ("wai", ""),
        "uan" => ("wa", "n"),
        "uen" => ("wə", "n"),
        "uang" => ("wa", "ŋ"),
        "ueng" => ("wə", "ŋ"),
        "uo" | "o" => ("wo", ""),
        "ü" => ("y", ""),
        "üe" => ("ɥe", ""),
        "üan" => ("ɥɛ", "n"),
        "ün" => ("y", "n"),
        _ => return None,
    })
}

/// One word of the phonemised text: its phonemes and the chars of the sentence it came from.
struct Token {
    phonemes: String,
    origin: Range<usize>,
}

impl Mandarin {
    /// Builds the front end from the embedded data (jieba's dictionary and pypinyin's readings;
    /// about 0.2 s in a release build). The error says what in the data was wrong (it cannot
    /// be, short of a bad build).
    pub fn new() -> Result<Mandarin, String> {
        let mut raw = String::new();
        flate2::read::GzDecoder::new(PINYIN_DATA)
            .read_to_string(&mut raw)
            .map_err(|e| format!("Mandarin: pinyin data: {e}"))?;
        let mut ipa: Vec<String> = Vec::new();
        let mut numbers: HashMap<String, u16> = HashMap::new();
        let mut syllable = |s: &str| -> Result<u16, String> {
            if let Some(&n) = numbers.get(s) {
                return Ok(n);
            }
            let phonemes = syllable_ipa(s).ok_or_else(|| format!("Mandarin: pinyin data: syllable {s:?}"))?;
            let n = u16::try_from(ipa.len()).map_err(|_| "Mandarin: pinyin data: too many syllables".to_owned())?;
            ipa.push(phonemes);
            numbers.insert(s.to_owned(), n);
            Ok(n)
        };
        let mut chars = HashMap::new();
        let mut phrases = HashMap::new();
        let mut prefixes = HashSet::new();
        let mut section = "";
        for line in raw.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let (key, value) = line.split_once('\t').ok_or_else(|| format!("Mandarin: pinyin data: line {line:?}"))?;
            match section {
                "[chars]" => {
                    let n = syllable(key)?;
                    chars.extend(value.chars().map(|c| (c, n)));
                }
                "[phrases]" => {
                    let mut readings = Vec::new();
                    let mut start = 0;
                    for (i, c) in value.char_indices() {
                        if c.is_ascii_digit() {
                            readings.push(syllable(&value[start..=i])?);
                            start = i + 1;
                        }
                    }
                    if readings.len() != key.chars().count() || start != value.len() {
                        return Err(format!("Mandarin: pinyin data: phrase {line:?}"));
                    }
                    for (i, c) in key.char_indices() {
                        prefixes.insert(Box::from(&key[..i + c.len_utf8()]));
                    }
                    phrases.insert(Box::from(key), readings.into_boxed_slice());
                }
                _ => return Err(format!("Mandarin: pinyin data: section {section:?}")),
            }
        }
        if chars.is_empty() || phrases.is_empty() {
            return Err("Mandarin: pinyin data: empty".to_owned());
        }
        let mut jieba = Jieba::new();
        // jieba 0.42.1's dictionary has one word more than jieba-rs's (its total frequency
        // weighs every path).
        jieba.add_word("B超", Some(3), Some("n"));
        Ok(Mandarin { jieba, ipa, chars, phrases, prefixes, numbers: Numbers::new()? })
    }

    /// `text`'s sentences: cut after 。！？ and ASCII `.!?` (a point between digits is a decimal
    /// point) and at line breaks; closing quotes and brackets stay with their sentence. One longer
    /// than [`crate::MAX_SENTENCE_CHARS`] chars is cut again after its last comma or space.
    pub fn split_sentences<'a>(&self, text: &'a str) -> Vec<&'a str> {
        split::cut_after_ends(
            text,
            |chars, k| {
                let decimal = chars[k].1 == '.'
                    && k >= 1
                    && chars[k - 1].1.is_ascii_digit()
                    && chars.get(k + 1).is_some_and(|&(_, d)| d.is_ascii_digit());
                matches!(chars[k].1, '。' | '！' | '？' | '!' | '?' | '.' | '\n') && !decimal
            },
            |c| {
                matches!(
                    c,
                    '。' | '！'
                        | '？'
                        | '!'
                        | '?'
                        | '.'
                        | '”'
                        | '’'
                        | '"'
                        | '\''
                        | '」'
                        | '』'
                        | '》'
                        | '）'
                        | ')'
                        | '】'
                )
            },
            |c| matches!(c, '、' | '，' | ',' | '；' | ';'),
        )
    }

    /// The phonemes of `text` read at once: misaki's `ZHG2P()(text)`.
    pub fn phonemize(&self, text: &str) -> String {
        self.phonemes_and_words(text).0
    }

    /// `text`'s sentences (see [`Mandarin::split_sentences`]), each cut in chunks the model
    /// takes, with their words (a word of jieba's, or a run of letters or digits outside the
    /// Chinese text; the words that one number's reading makes are one word); sentences with no
    /// phonemes are left out.
    pub fn sentences(&self, text: &str) -> Vec<Sentence> {
        let mut out = Vec::new();
        for (sent, phonemes, words) in read_sentences(text, self.split_sentences(text), |s| self.phonemes_and_words(s))
        {
            let whole = phonemes.chars().count();
            out.extend(chunk_sentences(text, sent, &phonemes, words).into_iter().map(|mut chunk| {
                // A sentence read in one chunk keeps its own text (its closing marks included).
                if chunk.phonemes.chars().count() >= whole {
                    chunk.text = sent.to_string();
                }
                chunk
            }));
        }
        out
    }

    /// The phonemes of `text` and its words (ranges into `text`).
    fn phonemes_and_words(&self, text: &str) -> (String, Vec<Word>) {
        let input: Vec<Normal> = text.chars().enumerate().map(|(i, c)| Normal { c, origin: i..i + 1 }).collect();
        if input.iter().all(|n| is_space(n.c)) {
            return (String::new(), Vec::new());
        }
        let numbers = self.numbers.transform(input);
        let mut normal: Vec<Normal> = Vec::with_capacity(numbers.len());
        for n in numbers {
            match punctuation(n.c) {
                Some(p) => normal.extend(p.chars().map(|c| Normal { c, origin: n.origin.clone() })),
                None => normal.push(n),
            }
        }
        let first = normal.iter().position(|n| !is_space(n.c)).unwrap_or(normal.len());
        let last = normal.iter().rposition(|n| !is_space(n.c)).map_or(first, |l| l + 1);
        let normal = &normal[first..last];

        // (phoneme char, token) for the output; tokens are words.
        let mut out: Vec<(char, Option<usize>)> = Vec::new();
        let mut tokens: Vec<Token> = Vec::new();
        let mut i = 0;
        while i < normal.len() {
            let han = is_ideograph(normal[i].c);
            let end = normal[i..].iter().position(|n| is_ideograph(n.c) != han).map_or(normal.len(), |k| i + k);
            let run = &normal[i..end];
            if han {
                for (w, (word, text)) in self.cut_words(run).into_iter().enumerate() {
                    if w > 0 {
                        out.push((' ', None));
                    }
                    let phonemes = self.word_phonemes(&text);
                    out.extend(phonemes.chars().map(|c| (c, Some(tokens.len()))));
                    tokens.push(Token { phonemes, origin: span(word) });
                }
            } else {
                let mut k = 0;
                while k < run.len() {
                    if !run[k].c.is_alphanumeric() {
                        if run[k].c != '\u{32f}' {
                            out.push((run[k].c, None));
                        }
                        k += 1;
                        continue;
                    }
                    let e = run[k..].iter().position(|n| !n.c.is_alphanumeric()).map_or(run.len(), |j| k + j);
                    let phonemes: String = run[k..e].iter().map(|n| n.c).collect();
                    out.extend(phonemes.chars().map(|c| (c, Some(tokens.len()))));
                    tokens.push(Token { phonemes, origin: span(&run[k..e]) });
                    k = e;
                }
            }
            i = end;
        }
        spell(text, &out, &tokens)
    }

    /// `run` (ideographs) cut into words as `jieba.lcut` cuts it: jieba 0.42.1 takes
    /// U+4E00..U+9FD5 as Chinese, any later ideograph as a word of its own.
    fn cut_words<'a>(&self, run: &'a [Normal]) -> Vec<(&'a [Normal], String)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < run.len() {
            if run[i].c > '\u{9fd5}' {
                out.push((&run[i..i + 1], run[i].c.to_string()));
                i += 1;
                continue;
            }
            let end = run[i..].iter().position(|n| n.c > '\u{9fd5}').map_or(run.len(), |k| i + k);
            let block = &run[i..end];
            let s: String = block.iter().map(|n| n.c).collect();
            for token in self.jieba.cut(&s, true) {
                out.push((&block[token.start..token.end], token.word.to_owned()));
            }
            i = end;
        }
        out
    }

    /// A jieba word's phonemes: misaki's `word2ipa` (pypinyin's `lazy_pinyin(word, TONE3,
    /// neutral_tone_with_five=True)`, each syllable to IPA, run together).
    fn word_phonemes(&self, word: &str) -> String {
        let mut out = String::new();
        for piece in self.cut_phrases(word) {
            match self.phrases.get(piece) {
                Some(readings) => {
                    for &r in readings.iter() {
                        out.push_str(&self.ipa[r as usize]);
                    }
                }
                None => {
                    for c in piece.chars() {
                        if let Some(&r) = self.chars.get(&c) {
                            out.push_str(&self.ipa[r as usize]);
                        }
                    }
                }
            }
        }
        out
    }

    /// pypinyin's `mmseg.seg.cut(word)` (forward maximum matching over its phrases, strict:
    /// what is no phrase goes one char at a time).
    fn cut_phrases<'a>(&self, word: &'a str) -> Vec<&'a str> {
        let mut out = Vec::new();
        let mut remain = word;
        'outer: while !remain.is_empty() {
            let mut last_valid = 0;
            for (i, c) in remain.char_indices() {
                let end = i + c.len_utf8();
                let prefix = &remain[..end];
                if self.prefixes.contains(prefix) {
                    if self.phrases.contains_key(prefix) {
                        last_valid = end;
                    }
                } else {
                    let cut = if last_valid > 0 { last_valid } else { remain.chars().next().map_or(0, char::len_utf8) };
                    out.push(&remain[..cut]);
                    remain = &remain[cut..];
                    continue 'outer;
                }
            }
            // All of the rest is a prefix of some phrase.
            if last_valid > 0 {
                out.push(&remain[..last_valid]);
                remain = &remain[last_valid..];
            } else {
                let mut at = 0;
                for c in remain.chars() {
                    out.push(&remain[at..at + c.len_utf8()]);
                    at += c.len_utf8();
                }
                break;
            }
        }
        out
    }
}

/// The chars of the sentence that `normal` came from.
fn span(normal: &[Normal]) -> Range<usize> {
    let start = normal.iter().map(|n| n.origin.start).min().unwrap_or(0);
    let end = normal.iter().map(|n| n.origin.end).max().unwrap_or(start);
    start..end
}

/// The phoneme string and the words of `text` (tokens of one stretch of it, as the words one
/// number's reading makes, are one word).
fn spell(text: &str, out: &[(char, Option<usize>)], tokens: &[Token]) -> (String, Vec<Word>) {
    let phonemes: String = out.iter().map(|o| o.0).collect();
    let offsets: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
    let mut spans: Vec<Option<(usize, usize)>> = vec![None; tokens.len()];
    for (i, o) in out.iter().enumerate() {
        if let Some(span) = o.1.and_then(|t| spans.get_mut(t)) {
            *span = Some(span.map_or((i, i), |(a, _)| (a, i)));
        }
    }
    let mut words: Vec<Word> = Vec::new();
    let mut last_end = 0;
    for (t, token) in tokens.iter().enumerate() {
        let range = match spans[t] {
            Some((a, b)) => a..b + 1,
            None => last_end..last_end,
        };
        debug_assert_eq!(range.len(), token.phonemes.chars().count());
        last_end = range.end.max(last_end);
        let (cs, ce) = (token.origin.start.min(offsets.len() - 1), token.origin.end.min(offsets.len() - 1));
        if let Some(w) = words.last_mut().filter(|w| cs < w.chars.end) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Mandarin>();
    }

    #[test]
    fn syllables() {
        for (pinyin, ipa) in [
            ("zhong1", "ꭧʊ→ŋ"),
            ("lv4", "ly↘"),
            ("lve4", "lɥe↘"),
            ("yu2", "y↗"),
            ("you3", "jou↓"),
            ("gui4", "kwei↘"),
            ("lun2", "lwə↗n"),
            ("jun1", "ʨy→n"),
            ("shi4", "ʂɨ↘"),
            ("zi5", "ʦɨ"),
            ("er4", "ɚ↘"),
            ("wu3", "u↓"),
            ("yo1", "wo→"),
            ("ng2", "ŋ↗"),
            ("hng5", "hŋ"),
            ("de5", "tɤ"),
        ] {
            assert_eq!(syllable_ipa(pinyin).as_deref(), Some(ipa), "{pinyin}");
        }
        assert_eq!(syllable_ipa("zhong"), None);
    }

    #[test]
    fn numbers() {
        let n = Numbers::new().unwrap();
        let read = |s: &str| -> String {
            let v = s.chars().enumerate().map(|(i, c)| Normal { c, origin: i..i + 1 }).collect();
            n.transform(v).iter().map(|n| n.c).collect()
        };
        assert_eq!(read("2024年3月15日"), "二零二四年三月十五日");
        assert_eq!(read("12.5%"), "百分之十二点五");
        assert_eq!(read("-5%"), "百分之负五");
        assert_eq!(read("1/3"), "三分之一");
        assert_eq!(read("25℃"), "二十五摄氏度");
        assert_eq!(read("3-5个"), "三到五个");
        assert_eq!(read("100010"), "十万零一十");
        assert_eq!(read("10"), "十");
        assert_eq!(read("110"), "一百一十");
        assert_eq!(read("100000000"), "一亿");
        assert_eq!(read("1000000001"), "十亿零一");
        assert_eq!(read("12345678901234567"), "12345678901234567");
        assert_eq!(read("007"), "七");
        assert_eq!(read("１２"), "十二");
    }
}
