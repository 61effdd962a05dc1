//! Issue 34, "the first ten minutes": what a new user's first client brings either works with
//! the default server (`speechstream serve`, hibari, as a child process) or fails helpfully.
//! Needs scripts/setup.sh (voice assets, ffmpeg, .venv-clients).

#[allow(dead_code)]
#[path = "deploy/process.rs"]
mod process;

use std::net::SocketAddr;
use std::process::Command;

use process::{client_python, get, root, Server};
use serde_json::{json, Value};

const STYLE: &str = "Speak in a cheerful and positive tone.";

/// Behaviour, not capacity: admission (which reads the machine's speed) would refuse a sentence
/// when the tests run side by side on a busy machine.
fn hibari(extra: &[&str]) -> Server {
    let mut args = vec!["--device", "cpu", "--admission", "off"];
    args.extend_from_slice(extra);
    Server::start_engine("hibari", &args)
}

/// README's quick start snippet of OpenAI's guide: its python block that passes `instructions=`.
fn readme_guide_snippet() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    readme
        .split("```python\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(code, _)| code.to_owned()))
        .find(|code| code.contains("instructions="))
        .expect("README's quick start has OpenAI's guide snippet (a python block with instructions=)")
}

/// [`process::post_json`] with the head in lowercase (header names are case-blind).
fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, String, Vec<u8>) {
    let (status, head, body) = process::post_json(addr, path, body);
    (status, head.to_lowercase(), body)
}

/// Seconds of audio in a file, decoded by ffmpeg.
fn decoded_seconds(path: &std::path::Path) -> f64 {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "s16le", "-ac", "1", "-ar", "24000", "-"])
        .output()
        .expect("ffmpeg (scripts/setup.sh installs it)");
    assert!(out.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout.len() as f64 / 48_000.0
}

/// One WebSocket utterance with `config`: its JSON frames and the bytes of audio, up to
/// `session.done` or the server's close.
fn websocket_utterance(addr: SocketAddr, config: Value, text: &str) -> (Vec<Value>, usize) {
    websocket_utterance_in_parts(addr, config, &[text])
}

/// The same with the text sent in `parts`, one `input.text` each.
fn websocket_utterance_in_parts(addr: SocketAddr, config: Value, parts: &[&str]) -> (Vec<Value>, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let reply = runtime.block_on(process::utterance(addr, config, parts));
    (reply.frames, reply.audio.len())
}

fn ignored_lines(server: &Server) -> usize {
    server.log().iter().filter(|line| line.contains("ignored=instructions")).count()
}

