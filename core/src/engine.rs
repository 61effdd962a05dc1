//! What a synthesis engine sees of the protocol, and the trait engines implement.
//!
//! The trait is synchronous and runtime-free so any runtime can host an engine: the
//! engine pushes events into a sink the transport gives it, and the transport feeds
//! them to the [`Session`](crate::session::Session) that asked for the request.
//!
//! A request's life: the session emits
//! [`EngineCommand::Synthesize`](crate::session::EngineCommand::Synthesize); the driver calls
//! [`Engine::submit`] with an [`EventSink`] of its own; the engine sends [`EngineEvent`]s
//! (audio, word timings or codec frames, then exactly one `Finished` or `Failed`) into the
//! sink, from any thread; the driver hands each to
//! [`Session::handle_engine`](crate::session::Session::handle_engine). An
//! [`EngineCommand::Abort`](crate::session::EngineCommand::Abort) becomes [`Engine::abort`].

use std::fmt;

use crate::capacity::Overloaded;
use crate::config::TaskType;

/// Identifies one engine request: the connection that asked and the utterance.
///
/// It is also the request's name in logs: `speech-stream-<connection>-<utterance>` for a
/// WebSocket utterance, `speech-http-<connection>-<n>` for the `n`th HTTP request of a
/// connection ([`RequestId::http`]), so that the two never read alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    /// The connection id given to [`Session::new`](crate::session::Session::new).
    pub connection: u64,
    /// The utterance's `utterance_index` on that connection; for an HTTP request, its number
    /// on the connection with the top bit set ([`RequestId::http`]).
    pub utterance: u64,
}

/// The bit that marks an HTTP request's number, keeping it apart from utterance indexes.
const HTTP_REQUEST: u64 = 1 << 63;

impl RequestId {
    /// The id of the `n`th HTTP request on `connection`: never equal to an utterance's id on
    /// the same connection.
    pub fn http(connection: u64, n: u64) -> RequestId {
        RequestId { connection, utterance: n | HTTP_REQUEST }
    }

    /// Whether this is an HTTP request's id ([`RequestId::http`]).
    pub fn is_http(&self) -> bool {
        self.utterance & HTTP_REQUEST != 0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_http() {
            write!(f, "speech-http-{}-{}", self.connection, self.utterance & !HTTP_REQUEST)
        } else {
            write!(f, "speech-stream-{}-{}", self.connection, self.utterance)
        }
    }
}

/// One utterance to synthesize, built from the session config at `input.done` (or from an
/// HTTP request's body). It carries every field a client can set that an engine may need,
/// already validated; what the engine cannot do was refused in the core against its
/// [`EngineCapabilities`] ([`EngineCapabilities::check`]) before it was submitted.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SynthesisRequest {
    /// The flushed, stripped text (never empty).
    pub text: String,
    /// The model the client named (`session.config`'s `model`), already checked against
    /// [`EngineCapabilities::models`].
    pub model: Option<String>,
    /// The voice: as the client spelled it in what a protocol parses, the engine's own name (a
    /// [`Voice::id`]) once the core has resolved it ([`Catalog::resolve`]), which it does before
    /// it submits the request; `None` means the engine's default.
    ///
    /// [`Catalog::resolve`]: crate::catalog::Catalog::resolve
    pub voice: Option<String>,
    /// The language the client named; one of [`EngineCapabilities::languages`] (or `auto`).
    pub language: Option<String>,
    /// Free-form style instructions (voice design models); only when the engine takes them.
    pub instructions: Option<String>,
    /// The kind of synthesis, when the client named one; one of the engine's task types.
    pub task_type: Option<TaskType>,
    /// Speaking rate, 0.25..=4.0; 1.0 is the voice's natural pace.
    pub speed: f64,
    /// Makes the audio reproducible; `None` lets the engine choose.
    pub seed: Option<i64>,
    /// Stream audio chunk by chunk as it is computed (otherwise the session
    /// collects the whole utterance before encoding it).
    pub stream: bool,
    /// What to produce: audio, audio and its word timings, or codec frames.
    pub output: OutputKind,
    /// Stop after this many codec frames (of audio, for a codec-based model).
    pub max_new_tokens: Option<u64>,
    /// Frames in the first codec chunk, to trade first-chunk latency for efficiency.
    pub initial_codec_chunk_frames: Option<u64>,
    /// Voice cloning: recordings of the voice to speak in (http(s) URLs, `data:` URIs or
    /// `file://` URIs, unchecked); empty for none.
    pub ref_audio: Vec<String>,
    /// Voice cloning: the transcript of `ref_audio`.
    pub ref_text: Option<String>,
    /// Voice cloning: the speaker's embedding instead of a recording (finite values; never
    /// together with `ref_audio`).
    pub speaker_embedding: Option<Vec<f64>>,
    /// Voice cloning: use only the speaker embedding of `ref_audio`, not its transcript.
    pub x_vector_only_mode: bool,
    /// Qwen3-TTS's prompt mode, passed on as the client set it.
    pub non_streaming_mode: Option<bool>,
    /// The fields the client set that the engine serving the request cannot honour and the
    /// core dropped instead of refusing them (`instructions`, under a lenient
    /// [`Catalog`](crate::catalog::Catalog)); the protocols report them to the client and the
    /// log. Empty as a client's request is parsed.
    pub ignored: Vec<&'static str>,
    /// Our extension: how to say given words, (word, `/phonemes/` or a respelling), from the
    /// session's or the HTTP request's `pronunciations`; an engine with a lexicon checks them and
    /// fails the request on a bad entry, naming the word. Empty for none.
    pub pronunciations: Vec<(String, String)>,
    /// Which of the voice's speakers speaks (a multi-speaker voice's [`Voice::speakers`], by
    /// name; Wyoming's `voice.speaker`); `None`: its first.
    pub speaker: Option<String>,
}

