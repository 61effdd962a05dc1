//! `POST /v1/audio/speech`: one request, one engine request, one response; and
//! `POST /v1/audio/speech/batch`: several, each a whole file, in one JSON reply.
//!
//! The core validates the body and decides every byte of the response (its
//! `speech_response::SpeechResponse` machine); this module reads the body, submits to the
//! engine with a sink like the WebSocket path's, feeds the engine's events to the machine and
//! moves what comes out: the head, then the body, whole or streamed (raw audio or SSE) as hyper
//! polls it, only as fast as the client reads, which is the backpressure. If the client goes
//! away, hyper drops the handler's future or the body, and the request is aborted.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use speechstream_core::engine::{Engine, EngineEvent, EngineEventKind, RequestId};
use speechstream_core::speech_batch::{
    batch_response_json, item_audio_seconds, parse_batch_request, ItemResult, MAX_BATCH_ITEMS,
};
use speechstream_core::speech_http::{
    check_content_type, ignored_header, parse_speech_request, HttpError, SpeechRequest,
};
use speechstream_core::speech_response::{ResponseHead, ResponseOutput, SpeechResponse};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::body::{full, json, Body, BoxError};
use crate::context::ConnectionContext;
use crate::encoding::encode_off_runtime;
use crate::metrics::{Abort, ErrorKind, Transport, UtteranceMeter};
use crate::shared::Shared;
use crate::sink::ChannelSink;

pub(crate) async fn create_speech(request: Request<Incoming>, shared: &Arc<Shared>, id: RequestId) -> Response<Body> {
    match speak(request, shared, id).await {
        Ok(response) => response,
        Err(error) => error_response(shared, &error),
    }
}

/// The answer to a request that failed before its response began: counted and logged.
fn error_response(shared: &Shared, error: &HttpError) -> Response<Body> {
    let kind = if error.status >= 500 { ErrorKind::Engine } else { ErrorKind::Request };
    shared.metrics.error(kind);
    info!(status = error.status, message = %error.message, "speech request failed");
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json(status, error.body());
    if let Some(seconds) = error.retry_after_seconds {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The JSON body of a speech request, read within the size and time limits.
async fn read_body(request: Request<Incoming>, shared: &Shared) -> Result<String, HttpError> {
    let content_type = request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
    check_content_type(content_type)?;
    let limit = shared.max_message_bytes;
    let too_large = || HttpError::new(413, "BadRequestError", format!("Request body too large (max {limit} bytes)"));
    // A declared length over the limit is refused before a byte of the body is read.
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let timeout = shared.body_timeout;
    let read = tokio::time::timeout(timeout, Limited::new(request.into_body(), limit).collect());
    let body = match read.await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => return Err(HttpError::bad_request(format!("Could not read the request body: {e}"))),
        Err(_) => {
            let message = format!("Request body not received within {} seconds", timeout.as_secs_f64());
            return Err(HttpError::new(408, "RequestTimeoutError", message));
        }
    };
    String::from_utf8(body.to_vec()).map_err(|_| HttpError::bad_request("JSON decode error"))
}

async fn speak(request: Request<Incoming>, shared: &Arc<Shared>, id: RequestId) -> Result<Response<Body>, HttpError> {
    let body = read_body(request, shared).await?;
    let request = parse_speech_request(&body, &shared.catalog, shared.options.max_buffered_chars)?;
    info!(
        format = request.response_format.as_str(),
        delivery = ?request.delivery,
        chars = request.synthesis.text.chars().count(),
        "speech request"
    );
    let engine_request = EngineRequest::submit(shared, id, &request);
    let response =
        SpeechResponse::new(request, shared.catalog.capabilities().clone(), shared.options.max_whole_audio_seconds);
    let mut speech =
        Speech { engine_request, response, pending: VecDeque::new(), done: false, started: false, trailers: None };
    // Until the head: a whole file is collected and encoded, a stream waits for its first audio,
    // so a request that fails at once still gets a proper error status.
    let head = match speech.next_output().await {
        Next::Error(error) => return Err(error),
        Next::Head(head) => head,
    };
    speech.started = true;
    let mut response = if !speech.response.is_streamed() {
        // The whole file is already there: one body, with its length.
        let body: Vec<u8> = std::iter::from_fn(|| speech.response.poll_output())
            .flat_map(|output| match output {
                ResponseOutput::Body(bytes) => bytes,
                _ => Vec::new(),
            })
            .collect();
        info!(bytes = body.len(), "speech done");
        Response::new(full(Bytes::from(body)))
    } else {
        Response::new(BodyExt::boxed(speech))
    };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(head.content_type));
    for (name, value) in head.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    Ok(response)
}

