//! Word timestamps from the model's own durations: no forced aligner. The duration predictor says
//! how many coarse frames (25 ms, two fine frames of 300 samples) each token lasts, and the front
//! end says which phoneme characters each word of the text produced, so a word spans the frames
//! of its tokens.
//!
//! A word spans its spoken tokens only: the pause tokens that punctuation and spaces produce
//! (a sentence-final "." lasts about 400 ms of silence) are left between words, so the last
//! word ends where its speech does.
//!
//! Words are reported as the client wrote them: the text split on whitespace, each piece without
//! the punctuation around it ("$3.50" and "https://example.com" stay whole; "world." is "world"),
//! pieces left empty dropped, so the list matches the text's words in order, each with its
//! character offsets in the request's text. A front-end word that covers several text words
//! ("7:30 pm") shares its time among them by character count.

use std::ops::Range;

use speechstream_core::engine::WordTiming;

/// Samples per fine frame (12.5 ms at 24 kHz).
const SAMPLES_PER_FRAME: u64 = 300;
const SAMPLES_PER_MS: u64 = 24;

const OPENING: &[char] = &['"', '\'', '“', '‘', '(', '[', '{', '«', '¿', '¡', '*', '_', '`', '<'];
const CLOSING: &[char] =
    &['"', '\'', '”', '’', ')', ']', '}', '»', ',', ';', ':', '!', '?', '.', '…', '*', '_', '`', '>'];

/// A word as the protocol reports it: the written piece without the punctuation around it (a
/// dotted abbreviation keeps its last full stop: "U.S."). Returns the word and the chars trimmed
/// from its start.
pub fn trim_word(piece: &str) -> (String, usize) {
    let lead = piece.chars().take_while(|c| OPENING.contains(c)).count();
    let rest: String = piece.chars().skip(lead).collect();
    let mut word = rest.trim_end_matches(CLOSING).to_string();
    // "U.S.", "e.g.": letters and full stops, one letter at a time.
    let dotted = rest.len() > word.len()
        && rest[word.len()..].starts_with('.')
        && word.contains('.')
        && word.split('.').all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic));
    if dotted {
        word.push('.');
    }
    (word, lead)
}

/// [`trim_word`]'s word.
pub fn clean_word(piece: &str) -> String {
    trim_word(piece).0
}

/// The most coarse frames (25 ms) a word's last sound may last before a pause. The duration
/// predictor folds part of the following pause into the sound before it (a sentence's last
/// phoneme is often given 300 ms, of which the audio holds about 100); past this cap the
/// audio is silence.
const FINAL_SOUND_CAP: u64 = 4;

/// Whether a phoneme character is spoken; punctuation and spaces are pauses.
fn spoken(c: char) -> bool {
    !(c.is_whitespace() || c.is_ascii_punctuation() || matches!(c, '—' | '–' | '…' | '«' | '»' | '“' | '”' | '¡' | '¿'))
}

/// Timings of a sentence's words. `words`: each front-end word's text, its range of phoneme
/// characters in `phonemes` and, when known, the offset of its text in the request's (chars); `char_tokens`: the token index (in `ids`, where 0 is the leading boundary token)
/// of each phoneme character, `None` where the vocabulary dropped it; `durations`: coarse frames
/// per token; `offset_samples`: where the sentence starts in the utterance's audio.
pub fn word_timings(
    words: &[(&str, Range<usize>, Option<usize>)],
    phonemes: &str,
    char_tokens: &[Option<usize>],
    durations: &[i64],
    offset_samples: u64,
) -> Vec<WordTiming> {
    let mut starts = Vec::with_capacity(durations.len());
    let mut acc = 0u64;
    for &d in durations {
        starts.push(acc);
        acc += 2 * d.max(0) as u64;
    }
    let end_of = |t: usize| starts[t] + 2 * durations[t].max(0) as u64;
    // Which tokens are spoken sounds (the boundaries at both ends are not).
    let mut spoken_token = vec![false; durations.len()];
    for (c, t) in phonemes.chars().zip(char_tokens) {
        if let Some(t) = t.filter(|&t| t < durations.len()) {
            spoken_token[t] = spoken(c);
        }
    }
    // Nothing is spoken during the leading boundary token.
    let mut cursor = if durations.is_empty() { 0 } else { end_of(0) };
    let mut out = Vec::new();
    for (text, range, at) in words {
        let range = range.start.min(char_tokens.len())..range.end.min(char_tokens.len());
        let tokens: Vec<usize> = phonemes
            .chars()
            .zip(char_tokens)
            .skip(range.start)
            .take(range.len())
            .filter(|(c, _)| spoken(*c))
            .filter_map(|(_, t)| *t)
            .filter(|&t| t < durations.len())
            .collect();
        let (first, last) = (tokens.first().copied(), tokens.last().copied());
        // A word with no token of its own (e.g. a symbol that is not read) gets an empty span where
        // it stands; clamping to the cursor keeps the list monotonic whatever the ranges are.
        let start = first.map_or(cursor, |t| starts[t]).max(cursor);
        // Before a pause (a token that is not spoken, or the closing boundary), the last sound
        // keeps at most FINAL_SOUND_CAP coarse frames.
        let end_at = |t: usize| {
            let next_spoken = spoken_token.get(t + 1).copied().unwrap_or(false);
            if next_spoken {
                end_of(t)
            } else {
                end_of(t).min(starts[t] + 2 * FINAL_SOUND_CAP)
            }
        };
        let end = last.map_or(start, end_at).max(start);
        cursor = end;
        // Each whitespace piece: (word, its chars in the request).
        let mut pieces: Vec<(String, Option<Range<usize>>)> = Vec::new();
        let mut chars_before = 0;
        let mut piece_start: Option<usize> = None;
        let push = |from: usize, to: usize, pieces: &mut Vec<(String, Option<Range<usize>>)>| {
            let piece: String = text.chars().skip(from).take(to - from).collect();
            let (word, lead) = trim_word(&piece);
            if word.chars().any(char::is_alphanumeric) {
                let n = word.chars().count();
                pieces.push((word, at.map(|a| a + from + lead..a + from + lead + n)));
            }
        };
        for c in text.chars() {
            if c.is_whitespace() {
                if let Some(s) = piece_start.take() {
                    push(s, chars_before, &mut pieces);
                }
            } else if piece_start.is_none() {
                piece_start = Some(chars_before);
            }
            chars_before += 1;
        }
        if let Some(s) = piece_start {
            push(s, chars_before, &mut pieces);
        }
        let total_chars: u64 = pieces.iter().map(|p| p.0.chars().count() as u64).sum();
        let (s0, span) = (offset_samples + start * SAMPLES_PER_FRAME, (end - start) * SAMPLES_PER_FRAME);
        let mut done_chars = 0;
        for (piece, chars) in pieces {
            let a = s0 + span * done_chars / total_chars.max(1);
            done_chars += piece.chars().count() as u64;
            let b = s0 + span * done_chars / total_chars.max(1);
            out.push(WordTiming { word: piece, start_ms: ms(a), end_ms: ms(b), chars });
        }
    }
    out
}