/// What an engine produces for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputKind {
    /// Audio ([`EngineEventKind::Audio`]).
    Audio,
    /// Audio and the timings of its words ([`EngineEventKind::Words`]).
    AudioAndWords,
    /// Codec frames ([`EngineEventKind::Codec`]) instead of audio.
    CodecFrames,
}

impl OutputKind {
    /// Word timings are wanted.
    pub fn words(self) -> bool {
        self == OutputKind::AudioAndWords
    }

    /// Codec frames are wanted, not audio.
    pub fn codec(self) -> bool {
        self == OutputKind::CodecFrames
    }
}

impl SynthesisRequest {
    /// A request for `text` with every option at its default: the voice's natural pace, no
    /// seed, not streamed, audio (not codec frames), no word timings, no cloning.
    pub fn new(text: impl Into<String>) -> SynthesisRequest {
        SynthesisRequest {
            text: text.into(),
            model: None,
            voice: None,
            language: None,
            instructions: None,
            task_type: None,
            speed: 1.0,
            seed: None,
            stream: false,
            output: OutputKind::Audio,
            max_new_tokens: None,
            initial_codec_chunk_frames: None,
            ref_audio: Vec::new(),
            ref_text: None,
            speaker_embedding: None,
            x_vector_only_mode: false,
            non_streaming_mode: None,
            ignored: Vec::new(),
            pronunciations: Vec::new(),
            speaker: None,
        }
    }

    /// This request for the model named `model`.
    pub fn with_model(mut self, model: impl Into<String>) -> SynthesisRequest {
        self.model = Some(model.into());
        self
    }

    /// This request in the voice named `voice`.
    pub fn with_voice(mut self, voice: impl Into<String>) -> SynthesisRequest {
        self.voice = Some(voice.into());
        self
    }

    /// This request in `language`.
    pub fn with_language(mut self, language: impl Into<String>) -> SynthesisRequest {
        self.language = Some(language.into());
        self
    }

    /// This request with style `instructions`.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> SynthesisRequest {
        self.instructions = Some(instructions.into());
        self
    }

    /// This request at speaking rate `speed` (1.0: the voice's natural pace).
    pub fn with_speed(mut self, speed: f64) -> SynthesisRequest {
        self.speed = speed;
        self
    }

    /// This request with `seed` (`None`: the engine chooses).
    pub fn with_seed(mut self, seed: Option<i64>) -> SynthesisRequest {
        self.seed = seed;
        self
    }

    /// This request streamed chunk by chunk (`true`) or not.
    pub fn with_stream(mut self, stream: bool) -> SynthesisRequest {
        self.stream = stream;
        self
    }

    /// This request producing `output`.
    pub fn with_output(mut self, output: OutputKind) -> SynthesisRequest {
        self.output = output;
        self
    }
}

/// One word's position in the utterance's audio, in milliseconds from its start.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WordTiming {
    /// The word as written in the text.
    pub word: String,
    /// When the word starts.
    pub start_ms: i64,
    /// When the word ends.
    pub end_ms: i64,
    /// Character (Unicode scalar value) offsets of the word in the request's text, when known.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "chars_pair")]
    pub chars: Option<std::ops::Range<usize>>,
}

/// `chars` as our frames carry it: `[start, end]` (omitted when unknown).
fn chars_pair<S: serde::Serializer>(r: &Option<std::ops::Range<usize>>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Some(r) => serde::Serialize::serialize(&[r.start, r.end], s),
        None => s.serialize_none(),
    }
}

