//! [`HibariEngine`]: the hibari voice behind speechstream-core's [`Engine`] trait.
//!
//! All the model work happens on the engine's worker threads ([`crate::workers`], each a
//! [`crate::scheduler`] loop) that share the weights; `submit` and `abort` only decide where a
//! request goes (or refuse it) and post commands, so they never block the caller (the
//! transport calls them from its async tasks). One engine serves every transport.

use std::sync::Arc;

use speechstream_core::config::TaskType;
use speechstream_core::engine::{
    voice_mix, Engine, EngineCapabilities, EngineLoad, EventSink, Language, RequestId, SynthesisRequest, Voice,
};
use tch::Device;

use crate::dsp::SAMPLE_RATE;
use crate::g2p::japanese::{Japanese, WORD_LIST};
use crate::g2p::FrontEnd;
use crate::hibari::{Hibari, Precision};
use crate::kokoro::serve::{
    load_network, reads_british, reads_japanese, KokoroVoiceModel, Vocab, KOKORO_DEFAULT_VOICE, KOKORO_MODEL_NAME,
};
use crate::kokoro::voices::{scan, KokoroFiles};
use crate::options::{HibariOptions, DEFAULT_VOICE};
use crate::scheduler::{Model, VoiceModel};
use crate::voices::{check_voice_file, read_voice_list};
use crate::workers::{default_workers, Pool};

/// Workers on a GPU by default (at most one per CPU): a worker's passes also wait on the host
/// (Kokoro's LSTMs and harmonic source run there, every pass copies and synchronises), which
/// other workers overlap. Measured on an H200 (benches/results/15-gpu.md): 4 workers doubled
/// hibari's audio per second (1,213 against 628 s/s at 64 streams, 6 late chunks of 9,192
/// against 404 of 4,800) and Kokoro's listeners at 0 late chunks (32 against 16); 8 held
/// Kokoro's 64 listeners a little better (4 late chunks of 640 against 42).
const CUDA_WORKERS: usize = 4;

pub struct HibariEngine {
    capabilities: EngineCapabilities,
    pool: Pool,
    precision: Precision,
}

