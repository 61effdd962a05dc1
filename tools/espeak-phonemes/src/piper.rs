// espeak-phonemes: speechstream's espeak-ng helper. Copyright the speechstream authors.
//
// This program is free software: you can redistribute it and/or modify it under the terms of the
// GNU General Public License as published by the Free Software Foundation, either version 3 of the
// License, or (at your option) any later version. It loads libespeak-ng (GPL-3.0-or-later).
//
// This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY;
// without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the
// GNU General Public License for more details: <https://www.gnu.org/licenses/>.

//! Piper's mode: the clauses of a text as piper-tts 1.8's `espeakbridge.get_phonemes` gives them
//! (`espeak_TextToPhonemesWithTerminator(&text, espeakCHARS_AUTO, espeakPHONEMES_IPA,
//! &terminator)` clause after clause: each clause's IPA, no tie, language switch flags left in;
//! its terminator (`.` `?` `!` `,` `:` `;` or none) and whether it ends a sentence).
//!
//! espeak-ng 1.51 (Debian 12's) has no `espeak_TextToPhonemesWithTerminator` (1.52 added it).
//! When the library has it (looked up at run time), it is used; otherwise the terminator is
//! worked out as espeak's `ReadClause` works it out, from the text the clause was read from:
//! `espeak_TextToPhonemes` moves the text pointer past the clause and past the one char it read
//! ahead (and keeps for the next clause), so the clause is the text up to that char; its
//! terminator is the class of the first char of the run of punctuation at its end (the rest of
//! the run is swallowed, as `ReadClause` swallows it; three dots or more are an ellipsis), made a
//! paragraph end by two line breaks after it. At the end of the text the pointer is null and the
//! clause is the rest of the text: punctuation at its end ends it (espeak reads a space after the
//! text); anything else is the end of the text (no terminator, end of sentence). (espeak sees the
//! end of the text only when it reads past it: a char read ahead at the end still leaves the
//! pointer on it.)

use std::ffi::{c_int, c_void, CString};

use super::library::{Library, TextToPhonemesWithTerminator};
use super::{cstr, Espeak, PHONEMES_IPA};

/// The request prefix of this mode: `piper:VOICE<TAB>TEXT`.
pub const PREFIX: &str = "piper:";

/// `espeakCHARS_AUTO`, as piper asks (UTF-8 when the text is valid UTF-8).
const CHARS_AUTO: c_int = 0;

/// The environment variable that makes the helper work the terminators out even where the library
/// has `espeak_TextToPhonemesWithTerminator` (to check one against the other).
pub const EMULATE_ENV: &str = "ESPEAK_PHONEMES_EMULATE_TERMINATOR";

// espeak-ng's clause types (translate.h), as ReadClause returns them.
const INTONATION_FULL_STOP: c_int = 0x0000;
const INTONATION_COMMA: c_int = 0x1000;
const INTONATION_QUESTION: c_int = 0x2000;
const INTONATION_EXCLAMATION: c_int = 0x3000;
const INTONATION_NONE: c_int = 0x4000;
const OPTIONAL_SPACE_AFTER: c_int = 0x8000;
const PUNCTUATION_IN_WORD: c_int = 0x0010_0000;
const SPEAK_PUNCTUATION_NAME: c_int = 0x0020_0000;
const TYPE_EOF: c_int = 0x0001_0000;
const TYPE_CLAUSE: c_int = 0x0004_0000;
const TYPE_SENTENCE: c_int = 0x0008_0000;
const CLAUSE_NONE: c_int = INTONATION_NONE;
const CLAUSE_PARAGRAPH: c_int = 70 | INTONATION_FULL_STOP | TYPE_SENTENCE;
const CLAUSE_EOF: c_int = 40 | INTONATION_FULL_STOP | TYPE_SENTENCE | TYPE_EOF;
const CLAUSE_PERIOD: c_int = 40 | INTONATION_FULL_STOP | TYPE_SENTENCE;
const CLAUSE_COMMA: c_int = 20 | INTONATION_COMMA | TYPE_CLAUSE;
const CLAUSE_QUESTION: c_int = 40 | INTONATION_QUESTION | TYPE_SENTENCE;
const CLAUSE_EXCLAMATION: c_int = 45 | INTONATION_EXCLAMATION | TYPE_SENTENCE;
const CLAUSE_COLON: c_int = 30 | INTONATION_FULL_STOP | TYPE_CLAUSE;
const CLAUSE_SEMICOLON: c_int = 30 | INTONATION_COMMA | TYPE_CLAUSE;