// Point 1: OpenAI's guide passes `instructions`, which hibari cannot follow. By default it is
// accepted and ignored, and every transport says so: the HTTP header, the batch item, a log line
// (the WebSocket's only channel: its clients compare frames exactly).
#[test]
fn openai_guide_with_instructions_is_spoken_and_the_prompt_reported_ignored() {
    let server = hibari(&[]);
    let dir = std::env::temp_dir().join(format!("speechstream-guide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("guide.py"), readme_guide_snippet()).expect("write the snippet");
    let run = Command::new(client_python())
        .arg(dir.join("guide.py"))
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .env("OPENAI_API_KEY", "anything")
        .output()
        .expect("run the snippet");
    assert!(
        run.status.success(),
        "OpenAI's guide snippet failed:\n{}\nserver log: {:?}",
        String::from_utf8_lossy(&run.stderr),
        server.log()
    );
    let seconds = decoded_seconds(&dir.join("speech.mp3"));
    let _ = std::fs::remove_dir_all(&dir);
    // "Today is a wonderful day to build something people love!": about three seconds.
    assert!((1.5..8.0).contains(&seconds), "speech.mp3 holds {seconds} s");
    assert_eq!(ignored_lines(&server), 1, "{:?}", server.log());

    let request = json!({"model": "gpt-4o-mini-tts", "voice": "coral", "input": "Hello there.",
                         "instructions": STYLE, "response_format": "wav"});
    let (status, head, body) = post(server.addr, "/v1/audio/speech", &request);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("\r\nx-ignored-fields: instructions"), "{head}");
    assert!(body.starts_with(b"RIFF") && body.len() > 24_000, "{} bytes", body.len());
    // Without instructions nothing is said.
    let plain = json!({"input": "Hello there.", "response_format": "pcm"});
    let (status, head, _) = post(server.addr, "/v1/audio/speech", &plain);
    assert_eq!(status, 200, "{head}");
    assert!(!head.contains("x-ignored-fields"), "{head}");

    let batch = json!({"instructions": STYLE, "items": [{"input": "One."}, {"input": "Two.", "instructions": " "}]});
    let (status, head, body) = post(server.addr, "/v1/audio/speech/batch", &batch);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("\r\nx-ignored-fields: instructions"), "{head}");
    let reply: Value = serde_json::from_slice(&body).expect("batch json");
    assert_eq!(reply["succeeded"], 2, "{reply}");
    assert_eq!(reply["results"][0]["ignored"], json!(["instructions"]), "{reply}");
    assert_eq!(reply["results"][1].get("ignored"), None, "blank instructions are none: {reply}");

    let config = json!({"type": "session.config", "voice": "heart", "instructions": STYLE,
                        "stream_audio": true, "response_format": "pcm"});
    let (frames, audio) = websocket_utterance(server.addr, config, "Hello over the socket.");
    let types: Vec<&str> = frames.iter().filter_map(|f| f["type"].as_str()).collect();
    assert_eq!(types, ["audio.start", "audio.done", "session.done"], "{frames:?}");
    assert!(audio > 24_000, "{audio} bytes of audio");
    // The guide, the POST, the batch's first item and the WebSocket utterance: one line each.
    assert_eq!(ignored_lines(&server), 4, "{:?}", server.log());
}

// Point 1's `--strict`: today's refusal back, on HTTP and the WebSocket.
#[test]
fn strict_refuses_instructions() {
    let server = hibari(&["--strict"]);
    let refusal = "instructions are not supported by hibari (it has no voice design or style prompts)";
    let (status, head, body) = post(server.addr, "/v1/audio/speech", &json!({"input": "Hi.", "instructions": STYLE}));
    assert_eq!(status, 400, "{head}");
    let error: Value = serde_json::from_slice(&body).expect("error json");
    assert_eq!(error["error"]["message"], refusal, "{error}");
    let config =
        json!({"type": "session.config", "instructions": STYLE, "stream_audio": true, "response_format": "pcm"});
    let (frames, audio) = websocket_utterance(server.addr, config, "Hi.");
    assert_eq!(audio, 0);
    let error = frames.iter().find(|f| f["type"] == "error").expect("an error frame");
    assert!(error["message"].as_str().is_some_and(|m| m.ends_with(refusal)), "{frames:?}");
    assert_eq!(ignored_lines(&server), 0);
}

