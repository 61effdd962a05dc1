//! The English front end without libtorch: loaded from the voice's assets with no OOV guesser, or
//! with one of the test's own. Needs the hibari assets in .cache/hibari
//! (`scripts/setup-voice.sh hibari`); without them each test says so and is skipped. The engine's
//! tests (engine-libtorch/tests/g2p.rs) hold the full front end, OOV net included, to the Python
//! reference.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use speechstream_text::{FrontEnd, Oov};

/// The hibari assets, or None (said) when they are not set up.
fn assets() -> Option<PathBuf> {
    let dir = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"), PathBuf::from)
        .join("hibari");
    let needed = ["normalize.json", "tokenizer_exceptions.json", "tagger.json.gz", "lexicon_us_gold.json.gz"];
    if let Some(missing) = needed.iter().find(|f| !dir.join(f).exists()) {
        eprintln!("skipped: {} missing (run scripts/setup-voice.sh hibari)", dir.join(missing).display());
        return None;
    }
    Some(dir)
}

/// Guesses every word as the same phonemes, noting the words it was asked.
struct Fixed {
    phonemes: &'static str,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Oov for Fixed {
    fn phonemize(&mut self, word: &str) -> Option<String> {
        self.asked.lock().unwrap().push(word.to_string());
        Some(self.phonemes.to_string())
    }
}

#[test]
fn a_front_end_is_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<FrontEnd>();
}

#[test]
fn without_a_guesser_unknown_words_are_not_spoken() {
    let Some(dir) = assets() else { return };
    let fe = FrontEnd::load_accent(&dir, true, None).expect("load the British front end");
    assert!(!fe.has_oov());
    // Words of the lexicon read as with the OOV net (engine-libtorch/tests/g2p.rs).
    assert_eq!(fe.phonemize("Hello there."), "həlˈQ ðˈɛː.");
    // No lexicon has "Zyxqwort": it is left out, and its word keeps an empty phoneme range.
    let text = "Zyxqwort is a word.";
    assert_eq!(fe.phonemize(text), "ɪz ɐ wˈɜːd.");
    let sentence = &fe.sentences(text)[0];
    assert_eq!(sentence.phonemes, "ɪz ɐ wˈɜːd.");
    let words: Vec<(&str, usize)> = sentence.words.iter().map(|w| (w.text.as_str(), w.phonemes.len())).collect();
    assert_eq!(words, [("Zyxqwort", 0), ("is", 2), ("a", 1), ("word.", 6)]);
}

#[test]
fn a_guesser_reads_the_words_no_lexicon_has() {
    let Some(dir) = assets() else { return };
    let asked = Arc::new(Mutex::new(Vec::new()));
    let guesser = Fixed { phonemes: "zˈɪks", asked: asked.clone() };
    let fe = FrontEnd::load(&dir, Some(Box::new(guesser))).expect("load the American front end");
    assert!(fe.has_oov());
    assert_eq!(fe.phonemize("Zyxqwort is a word."), "zˈɪks ɪz ɐ wˈɜɹd.");
    // Asked only for the word no lexicon has.
    assert_eq!(*asked.lock().unwrap(), ["Zyxqwort"]);
}

/// hibari's own normalisation (the reference's readings, for parity checks), which needs no OOV
/// guesser.
#[test]
fn normalisation_matches_reference() {
    let Some(dir) = assets() else { return };
    let mut fe = FrontEnd::load(&dir, None).expect("load the American front end");
    fe.set_reference_normalization(true);
    let cases = [
        ("It is 7:30 pm.", "It is seven thirty P.M."),
        ("At 5:05 a.m. sharp", "At five oh five A.M. sharp"),
        ("Meet at 12:00", "Meet at twelve o'clock"),
        ("Ends 2:30:15", "Ends two thirty and fifteen seconds"),
        ("At 8:00 AM", "At eight A.M."),
        ("On 2024-03-04 and 12/25/99", "On March fourth, 2024 and December twenty-fifth, 1999"),
        ("$5 million and 50¢", "5 million dollars and 50 cents"),
        ("Chapter IV and Henry VIII", "Chapter 4 and Henry the eighth"),
        ("Call 555-123-4567", "Call 5 5 5, 1 2 3, 4 5 6 7"),
        ("3/4 and 5/31 and 13/40", "3 quarters and May thirty-first and 13 slash 40"),
        ("pages 10-20", "pages 10 to 20"),
        ("No. 5 and #42", "Number 5 and number 42"),
        ("Dr. Smith", "Dr Smith"),
        ("-5°C and 25 kg", "-5 degrees Celsius and 25 kilograms"),
    ];
    for (text, want) in cases {
        assert_eq!(fe.normalize(text), want, "normalize({text:?})");
    }
}
