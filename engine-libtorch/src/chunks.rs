//! The chunk policy: which pieces a sentence is streamed in. One rule ([`ChunkLengths`]), used in
//! frames by the scheduler ([`sentence_ranges`]: what it decodes and sends) and in seconds of
//! audio by admission ([`crate::pacing::Outlook::steps`]: what it expects a stream to owe), so
//! the two cannot drift apart.

use std::ops::{Range, Sub};

/// The sizes a sentence is cut at: the first chunk of an utterance (small: its client is waiting
/// for it), a sentence's first two chunks otherwise, every later one. In frames (what the
/// scheduler decodes) or in seconds of audio (what admission estimates with).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkSizes<T> {
    pub first: T,
    pub chunk: T,
    pub max: T,
}

impl ChunkSizes<usize> {
    /// Sizes in frames as the options give them, made usable: every chunk at least a frame,
    /// `max` at least `chunk`.
    pub fn frames(first: usize, chunk: usize, max: usize) -> Self {
        let chunk = chunk.max(1);
        ChunkSizes { first: first.max(1), chunk, max: max.max(chunk) }
    }
}

impl<T> ChunkSizes<T> {
    /// The same sizes in another unit.
    pub fn map<U>(self, f: impl Fn(T) -> U) -> ChunkSizes<U> {
        ChunkSizes { first: f(self.first), chunk: f(self.chunk), max: f(self.max) }
    }
}

/// What chunks are measured in: frames (`usize`), or seconds of audio (`f64`).
pub trait Amount: Copy + PartialOrd + Sub<Output = Self> {
    /// Whether this much, left of a sentence, is still to be cut (seconds: more than the
    /// round-off of subtracting chunk lengths, 1e-9).
    fn is_left(self) -> bool;
}

impl Amount for usize {
    fn is_left(self) -> bool {
        self > 0
    }
}

impl Amount for f64 {
    fn is_left(self) -> bool {
        self > 1e-9
    }
}

/// The lengths of the chunks a sentence of `total` is cut into, in order: `first` (if the
/// sentence opens its utterance; a later sentence starts at `chunk`, while the client still has
/// the earlier ones to play), then `chunk`, then `max` per chunk. Each chunk decodes
/// [`crate::hibari::DECODER_CONTEXT`] extra frames on each side, so the fewer chunks after the
/// first, the less is decoded twice; the client already has audio to play by then.
///
/// A last piece shorter than `chunk` joins the chunk before it (never a sentence's first chunk):
/// a chunk costs its decoder context rows and a DSP pass
/// its length, and by then the client has audio to play.
#[derive(Clone, Debug)]
pub struct ChunkLengths<T> {
    left: T,
    k: usize,
    opens_utterance: bool,
    sizes: ChunkSizes<T>,
}

impl<T: Amount> ChunkLengths<T> {
    pub fn new(total: T, opens_utterance: bool, sizes: ChunkSizes<T>) -> Self {
        ChunkLengths { left: total, k: 0, opens_utterance, sizes }
    }
}

impl<T: Amount> Iterator for ChunkLengths<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if !self.left.is_left() {
            return None;
        }
        let s = self.sizes;
        let n = match self.k {
            0 if self.opens_utterance => s.first,
            0 | 1 => s.chunk,
            _ => s.max,
        };
        // (`n >= left` first: frames are unsigned)
        let len = if n >= self.left || (self.k > 0 && self.left - n < s.chunk) { self.left } else { n };
        self.left = self.left - len;
        self.k += 1;
        Some(len)
    }
}

/// Frame ranges for streaming: a first chunk of `first` frames, then chunks of `size`.
pub fn chunk_ranges(frames: usize, first: usize, size: usize) -> Vec<Range<usize>> {
    let (first, size) = (first.max(1), size.max(1));
    let mut out = Vec::new();
    let mut a = 0;
    while a < frames {
        let b = (a + if out.is_empty() { first } else { size }).min(frames);
        out.push(a..b);
        a = b;
    }
    out
}

/// Frame ranges for streaming with growing chunks: `first` frames, then `size`, then `max` frames
/// per chunk (`max` below `size` counts as `size`), a short tail joined to the chunk before it:
/// `ChunkLengths` of a sentence that opens its utterance.
pub fn stream_ranges(frames: usize, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
    ranges(ChunkLengths::new(frames, true, ChunkSizes::frames(first, size, max)))
}