// Point 3: vLLM-Omni's example clients' defaults (a Qwen3-TTS or CosyVoice model name, the
// speaker Vivian) work with one flag, on the WebSocket and HTTP.
#[test]
fn vllm_omni_client_defaults_work_under_the_switch() {
    let server = hibari(&["--vllm-omni-compat"]);
    // As vLLM-Omni's streaming client sends it (the `speaker` alias, CustomVoice, Auto).
    let config = json!({"type": "session.config", "model": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
                        "speaker": "Vivian", "task_type": "CustomVoice", "language": "Auto",
                        "stream_audio": true, "response_format": "pcm"});
    let (frames, audio) = websocket_utterance(server.addr, config, "Hello from the example client.");
    let types: Vec<&str> = frames.iter().filter_map(|f| f["type"].as_str()).collect();
    assert_eq!(types, ["audio.start", "audio.done", "session.done"], "{frames:?}");
    assert!(audio > 24_000, "{audio} bytes of audio");
    for model in ["Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"] {
        let request = json!({"model": model, "voice": "Ryan", "input": "Hi.", "response_format": "pcm"});
        let (status, head, body) = post(server.addr, "/v1/audio/speech", &request);
        assert_eq!(status, 200, "{model}: {head}");
        assert!(body.len() > 4_800, "{model}: {} bytes", body.len());
    }
    // Upstream's speech streaming metrics beside ours: the WebSocket stream completed (TTFP,
    // underrun, continuity); the two whole replies count only in the RTF.
    let (status, metrics) = get(server.addr, "/metrics", "");
    assert_eq!(status, 200);
    let labels = "model_name=\"hibari\",stage=\"0\",replica=\"0\"";
    for line in [
        format!("vllm_omni:audio_ttfp_s_count{{{labels}}} 1"),
        format!("vllm_omni:audio_rtf_count{{{labels}}} 3"),
        format!("vllm_omni:audio_underrun_s_count{{{labels}}} 1"),
        "vllm_omni:speech_stream_completed_total{model_name=\"hibari\"} 1".to_owned(),
        "vllm_omni:speech_stream_aborted_total{model_name=\"hibari\",reason=\"closed\"} 0".to_owned(),
    ] {
        assert!(metrics.lines().any(|l| l == line), "missing {line:?} in\n{metrics}");
    }
    assert!(metrics.lines().any(|l| l.starts_with("vllm_omni:audio_continuity_ok_total{")), "{metrics}");
}