/// Something an engine reports about a request.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EngineEventKind {
    /// A chunk of mono signed 16-bit little-endian PCM.
    Audio {
        /// Whole samples: an even number of bytes.
        pcm: Vec<u8>,
        /// Samples per second; the same for every chunk of a request.
        sample_rate: u32,
    },
    /// Timings of words spoken so far (appended to those already reported).
    Words(Vec<WordTiming>),
    /// Codec frames: `codes` holds `codes.len() / codebooks` frames, frame-major.
    Codec {
        /// Codes in `0..codebook_size`, [`CodecSpec::codebooks`] per frame.
        codes: Vec<i32>,
        /// What the frames mark: the end of the utterance, of a segment, a decoder reset.
        flags: CodecFlags,
    },
    /// The request completed; no more events follow.
    Finished,
    /// The request failed; no more events follow.
    Failed(Failure),
}

/// Why a request failed ([`EngineEventKind::Failed`]): a type from the engine to the transport,
/// so that a refusal for lack of capacity is answered as one (HTTP 503 with `Retry-After`)
/// without reading it back from its message. Its `Display` is the message clients get.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Refused for lack of capacity; a retry may succeed later.
    Overloaded(Overloaded),
    /// Any other failure, with its message.
    Engine(String),
}

impl Failure {
    /// The capacity refusal this failure is, if it is one.
    pub fn overloaded(&self) -> Option<Overloaded> {
        match self {
            Failure::Overloaded(refusal) => Some(*refusal),
            Failure::Engine(_) => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Overloaded(refusal) => refusal.fmt(f),
            Failure::Engine(message) => f.write_str(message),
        }
    }
}

impl From<Overloaded> for Failure {
    fn from(refusal: Overloaded) -> Failure {
        Failure::Overloaded(refusal)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Engine(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::Engine(message.to_owned())
    }
}

/// The flags of a codec packet (docs/protocol.md §d).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodecFlags {
    /// The last frames of the utterance.
    pub eos: bool,
    /// The last frames of a segment (a sentence) of the utterance.
    pub segment_end: bool,
    /// The client's decoder drops its state before these frames.
    pub reset: bool,
}

impl CodecFlags {
    /// Only the end of the utterance.
    pub const EOS: CodecFlags = CodecFlags { eos: true, segment_end: false, reset: false };

    /// The packet's flags byte.
    pub fn bits(self) -> u8 {
        let bit = |on: bool, flag: u8| if on { flag } else { 0 };
        bit(self.eos, crate::codec::FLAG_EOS)
            | bit(self.segment_end, crate::codec::FLAG_SEGMENT_END)
            | bit(self.reset, crate::codec::FLAG_RESET)
    }
}

/// An event of one engine request, tagged with its id so that one queue can carry the events
/// of every request a connection has made.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineEvent {
    /// The request the event belongs to.
    pub id: RequestId,
    /// What happened.
    pub kind: EngineEventKind,
}

/// How codec frames are described to clients in `codec.start`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CodecSpec {
    /// Codes per frame.
    pub codebooks: u32,
    /// Codes are in `0..codebook_size`.
    pub codebook_size: u32,
    /// Frames per second of audio.
    pub frame_rate_hz: f64,
    /// The sample rate of the audio the frames decode to.
    pub sample_rate: u32,
    /// Names the decoder that turns the frames into audio, for clients that have several.
    pub decoder_id: Option<String>,
}

impl CodecSpec {
    /// Frames of `codebooks` codes in `0..codebook_size`, `frame_rate_hz` frames a second, that
    /// decode to audio at `sample_rate`; no decoder id.
    pub fn new(codebooks: u32, codebook_size: u32, frame_rate_hz: f64, sample_rate: u32) -> CodecSpec {
        CodecSpec { codebooks, codebook_size, frame_rate_hz, sample_rate, decoder_id: None }
    }

    /// This spec, naming its decoder `decoder_id`.
    pub fn with_decoder_id(mut self, decoder_id: impl Into<String>) -> CodecSpec {
        self.decoder_id = Some(decoder_id.into());
        self
    }
}

/// A language an engine speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Language {
    /// Its English name, as clients write it (`English`).
    pub name: String,
    /// Its ISO 639-1 code (`en`): `en`, `en-US` and `en_GB` name it too.
    pub code: String,
}

impl Language {
    /// A language by its name and code.
    pub fn new(name: impl Into<String>, code: impl Into<String>) -> Language {
        Language { name: name.into(), code: code.into() }
    }

