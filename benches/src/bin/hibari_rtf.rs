//! In-process timings of our native hibari voice (tch), the counterpart of `benches/hibari_ref.py`
//! for hibari's Python package, for `benches/hibari-bench.sh`.
//!
//!   cargo build --release -p speechstream-benches --features hibari --bin hibari-rtf
//!   target/release/hibari-rtf --threads 1 --repeat 5 benches/texts/*.txt
//!
//! Needs `scripts/setup-voice.sh` (the assets in `<repo>/.cache/hibari`, or `$SPEECHSTREAM_CACHE/hibari`).
//! For each text file: one warm-up, then `--repeat` timed runs of the whole chain from text: the Rust
//! front end (sentence split, G2P), then per sentence the prosody pass and the decoder + DSP.
//! Two ways per run:
//! - `streamed`: each sentence in frame chunks the way the server streams an utterance: the first
//!   sentence in `--first-frames`, `--chunk-frames`, then `--max-chunk-frames`; each later one
//!   from `--chunk-frames` (the client already has audio to play by then); time to first audio =
//!   to the first chunk of the first sentence.
//! - `whole`: each sentence decoded at once (`Hibari::synthesize`), as the Python package does.
//!
//! Per run also the process CPU time (user + system, all threads) over the same span.
//! One JSON object per text and way on stdout (medians over the runs), schema shared with
//! hibari_ref.py; a summary on stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use speechstream_engine_libtorch::{
    keep_freed_memory, load_front_end, sentence_ranges, Hibari, NoiseSource, Precision,
};
use tch::Device;

#[derive(Parser)]
#[command(name = "hibari-rtf", about = "Real-time factor and first-audio time of the native hibari voice")]
struct Args {
    /// Text files, one text each.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// libtorch intra-op threads (`tch::set_num_threads`); inter-op threads are set to the same.
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// Timed runs per text (medians are reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 1.0)]
    speed: f32,
    /// Frames (12.5 ms) in the first streamed chunk of the text's first sentence (as the server:
    /// `EngineOptions::first_chunk_frames`).
    #[arg(long, default_value_t = 16)]
    first_frames: usize,
    /// Frames in the second streamed chunk, and in the first of each later sentence.
    #[arg(long, default_value_t = 80)]
    chunk_frames: usize,
    /// Frames in each later streamed chunk (as the server: `EngineOptions::max_chunk_frames`).
    #[arg(long, default_value_t = 200)]
    max_chunk_frames: usize,
    #[arg(long, default_value = "ours")]
    label: String,
    /// Arithmetic of the Linear layers: int8 (the default on the CPU, as `speechstream serve` /
    /// `say`) or fp32 (exact).
    #[arg(long, default_value = "int8")]
    precision: Precision,
    /// hibari assets directory (default: `$SPEECHSTREAM_CACHE/hibari` or `<repo>/.cache/hibari`).
    #[arg(long)]
    assets: Option<PathBuf>,
}

