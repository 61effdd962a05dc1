//! Real client libraries against the server: what users will actually run.

use std::process::Command;

use crate::process::{client_python, root, Server};

const KEY: &str = "test-key-123";
const MODEL: &str = "clients-test-model";

fn run_python(script: &str, args: &[String]) {
    let python = client_python();
    let output =
        Command::new(&python).arg(root().join("tests/clients").join(script)).args(args).output().expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed ({}):\n{stdout}\n{stderr}", output.status);
    println!("{script}: {}", stdout.trim());
}

#[test]
fn openai_python_package() {
    let server = Server::start(&["--api-key", KEY, "--served-model-name", MODEL]);
    run_python("openai_speech.py", &[format!("http://{}", server.addr), KEY.to_owned(), MODEL.to_owned()]);
}

#[test]
fn vllm_omni_style_streaming_client() {
    let server = Server::start(&["--api-key", KEY]);
    run_python("streaming_client.py", &[format!("ws://{}/v1/audio/speech/stream", server.addr), KEY.to_owned()]);
}

// Upstream vLLM-Omni's newer WebSocket clients: split_granularity and streaming_mode
// sentence_commit (tests/clients/upstream_clients.py).
#[test]
fn upstream_vllm_omni_style_clients() {
    let server = Server::start(&["--api-key", KEY]);
    run_python("upstream_clients.py", &[format!("ws://{}/v1/audio/speech/stream", server.addr), KEY.to_owned()]);
}

// Home Assistant's protocol with the `wyoming` package's own client: describe, synthesize, a
// text stream, an unknown voice (tests/clients/wyoming_client.py).
#[test]
fn wyoming_package_client() {
    let server = Server::start(&["--wyoming-port", "0"]);
    let wyoming = server.wyoming_addr();
    let prefix = std::env::temp_dir().join(format!("speechstream-wyoming-deploy-{}", std::process::id()));
    let prefix = prefix.display().to_string();
    run_python(
        "wyoming_client.py",
        &[wyoming.ip().to_string(), wyoming.port().to_string(), "Hello there. This is a test.".into(), prefix.clone()],
    );
    for kind in ["whole", "streamed"] {
        let _ = std::fs::remove_file(format!("{prefix}-{kind}.wav"));
    }
}
