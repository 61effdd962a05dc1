//! Sentence splitting (hibari `tts.py` `split_sentences`; the Japanese and Mandarin front ends'
//! cuts) and the clause split of over-long phoneme strings (`phonemize`).

use std::collections::HashSet;
use std::ops::Range;

/// Phoneme strings longer than this many characters are split at clause punctuation.
pub const MAX_PHONEMES: usize = 400;

/// No chunk of phonemes is longer: a clause with no punctuation to split at is cut at spaces (or
/// anywhere, failing those) past this. The model's text encoders attend over the whole chunk, so
/// an unbounded one would stall the model for everyone; 510 is the 512-token context hibari's
/// Kokoro lineage was trained with, less the two boundary ids, and keeps the reference's single
/// clauses of 400-510 whole.
pub const MAX_CHUNK_PHONEMES: usize = 510;

/// No sentence of the text is longer (in chars): a longer one is cut into pieces, after clause
/// punctuation or at a space when there is one in the second half of the piece, else anywhere.
/// It bounds the front end's work on one piece, which runs on the model's thread between two
/// looks at its commands. The longest sentence of the reference fixtures has 943 chars.
pub const MAX_SENTENCE_CHARS: usize = 1000;

const CLOSERS: &[char] = &['"', '”', '’', ')', ']'];
const OPENERS: &[char] = &['(', '"', '“', '\'', '‘'];

/// Where the word before each full stop starts, found in one pass over a paragraph: looking back
/// from every stop was quadratic in a long run with no space (e.g. stops followed by tabs).
struct WordStarts<'a> {
    chars: &'a [(usize, char)],
    /// Chars up to here are accounted for.
    next: usize,
    /// Byte offset of the first char after the last opener after the last space, once seen.
    core: Option<usize>,
}

impl WordStarts<'_> {
    /// Byte offset where the word ending before `chars[k]` starts, openers left out.
    fn before(&mut self, k: usize) -> usize {
        while self.next < k {
            let (b, c) = self.chars[self.next];
            if c == ' ' {
                self.core = None;
            } else if self.core.is_none() && !OPENERS.contains(&c) {
                self.core = Some(b);
            }
            self.next += 1;
        }
        self.core.unwrap_or(self.chars[k].0)
    }
}

/// A sentence of the raw text: byte range into the text it was split from.
pub fn split_sentence_ranges(text: &str, titles: &HashSet<String>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let longest_title = titles.iter().map(String::len).max().unwrap_or(0);
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
        let mut words = WordStarts { chars: &chars, next: 0, core: None };
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
            if ends_sentence(para, start, words.before(i - 1), chars[j].1, titles, longest_title) {
                push_capped(&mut out, text, pbase + cut..pbase + start);
                cut = end;
            }
            i = j + 1;
        }
        push_capped(&mut out, text, pbase + cut..pbase + para.len());
    }
    out.retain(|r| !text[r.clone()].trim().is_empty());
    out
}

/// Pushes the sentence `r` of `text`, cut into pieces of at most [`MAX_SENTENCE_CHARS`] chars.
fn push_capped(out: &mut Vec<Range<usize>>, text: &str, r: Range<usize>) {
    let mut start = r.start;
    loop {
        let rest = &text[start..r.end];
        let Some((limit, _)) = rest.char_indices().nth(MAX_SENTENCE_CHARS) else {
            out.push(start..r.end);
            return;
        };
        // Only the second half is searched, so every piece is long and the search linear.
        let half = rest.char_indices().nth(MAX_SENTENCE_CHARS / 2).map_or(0, |(b, _)| b);
        let window = &rest[half..limit];
        let mut clause = None;
        let mut space = None;
        let mut prev = None;
        for (b, c) in window.char_indices() {
            if c.is_whitespace() {
                space = Some(half + b);
                if prev.is_some_and(|p| matches!(p, ',' | ';' | ':' | '—')) {
                    clause = Some(half + b);
                }
            }
            prev = Some(c);
        }
        let end = clause.or(space).unwrap_or(limit);
        out.push(start..start + end);
        start += end + rest[end..].len() - rest[end..].trim_start().len();
        if start >= r.end {
            return;
        }
    }
}

