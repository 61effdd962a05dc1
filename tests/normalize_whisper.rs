//! The normaliser's readings through audio (issue 33): a sample of our test set
//! (text/tests/normalize/cases.tsv, one sentence from each kind of hard text) spoken by
//! `speechstream say` and transcribed by Whisper base (an independent recogniser, in .venv-whisper
//! from scripts/setup-whisper.sh). Whisper writes numbers, money and addresses in digits and
//! symbols; its transcript goes through the same normaliser to be compared in words. A sentence is
//! heard as expected when most of its expected spoken words come back in order. Needs
//! scripts/setup.sh (voice assets, ffmpeg, .venv-whisper).

use std::path::PathBuf;
use std::process::Command;

use speechstream_engine_libtorch::g2p::spoken::{verbalize, Pronunciations, TextOptions};

#[path = "asr/words.rs"]
#[allow(dead_code)]
mod words;

use words::{common_in_order, words};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The sample: written sentences of the test set (looked up there for their expected reading).
const SAMPLE: &[&str] = &[
    "It costs $3.50.",
    "They raised $3.5M in seed funding.",
    "The meeting is Jan 5.",
    "Mon, Jan 5 at 14:00.",
    "Call 1-800-555-0199 now.",
    "Write to john.doe@example.com with questions.",
    "Visit https://example.com/docs for details.",
    "Add 2 tbsp of oil.",
    "Mix in ½ cup of flour.",
    "It is 25°C outside.",
    "Bring fruit, e.g. apples.",
    "Henry VIII had six wives.",
    "Upgrade to v2.0 today.",
    "The server sent HTTP 404.",
];

fn canonical(text: &str) -> Vec<String> {
    let spoken = verbalize(text, &TextOptions::default(), &Pronunciations::new()).text;
    words(&spoken.replace('-', " "))
}

#[test]
fn a_sample_of_the_test_set_is_heard_as_expected() {
    let python = root().join(".venv-whisper/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh (or scripts/setup-whisper.sh)", python.display());
    let cases = std::fs::read_to_string(root().join("text/tests/normalize/cases.tsv")).expect("cases.tsv");
    let expected: Vec<String> = SAMPLE
        .iter()
        .map(|s| {
            let line = cases
                .lines()
                .find(|l| l.split('\t').nth(1) == Some(s))
                .unwrap_or_else(|| panic!("{s:?} not in cases.tsv"));
            line.split('\t').nth(2).unwrap_or_default().to_string()
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("speechstream-normalize-whisper-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut wavs = Vec::new();
    for (n, text) in SAMPLE.iter().enumerate() {
        let wav = dir.join(format!("{n}.wav"));
        let say = Command::new(env!("CARGO_BIN_EXE_speechstream"))
            .args(["say", text, "--seed", "1", "--device", "cpu", "-o"])
            .arg(&wav)
            .output()
            .expect("run speechstream say");
        assert!(say.status.success(), "say {text:?} failed: {}", String::from_utf8_lossy(&say.stderr));
        wavs.push(wav);
    }
    let asr = Command::new(&python)
        .arg(root().join("tests/asr/whisper.py"))
        .args(["--language", "en"])
        .args(&wavs)
        .output()
        .expect("run whisper");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(asr.status.success(), "whisper.py: {}", String::from_utf8_lossy(&asr.stderr));
    let heard: Vec<String> = String::from_utf8_lossy(&asr.stdout).lines().map(str::to_owned).collect();
    assert_eq!(heard.len(), SAMPLE.len(), "one transcript per file: {heard:?}");
    let mut ok = 0;
    for ((text, want), got) in SAMPLE.iter().zip(&expected).zip(&heard) {
        let (w, h) = (words(&want.replace('-', " ")), canonical(got));
        let matched = common_in_order(&w, &h);
        let pass = matched * 10 >= w.len() * 8;
        ok += usize::from(pass);
        eprintln!(
            "{} {text:?}\n    expected {want:?}\n    heard    {got:?} ({matched}/{} words)",
            if pass { "ok  " } else { "MISS" },
            w.len()
        );
    }
    eprintln!("heard as expected: {ok}/{}", SAMPLE.len());
    assert!(ok * 4 >= SAMPLE.len() * 3, "only {ok} of {} sentences heard as expected", SAMPLE.len());
}