/// `POST /v1/audio/speech/batch`: every valid item synthesized at once, each a whole file;
/// one JSON reply with each item's audio or error (upstream's shape, `speech_batch`).
pub(crate) async fn create_batch(
    request: Request<Incoming>,
    shared: &Arc<Shared>,
    context: &ConnectionContext,
    id: RequestId,
) -> Response<Body> {
    let batch_id = id.to_string().replacen("speech-http-", "speech-batch-", 1);
    let parsed = match read_body(request, shared).await.and_then(|body| {
        parse_batch_request(&body, &shared.catalog, shared.options.max_buffered_chars, MAX_BATCH_ITEMS)
    }) {
        Ok(items) => items,
        Err(error) => return error_response(shared, &error),
    };
    info!(batch = %batch_id, items = parsed.len(), "speech batch");
    // Dropping the set (the client left) aborts the items' tasks, and so their engine requests.
    let mut tasks = JoinSet::new();
    let seconds = item_audio_seconds(shared.options.max_whole_audio_seconds, parsed.len());
    for (index, item) in parsed.iter().enumerate() {
        if let Ok(item) = item {
            let (shared, item, id) = (shared.clone(), item.clone(), context.next_request_id());
            tasks.spawn(async move { (index, whole_file(&shared, id, item, seconds).await) });
        }
    }
    let mut results: Vec<ItemResult> =
        parsed.iter().map(|item| Err(item.as_ref().err().map(|e| e.message.clone()).unwrap_or_default())).collect();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((index, result)) => results[index] = result,
            Err(e) => warn!(error = %e, "a batch item's task failed"),
        }
    }
    let failed = results.iter().filter(|r| r.is_err()).count();
    info!(batch = %batch_id, failed, "speech batch done");
    let mut response = json(StatusCode::OK, batch_response_json(&batch_id, &parsed, &results));
    // What any item's engine did not honour, as a single request's response says it.
    let mut ignored: Vec<&str> =
        parsed.iter().flatten().flat_map(|item| item.synthesis.ignored.iter().copied()).collect();
    ignored.sort_unstable();
    ignored.dedup();
    if let Some(value) = ignored_header(&ignored).and_then(|v| HeaderValue::from_str(&v).ok()) {
        response.headers_mut().insert(HeaderName::from_static("x-ignored-fields"), value);
    }
    response
}

/// One request synthesized and encoded as a whole file of at most `seconds` of audio: the file
/// and its usage, or why not.
async fn whole_file(shared: &Arc<Shared>, id: RequestId, request: SpeechRequest, seconds: u32) -> ItemResult {
    let engine_request = EngineRequest::submit(shared, id, &request);
    let response = SpeechResponse::collected(request, shared.catalog.capabilities().clone(), seconds);
    let mut speech =
        Speech { engine_request, response, pending: VecDeque::new(), done: false, started: false, trailers: None };
    if let Next::Error(error) = speech.next_output().await {
        return Err(error.message);
    }
    // After the head: the whole file, there already.
    let mut file = Vec::new();
    loop {
        while let Some(output) = speech.response.poll_output() {
            match output {
                ResponseOutput::Body(bytes) => file.extend(bytes),
                ResponseOutput::End => return Ok((file, speech.response.usage())),
                ResponseOutput::Cut(message) => return Err(message),
                ResponseOutput::Abort => speech.engine_request.abort(),
                _ => {}
            }
        }
        let event = speech.engine_request.events.recv().await;
        speech.feed(event);
    }
}

/// One engine request and its event queue; aborted if dropped before its end.
struct EngineRequest {
    id: RequestId,
    engine: Arc<dyn Engine>,
    shared: Arc<Shared>,
    events: mpsc::Receiver<EngineEvent>,
    meter: UtteranceMeter,
    ended: bool,
}

impl EngineRequest {
    fn submit(shared: &Arc<Shared>, id: RequestId, request: &SpeechRequest) -> EngineRequest {
        let (events_tx, events) = mpsc::channel(shared.engine_event_queue);
        let meter = UtteranceMeter::start(&shared.metrics, Transport::Http, request.synthesis.stream);
        crate::engine_link::log_ignored(id, &request.synthesis.ignored);
        shared.engine.submit(id, request.synthesis.clone(), Box::new(ChannelSink::new(events_tx)));
        EngineRequest { id, engine: shared.engine.clone(), shared: shared.clone(), events, meter, ended: false }
    }

    /// Meter an event on its way to the response machine.
    fn meter(&mut self, event: &EngineEventKind) {
        match event {
            EngineEventKind::Audio { pcm, sample_rate } => {
                self.meter.audio(&self.shared.metrics, pcm.len(), *sample_rate)
            }
            EngineEventKind::Finished => {
                self.ended = true;
                self.meter.finished(&self.shared.metrics);
            }
            EngineEventKind::Failed(_) => {
                self.ended = true;
                self.meter.aborted(&self.shared.metrics, Abort::Error);
            }
            _ => {}
        }
    }