    fn is_named_by(&self, requested: &str) -> bool {
        let primary = requested.split(['-', '_']).next().unwrap_or(requested);
        requested.eq_ignore_ascii_case(&self.name) || primary.eq_ignore_ascii_case(&self.code)
    }
}

/// A voice an engine speaks in, as it declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Voice {
    /// Its name: what clients send (in any case), and what the engine receives.
    pub id: String,
    /// The language it speaks, as a BCP 47 tag (`en-US`), when it speaks one.
    pub language: Option<String>,
    /// What it sounds like, for people choosing one.
    pub description: Option<String>,
    /// The names of its speakers, for a voice that has several (a multi-speaker Piper voice's
    /// `speaker_id_map`, in id order); empty for one.
    pub speakers: Vec<String>,
}

impl Voice {
    /// A voice by its name, with no language or description.
    pub fn new(id: impl Into<String>) -> Voice {
        Voice { id: id.into(), language: None, description: None, speakers: Vec::new() }
    }

    /// This voice, speaking `language` (a BCP 47 tag).
    pub fn with_language(mut self, language: impl Into<String>) -> Voice {
        self.language = Some(language.into());
        self
    }

    /// This voice, described as `description`.
    pub fn with_description(mut self, description: impl Into<String>) -> Voice {
        self.description = Some(description.into());
        self
    }

    /// This voice, with several speakers named `speakers` (in the order of their ids).
    pub fn with_speakers(mut self, speakers: impl IntoIterator<Item = impl Into<String>>) -> Voice {
        self.speakers = speakers.into_iter().map(Into::into).collect();
        self
    }

    /// The speaker a client's `speaker` names: one of [`Voice::speakers`] by name (any case) or
    /// by its id (`"3"`), as wyoming-piper reads it; `None` for a voice of one speaker, or a
    /// name it lacks (the voice's first speaker speaks).
    pub fn speaker(&self, speaker: &str) -> Option<&str> {
        let speaker = speaker.trim();
        self.speakers
            .iter()
            .find(|s| s.eq_ignore_ascii_case(speaker))
            .or_else(|| speaker.parse::<usize>().ok().and_then(|i| self.speakers.get(i)))
            .map(String::as_str)
    }
}

impl From<&str> for Voice {
    fn from(id: &str) -> Voice {
        Voice::new(id)
    }
}

impl From<String> for Voice {
    fn from(id: String) -> Voice {
        Voice::new(id)
    }
}

/// What an engine can do. The core checks every request against it
/// ([`EngineCapabilities::check`]) and refuses, with one message, what the engine cannot do,
/// so an engine only ever sees requests it can serve.
///
/// Only what the engine itself knows: the names a server gives its voices and models besides
/// (OpenAI's, say) are the server's, in [`Naming`](crate::catalog::Naming).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct EngineCapabilities {
    /// Model names served (the `model` config check); the first is the default, and names
    /// the engine in refusals.
    pub models: Vec<String>,
    /// The sample rate of the engine's audio.
    pub sample_rate: u32,
    /// Voices a client may ask for (by name, in any case); empty when the engine takes any
    /// name. The first is not necessarily the default: no voice named means the engine's
    /// default.
    pub voices: Vec<Voice>,
    /// Languages the engine speaks; empty when it takes any. `auto` (or no language) is
    /// always accepted.
    pub languages: Vec<Language>,
    /// Task types the engine serves; empty when it takes any.
    pub task_types: Vec<TaskType>,
    /// The engine follows free-form style `instructions`.
    pub instructions: bool,
    /// The engine reports word timings (the reference's "forced aligner").
    pub word_timestamps: bool,
    /// `Some` when codec_tokens output is supported.
    pub codec: Option<CodecSpec>,
    /// The engine mixes its voices: a request may name several of them, as Kokoro-FastAPI
    /// writes it (`af_bella+af_sky`, weighted `af_bella(2)+af_sky(1)`; [`voice_mix`]).
    pub mixing: bool,
    /// For an engine that hosts others ([`Engines`](crate::engines::Engines)): the
    /// capabilities of each, in routing order ([`EngineCapabilities::route`]); the fields above
    /// are then their union, under the first one's defaults. Empty for an engine of its own.
    pub hosted: Vec<EngineCapabilities>,
}

impl EngineCapabilities {
    /// Capabilities of an engine that serves `model` at `sample_rate`: any voice, language and
    /// task type, instructions, no word timings, no codec frames. Set the fields that differ.
    pub fn new(model: impl Into<String>, sample_rate: u32) -> EngineCapabilities {
        EngineCapabilities {
            models: vec![model.into()],
            sample_rate,
            voices: Vec::new(),
            languages: Vec::new(),
            task_types: Vec::new(),
            instructions: true,
            word_timestamps: false,
            codec: None,
            mixing: false,
            hosted: Vec::new(),
        }
    }

