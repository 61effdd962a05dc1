//! Upstream vLLM-Omni's sentence and clause splitter (`speech_text_splitter.py`, the
//! `split_granularity` of docs/protocol-upstream.md §2.3), for text that arrives in pieces: each
//! [`Splitter::feed`] returns the units that are complete so far, [`Splitter::flush`] the rest.
//!
//! A unit ends at a terminator (`.!?` and the script ones; clause mode adds `,;` and theirs),
//! extended over a run of further terminators and closing quotes or brackets, when whitespace
//! follows (script terminators need no whitespace). Not a boundary: a `.` or `,` between digits
//! (`3.14`, `1,000`), the `.` of an abbreviation (`Dr.`, `e.g.`) or of an initial (`J.`), an ASCII
//! terminator followed by a non-space (`a.b`). A terminator at the end of the text waits for the
//! next feed, which may extend its run or show it to be a decimal point.
//!
//! Indices are characters, not bytes. The character classes are Rust's (`char::is_alphanumeric`,
//! `is_numeric`, `is_alphabetic`) where the original uses Python's; they differ only outside
//! ASCII (Rust counts combining vowel signs as alphabetic and `½` as numeric), which moves an
//! abbreviation or decimal decision only for such a character right before a `.` or around a `,`.
//!
//! The Wyoming transport splits streamed text with it; the WebSocket's `split_granularity` is
//! meant to use the same one.

use crate::text::{is_py_whitespace, py_strip};

/// How finely text is split into units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Granularity {
    /// Never split: everything fed comes back as one unit at [`Splitter::flush`].
    None,
    /// At sentence terminators.
    Sentence,
    /// At sentence terminators and at commas and semicolons.
    Clause,
}

/// ASCII sentence terminators.
pub const ASCII_SENTENCE_TERMINATORS: [char; 3] = ['.', '!', '?'];
/// ASCII clause terminators: the sentence ones and `,` `;`.
pub const ASCII_CLAUSE_TERMINATORS: [char; 5] = ['.', '!', '?', ',', ';'];
/// Sentence terminators of other scripts (CJK, Devanagari, Arabic), which split whatever follows.
pub const SCRIPT_SENTENCE_TERMINATORS: [char; 7] = ['。', '！', '？', '…', '।', '॥', '؟'];
/// Clause terminators of other scripts: the sentence ones and their commas and semicolons.
pub const SCRIPT_CLAUSE_TERMINATORS: [char; 11] = ['。', '！', '？', '…', '।', '॥', '؟', '，', '；', '،', '؛'];
/// Closing quotes and brackets, absorbed into the run after a terminator.
pub const CLOSING_DELIMITERS: [char; 12] = ['"', '\'', '”', '’', '»', ')', ']', '}', '』', '」', '）', '】'];
/// Tokens whose `.` ends no sentence (compared lower-cased, without their outer dots).
pub const ABBREVIATIONS: [&str; 25] = [
    "dr", "mr", "mrs", "ms", "prof", "sr", "jr", "st", "mt", "fig", "no", "vs", "etc", "approx", "dept", "inc", "ltd",
    "co", "al", "e.g", "i.e", "u.s", "u.k", "a.m", "p.m",
];
/// How far back an abbreviation is looked for: the longest entry, `approx`.
pub const ABBREVIATION_LOOK_BACK: usize = 6;

impl Granularity {
    /// The terminators of this granularity (empty for `None`).
    pub fn terminators(self) -> Vec<char> {
        match self {
            Granularity::None => Vec::new(),
            Granularity::Sentence => [&ASCII_SENTENCE_TERMINATORS[..], &SCRIPT_SENTENCE_TERMINATORS].concat(),
            Granularity::Clause => [&ASCII_CLAUSE_TERMINATORS[..], &SCRIPT_CLAUSE_TERMINATORS].concat(),
        }
    }
}

/// What [`extract_complete_units`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extracted {
    /// The complete units, stripped, in order.
    pub units: Vec<String>,
    /// The text not yet part of a unit.
    pub remainder: String,
    /// Where in `remainder` (in characters) the next scan starts.
    pub next_scan: usize,
}

/// Split `buffer` at the terminators in `terminators`, scanning from character `scan_from`;
/// with `flush`, what is left becomes a last unit. The upstream function of the same name.
pub fn extract_complete_units(buffer: &str, terminators: &[char], flush: bool, scan_from: usize) -> Extracted {
    let chars: Vec<char> = buffer.chars().collect();
    let scan = scan(&chars, terminators, flush, scan_from);
    let remainder: String = chars[scan.last_split..].iter().collect();
    Extracted { units: scan.units, remainder, next_scan: scan.next_scan }
}

struct Scan {
    units: Vec<String>,
    /// The remainder starts here.
    last_split: usize,
    /// The next scan starts here, relative to the remainder.
    next_scan: usize,
}

fn is_run_char(c: char) -> bool {
    ASCII_CLAUSE_TERMINATORS.contains(&c) || SCRIPT_CLAUSE_TERMINATORS.contains(&c) || CLOSING_DELIMITERS.contains(&c)
}

