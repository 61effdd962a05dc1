//! The phonemes the Mandarin front end gives each line of stdin, one line each (misaki's
//! `ZHG2P()(line)`, what tests/mandarin.rs holds against scripts/mandarin-expected.py's output);
//! with `--bench`, its speed instead: the lines read as one paragraph, sentence by sentence,
//! repeatedly, in µs per input char.
//!
//!     echo "我们银行的行长还没有还钱。" | cargo run -p speechstream-text --example mandarin_phonemes
//!     cargo run --release -p speechstream-text --example mandarin_phonemes -- --bench < text

use std::io::Read;
use std::time::Instant;

use speechstream_text::mandarin::Mandarin;

fn main() -> Result<(), String> {
    let started = Instant::now();
    let mandarin = Mandarin::new()?;
    let load = started.elapsed();
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| e.to_string())?;
    if std::env::args().any(|a| a == "--bench") {
        let paragraph: String = input.lines().collect();
        let chars = paragraph.chars().count().max(1);
        let first = Instant::now();
        let _ = mandarin.sentences(&paragraph);
        let cold = first.elapsed();
        let reps = 50;
        let started = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(mandarin.sentences(&paragraph));
        }
        let per = started.elapsed().as_secs_f64() / reps as f64;
        println!(
            "load {:.1} ms; paragraph of {chars} chars: {:.2} µs/char ({:.2} ms; first pass {:.2} ms)",
            load.as_secs_f64() * 1e3,
            per * 1e6 / chars as f64,
            per * 1e3,
            cold.as_secs_f64() * 1e3
        );
        return Ok(());
    }
    for line in input.lines() {
        println!("{}", mandarin.phonemize(line));
    }
    Ok(())
}
