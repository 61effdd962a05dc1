//! Sentence splitting (hibari `tts.py` `split_sentences`) and the clause split of over-long
//! phoneme strings (`phonemize`).

use std::collections::HashSet;
use std::ops::Range;

/// Phoneme strings longer than this many characters are split at clause punctuation.
pub const MAX_PHONEMES: usize = 400;

const CLOSERS: &[char] = &['"', '”', '’', ')', ']'];

/// A sentence of the raw text: byte range into the text it was split from.
pub fn split_sentence_ranges(text: &str, titles: &HashSet<String>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let trimmed = text.trim();
    let base = trimmed.as_ptr() as usize - text.as_ptr() as usize;
    let mut pstart = 0;
    for para in trimmed.split('\n') {
        let pbase = base + pstart;
        pstart += para.len() + 1;
        let lead = para.len() - para.trim_start().len();
        let para = para.trim();
        let pbase = pbase + lead;
        let chars: Vec<(usize, char)> = para.char_indices().collect();
        let mut cut = 0usize; // byte offset in para
        let mut i = 1; // char index where a match may start (after the end punctuation)
        while i < chars.len() {
            if !matches!(chars[i - 1].1, '.' | '!' | '?' | '…') {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && CLOSERS.contains(&chars[j].1) {
                j += 1;
            }
            let ws = j;
            while j < chars.len() && chars[j].1.is_whitespace() {
                j += 1;
            }
            if j == ws || j >= chars.len() {
                i += 1;
                continue;
            }
            let (start, end) = (chars[i].0, chars[j].0);
            if ends_sentence(para, start, chars[j].1, titles) {
                out.push(pbase + cut..pbase + start);
                cut = end;
            }
            i = j + 1;
        }
        out.push(pbase + cut..pbase + para.len());
    }
    out.retain(|r| !text[r.clone()].trim().is_empty());
    out
}

/// Sentences of the raw text, as `Hibari.split_sentences`.
pub fn split_sentences<'a>(text: &'a str, titles: &HashSet<String>) -> Vec<&'a str> {
    split_sentence_ranges(text, titles).into_iter().map(|r| &text[r]).collect()
}

fn ends_sentence(para: &str, end: usize, next: char, titles: &HashSet<String>) -> bool {
    if next.is_lowercase() {
        return false;
    }
    let before = &para[..end];
    if !before.ends_with('.') {
        return true;
    }
    let from = before.rfind(' ').map_or(0, |i| i + 1);
    let word = before[from..before.len() - 1].trim_start_matches(['(', '"', '“', '\'', '‘']);
    let mut cs = word.chars();
    let initial = matches!((cs.next(), cs.next()), (Some(c), None) if c.is_uppercase());
    !(titles.contains(word) || initial)
}

/// The clause split of a phoneme string: chunks, each as the list of char ranges of `ps` it
/// joins with single spaces. Strings within the limit come back as one chunk.
pub fn clause_chunks(ps: &str) -> Vec<Vec<Range<usize>>> {
    let chars: Vec<char> = ps.chars().collect();
    if chars.len() <= MAX_PHONEMES {
        return vec![vec![0..chars.len()]];
    }
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 1;
    while i < chars.len() {
        if matches!(chars[i - 1], ',' | ';' | ':' | '—') && chars[i].is_whitespace() {
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            parts.push(start..i);
            start = j;
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    parts.push(start..chars.len());
    let mut chunks: Vec<Vec<Range<usize>>> = Vec::new();
    let mut cur: Vec<Range<usize>> = Vec::new();
    let mut cur_len = 0;
    for part in parts {
        let plen = part.len();
        if cur_len > 0 && cur_len + plen + 1 > MAX_PHONEMES {
            chunks.push(std::mem::take(&mut cur));
            cur.push(part);
            cur_len = plen;
        } else if cur_len > 0 {
            cur.push(part);
            cur_len += plen + 1;
        } else {
            // Python's `cur` is falsy when empty: an empty first piece is replaced, not joined.
            cur = vec![part];
            cur_len = plen;
        }
    }
    if cur_len > 0 {
        chunks.push(cur);
    }
    chunks
}

/// The chunk strings of [`clause_chunks`], as `Hibari.phonemize` returns them.
pub fn split_clauses(ps: &str) -> Vec<String> {
    let chars: Vec<char> = ps.chars().collect();
    clause_chunks(ps)
        .into_iter()
        .map(|c| c.into_iter().map(|r| chars[r].iter().collect::<String>()).collect::<Vec<_>>().join(" "))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titles() -> HashSet<String> {
        ["Mr", "Mrs", "Dr", "St"].iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sentences() {
        let t = titles();
        assert_eq!(
            split_sentences("Dr. Smith met J. K. Rowling. She smiled!", &t),
            vec!["Dr. Smith met J. K. Rowling.", "She smiled!"]
        );
        assert_eq!(split_sentences("Wait... what? ok. Yes.", &t), vec!["Wait... what? ok.", "Yes."]);
        assert_eq!(split_sentences("e.g. this. And (that.) So.", &t), vec!["e.g. this.", "And (that.", "So."]);
        assert_eq!(split_sentences("He said \"Stop.\" Then", &t), vec!["He said \"Stop.", "Then"]);
        assert_eq!(split_sentences("  One\n\n two.\nHi.There 3.5  ", &t), vec!["One", "two.", "Hi.There 3.5"]);
        assert!(split_sentences(" \n \n", &t).is_empty());
    }

    #[test]
    fn clauses() {
        assert_eq!(split_clauses("a, b"), vec!["a, b"]);
        let piece = "x".repeat(250);
        let s = format!("{piece},  {piece}; {piece}");
        assert_eq!(split_clauses(&s), vec![format!("{piece},"), format!("{piece};"), piece.clone()]);
        let small = "y".repeat(100);
        let s = format!("{piece}, {small}, {piece}");
        assert_eq!(split_clauses(&s), vec![format!("{piece}, {small},"), piece.clone()]);
        let big = "z".repeat(500);
        assert_eq!(split_clauses(&big), vec![big.clone()]);
    }
}
