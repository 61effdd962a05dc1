//! speechstream-core: vLLM-Omni's streaming speech WebSocket protocol
//! (`WS /v1/audio/speech/stream`) as a synchronous, I/O-free state machine.
//!
//! It parses client frames, validates `session.config`, runs one [`Session`] per connection
//! and encodes audio. It does no I/O, reads no clock and spawns no thread: its driver feeds it
//! frames, engine events and the time, and carries out what it asks for. So it runs under any
//! runtime, or none: a thread per connection, tokio, smol, or a test with a fake clock. It is
//! not a server (speechstream-transports is ours, on hyper) and not a voice (an [`Engine`] is;
//! the module `synthetic`, with the feature of that name, has one that needs no model).
//!
//! # The protocol in one session
//!
//! ```text
//! -> {"type":"session.config","voice":"vivian","stream_audio":true,"response_format":"pcm"}
//! -> {"type":"input.text","text":"Hello world."}       (any number of these)
//! -> {"type":"input.done"}                              (say what was buffered)
//! <- {"type":"audio.start","utterance_index":0,...}
//! <- binary frames: 24 kHz s16le mono PCM
//! <- {"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":...,"error":false}
//! <- {"type":"session.done","utterance_index":0,"total_sentences":1}
//! -> more utterances, then {"type":"session.close"}
//! ```
//!
//! # Driving a session
//!
//! A driver owns one [`Session`] per connection and an [`Engine`] shared by all of them. It
//! loops: wait for an input (a client frame, an engine event, or the session's deadline),
//! feed it to the session, then drain [`Session::poll_output`] and carry each output out in
//! order (write a frame, submit or abort an engine request, note a request's end, close),
//! then re-read [`Session::poll_timeout`]. That is the whole contract ([`Session`] spells it
//! out).
//!
//! Here the client's frames are a list and the clock is advanced by hand, so the loop fits in
//! a doctest; a real driver waits on its socket, the engine's events and the deadline at once.
//! The crate's `examples/` run the same loop on a blocking server (a thread per connection,
//! `tungstenite`), on the `smol` runtime, and in memory as a pattern for tests.
//!
//! ```
//! use std::collections::{HashSet, VecDeque};
//! use std::sync::{mpsc, Arc};
//! use std::time::Instant;
//!
//! use speechstream_core::engine::{Engine, EngineEvent, EventSink, SynthesisRequest};
//! use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};
//! use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions};
//!
//! // The engine delivers a request's events into a sink the driver gives it.
//! struct Events(mpsc::Sender<EngineEvent>);
//! impl EventSink for Events {
//!     fn send(&self, event: EngineEvent) -> bool {
//!         self.0.send(event).is_ok() // false once the driver is gone: the engine stops
//!     }
//! }
//!
//! let engine = SyntheticEngine::new(SyntheticOptions::default());
//! let (events_tx, events) = mpsc::channel();
//! let mut now = Instant::now(); // the driver's clock: the session never reads one
//! let capabilities = Arc::new(engine.capabilities().clone());
//! let mut session = Session::new(now, 1, capabilities, Arc::new(SessionOptions::default()));
//!
//! let mut client: VecDeque<ClientFrame> = [
//!     r#"{"type":"session.config","stream_audio":true,"response_format":"pcm"}"#,
//!     r#"{"type":"input.text","text":"Hello world."}"#,
//!     r#"{"type":"input.done"}"#,
//! ]
//! .into_iter()
//! .map(|text| ClientFrame::Text(text.to_owned()))
//! .collect();
//! let mut in_flight = HashSet::new(); // engine requests not finished, failed or aborted
//! let (mut texts, mut audio, mut close) = (Vec::new(), Vec::new(), None);
//!
//! while !session.is_closed() {
//!     // Wait for the next input. While a request is in flight its events come next; a real
//!     // driver would also keep reading the socket (an `input.cancel` may arrive).
//!     if !in_flight.is_empty() {
//!         let event: EngineEvent = events.recv().expect("the engine ends every request");
//!         // `Err`: an event of a request already aborted; ignore it.
//!         let _ = session.handle_engine(now, event);
//!     } else if let Some(frame) = client.pop_front() {
//!         session.handle_client(now, frame);
//!     } else if let Some(deadline) = session.poll_timeout() {
//!         // The client went quiet: jump the clock to the deadline (a real driver sleeps).
//!         now = deadline;
//!         session.handle_timeout(now);
//!     }
//!     // Carry out everything the session asked for, in order.
//!     while let Some(output) = session.poll_output() {
//!         match output {
//!             Output::Text(json) => texts.push(json),
//!             Output::Binary(bytes) => audio.extend(bytes),
//!             Output::Engine(EngineCommand::Synthesize { id, request }) => {
//!                 in_flight.insert(id);
//!                 engine.submit(id, request, Box::new(Events(events_tx.clone())));
//!             }
//!             Output::Engine(EngineCommand::Abort { id }) => engine.abort(id),
//!             // The request is over (finished, failed or aborted): the session says so.
//!             Output::RequestEnded { id, .. } => {
//!                 in_flight.remove(&id);
//!             }
//!             Output::Close(code) => close = Some(code), // send a close frame, end the connection
//!             // A whole file to encode; a real driver runs it off its event loop.
//!             Output::Encode { id, job } => {
//!                 let _ = session.handle_encoded(now, id, job.run());
//!             }
//!         }
//!     }
//! }
//!
//! let types: Vec<String> = texts
//!     .iter()
//!     .map(|json| serde_json::from_str::<serde_json::Value>(json).unwrap()["type"].as_str().unwrap().to_owned())
//!     .collect();
//! assert_eq!(types, ["audio.start", "audio.done", "session.done", "error"]);
//! assert!(texts[1].contains(&format!(r#""total_bytes":{}"#, audio.len())));
//! assert!(texts[3].contains("Idle timeout: no message received"));
//! assert_eq!(close, Some(1000));
//! // The synthetic engine is deterministic: the audio is what it renders for the text.
//! let request = SynthesisRequest::new("Hello world.").with_stream(true);
//! assert_eq!(audio, engine.render(&request).0);
//! ```
//!
//! # Writing an engine
//!
//! An engine implements [`Engine`]: it reports its [`EngineCapabilities`](engine::EngineCapabilities),
//! takes requests with an [`EventSink`](engine::EventSink) for their events, and stops them on
//! abort. The trait's docs have a minimal one.
//!
//! # What is stable
//!
//! The API is [`session`] and [`engine`] (the driver's side and the engine's side), the
//! server's names for an engine's voices and models in [`catalog`], several engines served as
//! one in [`engines`], the types
//! they carry from [`config`], [`parse`] and [`json`], the encoders in [`encode`] and [`codec`],
//! the rules of the OpenAI-style HTTP endpoint in [`speech_http`] and its response machine in
//! [`speech_response`], Home Assistant's Wyoming protocol in [`wyoming`] (a second machine over
//! the same engine), the sentence splitter in [`split`], and `synthetic` (with the feature of
//! that name). They follow semver (0.x: a minor version may break them); the public surface
//! is listed in `core/api.txt`, which a test keeps in step with the code, so a change to it
//! shows in review. Anything `#[doc(hidden)]` (the invariant checker behind the `check` feature,
//! which the fuzz targets and property tests share) is not API and may change in any release.
//!
//! Enums that describe data (formats, task types, engine events, failures, parse errors) and
//! the request and capability structs ([`SynthesisRequest`](engine::SynthesisRequest),
//! [`EngineCapabilities`](engine::EngineCapabilities), [`Voice`](engine::Voice), ...) are
//! `#[non_exhaustive]`, so they can grow in a minor release: match them with a wildcard arm,
//! build the structs with their constructors and `with_` methods. The enums a driver or an
//! engine must carry out in full ([`session::Output`], [`session::EngineCommand`],
//! [`session::ClientFrame`], [`wyoming::Output`], [`speech_response::ResponseOutput`],
//! [`engine::TrySendError`]) are exhaustive on purpose: a new variant there is a breaking
//! change, which the compiler points out to every driver, rather than one a wildcard arm
//! would silently drop.
//!
//! # Features
//!
//! - `synthetic`: the module `synthetic`, a deterministic engine (a tone per word, no model)
//!   for examples, tests and client development.
//! - `check`: the invariant checker the property tests and fuzz targets share (a test harness,
//!   not API).

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod capacity;
pub mod catalog;
// The invariant checker and its byte-driven session driver: a test harness for the fuzz targets
// and the property tests (other crates), behind the `check` feature. Not part of the API.
#[cfg(feature = "check")]
#[doc(hidden)]
pub mod check;
pub mod codec;
pub mod commitment;
pub mod config;
pub mod encode;
pub mod engine;
pub mod engines;
pub mod json;
mod messages;
pub mod parse;
mod pydantic;
pub mod resample;
pub mod session;
pub mod speech_batch;
pub mod speech_http;
pub mod speech_response;
pub mod split;
#[cfg(feature = "synthetic")]
pub mod synthetic;
mod text;
pub mod wyoming;

pub use engine::Engine;
pub use session::Session;
