//! [`HibariEngine`]: the hibari voice behind speechstream-core's [`Engine`] trait.
//!
//! All the model work happens on the engine's worker threads ([`crate::workers`], each a
//! [`crate::scheduler`] loop) that share the weights; `submit` and `abort` only decide where a
//! request goes (or refuse it) and post commands, so they never block the caller (the
//! transport calls them from its async tasks). One engine serves every transport.

use std::sync::Arc;

use speechstream_core::config::TaskType;
use speechstream_core::engine::{
    Engine, EngineCapabilities, EngineLoad, EventSink, Language, RequestId, SynthesisRequest, Voice,
};
use tch::Device;

use crate::dsp::SAMPLE_RATE;
use crate::g2p::FrontEnd;
use crate::hibari::{Hibari, Precision};
use crate::options::{HibariOptions, DEFAULT_VOICE};
use crate::scheduler::VoiceModel;
use crate::voices::{check_voice_file, read_voice_list};
use crate::workers::{default_workers, Pool};

pub struct HibariEngine {
    capabilities: EngineCapabilities,
    pool: Pool,
    precision: Precision,
}

impl HibariEngine {
    /// Loads every voice whose file is present (checked against `voices.json`) and the front ends
    /// they need, then starts the workers. Errors say what is missing.
    pub fn new(options: HibariOptions) -> Result<HibariEngine, String> {
        crate::keep_freed_memory();
        if let Some(threads) = options.threads {
            tch::set_num_threads(threads);
        }
        let dir = &options.assets_dir;
        let missing =
            || format!("run scripts/setup.sh (or scripts/setup-voice.sh hibari) to put them in {}", dir.display());
        if !dir.join("hibari.onnx").is_file() {
            return Err(format!("hibari's assets are not in {}: {}", dir.display(), missing()));
        }
        let list = read_voice_list(dir)?;
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
        let mut accents: Vec<bool> = entries.iter().map(|e| e.british).collect();
        accents.sort_unstable();
        accents.dedup();
        let device = options.device;
        let (front_ends, models) = std::thread::scope(|scope| {
            // The front ends (lexicons, tagger, OOV net: ~0.1 s) load on a second thread while
            // the voices load on this one.
            let front_ends = scope.spawn(|| {
                accents
                    .iter()
                    .map(|&british| {
                        FrontEnd::load_accent(dir, device, british).map(|mut fe| {
                            fe.set_pronunciations(options.pronunciations.clone());
                            fe.set_text_options(options.text);
                            (british, Arc::new(fe))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("hibari's text front end: {e}"))
            });
            let mut precision = options.precision;
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
        let (models, precision) = models?;
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
                crate::scheduler::check_pronunciation(word, p, &model).map_err(|e| format!("--lexicon: {e}"))?;
            }
            voices.push(VoiceModel { name: entry.name, model, front_end });
        }
        let Some(default) = voices.iter().position(|v| v.name == DEFAULT_VOICE) else {
            return Err(format!("voice {DEFAULT_VOICE} is missing from {}: {}", dir.display(), missing()));
        };
        // What hibari can do; the core refuses the rest before a request gets here.
        let capabilities = EngineCapabilities::new(options.model_name.clone(), SAMPLE_RATE)
            .with_voices(declared)
            .with_languages([Language::new("English", "en")])
            .with_task_types([TaskType::CustomVoice])
            .with_instructions(false)
            .with_word_timestamps(true);
        let precision = precision.unwrap_or(Precision::Fp32);
        let workers = options.workers.unwrap_or(if device == Device::Cpu { default_workers() } else { 1 });
        let pool = Pool::start(workers, Arc::new(voices), default, &capabilities, &options)?;
        Ok(HibariEngine { capabilities, pool, precision })
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
