//! The voice-agent frameworks people build on, unchanged, against `speechstream serve` with the
//! hibari voice: Pipecat's `OpenAITTSService` and LiveKit Agents' `openai.TTS`, each with its own
//! defaults (OpenAI voice names, `gpt-4o-mini-tts`; LiveKit's mp3 over SSE) and with `tts-1`.
//! Their audio must be intelligible: PocketSphinx (.venv-asr) hears most of the words, in order.
//! The frameworks live in .venv-agents (scripts/setup-agents.sh, run by scripts/setup.sh).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[path = "asr/words.rs"]
#[allow(dead_code)]
mod asr_words;
use asr_words::{common_in_order, words};

const KEY: &str = "agents-test-key";
const TEXT: &str = "The quick brown fox jumps over the lazy dog. Then it runs into the forest.";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn venv_python(name: &str) -> PathBuf {
    let python = root().join(name).join("bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh", python.display());
    python
}

/// `speechstream serve` with the default voice on a port of its own choosing.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_speechstream"))
            // Behaviour, not capacity: no admission (it reads the machine's speed, and these run
            // beside other tests).
            .args(["serve", "--host", "127.0.0.1", "--port", "0", "--api-key", KEY, "--device", "cpu"])
            .args(["--admission", "off"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start speechstream");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("addr=").nth(1).and_then(|r| r.split_whitespace().next()) {
                    if line.contains("listening") {
                        let _ = tx.send(addr.to_owned());
                    }
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(120)).expect("server listening");
        Server { child, url: format!("http://{addr}") }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a client script (it writes its audio to a wav) and checks that the audio is understood.
fn client_is_understood(script: &str, args: &[&str]) {
    let server = Server::start();
    // The tests run side by side in one process: each its own file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let wav = std::env::temp_dir().join(format!("speechstream-agents-{}-{n}-{script}.wav", std::process::id()));
    let out = Command::new(venv_python(".venv-agents"))
        .arg(root().join("tests/clients").join(script))
        .args([server.url.as_str(), KEY])
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
