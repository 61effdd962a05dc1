//! Where `say` with a Kokoro voice spends its time, in-process: loading the network (wall and CPU
//! time), then the passes the engine makes for a text (its first sentence split early, then one a
//! sentence), `ROUNDS` times (default 3) in a row, each pass timed alone. The first round is what
//! a fresh process pays (no warm-up), the later ones the steady state.
//!
//!     taskset -c 0 cargo run --release -p speechstream-engine-libtorch --example kokoro_passes -- [TEXT]
//!
//! `VOICE` (default jf_alpha), `ROUNDS`, `WARM=1` (one warm-up pass first, as the engine's
//! workers make).

use std::path::PathBuf;
use std::time::Instant;

use speechstream_engine_libtorch::family::{split_first, FIRST_SEGMENT_WORDS};
use speechstream_engine_libtorch::kokoro::serve::Vocab;
use speechstream_engine_libtorch::kokoro::voices::scan;
use speechstream_engine_libtorch::kokoro::KokoroModel;
use speechstream_engine_libtorch::load_front_end;
use tch::Device;

fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() -> Result<(), String> {
    let text = std::env::args().nth(1).unwrap_or_else(|| {
        "The library closes early on Sundays, so we went on Saturday instead. My brother bought a red bicycle \
         there, and rode it home in the rain."
            .to_owned()
    });
    let voice = std::env::var("VOICE").unwrap_or_else(|_| "jf_alpha".to_owned());
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"), PathBuf::from);
    tch::set_num_threads(1);
    speechstream_engine_libtorch::keep_freed_memory();
    let front_end = load_front_end(&cache.join("hibari"), Device::Cpu, false).map_err(|e| e.to_string())?;
    let mut segments = Vec::new();
    for (i, sentence) in front_end.sentences(&text).into_iter().enumerate() {
        segments.extend(if i == 0 { split_first(sentence, FIRST_SEGMENT_WORDS) } else { vec![sentence] });
    }
    let dir = cache.join("kokoro");
    let files = scan(&dir);
    let pack = &files.voices.iter().find(|v| v.name == voice).ok_or(format!("no voice {voice}"))?.pack;
    let vocab = Vocab::read(&dir.join("vocab.json"))?;
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let precision = KokoroModel::auto_precision(Device::Cpu);
    let model = KokoroModel::load(files.model(false).ok_or("no model")?, Device::Cpu, precision)?;
    println!("load ({precision}): {:.3} s wall, {:.3} s cpu", wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    if std::env::var("WARM").is_ok_and(|w| w == "1") {
        let ids = vocab.ids("hˈɛlO ðˈɛɹ.");
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        model.infer(&ids, pack.style(ids.len()), 1.0)?;
        println!("warm-up: {:.3} s wall, {:.3} s cpu", wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    }
    for round in 0..rounds {
        let (mut total_wall, mut total_cpu, mut total_audio) = (0.0, 0.0, 0.0);
        for segment in &segments {
            let ids = vocab.ids(&segment.phonemes);
            let (wall, cpu) = (Instant::now(), cpu_seconds());
            let out = model.infer(&ids, pack.style(ids.len()), 1.0)?;
            let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
            let audio = out.audio.len() as f64 / 24_000.0;
            println!(
                "round {round}: {:>3} ids, {audio:.2} s of audio in {wall:.3} s wall, {cpu:.3} s cpu (RTF {:.3})",
                ids.len(),
                wall / audio
            );
            (total_wall, total_cpu, total_audio) = (total_wall + wall, total_cpu + cpu, total_audio + audio);
        }
        println!(
            "round {round}: {total_audio:.2} s of audio in {total_wall:.3} s wall, {total_cpu:.3} s cpu (RTF {:.3})",
            total_wall / total_audio
        );
    }
    Ok(())
}