fn ms(samples: u64) -> i64 {
    ((samples + SAMPLES_PER_MS / 2) / SAMPLES_PER_MS) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_span_their_tokens_after_the_boundary() {
        // phonemes "ab c." : a b ' ' c '.' -> tokens 1..=5, with '.' dropped by the vocabulary here.
        let char_tokens = [Some(1), Some(2), Some(3), Some(4), None];
        let durations = [3, 1, 2, 1, 4, 5]; // boundary, a, b, space, c, boundary
        let words = [("Ab,", 0..2, None), ("c.", 3..5, None)];
        let t = word_timings(&words, "ab c.", &char_tokens, &durations, 0);
        // fine frames: boundary 0..6, a 6..8, b 8..12, space 12..14, c 14..22
        assert_eq!(t[0], WordTiming { word: "Ab".into(), start_ms: 75, end_ms: 150, chars: None });
        assert_eq!(t[1], WordTiming { word: "c".into(), start_ms: 175, end_ms: 275, chars: None });
        let shifted = word_timings(&words, "ab c.", &char_tokens, &durations, 24_000);
        assert_eq!((shifted[1].start_ms, shifted[1].end_ms), (1175, 1275));
    }

    #[test]
    fn pauses_stay_between_words() {
        // "ab, c." with every character a token: the comma, the space and the full stop are
        // pauses (long durations) and belong to no word.
        let char_tokens = [Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)];
        let durations = [3, 1, 2, 10, 1, 4, 20, 5]; // boundary, a, b, ',', ' ', c, '.', boundary
        let words = [("Ab,", 0..3, None), ("c.", 4..6, None)];
        let t = word_timings(&words, "ab, c.", &char_tokens, &durations, 0);
        // fine frames: boundary 0..6, a 6..8, b 8..12, ',' 12..32, ' ' 32..34, c 34..42
        assert_eq!(t[0], WordTiming { word: "Ab".into(), start_ms: 75, end_ms: 150, chars: None });
        assert_eq!(t[1], WordTiming { word: "c".into(), start_ms: 425, end_ms: 525, chars: None });
    }

    #[test]
    fn unspoken_and_grouped_words_stay_in_order() {
        let char_tokens = [Some(1), Some(2), Some(3), Some(4)];
        let durations = [1, 2, 2, 2, 2, 1];
        // "—" has no phonemes; "7:30 pm" is one front-end word over two text words.
        // The text: "x — 7:30 pm." (chars 0, 2 and 4..11).
        let words = [("x", 0..1, Some(0)), ("—", 1..1, Some(2)), ("7:30 pm.", 1..4, Some(4))];
        let t = word_timings(&words, "xyzw", &char_tokens, &durations, 0);
        let names: Vec<&str> = t.iter().map(|w| w.word.as_str()).collect();
        assert_eq!(names, ["x", "7:30", "pm"]);
        let chars: Vec<_> = t.iter().map(|w| w.chars.clone()).collect();
        assert_eq!(chars, [Some(0..1), Some(4..8), Some(9..11)]);
        assert_eq!(trim_word("(\"$3.50\"),"), ("$3.50".to_string(), 2));
        assert_eq!(clean_word("U.S."), "U.S.");
        assert_eq!(clean_word("https://example.com."), "https://example.com");
        for pair in t.windows(2) {
            assert!(pair[0].end_ms <= pair[1].start_ms && pair[1].start_ms <= pair[1].end_ms, "{t:?}");
        }
        assert_eq!(t.last().map(|w| w.end_ms), Some(((2 + 8 * 2) * 300 / 24) as i64));
    }
}
