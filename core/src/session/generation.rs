//! Generation: one utterance (or one unit of it) as an engine request, from its start message
//! through the engine's events to its done frames. Every ending goes through
//! `Session::close_generation`.

use std::time::Instant;

use base64::Engine as _;

use super::edges::{Edges, TextEnd};
use super::heard::heard;
use super::input::UnitEnded;
use super::{EngineCommand, Output, RequestEnd, Session, State, UnknownRequest, CLOSE_GOING_AWAY};
use crate::codec;
use crate::config::{OutputMode, ResponseFormat, SessionConfig};
use crate::encode::{AudioStream, Encoded, Paging, WholeAudio};
use crate::engine::{
    CodecFlags, EngineEvent, EngineEventKind, OutputKind, RequestId, SynthesisRequest, WordTiming, CODEC_UNSUPPORTED,
};
use crate::messages::{
    AudioChunk, AudioDone, AudioStart, AudioStartDeferred, CodecDone, CodecStart, Heard, StreamStart,
};
use crate::parse::Played;

/// The nominal rate of streamed PCM when the config names none.
const NOMINAL_SAMPLE_RATE: u32 = 24_000;

/// The utterance being synthesized.
pub(super) struct Generation {
    pub(super) id: RequestId,
    /// Its utterance and its unit in it (`sentence_index`: 0 unless split).
    utterance: u64,
    sentence: u32,
    /// Upstream's framing: the streamed `audio.start` not yet sent (its text, format and
    /// word timestamps), which goes out with the first audio, or bare before the end.
    pending_start: Option<(String, &'static str, bool)>,
    /// Upstream's framing: `channels` on `audio.chunk`.
    channels: Option<u32>,
    /// The config's `sample_rate` (streamed audio is resampled to it, a whole file encoded
    /// at it), and the resampling stream (PCM) once the engine's rate is known.
    out_rate: Option<u32>,
    resampler: Option<AudioStream>,
    mode: Mode,
    /// Audio bytes (or codec frames) sent so far.
    total: u64,
    sample_rate: Option<u32>,
    /// Its text, and the engine's word timings as they come (asked for whenever the engine
    /// has them, so a cancel can say what was heard; sent only in word-timestamps mode).
    text: String,
    words: Vec<WordTiming>,
    /// A streamed fragment or split unit: its quiet edges cut where it joins the text around
    /// it mid-sentence.
    edges: Option<Edges>,
}

impl Generation {
    /// The engine request is still running (not yet answered; a file being encoded was).
    pub(super) fn engine_live(&self) -> bool {
        !matches!(self.mode, Mode::Encoding)
    }
}

enum Mode {
    /// One encoded file at the end, of the audio collected here.
    Whole(WholeAudio),
    /// The engine has finished a whole file's audio; its encoding is out (`Output::Encode`).
    Encoding,
    /// Binary s16le frames as the engine produces them.
    Streamed,
    /// `audio.chunk` JSON frames, then a trailing chunk with the word timings.
    Words {
        chunk_id: u64,
        any_words: bool,
    },
    Codec {
        codebooks: usize,
        seq: u64,
        eos_sent: bool,
    },
}

/// Milliseconds of s16le audio, as the reference computes them (Python float
/// arithmetic, then `round`, which ties to even).
fn pcm_ms(bytes: u64, sample_rate: u32) -> i64 {
    ((bytes as f64 / 2.0 / f64::from(sample_rate)) * 1000.0).round_ties_even() as i64
}

/// What was sent of an utterance (or a unit of it), to say what a listener heard of it.
pub(super) struct Spoken {
    utterance: u64,
    text: String,
    words: Vec<WordTiming>,
    /// Streamed PCM bytes sent, at `rate`.
    sent_bytes: u64,
    rate: u32,
}

impl Spoken {
    /// What was heard of it by a listener that played `played` of its audio.
    pub(super) fn heard(&self, played: Played) -> Heard {
        let played_ms = match played {
            Played::Ms(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
            Played::Bytes(bytes) => pcm_ms(bytes.min(self.sent_bytes), self.rate),
        };
        heard(self.utterance, &self.text, &self.words, played_ms, pcm_ms(self.sent_bytes, self.rate))
    }
}

/// How a generation ends.
pub(super) enum Ending {
    /// The engine finished the request.
    Finished,
    /// A whole file's encoding came back.
    Encoded(Encoded),
    /// The engine failed the request (or never had it: a refusal); nothing to abort.
    Failed(String),
    /// The session stops the request (bad engine output, a limit, the shutdown grace): abort,
    /// then end it as a failure.
    Stopped(String),
    /// The client cancelled: abort, then end it marked `cancelled`, saying what was heard
    /// when the client said how much it played.
    Cancelled(Option<Played>),
}

impl Session {
    /// An event of the request in flight (see [`Session::handle_engine`]).
    pub(super) fn on_engine_event(&mut self, now: Instant, event: EngineEvent) -> Result<(), UnknownRequest> {
        // While its file is encoding, the request has been answered: nothing more may come.
        let Some(generation) = self.generation_mut().filter(|g| g.id == event.id && g.engine_live()) else {
            return Err(UnknownRequest(event.id));
        };
        match event.kind {
            EngineEventKind::Audio { pcm, sample_rate } => {
                if let Some(previous) = generation.sample_rate.filter(|&r| r != sample_rate) {
                    let message =
                        format!("Audio sample rate changed during streaming: {previous} Hz to {sample_rate} Hz");
                    self.end_generation(now, Ending::Stopped(message));
                    return Ok(());
                }
                if sample_rate == 0 {
                    let message = "Engine reported a sample rate of 0 Hz".to_owned();
                    self.end_generation(now, Ending::Stopped(message));
                    return Ok(());
                }
                generation.sample_rate = Some(sample_rate);
                self.on_audio(now, pcm, sample_rate);
            }
            EngineEventKind::Words(words) => {
                generation.words.extend(words);
                if let Mode::Words { any_words, .. } = &mut generation.mode {
                    *any_words = true;
                }
            }
            EngineEventKind::Codec { codes, flags } => {
                if let Err(e) = self.on_codec(&codes, flags) {
                    self.end_generation(now, Ending::Stopped(e.to_string()));
                }
            }
            EngineEventKind::Finished => {
                self.push(Output::RequestEnded { id: event.id, end: RequestEnd::Finished });
                if let Some(Mode::Whole(_)) = self.generation_mut().map(|g| &g.mode) {
                    self.start_encoding();
                    return Ok(());
                }
                self.end_generation(now, Ending::Finished);
            }
            EngineEventKind::Failed(failure) => {
                let message = failure.to_string();
                self.push(Output::RequestEnded { id: event.id, end: RequestEnd::Failed(message.clone()) });
                self.end_generation(now, Ending::Failed(message));
            }
        }
        Ok(())
    }

