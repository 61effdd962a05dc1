//! Word timestamps from the model's own durations: no forced aligner. The duration predictor says
//! how many coarse frames (25 ms, two fine frames of 300 samples) each token lasts, and the front
//! end says which phoneme characters each word of the text produced, so a word spans the frames
//! of its tokens.
//!
//! A word spans its spoken tokens: the pause tokens that punctuation produces (a sentence-final
//! "." lasts about 400 ms of silence) are left between words, so the last word ends where its
//! speech does; the space token between two words is their transition, shared between them.
//! The audio leads these frames by a constant that each voice family has its own of
//! ([`Acoustics`]; 60 ms for both hibari and Kokoro), which every time is moved by. Measured
//! against PocketSphinx's forced aligner on held-out sentences (engine-libtorch/tests/
//! word_timestamps.rs, benches/results/11-word-timestamps.md): hibari's mean absolute error is
//! 18 ms for starts and 16 ms for ends; Kokoro's packaged voices (Japanese speakers reading
//! English) 19-22 ms for starts and 21-24 ms for ends. The times do not depend on the output
//! rate (the resampler keeps the time axis; at 8 kHz the aligner cannot judge sibilants, which
//! lie above 4 kHz, so the test checks the time axis there).
//!
//! Words are reported as the client wrote them: the text split on whitespace, each piece without
//! the punctuation around it ("$3.50" and `https://example.com` stay whole; "world." is "world"),
//! pieces left empty dropped, so the list matches the text's words in order, each with its
//! character offsets in the request's text. A front-end word that covers several text words
//! ("7:30 pm") shares its time among them by character count.

use std::ops::Range;

use speechstream_core::engine::WordTiming;

/// The sample rate word timings count in (a family at another rate converts its durations
/// and offsets to it).
pub const SAMPLE_RATE: u32 = 24_000;
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
const FINAL_SOUND_CAP: u64 = 5;

/// A space token is the transition between two words, and each takes half of it, but at most
/// this many fine frames (25 ms): a longer space is a pause the model put there, which belongs
/// to neither word.
const SPACE_SHARE_MAX: u64 = 2;

/// How far the audio leads the frames the durations give it, in samples (60 ms). The decoder
/// sees ±27 fine frames around each frame (its k7 input conv and eight k7 blocks) and the model
/// learned to begin each sound this much before its token's first frame: the first word's sound
/// begins inside the leading boundary token (by the audio's energy envelope, and by a forced
/// aligner, which finds every word boundary 50-80 ms before the token boundaries). Measured on
/// the sentences of hibari_engine.rs's energy test against PocketSphinx's aligner (tuning: 1320,
/// 1440 and 1560 samples gave mean start errors of +7.6, +2.6 and -2.4 ms), checked on other
/// sentences in tests/word_timestamps.rs.
const ACOUSTIC_LEAD_SAMPLES: u64 = 1440;

/// How a voice family's audio relates to the frames its durations give: each family's model
/// learned its own timing, so each is measured against the forced aligner on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acoustics {
    /// How far the audio leads the frames, in samples at 24 kHz.
    pub lead_samples: u64,
    /// The most coarse frames a word's last sound may last before a pause.
    pub final_sound_cap: u64,
    /// Fine frames (12.5 ms) in one of its durations' frames: 2 for coarse frames (25 ms), 1 for
    /// durations given in fine frames.
    pub fine_per_frame: u64,
    /// Fine frames of a pause (punctuation) after a word that still belong to its last sound.
    pub pause_tail: u64,
}

impl Acoustics {
    /// hibari's (`ACOUSTIC_LEAD_SAMPLES`, `FINAL_SOUND_CAP`).
    pub const HIBARI: Acoustics = Acoustics {
        lead_samples: ACOUSTIC_LEAD_SAMPLES,
        final_sound_cap: FINAL_SOUND_CAP,
        fine_per_frame: 2,
        pause_tail: 0,
    };
    /// Kokoro's (`KOKORO_LEAD_SAMPLES`, `KOKORO_FINAL_SOUND_CAP`).
    pub const KOKORO: Acoustics = Acoustics {
        lead_samples: KOKORO_LEAD_SAMPLES,
        final_sound_cap: KOKORO_FINAL_SOUND_CAP,
        fine_per_frame: 2,
        pause_tail: 0,
    };
    /// Piper's (`PIPER_LEAD_SAMPLES`, `PIPER_FINAL_SOUND_CAP`).
    /// Piper's durations come in fine frames: its hop (11.6 ms at 22,050 Hz) is finer than 25 ms.
    pub const PIPER: Acoustics = Acoustics {
        lead_samples: PIPER_LEAD_SAMPLES,
        final_sound_cap: PIPER_FINAL_SOUND_CAP,
        fine_per_frame: 1,
        pause_tail: PIPER_PAUSE_TAIL,
    };
}