    /// The response ended without the rest of the request: stop it.
    fn abort(&mut self) {
        if !self.ended {
            self.ended = true;
            self.meter.aborted(&self.shared.metrics, Abort::Cancelled);
            self.shared.metrics.cancelled(Transport::Http);
            self.engine.abort(self.id);
        }
    }
}

impl Drop for EngineRequest {
    fn drop(&mut self) {
        if !self.ended {
            debug!(request = %self.id, "client gone: aborting the engine request");
            self.meter.aborted(&self.shared.metrics, Abort::Closed);
            self.shared.metrics.cancelled(Transport::Http);
            self.engine.abort(self.id);
        }
    }
}

/// The response in progress: the engine request, the core's machine, and the body chunks it
/// has produced that hyper has not taken yet. After the head it is the streamed body.
struct Speech {
    engine_request: EngineRequest,
    response: SpeechResponse,
    pending: VecDeque<Bytes>,
    done: bool,
    /// The head has gone out: a failure now is counted here (before, as the error answer).
    started: bool,
    /// Headers to send after the body.
    trailers: Option<HeaderMap>,
}

/// What the handler waits for before answering.
enum Next {
    Error(HttpError),
    Head(ResponseHead),
}

impl Speech {
    /// Feed one engine event (or its end: `None`) to the machine.
    fn feed(&mut self, event: Option<EngineEvent>) {
        match event {
            Some(event) => {
                self.engine_request.meter(&event.kind);
                if let (EngineEventKind::Failed(failure), true) = (&event.kind, self.started) {
                    self.engine_request.shared.metrics.error(ErrorKind::Engine);
                    warn!(message = %failure, "speech generation failed mid-stream");
                }
                self.response.handle_engine(event.kind);
            }
            None => {
                self.engine_request.ended = true;
                if self.started {
                    self.engine_request.shared.metrics.error(ErrorKind::Engine);
                }
                self.response.handle_engine_gone();
            }
        }
    }

    /// Carry out the machine's outputs up to the first the handler must answer (an error, the
    /// head), queueing body chunks; encodings run off the runtime.
    async fn next_output(&mut self) -> Next {
        loop {
            while let Some(output) = self.response.poll_output() {
                if let Some(next) = self.take_output(output).await {
                    return next;
                }
            }
            let event = self.engine_request.events.recv().await;
            self.feed(event);
        }
    }

    async fn take_output(&mut self, output: ResponseOutput) -> Option<Next> {
        match output {
            ResponseOutput::Error(error) => {
                self.engine_request.abort();
                return Some(Next::Error(error));
            }
            ResponseOutput::Head(head) => return Some(Next::Head(head)),
            ResponseOutput::Encode(job) => {
                let encoded = encode_off_runtime(job).await;
                self.response.handle_encoded(encoded);
            }
            ResponseOutput::Abort => self.engine_request.abort(),
            ResponseOutput::Body(bytes) => self.pending.push_back(Bytes::from(bytes)),
            ResponseOutput::End => self.done = true,
            // Only after the head, which the streamed body handles.
            ResponseOutput::Cut(_) => self.done = true,
            ResponseOutput::Trailers(_) => {}
        }
        None
    }
}

impl hyper::body::Body for Speech {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(bytes) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.done {
                // hyper sends trailers only to a client that asked for them (`TE: trailers`).
                return Poll::Ready(this.trailers.take().map(|map| Ok(Frame::trailers(map))));
            }
            while let Some(output) = this.response.poll_output() {
                match output {
                    ResponseOutput::Body(bytes) => this.pending.push_back(Bytes::from(bytes)),
                    ResponseOutput::End => {
                        info!("speech done");
                        this.done = true;
                    }
                    ResponseOutput::Cut(message) => {
                        // A raw stream can only be cut short: the client sees an incomplete
                        // transfer rather than a clean end.
                        this.done = true;
                        this.pending.clear();
                        return Poll::Ready(Some(Err(message.into())));
                    }
                    ResponseOutput::Abort => this.engine_request.abort(),
                    ResponseOutput::Trailers(trailers) => {
                        let mut map = HeaderMap::new();
                        for (name, value) in trailers {
                            if let Ok(value) = HeaderValue::from_str(&value) {
                                map.insert(HeaderName::from_static(name), value);
                            }
                        }
                        this.trailers = Some(map);
                    }
                    // Before the head only.
                    ResponseOutput::Error(_) | ResponseOutput::Head(_) | ResponseOutput::Encode(_) => {}
                }
            }
            if !this.pending.is_empty() || this.done {
                continue;
            }
            let event = match this.engine_request.events.poll_recv(cx) {
                Poll::Ready(event) => event,
                Poll::Pending => return Poll::Pending,
            };
            this.feed(event);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty() && self.trailers.is_none()
    }
}