fn is_token_char(c: char) -> bool {
    c.is_alphanumeric() || c == '.'
}

/// A `.` or `,` with a digit on both sides (the right one already in the buffer).
fn is_numeric_separator(chars: &[char], i: usize) -> bool {
    matches!(chars[i], '.' | ',')
        && i > 0
        && chars[i - 1].is_numeric()
        && chars.get(i + 1).is_some_and(|c| c.is_numeric())
}

/// The `.` at `i` ends an abbreviation or an initial. The token before it is looked at over at
/// most [`ABBREVIATION_LOOK_BACK`] characters, so a long run of dots stays linear.
fn is_abbreviation_dot(chars: &[char], i: usize) -> bool {
    let mut start = i;
    while start > 0 && i - start < ABBREVIATION_LOOK_BACK && is_token_char(chars[start - 1]) {
        start -= 1;
    }
    if start > 0 && is_token_char(chars[start - 1]) {
        return false;
    }
    let token = &chars[start..i];
    match token {
        [] => false,
        [c] if c.is_alphabetic() => true,
        _ => {
            let lowered: String = token.iter().collect::<String>().to_lowercase();
            ABBREVIATIONS.contains(&lowered.trim_matches('.'))
        }
    }
}

fn push_unit(units: &mut Vec<String>, text: &[char]) {
    let text: String = text.iter().collect();
    let unit = py_strip(&text);
    if !unit.is_empty() {
        units.push(unit.to_owned());
    }
}

fn scan(chars: &[char], terminators: &[char], flush: bool, scan_from: usize) -> Scan {
    let n = chars.len();
    let mut units = Vec::new();
    let mut last_split = 0;
    let mut i = scan_from.min(n);
    while i < n {
        let c = chars[i];
        if !terminators.contains(&c) || is_numeric_separator(chars, i) || (c == '.' && is_abbreviation_dot(chars, i)) {
            i += 1;
            continue;
        }
        let mut run_end = i + 1;
        while run_end < n && is_run_char(chars[run_end]) {
            run_end += 1;
        }
        if run_end == n && !flush {
            // The run may still grow, or the terminator turn out to be a decimal point.
            return Scan { units, last_split, next_scan: i - last_split };
        }
        if ASCII_CLAUSE_TERMINATORS.contains(&c) && run_end < n && !is_py_whitespace(chars[run_end]) {
            i = run_end;
            continue;
        }
        push_unit(&mut units, &chars[last_split..run_end]);
        let mut next = run_end;
        while next < n && is_py_whitespace(chars[next]) {
            next += 1;
        }
        last_split = next;
        i = next;
    }
    if flush {
        push_unit(&mut units, &chars[last_split..]);
        return Scan { units, last_split: n, next_scan: 0 };
    }
    Scan { units, last_split, next_scan: n - last_split }
}

/// Text fed in pieces, split into complete units as they become known.
#[derive(Clone, Debug)]
pub struct Splitter {
    granularity: Granularity,
    terminators: Vec<char>,
    /// Text not yet part of a unit, as characters so that a feed scans only what is new.
    buffer: Vec<char>,
    scan_from: usize,
}

impl Splitter {
    /// An empty splitter.
    pub fn new(granularity: Granularity) -> Splitter {
        Splitter { granularity, terminators: granularity.terminators(), buffer: Vec::new(), scan_from: 0 }
    }

    /// The granularity it splits at.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// Characters held that are not yet part of a returned unit.
    pub fn buffered_chars(&self) -> usize {
        self.buffer.len()
    }

    /// Add `text`; the units it completed, in order (none for [`Granularity::None`]).
    pub fn feed(&mut self, text: &str) -> Vec<String> {
        self.buffer.extend(text.chars());
        if self.granularity == Granularity::None {
            return Vec::new();
        }
        self.split(false)
    }

    /// Everything held, as the last units; the splitter is empty afterwards.
    pub fn flush(&mut self) -> Vec<String> {
        if self.granularity == Granularity::None {
            let mut units = Vec::new();
            push_unit(&mut units, &self.buffer);
            self.buffer.clear();
            self.scan_from = 0;
            return units;
        }
        self.split(true)
    }

