//! What a server offers its clients: the engine's capabilities under the server's names.
//!
//! An engine declares its voices and models ([`EngineCapabilities`]); a server may give them
//! more names (OpenAI's voice and model names, which its clients send, or an operator's
//! `--voice-alias`). Those names are the server's, kept in a [`Naming`] beside the
//! capabilities, so an engine author need not know them. A [`Catalog`] holds both, and every
//! protocol (WebSocket `session.config`, HTTP speech and batch, Wyoming) resolves a client's
//! voice and model through it, with the same case and alias rules, once, before the engine
//! sees the request: the engine receives its own voice name.

use std::sync::Arc;

use crate::engine::{EngineCapabilities, SynthesisRequest};

/// OpenAI's voice names, which its clients (Pipecat, LiveKit, the openai SDK's examples) send
/// and some allow no others: by default ([`Naming::openai`]) each is an alias of the default
/// voice.
pub const OPENAI_VOICES: [&str; 13] =
    ["alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage", "shimmer", "verse"];

/// OpenAI's speech model names, accepted by default ([`Naming::openai`]) as names of the
/// served model.
pub const OPENAI_MODELS: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

/// The model names of the example clients of vLLM-Omni (the server this one can replace), as
/// prefixes: Qwen3-TTS (`Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice`, ...) and CosyVoice
/// (`FunAudioLLM/Fun-CosyVoice3-0.5B-2512`, ...). Accepted under [`Naming::with_vllm_omni`].
pub const VLLM_OMNI_MODEL_PREFIXES: [&str; 2] = ["Qwen/Qwen3-TTS-", "FunAudioLLM/"];

/// Qwen3-TTS's preset speakers (its CustomVoice checkpoints), which vLLM-Omni's example
/// clients send (`Vivian` by default): under [`Naming::with_vllm_omni`] each is an alias of the
/// default voice.
pub const QWEN3_TTS_SPEAKERS: [&str; 9] =
    ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"];

/// The names a server gives voices and models besides the engine's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Naming {
    /// Other names for voices, as `(alias, voice)`: a request naming the alias (in any case)
    /// gets the voice, and `voice` may be `default` (the engine's default voice).
    pub voice_aliases: Vec<(String, String)>,
    /// More model names a request may send, not listed in `GET /v1/models`; each also with a
    /// date after it (`gpt-4o-mini-tts-2025-12-15`, `tts-1-1106`), as OpenAI names snapshots.
    pub model_aliases: Vec<String>,
    /// Model names a request may send that start with one of these (not listed either).
    pub model_prefixes: Vec<String>,
}

impl Naming {
    /// No names but the engine's.
    pub fn new() -> Naming {
        Naming::default()
    }

    /// These names and `alias` for `voice` (which may be `default`), in place of any alias of
    /// that name (in any case).
    pub fn with_voice_alias(mut self, alias: impl Into<String>, voice: impl Into<String>) -> Naming {
        let alias = alias.into();
        self.voice_aliases.retain(|(name, _)| !name.eq_ignore_ascii_case(&alias));
        self.voice_aliases.push((alias, voice.into()));
        self
    }

    /// These names and `model` as a name of the served model.
    pub fn with_model_alias(mut self, model: impl Into<String>) -> Naming {
        self.model_aliases.push(model.into());
        self
    }

    /// OpenAI's names: each of [`OPENAI_VOICES`] an alias of the default voice, each of
    /// [`OPENAI_MODELS`] a name of the served model.
    pub fn openai() -> Naming {
        Naming {
            voice_aliases: OPENAI_VOICES.iter().map(|v| (v.to_string(), "default".to_owned())).collect(),
            model_aliases: OPENAI_MODELS.iter().map(|m| m.to_string()).collect(),
            model_prefixes: Vec::new(),
        }
    }

