//! Upstream's open-PR `text_input_mode: "commitment"` (vLLM-Omni PR #6515; the team's
//! docs/protocol-upstream.md §3): text that arrives in pieces is committed in segments, raw (not
//! stripped), each ending after a run of strong sentence ends (`. ! ? 。 ！ ？ …` or a newline).
//! A run is not a boundary until the character after it is known, and a `.` is none where it
//! belongs to a word or a number: between letters or digits (`3.14`, `example.com`), before a
//! digit (`.5`), or closing a dotted abbreviation of two or more letters (`e.g.`, `U.S.`).
//!
//! Ours, written from the PR's description, not its code: its `zh_en_special_v1` policy also
//! holds words, numbers and unit names back while they touch the end of the text, which decides
//! when text is released but not where segments end; here only the boundaries are computed.

/// Strong sentence ends.
const STRONG_ENDS: [char; 8] = ['.', '!', '?', '。', '！', '？', '…', '\n'];

/// How much undecided text may wait for its next character.
pub const MAX_PENDING_CHARS: usize = 4096;

/// Text fed in pieces, cut into committed segments.
#[derive(Clone, Debug, Default)]
pub struct Commitment {
    buffer: Vec<char>,
}

impl Commitment {
    /// An empty one.
    pub fn new() -> Commitment {
        Commitment::default()
    }

    /// Add `text`; the segments it completed, in order.
    pub fn feed(&mut self, text: &str) -> Vec<String> {
        self.buffer.extend(text.chars());
        self.cut(false)
    }

    /// End of input: everything left, as the last segment (if it is not blank).
    pub fn finish(&mut self) -> Vec<String> {
        self.cut(true)
    }

    fn cut(&mut self, eof: bool) -> Vec<String> {
        let b = &self.buffer;
        let mut segments = Vec::new();
        let (mut start, mut i) = (0, 0);
        while i < b.len() {
            if !STRONG_ENDS.contains(&b[i]) || !ends_sentence(b, i) {
                i += 1;
                continue;
            }
            let mut end = i + 1;
            while end < b.len() && STRONG_ENDS.contains(&b[end]) && ends_sentence(b, end) {
                end += 1;
            }
            // The run (or a lone `.`) may still grow, or turn out to be part of a number.
            if end == b.len() && !eof {
                break;
            }
            push_segment(&mut segments, &b[start..end]);
            start = end;
            i = end;
        }
        if eof {
            push_segment(&mut segments, &b[start..]);
            start = b.len();
        }
        self.buffer.drain(..start);
        segments
    }

    /// Characters not yet in a segment.
    pub fn pending_chars(&self) -> usize {
        self.buffer.len()
    }
}

fn push_segment(segments: &mut Vec<String>, text: &[char]) {
    if text.iter().any(|c| !c.is_whitespace()) {
        segments.push(text.iter().collect());
    }
}

/// Whether the strong end at `i` may end a sentence (a `.` inside a word or number may not).
fn ends_sentence(b: &[char], i: usize) -> bool {
    if b[i] != '.' {
        return true;
    }
    let prev = i.checked_sub(1).map(|p| b[p]);
    let next = b.get(i + 1).copied();
    let alnum = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    if alnum(prev) && alnum(next) {
        return false; // 3.14, example.com
    }
    if next.is_some_and(|c| c.is_ascii_digit()) && prev != Some('.') {
        return false; // .5
    }
    !closes_dotted_abbreviation(b, i)
}

/// `b[i]` is the last `.` of two or more `letter.` pairs (`e.g.`, `U.S.`).
fn closes_dotted_abbreviation(b: &[char], i: usize) -> bool {
    let mut pairs = 0;
    let mut at = i + 1;
    while at >= 2 && b[at - 1] == '.' && b[at - 2].is_alphabetic() {
        pairs += 1;
        at -= 2;
        if at > 0 && b[at - 1].is_alphanumeric() {
            return false; // part of a longer word
        }
    }
    pairs >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(pieces: &[&str]) -> Vec<String> {
        let mut c = Commitment::new();
        let mut out: Vec<String> = pieces.iter().flat_map(|p| c.feed(p)).collect();
        out.extend(c.finish());
        out
    }

    #[test]
    fn the_prs_examples() {
        // C1: nothing until the sentence ends; the space after it starts the next segment.
        let mut c = Commitment::new();
        assert!(c.feed("The total is 2026").is_empty());
        assert_eq!(c.feed(" dollars. "), ["The total is 2026 dollars."]);
        assert!(c.feed("Thank you").is_empty());
        assert_eq!(c.finish(), [" Thank you"]);
        // C2, C3.
        assert_eq!(all(&["Value:\n.5 seconds. Wait... What?! "]), ["Value:\n", ".5 seconds.", " Wait...", " What?!"]);
        assert_eq!(all(&["There are 3\nMore things. "]), ["There are 3\n", "More things."]);
    }

    #[test]
    fn dots_in_words_numbers_and_abbreviations_end_nothing() {
        assert_eq!(
            all(&["It costs 3.", "14 dollars. See example.com now. "]),
            ["It costs 3.14 dollars.", " See example.com now."]
        );
        assert_eq!(all(&["The U.S. team, e.g. us, won. Yes"]), ["The U.S. team, e.g. us, won.", " Yes"]);
        // A run at the end waits: it may grow.
        let mut c = Commitment::new();
        assert!(c.feed("Really?").is_empty());
        assert!(c.feed("!").is_empty());
        assert_eq!(c.feed(" Yes"), ["Really?!"]);
        assert_eq!(c.pending_chars(), 4);
        assert!(all(&["  ", "\n"]).is_empty());
    }
}
