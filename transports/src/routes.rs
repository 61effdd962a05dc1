//! The HTTP routes: health, the model list, the WebSocket upgrade, and 404 for the rest.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, UPGRADE};
use hyper::{Method, Request, Response, StatusCode};
use speechstream_core::engine::EngineCapabilities;
use tracing::debug;

use crate::connection::UpgradeSlot;
use crate::server::Shared;

/// The streaming speech WebSocket endpoint (protocol.md §a).
pub const STREAM_PATH: &str = "/v1/audio/speech/stream";

pub(crate) fn route(mut request: Request<Incoming>, shared: &Shared, slot: &UpgradeSlot) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    match (request.method(), path) {
        (_, STREAM_PATH) => upgrade(&mut request, slot),
        (&Method::GET, "/health") => json(StatusCode::OK, "{}".to_owned()),
        (&Method::GET, "/v1/models") => json(StatusCode::OK, models(&shared.capabilities, shared.started_unix)),
        (_, "/health" | "/v1/models") => detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
        _ => detail(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn upgrade(request: &mut Request<Incoming>, slot: &UpgradeSlot) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || !fastwebsockets::upgrade::is_upgrade_request(request) {
        let mut response = detail(StatusCode::UPGRADE_REQUIRED, "WebSocket upgrade required");
        response.headers_mut().insert(UPGRADE, HeaderValue::from_static("websocket"));
        return response;
    }
    match fastwebsockets::upgrade::upgrade(request) {
        Ok((response, upgrade)) => {
            *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(upgrade);
            response.map(|_| Full::new(Bytes::new()))
        }
        Err(e) => {
            debug!(error = %e, "bad websocket handshake");
            detail(StatusCode::BAD_REQUEST, &e.to_string())
        }
    }
}

/// OpenAI's model list shape, as vLLM serves it.
fn models(capabilities: &EngineCapabilities, created: u64) -> String {
    let data: Vec<serde_json::Value> = capabilities
        .models
        .iter()
        .map(|id| {
            serde_json::json!({
                "id": id,
                "object": "model",
                "created": created,
                "owned_by": "speechstream",
            })
        })
        .collect();
    serde_json::json!({ "object": "list", "data": data }).to_string()
}

/// An error body the way FastAPI (the reference server) writes one.
fn detail(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json(status, serde_json::json!({ "detail": message }).to_string())
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_lists_every_served_name() {
        let capabilities = EngineCapabilities {
            models: vec!["a".into(), "b\"c".into()],
            sample_rate: 24000,
            voices: vec![],
            word_timestamps: false,
            codec: None,
        };
        let body: serde_json::Value = serde_json::from_str(&models(&capabilities, 7)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"object": "list", "data": [
                {"id": "a", "object": "model", "created": 7, "owned_by": "speechstream"},
                {"id": "b\"c", "object": "model", "created": 7, "owned_by": "speechstream"},
            ]})
        );
    }
}