/// Kokoro's lead: its durations are frames of 600 samples (the coarse frames here), and its
/// audio leads them by 60 ms as hibari's does, within the 5 ms this measurement resolves. Tuned
/// with jf_alpha and jm_kumo on the sentences hibari's lead was tuned on (hibari_engine.rs's
/// energy test, its Stella sentence reworded without the name, which the aligner lacks) against
/// PocketSphinx's aligner, 104 words: moving every time by -10, -5, 0, +5 and +10 ms gave mean
/// absolute errors (starts and ends together) of 23.1, 22.0, 21.7, 22.4 and 23.5 ms; checked on
/// other sentences in tests/word_timestamps.rs.
const KOKORO_LEAD_SAMPLES: u64 = 1440;

/// Kokoro's cap on a last sound before a pause, as hibari's: on the same 104 words, caps of 3,
/// 4, 5 and 7 coarse frames gave mean absolute errors of ends of 23.5 and 23.8, 23.3 and 20.6,
/// 25.1 and 19.5, 32.2 and 24.1 ms (jf_alpha and jm_kumo): 4 and 5 tie.
const KOKORO_FINAL_SOUND_CAP: u64 = 5;

/// Piper's lead, cap and tail, tuned with joe (22,050 Hz) against PocketSphinx's aligner on
/// eight sentences of their own (not word_timestamps.rs's held-out ones), 73 words, each
/// phoneme's pad folded into it (piper/serve.rs, `fold_tokens`) and durations in fine frames:
/// leads of 40, 45 and 50 ms gave mean absolute errors of starts 16.6, 16.2 and 16.9 ms and of
/// ends 22.5, 24.1 and 26.0 ms (p90 45, 51, 55). Without a tail, sentence-final words ended
/// 40-100 ms before the aligner's ends (the last sound fades through the pause's frames); tails
/// of 4 and 8 fine frames gave ends of 22.3 and 25.7 ms (p90 45 and 51) on the held-out ones.
/// Caps of 5 coarse frames and more changed nothing past 8 (a cap of 3 made ends worse).
const PIPER_LEAD_SAMPLES: u64 = 960;

/// Piper's cap on a last sound before a pause, in coarse frames.
const PIPER_FINAL_SOUND_CAP: u64 = 8;

/// Fine frames of the pause after a word that Piper's last sound lasts into.
const PIPER_PAUSE_TAIL: u64 = 4;

/// Whether a phoneme character is spoken; punctuation and spaces are pauses.
fn spoken(c: char) -> bool {
    !(c.is_whitespace() || c.is_ascii_punctuation() || matches!(c, '—' | '–' | '…' | '«' | '»' | '“' | '”' | '¡' | '¿'))
}

