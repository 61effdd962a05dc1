//! The voice-agent frameworks people build on, unchanged, against `speechstream serve` with the
//! hibari voice: Pipecat's `OpenAITTSService` and LiveKit Agents' `openai.TTS`, each with its own
//! defaults (OpenAI voice names, `gpt-4o-mini-tts`; LiveKit's mp3 over SSE) and with `tts-1`.
//! Their audio must be intelligible: PocketSphinx (.venv-asr) hears most of the words, in order.
//! The frameworks live in .venv-agents (scripts/setup-agents.sh, run by scripts/setup.sh).

#[allow(dead_code)]
#[path = "deploy/process.rs"]
mod process;

use std::path::PathBuf;
use std::process::Command;

use process::{root, Server};

#[path = "asr/words.rs"]
#[allow(dead_code)]
mod asr_words;
use asr_words::{common_in_order, words};

const KEY: &str = "agents-test-key";
const TEXT: &str = "The quick brown fox jumps over the lazy dog. Then it runs into the forest.";

fn venv_python(name: &str) -> PathBuf {
    let python = root().join(name).join("bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh", python.display());
    python
}

/// Runs a client script (it writes its audio to a wav) and checks that the audio is understood.
fn client_is_understood(script: &str, args: &[&str]) {
    // Behaviour, not capacity: no admission (it reads the machine's speed, and these run beside
    // other tests).
    let server = Server::start_engine("hibari", &["--api-key", KEY, "--device", "cpu", "--admission", "off"]);
    let url = format!("http://{}", server.addr);
    // The tests run side by side in one process: each its own file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let wav = std::env::temp_dir().join(format!("speechstream-agents-{}-{n}-{script}.wav", std::process::id()));
    let out = Command::new(venv_python(".venv-agents"))
        .arg(root().join("tests/clients").join(script))
        .args([url.as_str(), KEY])
        .arg(&wav)
        .args(args)
        .output()
        .expect("run client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script} {args:?} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{script} {args:?}: {}", stdout.trim());
    let asr = Command::new(venv_python(".venv-asr")).arg(root().join("tests/asr/transcribe.py")).arg(&wav).output();
    let _ = std::fs::remove_file(&wav);
    let asr = asr.expect("run asr");
    assert!(asr.status.success(), "transcribe.py: {}", String::from_utf8_lossy(&asr.stderr));
    let heard = words(&String::from_utf8_lossy(&asr.stdout));
    let expected = words(TEXT);
    let matched = common_in_order(&expected, &heard);
    eprintln!("heard: {}", heard.join(" "));
    assert!(matched * 10 >= expected.len() * 7, "{script}: {matched} of {} words heard: {heard:?}", expected.len());
}

#[test]
fn pipecat_with_its_defaults() {
    // voice "alloy", model "gpt-4o-mini-tts", response_format pcm, no stream_format.
    client_is_understood("pipecat_tts.py", &[]);
}

#[test]
fn pipecat_with_tts_1_and_another_voice() {
    client_is_understood("pipecat_tts.py", &["nova", "tts-1"]);
}

#[test]
fn livekit_with_its_defaults() {
    // voice "ash", model "gpt-4o-mini-tts": mp3 over SSE.
    client_is_understood("livekit_tts.py", &[]);
}

#[test]
fn livekit_with_tts_1() {
    // tts-1: mp3 with stream_format "audio".
    client_is_understood("livekit_tts.py", &["tts-1"]);
}

#[test]
fn livekit_with_opus_and_flac() {
    client_is_understood("livekit_tts.py", &["tts-1-hd", "opus"]);
    client_is_understood("livekit_tts.py", &["gpt-4o-mini-tts", "flac"]);
}
