//! The chunk policy: which frame ranges a sentence is streamed in.

use super::*;

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
/// per chunk (`max` below `size` counts as `size`). Each chunk decodes [`DECODER_CONTEXT`] extra
/// frames on each side, so the fewer chunks after the first, the less is decoded twice; the
/// client already has audio to play by then.
///
/// A last piece shorter than `size` joins the chunk before it (never the first chunk): a chunk
/// costs its decoder context rows and a DSP pass whatever its length, and by then the client has
/// audio to play.
pub fn stream_ranges(frames: usize, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
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

/// [`stream_ranges`] of an utterance's sentence `index` (0 = its first), as the server streams
/// it: only the utterance's first chunk is `first` frames; a later sentence starts at `size`,
/// while the client still has the earlier ones to play.
pub fn sentence_ranges(frames: usize, index: u64, first: usize, size: usize, max: usize) -> Vec<Range<usize>> {
    stream_ranges(frames, if index == 0 { first } else { size }, size, max)
}

#[cfg(test)]
mod stream_ranges_tests {
    use super::stream_ranges;

    #[test]
    fn only_an_utterances_first_sentence_starts_small() {
        use super::sentence_ranges;
        assert_eq!(sentence_ranges(320, 0, 16, 80, 200), stream_ranges(320, 16, 80, 200));
        assert_eq!(sentence_ranges(320, 1, 16, 80, 200), vec![0..80, 80..160, 160..320]);
        assert_eq!(sentence_ranges(320, 7, 16, 80, 200), vec![0..80, 80..160, 160..320]);
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
}
