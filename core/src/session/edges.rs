//! Fragments joined without dead air (issue 34): a voice pads each request with silence before
//! and after its speech, which is right for a sentence and dead air inside one. When a stream's
//! fragment ends mid-sentence, its trailing silence is cut to a short gap, and so is the leading
//! silence of the fragment after it. The audio streams through as it comes; only quiet samples
//! at an edge are held back until the next voiced sample (they are sent) or the end (cut).

/// A sample quieter than this (about -42 dBFS) is silence.
const QUIET: i32 = 256;

/// Trims the quiet edges of one fragment's s16le mono audio.
#[derive(Debug)]
pub(super) struct Edges {
    /// Most leading quiet kept, in ms (`None`: all of it); only until the first voiced sample.
    lead_ms: Option<u32>,
    /// Most trailing quiet kept, in ms (`None`: all of it).
    tail_ms: Option<u32>,
    voiced: bool,
    /// Quiet bytes held back: leading (before any voice) or trailing (since the last voice).
    held: Vec<u8>,
}

impl Edges {
    pub(super) fn new(lead_ms: Option<u32>, tail_ms: Option<u32>) -> Edges {
        // Without a lead to cut, the audio is past its leading edge from the start.
        Edges { lead_ms, tail_ms, voiced: lead_ms.is_none(), held: Vec::new() }
    }

    /// The audio that can be sent now, of `pcm` (whole samples) at `rate`.
    pub(super) fn push(&mut self, pcm: &[u8], rate: u32) -> Vec<u8> {
        let loud = |s: &[u8]| i32::from(i16::from_le_bytes([s[0], s[1]])).abs() >= QUIET;
        let samples = pcm.chunks_exact(2);
        let first = samples.clone().position(loud);
        let mut out = Vec::new();
        let rest = if self.voiced {
            pcm
        } else {
            let Some(first) = first else {
                self.held.extend_from_slice(pcm);
                self.keep_last(self.lead_ms, rate);
                return out;
            };
            self.held.extend_from_slice(&pcm[..first * 2]);
            self.keep_last(self.lead_ms, rate);
            out.append(&mut self.held);
            self.voiced = true;
            &pcm[first * 2..]
        };
        if self.tail_ms.is_none() {
            out.append(&mut self.held);
            out.extend_from_slice(rest);
            return out;
        }
        match rest.chunks_exact(2).rposition(loud) {
            Some(last) => {
                out.append(&mut self.held);
                out.extend_from_slice(&rest[..(last + 1) * 2]);
                self.held.extend_from_slice(&rest[(last + 1) * 2..]);
            }
            None => self.held.extend_from_slice(rest),
        }
        out
    }

    /// The end of the fragment: the quiet still held, cut to what is kept.
    pub(super) fn finish(&mut self, rate: u32) -> Vec<u8> {
        let keep = if self.voiced { self.tail_ms } else { self.lead_ms };
        if let Some(ms) = keep {
            self.held.truncate(bytes(ms, rate).min(self.held.len()));
        }
        std::mem::take(&mut self.held)
    }

    /// Only the last `ms` of the leading quiet (the gap just before the voice) stays held.
    fn keep_last(&mut self, ms: Option<u32>, rate: u32) {
        if let Some(ms) = ms {
            let excess = self.held.len().saturating_sub(bytes(ms, rate));
            self.held.drain(..excess);
        }
    }
}

/// Bytes of `ms` of s16le mono at `rate`.
fn bytes(ms: u32, rate: u32) -> usize {
    (u64::from(rate) * u64::from(ms) / 1000) as usize * 2
}

/// How a fragment's text ends: mid-sentence after a clause mark (`,` `;` `:` `-`), mid-sentence
/// otherwise, or at a sentence's end (`.` `!` `?` `…`, closing quotes and brackets aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextEnd {
    Clause,
    Open,
    Sentence,
}

