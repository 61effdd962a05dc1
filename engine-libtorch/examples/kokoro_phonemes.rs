//! The phonemes our front end gives a text as a Kokoro voice reads it (American English: what
//! the packaged Japanese voices read English with), one line per pass of the network, cut as the
//! engine cuts an utterance (its first sentence split early: `family::split_first`):
//! what benches/kokoro-say-bench.sh hands onnxruntime, so both sides make the same passes.
//!
//!     cargo run -p speechstream-engine-libtorch --example kokoro_phonemes -- "Some text."

use std::path::PathBuf;

use speechstream_engine_libtorch::family::{split_first, FIRST_SEGMENT_WORDS};
use speechstream_engine_libtorch::load_front_end;

fn main() -> Result<(), String> {
    let text = std::env::args().nth(1).ok_or("usage: kokoro_phonemes TEXT")?;
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"), PathBuf::from);
    let front_end = load_front_end(&cache.join("hibari"), tch::Device::Cpu, false).map_err(|e| e.to_string())?;
    for (i, sentence) in front_end.sentences(&text).into_iter().enumerate() {
        let segments = if i == 0 { split_first(sentence, FIRST_SEGMENT_WORDS) } else { vec![sentence] };
        for segment in segments {
            println!("{}", segment.phonemes);
        }
    }
    Ok(())
}