/// `espeak_TextToPhonemesWithTerminator` when the library has it (1.52 and later) and
/// [`EMULATE_ENV`] is not set.
fn with_terminator(lib: &Library) -> Option<TextToPhonemesWithTerminator> {
    if std::env::var_os(EMULATE_ENV).is_some() {
        return None;
    }
    lib.text_to_phonemes_with_terminator
}

/// One clause of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// Where the clause's text ends (chars from the start of the text): after its punctuation
    /// and the spaces after it, before the char espeak read ahead.
    pub end: usize,
    /// Its punctuation as piper writes it: `.` `?` `!` `,` `:` `;` or none.
    pub terminator: &'static str,
    /// Whether it ends a sentence.
    pub end_of_sentence: bool,
    /// espeak's IPA for it, as espeak gives it (language switch flags left in).
    pub phonemes: String,
}

/// piper's reading of espeak's terminator (`espeakbridge.c`).
fn terminator(value: c_int) -> (&'static str, bool) {
    let masked = value & 0x000F_FFFF;
    let t = match masked {
        CLAUSE_PERIOD => ".",
        CLAUSE_QUESTION => "?",
        CLAUSE_EXCLAMATION => "!",
        CLAUSE_COMMA => ",",
        CLAUSE_COLON => ":",
        CLAUSE_SEMICOLON => ";",
        _ => "",
    };
    (t, masked & TYPE_SENTENCE == TYPE_SENTENCE)
}