    /// A whole file's encoding came back (see [`Session::handle_encoded`]).
    pub(super) fn on_encoded(&mut self, now: Instant, id: RequestId, encoded: Encoded) -> Result<(), UnknownRequest> {
        match self.generation_mut() {
            Some(generation) if generation.id == id && !generation.engine_live() => {
                self.end_generation(now, Ending::Encoded(encoded));
                Ok(())
            }
            _ => Err(UnknownRequest(id)),
        }
    }

    /// The session stops the utterance in flight (the shutdown grace is over): abort, fail it.
    pub(super) fn stop_generation(&mut self, now: Instant, message: String) {
        self.end_generation(now, Ending::Stopped(message));
    }

    pub(super) fn generation_mut(&mut self) -> Option<&mut Generation> {
        match &mut self.state {
            State::Generating(generation) | State::Draining { generation, .. } => Some(generation),
            _ => None,
        }
    }

    /// An utterance that ends before reaching the engine: the error, then `session.done`
    /// (with one sentence, as the reference counts it). A split unit just fails: it counts,
    /// and the utterance goes on.
    pub(super) fn refuse_utterance(&mut self, message: &str) {
        self.send_error(message, false);
        if !self.input.in_units() {
            self.session_done(1);
        }
    }

    pub(super) fn start_utterance(&mut self, now: Instant, text: &str, sentence: u32) {
        let Some(config) = self.config.clone() else { return };
        let config = &*config;
        let u = self.utterance_index;
        self.spoken = None;
        let codec_tokens = config.output_mode == OutputMode::CodecTokens;
        if codec_tokens && self.catalog.capabilities().codec.is_none() {
            return self.refuse_utterance(CODEC_UNSUPPORTED);
        }
        if !codec_tokens && config.word_timestamps {
            if !self.catalog.capabilities().word_timestamps {
                return self.refuse_utterance(
                    "word_timestamps=true but the server was launched without --forced-aligner; either restart the server \
                     with that flag or set word_timestamps=false in session.config.",
                );
            }
            if !(config.stream_audio && config.response_format == ResponseFormat::Pcm) {
                return self.refuse_utterance(
                    "word_timestamps=true requires stream_audio=true and response_format='pcm' (timestamps ride the \
                     per-sentence PCM audio.chunk stream).",
                );
            }
        }
        let mut request = match build_request(config, text) {
            Ok(request) => request,
            Err(details) => return self.refuse_utterance(&format!("Invalid request for utterance {u}: {details}")),
        };
        // Word timings of streamed PCM, when the engine has them, for a cancel that says what
        // was heard.
        let streamed_pcm = config.stream_audio && config.response_format == ResponseFormat::Pcm;
        if streamed_pcm && request.output == OutputKind::Audio && self.catalog.serving(&request).word_timestamps {
            request.output = OutputKind::AudioAndWords;
        }
        // The utterance's index, unless an earlier unit of it took that id.
        let number = self.last_request.map_or(u, |last| u.max(last + 1));
        self.last_request = Some(number);
        let id = RequestId { connection: self.connection, utterance: number };
        let catalog = self.catalog.clone();
        let upstream = config.split_granularity.is_some();
        let mut pending_start = None;
        let mut edges = None;
        let mode = if let Some(spec) = catalog.serving(&request).codec.as_ref().filter(|_| codec_tokens) {
            let start = CodecStart {
                r#type: "codec.start",
                version: 1,
                utterance_index: u,
                sentence_index: sentence,
                sentence_text: text,
                model: config.model.as_deref(),
                codebooks: spec.codebooks,
                codebook_size: spec.codebook_size,
                frame_rate_hz: spec.frame_rate_hz,
                sample_rate: spec.sample_rate,
                decoder_id: spec.decoder_id.as_deref(),
                header_format: "<IHB",
            };
            let codebooks = spec.codebooks as usize;
            self.send_json(&start);
            Mode::Codec { codebooks, seq: 0, eos_sent: false }
        } else {
            let streamed_pcm = config.stream_audio && config.response_format == ResponseFormat::Pcm;
            // The rate of the engine that will speak (issue 31: engines may differ).
            let native = catalog.sample_rate_for(&request);
            let start = AudioStart {
                r#type: "audio.start",
                utterance_index: u,
                sentence_index: sentence,
                sentence_text: text,
                format: config.response_format.as_str(),
                sample_rate: streamed_pcm.then_some(config.sample_rate.unwrap_or(native)),
                word_timestamps: config.word_timestamps.then_some(true),
            };
            let mode = if config.word_timestamps {
                Mode::Words { chunk_id: 0, any_words: false }
            } else if config.stream_audio {
                Mode::Streamed
            } else {
                Mode::Whole(WholeAudio::new(config.response_format, self.options.max_whole_audio_seconds))
            };
            let fragment_start = self.input.fragment_starting();
            // A streamed unit of several (fragments, split units): no dead air mid-sentence.
            let unit = fragment_start.is_some() || upstream;
            if unit && matches!(mode, Mode::Streamed) {
                let first = fragment_start.unwrap_or(sentence == 0);
                let previous = if first { None } else { self.last_unit_end };
                let lead = previous.and_then(|end| end.gap_ms().1);
                let tail = TextEnd::of(text).gap_ms().0;
                edges = (lead.is_some() || tail.is_some()).then(|| Edges::new(lead, tail));
            }
            if unit {
                self.last_unit_end = Some(TextEnd::of(text));
            }
            if let Some(first) = fragment_start {
                // A fragment stream has one start, with its first fragment's text.
                if first {
                    let mut shown: String = text.chars().take(80).collect();
                    if text.chars().count() > 80 {
                        shown.push_str("...");
                    }
                    let sample_rate = config.sample_rate.unwrap_or(native);
                    let start = StreamStart {
                        r#type: "audio.start",
                        sentence_index: 0,
                        sentence_text: &shown,
                        format: "pcm",
                        sample_rate,
                    };
                    self.send_json(&start);
                }
            } else if upstream && streamed_pcm {
                pending_start = Some((text.to_owned(), start.format, config.word_timestamps));
            } else {
                self.send_json(&start);
            }
            mode
        };
        let channels = upstream.then_some(1);
        self.state = State::Generating(Generation {
            id,
            utterance: u,
            sentence,
            pending_start,
            channels,
            out_rate: config.sample_rate,
            resampler: None,
            mode,
            total: 0,
            sample_rate: None,
            text: text.to_owned(),
            words: Vec::new(),
            edges,
        });
        // The engine gets its own voice name (an alias, the server's, the voice it stands for).
        match self.catalog.resolve(&mut request) {
            Ok(()) => self.push(Output::Engine(EngineCommand::Synthesize { id, request })),
            // What the engine cannot do fails as a generation error would, after the start
            // message (as the reference's adapter refuses it). The caller goes on with the
            // held messages: no `resume` here, which would nest one call per message.
            Err(refusal) => {
                let _ = now;
                self.close_generation(Ending::Failed(refusal));
            }
        }
    }

