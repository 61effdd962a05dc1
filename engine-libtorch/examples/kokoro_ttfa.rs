//! Kokoro's time to first audio in the engine, on one worker with one libtorch thread: a
//! two-sentence utterance streamed `RUNS` times (default 5) with `VOICE` (default jf_alpha);
//! prints each run's time to first audio (and the first chunk's length: a first segment's
//! opening) and to the end, their medians, and, for comparison,
//! the time one pass over the whole first sentence takes (what the first audio would wait for
//! without the short first segment), both in the precision `--precision auto` gives Kokoro.
//! `TEXT` replaces the utterance (Japanese text is read by the Japanese front end, as the
//! engine reads it for a Japanese voice).
//!
//! `KOKORO_DIR` names another Kokoro directory (a user's, with `voices-v1.0.bin`): its voices of
//! other languages read in theirs (Spanish through espeak-ng's program, Mandarin, ...).
//!
//!     cargo run --release -p speechstream-engine-libtorch --example kokoro_ttfa
//!     TEXT="今日は良い天気ですね。明日は雨が降るそうです。" cargo run ... --example kokoro_ttfa
//!     KOKORO_DIR=/path/with/voices-v1.0.bin VOICE=ef_dora TEXT="Hola. ¿Qué tal?" cargo run ...

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use speechstream_core::engine::{Engine, EngineEvent, EngineEventKind, EventSink, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::g2p::espeak::Espeak;
use speechstream_engine_libtorch::g2p::japanese::{Japanese, WORD_LIST};
use speechstream_engine_libtorch::g2p::mandarin::Mandarin;
use speechstream_engine_libtorch::kokoro::serve::{read_as, ReadAs};
use speechstream_engine_libtorch::kokoro::voices::scan;
use speechstream_engine_libtorch::kokoro::KokoroModel;
use speechstream_engine_libtorch::{AdmissionMode, EngineOptions, Precision, TorchEngine};

const TEXT: &str = "The weather today is sunny with a light breeze from the west. \
                    Tomorrow it will rain in the morning, and clear up by the afternoon.";

struct Sink(mpsc::Sender<EngineEvent>);

impl EventSink for Sink {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = std::env::var_os("SPEECHSTREAM_CACHE").map_or_else(|| root.join(".cache"), PathBuf::from);
    let voice = std::env::var("VOICE").unwrap_or_else(|_| "jf_alpha".to_owned());
    let text = std::env::var("TEXT").unwrap_or_else(|_| TEXT.to_owned());
    let runs: usize = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let kokoro = std::env::var_os("KOKORO_DIR").map_or_else(|| cache.join("kokoro"), PathBuf::from);
    let mut options = EngineOptions::new(cache.join("hibari"));
    options.kokoro.dir = Some(kokoro.clone());
    options.kokoro.required = true;
    options.workers = Some(1);
    options.threads = Some(1);
    options.admission = AdmissionMode::Off;
    tch::set_num_threads(1);
    let engine = TorchEngine::new(options)?;
    // The whole first sentence in one pass, as the first audio would be without the split.
    let front_end = speechstream_engine_libtorch::load_front_end(&cache.join("hibari"), tch::Device::Cpu, false)
        .map_err(|e| e.to_string())?;
    let files = scan(&kokoro);
    let listed = files.voices.iter().find(|v| v.name == voice).ok_or("no such voice")?;
    let pack = &listed.pack;
    let precision = KokoroModel::auto_precision(tch::Device::Cpu);
    let model =
        KokoroModel::load(files.model(precision == Precision::Fp32).ok_or("no model")?, tch::Device::Cpu, precision)?;
    let sentences = match read_as(listed.language, None, &text)? {
        ReadAs::Japanese => Japanese::load(None, &cache.join("kokoro").join(WORD_LIST))?.sentences(&text),
        ReadAs::Mandarin => Mandarin::new()?.sentences(&text),
        ReadAs::Espeak(language) => Espeak::new().sentences(language, &text)?,
        ReadAs::American | ReadAs::British => front_end.sentences(&text),
    };
    let sentence = sentences.into_iter().next().ok_or("no sentence")?;
    let vocab = speechstream_engine_libtorch::kokoro::serve::Vocab::read(&cache.join("kokoro/vocab.json"))?;
    let ids = vocab.ids(&sentence.phonemes);
    let (mut firsts, mut totals, mut passes) = (Vec::new(), Vec::new(), Vec::new());
    let mut seconds = 0.0;
    for run in 0..runs {
        let (tx, rx) = mpsc::channel();
        let request = SynthesisRequest::new(text.clone()).with_voice(voice.clone()).with_stream(true);
        let started = Instant::now();
        engine.submit(RequestId { connection: 0, utterance: run as u64 }, request, Box::new(Sink(tx)));
        let (mut first, mut bytes, mut first_bytes) = (None, 0, 0);
        loop {
            match rx.recv().map_err(|_| "engine stopped")?.kind {
                EngineEventKind::Audio { pcm, .. } => {
                    if first.is_none() {
                        first = Some(started.elapsed());
                        first_bytes = pcm.len();
                    }
                    bytes += pcm.len();
                }
                EngineEventKind::Finished => break,
                EngineEventKind::Failed(f) => return Err(f.to_string()),
                _ => {}
            }
        }
        let total = started.elapsed();
        seconds = bytes as f64 / 2.0 / 24_000.0;
        let first = first.ok_or("no audio")?;
        println!(
            "run {run}: first audio {:.0} ms ({:.2} s of audio), all {:.0} ms ({seconds:.2} s of audio)",
            ms(first),
            first_bytes as f64 / 2.0 / 24_000.0,
            ms(total)
        );
        firsts.push(first);
        totals.push(total);
        // Right after, under the same load: one pass over the whole first sentence.
        let started = Instant::now();
        model.infer(&ids, pack.style(ids.len()), 1.0)?;
        passes.push(started.elapsed());
    }
    let (first, total) = (median(firsts), median(totals));
    println!(
        "median: first audio {:.0} ms, all {:.0} ms, real-time factor {:.2} ({seconds:.2} s of audio)",
        ms(first),
        ms(total),
        total.as_secs_f64() / seconds
    );
    println!("the whole first sentence in one pass: median {:.0} ms ({} ids)", ms(median(passes)), ids.len());
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
