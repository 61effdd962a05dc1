//! `say`'s progress bar on a terminal: sentences begun of the text's, seconds of audio made,
//! the real-time factor so far and the time left, redrawn in place on standard error at most
//! ten times a second; nothing at all when standard error is not a terminal (piped, a log).

use std::io::Write;
use std::time::{Duration, Instant};

use speechstream_core::split::{Granularity, Splitter};

/// Redraws no more often than this.
const EVERY: Duration = Duration::from_millis(100);
const WIDTH: usize = 24;

pub(crate) struct Progress {
    started: Instant,
    drawn: Option<Instant>,
    /// Sentences in the text (the splitter's count; the engine's own may differ a little).
    sentences: usize,
    chars: usize,
    /// Sentences the engine has begun (one word-timing event each) and their characters.
    begun: usize,
    begun_chars: usize,
    audio_seconds: f64,
}

impl Progress {
    /// A bar for `text`, or `None` when `terminal` is false (the output is piped).
    pub(crate) fn new(text: &str, terminal: bool) -> Option<Progress> {
        if !terminal {
            return None;
        }
        let mut splitter = Splitter::new(Granularity::Sentence);
        let mut sentences = splitter.feed(text).len();
        sentences += splitter.flush().len();
        let chars = text.chars().filter(|c| !c.is_whitespace()).count();
        Some(Progress {
            started: Instant::now(),
            drawn: None,
            sentences: sentences.max(1),
            chars: chars.max(1),
            begun: 0,
            begun_chars: 0,
            audio_seconds: 0.0,
        })
    }

    /// A sentence begun, with these words.
    pub(crate) fn sentence(&mut self, words: &[String]) {
        self.begun += 1;
        self.begun_chars += words.iter().map(|w| w.chars().filter(|c| !c.is_whitespace()).count()).sum::<usize>();
        self.draw(false);
    }

    /// `seconds` more audio.
    pub(crate) fn audio(&mut self, seconds: f64) {
        self.audio_seconds += seconds;
        self.draw(false);
    }

    /// The text is spoken: the full bar, then a new line.
    pub(crate) fn finish(&mut self) {
        self.begun = self.begun.max(self.sentences);
        self.begun_chars = self.chars;
        self.draw(true);
        let _ = writeln!(std::io::stderr());
    }

    fn draw(&mut self, always: bool) {
        let now = Instant::now();
        if !always && self.drawn.is_some_and(|at| now.duration_since(at) < EVERY) {
            return;
        }
        self.drawn = Some(now);
        let _ = write!(std::io::stderr(), "\r{}\x1b[K", self.line(now.duration_since(self.started)));
    }

    /// The bar's text after `elapsed`.
    fn line(&self, elapsed: Duration) -> String {
        // The sentence in progress counts as not done until the next begins (or the end).
        let sentences = self.sentences.max(self.begun);
        let done = match self.begun_chars >= self.chars {
            true => sentences,
            false => self.begun.saturating_sub(1),
        };
        let filled = WIDTH * done / sentences;
        let bar: String = "#".repeat(filled) + &".".repeat(WIDTH - filled);
        let elapsed_s = elapsed.as_secs_f64();
        let rtf = match self.audio_seconds > 0.0 {
            true => format!("RTF {:.2}", elapsed_s / self.audio_seconds),
            false => "RTF -".to_owned(),
        };
        // Time left: the time per character so far, over the characters not yet begun.
        let left = self.chars.saturating_sub(self.begun_chars);
        let eta = match self.begun_chars {
            0 => "ETA -".to_owned(),
            begun => format!("ETA {:.0} s", elapsed_s / begun as f64 * left as f64),
        };
        format!("[{bar}] {done}/{sentences} sentences, {:.1} s of audio, {rtf}, {eta}", self.audio_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_when_piped_and_counts_sentences_on_a_terminal() {
        assert!(Progress::new("Hello.", false).is_none());
        let mut p = Progress::new("One two. Three four. Five six.", true).expect("a terminal");
        assert_eq!(p.sentences, 3);
        p.begun = 2;
        p.begun_chars = 16;
        p.audio_seconds = 2.0;
        let line = p.line(Duration::from_secs(1));
        assert_eq!(line, "[########................] 1/3 sentences, 2.0 s of audio, RTF 0.50, ETA 1 s");
        p.begun_chars = 8;
        let line = p.line(Duration::from_secs(3));
        assert!(line.ends_with("RTF 1.50, ETA 6 s"), "{line}");
        p.begun = 3;
        p.begun_chars = p.chars;
        assert!(p.line(Duration::from_secs(4)).starts_with("[########################] 3/3 sentences"));
    }
}
