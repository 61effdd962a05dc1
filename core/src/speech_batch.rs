//! `POST /v1/audio/speech/batch` (upstream vLLM-Omni; docs/protocol.md §j), I/O-free: a batch body
//! becomes one [`SpeechRequest`] (or its error) per item, each item's fields over the batch's
//! defaults and checked exactly as a single `POST /v1/audio/speech` is; and the reply's JSON.
//! A driver synthesizes the valid items (whole files, concurrently) and reports each one's
//! [`ItemResult`]; an item's failure is its own result, never the batch's.

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::catalog::Catalog;
use crate::speech_http::{media_type, parse_speech_request, HttpError, SpeechRequest, Usage};

/// Most items in a batch (upstream's `tts_batch_max_items` default).
pub const MAX_BATCH_ITEMS: usize = 32;

/// The fields a batch may set for all its items and an item may set for itself (upstream's
/// `BatchSpeechRequest`; no `seed`, `speaker_embedding` or `stream`).
const ITEM_FIELDS: [&str; 14] = [
    "voice",
    "speaker",
    "instructions",
    "response_format",
    "sample_rate",
    "speed",
    "task_type",
    "language",
    "ref_audio",
    "ref_text",
    "x_vector_only_mode",
    "max_new_tokens",
    "initial_codec_chunk_frames",
    "non_streaming_mode",
];

/// Parse a batch body: `Err` is the batch's own error (not JSON, no items, too many, more than
/// `max_input_chars` of text in all, an unknown model); otherwise each item's request or why it
/// cannot be made, in order.
pub fn parse_batch_request(
    body: &str,
    catalog: &Catalog,
    max_input_chars: usize,
    max_items: usize,
) -> Result<Vec<Result<SpeechRequest, HttpError>>, HttpError> {
    let Ok(Value::Object(batch)) = serde_json::from_str::<Value>(body) else {
        return Err(HttpError::bad_request("JSON decode error: the body must be a JSON object with 'items'"));
    };
    let items = match batch.get("items") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(HttpError::bad_request("items: List should have at least 1 item")),
        Some(_) => return Err(HttpError::bad_request("items: Input should be a valid list")),
        None => return Err(HttpError::bad_request("items: Field required")),
    };
    if items.len() > max_items {
        return Err(HttpError::bad_request(format!(
            "Batch contains {} items, exceeding the maximum of {max_items}.",
            items.len()
        )));
    }
    // The whole batch is bounded as one request is: its texts together.
    let chars: usize =
        items.iter().filter_map(|item| item.get("input")?.as_str()).map(|text| text.chars().count()).sum();
    if chars > max_input_chars {
        return Err(HttpError::bad_request(format!(
            "Batch input text too long ({chars} characters in all; max {max_input_chars})"
        )));
    }
    let model = batch.get("model").filter(|m| !m.is_null()).cloned();
    if let Some(model) = model.as_ref().and_then(Value::as_str).filter(|m| !m.is_empty()) {
        if !catalog.serves_model(model) {
            let mut error = HttpError::new(404, "NotFoundError", format!("The model `{model}` does not exist."));
            error.param = Some("model");
            return Err(error);
        }
    }
    let defaults: Map<String, Value> = ITEM_FIELDS
        .iter()
        .filter_map(|&name| Some((name.to_owned(), batch.get(name).filter(|v| !v.is_null())?.clone())))
        .collect();
    Ok(items
        .iter()
        .map(|item| {
            let Value::Object(item) = item else {
                return Err(HttpError::bad_request("Each item must be an object with 'input'"));
            };
            let mut merged = defaults.clone();
            for name in ITEM_FIELDS.iter().chain(&["input"]) {
                if let Some(value) = item.get(*name).filter(|v| !v.is_null()) {
                    merged.insert((*name).to_owned(), value.clone());
                }
            }
            // An item's voice wins over the batch's, whichever name either used.
            if item.get("voice").or(item.get("speaker")).is_some_and(|v| !v.is_null()) {
                let own = item.get("voice").filter(|v| !v.is_null()).or(item.get("speaker")).cloned();
                merged.remove("speaker");
                merged.insert("voice".to_owned(), own.unwrap_or(Value::Null));
            }
            if let Some(model) = &model {
                merged.insert("model".to_owned(), model.clone());
            }
            parse_speech_request(&Value::Object(merged).to_string(), catalog, max_input_chars)
        })
        .collect())
}

/// The longest audio one item's file may hold: the batch's reply holds every file, so together
/// they stay within `max_whole_audio_seconds` (at least a second each).
pub fn item_audio_seconds(max_whole_audio_seconds: u32, items: usize) -> u32 {
    (max_whole_audio_seconds / items.max(1) as u32).max(1)
}

/// How one item ended: its file and usage, or why it failed.
pub type ItemResult = Result<(Vec<u8>, Usage), String>;

