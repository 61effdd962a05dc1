//! Home Assistant's Wyoming protocol on the hibari voice, end to end: `speechstream serve
//! --wyoming-port 0` as a child process, the `wyoming` package's own client
//! (tests/clients/wyoming_client.py: describe, synthesize, a text stream spoken sentence by
//! sentence while it arrives, an unknown voice), the audio of both transcribed by PocketSphinx
//! (tests/asr/transcribe.py), and the Wyoming utterances in the same /metrics as the HTTP side.
//! Needs scripts/setup.sh (voice assets, ffmpeg, .venv-clients, .venv-asr).

#[allow(dead_code)]
#[path = "deploy/process.rs"]
mod process;

use std::process::Command;

use process::{client_python, get, root, Server};

#[path = "asr/words.rs"]
mod words;

use words::{common_in_order, words, TEXT};

#[test]
fn home_assistant_client_hears_hibari_over_wyoming() {
    let asr = root().join(".venv-asr/bin/python");
    assert!(asr.exists(), "{} missing: run scripts/setup.sh (or scripts/setup-asr.sh)", asr.display());
    // Behaviour, not capacity: admission (which reads the machine's speed) would refuse a
    // sentence when the tests run side by side on a busy machine.
    let server = Server::start_engine("hibari", &["--device", "cpu", "--wyoming-port", "0", "--admission", "off"]);
    let wyoming = server.wyoming_addr();
    let prefix = std::env::temp_dir().join(format!("speechstream-wyoming-{}", std::process::id()));
    let prefix = prefix.display().to_string();
    let client = Command::new(client_python())
        .arg(root().join("tests/clients/wyoming_client.py"))
        .args([wyoming.ip().to_string(), wyoming.port().to_string(), TEXT.to_owned(), prefix.clone()])
        .output()
        .expect("run the wyoming client");
    assert!(
        client.status.success(),
        "wyoming_client.py failed:\n{}\n{}\nserver log: {:?}",
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr),
        server.log()
    );
    println!("{}", String::from_utf8_lossy(&client.stdout).trim());

    let expected = words(TEXT);
    for kind in ["whole", "streamed"] {
        let wav = format!("{prefix}-{kind}.wav");
        let heard = Command::new(&asr).arg(root().join("tests/asr/transcribe.py")).arg(&wav).output().expect("asr");
        let _ = std::fs::remove_file(&wav);
        assert!(heard.status.success(), "transcribe.py: {}", String::from_utf8_lossy(&heard.stderr));
        let heard = words(&String::from_utf8_lossy(&heard.stdout));
        let matched = common_in_order(&expected, &heard);
        println!("{kind}: {matched} of {} words heard: {}", expected.len(), heard.join(" "));
        // As tests/hibari_intelligibility.rs: a garbled voice gets few; 70% leaves room for the recogniser.
        assert!(
            matched * 10 >= expected.len() * 7,
            "{kind}: {matched} of {} words recognised: {heard:?}",
            expected.len()
        );
    }

    // One engine, one set of metrics: the whole text once, then its four sentences one by one,
    // then the whole text twice more (an OpenAI voice name, a language alone).
    let (status, metrics) = get(server.addr, "/metrics", "");
    assert_eq!(status, 200);
    let utterances = metrics
        .lines()
        .find_map(|line| line.strip_prefix("speechstream_utterances_total{transport=\"wyoming\"} "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert_eq!(utterances, Some(7), "{metrics}");
}