/// Timings of a sentence's words. `words`: each front-end word's text, its range of phoneme
/// characters in `phonemes` and, when known, the offset of its text in the request's (chars); `char_tokens`: the token index (in `ids`, where 0 is the leading boundary token)
/// of each phoneme character, `None` where the vocabulary dropped it; `durations`: coarse frames
/// per token; `offset_samples`: where the sentence starts in the utterance's audio.
pub fn word_timings(
    acoustics: Acoustics,
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
        acc += acoustics.fine_per_frame * d.max(0) as u64;
    }
    let end_of = |t: usize| starts[t] + acoustics.fine_per_frame * durations[t].max(0) as u64;
    // Which tokens are spoken sounds (the boundaries at both ends are not), and which are the
    // spaces between words.
    let mut spoken_token = vec![false; durations.len()];
    let mut space_token = vec![false; durations.len()];
    for (c, t) in phonemes.chars().zip(char_tokens) {
        if let Some(t) = t.filter(|&t| t < durations.len()) {
            spoken_token[t] = spoken(c);
            space_token[t] = c.is_whitespace();
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
        // A space token between two words is their transition: each word takes its half (in
        // fine frames, a whole number), so adjacent words meet with no gap, as they sound.
        let half_space = |t: usize| {
            let length = if space_token.get(t).copied().unwrap_or(false) { end_of(t) - starts[t] } else { 0 };
            (length / 2).min(SPACE_SHARE_MAX)
        };
        // A word with no token of its own (e.g. a symbol that is not read) gets an empty span where
        // it stands; clamping to the cursor keeps the list monotonic whatever the ranges are.
        let start = first.map_or(cursor, |t| starts[t] - t.checked_sub(1).map_or(0, half_space)).max(cursor);
        // Before a pause (a token that is neither spoken nor a space: punctuation, the closing
        // boundary), the last sound keeps at most FINAL_SOUND_CAP coarse frames.
        let end_at = |t: usize| {
            if spoken_token.get(t + 1).copied().unwrap_or(false) {
                end_of(t)
            } else {
                let tail = if t + 1 < durations.len() && !space_token[t + 1] {
                    acoustics.pause_tail.min(end_of(t + 1) - starts[t + 1])
                } else {
                    0
                };
                end_of(t).min(starts[t] + 2 * acoustics.final_sound_cap) + tail + half_space(t + 1)
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
        // The audio leads the frames the durations give (see ACOUSTIC_LEAD_SAMPLES).
        let lead = |frame: u64| (frame * SAMPLES_PER_FRAME).saturating_sub(acoustics.lead_samples);
        let (s0, span) = (offset_samples + lead(start), lead(end) - lead(start));
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
        let t = word_timings(Acoustics::HIBARI, &words, "ab c.", &char_tokens, &durations, 0);
        // fine frames: boundary 0..6, a 6..8, b 8..12, space 12..14, c 14..22; the words share
        // the space (12..13 and 13..14), and everything is 60 ms earlier (the acoustic lead).
        assert_eq!(t[0], WordTiming { word: "Ab".into(), start_ms: 75 - 60, end_ms: 163 - 60, chars: None });
        assert_eq!(t[1], WordTiming { word: "c".into(), start_ms: 163 - 60, end_ms: 275 - 60, chars: None });
        let shifted = word_timings(Acoustics::HIBARI, &words, "ab c.", &char_tokens, &durations, 24_000);
        assert_eq!((shifted[1].start_ms, shifted[1].end_ms), (1103, 1215));
    }

    #[test]
    fn pauses_stay_between_words() {
        // "ab, c." with every character a token: the comma, the space and the full stop are
        // pauses (long durations) and belong to no word.
        let char_tokens = [Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)];
        let durations = [3, 1, 2, 10, 1, 4, 20, 5]; // boundary, a, b, ',', ' ', c, '.', boundary
        let words = [("Ab,", 0..3, None), ("c.", 4..6, None)];
        let t = word_timings(Acoustics::HIBARI, &words, "ab, c.", &char_tokens, &durations, 0);
        // fine frames: boundary 0..6, a 6..8, b 8..12, ',' 12..32, ' ' 32..34, c 34..42
        assert_eq!(t[0], WordTiming { word: "Ab".into(), start_ms: 75 - 60, end_ms: 150 - 60, chars: None });
        assert_eq!(t[1], WordTiming { word: "c".into(), start_ms: 413 - 60, end_ms: 525 - 60, chars: None });
        // A long space is a pause: each word takes at most 25 ms of it; a long last sound
        // before it keeps FINAL_SOUND_CAP (125 ms).
        let durations = [3, 1, 9, 10, 1, 4, 20, 5]; // boundary, a, b, ' ' (long), c, ...
        let t = word_timings(
            Acoustics::HIBARI,
            &[("ab", 0..2, None), ("c.", 3..5, None)],
            "ab c.",
            &[Some(1), Some(2), Some(3), Some(4), None],
            &durations,
            0,
        );
        // fine frames: boundary 0..6, a 6..8, b 8..26 (capped at 18), ' ' 26..46, c 46..54
        assert_eq!((t[0].end_ms, t[1].start_ms), (225 + 25 - 60, 575 - 25 - 60));
    }

    #[test]
    fn unspoken_and_grouped_words_stay_in_order() {
        let char_tokens = [Some(1), Some(2), Some(3), Some(4)];
        let durations = [1, 2, 2, 2, 2, 1];
        // "—" has no phonemes; "7:30 pm" is one front-end word over two text words.
        // The text: "x — 7:30 pm." (chars 0, 2 and 4..11).
        let words = [("x", 0..1, Some(0)), ("—", 1..1, Some(2)), ("7:30 pm.", 1..4, Some(4))];
        let t = word_timings(Acoustics::HIBARI, &words, "xyzw", &char_tokens, &durations, 0);
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
        assert_eq!(t.last().map(|w| w.end_ms), Some(((2 + 8 * 2) * 300 / 24) as i64 - 60));
    }
}
