//! [`TorchEngine`]: the voice families ([`crate::family`]) behind speechstream-core's
//! [`Engine`] trait.
//!
//! All the model work happens on the engine's worker threads ([`crate::workers`], each a
//! [`crate::scheduler`] loop) that share the weights; `submit` and `abort` only decide where a
//! request goes (or refuse it) and post commands, so they never block the caller (the
//! transport calls them from its async tasks). One engine serves every transport and every
//! family: the core checks and routes each request by its voice or model
//! (`EngineCapabilities::hosting`).

use std::sync::Arc;

use speechstream_core::engine::{Engine, EngineCapabilities, EngineLoad, EventSink, RequestId, SynthesisRequest};
use tch::Device;

use crate::family::{Family, FrontEnds, LoadContext, Loaded};
use crate::options::EngineOptions;
use crate::precision::Precision;
use crate::scheduler::Voices;
use crate::workers::{default_workers, Pool};

/// The voice families the engine hosts, in the order their voices are listed; the first that
/// loads gives the engine its default voice and reported precision. One line per family.
pub fn families() -> Vec<Arc<dyn Family>> {
    vec![
        Arc::new(crate::hibari::serve::HibariFamily),
        Arc::new(crate::kokoro::serve::KokoroFamily::default()),
        Arc::new(crate::piper::serve::PiperFamily),
    ]
}

/// Makes the voice `name` (any case) the engine's default ([`EngineOptions::default_voice`]):
/// its family first (its default voice the engine's, its capabilities what a request naming no
/// voice or model is routed to), and in a family hosting one set of capabilities per rate, the
/// set with the voice first.
fn make_default(loaded: &mut Vec<(Arc<dyn Family>, Loaded)>, name: &str) -> Result<(), String> {
    let found = loaded.iter().enumerate().find_map(|(family, (_, l))| {
        l.voices.iter().find(|(v, _)| v.id.eq_ignore_ascii_case(name)).map(|(v, _)| (family, v.id.clone()))
    });
    let Some((family, id)) = found else {
        let all: Vec<&str> = loaded.iter().flat_map(|(_, l)| l.voices.iter().map(|(v, _)| v.id.as_str())).collect();
        return Err(format!("--default-voice {name}: no such voice (the voices: {})", all.join(", ")));
    };
    let mut entry = loaded.remove(family);
    entry.1.default_voice = id.clone();
    let hosted = &mut entry.1.capabilities.hosted;
    if let Some(k) = hosted.iter().position(|c| c.voice(&id).is_some()) {
        let own = hosted.remove(k);
        hosted.insert(0, own);
    }
    loaded.insert(0, entry);
    Ok(())
}

/// Workers on a GPU by default (at most one per CPU): a worker's passes also wait on the host
/// (Kokoro's LSTMs and harmonic source run there, every pass copies and synchronises), which
/// other workers overlap. Measured on an H200 (benches/results/15-gpu.md): 4 workers doubled
/// hibari's audio per second (1,213 against 628 s/s at 64 streams, 6 late chunks of 9,192
/// against 404 of 4,800) and Kokoro's listeners at 0 late chunks (32 against 16); 8 held
/// Kokoro's 64 listeners a little better (4 late chunks of 640 against 42).
const CUDA_WORKERS: usize = 4;

pub struct TorchEngine {
    capabilities: EngineCapabilities,
    pool: Pool,
    precision: Precision,
}

impl TorchEngine {
    /// Loads every family's voices ([`families`]) as `options` ask, then starts the workers.
    /// Errors say what is missing.
    pub fn new(options: EngineOptions) -> Result<TorchEngine, String> {
        Self::with_families(options, families())
    }

    /// As [`TorchEngine::new`], with these families (an embedder's own, or a test's).
    pub fn with_families(options: EngineOptions, families: Vec<Arc<dyn Family>>) -> Result<TorchEngine, String> {
        crate::keep_freed_memory();
        if let Some(threads) = options.threads {
            tch::set_num_threads(threads);
        }
        let front_ends = FrontEnds::new(&options);
        let context = LoadContext { options: &options, front_ends: &front_ends };
        let mut loaded: Vec<(Arc<dyn Family>, Loaded)> = Vec::new();
        for family in families {
            let started = std::time::Instant::now();
            if let Some(voices) = family.load(&context)? {
                tracing::debug!(family = family.name(), s = started.elapsed().as_secs_f64(), "family loaded");
                loaded.push((family, voices));
            }
        }
        if let Some(name) = options.default_voice.as_deref() {
            make_default(&mut loaded, name)?;
        }
        let precision = loaded.first().map_or(Precision::Fp32, |(_, l)| l.precision);
        // One family serves alone; several are hosted, each request routed to its own. A family
        // whose voices have several sample rates hosts one set of capabilities per rate: those
        // are hosted here as they are, each routed to the family (`routes`).
        let mut hosted = Vec::new();
        let mut routes = Vec::new();
        for (family, (_, l)) in loaded.iter().enumerate() {
            let own = if l.capabilities.hosted.is_empty() {
                std::slice::from_ref(&l.capabilities)
            } else {
                &l.capabilities.hosted[..]
            };
            hosted.extend(own.iter().cloned());
            routes.extend(own.iter().map(|_| family));
        }
        let capabilities = match hosted.len() {
            0 => return Err("no voices to serve".to_owned()),
            1 => hosted.remove(0),
            _ => EngineCapabilities::hosting(hosted).ok_or("no capabilities")?,
        };
        let voices = Voices::new(loaded, routes)?;
        // The server's pronunciations must be in every voice's alphabet.
        for voice in &voices.voices {
            for (word, p) in options.pronunciations.iter() {
                crate::scheduler::check_pronunciation(word, p, |s| voice.model.char_tokens(s))
                    .map_err(|e| format!("--lexicon: {e}"))?;
            }
        }
        let workers = options.workers.unwrap_or(if options.device == Device::Cpu {
            default_workers()
        } else {
            CUDA_WORKERS.min(default_workers())
        });
        let pool = Pool::start(workers, Arc::new(voices), &capabilities, &options)?;
        Ok(TorchEngine { capabilities, pool, precision })
    }

    /// The model names served (the first family's first).
    pub fn models(&self) -> &[String] {
        &self.capabilities.models
    }

    /// The precision the first family's voices run in (what `auto` chose, when it was asked to).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// How many workers compute requests.
    pub fn workers(&self) -> usize {
        self.pool.workers()
    }
}

impl Engine for TorchEngine {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }

    fn load(&self) -> EngineLoad {
        self.pool.load()
    }

    fn failure(&self) -> Option<String> {
        self.pool.failure()
    }

    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        self.pool.submit(id, request, sink);
    }

    fn abort(&self, id: RequestId) {
        self.pool.abort(id);
    }
}
