//! Real-time factor of the native hibari voice: `cargo run --release -p speechstream-engine-libtorch
//! --example rtf [threads]` (needs scripts/setup-voice.sh). Uses the sentences of the fixtures.
use std::time::Instant;

use speechstream_engine_libtorch::{chunk_ranges, load_cuda, Hibari, NoiseSource};
use tch::Device;

fn main() {
    let threads: i32 = std::env::args().nth(1).map_or(1, |s| s.parse().expect("threads"));
    let cuda = load_cuda();
    tch::set_num_threads(threads);
    let device = if cuda && tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let assets = std::env::var_os("SPEECHSTREAM_CACHE").map_or(root.join("../.cache"), Into::into).join("hibari");
    let t = Instant::now();
    let h = Hibari::load(&assets, device).expect("run scripts/setup-voice.sh");
    println!("loaded in {:.2} s on {device:?}, {threads} thread(s)", t.elapsed().as_secs_f64());
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("fixtures/hibari/manifest.json")).unwrap()).unwrap();
    let (mut audio_s, mut wall_s) = (0.0, 0.0);
    for name in ["hello", "fox", "weather", "long1", "long2_slow", "paragraph"] {
        let case = m["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap();
        let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let speed = case["speed"].as_f64().unwrap() as f32;
        let noise = NoiseSource::new(1, 0);
        let _ = h.synthesize(&h.prosody(&ids, speed), &noise); // warm-up
        let t = Instant::now();
        let p = h.prosody(&ids, speed);
        let t_pro = t.elapsed().as_secs_f64();
        let mut first = None;
        let mut n = 0;
        for r in chunk_ranges(p.frames, 16, 80) {
            n += h.synthesize_chunk(&p, r.start, r.end, &noise).size()[0];
            first.get_or_insert(t.elapsed().as_secs_f64());
        }
        let wall = t.elapsed().as_secs_f64();
        let secs = n as f64 / 24000.0;
        let t = Instant::now();
        let _ = h.synthesize(&h.prosody(&ids, speed), &noise);
        let whole = t.elapsed().as_secs_f64();
        audio_s += secs;
        wall_s += wall;
        println!(
            "{name:>11}: L {:>3}, {secs:5.2} s audio in {:6.1} ms (prosody {:5.1} ms, first 16-frame chunk at {:5.1} ms): {:5.1}x realtime; unchunked {:5.1}x",
            ids.len(),
            wall * 1e3,
            t_pro * 1e3,
            first.unwrap() * 1e3,
            secs / wall,
            secs / whole
        );
    }
    println!(
        "total: {audio_s:.2} s audio in {wall_s:.2} s: {:.1}x realtime (RTF {:.4})",
        audio_s / wall_s,
        wall_s / audio_s
    );
}
