//! The response to one `POST /v1/audio/speech` as a sans-IO machine (docs/protocol.md §f.2):
//! engine events in, the response out (its head, its body in chunks, its end), the way h11
//! does HTTP. A transport only moves what comes out: it never decides what a response holds.
//!
//! A driver makes a [`SpeechResponse`] for a request [`parse_speech_request`] accepted, submits
//! the request's [`SynthesisRequest`](crate::engine::SynthesisRequest) to the engine, feeds
//! every event to [`SpeechResponse::handle_engine`] (or [`SpeechResponse::handle_engine_gone`]
//! if the engine drops the request), and after each drains [`SpeechResponse::poll_output`]:
//!
//! - [`ResponseOutput::Error`]: answer with this error instead (only ever before the head);
//! - [`ResponseOutput::Head`], then [`ResponseOutput::Body`] chunks, then
//!   [`ResponseOutput::End`]; or [`ResponseOutput::Cut`] where a raw stream fails after its
//!   head (the body ends in an error, so the client sees an incomplete transfer);
//! - [`ResponseOutput::Encode`]: a whole file to encode off the driver's event loop, whose
//!   result goes to [`SpeechResponse::handle_encoded`];
//! - [`ResponseOutput::Abort`]: the response no longer wants the engine request (a limit).
//!
//! A streamed response sends its head only with the first audio, so a request that fails at
//! once still gets an error status rather than an empty 200.
//!
//! [`parse_speech_request`]: crate::speech_http::parse_speech_request

use std::collections::VecDeque;
use std::sync::Arc;

use crate::encode::{AudioStream, EncodeJob, Encoded, Paging, WholeAudio};
use crate::engine::{EngineCapabilities, EngineEventKind, Failure, WordTiming};
use crate::speech_http::{
    ignored_header, media_type, sse_delta, sse_done, sse_error, word_timestamps_header, Delivery, HttpError,
    SpeechRequest, Usage,
};