// Point 3 without the switch: the openai SDK's dated model names are OpenAI's names (always);
// an unknown voice (Qwen3-TTS's `Vivian` without the switch) is refused as the protocol says
// (docs/protocol.md §c.3, as upstream and the reference do): a generation error after
// audio.start, with no audio.
#[test]
fn dated_model_names_work_and_unknown_voices_are_reported() {
    let server = hibari(&[]);
    let request = json!({"model": "gpt-4o-mini-tts-2025-12-15", "voice": "coral", "input": "Hi.",
                         "response_format": "pcm"});
    let (status, head, _) = post(server.addr, "/v1/audio/speech", &request);
    assert_eq!(status, 200, "{head}");
    let request = json!({"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "input": "Hi."});
    assert_eq!(post(server.addr, "/v1/audio/speech", &request).0, 404, "only under --vllm-omni-compat");
    let config = json!({"type": "session.config", "speaker": "Vivian", "stream_audio": true, "response_format": "pcm"});
    let (frames, audio) = websocket_utterance(server.addr, config, "Hi.");
    let error = frames.iter().find(|f| f["type"] == "error").expect("an error frame");
    // The list, sorted, holds Kokoro's and Piper's voices too where set-up put them in .cache.
    let message = error["message"].as_str().unwrap_or_default();
    let prefix = "Generation failed for utterance 0, sentence 0: Invalid voice 'Vivian'. Supported: ";
    let listed: Vec<&str> = message.strip_prefix(prefix).unwrap_or_default().split(", ").collect();
    assert!(listed.contains(&"heart"), "{frames:?}");
    assert_eq!(audio, 0);
    // Upstream's metric families only under the switch.
    let (status, metrics) = get(server.addr, "/metrics", "");
    assert_eq!(status, 200);
    assert!(!metrics.contains("vllm_omni:"), "{metrics}");
}

/// `speechstream say ARGS...`: whether it succeeded, and its log.
fn say(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_speechstream"))
        .arg("say")
        .args(args)
        .args(["--device", "cpu"])
        .env("RUST_LOG", "info")
        .output()
        .expect("run say");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

// Points 4 and 2: `say` resolves its voice as the server does (OpenAI's names, any case), and
// writes the format its file's extension names or refuses with the list, never a silent WAV.
#[test]
fn say_takes_the_servers_voice_names_and_refuses_unknown_extensions() {
    let dir = std::env::temp_dir().join(format!("speechstream-say-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mp3 = dir.join("alloy.mp3");
    let (ok, log) = say(&["Hello from say.", "-o", mp3.to_str().unwrap(), "--voice", "Alloy"]);
    assert!(ok, "{log}");
    let seconds = decoded_seconds(&mp3);
    assert!((0.5..6.0).contains(&seconds), "{seconds} s");
    // `.aac` is ADTS (AAC-LC), which ffmpeg decodes to as much audio as the WAV of the same text.
    let (aac, wav) = (dir.join("hi.aac"), dir.join("hi.wav"));
    for path in [&aac, &wav] {
        let (ok, log) = say(&["Hello from say.", "-o", path.to_str().unwrap(), "--seed", "7"]);
        assert!(ok, "{log}");
    }
    let adts = std::fs::read(&aac).expect("aac written");
    assert!(adts[0] == 0xFF && adts[1] & 0xF6 == 0xF0 && adts[2] >> 6 == 1, "not ADTS AAC-LC: {:02x?}", &adts[..4]);
    let (aac_seconds, wav_seconds) = (decoded_seconds(&aac), decoded_seconds(&wav));
    assert!((0.0..1024.0 / 24_000.0).contains(&(aac_seconds - wav_seconds)), "{aac_seconds} s against {wav_seconds} s");
    for name in ["x.xyz", "noextension"] {
        let path = dir.join(name);
        let (ok, log) = say(&["Hi.", "-o", path.to_str().unwrap()]);
        assert!(!ok && log.contains(".wav, .pcm, .flac, .mp3, .opus, .ulaw, .alaw or .aac"), "{name}: {log}");
        assert!(!path.exists(), "{name} was written");
    }
    let (ok, log) = say(&["Hi.", "-o", dir.join("x.wav").to_str().unwrap(), "--voice", "nobody"]);
    assert!(!ok && log.contains("Invalid voice 'nobody'. Supported: heart"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

// Point 4: an alias that is also a voice's name never applies (the voice wins); the server says
// so at start-up (OpenAI's `fable` where hibari's voice `fable` is installed).
#[test]
fn an_alias_shadowed_by_a_voice_is_reported_at_start_up() {
    // The synthetic engine's voices include `serena`.
    let server = Server::start(&["--voice-alias", "serena=default", "--voice-alias", "narrator=default"]);
    let warning = server.log().into_iter().find(|line| line.contains("also names of voices"));
    let warning = warning.unwrap_or_else(|| panic!("no warning in {:?}", server.log()));
    assert!(warning.contains("aliases=serena") && !warning.contains("narrator"), "{warning}");
    let plain = Server::start(&[]);
    assert!(!plain.log().iter().any(|line| line.contains("also names of voices")), "{:?}", plain.log());
}

// Point 7: `speed` is honoured on streamed WebSocket utterances (our extension: the reference
// refuses it) and in the streaming modes, for the hibari voice; the audio's length follows it
// within the model's limits (docs/protocol.md §e.2).
#[test]
fn speed_is_honoured_on_streamed_websocket_utterances() {
    let server = hibari(&[]);
    let text = "The quick brown fox jumps over the lazy dog, and then it runs back home again.";
    let seconds = |config: Value| -> f64 {
        let (frames, audio) = websocket_utterance(server.addr, config.clone(), text);
        assert!(!frames.iter().any(|f| f["type"] == "error"), "{config}: {frames:?}");
        audio as f64 / 48_000.0
    };
    let streamed = |speed: f64| {
        seconds(json!({"type": "session.config", "stream_audio": true, "response_format": "pcm",
                       "speed": speed, "seed": 7}))
    };
    let lengths: Vec<(f64, f64)> = [0.5, 1.0, 2.0, 4.0].into_iter().map(|s| (s, streamed(s))).collect();
    let at = |speed: f64| lengths.iter().find(|(s, _)| *s == speed).unwrap().1;
    println!(
        "hibari, streamed: {}",
        lengths.iter().map(|(s, d)| format!("speed {s}: {d:.2} s")).collect::<Vec<_>>().join(", ")
    );
    assert!(lengths.windows(2).all(|w| w[1].1 < w[0].1), "not shorter as speed rises: {lengths:?}");
    let (slow, fast) = (at(0.5) / at(1.0), at(1.0) / at(2.0));
    assert!((1.6..2.3).contains(&slow), "0.5 is {slow:.2}x longer: {lengths:?}");
    assert!((1.5..2.2).contains(&fast), "2.0 is {fast:.2}x shorter: {lengths:?}");
    // A streaming mode (token_level) takes speed too, fragment by fragment.
    let token = |speed: f64| {
        seconds(json!({"type": "session.config", "streaming_mode": "token_level", "response_format": "pcm",
                       "speed": speed, "seed": 7}))
    };
    let (normal, quick) = (token(1.0), token(2.0));
    assert!(quick < normal * 0.7, "token_level: {normal:.2} s at 1.0, {quick:.2} s at 2.0");
}

// Point 6: fragments joined without dead air. A fragment that ends mid-sentence loses its
// trailing silence and the next its leading silence (each request's audio is padded with both),
// so a text sent in pieces lasts about as long as the same text sent whole.
#[test]
fn fragments_are_joined_without_dead_air() {
    let server = hibari(&[]);
    let text = "The weather today is sunny with a light breeze from the west. Tomorrow it will rain in the \
                morning, but the afternoon should be clear and warm.";
    let words: Vec<String> = text.split(' ').map(|w| format!("{w} ")).collect();
    // Pieces of four words, as a language model's tokens arrive in a few messages.
    let pieces: Vec<String> = words.chunks(4).map(|c| c.concat()).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let base = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm", "seed": 3});
    let seconds = |extra: Value, parts: &[&str]| -> f64 {
        let mut config = base.clone();
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (frames, audio) = websocket_utterance_in_parts(server.addr, config.clone(), parts);
        assert!(!frames.iter().any(|f| f["type"] == "error"), "{config}: {frames:?}");
        audio as f64 / 48_000.0
    };
    let whole = seconds(json!({}), &[text]);
    let token_level = seconds(json!({"streaming_mode": "token_level"}), &pieces);
    let clauses = seconds(json!({"split_granularity": "clause"}), &pieces);
    let sentences = seconds(json!({"split_granularity": "sentence"}), &pieces);
    println!("whole {whole:.2} s, token_level {token_level:.2} s, clauses {clauses:.2} s, sentences {sentences:.2} s");
    // Each piece is still spoken on its own (its own prosody), so a little longer is left.
    assert!(token_level < whole * 1.2, "token_level {token_level:.2} s against {whole:.2} s whole");
    assert!(clauses < whole * 1.03, "clauses {clauses:.2} s against {whole:.2} s whole");
    assert!((sentences - whole).abs() < 0.2, "sentences {sentences:.2} s against {whole:.2} s whole");
}

// Point 8: `say` shows a progress bar on a terminal (sentences, audio seconds, real-time factor,
// time left) and nothing of it when its output is piped.
#[test]
fn say_shows_progress_on_a_terminal_only() {
    let dir = std::env::temp_dir().join(format!("speechstream-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let wav = dir.join("p.wav");
    let text = "This is the first sentence. Here is a second one. And a third, to finish.";
    // A terminal: `script` runs it on a pseudo-terminal and copies what it shows.
    let command = format!("{} say '{text}' -o {} --device cpu", env!("CARGO_BIN_EXE_speechstream"), wav.display());
    let shown = Command::new("script").args(["-qec", &command, "/dev/null"]).output().expect("script (util-linux)");
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(wav.exists(), "{shown}");
    assert!(shown.contains("\r[") && shown.contains("RTF ") && shown.contains("ETA "), "no progress bar: {shown}");
    assert!(shown.contains("3/3 sentences"), "the bar does not end full: {shown}");
    assert!(shown.contains(" s of audio"), "{shown}");
    // Piped: the log only.
    let (ok, log) = say(&[text, "-o", wav.to_str().unwrap()]);
    assert!(ok, "{log}");
    assert!(!log.contains("sentences,") && !log.contains('\r'), "progress on a pipe: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}
