//! The HTTP routes: health and readiness, metrics, the model and voice lists, the speech
//! endpoint, the WebSocket upgrade, and 404 for the rest. Access (API key, capacity,
//! draining) is decided here, before any handler runs.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, UPGRADE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use speechstream_core::engine::{EngineCapabilities, RequestId};
use speechstream_core::speech_http::{error_json, voices_json};
use tracing::{debug, info_span, Instrument};

use crate::auth;
use crate::body::{full, json, Body};
use crate::context::{Busy, ConnectionContext, UpgradeSlot};
use crate::metrics::{ErrorKind, Refusal};
use crate::paths::{BATCH_PATH, SPEECH_PATH, STREAM_PATH};
use crate::shared::Shared;
use crate::sockets::Admission;
use crate::speech;

/// Paths anyone may ask, key or not: probes must work without credentials, and the
/// playground's page carries no secret (the user types the key into it). Whatever reveals the
/// configuration (`/playground.json` too) wants the key.
fn is_open(path: &str) -> bool {
    matches!(path, "/health" | "/ready") || crate::playground::is_page(path)
}

pub(crate) async fn route(
    request: Request<Incoming>,
    shared: Arc<Shared>,
    context: Arc<ConnectionContext>,
    slot: UpgradeSlot,
) -> Response<Body> {
    let id = context.next_request_id();
    // `X-Request-Id`: the client's own when it sent a usable one (logged beside ours), else ours.
    let client_id = request.headers().get(X_REQUEST_ID).filter(|v| usable_request_id(v.as_bytes())).cloned();
    let span = match &client_id {
        Some(theirs) => info_span!("http", request = %id, client_request = %String::from_utf8_lossy(theirs.as_bytes()),
            method = %request.method(), path = request.uri().path()),
        None => info_span!("http", request = %id, method = %request.method(), path = request.uri().path()),
    };
    // In progress until its response has been written whole: meanwhile the socket is not
    // closed to make room.
    let mut busy = Some(context.socket.busy());
    let admission = context.admit();
    let refused = admission != Admission::Admitted;
    let ours = HeaderValue::from_str(&id.to_string()).ok();
    let mut response = respond(request, shared, context, admission, slot, &mut busy, id).instrument(span).await;
    // The response holds the mark until hyper has written it whole (an upgrade took it along,
    // to hold until its WebSocket ends).
    if let Some(busy) = busy {
        response = response.map(|body| Held { body, _busy: busy }.boxed());
    }
    if let Some(value) = client_id.or(ours) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    // A refused connection gets one answer and is closed (a 101 must keep its `Connection:
    // upgrade`; the refused WebSocket is closed with 1013 instead).
    if refused && response.status() != StatusCode::SWITCHING_PROTOCOLS {
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

const X_REQUEST_ID: &str = "x-request-id";

/// A response body that keeps its request's [`Busy`] mark until hyper has written it whole
/// (or given up on it) and dropped it.
struct Held {
    body: Body,
    _busy: Busy,
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = crate::body::BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A client's request id worth echoing: 1 to 200 visible ASCII characters.
fn usable_request_id(id: &[u8]) -> bool {
    (1..=200).contains(&id.len()) && id.iter().all(|b| b.is_ascii_graphic())
}

async fn respond(
    mut request: Request<Incoming>,
    shared: Arc<Shared>,
    context: Arc<ConnectionContext>,
    admission: Admission,
    slot: UpgradeSlot,
    busy: &mut Option<Busy>,
    id: RequestId,
) -> Response<Body> {
    {
        debug!("request");
        let path = request.uri().path().to_owned();
        if let Some(key) = shared.api_key.as_deref().filter(|_| !is_open(&path)) {
            if !auth::authorized(&request, key) {
                shared.metrics.error(ErrorKind::Auth);
                return unauthorized();
            }
        }
        if let Some(response) = crate::playground::route(&request, &shared) {
            return response.map(|body| body.map_err(|never| match never {}).boxed());
        }
        let refusal = match admission {
            Admission::Refused(why) => Some(why),
            Admission::Admitted => None,
        };
        match (request.method(), path.as_str()) {
            (_, STREAM_PATH) => match refusal {
                // A refused handshake lets a load balancer try another instance.
                Some(Refusal::Draining) => refused(Refusal::Draining, &shared),
                // At capacity the WebSocket is accepted, then closed with 1013 and a reason.
                _ => upgrade(&mut request, &slot, busy),
            },
            (&Method::POST, SPEECH_PATH) => match refusal {
                Some(why) => refused(why, &shared),
                None => speech::create_speech(request, &shared, id).await,
            },
            (&Method::POST, BATCH_PATH) => match refusal {
                Some(why) => refused(why, &shared),
                None => speech::create_batch(request, &shared, &context, id).await,
            },
            (&Method::GET, "/health") => json(StatusCode::OK, "{}".to_owned()),
            (&Method::GET, "/ready") => ready(&shared),
            (&Method::GET, "/metrics") => metrics(&shared),
            (&Method::GET, "/v1/models") => {
                json(StatusCode::OK, models(shared.catalog.capabilities(), shared.started_unix))
            }
            (&Method::GET, "/v1/audio/voices") => json(StatusCode::OK, voices_json(&shared.catalog)),
            (_, "/health" | "/ready" | "/metrics" | "/v1/models" | "/v1/audio/voices" | SPEECH_PATH | BATCH_PATH) => {
                detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
            }
            _ => detail(StatusCode::NOT_FOUND, "Not Found"),
        }
    }
}

fn upgrade(request: &mut Request<Incoming>, slot: &UpgradeSlot, busy: &mut Option<Busy>) -> Response<Body> {
    if request.method() != Method::GET || !fastwebsockets::upgrade::is_upgrade_request(request) {
        let mut response = detail(StatusCode::UPGRADE_REQUIRED, "WebSocket upgrade required");
        response.headers_mut().insert(UPGRADE, HeaderValue::from_static("websocket"));
        return response;
    }
    // RFC 6455 §4.2.1: the key is the base64 of 16 bytes; fastwebsockets takes any value.
    // (A missing key is fastwebsockets' to refuse.)
    let key = request.headers().get("sec-websocket-key");
    if !key.is_none_or(|key| BASE64.decode(key.as_bytes()).is_ok_and(|bytes| bytes.len() == 16)) {
        debug!("bad websocket key");
        let mut response = detail(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key must be the base64 encoding of 16 bytes");
        // The peer asked to leave HTTP: it isn't waiting to send another request.
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    match fastwebsockets::upgrade::upgrade(request) {
        Ok((response, upgrade)) => {
            if let Some(busy) = busy.take() {
                *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((upgrade, busy));
            }
            response.map(|_| full(Bytes::new()))
        }
        Err(e) => {
            debug!(error = %e, "bad websocket handshake");
            detail(StatusCode::BAD_REQUEST, &e.to_string())
        }
    }
}

/// 200 while serving; 503 once draining, or once the engine has failed, so a load balancer
/// stops sending new work.
fn ready(shared: &Shared) -> Response<Body> {
    if shared.draining.load(Ordering::Relaxed) {
        json(StatusCode::SERVICE_UNAVAILABLE, r#"{"status":"draining"}"#.to_owned())
    } else if let Some(why) = shared.engine.failure() {
        json(StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({"status": "failed", "error": why}).to_string())
    } else {
        json(StatusCode::OK, r#"{"status":"ready"}"#.to_owned())
    }
}

fn metrics(shared: &Shared) -> Response<Body> {
    let text = shared.metrics.render(&shared.engine.load());
    let mut response = Response::new(full(Bytes::from(text)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    response
}

fn refused(why: Refusal, shared: &Shared) -> Response<Body> {
    let message = match (why, shared.max_connections) {
        (Refusal::Draining, _) => "Server is shutting down; retry on another instance".to_owned(),
        (Refusal::Capacity | Refusal::Sockets | Refusal::Peer, Some(max)) => {
            format!("Server at capacity ({max} connections); retry later")
        }
        (Refusal::Capacity | Refusal::Sockets | Refusal::Peer, None) => "Server at capacity; retry later".to_owned(),
    };
    let body = error_json(&message, "ServiceUnavailableError", None, 503);
    json(StatusCode::SERVICE_UNAVAILABLE, body)
}

fn unauthorized() -> Response<Body> {
    let message = "Invalid or missing API key: send `Authorization: Bearer <key>` (or `?api_key=<key>` where \
                   headers cannot be set)";
    let mut response = json(StatusCode::UNAUTHORIZED, error_json(message, "AuthenticationError", None, 401));
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
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
fn detail(status: StatusCode, message: &str) -> Response<Body> {
    json(status, serde_json::json!({ "detail": message }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_lists_every_served_name() {
        let capabilities = EngineCapabilities::new("a", 24000).with_models(["a", "b\"c"]);
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