/// Sentences of the raw text, as `Hibari.split_sentences`.
pub fn split_sentences<'a>(text: &'a str, titles: &HashSet<String>) -> Vec<&'a str> {
    split_sentence_ranges(text, titles).into_iter().map(|r| &text[r]).collect()
}

/// `text` cut after each char for which `ends(&chars, k)` holds (`chars`, `text`'s
/// `char_indices`; `k`, that char's index in it), the chars after it for which `closes` holds
/// (closing marks) and white space staying with it; blank pieces are left out, and a piece longer
/// than [`MAX_SENTENCE_CHARS`] is cut by [`cap_at_pause`]. The Japanese and Mandarin front ends'
/// sentences.
pub(crate) fn cut_after_ends(
    text: &str,
    ends: impl Fn(&[(usize, char)], usize) -> bool,
    closes: impl Fn(char) -> bool,
    pause: impl Fn(char) -> bool,
) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let (mut start, mut k) = (0, 0);
    while k < chars.len() {
        let (i, c) = chars[k];
        k += 1;
        if !ends(&chars, k - 1) {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = chars.get(k).filter(|&&(_, d)| closes(d) || d.is_whitespace()) {
            end = j + d.len_utf8();
            k += 1;
        }
        if !text[start..end].trim().is_empty() {
            out.push(&text[start..end]);
        }
        start = end;
    }
    if !text[start..].trim().is_empty() {
        out.push(&text[start..]);
    }
    out.into_iter().flat_map(|s| cap_at_pause(s, &pause)).collect()
}