impl HibariEngine {
    /// Loads every voice whose file is present (checked against `voices.json`) and the front ends
    /// they need, then starts the workers. Errors say what is missing. Without
    /// [`HibariOptions::hibari_voices`], Kokoro's voices alone (`say` with one of them): hibari's
    /// model is neither read nor needed, only its text front end's files.
    pub fn new(options: HibariOptions) -> Result<HibariEngine, String> {
        crate::keep_freed_memory();
        if let Some(threads) = options.threads {
            tch::set_num_threads(threads);
        }
        let dir = &options.assets_dir;
        let missing =
            || format!("run scripts/setup.sh (or scripts/setup-voice.sh hibari) to put them in {}", dir.display());
        if options.hibari_voices && !dir.join("hibari.onnx").is_file() {
            return Err(format!("hibari's assets are not in {}: {}", dir.display(), missing()));
        }
        let list = if options.hibari_voices { read_voice_list(dir)? } else { Vec::new() };
        let kokoro_required = options.kokoro_required || !options.hibari_voices;
        let entries: Vec<_> = list
            .into_iter()
            .filter(|entry| match check_voice_file(dir, entry) {
                Ok(present) => present,
                Err(e) => {
                    tracing::warn!(voice = %entry.name, "voice left out: {e}");
                    false
                }
            })
            .collect();
        // Kokoro's voices, when its directory has them (read before the front ends: they need
        // both accents).
        let scanned = options.kokoro_dir.as_deref().map(scan);
        // (logged first: a file left out may be why the directory has no voices or model)
        for skipped in scanned.iter().flat_map(|files| &files.skipped) {
            tracing::warn!("Kokoro file left out: {skipped}");
        }
        let kokoro = match scanned {
            Some(files) if files.voices.is_empty() || files.model(false).is_none() => {
                let dir = options.kokoro_dir.as_deref().unwrap_or(dir).display();
                let what = if files.voices.is_empty() { "no voices" } else { "no kokoro-v1.0[.int8].onnx" };
                if kokoro_required {
                    return Err(format!("Kokoro: {dir} has {what} (run scripts/setup-voice.sh kokoro)"));
                }
                if !files.voices.is_empty() || files.model(false).is_some() {
                    tracing::warn!("Kokoro left out: {dir} has {what}");
                }
                None
            }
            None if !options.hibari_voices => return Err("Kokoro: no directory of its files".to_owned()),
            files => files,
        };
        let mut accents: Vec<bool> = entries.iter().map(|e| e.british).collect();
        let readers = kokoro.as_ref().map(|files| kokoro_readers(files, options.only_request.as_ref()));
        if let Some(readers) = readers {
            // (one English accent at least: every voice holds one)
            if readers.american || !readers.british {
                accents.push(false);
            }
            if readers.british {
                accents.push(true);
            }
        }
        accents.sort_unstable();
        accents.dedup();
        let device = options.device;
        let (front_ends, models) = std::thread::scope(|scope| {
            // The front ends (lexicons, tagger, OOV net: ~0.1 s) load on a second thread while
            // the voices load on this one.
            let front_ends = scope.spawn(|| {
                let started = std::time::Instant::now();
                let loaded = accents
                    .iter()
                    .map(|&british| {
                        FrontEnd::load_accent(dir, device, british).map(|mut fe| {
                            fe.set_pronunciations(options.pronunciations.clone());
                            fe.set_text_options(options.text);
                            (british, Arc::new(fe))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("hibari's text front end: {e}"));
                tracing::debug!(s = started.elapsed().as_secs_f64(), accents = accents.len(), "front ends loaded");
                loaded
            });
            // fp16 is Kokoro's: hibari then runs fp32
            let mut precision = options.precision.map(|p| if p == Precision::Fp16 { Precision::Fp32 } else { p });
            let mut models = Vec::new();
            for entry in &entries {
                let load = |precision: Option<Precision>| {
                    let mut m = Hibari::load_voice(dir, &entry.file, device)?;
                    match precision {
                        Some(p) => m.set_precision(p).map(|()| (m, p)),
                        None => {
                            let choice = m.set_fastest_precision()?;
                            let ms = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{:.2} ms", s * 1e3));
                            tracing::info!(
                                precision = %choice.precision,
                                int8_kernels = %choice.level,
                                probe_int8 = %ms(choice.int8_s),
                                probe_fp32 = %ms(choice.fp32_s),
                                "precision auto: the faster on this machine"
                            );
                            Ok((m, choice.precision))
                        }
                    }
                };
                match load(precision) {
                    Ok((model, chosen)) => {
                        precision = Some(chosen);
                        models.push(model);
                    }
                    Err(e) => return (front_ends.join(), Err(format!("voice {} ({}): {e}", entry.name, entry.file))),
                }
            }
            (front_ends.join(), Ok((models, precision)))
        });
        let front_ends = front_ends.map_err(|_| "loading hibari's text front end panicked".to_owned())??;
        let (models, mut precision) = models?;
        let mut voices = Vec::new();
        // Each voice as the engine declares it: its name, language and description from voices.json.
        let mut declared = Vec::new();
        for (entry, model) in entries.into_iter().zip(models) {
            let mut voice = Voice::new(entry.name.clone());
            if let Some(language) = &entry.language {
                voice = voice.with_language(language.clone());
            }
            if let Some(description) = &entry.description {
                voice = voice.with_description(description.clone());
            }
            declared.push(voice);
            let front_end = front_ends.iter().find(|(b, _)| *b == entry.british).map(|(_, fe)| fe.clone());
            let front_end = front_end.ok_or_else(|| format!("no front end for voice {}", entry.name))?;
            for (word, p) in options.pronunciations.iter() {
                crate::scheduler::check_pronunciation(word, p, |s| model.char_tokens(s))
                    .map_err(|e| format!("--lexicon: {e}"))?;
            }
            voices.push(VoiceModel { name: entry.name, model: Model::Hibari(model), front_end });
        }
        let default = voices.iter().position(|v| v.name == DEFAULT_VOICE);
        if options.hibari_voices && default.is_none() {
            return Err(format!("voice {DEFAULT_VOICE} is missing from {}: {}", dir.display(), missing()));
        }
        // What hibari can do; the core refuses the rest before a request gets here.
        let mut capabilities = options.hibari_voices.then(|| {
            EngineCapabilities::new(options.model_name.clone(), SAMPLE_RATE)
                .with_voices(declared)
                .with_languages([Language::new("English", "en")])
                .with_task_types([TaskType::CustomVoice])
                .with_instructions(false)
                .with_word_timestamps(true)
        });
        // An accent left out (the one request reads with the other) is the other's.
        let front_end = |british: bool| {
            let find = |british: bool| front_ends.iter().find(|(b, _)| *b == british).map(|(_, fe)| fe.clone());
            find(british).or_else(|| find(!british))
        };
        if let (Some(files), Some(american), Some(british)) = (kokoro, front_end(false), front_end(true)) {
            let japanese = readers.is_none_or(|r| r.japanese);
            match load_kokoro(&files, dir, &options, american, british, japanese) {
                Ok((kokoro_voices, kokoro_capabilities, kokoro_precision)) => {
                    // Kokoro alone: the engine's precision is what its network runs in.
                    if !options.hibari_voices {
                        precision = Some(kokoro_precision);
                    }
                    tracing::info!(voices = kokoro_voices.len(), hibari = options.hibari_voices, "Kokoro-82M served");
                    voices.extend(kokoro_voices);
                    capabilities = Some(match capabilities {
                        Some(hibari) => {
                            EngineCapabilities::hosting(vec![hibari, kokoro_capabilities]).ok_or("no capabilities")?
                        }
                        None => kokoro_capabilities,
                    });
                }
                Err(e) if kokoro_required => return Err(format!("Kokoro: {e}")),
                Err(e) => tracing::warn!("Kokoro left out: {e}"),
            }
        }
        let capabilities = capabilities.ok_or("no voices to serve")?;
        // Kokoro's voices alone: its default voice (`af_heart` when present, else its first).
        let default =
            default.or_else(|| voices.iter().position(|v| v.name == KOKORO_DEFAULT_VOICE)).unwrap_or_default();
        let precision = precision.unwrap_or(Precision::Fp32);
        let workers = options.workers.unwrap_or(if device == Device::Cpu {
            default_workers()
        } else {
            CUDA_WORKERS.min(default_workers())
        });
        let pool = Pool::start(workers, Arc::new(voices), default, &capabilities, &options)?;
        Ok(HibariEngine { capabilities, pool, precision })
    }

    /// The model names served (hibari's first; `kokoro` when its voices are served too).
    pub fn models(&self) -> &[String] {
        &self.capabilities.models
    }

    /// The precision the voices run in (what `auto` chose, when it was asked to).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// How many workers compute requests.
    pub fn workers(&self) -> usize {
        self.pool.workers()
    }
}

/// Which of Kokoro's front ends to load.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Readers {
    american: bool,
    british: bool,
    japanese: bool,
}

/// The front ends Kokoro's voices read with: all of them, or, for the one request an engine is
/// made for ([`HibariOptions::only_request`]) naming Kokoro's voices, those its voice (each of a
/// mix's) reads its text with.
fn kokoro_readers(files: &KokoroFiles, only: Option<&SynthesisRequest>) -> Readers {
    let all = Readers { american: true, british: true, japanese: true };
    let Some(request) = only else { return all };
    let Some(parts) = request.voice.as_deref().and_then(voice_mix) else { return all };
    let mut readers = Readers { american: false, british: false, japanese: false };
    let language = request.language.as_deref();
    for (name, _) in parts {
        // Another voice (an OpenAI name, `default`): what it is is known once resolved.
        let Some(voice) = files.voices.iter().find(|v| v.name.eq_ignore_ascii_case(name)) else { return all };
        if reads_japanese(voice.language, language, &request.text) {
            readers.japanese = true;
        } else if reads_british(voice.language, language) {
            readers.british = true;
        } else {
            readers.american = true;
        }
    }
    readers
}

/// Kokoro's voices as the workers hold them, on one network loaded from `files`, what they can
/// do, and the precision the network runs in (`auto`'s choice, or fp32 for the fp32 export).
fn load_kokoro(
    files: &KokoroFiles,
    hibari_dir: &std::path::Path,
    options: &HibariOptions,
    american: Arc<FrontEnd>,
    british: Arc<FrontEnd>,
    wants_japanese: bool,
) -> Result<(Vec<VoiceModel>, EngineCapabilities, Precision), String> {
    // `--precision auto` is Kokoro's own auto (not what hibari's probe chose for hibari).
    let precision = options.precision.unwrap_or_else(|| crate::KokoroModel::auto_precision(options.device));
    // The hand-written network reads the int8 export's weights (fp32 runs them dequantized); an
    // fp32 export alone is refused with a clear error at load.
    let onnx = files.model(false).ok_or("no model file")?;
    // Kokoro's vocabulary: its own vocab.json when present, else hibari's (the same alphabet,
    // checked in kokoro::serve's tests).
    let kokoro_dir = options.kokoro_dir.as_deref().unwrap_or(hibari_dir);
    let vocab_path = Some(kokoro_dir.join("vocab.json")).filter(|p| p.is_file());
    let vocab = Arc::new(Vocab::read(&vocab_path.unwrap_or_else(|| hibari_dir.join("vocab.json")))?);
    // Japanese: Debian's Open JTalk dictionary (or $SPEECHSTREAM_JA_DICTIONARY's) and misaki's
    // word list beside Kokoro's files; without the dictionary Japanese requests are refused
    // with what to install, and the rest is served. Read while the network loads.
    let dictionary = std::env::var_os("SPEECHSTREAM_JA_DICTIONARY").map(std::path::PathBuf::from);
    let word_list = kokoro_dir.join(WORD_LIST);
    let (network, japanese) = std::thread::scope(|scope| {
        let japanese = scope.spawn(|| {
            if !wants_japanese {
                return Err("Japanese is not loaded: this engine was made for one request in English".to_owned());
            }
            let started = std::time::Instant::now();
            let loaded = Japanese::load(dictionary.as_deref(), &word_list).map(Arc::new);
            tracing::debug!(s = started.elapsed().as_secs_f64(), "Japanese front end loaded");
            loaded
        });
        let started = std::time::Instant::now();
        let network = match load_network(onnx, options.device, precision) {
            // `auto` chose int8, but the file is the fp32 export: its own arithmetic then.
            Err(e) if options.precision.is_none() && precision == Precision::Int8 => {
                tracing::info!(file = %onnx.display(), reason = %e, "Kokoro in fp32");
                load_network(onnx, options.device, Precision::Fp32)
            }
            result => result,
        };
        tracing::debug!(s = started.elapsed().as_secs_f64(), "Kokoro's network loaded");
        let japanese = japanese.join().unwrap_or_else(|_| Err("loading the Japanese front end panicked".to_owned()));
        (network, japanese)
    });
    let network = network?;
    let precision = network.precision();
    match (&japanese, wants_japanese) {
        (Ok(ja), _) => tracing::info!(dictionary = %ja.dictionary_dir().display(), "Kokoro reads Japanese"),
        (Err(e), true) => tracing::warn!("Kokoro reads no Japanese: {e}"),
        (Err(e), false) => tracing::debug!("Kokoro reads no Japanese: {e}"),
    }
    let mut voices = Vec::new();
    let mut declared = Vec::new();
    for voice in &files.voices {
        let mut listed = Voice::new(voice.name.clone()).with_description(voice.description());
        if let Some(language) = voice.language {
            listed = listed.with_language(language);
        }
        declared.push(listed);
        let model = KokoroVoiceModel {
            network: network.clone(),
            vocab: vocab.clone(),
            pack: Arc::new(voice.pack.clone()),
            language: voice.language,
            american: american.clone(),
            british: british.clone(),
            japanese: japanese.clone(),
        };
        let front_end = model.front_end(None).clone();
        voices.push(VoiceModel { name: voice.name.clone(), model: Model::Kokoro(model), front_end });
    }
    let capabilities = EngineCapabilities::new(KOKORO_MODEL_NAME, SAMPLE_RATE)
        .with_voices(declared)
        .with_languages([Language::new("English", "en"), Language::new("Japanese", "ja")])
        .with_task_types([TaskType::CustomVoice])
        .with_instructions(false)
        .with_word_timestamps(true)
        .with_mixing(true);
    Ok((voices, capabilities, precision))
}

impl Engine for HibariEngine {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }

    fn load(&self) -> EngineLoad {
        self.pool.load()
    }

    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        self.pool.submit(id, request, sink);
    }

