//! `.pt` files (PyTorch's `torch.save`, read by src/kokoro/torchfile.rs without Python) on real
//! data:
//!
//! * a real torch.save file off PyPI (distillmos 0.9.1's `distill_mos_v7.pt`, a checkpoint dict
//!   holding a 4.2 M-parameter state dict; scripts/setup-voice.sh fixtures puts it in
//!   `.cache/fixtures`): every tensor parses, and its names, types, shapes, first and last
//!   elements and the sum of its elements (in order, in f64: exact) are those an independent
//!   reader finds (tests/torchfile/read_pt.py: Python's own zipfile and pickle, no torch);
//! * Kokoro's packaged Japanese voices written as `.pt` voices as hexgrad's `kokoro` package and
//!   Kokoro-FastAPI keep them (tests/torchfile/save_voices.py, which writes torch.save's layout
//!   with the stdlib's pickle, as torch/serialization.py does): the directory scan lists them with
//!   their language and the same tables as the npz's, bad files are left out with the reason; and
//!   the engine, given a directory holding both, speaks (and mixes) a `.pt` voice with the very
//!   bits of its npz twin;
//! * a voice file corrupted byte by byte is an error or a table, never a panic.
//!
//! Needs python3 (stdlib only; `PYTHON` to choose another) and scripts/setup.sh's `.cache`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::Sink;
use speechstream_core::engine::{Engine, EngineEventKind, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::kokoro::torchfile::{self, DType};
use speechstream_engine_libtorch::kokoro::voices::{read_npy, read_npz, read_pt, scan, VoicePack};
use speechstream_engine_libtorch::{AdmissionMode, EngineOptions, TorchEngine};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torchfile").join(name)
}

fn python(args: &[&Path]) -> String {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = Command::new(&python).args(args).output().unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(out.status.success(), "{python} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A new empty temporary folder.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("speechstream-torchfile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("voices")).unwrap();
    dir
}

fn packaged() -> PathBuf {
    common::cached("kokoro/voices_ja.npz", "scripts/setup-voice.sh kokoro");
    common::cache().join("kokoro")
}

/// `save_voices.py`: the packaged voices written as .pt files into `dir` (specs: its doc).
fn save_voices(dir: &Path, specs: &[&str]) {
    let (script, npz) = (script("save_voices.py"), packaged().join("voices_ja.npz"));
    let mut args: Vec<&Path> = vec![&script, &npz, dir];
    args.extend(specs.iter().map(Path::new));
    python(&args);
}

/// The packaged voice `name`'s table, out of the npz.
fn npz_voice(name: &str) -> VoicePack {
    let entries = read_npz(&packaged().join("voices_ja.npz")).unwrap();
    let (_, bytes) = entries.iter().find(|(n, _)| n == &format!("{name}.npy")).unwrap();
    VoicePack::new(read_npy(bytes).unwrap()).unwrap()
}

