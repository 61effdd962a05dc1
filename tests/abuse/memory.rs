//! Memory one connection can make the server hold.

use serde_json::json;
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;

use crate::peers::{exchange, status_and_json};
use crate::support::{Received, Recorded, Scripted, Step, TestServer};

// Issue 9, defect 3: during a long utterance each 4 MiB session.config used to be held parsed
// (~110 MiB each) and 64 of them could be held. Held-back messages are now bounded in bytes
// (--max-deferred-bytes, 8 MiB by default): past it a message is refused with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_messages_are_bounded_in_bytes() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2], 24000), Step::HoldUntilAborted]));
    let server = TestServer::start_with(engine.clone(), ServerConfig::new(SessionOptions::default())).await;
    let mut client = server.connect().await;
    let streamed = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"});
    client.send(streamed).await;
    client.send(json!({"type": "input.text", "text": "Hello world."})).await;
    client.send(json!({"type": "input.done"})).await;
    assert_eq!(client.json().await["type"], "audio.start");
    assert_eq!(client.binary().await, vec![1, 2]);
    // 3 MiB each: two fit in 8 MiB, the next three do not.
    let big = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm",
                     "ref_text": "x".repeat(3 << 20)});
    for _ in 0..5 {
        client.send(big.clone()).await;
    }
    let refused = "Held input exceeds 8388608 bytes while an utterance is generating; message dropped, wait for \
                   session.done before sending more";
    for _ in 0..3 {
        assert_eq!(client.recv().await, Received::Json(json!({"type": "error", "message": refused})));
    }
    client.send(json!({"type": "input.cancel"})).await;
    assert_eq!(client.json().await["cancelled"], true);
    assert_eq!(client.json().await["type"], "session.done");
    // The two held configs were applied (a re-config is silent); the session goes on.
    client.send(json!({"type": "input.done"})).await;
    assert_eq!(
        client.recv().await,
        Received::Json(json!({"type": "session.done", "utterance_index": 1, "total_sentences": 0}))
    );
    assert_eq!(engine.aborts().len(), 1);
    server.shutdown().await;
}

// Issue 9: a non-streamed reply used to be held whole in memory whatever its length (~165 MiB
// per hour of audio). Past --max-whole-audio-seconds it fails, and its request is aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_files_are_bounded_in_length() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let mut config = ServerConfig::new(SessionOptions { max_whole_audio_seconds: 2, ..SessionOptions::default() });
    config.max_connections = Some(2);
    let server = TestServer::start_with(engine.clone(), config).await;
    // About 30 s of synthetic audio.
    let long = "words ".repeat(100);
    let body = json!({"input": long}).to_string();
    let request = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, reply) = status_and_json(&exchange(&server, request.as_bytes()).await);
    let message = "Speech generation failed: audio longer than 2 seconds cannot be sent as one file; use \
                   stream_format='audio' or 'sse' for longer texts";
    assert_eq!((status, &reply["error"]["message"]), (400, &json!(message)));
    assert_eq!(engine.await_aborts(1).await.len(), 1);

    let mut client = server.connect().await;
    client.send(json!({"type": "session.config"})).await;
    client.send(json!({"type": "input.text", "text": long})).await;
    client.send(json!({"type": "input.done"})).await;
    let seen = client.until_session_done().await;
    let Received::Json(done) = &seen[seen.len() - 2] else { panic!("no audio.done: {seen:?}") };
    assert_eq!((done["type"].as_str(), done["error"].as_bool()), (Some("audio.done"), Some(true)));
    assert_eq!(engine.await_aborts(2).await.len(), 2);
    assert_eq!(engine.finished().len(), 0);
    server.shutdown().await;
}