struct Run {
    first: f64,
    total: f64,
    cpu: f64,
    samples: usize,
    sentences: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// User + system CPU seconds of this process so far (all threads).
fn cpu_s() -> f64 {
    // SAFETY: getrusage writes into the struct we pass.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn max_rss_kib() -> i64 {
    // SAFETY: getrusage writes into the struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_maxrss
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let assets = a.assets.clone().unwrap_or_else(|| {
        std::env::var_os("SPEECHSTREAM_CACHE")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"), PathBuf::from)
            .join("hibari")
    });
    keep_freed_memory(); // as the server does (TorchEngine::new)
    tch::set_num_threads(a.threads);
    tch::set_num_interop_threads(a.threads);
    let t = Instant::now();
    let precision = a.precision;
    let model = Hibari::load(&assets, Device::Cpu).and_then(|h| h.with_precision(precision));
    let (fe, h) = match (load_front_end(&assets, Device::Cpu, false), model) {
        (Ok(fe), Ok(h)) => (fe, h),
        (Err(e), _) => {
            eprintln!("hibari-rtf: front end from {}: {e} (run scripts/setup-voice.sh)", assets.display());
            return ExitCode::FAILURE;
        }
        (_, Err(e)) => {
            eprintln!("hibari-rtf: voice from {}: {e} (run scripts/setup-voice.sh)", assets.display());
            return ExitCode::FAILURE;
        }
    };
    fe.sentences("Load the G2P.");
    let load_s = t.elapsed().as_secs_f64();
    eprintln!("[{}] loaded in {load_s:.2} s, {} libtorch thread(s), {precision}", a.label, a.threads);

    let once = |text: &str, streamed: bool| -> Run {
        let c = cpu_s();
        let t = Instant::now();
        let sentences = fe.sentences(text);
        let mut first = None;
        let mut samples = 0usize;
        for (i, s) in sentences.iter().enumerate() {
            let ids = h.ids(&s.phonemes);
            let noise = NoiseSource::new(a.seed, i as u64);
            let p = h.prosody(&ids, a.speed);
            if streamed {
                for r in sentence_ranges(p.frames, i as u64, a.first_frames, a.chunk_frames, a.max_chunk_frames) {
                    samples += h.synthesize_chunk(&p, r.start, r.end, &noise).size()[0] as usize;
                    first.get_or_insert_with(|| t.elapsed().as_secs_f64());
                }
            } else {
                samples += h.synthesize(&p, &noise).len();
                first.get_or_insert_with(|| t.elapsed().as_secs_f64());
            }
        }
        let total = t.elapsed().as_secs_f64();
        Run { first: first.unwrap_or(0.0), total, cpu: cpu_s() - c, samples, sentences: sentences.len() }
    };

    for path in &a.files {
        let text = match std::fs::read_to_string(path) {
            Ok(s) => s.trim().to_string(),
            Err(e) => {
                eprintln!("hibari-rtf: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let name = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for streamed in [true, false] {
            once(&text, streamed); // warm-up
            let (mut firsts, mut totals, mut g2ps, mut cpus) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut samples, mut sentences) = (0, 0);
            for _ in 0..a.repeat.max(1) {
                let t = Instant::now();
                fe.sentences(&text);
                g2ps.push(t.elapsed().as_secs_f64());
                let r = once(&text, streamed);
                firsts.push(r.first);
                totals.push(r.total);
                cpus.push(r.cpu);
                (samples, sentences) = (r.samples, r.sentences);
            }
            let min = totals.iter().copied().fold(f64::INFINITY, f64::min);
            let total = median(&mut totals);
            let audio_s = samples as f64 / 24000.0;
            let way = if streamed { "streamed" } else { "whole" };
            let line = json!({
                "kind": "rtf",
                "label": a.label,
                "impl": format!("speechstream native tch ({way}{})",
                    if streamed { format!(", chunks {}+{} frames", a.first_frames, a.chunk_frames) } else { String::new() }),
                "way": way,
                "text": name,
                "threads": a.threads,
                "repeat": a.repeat,
                "sentences": sentences,
                "audio_s": (audio_s * 1e4).round() / 1e4,
                "total_ms": (total * 1e6).round() / 1e3,
                "total_ms_min": (min * 1e6).round() / 1e3,
                "first_audio_ms": (median(&mut firsts) * 1e6).round() / 1e3,
                "g2p_ms": (median(&mut g2ps) * 1e6).round() / 1e3,
                "cpu_ms": (median(&mut cpus) * 1e6).round() / 1e3,
                "rtf": (total / audio_s * 1e5).round() / 1e5,
                "x_realtime": (audio_s / total * 100.0).round() / 100.0,
                "load_s": (load_s * 1e3).round() / 1e3,
                "max_rss_kib": max_rss_kib(),
            });
            println!("{line}");
            eprintln!(
                "[{}] {name:>8} {way:>8}: {sentences:2} sentences, {audio_s:6.2} s audio in {:7.1} ms (G2P {:.1} ms, first audio {:.1} ms): {:.1}x realtime",
                a.label, line["total_ms"], line["g2p_ms"], line["first_audio_ms"], line["x_realtime"]
            );
        }
    }
    ExitCode::SUCCESS
}
