//! What a listener heard of a cancelled utterance (our extension of `input.cancel`): given how
//! much of the audio it played, the words whose sound was played whole, the word it was in the
//! middle of, and their character spans in the utterance's text, so a voice agent's memory
//! holds what was said rather than what was generated.

use crate::engine::WordTiming;
use crate::messages::{Heard, HeardWord};

/// A word as timestamps name it: letters, digits and apostrophes of a whitespace-separated
/// piece of text.
fn clean(piece: &str) -> String {
    piece.chars().filter(|c| c.is_alphanumeric() || matches!(c, '\'' | '’')).collect()
}

/// The character span of each word of `words` in `text`: the next whitespace-separated piece
/// whose letters, digits and apostrophes are the word, trimmed to them (engines name the written
/// words so, the hibari voice included).
fn spans(text: &str, words: &[WordTiming]) -> Vec<Option<[usize; 2]>> {
    let mut pieces = Vec::new();
    let mut start = None;
    for (i, c) in text.chars().chain(std::iter::once(' ')).enumerate() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                pieces.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    let chars: Vec<char> = text.chars().collect();
    let word_char = |c: char| c.is_alphanumeric() || matches!(c, '\'' | '’');
    let mut next = 0;
    words
        .iter()
        .map(|w| {
            let found =
                pieces[next..].iter().position(|p| clean(&chars[p.clone()].iter().collect::<String>()) == w.word)?;
            let piece = pieces[next + found].clone();
            next += found + 1;
            let first = piece.clone().find(|&i| word_char(chars[i]))?;
            let last = piece.rev().find(|&i| word_char(chars[i]))?;
            Some([first, last + 1])
        })
        .collect()
}

/// What was heard of utterance `utterance_index` of `text` with `words`, when the client played `played_ms`
/// of the `sent_ms` it was sent.
pub(crate) fn heard(utterance_index: u64, text: &str, words: &[WordTiming], played_ms: i64, sent_ms: i64) -> Heard {
    let played_ms = played_ms.clamp(0, sent_ms.max(0));
    // The engine's own character spans when it gives them all; else found in the text.
    let spans = match words.iter().map(|w| w.chars.as_ref().map(|r| [r.start, r.end])).collect::<Option<Vec<_>>>() {
        Some(given) => given.into_iter().map(Some).collect(),
        None => spans(text, words),
    };
    let word = |i: usize| HeardWord {
        word: words[i].word.clone(),
        start_ms: words[i].start_ms,
        end_ms: words[i].end_ms,
        chars: spans[i],
    };
    let whole = words.iter().take_while(|w| w.end_ms <= played_ms).count();
    let partial_word = words.get(whole).filter(|w| w.start_ms < played_ms).map(|_| word(whole));
    let end = spans[..whole].iter().rev().find_map(|s| *s).map_or(0, |s| s[1]);
    Heard {
        utterance_index,
        played_ms,
        text: text.chars().take(end).collect(),
        chars: [0, end],
        words: (0..whole).map(word).collect(),
        partial_word,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(word: &str, start_ms: i64, end_ms: i64) -> WordTiming {
        WordTiming { word: word.into(), start_ms, end_ms, chars: None }
    }

    #[test]
    fn whole_words_then_the_partial_one() {
        let text = "« Héllo, big — world! »";
        let words = [w("Héllo", 100, 400), w("big", 450, 600), w("world", 620, 900)];
        let h = heard(0, text, &words, 610, 2000);
        assert_eq!(h.text, "« Héllo, big");
        assert_eq!(h.chars, [0, 12]);
        assert_eq!(h.words.iter().map(|w| w.chars).collect::<Vec<_>>(), [Some([2, 7]), Some([9, 12])]);
        assert_eq!(h.partial_word, None, "played between two words");
        let h = heard(0, text, &words, 700, 2000);
        let partial = h.partial_word.expect("in the middle of world");
        assert_eq!((partial.word.as_str(), partial.chars), ("world", Some([15, 20])));
        assert_eq!(text.chars().skip(15).take(5).collect::<String>(), "world");
    }

    #[test]
    fn played_is_capped_at_what_was_sent() {
        let words = [w("one", 0, 300), w("two", 300, 700)];
        let h = heard(0, "one two", &words, 10_000, 500);
        assert_eq!(h.played_ms, 500);
        assert_eq!(h.text, "one");
        assert_eq!(h.partial_word.map(|w| w.word), Some("two".to_owned()));
        let h = heard(0, "one two", &words, 10_000, 700);
        assert_eq!((h.text.as_str(), h.partial_word), ("one two", None));
        let h = heard(0, "one two", &words, 0, 700);
        assert_eq!((h.text.as_str(), h.chars, h.words.len(), h.partial_word), ("", [0, 0], 0, None));
    }

    #[test]
    fn words_not_in_the_text_have_no_span() {
        let words = [w("seven", 0, 100), w("thirty", 100, 200), w("pm", 200, 300)];
        let h = heard(0, "at 7:30 pm", &words, 300, 300);
        assert_eq!(h.words.iter().map(|w| w.chars).collect::<Vec<_>>(), [None, None, Some([8, 10])]);
        // A word the text does have is still found after them.
        let words = [w("730", 0, 100), w("pm", 100, 200)];
        let h = heard(0, "at 7:30 pm", &words, 300, 300);
        assert_eq!(h.words.iter().map(|w| w.chars).collect::<Vec<_>>(), [Some([3, 7]), Some([8, 10])]);
        assert_eq!(h.text, "at 7:30 pm");
    }
}