/// [`stream_ranges`] of an utterance's sentence `index` (0 = its first), as the server streams
/// it: only the utterance's first chunk is `first` frames; a later sentence starts at `size`
/// (`ChunkLengths`).
pub fn sentence_ranges(frames: usize, index: u64, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
    ranges(ChunkLengths::new(frames, index == 0, ChunkSizes::frames(first, size, max)))
}

/// [`sentence_ranges`] of a segment of which `ready` frames were computed when it started
/// (Kokoro's opening, or its leading silence): those go out at once as its first chunk, the
/// frames up to `opening` (where past `ready`: the opening after that silence) as its next,
/// the rest as a later sentence's.
pub fn opened_ranges(
    frames: usize,
    ready: usize,
    opening: usize,
    index: u64,
    sizes: ChunkSizes<usize>,
) -> Vec<Range<usize>> {
    if ready == 0 || ready >= frames {
        return sentence_ranges(frames, index, sizes.first, sizes.chunk, sizes.max);
    }
    let opened = opening > ready && opening < frames;
    let from = if opened { opening } else { ready };
    let rest = sentence_ranges(frames - from, 1, sizes.first, sizes.chunk, sizes.max);
    std::iter::once(0..ready)
        .chain(opened.then_some(ready..opening))
        .chain(rest.into_iter().map(|r| r.start + from..r.end + from))
        .collect()
}

/// Consecutive ranges from 0 with these lengths.
fn ranges(lengths: impl Iterator<Item = usize>) -> Vec<Range<usize>> {
    let mut a = 0;
    lengths
        .map(|n| {
            a += n;
            a - n..a
        })
        .collect()
}

#[cfg(test)]
mod stream_ranges_tests {
    use super::*;

    #[test]
    fn only_an_utterances_first_sentence_starts_small() {
        assert_eq!(sentence_ranges(320, 0, 16, 80, 200), stream_ranges(320, 16, 80, 200));
        assert_eq!(sentence_ranges(320, 1, 16, 80, 200), vec![0..80, 80..160, 160..320]);
        assert_eq!(sentence_ranges(320, 7, 16, 80, 200), vec![0..80, 80..160, 160..320]);
    }

    #[test]
    fn a_segments_computed_opening_is_its_first_chunk() {
        let sizes = ChunkSizes::frames(16, 80, 200);
        assert_eq!(opened_ranges(320, 44, 0, 0, sizes), vec![0..44, 44..124, 124..204, 204..320]);
        // nothing computed, or everything: the chunk rule as it is
        assert_eq!(opened_ranges(320, 0, 0, 0, sizes), sentence_ranges(320, 0, 16, 80, 200));
        assert_eq!(opened_ranges(320, 320, 0, 0, sizes), sentence_ranges(320, 0, 16, 80, 200));
        assert_eq!(opened_ranges(320, 320, 0, 2, sizes), sentence_ranges(320, 2, 16, 80, 200));
    }

    #[test]
    fn a_leading_silence_goes_first_then_the_opening_after_it() {
        let sizes = ChunkSizes::frames(16, 80, 200);
        assert_eq!(opened_ranges(320, 20, 44, 0, sizes), vec![0..20, 20..44, 44..124, 124..204, 204..320]);
        // an opening mark not past the silence, or at the end, is no chunk of its own
        assert_eq!(opened_ranges(320, 20, 20, 0, sizes), opened_ranges(320, 20, 0, 0, sizes));
        assert_eq!(opened_ranges(320, 20, 320, 0, sizes), opened_ranges(320, 20, 0, 0, sizes));
        assert_eq!(opened_ranges(320, 0, 44, 0, sizes), sentence_ranges(320, 0, 16, 80, 200));
    }