    /// The capabilities of several engines served as one (the first one's defaults; a voice or
    /// model two of them declare is the first's): each list the union, unless one engine takes
    /// anything (an empty list); each engine's own in [`hosted`](EngineCapabilities::hosted).
    /// `None` for no engine.
    pub fn hosting(hosted: Vec<EngineCapabilities>) -> Option<EngineCapabilities> {
        let first = hosted.first()?.clone();
        let union = |list: fn(&EngineCapabilities) -> usize| hosted.iter().all(|c| list(c) > 0);
        let mut capabilities = EngineCapabilities { hosted: Vec::new(), ..first };
        for other in &hosted[1..] {
            for model in &other.models {
                if !capabilities.models.contains(model) {
                    capabilities.models.push(model.clone());
                }
            }
            for voice in &other.voices {
                if capabilities.voice(&voice.id).is_none() {
                    capabilities.voices.push(voice.clone());
                }
            }
            for language in &other.languages {
                if !capabilities.languages.contains(language) {
                    capabilities.languages.push(language.clone());
                }
            }
            for task in &other.task_types {
                if !capabilities.task_types.contains(task) {
                    capabilities.task_types.push(*task);
                }
            }
            capabilities.instructions |= other.instructions;
            capabilities.word_timestamps |= other.word_timestamps;
            capabilities.mixing |= other.mixing;
            if capabilities.codec.is_none() {
                capabilities.codec = other.codec.clone();
            }
        }
        if !union(|c| c.voices.len()) {
            capabilities.voices.clear();
        }
        if !union(|c| c.languages.len()) {
            capabilities.languages.clear();
        }
        if !union(|c| c.task_types.len()) {
            capabilities.task_types.clear();
        }
        capabilities.hosted = hosted;
        Some(capabilities)
    }

    /// These capabilities mixing their voices (`true`) or not ([`EngineCapabilities::mixing`]).
    pub fn with_mixing(mut self, mixing: bool) -> EngineCapabilities {
        self.mixing = mixing;
        self
    }

    /// These capabilities with `voices` declared.
    pub fn with_voices<V: Into<Voice>>(mut self, voices: impl IntoIterator<Item = V>) -> EngineCapabilities {
        self.voices = voices.into_iter().map(Into::into).collect();
        self
    }