/// What the response wants done next; carry them out in order.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseOutput {
    /// Answer with this error (its status and JSON body); nothing follows.
    Error(HttpError),
    /// The response head: status 200 and these headers. Once, before any body.
    Head(ResponseHead),
    /// The next bytes of the body.
    Body(Vec<u8>),
    /// The body is complete.
    End,
    /// The body breaks off with this error (a raw stream that failed after its head).
    Cut(String),
    /// Headers that follow the body (HTTP trailers, sent where the client asked for them with
    /// `TE: trailers`): the usage of a whole file sent as it was made. Just before `End`.
    Trailers(Vec<(&'static str, String)>),
    /// Encode a whole file where it does not hold up other requests, then hand the result to
    /// [`SpeechResponse::handle_encoded`].
    Encode(EncodeJob),
    /// Stop the engine request: the response ended without it.
    Abort,
}

/// A 200 response's head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The other headers, lowercase names.
    pub headers: Vec<(&'static str, String)>,
}

/// One speech response; see the [module docs](self).
#[derive(Debug)]
pub struct SpeechResponse {
    request: SpeechRequest,
    capabilities: Arc<EngineCapabilities>,
    state: State,
    outputs: VecDeque<ResponseOutput>,
    /// PCM bytes received from the engine (usage).
    audio_bytes: u64,
    words: Vec<WordTiming>,
    /// A whole file sent as it is made.
    progressive: bool,
}

#[derive(Debug)]
enum State {
    /// Collecting a whole file.
    Collecting(WholeAudio),
    /// The whole file is being encoded.
    Encoding,
    /// Streamed, waiting for the first audio before the head.
    AwaitingAudio,
    /// Streamed, head sent; `audio` encodes at the response's rate (made with the first
    /// audio, so at the engine's rate).
    Streaming { audio: Option<Box<AudioStream>>, sent_audio: bool },
    /// Ended: nothing more comes out.
    Done,
}

impl SpeechResponse {
    /// The response to `request` (accepted by
    /// [`parse_speech_request`](crate::speech_http::parse_speech_request)) from an engine with
    /// `capabilities`; a whole file holds at most `max_whole_audio_seconds` of audio.
    pub fn new(
        request: SpeechRequest,
        capabilities: Arc<EngineCapabilities>,
        max_whole_audio_seconds: u32,
    ) -> SpeechResponse {
        let progressive = progressive(&request);
        SpeechResponse::with(request, capabilities, max_whole_audio_seconds, progressive)
    }

    /// [`SpeechResponse::new`] for a whole file held until its end, whatever its format (a
    /// batch item, which goes into a JSON reply), within `max_whole_audio_seconds`.
    pub fn collected(
        request: SpeechRequest,
        capabilities: Arc<EngineCapabilities>,
        max_whole_audio_seconds: u32,
    ) -> SpeechResponse {
        SpeechResponse::with(request, capabilities, max_whole_audio_seconds, false)
    }

    fn with(
        request: SpeechRequest,
        capabilities: Arc<EngineCapabilities>,
        max_whole_audio_seconds: u32,
        progressive: bool,
    ) -> SpeechResponse {
        let state = match request.delivery {
            Delivery::Whole if !progressive => {
                State::Collecting(WholeAudio::new(request.response_format, max_whole_audio_seconds))
            }
            Delivery::Whole | Delivery::Audio | Delivery::Sse => State::AwaitingAudio,
        };
        let outputs = VecDeque::new();
        SpeechResponse { request, capabilities, state, outputs, audio_bytes: 0, words: Vec::new(), progressive }
    }

    /// Whether the body is sent as it is made (streamed, or a whole file whose bytes can go
    /// out before its end): then the head comes with the first audio and the driver forwards
    /// the body as it comes; otherwise the head comes with the whole file.
    pub fn is_streamed(&self) -> bool {
        self.request.delivery != Delivery::Whole || self.progressive
    }

    /// The request being answered.
    pub fn request(&self) -> &SpeechRequest {
        &self.request
    }

    /// The usage so far: the input's words, the audio received (all of it once done).
    pub fn usage(&self) -> Usage {
        Usage::new(&self.request.synthesis.text, self.audio_bytes, self.capabilities.serving(&self.request.synthesis))
    }

    /// Feed an event of the engine request.
    pub fn handle_engine(&mut self, event: EngineEventKind) {
        match event {
            EngineEventKind::Audio { pcm, sample_rate } => self.on_audio(pcm, sample_rate),
            EngineEventKind::Words(words) => self.words.extend(words),
            // Not asked for over HTTP.
            EngineEventKind::Codec { .. } => {}
            EngineEventKind::Finished => self.on_finished(),
            EngineEventKind::Failed(failure) => self.fail(&failure),
        }
    }

    /// The engine dropped the request without finishing or failing it.
    pub fn handle_engine_gone(&mut self) {
        self.fail(&Failure::Engine("the engine ended the request without finishing it".to_owned()));
    }

    /// Feed the result of the [`ResponseOutput::Encode`] job.
    pub fn handle_encoded(&mut self, encoded: Encoded) {
        if !matches!(self.state, State::Encoding) {
            return;
        }
        self.state = State::Done;
        match encoded.0 {
            Ok(file) => {
                let mut headers = usage_headers(self.usage(), |_| true);
                if self.request.synthesis.output.words() {
                    headers.push(match word_timestamps_header(&self.words) {
                        Ok(list) => ("x-word-timestamps", list),
                        Err(omitted) => ("x-word-timestamps-omitted", omitted),
                    });
                }
                let content_type = media_type(self.request.response_format);
                self.push_head(content_type, headers);
                self.outputs.push_back(ResponseOutput::Body(file));
                self.outputs.push_back(ResponseOutput::End);
            }
            Err(message) => self.outputs.push_back(ResponseOutput::Error(generation_failed(&Failure::Engine(message)))),
        }
    }

    /// The next thing to do, in order; `None` once everything queued has been taken.
    #[must_use = "an output is work the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<ResponseOutput> {
        self.outputs.pop_front()
    }

    /// The response has ended (its end, its error, or its cut is queued or taken): no more
    /// engine events are wanted.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn sse(&self) -> bool {
        self.request.delivery == Delivery::Sse
    }

    fn on_audio(&mut self, pcm: Vec<u8>, sample_rate: u32) {
        match &mut self.state {
            State::Collecting(audio) => {
                if let Err(message) = audio.push(&pcm, sample_rate, "stream_format='audio' or 'sse'") {
                    self.state = State::Done;
                    self.outputs.push_back(ResponseOutput::Abort);
                    let error = HttpError::bad_request(format!("Speech generation failed: {message}"));
                    self.outputs.push_back(ResponseOutput::Error(error));
                    return;
                }
                self.audio_bytes += pcm.len() as u64;
            }
            State::AwaitingAudio if !pcm.is_empty() => {
                self.start_stream();
                self.stream_audio(pcm, sample_rate);
            }
            State::Streaming { .. } => self.stream_audio(pcm, sample_rate),
            State::AwaitingAudio | State::Encoding | State::Done => {}
        }
    }

    fn on_finished(&mut self) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Collecting(audio) => {
                self.state = State::Encoding;
                let job = audio
                    .finish(self.capabilities.sample_rate_for(&self.request.synthesis))
                    .at_rate(self.request.sample_rate);
                self.outputs.push_back(ResponseOutput::Encode(job));
            }
            State::AwaitingAudio => {
                self.start_stream();
                self.end_stream();
            }
            State::Streaming { audio, sent_audio } => {
                self.state = State::Streaming { audio, sent_audio };
                self.end_stream();
            }
            state @ (State::Encoding | State::Done) => self.state = state,
        }
    }

    fn fail(&mut self, failure: &Failure) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Collecting(_) | State::AwaitingAudio => {
                self.outputs.push_back(ResponseOutput::Error(generation_failed(failure)));
            }
            State::Streaming { sent_audio, .. } => {
                if self.sse() {
                    let text = format!("Speech generation failed: {failure}");
                    self.outputs.push_back(ResponseOutput::Body(sse_error(&text, sent_audio).into_bytes()));
                    self.outputs.push_back(ResponseOutput::End);
                } else {
                    self.outputs.push_back(ResponseOutput::Cut(format!("speech generation failed: {failure}")));
                }
            }
            state @ (State::Encoding | State::Done) => self.state = state,
        }
    }

    /// The response head, with `x-ignored-fields` naming what the engine will not honour.
    fn push_head(&mut self, content_type: &'static str, mut headers: Vec<(&'static str, String)>) {
        if let Some(ignored) = ignored_header(&self.request.synthesis.ignored) {
            headers.push(("x-ignored-fields", ignored));
        }
        self.outputs.push_back(ResponseOutput::Head(ResponseHead { content_type, headers }));
    }

    fn start_stream(&mut self) {
        let format = self.request.response_format;
        let (content_type, headers) = if self.sse() {
            ("text/event-stream", vec![("cache-control", "no-cache".to_owned())])
        } else if self.request.delivery == Delivery::Whole {
            // The usage known now; the output tokens follow as trailers.
            let mut headers = usage_headers(self.usage(), |name| !TRAILED.contains(&name));
            headers.push(("trailer", TRAILED.join(", ")));
            (media_type(format), headers)
        } else {
            (media_type(format), Vec::new())
        };
        self.push_head(content_type, headers);
        self.state = State::Streaming { audio: None, sent_audio: false };
    }

    fn stream_audio(&mut self, pcm: Vec<u8>, sample_rate: u32) {
        if pcm.is_empty() {
            return;
        }
        self.audio_bytes += pcm.len() as u64;
        let (format, rate, paging) = (self.request.response_format, self.request.sample_rate, self.paging());
        let State::Streaming { audio, sent_audio } = &mut self.state else { return };
        let encoded = match audio {
            Some(stream) => stream.push_s16le(&pcm, sample_rate),
            None => AudioStream::new(format, sample_rate, rate, paging)
                .and_then(|stream| audio.insert(Box::new(stream)).push_s16le(&pcm, sample_rate)),
        };
        match encoded {
            Ok(bytes) if bytes.is_empty() => {}
            Ok(bytes) => {
                *sent_audio = true;
                self.push_stream_bytes(bytes);
            }
            Err(e) => self.fail(&Failure::Engine(e.0)),
        }
    }

    fn end_stream(&mut self) {
        if let State::Streaming { audio, .. } = &mut self.state {
            // No audio at all: still a valid, empty file of the format (a wav is its header).
            let stream = match audio.take() {
                Some(stream) => Ok(*stream),
                None => AudioStream::new(
                    self.request.response_format,
                    self.request.sample_rate,
                    self.request.sample_rate,
                    self.paging(),
                ),
            };
            match stream.and_then(AudioStream::finish) {
                Ok(bytes) if bytes.is_empty() => {}
                Ok(bytes) => self.push_stream_bytes(bytes),
                Err(e) => return self.fail(&Failure::Engine(e.0)),
            }
        }
        let usage = self.usage();
        if self.sse() {
            self.outputs.push_back(ResponseOutput::Body(sse_done(&usage).into_bytes()));
        } else if self.request.delivery == Delivery::Whole {
            self.outputs.push_back(ResponseOutput::Trailers(usage_headers(usage, |name| TRAILED.contains(&name))));
        }
        self.outputs.push_back(ResponseOutput::End);
        self.state = State::Done;
    }

    /// A whole file sent as it is made keeps the file's exact bytes; a stream pages eagerly.
    fn paging(&self) -> Paging {
        if self.request.delivery == Delivery::Whole {
            Paging::AsFile
        } else {
            Paging::Eager
        }
    }

    fn push_stream_bytes(&mut self, bytes: Vec<u8>) {
        let body = if self.sse() { sse_delta(&bytes, self.request.response_format).into_bytes() } else { bytes };
        self.outputs.push_back(ResponseOutput::Body(body));
    }
}

