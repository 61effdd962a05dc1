//! The voice-agent frameworks people build on, unchanged, against `speechstream serve` with the
//! hibari voice: Pipecat's `OpenAITTSService` and LiveKit Agents' `openai.TTS`, each with its own
//! defaults (OpenAI voice names, `gpt-4o-mini-tts`; LiveKit's mp3 over SSE) and with `tts-1`.
//! Their audio must be intelligible: PocketSphinx (.venv-asr) hears most of the words, in order.
//! And Kokoro through each (issue 32): the packaged `jf_alpha` with `model="kokoro"` (the naming
//! Kokoro-FastAPI's users copy), from a server that loads .cache/kokoro, heard by Whisper base
//! (.venv-whisper: the voice's accent defeats PocketSphinx) and as long as Kokoro's own reply to
//! the same request (a hibari voice answering instead is not). The frameworks live in
//! .venv-agents (scripts/setup-agents.sh, run by scripts/setup.sh).

#[allow(dead_code)]
#[path = "deploy/process.rs"]
mod process;

use std::path::PathBuf;
use std::process::Command;

use process::{post_json, root, Server};

#[path = "asr/words.rs"]
#[allow(dead_code)]
mod asr_words;
use asr_words::{common_in_order, words};

const KEY: &str = "agents-test-key";
const TEXT: &str = "The quick brown fox jumps over the lazy dog. Then it runs into the forest.";

/// A temporary wav of its own for each client run (the tests run side by side in one process).
fn temp_wav(script: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("speechstream-agents-{}-{n}-{script}.wav", std::process::id()))
}

/// Runs a client script against `url`; it writes its audio to `wav`.
fn run_client(script: &str, url: &str, wav: &std::path::Path, args: &[&str]) {
    let out = Command::new(venv_python(".venv-agents"))
        .arg(root().join("tests/clients").join(script))
        .args([url, KEY])
        .arg(wav)
        .args(args)
        .output()
        .expect("run client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script} {args:?} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{script} {args:?}: {}", stdout.trim());
}

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
    let wav = temp_wav(script);
    run_client(script, &url, &wav, args);
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

/// Kokoro's `jf_alpha` with `model="kokoro"` through a framework (`args` after the script's
/// fixed ones): Whisper base hears it, and its length is that of Kokoro's own reply to the same
/// text (a hibari voice's reply, or an error, fails).
fn kokoro_is_understood(script: &str, args: &[&str]) {
    let kokoro =
        std::env::var_os("SPEECHSTREAM_CACHE").map_or_else(|| root().join(".cache"), PathBuf::from).join("kokoro");
    let dir = kokoro.to_str().expect("cache path");
    let server = Server::start_engine(
        "hibari",
        &["--kokoro-dir", dir, "--api-key", KEY, "--device", "cpu", "--admission", "off", "--workers", "1"],
    );
    let url = format!("http://{}", server.addr);
    let wav = temp_wav(script);
    run_client(script, &url, &wav, args);
    let samples = (std::fs::metadata(&wav).expect("wav").len().saturating_sub(44) / 2) as f64;
    // The same text straight from the server, each voice family (durations are the models').
    let direct = |body: serde_json::Value| {
        let (status, _, audio) = post_json(server.addr, &format!("/v1/audio/speech?api_key={KEY}"), &body);
        assert_eq!(status, 200, "{body}: {}", String::from_utf8_lossy(&audio));
        (audio.len() / 2) as f64
    };
    let own =
        direct(serde_json::json!({"input": TEXT, "model": "kokoro", "voice": "jf_alpha", "response_format": "pcm"}));
    let hibari = direct(serde_json::json!({"input": TEXT, "voice": "alloy", "response_format": "pcm"}));
    eprintln!("{script}: {samples} samples; Kokoro's own reply {own}, hibari's {hibari}");
    assert!(
        (samples - own).abs() <= 0.05 * own && (samples - own).abs() < (samples - hibari).abs(),
        "{script}: {samples} samples, not Kokoro's {own} (hibari's {hibari})"
    );
    let python = root().join(".venv-whisper/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh (or scripts/setup-whisper.sh)", python.display());
    let asr =
        Command::new(&python).arg(root().join("tests/asr/whisper.py")).args(["--language", "en"]).arg(&wav).output();
    let _ = std::fs::remove_file(&wav);
    let asr = asr.expect("run whisper");
    assert!(asr.status.success(), "whisper.py: {}", String::from_utf8_lossy(&asr.stderr));
    let heard = words(&String::from_utf8_lossy(&asr.stdout));
    let expected = words(TEXT);
    let matched = common_in_order(&expected, &heard);
    eprintln!("heard: {}", heard.join(" "));
    assert!(matched * 10 >= expected.len() * 7, "{script}: {matched} of {} words heard: {heard:?}", expected.len());
}

#[test]
fn pipecat_with_kokoro() {
    // Pipecat's OpenAITTSService refuses, before sending, any voice but OpenAI's 13 names: one of
    // them is an alias of the default voice, and `model="kokoro"` makes that Kokoro's (of the
    // packaged voices, `jf_alpha`: the length check below compares with `jf_alpha`'s own reply).
    kokoro_is_understood("pipecat_tts.py", &["alloy", "kokoro"]);
}

#[test]
fn livekit_with_kokoro() {
    // model "kokoro", voice "jf_alpha": mp3 over SSE.
    kokoro_is_understood("livekit_tts.py", &["kokoro", "mp3", "jf_alpha"]);
}
