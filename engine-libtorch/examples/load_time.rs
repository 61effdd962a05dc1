//! Where loading the voice goes: each piece of `TorchEngine::new` timed alone, wall and CPU time.
//!
//! ```sh
//! taskset -c 0 cargo run --release -p speechstream-engine-libtorch --example load_time          # the pieces
//! taskset -c 0 cargo run --release -p speechstream-engine-libtorch --example load_time engine   # the whole
//! ```

use std::path::Path;
use std::time::Instant;

use speechstream_engine_libtorch::g2p::assets::read_text;
use speechstream_engine_libtorch::g2p::lexicon::Dict;
use speechstream_engine_libtorch::g2p::tagger::Tagger;
use speechstream_engine_libtorch::load_front_end;
use speechstream_engine_libtorch::voices::{check_voice_file, read_voice_list};
use speechstream_engine_libtorch::{EngineOptions, Hibari, NoiseSource, Precision, TorchEngine};
use tch::Device;

fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let v = f();
    let cpu = (cpu_seconds() - cpu) * 1e3;
    eprintln!("{:>7.1} ms wall {cpu:>7.1} ms cpu  {what}", wall.elapsed().as_secs_f64() * 1e3);
    v
}

fn main() {
    let dir = Path::new(".cache/hibari");
    // as TorchEngine::new does first
    speechstream_engine_libtorch::keep_freed_memory();
    tch::set_num_threads(1);
    if std::env::args().nth(1).as_deref() == Some("engine") {
        let mut options = EngineOptions::new(dir);
        options.threads = Some(1);
        let engine = timed("TorchEngine::new", || TorchEngine::new(options).unwrap());
        timed("dropping it", || drop(engine));
        return;
    }
    let text = timed("gunzip tagger.json.gz", || read_text(&dir.join("tagger.json.gz")).unwrap());
    let tagger = timed("Tagger::from_json", || Tagger::from_json(&text).unwrap());
    timed("dropping the tagger", || drop(tagger));
    for lexicon in ["gold", "silver"] {
        let path = dir.join(format!("lexicon_us_{lexicon}.json.gz"));
        let text = timed(&format!("gunzip the {lexicon} lexicon"), || read_text(&path).unwrap());
        let dict = timed(&format!("Dict::from_json {lexicon}"), || Dict::from_json(&text).unwrap());
        timed(&format!("dropping the {lexicon} lexicon"), || drop(dict));
    }
    let front_end = timed("load_front_end (all of it)", || load_front_end(dir, Device::Cpu, false).unwrap());
    let voices = read_voice_list(dir).unwrap();
    let heart = voices.iter().find(|v| v.name == "heart").unwrap();
    timed("check_voice_file heart (sha256)", || check_voice_file(dir, heart).unwrap());
    let model = timed("Hibari::load", || Hibari::load(dir, Device::Cpu).unwrap());
    let model = timed("with_precision(Int8)", || model.with_precision(Precision::Int8).unwrap());
    timed("the scheduler's warm-up", || {
        let p = model.prosody(&model.ids("həlˈO."), 1.0);
        let end = p.frames.min(16);
        let _ = model.synthesize_chunk(&p, 0, end, &NoiseSource::new(0, 0));
        if end < p.frames {
            let _ = model.synthesize_chunk(&p, end, p.frames, &NoiseSource::new(0, 0));
        }
        let _ = front_end.sentences("Hello there.");
    });
    timed("dropping the front end", || drop(front_end));
    timed("dropping the model", || drop(model));
}
