//! What each language's front end costs per sentence: the test sentences of text/tests (espeak/,
//! mandarin/) read `ROUNDS` times (default 5) after a warm-up round, and the best round's time
//! per sentence printed. English reads the first 120 written texts of
//! text/tests/normalize/cases.tsv (misaki's G2P without the OOV net, which is the engine's).
//!
//!     cargo run --release -p speechstream-text --example front_end_cost
//!
//! Needs .cache/hibari (English) and tools/espeak-phonemes built (scripts/setup.sh).

use std::path::PathBuf;
use std::time::Instant;

use speechstream_text::espeak::Espeak;
use speechstream_text::mandarin::Mandarin;
use speechstream_text::FrontEnd;

fn best(rounds: usize, sentences: &[String], mut read: impl FnMut(&str)) -> f64 {
    for s in sentences {
        read(s);
    }
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for s in sentences {
                read(s);
            }
            started.elapsed().as_secs_f64() / sentences.len() as f64
        })
        .fold(f64::MAX, f64::min)
}

fn lines(path: PathBuf) -> Vec<String> {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

fn main() -> Result<(), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tests = root.join("tests");
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let report = |language: &str, n: usize, seconds: f64| {
        println!("{language:<8} {n:>4} sentences  {:>8.3} ms a sentence", seconds * 1e3);
    };
    let english: Vec<String> = lines(tests.join("normalize/cases.tsv"))
        .into_iter()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').nth(1).map(str::to_owned))
        .take(120)
        .collect();
    let fe = FrontEnd::load(root.join("../.cache/hibari"), None).map_err(|e| e.to_string())?;
    report("en", english.len(), best(rounds, &english, |s| drop(fe.sentences(s))));
    let espeak = Espeak::new();
    for (file, language) in [("es", "es"), ("fr", "fr-fr"), ("hi", "hi"), ("it", "it"), ("pt-br", "pt-br")] {
        let sentences = lines(tests.join(format!("espeak/{file}.txt")));
        let seconds = best(rounds, &sentences, |s| drop(espeak.sentences(language, s).expect("espeak-ng")));
        report(language, sentences.len(), seconds);
    }
    let mandarin = Mandarin::new()?;
    let sentences = lines(tests.join("mandarin/sentences.txt"));
    report("zh", sentences.len(), best(rounds, &sentences, |s| drop(mandarin.sentences(s))));
    Ok(())
}