#[test]
fn a_real_torch_save_file_reads_as_an_independent_reader_reads_it() {
    let path = common::cached("fixtures/distill_mos_v7.pt", "scripts/setup-voice.sh fixtures");
    let ours = torchfile::read(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reference: Vec<serde_json::Value> =
        python(&[&script("read_pt.py"), &path]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ours.len(), reference.len());
    assert_eq!(ours.len(), 120, "the state dict's tensors");
    let (mut floats, mut variances) = (0usize, 0);
    for ((name, tensor), r) in ours.iter().zip(&reference) {
        assert_eq!(name, r["name"].as_str().unwrap());
        let shape: Vec<usize> = r["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(tensor.shape, shape, "{name}");
        assert_eq!(tensor.bytes.len(), shape.iter().product::<usize>() * tensor.dtype.size(), "{name}");
        let list = |key: &str| r[key].as_array().unwrap().clone();
        match tensor.dtype {
            DType::F32 => {
                assert_eq!(r["dtype"], "f32", "{name}");
                let values = tensor.to_f32();
                // (as bits: read_pt.py writes them so)
                let as_json = |v: &[f32]| v.iter().map(|&x| serde_json::json!(x.to_bits())).collect::<Vec<_>>();
                assert_eq!(as_json(&values[..4.min(values.len())]), list("first"), "{name}");
                assert_eq!(as_json(&values[values.len().saturating_sub(4)..]), list("last"), "{name}");
                let sum = values.iter().fold(0f64, |s, &x| s + f64::from(x));
                assert_eq!(serde_json::json!(sum.to_bits()), r["sum"], "{name}: sum {sum}");
                assert!(values.iter().all(|x| x.is_finite()), "{name}");
                if name.ends_with(".running_var") {
                    assert!(values.iter().all(|&v| v > 0.0), "{name}: a variance ≤ 0");
                    variances += 1;
                }
                floats += values.len();
            }
            DType::I64 => {
                assert_eq!(r["dtype"], "i64", "{name}");
                assert!(name.ends_with("num_batches_tracked"), "{name}");
                let v = i64::from_le_bytes(tensor.bytes[..8].try_into().unwrap());
                assert_eq!(serde_json::json!(v), list("first")[0], "{name}");
                assert!(v > 0, "{name}: {v} batches");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    eprintln!("{floats} floats in {} tensors, {variances} BatchNorm variances", ours.len());
    assert!((4_100_000..4_400_000).contains(&floats), "{floats} floats: distillmos's model has about 4.2 M");
    assert!(variances >= 3, "{variances} running_var tensors");
    let conv = &ours.iter().find(|(n, _)| n == "model.cnn.cnn.0.weight").unwrap().1;
    assert_eq!(conv.shape, [64, 2, 3, 3]);
}

#[test]
fn pt_voices_are_scanned_as_npy_voices_are_and_bad_ones_left_out() {
    let dir = scratch("scan");
    save_voices(
        &dir,
        &[
            "jf_alpha:voices/jf_alpha.pt",
            "jm_kumo:jm_kumo.pt:archive:offset",
            "jf_nezumi:voices/jf_nezumi.pt:dict",
            "jf_tebukuro:jf_tebukuro.pt:half",
            "jf_gongitsune:wrong_shape.pt:shape",
            "jf_gongitsune:strided.pt:fortran",
        ],
    );
    let good = std::fs::read(dir.join("voices/jf_alpha.pt")).unwrap();
    std::fs::write(dir.join("truncated.pt"), &good[..good.len() / 2]).unwrap();
    // A legacy torch.save stream: pickle protocol 2, torch's magic number, ...
    std::fs::write(dir.join("legacy.pt"), b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02")
        .unwrap();
    std::fs::write(dir.join("kokoro-v1_0.pth"), &good).unwrap();
    let files = scan(&dir);
    let names: Vec<&str> = files.voices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["jf_alpha", "jf_nezumi", "jf_tebukuro", "jm_kumo"], "{:?}", files.skipped);
    assert!(files.voices.iter().all(|v| v.language == Some("ja") && v.pack.rows() == 510));
    for voice in &files.voices {
        let npz = npz_voice(&voice.name);
        if voice.name == "jf_tebukuro" {
            // Stored as f16: within half precision's rounding of the table.
            for i in 0..npz.rows() {
                for (a, b) in voice.pack.style(i).iter().zip(npz.style(i)) {
                    assert!((a - b).abs() <= b.abs() * 2f32.powi(-11) + 2f32.powi(-25), "row {i}: {a} vs {b}");
                }
            }
        } else {
            assert!(voice.pack == npz, "{}: not the npz's table", voice.name);
        }
    }
    let skipped = files.skipped.join("\n");
    eprintln!("{skipped}");
    assert_eq!(files.skipped.len(), 5, "{skipped}");
    let says = |file: &str, words: &[&str]| {
        let line = files.skipped.iter().find(|s| s.contains(file)).unwrap_or_else(|| panic!("{file}: {skipped}"));
        assert!(words.iter().all(|w| line.contains(w)), "{line}");
    };
    says("wrong_shape.pt", &["[510, 1, 256]", "[510, 2, 128]"]);
    says("strided.pt", &["not contiguous", "[510, 1, 256]", "[1, 510, 510]"]);
    says("truncated.pt", &["truncated"]);
    says("legacy.pt", &["legacy", "re-save"]);
    says("kokoro-v1_0.pth", &["not read", "kokoro-v1.0.int8.onnx"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every byte of a voice file's pickle (and its zip headers around it) changed, one at a time:
/// an error or a table, never a panic.
#[test]
fn a_corrupted_pickle_is_an_error_not_a_panic() {
    let dir = scratch("corrupt");
    save_voices(&dir, &["jf_alpha:jf_alpha.pt"]);
    let good = std::fs::read(dir.join("jf_alpha.pt")).unwrap();
    assert!(read_pt(&good).is_ok());
    let (mut errors, mut tables) = (0, 0);
    for at in 0..400 {
        for byte in [0x00, 0xff, good[at] ^ 0x01] {
            let mut bad = good.clone();
            bad[at] = byte;
            match std::panic::catch_unwind(|| read_pt(&bad)) {
                Ok(Ok(_)) => tables += 1,
                Ok(Err(_)) => errors += 1,
                Err(_) => panic!("byte {at} set to {byte:#04x}: a panic"),
            }
        }
    }
    eprintln!("{errors} errors, {tables} tables");
    assert!(errors > 300, "{errors} errors");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One utterance's audio (24 kHz s16 bytes).
fn speak(engine: &TorchEngine, id: u64, voice: &str) -> Vec<u8> {
    let (tx, rx) = mpsc::channel();
    let request = SynthesisRequest::new("Good morning.").with_model("kokoro").with_voice(voice);
    engine.submit(RequestId { connection: id, utterance: 0 }, request, Box::new(Sink(tx)));
    let mut pcm = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("engine event").kind {
            EngineEventKind::Audio { pcm: bytes, .. } => pcm.extend_from_slice(&bytes),
            EngineEventKind::Finished => return pcm,
            EngineEventKind::Failed(e) => panic!("{voice}: {e}"),
            _ => {}
        }
    }
}

#[test]
fn a_pt_voice_speaks_and_mixes_as_its_npz_twin() {
    let dir = scratch("engine");
    for entry in std::fs::read_dir(packaged()).unwrap() {
        let path = entry.unwrap().path();
        std::os::unix::fs::symlink(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    // Copies of two packaged voices under other names, beside the npz that holds the originals;
    // one named as a British voice (its language is its name's).
    save_voices(&dir, &["jf_alpha:voices/jf_copy.pt", "jm_kumo:bm_copy.pt:archive:offset"]);
    let mut options = EngineOptions::new(common::hibari_assets());
    options.kokoro.dir = Some(dir.clone());
    options.kokoro.required = true;
    options.admission = AdmissionMode::Off;
    options.threads = Some(1);
    let engine = TorchEngine::new(options).expect("engine");
    let voices = &engine.capabilities().voices;
    for (name, language) in [("jf_copy", "ja"), ("bm_copy", "en-GB")] {
        let voice = voices.iter().find(|v| v.id == name).unwrap_or_else(|| panic!("{name} not listed"));
        assert_eq!(voice.language.as_deref(), Some(language), "{name}");
    }
    let alpha = speak(&engine, 1, "jf_alpha");
    assert!(alpha.len() > 24_000, "{} bytes of audio", alpha.len());
    assert!(speak(&engine, 2, "jf_copy") == alpha, "the .pt voice's audio differs from the npz voice's");
    let mix = speak(&engine, 3, "jf_alpha(2)+jm_kumo");
    assert!(mix != alpha);
    // (a mix reads as its first voice does: American English here, both times)
    assert!(speak(&engine, 4, "jf_copy(2)+bm_copy") == mix, "the .pt voices' mix differs from the npz voices'");
    drop(engine);
    std::fs::remove_dir_all(&dir).unwrap();
}
