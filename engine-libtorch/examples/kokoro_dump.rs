//! Runs Kokoro natively on a fixture's inputs and writes the named intermediate values, to compare
//! them with onnxruntime's (engine-libtorch/fixtures/kokoro/compare.py does both).
//!
//!   cargo run -p speechstream-engine-libtorch --example kokoro_dump -- MODEL CASE.json int8|fp32 NAMES.txt OUTDIR [REPLACE_DIR]

use std::io::Write;
use std::path::Path;

use speechstream_engine_libtorch::{KokoroProbe, Precision};
use tch::{Device, Kind};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 && args.len() != 7 {
        eprintln!("usage: kokoro_dump MODEL CASE.json int8|fp32 NAMES.txt OUTDIR [REPLACE_DIR]");
        std::process::exit(2);
    }
    let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&args[2]).unwrap()).unwrap();
    let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let style: Vec<f32> = case["style"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let speed = case["speed"].as_f64().unwrap() as f32;
    let precision: Precision = args[3].parse().unwrap();
    let names_text = std::fs::read_to_string(&args[4]).unwrap();
    let names: Vec<&str> = names_text.lines().filter(|l| !l.is_empty()).collect();
    tch::set_num_threads(1);
    let t0 = std::time::Instant::now();
    let probe = KokoroProbe::load(Path::new(&args[1]), Device::Cpu, precision, &names).unwrap();
    eprintln!("load {:.2}s", t0.elapsed().as_secs_f64());
    let t0 = std::time::Instant::now();
    // REPLACE_DIR: meta.txt lines `name<TAB>f32|i64|u8<TAB>d0,d1,..` and N.bin (little-endian)
    let mut replace: Vec<(String, tch::Tensor)> = Vec::new();
    if let Some(dir) = args.get(6) {
        let dir = Path::new(dir);
        for (i, line) in std::fs::read_to_string(dir.join("meta.txt")).unwrap().lines().enumerate() {
            let f: Vec<&str> = line.split('\t').collect();
            let dims: Vec<i64> = f[2].split(',').filter(|s| !s.is_empty()).map(|d| d.parse().unwrap()).collect();
            let kind = match f[1] {
                "f32" => Kind::Float,
                "i64" => Kind::Int64,
                "u8" => Kind::Uint8,
                k => panic!("kind {k}"),
            };
            let bytes = std::fs::read(dir.join(format!("{i}.bin"))).unwrap();
            replace.push((f[0].to_string(), tch::Tensor::from_data_size(&bytes, &dims, kind)));
        }
    }
    let replace: Vec<(&str, tch::Tensor)> = replace.iter().map(|(n, t)| (n.as_str(), t.shallow_clone())).collect();
    let (out, vals) = probe.infer(&ids, &style, speed, &replace).unwrap();
    eprintln!("infer {:.2}s, {} samples, durations {:?}", t0.elapsed().as_secs_f64(), out.audio.len(), out.durations);
    let dir = Path::new(&args[5]);
    std::fs::create_dir_all(dir).unwrap();
    let mut meta = std::fs::File::create(dir.join("meta.txt")).unwrap();
    for (i, (name, v)) in names.iter().zip(&vals).enumerate() {
        let v = v.to_kind(Kind::Float).contiguous();
        let data = Vec::<f32>::try_from(v.flatten(0, -1)).unwrap();
        let bytes: Vec<u8> = data.iter().flat_map(|f| f.to_le_bytes()).collect();
        std::fs::write(dir.join(format!("{i}.f32")), bytes).unwrap();
        writeln!(meta, "{name}\t{:?}", v.size()).unwrap();
    }
    let bytes: Vec<u8> = out.audio.iter().flat_map(|f| f.to_le_bytes()).collect();
    std::fs::write(dir.join("audio.f32"), bytes).unwrap();
}
