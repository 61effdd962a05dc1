//! docs/protocol.md §g.B 6-8: codec-token streaming over real sockets.

use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions, CODEBOOKS, CODEBOOK_SIZE};
use speechstream_core::session::SessionOptions;

use crate::support::{codec_header, Received, Recorded, Scripted, Step, TestServer};

const EOS: u8 = 1;

fn codec_config() -> Value {
    json!({"type": "session.config", "output_mode": "codec_tokens", "stream_audio": true,
           "response_format": "pcm"})
}

async fn say(client: &mut crate::support::Client, text: &str) {
    client.send(codec_config()).await;
    client.send(json!({"type": "input.text", "text": text})).await;
    client.send(json!({"type": "input.done"})).await;
}

/// The reference fake: frames of 1, 2 and 3 rows of 16 codes, filled with 0, 1, 2.
fn reference_frames() -> Vec<Step> {
    (0..3).map(|i: usize| Step::Codec(vec![i as i32; (1 + i) * 16], i == 2)).collect()
}

// B6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codec_stream_handler_frames_and_done() {
    let engine = Recorded::new(Scripted::new(reference_frames()).with_codec());
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    say(&mut client, "hello").await;
    let start = client.json().await;
    assert_eq!(start["type"], "codec.start");
    assert_eq!(start["codebooks"], 16);
    assert_eq!(start["header_format"], "<IHB");
    assert_eq!(start["version"], 1);
    assert_eq!(start["decoder_id"], "d");
    let mut headers = Vec::new();
    let done = loop {
        match client.recv().await {
            Received::Binary(frame) => {
                let (seq, n, flags, body) = codec_header(&frame);
                assert_eq!(body, n as usize * 16 * 2);
                // The body is the engine's codes as int16 LE.
                let fill = i16::from_le_bytes([frame[7], frame[8]]);
                assert_eq!(fill as u32, seq);
                headers.push((seq, n, flags));
            }
            Received::Json(value) => break value,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(headers.iter().map(|h| h.1).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(headers.iter().map(|h| h.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(headers.last().map(|h| h.2 & EOS), Some(EOS));
    assert_eq!(done["type"], "codec.done");
    assert_eq!(done["total_frames"], 6);
    assert_eq!(done["seq_last"], 2);
    assert_eq!(done["error"], false);
    assert_eq!(done["cancelled"], false);
    assert_eq!(client.json().await, json!({"type": "session.done", "utterance_index": 0, "total_sentences": 1}));
    assert!(engine.aborts().is_empty());
    assert!(engine.requests()[0].1.output.codec());
}

// B6 with the synthetic engine's codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_codec_stream_is_consistent() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    say(&mut client, "codec frames from the synthetic engine").await;
    let start = client.json().await;
    assert_eq!(start["type"], "codec.start");
    assert_eq!(start["codebooks"], CODEBOOKS);
    assert_eq!(start["codebook_size"], CODEBOOK_SIZE);
    assert_eq!(start["frame_rate_hz"], 12.5);
    assert_eq!(start["sample_rate"], 24000);
    let seen = client.until_session_done().await;
    let mut total = 0u64;
    let mut expected_seq = 0u32;
    let mut flags_last = 0;
    for message in &seen {
        if let Received::Binary(frame) = message {
            let (seq, n, flags, body) = codec_header(frame);
            assert_eq!(seq, expected_seq);
            expected_seq += 1;
            assert_eq!(body, n as usize * CODEBOOKS as usize * 2);
            for code in frame[7..].chunks_exact(2) {
                let code = i16::from_le_bytes([code[0], code[1]]);
                assert!((0..CODEBOOK_SIZE as i16).contains(&code));
            }
            total += u64::from(n);
            flags_last = flags;
        }
    }
    assert_eq!(flags_last & EOS, EOS);
    let Received::Json(done) = &seen[seen.len() - 2] else { panic!("no codec.done: {seen:?}") };
    assert_eq!(done["type"], "codec.done");
    assert_eq!(done["total_frames"], total);
    assert_eq!(done["seq_last"], i64::from(expected_seq) - 1);
    assert_eq!(done["cancelled"], false);
    assert!(total >= 10);
}

// B7
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codec_stream_rejected_when_adapter_lacks_support() {
    let engine = Recorded::new(Scripted::new(reference_frames()));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    say(&mut client, "hello").await;
    let refused = client.json().await;
    assert_eq!(refused["type"], "error");
    assert!(refused["message"].as_str().unwrap_or("").contains("not supported"));
    assert_eq!(client.json().await["type"], "session.done");
    assert!(engine.requests().is_empty());
}

// B8
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_cancel_mid_stream_aborts_request() {
    let engine =
        Recorded::new(Scripted::new(vec![Step::Codec(vec![5; 16], false), Step::HoldUntilAborted]).with_codec());
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    say(&mut client, "hello").await;
    assert_eq!(client.json().await["type"], "codec.start");
    client.send(json!({"type": "input.cancel"})).await;
    let seen = client.until_session_done().await;
    let json: Vec<&Value> = seen
        .iter()
        .filter_map(|m| match m {
            Received::Json(v) => Some(v),
            _ => None,
        })
        .collect();
    let done = json.iter().find(|v| v["type"] == "codec.done").expect("codec.done");
    assert_eq!(done["cancelled"], true);
    assert_eq!(json.last().map(|v| &v["type"]), Some(&json!("session.done")));
    // The stream still ends with an EOS frame.
    let last_frame = seen.iter().rev().find_map(|m| match m {
        Received::Binary(frame) => Some(frame.clone()),
        _ => None,
    });
    assert_eq!(last_frame.map(|f| codec_header(&f).2 & EOS), Some(EOS));
    let aborts = engine.await_aborts(1).await;
    assert_eq!(aborts, vec![engine.requests()[0].0]);
}