    /// These capabilities serving the models `models` (the first the default) instead.
    pub fn with_models<M: Into<String>>(mut self, models: impl IntoIterator<Item = M>) -> EngineCapabilities {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// These capabilities speaking only `languages`.
    pub fn with_languages(mut self, languages: impl IntoIterator<Item = Language>) -> EngineCapabilities {
        self.languages = languages.into_iter().collect();
        self
    }

    /// These capabilities serving only `task_types`.
    pub fn with_task_types(mut self, task_types: impl IntoIterator<Item = TaskType>) -> EngineCapabilities {
        self.task_types = task_types.into_iter().collect();
        self
    }

    /// These capabilities following style instructions (`true`) or not.
    pub fn with_instructions(mut self, instructions: bool) -> EngineCapabilities {
        self.instructions = instructions;
        self
    }

    /// These capabilities reporting word timings (`true`) or not.
    pub fn with_word_timestamps(mut self, word_timestamps: bool) -> EngineCapabilities {
        self.word_timestamps = word_timestamps;
        self
    }

    /// These capabilities producing codec frames as `codec` describes.
    pub fn with_codec(mut self, codec: CodecSpec) -> EngineCapabilities {
        self.codec = Some(codec);
        self
    }

    /// The declared voice named `name` (in any case).
    pub fn voice(&self, name: &str) -> Option<&Voice> {
        let lower = name.to_lowercase();
        self.voices.iter().find(|v| v.id.to_lowercase() == lower)
    }

    /// Whether `name` is a declared voice (in any case) or, for an engine that mixes its voices,
    /// a mix of declared ones ([`voice_mix`]).
    pub fn declares_voice(&self, name: &str) -> bool {
        self.voice(name).is_some() || self.mix(name).is_some()
    }

    /// `name` as a mix of this engine's declared voices, each with its weight: `None` unless the
    /// engine mixes voices, `name` has two parts or more and each is a declared voice (of one
    /// hosted engine, for an engine that hosts others).
    pub fn mix(&self, name: &str) -> Option<Vec<(&str, f32)>> {
        let parts = voice_mix(name)?;
        if parts.len() < 2 {
            return None;
        }
        let engines: Vec<&EngineCapabilities> =
            if self.hosted.is_empty() { vec![self] } else { self.hosted.iter().collect() };
        engines
            .into_iter()
            .filter(|e| e.mixing)
            .find_map(|e| parts.iter().map(|(part, weight)| e.voice(part).map(|v| (v.id.as_str(), *weight))).collect())
    }

    /// Whether a request may name `model`: one of `models`.
    pub fn serves_model(&self, model: &str) -> bool {
        self.models.iter().any(|m| m == model)
    }

    /// The name refusals give the engine.
    fn name(&self) -> &str {
        self.models.first().map_or("the loaded TTS model", String::as_str)
    }

    /// Which of the [`hosted`](EngineCapabilities::hosted) engines serves `request`: the first
    /// that declares its voice (or takes any name), else, for no voice, the first that serves
    /// its model, else the first. `None` for an engine that hosts none.
    pub fn route(&self, request: &SynthesisRequest) -> Option<usize> {
        self.route_names(request.voice.as_deref(), request.model.as_deref())
    }

    fn route_names(&self, voice: Option<&str>, model: Option<&str>) -> Option<usize> {
        if self.hosted.is_empty() {
            return None;
        }
        let by_voice = |voice: &str| self.hosted.iter().position(|e| e.voices.is_empty() || e.declares_voice(voice));
        let by_model = |model: &str| self.hosted.iter().position(|e| e.serves_model(model));
        let index = match (voice, model) {
            (Some(voice), _) if !voice.eq_ignore_ascii_case("default") => by_voice(voice),
            (_, Some(model)) => by_model(model),
            _ => None,
        };
        Some(index.unwrap_or(0))
    }

    /// The capabilities of the engine that serves `request` ([`EngineCapabilities::route`]):
    /// these, for an engine that hosts none.
    pub fn serving(&self, request: &SynthesisRequest) -> &EngineCapabilities {
        self.serving_names(request.voice.as_deref(), request.model.as_deref())
    }

    /// [`EngineCapabilities::serving`] a request for `voice` (the engine's name) and `model`.
    pub fn serving_names(&self, voice: Option<&str>, model: Option<&str>) -> &EngineCapabilities {
        self.route_names(voice, model).and_then(|i| self.hosted.get(i)).unwrap_or(self)
    }

    /// The sample rate of the audio `request` will get: its engine's.
    pub fn sample_rate_for(&self, request: &SynthesisRequest) -> u32 {
        self.serving(request).sample_rate
    }

    /// Whether the engine can serve `request`; `Err` is the refusal, the one message both
    /// protocols send (docs/protocol.md §c.2). The checks, in order: codec frames, word
    /// timings, task type, instructions, language (those of the engine that serves it), voice.
    pub fn check(&self, request: &SynthesisRequest) -> Result<(), String> {
        self.serving(request).check_features(request)?;
        self.resolve_voice(request.voice.as_deref()).map(drop)
    }

    /// The checks of [`EngineCapabilities::check`] but the voice's.
    pub(crate) fn check_features(&self, request: &SynthesisRequest) -> Result<(), String> {
        if request.output.codec() && self.codec.is_none() {
            return Err(CODEC_UNSUPPORTED.to_owned());
        }
        // Refused before this by the protocols for an engine without them; for one of several
        // engines ([`EngineCapabilities::hosted`]), here.
        if request.output.words() && !self.word_timestamps {
            return Err(format!("word timestamps are not supported by {}", self.name()));
        }
        if let Some(task) = request.task_type.filter(|t| !self.task_types.is_empty() && !self.task_types.contains(t)) {
            let served: Vec<&str> = self.task_types.iter().map(|t| t.as_str()).collect();
            let detail = if served == ["CustomVoice"] {
                "it speaks with preset voices only (use 'CustomVoice' or leave task_type out)".to_owned()
            } else {
                format!("use {} or leave task_type out", quoted(&served))
            };
            return Err(format!("task_type '{}' is not supported by {}: {detail}", task.as_str(), self.name()));
        }
        let cloning = !request.ref_audio.is_empty()
            || request.ref_text.as_deref().is_some_and(|t| !t.trim().is_empty())
            || request.speaker_embedding.is_some();
        if cloning && !self.task_types.is_empty() && !self.task_types.contains(&TaskType::Base) {
            return Err(format!(
                "voice cloning (ref_audio, ref_text, speaker_embedding) is not supported by {}: it speaks with \
                 preset voices only (leave those fields out)",
                self.name()
            ));
        }
        if !self.instructions && request.instructions.as_deref().is_some_and(|i| !i.trim().is_empty()) {
            return Err(format!(
                "instructions are not supported by {} (it has no voice design or style prompts)",
                self.name()
            ));
        }
        if let Some(language) = request.language.as_deref() {
            let l = language.trim();
            let known =
                l.is_empty() || l.eq_ignore_ascii_case("auto") || self.languages.iter().any(|x| x.is_named_by(l));
            if !known && !self.languages.is_empty() {
                let names: Vec<&str> = self.languages.iter().map(|x| x.name.as_str()).collect();
                return Err(format!(
                    "language '{language}' is not supported by {}: it speaks {} only",
                    self.name(),
                    names.join(" and ")
                ));
            }
        }
        Ok(())
    }

    /// The engine's name for the voice a client asked for: the declared voice it names in any
    /// case, or `None` (the default voice) for no voice or `default`. An engine that declares
    /// no voices takes any name as it is. The server's aliases are
    /// [`Catalog::resolve_voice`](crate::catalog::Catalog::resolve_voice)'s.
    pub fn resolve_voice<'a>(&'a self, voice: Option<&'a str>) -> Result<Option<&'a str>, String> {
        resolve_voice(self, &[], voice)
    }
}

/// The one voice rule, with the server's `aliases` (see
/// [`Catalog::resolve_voice`](crate::catalog::Catalog::resolve_voice)).
pub(crate) fn resolve_voice<'a>(
    capabilities: &'a EngineCapabilities,
    aliases: &'a [(String, String)],
    voice: Option<&'a str>,
) -> Result<Option<&'a str>, String> {
    let Some(voice) = voice else { return Ok(None) };
    if capabilities.voices.is_empty() {
        return Ok(Some(voice));
    }
    if let Some(declared) = capabilities.voice(voice) {
        return Ok(Some(&declared.id));
    }
    if capabilities.mix(voice).is_some() {
        // A mix goes to the engine as it was written; the engine reads it with [`voice_mix`].
        return Ok(Some(voice));
    }
    let lower = voice.to_lowercase();
    if lower == "default" {
        return Ok(None);
    }
    if let Some((_, target)) = aliases.iter().find(|(alias, _)| alias.to_lowercase() == lower) {
        // `None`: an alias of `default`.
        return Ok(capabilities.voice(target).map(|v| v.id.as_str()));
    }
    let mut names: Vec<&str> = capabilities.voices.iter().map(|v| v.id.as_str()).collect();
    names.sort_unstable();
    Err(format!("Invalid voice '{voice}'. Supported: {}", names.join(", ")))
}