/// espeak-ng's `clause_type_from_codepoint` (the punctuation properties of espeak-ng 1.51's
/// ucd-tools, data/espeak-ng/PropList.txt).
fn clause_type(c: char) -> c_int {
    const FULL_STOP: u16 = 1;
    const QUESTION: u16 = 2;
    const EXCLAMATION: u16 = 4;
    const COMMA: u16 = 8;
    const COLON: u16 = 16;
    const SEMI_COLON: u16 = 32;
    const ELLIPSIS: u16 = 64;
    const PARAGRAPH: u16 = 128;
    const DASH: u16 = 256;
    const OPTIONAL: u16 = 512;
    const INVERTED: u16 = 1024;
    const IN_WORD: u16 = 2048;
    let u = c as u32;
    let props: u16 = match u {
        0x2E
        | 0x6D4
        | 0x701
        | 0x704
        | 0x1362
        | 0x166E
        | 0x1803
        | 0x1809
        | 0x2488..=0x249B
        | 0x2CF9
        | 0x2CFE
        | 0x2E33
        | 0x2E3C
        | 0xA4FF
        | 0xA60E
        | 0xA6F3
        | 0xFE12
        | 0xFE52
        | 0xFF61
        | 0x16AF5
        | 0x1BC9F
        | 0x1DA88
        | 0x1F100
        | 0xE002E => FULL_STOP,
        0x589 | 0x964 | 0xDF4 | 0xF0D | 0x3002 | 0xFF0E => FULL_STOP | OPTIONAL,
        0x3F
        | 0x37E
        | 0x61F
        | 0x709
        | 0x1367
        | 0x1945
        | 0x2047
        | 0x2753..=0x2754
        | 0x2CFA..=0x2CFB
        | 0xA60F
        | 0xA6F7
        | 0xFE16
        | 0xFE56
        | 0x11143
        | 0x1E95F
        | 0xE003F => QUESTION,
        0xBF => QUESTION | OPTIONAL | INVERTED,
        0x55E => QUESTION | IN_WORD,
        0xFF1F => QUESTION | OPTIONAL,
        0x2048..=0x2049 => QUESTION | EXCLAMATION,
        0x21
        | 0x703
        | 0x7F9
        | 0x1944
        | 0x203C
        | 0x2755
        | 0x2757
        | 0x2762..=0x2763
        | 0xFE15
        | 0xFE57
        | 0x1E95E
        | 0xE0021 => EXCLAMATION,
        0xA1 => EXCLAMATION | OPTIONAL | INVERTED,
        0x55B..=0x55C => EXCLAMATION | IN_WORD,
        0xFF01 => EXCLAMATION | OPTIONAL,
        0x2C
        | 0x55D
        | 0x60C
        | 0x702
        | 0x7F8
        | 0xF14
        | 0x1363
        | 0x1802
        | 0x1808
        | 0x2E32
        | 0x2E34
        | 0x2E41
        | 0xA4FE
        | 0xA60D
        | 0xA6F5
        | 0xFE10..=0xFE11
        | 0xFE50..=0xFE51
        | 0xFF64
        | 0x1144D
        | 0x1DA87
        | 0x1F101..=0x1F10A
        | 0xE002C => COMMA,
        0x3001 | 0xFF0C => COMMA | OPTIONAL,
        0x3A
        | 0x706..=0x707
        | 0x1365..=0x1366
        | 0x1804
        | 0x2982
        | 0xA6F4
        | 0xFE13
        | 0xFE55
        | 0x12471..=0x12472
        | 0x1DA8A
        | 0xE003A => COLON,
        0xFF1A => COLON | OPTIONAL,
        0x3B | 0x387 | 0x61B | 0x708 | 0x1364 | 0x204F | 0x2E35 | 0xA6F6 | 0xFE14 | 0xFE54 | 0x1DA89 | 0xE003B => {
            SEMI_COLON
        }
        0xFF1B => SEMI_COLON | OPTIONAL,
        0xEAF | 0x1801 | 0x2026 | 0x22EE..=0x22F1 | 0xFE19 => ELLIPSIS,
        0x700 | 0x965 | 0xF0E | 0x10FB | 0x1368 | 0x2029 => PARAGRAPH,
        0x2013..=0x2014 | 0x2E3A..=0x2E3B | 0xFE31..=0xFE32 => DASH,
        _ => 0,
    };
    match props {
        FULL_STOP => CLAUSE_PERIOD,
        p if p == FULL_STOP | OPTIONAL => CLAUSE_PERIOD | OPTIONAL_SPACE_AFTER,
        QUESTION => CLAUSE_QUESTION,
        p if p == QUESTION | OPTIONAL => CLAUSE_QUESTION | OPTIONAL_SPACE_AFTER,
        p if p == QUESTION | IN_WORD => CLAUSE_QUESTION | PUNCTUATION_IN_WORD,
        EXCLAMATION => CLAUSE_EXCLAMATION,
        p if p == EXCLAMATION | OPTIONAL => CLAUSE_EXCLAMATION | OPTIONAL_SPACE_AFTER,
        p if p == EXCLAMATION | IN_WORD => CLAUSE_EXCLAMATION | PUNCTUATION_IN_WORD,
        COMMA => CLAUSE_COMMA,
        p if p == COMMA | OPTIONAL => CLAUSE_COMMA | OPTIONAL_SPACE_AFTER,
        COLON => CLAUSE_COLON,
        p if p == COLON | OPTIONAL => CLAUSE_COLON | OPTIONAL_SPACE_AFTER,
        SEMI_COLON | DASH => CLAUSE_SEMICOLON,
        p if p == SEMI_COLON | OPTIONAL
            || p == QUESTION | OPTIONAL | INVERTED
            || p == EXCLAMATION | OPTIONAL | INVERTED =>
        {
            CLAUSE_SEMICOLON | OPTIONAL_SPACE_AFTER
        }
        ELLIPSIS => CLAUSE_SEMICOLON | SPEAK_PUNCTUATION_NAME | OPTIONAL_SPACE_AFTER,
        PARAGRAPH => CLAUSE_PARAGRAPH,
        _ => CLAUSE_NONE,
    }
}

/// espeak's `iswspace`.
fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// The clause type that the run of punctuation at the end of `content` gives, with where the
/// run starts: its first char decides (`ReadClause` swallows the rest); three dots or more are
/// an ellipsis.
fn trailing_punctuation(content: &str) -> Option<(usize, c_int)> {
    let start = content.char_indices().rev().take_while(|&(_, c)| clause_type(c) != CLAUSE_NONE).last()?.0;
    let run = &content[start..];
    let value = if run.starts_with("...") { clause_type('\u{2026}') } else { clause_type(run.chars().next()?) };
    // Armenian's punctuation inside a word does not end a clause.
    (value & PUNCTUATION_IN_WORD == 0).then_some((start, value))
}

