//! The phonemes the Mandarin front end gives each line of stdin, one line each (misaki's
//! `ZHG2P()(line)`, what tests/mandarin.rs holds against scripts/mandarin-expected.py's output).
//! Its cost per sentence, beside the other front ends': `--example front_end_cost`.
//!
//!     echo "我们银行的行长还没有还钱。" | cargo run -p speechstream-text --example mandarin_phonemes

use std::io::Read;

use speechstream_text::mandarin::Mandarin;

fn main() -> Result<(), String> {
    let mandarin = Mandarin::new()?;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| e.to_string())?;
    for line in input.lines() {
        println!("{}", mandarin.phonemize(line));
    }
    Ok(())
}