    fn on_audio(&mut self, now: Instant, pcm: Vec<u8>, sample_rate: u32) {
        let Some(generation) = self.generation_mut() else { return };
        let streamed = matches!(generation.mode, Mode::Streamed | Mode::Words { .. });
        let (pcm, sample_rate) = match streamed {
            true => match resampled(&mut generation.resampler, generation.out_rate, pcm, sample_rate) {
                Ok(converted) => converted,
                Err(message) => return self.end_generation(now, Ending::Stopped(message)),
            },
            false => (pcm, sample_rate),
        };
        self.send_pending_start(Some(sample_rate));
        let Some(generation) = self.generation_mut() else { return };
        let (u, sentence, channels) = (generation.utterance, generation.sentence, generation.channels);
        match &mut generation.mode {
            Mode::Whole(audio) => {
                if let Err(message) = audio.push(&pcm, sample_rate, "stream_audio=true") {
                    self.end_generation(now, Ending::Stopped(message));
                }
            }
            Mode::Encoding => {}
            Mode::Streamed => {
                let pcm = match &mut generation.edges {
                    Some(edges) => edges.push(&pcm, sample_rate),
                    None => pcm,
                };
                if !pcm.is_empty() {
                    generation.total += pcm.len() as u64;
                    self.push(Output::Binary(pcm));
                }
            }
            Mode::Words { chunk_id, .. } => {
                let start = pcm_ms(generation.total, sample_rate);
                generation.total += pcm.len() as u64;
                let end = pcm_ms(generation.total, sample_rate);
                let id = *chunk_id;
                *chunk_id += 1;
                let audio_b64 = base64::engine::general_purpose::STANDARD.encode(&pcm);
                self.send_json(&AudioChunk {
                    r#type: "audio.chunk",
                    utterance_index: u,
                    sentence_index: sentence,
                    chunk_id: id,
                    chunk_start_ms: start,
                    chunk_end_ms: end,
                    sample_rate,
                    channels,
                    audio_b64: &audio_b64,
                    timestamps: None,
                });
            }
            Mode::Codec { .. } => {}
        }
    }