/// `ReadClause`'s end of clause at punctuation followed by `nl` line breaks: two or more make a
/// paragraph end.
fn with_line_breaks(value: c_int, nl: usize) -> c_int {
    if nl > 1 {
        if value == CLAUSE_QUESTION || value == CLAUSE_EXCLAMATION {
            return value + 35;
        }
        return CLAUSE_PARAGRAPH;
    }
    value
}

/// Whether espeak ends a clause at punctuation at the end of the text (starting at `at` in
/// `content`): only after some letter or digit.
fn ends_clause(content: &str, at: usize) -> bool {
    content[..at].chars().any(char::is_alphanumeric)
}

/// The clause espeak read from `text[start..]` having left its pointer at `stop` (a byte offset;
/// None: at the end of the text): where its text ends (a byte offset) and the clause type that
/// `ReadClause` returned for it.
fn emulate(text: &str, start: usize, stop: Option<usize>) -> (usize, c_int) {
    match stop {
        Some(stop) => {
            let span = &text[start..stop];
            // The last char read is the one read ahead: it belongs to the next clause.
            let Some((ahead, _)) = span.char_indices().last() else { return (stop, CLAUSE_NONE) };
            let end = start + ahead;
            let read = &text[start..end];
            let content = read.trim_end_matches(is_space);
            let nl = read[content.len()..].matches('\n').count();
            let value = match trailing_punctuation(content) {
                Some((_, value)) => with_line_breaks(value, nl),
                // A blank line, or a clause too long for espeak's buffer.
                None if nl >= 2 => CLAUSE_PARAGRAPH,
                None => CLAUSE_NONE,
            };
            (end, value)
        }
        None => {
            let rest = &text[start..];
            let content = rest.trim_end_matches(is_space);
            let spaces = &rest[content.len()..];
            // Punctuation at the end (espeak reads a space after the text), maybe followed by
            // line breaks.
            if let Some((at, value)) = trailing_punctuation(content) {
                if ends_clause(content, at) {
                    let nl = spaces.matches('\n').count();
                    return (text.len(), with_line_breaks(value, nl));
                }
            }
            (text.len(), CLAUSE_EOF)
        }
    }
}

impl Espeak {
    /// The clauses of `text` read by espeak's voice `voice` (set by name, as piper sets it).
    pub fn piper(&mut self, voice: &str, text: &str) -> Result<Vec<Clause>, String> {
        let name = CString::new(voice).map_err(|e| e.to_string())?;
        self.current = None;
        // SAFETY: espeak is initialised; `name` is a NUL-terminated string that outlives the call.
        if unsafe { (self.lib.set_voice_by_name)(name.as_ptr()) } != 0 {
            return Err(format!("failed to set voice \"{voice}\""));
        }
        flush(&self.lib);
        let text = text.replace('\0', " ");
        let c_text = CString::new(text.as_str()).map_err(|e| e.to_string())?;
        let base = c_text.as_ptr() as usize;
        let mut ptr: *const c_void = c_text.as_ptr().cast();
        let real = with_terminator(&self.lib);
        let mut out = Vec::new();
        let (mut start, mut chars_before, mut calls) = (0usize, 0usize, 0usize);
        // espeak moves `ptr` on by at least a char per call and sets it null at the end; the cap
        // only guards against a library that would not.
        while !ptr.is_null() && calls <= text.len() + 1 {
            calls += 1;
            let mut value: c_int = 0;
            // SAFETY: a voice is set; `ptr` points into `c_text` (NUL-terminated, alive for the
            // whole loop) and espeak leaves it there or null; the result is espeak's static
            // buffer, copied before the next call.
            let ps = unsafe {
                match real {
                    Some(f) => f(&mut ptr, CHARS_AUTO, PHONEMES_IPA, &mut value),
                    None => (self.lib.text_to_phonemes)(&mut ptr, CHARS_AUTO, PHONEMES_IPA),
                }
            };
            let phonemes = if ps.is_null() { String::new() } else { unsafe { cstr(ps) } };
            let stop = (!ptr.is_null()).then(|| {
                let mut at = (ptr as usize).saturating_sub(base).min(text.len());
                while !text.is_char_boundary(at) {
                    at += 1;
                }
                at
            });
            let (end, emulated) = emulate(&text, start, stop);
            if real.is_none() {
                value = emulated;
            }
            let (terminator, end_of_sentence) = terminator(value);
            chars_before += text[start..end].chars().count();
            start = end;
            out.push(Clause {
                end: chars_before,
                terminator,
                end_of_sentence,
                phonemes: phonemes.replace(['\t', '\r', '\n'], " "),
            });
        }
        Ok(out)
    }
}