/// A voice mix as Kokoro-FastAPI writes it: voices joined by `+`, each with an optional
/// positive weight in parentheses (`af_bella(2)+af_sky(1)`; 1 when left out), spaces around
/// the parts ignored. `None` when a part is empty or a weight is not a positive number. A
/// single voice is a mix of one.
pub fn voice_mix(name: &str) -> Option<Vec<(&str, f32)>> {
    name.split('+')
        .map(|part| {
            let part = part.trim();
            let (voice, weight) = match part.strip_suffix(')').and_then(|p| p.split_once('(')) {
                Some((voice, weight)) => (voice.trim(), weight.trim().parse::<f32>().ok()?),
                None => (part, 1.0),
            };
            let valid = !voice.is_empty() && !voice.contains(['(', ')']) && weight.is_finite() && weight > 0.0;
            valid.then_some((voice, weight))
        })
        .collect()
}

/// The refusal of codec output by an engine without a codec.
pub const CODEC_UNSUPPORTED: &str = "output_mode='codec_tokens' is not supported by the loaded TTS model.";

fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
}

/// Where an engine delivers a request's events.
pub trait EventSink: Send {
    /// Deliver one event. May block while the consumer is slow (that is the
    /// backpressure); returns false once the consumer is gone, after which the
    /// engine should stop work on the request.
    fn send(&self, event: EngineEvent) -> bool;

    /// Deliver without waiting. `Full` hands the event back while the consumer's queue is
    /// full: an engine that serves many requests from one thread keeps it and pauses that
    /// request (and only that one) until a retry succeeds. `Closed` once the consumer is gone.
    /// The default calls `send`, which is right only for a sink that never waits (an
    /// unbounded queue); a sink that can be full, or wraps one that can, must override it.
    /// Engines may call it from any thread, including the caller of `submit`.
    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        if self.send(event) {
            Ok(())
        } else {
            Err(TrySendError::Closed)
        }
    }
}