/// The batch's reply body: `{id, results: [...], total, succeeded, failed}`, each result
/// `{index, status: "success", audio_data (base64), media_type, usage}` or
/// `{index, status: "error", error}`. `requests` gives each item's format, and the fields its
/// engine did not honour (`ignored`, a list, only when there are some).
pub fn batch_response_json(id: &str, requests: &[Result<SpeechRequest, HttpError>], results: &[ItemResult]) -> String {
    let mut succeeded = 0;
    let list: Vec<Value> = requests
        .iter()
        .zip(results)
        .enumerate()
        .map(|(index, (request, result))| match (request, result) {
            (Ok(request), Ok((file, usage))) => {
                succeeded += 1;
                let mut item = json!({
                    "index": index,
                    "status": "success",
                    "audio_data": base64::engine::general_purpose::STANDARD.encode(file),
                    "media_type": media_type(request.response_format),
                    "usage": {
                        "input_tokens": usage.input_text_tokens,
                        "output_tokens": usage.output_tokens,
                        "total_tokens": usage.total(),
                    },
                });
                // Our extension: what the engine did not honour (as X-Ignored-Fields).
                if !request.synthesis.ignored.is_empty() {
                    item["ignored"] = json!(request.synthesis.ignored);
                }
                item
            }
            (_, Err(message)) => json!({"index": index, "status": "error", "error": message}),
            (Err(error), Ok(_)) => json!({"index": index, "status": "error", "error": error.message}),
        })
        .collect();
    let total = list.len();
    json!({"id": id, "results": list, "total": total, "succeeded": succeeded, "failed": total - succeeded}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Catalog {
        crate::engine::EngineCapabilities::new("m", 24_000).with_voices(["vivian", "aiden"]).into()
    }

    fn parse(body: &str) -> Result<Vec<Result<SpeechRequest, HttpError>>, HttpError> {
        parse_batch_request(body, &caps(), 1000, 3)
    }

    #[test]
    fn items_take_the_batch_defaults_and_override_them() {
        let items = parse(
            r#"{"model":"m","voice":"vivian","response_format":"mp3","items":[{"input":"one"},
               {"input":"two","speaker":"aiden","response_format":null},{"input":"  "},{"input":"x","voice":"bob"}]}"#,
        );
        assert_eq!(items.unwrap_err().message, "Batch contains 4 items, exceeding the maximum of 3.");
        let items = parse(
            r#"{"voice":"vivian","response_format":"mp3","speed":2,"items":[{"input":"one"},
               {"input":"two","speaker":"aiden","response_format":"pcm","stream":true},{"input":"  "}]}"#,
        )
        .unwrap();
        let one = items[0].as_ref().unwrap();
        assert_eq!((one.synthesis.voice.as_deref(), one.response_format.as_str()), (Some("vivian"), "mp3"));
        assert_eq!(one.synthesis.speed, 2.0);
        let two = items[1].as_ref().unwrap();
        assert_eq!((two.synthesis.voice.as_deref(), two.response_format.as_str()), (Some("aiden"), "pcm"));
        assert!(!two.synthesis.stream, "a batch item is never streamed");
        assert_eq!(items[2].as_ref().unwrap_err().message, "Input text cannot be empty");
    }

    #[test]
    fn batch_errors_and_the_reply() {
        assert_eq!(parse("[]").unwrap_err().status, 400);
        assert_eq!(parse(r#"{"items":[]}"#).unwrap_err().message, "items: List should have at least 1 item");
        assert_eq!(parse(r#"{"model":"other","items":[{"input":"x"}]}"#).unwrap_err().status, 404);
        let long = format!(r#"{{"items":[{{"input":"{}"}},{{"input":"{}"}}]}}"#, "a".repeat(600), "b".repeat(401));
        assert_eq!(parse(&long).unwrap_err().message, "Batch input text too long (1001 characters in all; max 1000)");
        assert_eq!((item_audio_seconds(600, 32), item_audio_seconds(600, 1), item_audio_seconds(10, 32)), (18, 600, 1));
        let requests = parse(r#"{"items":[{"input":"hi there"},{"input":""},{"input":"x"}]}"#).unwrap();
        let usage = Usage { input_text_tokens: 2, output_tokens: 5 };
        let results =
            vec![Ok((vec![1, 2, 3], usage)), Err("Input text cannot be empty".to_owned()), Err("boom".into())];
        let reply: Value = serde_json::from_str(&batch_response_json("speech-batch-1", &requests, &results)).unwrap();
        assert_eq!(
            reply,
            json!({"id": "speech-batch-1", "total": 3, "succeeded": 1, "failed": 2, "results": [
                {"index": 0, "status": "success", "audio_data": "AQID", "media_type": "audio/wav",
                 "usage": {"input_tokens": 2, "output_tokens": 5, "total_tokens": 7}},
                {"index": 1, "status": "error", "error": "Input text cannot be empty"},
                {"index": 2, "status": "error", "error": "boom"},
            ]})
        );
    }
}