    fn abort(&self, id: RequestId) {
        self.pool.abort(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kokoro::voices::{KokoroVoice, VoicePack};

    #[test]
    fn one_requests_kokoro_voice_loads_only_the_front_ends_it_reads_with() {
        let voice = |name: &str, language| KokoroVoice {
            name: name.to_owned(),
            language: Some(language),
            pack: VoicePack::new(vec![0.0; 256]).unwrap(),
            file: "voices.npz".into(),
        };
        let files = KokoroFiles {
            voices: vec![voice("af_heart", "en-US"), voice("bf_emma", "en-GB"), voice("jf_alpha", "ja")],
            ..KokoroFiles::default()
        };
        let readers = |voice: &str, language: Option<&str>, text: &str| {
            let mut request = SynthesisRequest::new(text).with_voice(voice);
            if let Some(language) = language {
                request = request.with_language(language);
            }
            let r = kokoro_readers(&files, Some(&request));
            (r.american, r.british, r.japanese)
        };
        let all = (true, true, true);
        assert_eq!(readers("af_heart", None, "Hello."), (true, false, false));
        assert_eq!(readers("AF_HEART", Some("en-GB"), "Hello."), (false, true, false));
        assert_eq!(readers("bf_emma", None, "Hello."), (false, true, false));
        // a Japanese voice reads English as American, Japanese script (or language ja) as Japanese
        assert_eq!(readers("jf_alpha", None, "Hello."), (true, false, false));
        assert_eq!(readers("jf_alpha", None, "今日は。"), (false, false, true));
        assert_eq!(readers("af_heart", Some("ja"), "Hello."), (false, false, true));
        assert_eq!(readers("af_heart(2)+bf_emma", None, "Hello."), (true, true, false));
        // names only resolved later (OpenAI's, `default`, hibari's), and any engine: everything
        assert_eq!(readers("alloy", None, "Hello."), all);
        assert_eq!(readers("af_heart+nobody", None, "Hello."), all);
        let r = kokoro_readers(&files, None);
        assert_eq!((r.american, r.british, r.japanese), all);
    }
}
