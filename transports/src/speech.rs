//! `POST /v1/audio/speech`: one request, one engine request, one response.
//!
//! The core validates the body and shapes every byte; this module reads the body, submits to
//! the engine with a sink like the WebSocket path's, and turns engine events into the response:
//! a whole encoded file, or a streamed body (raw audio or SSE) that hyper polls only as fast as
//! the client reads, which is the backpressure. If the client goes away, hyper drops the
//! handler's future or the body, and the request is aborted.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use speechstream_core::capacity::Overloaded;
use speechstream_core::config::ResponseFormat;
use speechstream_core::encode::encode;
use speechstream_core::engine::{Engine, EngineCapabilities, EngineEvent, EngineEventKind, RequestId, WordTiming};
use speechstream_core::session::whole_audio_too_long;
use speechstream_core::speech_http::{
    check_content_type, media_type, parse_speech_request, sse_delta, sse_done, sse_error, streaming_wav_header,
    word_timestamps_header, Delivery, HttpError, SpeechRequest, Usage,
};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::metrics::{ErrorKind, Transport, UtteranceMeter};
use crate::routes::{full, json, Body, BoxError};
use crate::server::Shared;
use crate::sink::ChannelSink;

pub(crate) async fn create_speech(request: Request<Incoming>, shared: &Arc<Shared>, id: RequestId) -> Response<Body> {
    match speak(request, shared, id).await {
        Ok(response) => response,
        Err(error) => {
            let kind = if error.status >= 500 { ErrorKind::Engine } else { ErrorKind::Request };
            shared.metrics.error(kind);
            info!(status = error.status, message = %error.message, "speech request failed");
            let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = json(status, error.body());
            if let Some(refusal) = Overloaded::parse(&error.message).filter(|_| error.status == 503) {
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after_seconds));
            }
            response
        }
    }
}

async fn speak(request: Request<Incoming>, shared: &Arc<Shared>, id: RequestId) -> Result<Response<Body>, HttpError> {
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
    let body = std::str::from_utf8(&body).map_err(|_| HttpError::bad_request("JSON decode error"))?;
    let request = parse_speech_request(body, &shared.capabilities, shared.options.max_buffered_chars)?;
    info!(
        format = request.response_format.as_str(),
        delivery = ?request.delivery,
        chars = request.synthesis.text.chars().count(),
        "speech request"
    );
    let mut job = Job::submit(shared, id, &request);
    match request.delivery {
        Delivery::Whole => whole(job, &request, shared).await,
        Delivery::Audio | Delivery::Sse => {
            // Wait for the first audio before answering, so a request that fails at once
            // still gets a proper error status rather than an empty 200 stream.
            let first = job.next_audio().await?;
            Ok(streamed(job, request, first, shared))
        }
    }
}

/// One engine request and its event queue; aborted if dropped before its end.
struct Job {
    id: RequestId,
    engine: Arc<dyn Engine>,
    shared: Arc<Shared>,
    events: mpsc::Receiver<EngineEvent>,
    meter: UtteranceMeter,
    ended: bool,
}

impl Job {
    fn submit(shared: &Arc<Shared>, id: RequestId, request: &SpeechRequest) -> Job {
        let (events_tx, events) = mpsc::channel(shared.engine_event_queue);
        let meter = UtteranceMeter::start(&shared.metrics, Transport::Http);
        shared.engine.submit(id, request.synthesis.clone(), Box::new(ChannelSink::new(events_tx)));
        Job { id, engine: shared.engine.clone(), shared: shared.clone(), events, meter, ended: false }
    }

    /// The next event that matters: audio (metered), words, or the end.
    fn on_event(&mut self, event: Option<EngineEvent>) -> Step {
        let Some(event) = event else {
            // The engine dropped the sink without a last word.
            self.ended = true;
            return Step::Failed("the engine ended the request without finishing it".to_owned());
        };
        match event.kind {
            EngineEventKind::Audio { pcm, sample_rate } => {
                self.meter.audio(&self.shared.metrics, pcm.len(), sample_rate);
                Step::Audio(pcm)
            }
            EngineEventKind::Words(words) => Step::Words(words),
            EngineEventKind::Codec { .. } => Step::Words(Vec::new()),
            EngineEventKind::Finished => {
                self.ended = true;
                self.meter.finished(&self.shared.metrics);
                Step::Finished
            }
            EngineEventKind::Failed(message) => {
                self.ended = true;
                Step::Failed(message)
            }
        }
    }

