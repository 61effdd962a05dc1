use std::path::Path;
use std::time::Instant;
use speechstream_engine_libtorch::{KokoroModel, KokoroProbe, Precision};
use tch::Device;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let style: Vec<f32> = case["style"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let speed = case["speed"].as_f64().unwrap() as f32;
    let reps: usize = args[3].parse().unwrap();
    tch::set_num_threads(1);
    speechstream_engine_libtorch::keep_freed_memory();
    for p in ["int8", "fp32"] {
        let precision: Precision = p.parse().unwrap();
        let g = KokoroProbe::load(Path::new(&args[1]), Device::Cpu, precision, &[]).unwrap();
        let m = KokoroModel::load(Path::new(&args[1]), Device::Cpu, precision).unwrap();
        let (mut bg, mut bn) = (f64::MAX, f64::MAX);
        let mut secs = 0.0;
        for _ in 0..reps {
            let t = Instant::now();
            g.infer(&ids, &style, speed, &["audio"], &[]).unwrap();
            bg = bg.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let out = m.infer(&ids, &style, speed).unwrap();
            bn = bn.min(t.elapsed().as_secs_f64());
            secs = out.audio.len() as f64 / 24000.0;
        }
        println!("{p}: {secs:.2} s audio; graph executor best {bg:.3} s RTF {:.3}; hand-written best {bn:.3} s RTF {:.3}", bg / secs, bn / secs);
    }
}
