//! Does the default voice speak intelligible English? `speechstream say` writes a few everyday
//! sentences to a wav file, and PocketSphinx (an independent offline recogniser, in .venv-asr from
//! scripts/setup-asr.sh) transcribes it; most of the words must come back, in order. Needs
//! scripts/setup.sh (voice assets, ffmpeg, .venv-asr).

use std::path::PathBuf;
use std::process::Command;

#[path = "asr/words.rs"]
mod words;

use words::{common_in_order, words, TEXT};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_default_voice_is_understood_by_a_recogniser() {
    let python = root().join(".venv-asr/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh (or scripts/setup-asr.sh)", python.display());
    let wav = std::env::temp_dir().join(format!("speechstream-intelligibility-{}.wav", std::process::id()));
    let say = Command::new(env!("CARGO_BIN_EXE_speechstream"))
        .args(["say", TEXT, "--seed", "1", "--device", "cpu", "-o"])
        .arg(&wav)
        .output()
        .expect("run speechstream say");
    assert!(say.status.success(), "say failed: {}", String::from_utf8_lossy(&say.stderr));
    let asr = Command::new(&python).arg(root().join("tests/asr/transcribe.py")).arg(&wav).output().expect("run asr");
    let _ = std::fs::remove_file(&wav);
    assert!(asr.status.success(), "transcribe.py: {}", String::from_utf8_lossy(&asr.stderr));
    let heard = words(&String::from_utf8_lossy(&asr.stdout));
    let expected = words(TEXT);
    let matched = common_in_order(&expected, &heard);
    eprintln!("heard: {}", heard.join(" "));
    // Measured: 24 of 25 words here. A garbled voice gets few; 70% leaves room for the recogniser.
    assert!(matched * 10 >= expected.len() * 7, "{matched} of {} words recognised: {heard:?}", expected.len());
}

#[test]
fn in_order_matching() {
    let w = |s: &str| words(s);
    assert_eq!(common_in_order(&w("a b c d"), &w("a x c d")), 3);
    assert_eq!(common_in_order(&w("a b c"), &w("c b a")), 1);
}