    /// Upstream's deferred `audio.start`, if it is still to be sent: with the audio's rate
    /// and one channel, or bare (`None`: no audio came).
    fn send_pending_start(&mut self, sample_rate: Option<u32>) {
        let Some(generation) = self.generation_mut() else { return };
        let Some((text, format, words)) = generation.pending_start.take() else { return };
        let (u, sentence) = (generation.utterance, generation.sentence);
        self.send_json(&AudioStartDeferred {
            r#type: "audio.start",
            utterance_index: u,
            sentence_index: sentence,
            sentence_text: &text,
            format,
            word_timestamps: words.then_some(true),
            sample_rate,
            channels: sample_rate.map(|_| 1),
        });
    }

    /// The engine finished a whole file's audio: hand its encoding to the driver.
    fn start_encoding(&mut self) {
        let default_rate = self.catalog.capabilities().sample_rate;
        let Some(generation) = self.generation_mut() else { return };
        let Mode::Whole(audio) = std::mem::replace(&mut generation.mode, Mode::Encoding) else { return };
        let rate = generation.sample_rate.unwrap_or(default_rate);
        let id = generation.id;
        let job = audio.finish(rate);
        let job = match generation.out_rate {
            Some(out) => job.at_rate(out),
            None => job,
        };
        self.push(Output::Encode { id, job });
    }