    fn split(&mut self, flush: bool) -> Vec<String> {
        let Scan { units, last_split, next_scan } = scan(&self.buffer, &self.terminators, flush, self.scan_from);
        self.buffer.drain(..last_split);
        self.scan_from = next_scan;
        units
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    fn units(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    // docs/protocol-upstream.md §2.4, extract_complete_units examples 1-12.
    #[test]
    fn upstream_extract_examples() {
        let e = extract_complete_units("Hello world.", &set(".!?。"), false, 0);
        assert_eq!((e.units, e.remainder.as_str()), (vec![], "Hello world."));
        let e = extract_complete_units("Hello world.", &set(".!?。"), true, 0);
        assert_eq!((e.units, e.remainder.as_str()), (units(&["Hello world."]), ""));
        let e = extract_complete_units("Hello world. More", &set(".!?"), false, 0);
        assert_eq!((e.units, e.remainder.as_str()), (units(&["Hello world."]), "More"));
        let e = extract_complete_units("It costs 3.14 dollars. ", &set(".!?"), false, 0);
        assert_eq!((e.units, e.remainder.as_str()), (units(&["It costs 3.14 dollars."]), ""));
        let e = extract_complete_units("It is 1,000 rupees, sir. ", &set(".!?,;"), false, 0);
        assert_eq!(e.units, units(&["It is 1,000 rupees,", "sir."]));
        let e = extract_complete_units("Wait... Really?! Yes.", &set(".!?"), true, 0);
        assert_eq!(e.units, units(&["Wait...", "Really?!", "Yes."]));
        let e = extract_complete_units("He said \"Hello.\" Bye.", &set(".!?"), true, 0);
        assert_eq!(e.units, units(&["He said \"Hello.\"", "Bye."]));
        let e = extract_complete_units("Dr. Smith, e.g. J. R. Tolkien. Next.", &set(".!?"), true, 0);
        assert_eq!(e.units, units(&["Dr. Smith, e.g. J. R. Tolkien.", "Next."]));
        let e = extract_complete_units("We landed in Washington. Next.", &set(".!?"), true, 0);
        assert_eq!(e.units, units(&["We landed in Washington.", "Next."]));
        let long = "a.".repeat(20_000);
        let e = extract_complete_units(&long, &set(".!?"), true, 0);
        assert_eq!(e.units, vec![long.clone()]);
        let e = extract_complete_units("你好。世界。", &set(".!?。！？"), false, 0);
        assert_eq!((e.units, e.remainder.as_str()), (units(&["你好。"]), "世界。"));
        let e = extract_complete_units("你好。世界。", &set(".!?。！？"), true, 0);
        assert_eq!(e.units, units(&["你好。", "世界。"]));
        let e = extract_complete_units("नमस्ते। कैसे हो?", &set(".!?।॥؟"), true, 0);
        assert_eq!(e.units, units(&["नमस्ते।", "कैसे हो?"]));
        let e = extract_complete_units("no terminator yet", &set(".!?"), false, 0);
        assert_eq!((e.units.len(), e.remainder.as_str(), e.next_scan), (0, "no terminator yet", 17));
        let e = extract_complete_units("no terminator yet. Next", &set(".!?"), false, 17);
        assert_eq!((e.units, e.remainder.as_str()), (units(&["no terminator yet."]), "Next"));
    }

    // docs/protocol-upstream.md §2.4, SpeechTextSplitter examples 1-6.
    #[test]
    fn upstream_splitter_examples() {
        let mut s = Splitter::new(Granularity::None);
        assert!(s.feed("Hello world. ").is_empty());
        assert_eq!(s.flush(), units(&["Hello world."]));
        assert!(s.flush().is_empty());

        let mut s = Splitter::new(Granularity::Sentence);
        assert!(s.feed("Hello ").is_empty());
        assert_eq!(s.feed("world. "), units(&["Hello world."]));
        assert!(s.feed("How are you?").is_empty());
        assert_eq!(s.flush(), units(&["How are you?"]));

        let mut s = Splitter::new(Granularity::Sentence);
        assert!(s.feed("It costs 3").is_empty());
        assert!(s.feed(".").is_empty());
        assert_eq!(s.feed("14 dollars. "), units(&["It costs 3.14 dollars."]));

        let mut s = Splitter::new(Granularity::Clause);
        assert_eq!(s.feed("Hello, world. "), units(&["Hello,", "world."]));

        let mut s = Splitter::new(Granularity::Clause);
        assert_eq!(s.feed("مرحبا؛ كيف حالك"), units(&["مرحبا؛"]));

        assert!(Splitter::new(Granularity::Sentence).flush().is_empty());
    }

    #[test]
    fn sentence_mode_absorbs_a_comma_after_a_stop() {
        let mut s = Splitter::new(Granularity::Sentence);
        assert_eq!(s.feed("Yes., then more. "), units(&["Yes.,", "then more."]));
    }

    // However the text is cut into feeds, the units are those of feeding it whole.
    #[test]
    fn feeds_split_like_the_whole_text() {
        let text = "Dr. Who paid 3.50 dollars, e.g. twice! \"Really?\" she said. 你好。Ok... bye";
        for granularity in [Granularity::Sentence, Granularity::Clause] {
            let mut whole = Splitter::new(granularity);
            let mut expected = whole.feed(text);
            expected.extend(whole.flush());
            let chars: Vec<char> = text.chars().collect();
            for step in 1..8 {
                let mut s = Splitter::new(granularity);
                let mut got = Vec::new();
                for piece in chars.chunks(step) {
                    got.extend(s.feed(&piece.iter().collect::<String>()));
                }
                got.extend(s.flush());
                assert_eq!(got, expected, "{granularity:?}, pieces of {step}");
            }
        }
    }
}