    #[test]
    fn a_short_tail_joins_the_chunk_before() {
        assert_eq!(stream_ranges(320, 16, 80, 200), vec![0..16, 16..96, 96..320]);
        assert_eq!(stream_ranges(500, 16, 80, 200), vec![0..16, 16..96, 96..296, 296..500]);
        assert_eq!(stream_ranges(600, 16, 80, 200), vec![0..16, 16..96, 96..296, 296..496, 496..600]);
        assert_eq!(stream_ranges(150, 16, 80, 200), vec![0..16, 16..150]);
        assert_eq!(stream_ranges(20, 16, 80, 200), vec![0..16, 16..20]);
        assert_eq!(stream_ranges(10, 16, 80, 200), vec![0..10]);
        for frames in 1..700 {
            let r = stream_ranges(frames, 16, 80, 200);
            assert_eq!(r[0].start, 0);
            assert_eq!(r.last().map(|r| r.end), Some(frames));
            assert!(r.windows(2).all(|w| w[0].end == w[1].start && w[1].end > w[1].start), "{frames}: {r:?}");
            assert!(r.iter().skip(1).all(|c| c.len() < 200 + 80), "{frames}: {r:?}");
            assert!(r[0].len() == frames.min(16));
        }
    }

    /// `stream_ranges` as it was written before the rule was shared (frames).
    fn stream_ranges_before(frames: usize, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
        let (first, size) = (first.max(1), size.max(1));
        let max = max.max(size);
        let mut out: Vec<Range<usize>> = Vec::new();
        let mut a = 0;
        while a < frames {
            let n = match out.len() {
                0 => first,
                1 => size,
                _ => max,
            };
            let mut b = (a + n).min(frames);
            if !out.is_empty() && frames - b < size {
                b = frames;
            }
            out.push(a..b);
            a = b;
        }
        out
    }

    /// `Outlook::steps`'s cut of the text after the current sentence as it was written before
    /// the rule was shared (seconds).
    fn pacing_lengths_before(mut left: f64, position: f64, sizes: &ChunkSizes<f64>) -> Vec<f64> {
        let mut out = Vec::new();
        let mut k = 0;
        while left > 1e-9 {
            let size = match k {
                0 if position <= 0.0 => sizes.first,
                0 | 1 => sizes.chunk,
                _ => sizes.max,
            };
            let len = if k > 0 && left - size < sizes.chunk { left } else { size.min(left) };
            out.push(len);
            left -= len;
            k += 1;
        }
        out
    }

    #[test]
    fn the_shared_rule_cuts_frames_as_before() {
        for (first, size, max) in [(16, 80, 200), (10, 48, 100), (0, 0, 0), (1, 1, 1), (30, 20, 10), (16, 80, 80)] {
            for frames in 0..700 {
                let before = stream_ranges_before(frames, first, size, max);
                assert_eq!(stream_ranges(frames, first, size, max), before, "{frames} {first} {size} {max}");
                assert_eq!(sentence_ranges(frames, 0, first, size, max), before);
                for index in [1, 7] {
                    let before = stream_ranges_before(frames, size, size, max);
                    assert_eq!(sentence_ranges(frames, index, first, size, max), before, "{frames} {index}");
                }
            }
        }
    }

    #[test]
    fn the_shared_rule_cuts_seconds_as_pacing_did() {
        let seconds = |frames: usize| (frames * 300) as f64 / 24_000.0;
        for sizes in [(16, 80, 200), (10, 48, 100), (1, 1, 1), (16, 80, 80)] {
            let sizes = ChunkSizes::frames(sizes.0, sizes.1, sizes.2).map(seconds);
            for chars in 0..400 {
                // (the text's audio as admission estimates it: characters at 15 per second)
                let left = chars as f64 / 15.0;
                for position in [0.0, 0.2, 3.7] {
                    let now: Vec<u64> = ChunkLengths::new(left, position <= 0.0, sizes).map(f64::to_bits).collect();
                    let before: Vec<u64> =
                        pacing_lengths_before(left, position, &sizes).into_iter().map(f64::to_bits).collect();
                    assert_eq!(now, before, "{chars} characters from {position} s, {sizes:?}");
                }
            }
        }
    }

    #[test]
    fn frames_and_seconds_are_cut_alike() {
        // (1/128 s frames: every length exact in binary, so no rounding tells the units apart)
        let seconds = |frames: usize| frames as f64 / 128.0;
        let sizes = ChunkSizes::frames(16, 80, 200);
        for frames in 1..700 {
            for opens in [true, false] {
                let in_frames: Vec<f64> = ChunkLengths::new(frames, opens, sizes).map(seconds).collect();
                let in_seconds: Vec<f64> = ChunkLengths::new(seconds(frames), opens, sizes.map(seconds)).collect();
                assert_eq!(in_frames, in_seconds, "{frames} frames, opens: {opens}");
            }
        }
    }
}