/// Why [`EventSink::try_send`] did not deliver an event.
#[derive(Debug)]
pub enum TrySendError {
    /// The consumer's queue has no room now: here is the event back, to retry later.
    Full(EngineEvent),
    /// The consumer is gone; stop work on the request.
    Closed,
}

/// How busy an engine is, for `/metrics`. Engines fill in what they know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineLoad {
    /// Requests accepted but not started (waiting for a batch slot).
    pub queued: u64,
    /// Requests being computed.
    pub running: u64,
    /// Batches run so far, by size: `(batch size, how many batches of that size)`. Cumulative
    /// since the engine started; empty for an engine that does not batch.
    pub batch_sizes: Vec<(u64, u64)>,
    /// Per worker, for an engine that computes on several (empty otherwise).
    pub workers: Vec<crate::capacity::WorkerLoad>,
    /// Streamed audio against real-time playback, and refusals.
    pub streams: crate::capacity::StreamTiming,
    /// How full the engine is, from its own admission's view: 0 idle, 1 full (the next stream
    /// would be refused or delayed); what load balancers weigh replicas by. 0 for an engine that
    /// never refuses.
    pub usage: f64,
}

/// A synthesis engine shared by all sessions.
///
/// `submit` must not block for long: drivers call it from their connection's thread or task.
/// An engine that computes on threads of its own sends events from there; one that computes
/// in `submit` must use [`EventSink::try_send`] there, since [`EventSink::send`] may wait for
/// the very caller it would block.
///
/// A minimal engine: one second of silence per request, handed over before `submit` returns.
///
/// ```
/// use speechstream_core::engine::{
///     Engine, EngineCapabilities, EngineEvent, EngineEventKind, EventSink, RequestId, SynthesisRequest,
/// };
///
/// struct Silence {
///     capabilities: EngineCapabilities,
/// }
///
/// impl Engine for Silence {
///     fn capabilities(&self) -> &EngineCapabilities {
///         &self.capabilities
///     }
///
///     fn submit(&self, id: RequestId, _request: SynthesisRequest, sink: Box<dyn EventSink>) {
///         let sample_rate = self.capabilities.sample_rate;
///         let pcm = vec![0; sample_rate as usize * 2];
///         for kind in [EngineEventKind::Audio { pcm, sample_rate }, EngineEventKind::Finished] {
///             // `try_send`, not `send`: this runs on the driver's thread, and a full queue is
///             // emptied only by that thread. A real engine keeps what did not fit and retries.
///             if sink.try_send(EngineEvent { id, kind }).is_err() {
///                 return;
///             }
///         }
///     }
///
///     // Everything was delivered in `submit`: nothing is left to stop.
///     fn abort(&self, _id: RequestId) {}
/// }
///
/// // Any voice, language and task type; no word timings, no codec frames.
/// let engine = Silence { capabilities: EngineCapabilities::new("silence", 24_000) };
///
/// // A sink for a driver whose engine events go into an unbounded channel.
/// struct Channel(std::sync::mpsc::Sender<EngineEvent>);
/// impl EventSink for Channel {
///     fn send(&self, event: EngineEvent) -> bool {
///         self.0.send(event).is_ok()
///     }
/// }
/// let (tx, rx) = std::sync::mpsc::channel();
/// let id = RequestId { connection: 1, utterance: 0 };
/// engine.submit(id, SynthesisRequest::new("Hello."), Box::new(Channel(tx)));
/// let events: Vec<EngineEventKind> = rx.try_iter().map(|event| event.kind).collect();
/// assert!(matches!(&events[..], [EngineEventKind::Audio { pcm, .. }, EngineEventKind::Finished] if pcm.len() == 48_000));
/// ```
///
/// `synthetic::SyntheticEngine` (with the crate's `synthetic` feature) is a complete one,
/// with pacing, word timings, codec frames and aborts.
pub trait Engine: Send + Sync {
    /// What the engine can do; the session checks each request against it. Called once per
    /// session (the driver passes it to [`Session::new`](crate::session::Session::new)).
    fn capabilities(&self) -> &EngineCapabilities;
    /// Current load; read when `/metrics` is scraped, so it must be cheap and not block.
    fn load(&self) -> EngineLoad {
        EngineLoad::default()
    }
    /// Why the engine can compute nothing more (its workers are gone), if so: the server then
    /// reports itself not ready. Cheap, like [`Engine::load`].
    fn failure(&self) -> Option<String> {
        None
    }
    /// Start a request. Events, ending with exactly one `Finished` or `Failed`,
    /// go to `sink` (unless the request is aborted first).
    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>);
    /// Stop a request at the next chunk. Unknown ids are ignored.
    fn abort(&self, id: RequestId);
}