/// Reads what espeak kept of the last text (the char it read ahead at the end of a text, which it
/// would put before the next one), so that each text is read as if it came first.
fn flush(lib: &Library) {
    let space = c" ";
    let mut p: *const c_void = space.as_ptr().cast();
    let mut calls = 0;
    while !p.is_null() && calls < 4 {
        calls += 1;
        // SAFETY: as in `Espeak::piper`, over a static NUL-terminated string.
        unsafe { (lib.text_to_phonemes)(&mut p, CHARS_AUTO, PHONEMES_IPA) };
    }
}

/// The request's text: `\\`, `\n`, `\r` and `\t` stand for a backslash, a line feed, a carriage
/// return and a tab (any other char after a backslash stands for itself).
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The answer to `piper:VOICE<TAB>TEXT` (`rest` is what follows the prefix): per clause
/// `END<TAB>TERMINATOR<TAB>EOS<TAB>PHONEMES`, the clauses separated by tabs.
pub fn answer(espeak: &mut Espeak, rest: &str) -> String {
    let (voice, text) = rest.split_once('\t').unwrap_or((rest, ""));
    let voice = voice.trim();
    if voice.is_empty() {
        return "!piper: no voice".into();
    }
    match espeak.piper(voice, &unescape(text)) {
        Ok(clauses) => clauses
            .iter()
            .map(|c| format!("{}\t{}\t{}\t{}", c.end, c.terminator, u8::from(c.end_of_sentence), c.phonemes))
            .collect::<Vec<_>>()
            .join("\t"),
        Err(e) => format!("!{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clauses' ends and terminators that `emulate` gives for espeak's pointer stops.
    fn clauses(text: &str, stops: &[Option<usize>]) -> Vec<(usize, &'static str, bool)> {
        let mut start = 0;
        stops
            .iter()
            .map(|&stop| {
                let (end, value) = emulate(text, start, stop);
                start = end;
                let (t, eos) = terminator(value);
                (end, t, eos)
            })
            .collect()
    }

    #[test]
    fn terminators_are_read_off_the_text() {
        // "Hello, world! How are you" : espeak stops after the char it read ahead.
        assert_eq!(
            clauses("Hello, world! How", &[Some(8), Some(15), None]),
            vec![(7, ",", false), (14, "!", true), (17, "", true)]
        );
        assert_eq!(clauses("Is it?", &[None]), vec![(6, "?", true)]);
        assert_eq!(
            clauses("Wait... what?! No", &[Some(9), Some(16), None]),
            vec![(8, "", false), (15, "?", true), (17, "", true)]
        );
        assert_eq!(clauses("Hi.\n\nYo", &[Some(6), None]), vec![(5, "", true), (7, "", true)]);
        assert_eq!(clauses("Hi.\n\n", &[None]), vec![(5, "", true)]);
        assert_eq!(clauses("Hi.\n", &[None]), vec![(4, ".", true)]);
        assert_eq!(clauses("Hola ¿qué tal?", &[Some(8), None]), vec![(7, "", false), (16, "?", true)]);
        assert_eq!(clauses("a — b", &[Some(7), None]), vec![(6, ";", false), (7, "", true)]);
        assert_eq!(clauses("He said \"Hi.\"", &[Some(13), None]), vec![(12, ".", true), (13, "", true)]);
        assert_eq!(clauses("Hello. world", &[None]), vec![(12, "", true)]);
        assert_eq!(clauses("...", &[None]), vec![(3, "", true)]);
    }

    #[test]
    fn requests_are_unescaped() {
        assert_eq!(unescape(r"a\nb\\n\tc\"), "a\nb\\n\tc\\");
    }
}