/// `sentence` in pieces of at most [`MAX_SENTENCE_CHARS`] chars, each cut after its last char for
/// which `pause` holds (a comma) or white space, when it has one, else at the limit.
pub(crate) fn cap_at_pause(sentence: &str, pause: impl Fn(char) -> bool) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = sentence;
    while let Some((limit, _)) = rest.char_indices().nth(MAX_SENTENCE_CHARS) {
        let cut = rest[..limit]
            .char_indices()
            .rev()
            .find(|&(_, c)| pause(c) || c.is_whitespace())
            .map_or(limit, |(i, c)| i + c.len_utf8());
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// Whether the punctuation ending at byte `end` of `para`, followed by whitespace and `next`, ends a
/// sentence; `word` is where the word before it starts (openers left out).
fn ends_sentence(
    para: &str,
    end: usize,
    word: usize,
    next: char,
    titles: &HashSet<String>,
    longest_title: usize,
) -> bool {
    if next.is_lowercase() {
        return false;
    }
    let before = &para[..end];
    if !before.ends_with('.') {
        return true;
    }
    let word = &before[word.min(before.len() - 1)..before.len() - 1];
    let mut cs = word.chars();
    let initial = matches!((cs.next(), cs.next()), (Some(c), None) if c.is_uppercase());
    !(initial || (word.len() <= longest_title && titles.contains(word)))
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
    let parts = parts.into_iter().flat_map(|p| cap_part(&chars, p));
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

/// A clause part of `chars` cut into pieces of at most [`MAX_CHUNK_PHONEMES`]: at the last space
/// in the second half of each (so the search is linear), else anywhere.
fn cap_part(chars: &[char], part: Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = part.start;
    while part.end - start > MAX_CHUNK_PHONEMES {
        let limit = start + MAX_CHUNK_PHONEMES;
        let space = (start + MAX_CHUNK_PHONEMES / 2..=limit).rev().find(|&k| chars[k].is_whitespace());
        let end = space.unwrap_or(limit);
        out.push(start..end);
        start = end;
        while start < part.end && chars[start].is_whitespace() {
            start += 1;
        }
    }
    out.push(start..part.end);
    out
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

    #[test]
    fn over_long_sentences_are_cut_where_they_pause() {
        let t = titles();
        let words = "word ".repeat(150); // 750 chars
        let text = format!("{words}and then, {words}end");
        let got = split_sentences(&text, &t);
        assert_eq!(got, vec![format!("{words}and then,"), format!("{words}end")]);
        let text = "word ".repeat(500);
        let got = split_sentences(&text, &t);
        assert!(got.len() == 3 && got.iter().all(|s| s.len() <= MAX_SENTENCE_CHARS && !s.ends_with(' ')), "{got:?}");
        assert_eq!(got.concat().len() + got.len() - 1, text.trim().len());
        let digits = "7".repeat(2500);
        let got = split_sentences(&digits, &t);
        assert_eq!(got.iter().map(|s| s.len()).collect::<Vec<_>>(), vec![1000, 1000, 500]);
    }

    #[test]
    fn over_long_clauses_are_cut_at_spaces() {
        let word = "x".repeat(99);
        let ps = [word.as_str(); 12].join(" "); // 1199 chars, no clause punctuation
        let chunks = split_clauses(&ps);
        assert!(chunks.iter().all(|c| c.chars().count() <= MAX_CHUNK_PHONEMES), "{chunks:?}");
        assert_eq!(chunks.join(" "), ps);
        let solid = "z".repeat(1200);
        assert_eq!(split_clauses(&solid).iter().map(String::len).collect::<Vec<_>>(), vec![510, 510, 180]);
    }

    #[test]
    fn cut_after_ends_keeps_closing_marks_and_spaces_and_caps_at_a_pause() {
        fn closes(c: char) -> bool {
            matches!(c, '」' | '？')
        }
        fn comma(c: char) -> bool {
            c == '、'
        }
        fn cut(text: &str) -> Vec<&str> {
            cut_after_ends(text, |chars, k| matches!(chars[k].1, '。' | '？' | '\n'), closes, comma)
        }
        assert_eq!(cut("「え？」 そう。終わり"), vec!["「え？」 ", "そう。", "終わり"]);
        assert_eq!(cut("一\n\n 。。二"), vec!["一\n\n ", "。", "。", "二"]);
        assert_eq!(cut("何？？ 二"), vec!["何？？ ", "二"]);
        assert_eq!(cut(" \n 。"), vec!["。"]);
        assert!(cut("  ").is_empty());
        // Only the end the predicate names: a point between digits, as Mandarin's, is not one.
        let decimal = |chars: &[(usize, char)], k: usize| {
            let digit = |c: Option<&(usize, char)>| c.is_some_and(|&(_, c)| c.is_ascii_digit());
            chars[k].1 == '.' && !(k >= 1 && digit(chars.get(k - 1)) && digit(chars.get(k + 1)))
        };
        assert_eq!(cut_after_ends("3.5元.好", decimal, closes, comma), vec!["3.5元.", "好"]);
        // Over-long: cut after the last pause or space within the limit, else at the limit.
        let clause = "あ".repeat(600) + "、";
        let text = clause.repeat(3);
        let got = cut(&text);
        assert_eq!(got, vec![clause.as_str(); 3]);
        let solid = "ん".repeat(2500);
        assert_eq!(cut(&solid).iter().map(|s| s.chars().count()).collect::<Vec<_>>(), vec![1000, 1000, 500]);
        assert_eq!(cap_at_pause("short, text", comma), vec!["short, text"]);
    }

    #[test]
    fn cut_after_ends_loses_no_text() {
        // Texts of sentence ends, closing marks, commas, spaces and letters, some past the cap:
        // the pieces are slices of the text in order, none blank or over the cap, and what lies
        // between them is white space only.
        let alphabet = ['。', '？', '」', '、', ' ', '\n', 'あ', 'b', '.', '3'];
        let mut seed = 0x2545_f491_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..400 {
            let len = if case % 40 == 0 { 2_500 } else { (next() % 60) as usize };
            let text: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            let pieces = cut_after_ends(
                &text,
                |chars, k| matches!(chars[k].1, '。' | '？' | '\n' | '.'),
                |c| matches!(c, '」' | '？'),
                |c| c == '、',
            );
            let mut at = 0;
            for piece in &pieces {
                let start = piece.as_ptr() as usize - text.as_ptr() as usize;
                assert!(start >= at && text[at..start].trim().is_empty(), "{text:?}: {pieces:?}");
                assert!(!piece.trim().is_empty() && piece.chars().count() <= MAX_SENTENCE_CHARS, "{piece:?}");
                at = start + piece.len();
            }
            assert!(text[at..].trim().is_empty(), "{text:?}: {pieces:?}");
        }
    }
}