impl TextEnd {
    pub(super) fn of(text: &str) -> TextEnd {
        let last = text.trim_end().chars().rev().find(|c| !matches!(c, '"' | '\'' | ')' | ']' | '}' | '”' | '’' | '»'));
        match last {
            Some('.' | '!' | '?' | '…' | '。' | '！' | '？') => TextEnd::Sentence,
            Some(',' | ';' | ':' | '-' | '–' | '—' | '，' | '；' | '：') => TextEnd::Clause,
            _ => TextEnd::Open,
        }
    }

    /// The trailing quiet a fragment ending so keeps (`None`: all, at a sentence's end), and
    /// the leading quiet the next one keeps.
    pub(super) fn gap_ms(self) -> (Option<u32>, Option<u32>) {
        match self {
            TextEnd::Sentence => (None, None),
            TextEnd::Clause => (Some(150), Some(20)),
            TextEnd::Open => (Some(30), Some(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcm(samples: &[i16]) -> Vec<u8> {
        samples.iter().flat_map(|s| s.to_le_bytes()).collect()
    }

    /// 1 kHz: 1 sample per ms.
    const RATE: u32 = 1000;

    #[test]
    fn quiet_edges_are_cut_to_the_gap_however_the_audio_is_chunked() {
        // 100 ms quiet, 50 voiced (with a quiet dip inside), 200 quiet.
        let mut audio = vec![3i16; 100];
        audio.extend(std::iter::repeat_n(4000, 20));
        audio.extend(std::iter::repeat_n(0, 10));
        audio.extend(std::iter::repeat_n(-4000, 20));
        audio.extend(std::iter::repeat_n(-5, 200));
        let audio = pcm(&audio);
        for chunk in [2, 14, 64, 1000] {
            let mut edges = Edges::new(Some(20), Some(30));
            let mut out = Vec::new();
            for part in audio.chunks(chunk) {
                out.extend(edges.push(part, RATE));
            }
            out.extend(edges.finish(RATE));
            // 20 ms lead + 50 voiced (the dip kept) + 30 ms tail.
            assert_eq!(out, audio[160..360], "chunks of {chunk} bytes");
        }
        let mut all = Edges::new(None, None);
        let mut out = all.push(&audio, RATE);
        out.extend(all.finish(RATE));
        assert_eq!(out, audio, "nothing cut at a sentence's end");
        // The first unit keeps its lead, and quiet audio at its start streams at once.
        let mut first = Edges::new(None, Some(30));
        assert_eq!(first.push(&pcm(&[1, 0, 2, 0]), RATE), Vec::<u8>::new(), "quiet: held as a possible tail");
        assert_eq!(first.push(&pcm(&[900]), RATE), pcm(&[1, 0, 2, 0, 900]));
    }

    #[test]
    fn voiced_audio_is_not_held_back() {
        let mut edges = Edges::new(Some(20), Some(30));
        assert_eq!(edges.push(&pcm(&[0, 0, 900, 900]), RATE), pcm(&[0, 0, 900, 900]));
        assert!(edges.push(&pcm(&[0, 0]), RATE).is_empty(), "trailing quiet waits");
        assert_eq!(edges.push(&pcm(&[700]), RATE), pcm(&[0, 0, 700]), "and goes out before more voice");
        // All quiet: the kept lead only.
        let mut quiet = Edges::new(Some(2), Some(30));
        assert!(quiet.push(&pcm(&[0; 10]), RATE).is_empty());
        assert_eq!(quiet.finish(RATE), pcm(&[0, 0]));
    }

    #[test]
    fn text_ends() {
        for (text, end) in [
            ("Hello world.", TextEnd::Sentence),
            ("Is it? ", TextEnd::Sentence),
            ("He said \"stop!\"", TextEnd::Sentence),
            ("Today is", TextEnd::Open),
            ("sunny, ", TextEnd::Clause),
            ("", TextEnd::Open),
        ] {
            assert_eq!(TextEnd::of(text), end, "{text:?}");
        }
    }
}