    /// These names and vLLM-Omni's example clients' defaults: model names starting with
    /// [`VLLM_OMNI_MODEL_PREFIXES`], and each of [`QWEN3_TTS_SPEAKERS`] an alias of the default
    /// voice (one already given, in any case, is kept).
    pub fn with_vllm_omni(mut self) -> Naming {
        for speaker in QWEN3_TTS_SPEAKERS {
            if !self.voice_aliases.iter().any(|(alias, _)| alias.eq_ignore_ascii_case(speaker)) {
                self.voice_aliases.push((speaker.to_owned(), "default".to_owned()));
            }
        }
        self.model_prefixes.extend(VLLM_OMNI_MODEL_PREFIXES.iter().map(|p| p.to_string()));
        self
    }

    /// Whether `model` is one of these names: a model alias (or one with a date after it) or a
    /// name with one of the prefixes.
    pub fn names_model(&self, model: &str) -> bool {
        self.model_aliases.iter().any(|alias| model == alias || dated(model, alias))
            || self.model_prefixes.iter().any(|prefix| model.starts_with(prefix.as_str()) && model.len() > prefix.len())
    }
}

/// `model` is `base` and a date: `-YYYY-MM-DD` or `-MMDD`, as OpenAI names its snapshots.
fn dated(model: &str, base: &str) -> bool {
    let Some(date) = model.strip_prefix(base).and_then(|rest| rest.strip_prefix('-')) else { return false };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match date.split('-').collect::<Vec<_>>()[..] {
        [year, month, day] => digits(year, 4) && digits(month, 2) && digits(day, 2),
        [month_day] => digits(month_day, 4),
        _ => false,
    }
}

/// An engine's capabilities and the server's [`Naming`]: what every protocol checks a request
/// against and resolves its names with. Cheap to clone (both are shared).
///
/// What the engine cannot honour but would not change whose voice speaks or in what language
/// (a style prompt, `instructions`) is by default dropped from the request and named in
/// [`SynthesisRequest::ignored`], for the protocols to report; [`Catalog::with_strict`]
/// refuses it instead. What would change the audio's identity (an unknown voice or language,
/// voice cloning) is always refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    capabilities: Arc<EngineCapabilities>,
    naming: Arc<Naming>,
    strict: bool,
}

impl Catalog {
    /// The engine's `capabilities` under `naming`, lenient.
    pub fn new(capabilities: Arc<EngineCapabilities>, naming: Naming) -> Catalog {
        Catalog { capabilities, naming: Arc::new(naming), strict: false }
    }

    /// This catalog refusing (`true`) what the engine cannot honour instead of ignoring it.
    pub fn with_strict(mut self, strict: bool) -> Catalog {
        self.strict = strict;
        self
    }

    /// Whether it refuses what the engine cannot honour ([`Catalog::with_strict`]).
    pub fn strict(&self) -> bool {
        self.strict
    }

    /// The engine's capabilities.
    pub fn capabilities(&self) -> &Arc<EngineCapabilities> {
        &self.capabilities
    }

    /// The server's names.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// Whether a request may name `model`: one of the engine's models or the server's names
    /// for it ([`Naming::names_model`]).
    pub fn serves_model(&self, model: &str) -> bool {
        self.capabilities.serves_model(model) || self.naming.names_model(model)
    }

    /// The engine's name for the voice a client asked for: the declared voice it names in any
    /// case, the voice an alias stands for, or `None` (the default voice) for no voice,
    /// `default` or an alias of it. An engine that declares no voices takes any name as it is.
    pub fn resolve_voice<'a>(&'a self, voice: Option<&'a str>) -> Result<Option<&'a str>, String> {
        crate::engine::resolve_voice(&self.capabilities, &self.naming.voice_aliases, voice)
    }

    /// The aliases that are also the name of one of the engine's voices (in any case): the
    /// voice wins, so the alias never applies (OpenAI's `fable` where hibari's voice `fable` is
    /// installed). A server reports them at start-up.
    pub fn shadowed_aliases(&self) -> Vec<&str> {
        let aliases = self.naming.voice_aliases.iter().map(|(alias, _)| alias.as_str());
        aliases.filter(|alias| self.capabilities.voice(alias).is_some()).collect()
    }

