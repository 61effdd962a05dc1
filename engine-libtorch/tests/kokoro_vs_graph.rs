//! TEMPORARY: the hand-written network against the graph executor.
mod common;

use speechstream_engine_libtorch::{KokoroModel, KokoroProbe, Precision};
use tch::{Device, Kind, Tensor};

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}
fn to_vec(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
}
fn rel(a: &[f32], b: &[f32]) -> f32 {
    let e: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let r: f32 = b.iter().map(|y| y * y).sum();
    (e / r).sqrt()
}
fn maxabs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn compare(p: Precision) {
    let model = common::cached("kokoro/kokoro-v1.0.int8.onnx", "scripts/setup-voice.sh kokoro");
    let names = ["/encoder/Div_output_0", "/encoder/F0_proj/Conv_output_0", "/encoder/N_proj/Conv_output_0", "audio", "/encoder/Clip_output_0"];
    let probe = KokoroProbe::load(&model, Device::Cpu, p, &names).unwrap();
    let m = KokoroModel::load(&model, Device::Cpu, p).unwrap();
    for name in ["hello", "weather"] {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/kokoro");
        let case: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
        let ids: Vec<i64> = case["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let style = floats(&case["style"]);
        let speed = case["speed"].as_f64().unwrap() as f32;
        let g = probe.infer(&ids, &style, speed, &names, &[]).unwrap();
        let t0 = std::time::Instant::now();
        let (out, tr) = m.infer_traced(&ids, &style, speed, None).unwrap();
        eprintln!("native {:.2}s", t0.elapsed().as_secs_f64());
        let gd: Vec<i64> = Vec::<i64>::try_from(g[4].to_kind(Kind::Int64).flatten(0, -1)).unwrap();
        eprintln!("{p} {name}: durations graph {gd:?}\n native {:?}", out.durations);
        eprintln!("raw maxabs {}", maxabs(&tr.durations_raw, &to_vec(&g[0])));
        if gd == out.durations {
            eprintln!("F0 rel {} N rel {} audio rel {}", rel(&tr.f0, &to_vec(&g[1])), rel(&tr.n, &to_vec(&g[2])), rel(&out.audio, &to_vec(&g[3])));
        }
    }
}

#[test]
fn fp32() { compare(Precision::Fp32); }
#[test]
fn int8() { compare(Precision::Int8); }