/// The usage headers known only at the end of a whole file sent as it is made: its trailers.
const TRAILED: [&str; 2] = ["x-vllm-omni-output-tokens", "x-vllm-omni-total-tokens"];

/// The usage headers whose names pass `keep`.
fn usage_headers(usage: Usage, keep: impl Fn(&str) -> bool) -> Vec<(&'static str, String)> {
    usage.headers().into_iter().filter(|(name, _)| keep(name)).map(|(name, value)| (name, value.to_string())).collect()
}

/// Whether a whole file is sent as it is made: where its bytes do not depend on what follows
/// (raw `pcm`, G.711, ADTS `aac`, and Ogg `opus` paged as its file is), so the client gets them early and
/// the same file (as OpenAI's endpoint sends its body); not with word timings, which ride a
/// header. (Opus is then encoded chunk by chunk as the body is polled, as a streamed one is.)
fn progressive(request: &SpeechRequest) -> bool {
    use crate::config::ResponseFormat as F;
    request.delivery == Delivery::Whole
        && !request.synthesis.output.words()
        && matches!(request.response_format, F::Pcm | F::Opus | F::Ulaw | F::Alaw | F::Aac)
}

/// The error of a generation that failed before the response began: 500, or 503 when the
/// engine refused it for lack of capacity ([`Failure::Overloaded`], with the
/// [`HttpError::retry_after_seconds`] the transport sends as `Retry-After`).
pub fn generation_failed(failure: &Failure) -> HttpError {
    let message = format!("Speech generation failed: {failure}");
    match failure.overloaded() {
        Some(refusal) => HttpError {
            retry_after_seconds: Some(refusal.retry_after_seconds),
            ..HttpError::new(503, "ServiceUnavailableError", message)
        },
        None => HttpError::new(500, "InternalServerError", message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speech_http::parse_speech_request;

    fn response(body: &str) -> SpeechResponse {
        let capabilities =
            Arc::new(EngineCapabilities { word_timestamps: true, ..EngineCapabilities::new("m", 24_000) });
        let request = parse_speech_request(body, &Arc::clone(&capabilities).into(), 1 << 20).expect("valid request");
        SpeechResponse::new(request, capabilities, 1)
    }

    fn drain(r: &mut SpeechResponse) -> Vec<ResponseOutput> {
        std::iter::from_fn(|| r.poll_output()).collect()
    }

    fn audio(n: usize) -> EngineEventKind {
        EngineEventKind::Audio { pcm: vec![1; n], sample_rate: 24_000 }
    }

    #[test]
    fn whole_file_is_encoded_then_sent_with_usage() {
        let mut r = response(r#"{"input":"two words","response_format":"pcm","word_timestamps":true}"#);
        r.handle_engine(audio(4));
        r.handle_engine(EngineEventKind::Words(vec![WordTiming {
            word: "two".into(),
            start_ms: 0,
            end_ms: 5,
            chars: None,
        }]));
        r.handle_engine(EngineEventKind::Finished);
        let [ResponseOutput::Encode(job)] = &drain(&mut r)[..] else { panic!("one encode") };
        r.handle_encoded(job.clone().run());
        let out = drain(&mut r);
        let ResponseOutput::Head(head) = &out[0] else { panic!("{out:?}") };
        assert_eq!(head.content_type, "audio/pcm");
        assert!(head.headers.contains(&("x-vllm-omni-input-text-tokens", "2".to_owned())));
        assert!(head.headers.iter().any(|(name, value)| *name == "x-word-timestamps" && value.contains("\"two\"")));
        assert_eq!(&out[1..], [ResponseOutput::Body(vec![1; 4]), ResponseOutput::End]);
        assert!(r.is_done());
    }

    #[test]
    fn whole_pcm_goes_out_as_it_is_made_with_its_usage_after() {
        let mut r = response(r#"{"input":"two words","response_format":"pcm"}"#);
        assert!(r.is_streamed());
        r.handle_engine(audio(4));
        let out = drain(&mut r);
        let ResponseOutput::Head(head) = &out[0] else { panic!("{out:?}") };
        assert!(head.headers.contains(&("x-vllm-omni-input-tokens", "2".to_owned())));
        assert_eq!(out[1], ResponseOutput::Body(vec![1; 4]));
        r.handle_engine(audio(48_000 * 2)); // past the whole-file limit: no limit when streamed
        r.handle_engine(EngineEventKind::Finished);
        let out = drain(&mut r);
        assert_eq!(out[0], ResponseOutput::Body(vec![1; 96_000]));
        let ResponseOutput::Trailers(trailers) = &out[1] else { panic!("{out:?}") };
        assert_eq!(trailers[0], ("x-vllm-omni-output-tokens", "26".to_owned()));
        assert_eq!(out[2], ResponseOutput::End);
        // Word timings ride a header: that whole file waits for its end.
        assert!(!response(r#"{"input":"x","response_format":"pcm","word_timestamps":true}"#).is_streamed());
        assert!(!response(r#"{"input":"x","response_format":"mp3"}"#).is_streamed());
        let capabilities = Arc::new(EngineCapabilities::new("m", 24_000));
        let request =
            parse_speech_request(r#"{"input":"x","response_format":"pcm"}"#, &Arc::clone(&capabilities).into(), 100)
                .unwrap();
        let mut held = SpeechResponse::collected(request, capabilities, 1);
        assert!(!held.is_streamed());
        held.handle_engine(audio(48_002));
        assert!(matches!(drain(&mut held)[..], [ResponseOutput::Abort, ResponseOutput::Error(_)]), "over its limit");
    }

    #[test]
    fn whole_file_past_its_limit_aborts_with_a_400() {
        let mut r = response(r#"{"input":"x"}"#);
        r.handle_engine(audio(48_000));
        r.handle_engine(audio(2));
        let out = drain(&mut r);
        assert_eq!(out[0], ResponseOutput::Abort);
        let ResponseOutput::Error(e) = &out[1] else { panic!("{out:?}") };
        assert_eq!((e.status, e.message.contains("stream_format='audio' or 'sse'")), (400, true));
    }

    #[test]
    fn streamed_wav_waits_for_audio_then_leads_with_its_header() {
        let mut r = response(r#"{"input":"x","stream_format":"audio"}"#);
        r.handle_engine(audio(0));
        assert!(drain(&mut r).is_empty());
        r.handle_engine(audio(2));
        r.handle_engine(EngineEventKind::Finished);
        let out = drain(&mut r);
        assert!(matches!(&out[0], ResponseOutput::Head(h) if h.content_type == "audio/wav"));
        let ResponseOutput::Body(first) = &out[1] else { panic!("{out:?}") };
        assert_eq!((first.len(), &first[..4]), (46, &b"RIFF"[..]));
        assert_eq!(out[2], ResponseOutput::End);
    }

    #[test]
    fn failures_are_an_error_before_the_head_and_an_event_or_a_cut_after() {
        let mut r = response(r#"{"input":"x","stream":true}"#);
        r.handle_engine(EngineEventKind::Failed("boom".into()));
        assert_eq!(drain(&mut r), [ResponseOutput::Error(generation_failed(&"boom".into()))]);
        let mut r = response(r#"{"input":"x","stream":true,"response_format":"pcm"}"#);
        r.handle_engine(audio(2));
        r.handle_engine(EngineEventKind::Failed("boom".into()));
        let out = drain(&mut r);
        let ResponseOutput::Body(event) = &out[2] else { panic!("{out:?}") };
        let event = String::from_utf8_lossy(event);
        assert!(event.starts_with("event: speech.audio.error") && event.contains("\"partial_audio\":true"));
        let mut r = response(r#"{"input":"x","stream_format":"audio","response_format":"pcm"}"#);
        r.handle_engine(audio(2));
        r.handle_engine_gone();
        assert!(matches!(drain(&mut r).last(), Some(ResponseOutput::Cut(_))));
    }
}