    /// Wait for the first non-empty audio (or the end, which is returned as no audio).
    async fn next_audio(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            let event = self.events.recv().await;
            match self.on_event(event) {
                Step::Audio(pcm) if !pcm.is_empty() => return Ok(Some(pcm)),
                Step::Audio(_) | Step::Words(_) => {}
                Step::Finished => return Ok(None),
                Step::Failed(message) => return Err(generation_failed(&message)),
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.ended {
            debug!(request = %self.id, "client gone: aborting the engine request");
            self.shared.metrics.cancelled(Transport::Http);
            self.engine.abort(self.id);
        }
    }
}

enum Step {
    Audio(Vec<u8>),
    Words(Vec<WordTiming>),
    Finished,
    Failed(String),
}

/// A failed engine request: 500, or 503 (with `Retry-After`, see `create_speech`) when the
/// engine refused it for lack of capacity.
fn generation_failed(message: &str) -> HttpError {
    let message = format!("Speech generation failed: {message}");
    match Overloaded::parse(&message) {
        Some(_) => HttpError::new(503, "ServiceUnavailableError", message),
        None => HttpError::new(500, "InternalServerError", message),
    }
}

/// Collect the whole utterance, encode it, answer with the file and its usage headers.
async fn whole(mut job: Job, request: &SpeechRequest, shared: &Shared) -> Result<Response<Body>, HttpError> {
    let mut pcm = Vec::new();
    let mut words = Vec::new();
    let seconds = shared.options.max_whole_audio_seconds;
    let limit = u64::from(seconds) * u64::from(request.sample_rate) * 2;
    loop {
        let event = job.events.recv().await;
        match job.on_event(event) {
            Step::Audio(chunk) => {
                if (pcm.len() + chunk.len()) as u64 > limit {
                    // Dropping the job aborts its engine request.
                    let message = whole_audio_too_long(seconds, "stream_format='audio' or 'sse'");
                    return Err(HttpError::bad_request(format!("Speech generation failed: {message}")));
                }
                pcm.extend_from_slice(&chunk);
            }
            Step::Words(more) => words.extend(more),
            Step::Finished => break,
            Step::Failed(message) => return Err(generation_failed(&message)),
        }
    }
    let usage = Usage::new(&request.synthesis.text, pcm.len() as u64, &shared.capabilities);
    let (format, rate) = (request.response_format, request.sample_rate);
    // mp3 and opus encoding is real CPU work: keep it off the runtime's threads.
    let encoded = tokio::task::spawn_blocking(move || {
        let samples: Vec<i16> = pcm.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
        encode(format, &samples, rate)
    })
    .await
    .map_err(|e| generation_failed(&e.to_string()))?
    .map_err(|e| generation_failed(&format!("audio encoding failed: {e}")))?;
    info!(bytes = encoded.len(), "speech done");
    let mut response = Response::new(full(Bytes::from(encoded)));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(media_type(format)));
    for (name, value) in usage.headers() {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    }
    if request.synthesis.word_timestamps {
        let (name, value) = match word_timestamps_header(&words) {
            Ok(list) => ("x-word-timestamps", list),
            Err(omitted) => ("x-word-timestamps-omitted", omitted),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    Ok(response)
}

fn streamed(job: Job, request: SpeechRequest, first: Option<Vec<u8>>, shared: &Shared) -> Response<Body> {
    let sse = request.delivery == Delivery::Sse;
    let format = request.response_format;
    let mut stream = SpeechStream {
        job,
        sse,
        format,
        pending: VecDeque::new(),
        // A streamed wav starts with the header that leaves its sizes open.
        header: (format == ResponseFormat::Wav).then(|| streaming_wav_header(request.sample_rate).to_vec()),
        audio_bytes: 0,
        sent_audio: false,
        done: false,
        text: request.synthesis.text,
        capabilities: shared.capabilities.clone(),
    };
    match first {
        Some(pcm) => stream.push_audio(pcm),
        None => stream.finish(),
    }
    let content_type = if sse { "text/event-stream" } else { media_type(format) };
    let mut response = Response::new(BodyExt::boxed(stream));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if sse {
        response.headers_mut().insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    response
}

/// The body of a streamed response: engine events turned into raw audio or SSE events as
/// hyper asks for the next frame.
struct SpeechStream {
    job: Job,
    sse: bool,
    format: ResponseFormat,
    pending: VecDeque<Bytes>,
    header: Option<Vec<u8>>,
    /// PCM bytes received from the engine (usage).
    audio_bytes: u64,
    sent_audio: bool,
    done: bool,
    text: String,
    capabilities: Arc<EngineCapabilities>,
}

impl SpeechStream {
    fn push_audio(&mut self, pcm: Vec<u8>) {
        if pcm.is_empty() {
            return;
        }
        self.audio_bytes += pcm.len() as u64;
        let bytes = match self.header.take() {
            Some(mut header) => {
                header.extend_from_slice(&pcm);
                header
            }
            None => pcm,
        };
        self.sent_audio = true;
        self.push_audio_bytes(bytes);
    }

    fn finish(&mut self) {
        if let Some(header) = self.header.take() {
            // No audio at all: a valid, empty streamed wav is still just the header.
            self.push_audio_bytes(header);
        }
        if self.sse {
            let usage = Usage::new(&self.text, self.audio_bytes, &self.capabilities);
            self.pending.push_back(Bytes::from(sse_done(&usage)));
        }
        info!(audio_bytes = self.audio_bytes, "speech done");
        self.done = true;
    }

    fn push_audio_bytes(&mut self, bytes: Vec<u8>) {
        if self.sse {
            self.pending.push_back(Bytes::from(sse_delta(&bytes, self.format)));
        } else {
            self.pending.push_back(Bytes::from(bytes));
        }
    }

    /// A failure mid-stream: SSE says so in an event; a raw stream can only be cut short, so
    /// the client sees an incomplete transfer rather than a clean end.
    fn fail(&mut self, message: &str) -> Option<BoxError> {
        warn!(message, "speech generation failed mid-stream");
        self.job.shared.metrics.error(ErrorKind::Engine);
        self.done = true;
        if self.sse {
            let text = format!("Speech generation failed: {message}");
            self.pending.push_back(Bytes::from(sse_error(&text, self.sent_audio)));
            None
        } else {
            Some(format!("speech generation failed: {message}").into())
        }
    }
}

impl hyper::body::Body for SpeechStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(bytes) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            let event = match this.job.events.poll_recv(cx) {
                Poll::Ready(event) => event,
                Poll::Pending => return Poll::Pending,
            };
            match this.job.on_event(event) {
                Step::Audio(pcm) => this.push_audio(pcm),
                Step::Words(_) => {}
                Step::Finished => this.finish(),
                Step::Failed(message) => {
                    if let Some(error) = this.fail(&message) {
                        return Poll::Ready(Some(Err(error)));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_empty()
    }
}