    fn on_codec(&mut self, codes: &[i32], flags: CodecFlags) -> Result<(), codec::CodecError> {
        let Some(generation) = self.generation_mut() else { return Ok(()) };
        let Mode::Codec { codebooks, seq, eos_sent } = &mut generation.mode else { return Ok(()) };
        let frame = codec::pack_frame(*seq, codes, *codebooks, flags.bits())?;
        generation.total += (codes.len() / *codebooks) as u64;
        *seq += 1;
        *eos_sent |= flags.eos;
        self.push(Output::Binary(frame));
        Ok(())
    }

    /// End the utterance in flight, the one way every ending goes (see `close_generation`);
    /// then what comes next: the held messages, or the 1001 of a drain.
    pub(super) fn end_generation(&mut self, now: Instant, ending: Ending) {
        match self.close_generation(ending) {
            Some(true) => self.close(CLOSE_GOING_AWAY),
            Some(false) => {
                self.next_unit(now);
                self.resume(now);
            }
            None => {}
        }
    }

    /// Abort the engine request when the session stops it, then the utterance's final frames,
    /// `audio.done`/`codec.done` and `session.done`; the session is `Idle` after. Returns
    /// whether it was draining, or `None` when no utterance was in flight.
    fn close_generation(&mut self, ending: Ending) -> Option<bool> {
        self.send_pending_start(None);
        let (generation, draining) = match std::mem::replace(&mut self.state, State::Idle) {
            State::Generating(generation) => (generation, false),
            State::Draining { generation, .. } => (generation, true),
            state => {
                self.state = state;
                return None;
            }
        };
        let live = generation.engine_live();
        let Generation {
            id,
            utterance: u,
            sentence,
            mode,
            mut total,
            sample_rate,
            channels,
            resampler,
            out_rate,
            text,
            words,
            edges,
            ..
        } = generation;
        // A finished stream's last resampled samples (the filter's tail).
        let mut tail = match (&ending, resampler) {
            // PCM has nothing to fail on.
            (Ending::Finished, Some(resampler)) => resampler.finish().unwrap_or_default(),
            _ => Vec::new(),
        };
        let sample_rate = out_rate.filter(|_| sample_rate.is_some()).or(sample_rate);
        // A finished unit's trailing quiet, cut to its gap, and the stream's tail through it.
        if let (Ending::Finished, Some(mut edges), Some(rate)) = (&ending, edges, sample_rate) {
            let mut kept = edges.push(&tail, rate);
            kept.extend(edges.finish(rate));
            tail = kept;
        }
        if matches!(mode, Mode::Streamed) && !tail.is_empty() {
            total += tail.len() as u64;
            self.push(Output::Binary(std::mem::take(&mut tail)));
        }
        // First, so a transport that can't write the rest in time has still stopped it.
        if live && matches!(ending, Ending::Stopped(_) | Ending::Cancelled(_)) {
            self.abort(id);
        }
        // What was sent of it (PCM at the stream's rate; a whole file is sent only at its end),
        // for a cancel that says what was heard, now or (once it finished) while idle.
        let streamed_pcm = matches!(mode, Mode::Streamed | Mode::Words { .. });
        let mut spoken = Spoken {
            utterance: u,
            text,
            words,
            sent_bytes: if streamed_pcm { total } else { 0 },
            rate: sample_rate.unwrap_or(NOMINAL_SAMPLE_RATE),
        };
        let heard = match &ending {
            Ending::Cancelled(Some(played)) if !matches!(mode, Mode::Codec { .. }) => Some(spoken.heard(*played)),
            _ => None,
        };
        let (failure, cancelled, file) = match ending {
            Ending::Finished => (None, false, None),
            Ending::Encoded(Encoded(Ok(file))) => (None, false, Some(file)),
            Ending::Encoded(Encoded(Err(message))) | Ending::Failed(message) | Ending::Stopped(message) => {
                (Some(message), false, None)
            }
            Ending::Cancelled(_) => (None, true, None),
        };
        let unit = self.input.generation_ended(total, cancelled, failure.is_some());
        if let UnitEnded::Fragment = unit {
            // One fragment of the session's stream: its audio counts toward the stream's
            // audio.done, sent at the end; a failure or a cancel ends what is left of it.
            if let Some(message) = &failure {
                self.send_error(&format!("Generation failed: {message}"), total > 0);
            }
            return Some(draining);
        }
        match mode {
            Mode::Codec { codebooks, mut seq, eos_sent } => {
                if let Some(message) = &failure {
                    self.send_error(&format!("Codec stream failed for utterance {u}: {message}"), total > 0);
                } else if !eos_sent {
                    if let Ok(frame) = codec::pack_frame(seq, &[], codebooks, codec::FLAG_EOS) {
                        self.push(Output::Binary(frame));
                        seq += 1;
                    }
                }
                self.send_json(&CodecDone {
                    r#type: "codec.done",
                    utterance_index: u,
                    sentence_index: sentence,
                    total_frames: total,
                    seq_last: seq as i64 - 1,
                    error: failure.is_some(),
                    cancelled,
                });
            }
            mode => {
                match mode {
                    Mode::Encoding => {
                        if let Some(file) = file {
                            total = file.len() as u64;
                            self.push(Output::Binary(file));
                        }
                    }
                    Mode::Words { mut chunk_id, any_words } if failure.is_none() => {
                        let rate = sample_rate.unwrap_or(NOMINAL_SAMPLE_RATE);
                        if !tail.is_empty() {
                            let start = pcm_ms(total, rate);
                            total += tail.len() as u64;
                            let audio_b64 = base64::engine::general_purpose::STANDARD.encode(&tail);
                            self.send_json(&AudioChunk {
                                r#type: "audio.chunk",
                                utterance_index: u,
                                sentence_index: sentence,
                                chunk_id,
                                chunk_start_ms: start,
                                chunk_end_ms: pcm_ms(total, rate),
                                sample_rate: rate,
                                channels,
                                audio_b64: &audio_b64,
                                timestamps: None,
                            });
                            chunk_id += 1;
                        }
                        let end = pcm_ms(total, rate);
                        // After a cancel, only the words that were (at least partly) heard.
                        let words = &spoken.words;
                        let sent =
                            if cancelled { words.iter().take_while(|w| w.start_ms < end).count() } else { words.len() };
                        self.send_json(&AudioChunk {
                            r#type: "audio.chunk",
                            utterance_index: u,
                            sentence_index: sentence,
                            chunk_id,
                            chunk_start_ms: 0,
                            chunk_end_ms: end,
                            sample_rate: rate,
                            channels,
                            audio_b64: "",
                            timestamps: any_words.then_some(&words[..sent]),
                        });
                    }
                    _ => {}
                }
                if let Some(message) = &failure {
                    self.send_error(
                        &format!("Generation failed for utterance {u}, sentence {sentence}: {message}"),
                        total > 0,
                    );
                }
                self.send_json(&AudioDone {
                    r#type: "audio.done",
                    utterance_index: u,
                    sentence_index: sentence,
                    total_bytes: total,
                    error: failure.is_some(),
                    cancelled: cancelled.then_some(true),
                    heard,
                });
            }
        }
        if streamed_pcm && failure.is_none() && !cancelled {
            spoken.sent_bytes = total;
            self.spoken = Some(spoken);
        }
        if let UnitEnded::Utterance = unit {
            self.session_done(1);
        }
        Some(draining)
    }
}

/// Streamed audio at the config's rate: through the resampler (made with the first audio)
/// when the engine's differs.
fn resampled(
    resampler: &mut Option<AudioStream>,
    out_rate: Option<u32>,
    pcm: Vec<u8>,
    rate: u32,
) -> Result<(Vec<u8>, u32), String> {
    let Some(out) = out_rate.filter(|&out| out != rate) else { return Ok((pcm, rate)) };
    let stream = match resampler {
        Some(stream) => stream,
        None => resampler.insert(AudioStream::new(ResponseFormat::Pcm, rate, out, Paging::Eager).map_err(|e| e.0)?),
    };
    Ok((stream.push_s16le(&pcm, rate).map_err(|e| e.0)?, out))
}

/// The per-utterance request, with the checks the reference makes when it builds
/// its `OpenAICreateSpeechRequest` (which there kill the session; here they fail
/// only this utterance).
fn build_request(config: &SessionConfig, text: &str) -> Result<SynthesisRequest, String> {
    let seed = match &config.seed {
        None => None,
        Some(seed) => match seed.to_i64() {
            Some(seed) => Some(seed),
            None => {
                let bound = if seed.0.starts_with('-') {
                    "greater than or equal to -9223372036854775808"
                } else {
                    "less than or equal to 9223372036854775807"
                };
                return Err(format!("seed: Input should be {bound}"));
            }
        },
    };
    if let Some(embedding) = &config.speaker_embedding {
        if config.ref_audio.is_some() {
            return Err("'speaker_embedding' and 'ref_audio' are mutually exclusive".to_owned());
        }
        if embedding.iter().any(|v| !v.is_finite()) {
            return Err("'speaker_embedding' values must be finite (no NaN or Inf)".to_owned());
        }
    }
    let output = if config.output_mode == OutputMode::CodecTokens {
        OutputKind::CodecFrames
    } else if config.word_timestamps {
        OutputKind::AudioAndWords
    } else {
        OutputKind::Audio
    };
    Ok(SynthesisRequest {
        text: text.to_owned(),
        model: config.model.clone(),
        voice: config.voice.clone(),
        language: config.language.clone(),
        instructions: config.instructions.clone(),
        task_type: config.task_type,
        speed: config.speed.unwrap_or(1.0),
        seed,
        stream: config.stream_audio,
        output,
        max_new_tokens: config.max_new_tokens.and_then(|v| u64::try_from(v).ok()),
        initial_codec_chunk_frames: config.initial_codec_chunk_frames.and_then(|v| u64::try_from(v).ok()),
        ref_audio: config.ref_audio.iter().cloned().collect(),
        ref_text: config.ref_text.clone(),
        speaker_embedding: config.speaker_embedding.clone(),
        x_vector_only_mode: config.x_vector_only_mode.unwrap_or(false),
        non_streaming_mode: config.non_streaming_mode,
        ignored: Vec::new(),
        pronunciations: config.pronunciations.clone(),
        speaker: None,
    })
}