    /// Checks `request` against the engine that will serve it
    /// ([`EngineCapabilities::check`]'s checks, in its order) and gives its voice the engine's
    /// name ([`Catalog::resolve_voice`]); `Err` is the refusal. Unless strict, `instructions`
    /// the engine does not follow are dropped and named in [`SynthesisRequest::ignored`].
    pub fn resolve(&self, request: &mut SynthesisRequest) -> Result<(), String> {
        let voice = self.resolve_voice(request.voice.as_deref()).map(|v| v.map(str::to_owned));
        // Routed by the voice the engine will receive (by the model, when it names none).
        request.voice = voice.clone().unwrap_or(None);
        let serving = self.capabilities.serving(request);
        let styled = request.instructions.as_deref().is_some_and(|i| !i.trim().is_empty());
        if styled && !serving.instructions && !self.strict {
            request.instructions = None;
            if !request.ignored.contains(&"instructions") {
                request.ignored.push("instructions");
            }
        }
        serving.check_features(request)?;
        voice.map(drop)
    }

    /// The capabilities of the engine that will serve `request`: the engine of its voice
    /// (resolved), else of its model ([`EngineCapabilities::serving`]).
    pub fn serving(&self, request: &SynthesisRequest) -> &EngineCapabilities {
        let voice = self.resolve_voice(request.voice.as_deref()).ok().flatten();
        self.capabilities.serving_names(voice, request.model.as_deref())
    }

    /// The sample rate of the audio `request` will get: its engine's ([`Catalog::serving`]).
    pub fn sample_rate_for(&self, request: &SynthesisRequest) -> u32 {
        self.serving(request).sample_rate
    }
}

impl From<Arc<EngineCapabilities>> for Catalog {
    /// The engine's names only.
    fn from(capabilities: Arc<EngineCapabilities>) -> Catalog {
        Catalog::new(capabilities, Naming::new())
    }
}

impl From<EngineCapabilities> for Catalog {
    /// The engine's names only.
    fn from(capabilities: EngineCapabilities) -> Catalog {
        Catalog::from(Arc::new(capabilities))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(naming: Naming) -> Catalog {
        Catalog::new(Arc::new(EngineCapabilities::new("hibari", 24_000).with_voices(["heart", "fable"])), naming)
    }

    // Issue 34: the openai SDK's dated model names are OpenAI's names too.
    #[test]
    fn dated_openai_model_names_are_served() {
        let openai = catalog(Naming::openai());
        for model in ["hibari", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15", "tts-1-1106", "tts-1-hd-1106"] {
            assert!(openai.serves_model(model), "{model}");
        }
        for model in ["gpt-4o-mini-tts-2025-12", "gpt-4o-mini-tts-latest", "tts-1-", "hibari-2025-12-15", "tts-2"] {
            assert!(!openai.serves_model(model), "{model}");
        }
        assert!(!catalog(Naming::new()).serves_model("gpt-4o-mini-tts-2025-12-15"));
    }

    // Issue 34: vLLM-Omni's example clients' defaults, under the compatibility switch only.
    #[test]
    fn vllm_omni_defaults_under_the_switch() {
        let plain = catalog(Naming::openai());
        let compat = catalog(Naming::openai().with_vllm_omni());
        for model in ["Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"] {
            assert!(!plain.serves_model(model) && compat.serves_model(model), "{model}");
        }
        assert!(!compat.serves_model("Qwen/Qwen3-TTS-") && !compat.serves_model("Qwen/Qwen2.5-Omni-7B"));
        assert!(plain.resolve_voice(Some("Vivian")).is_err());
        for speaker in ["Vivian", "ryan", "UNCLE_FU", "Ono_Anna"] {
            assert_eq!(compat.resolve_voice(Some(speaker)), Ok(None), "{speaker}: the default voice");
        }
        // The engine's own voices win over any alias.
        assert_eq!(compat.resolve_voice(Some("Fable")), Ok(Some("fable")));
        assert_eq!(compat.shadowed_aliases(), ["fable"], "OpenAI's fable is also a voice");
        assert!(catalog(Naming::new()).shadowed_aliases().is_empty());
        // An operator's alias of a speaker's name is kept.
        let mine = Naming::openai().with_voice_alias("vivian", "fable").with_vllm_omni();
        assert_eq!(catalog(mine).resolve_voice(Some("Vivian")), Ok(Some("fable")));
    }
}
