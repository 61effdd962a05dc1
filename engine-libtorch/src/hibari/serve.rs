//! hibari as a voice family of the engine ([`crate::family`]): its voices read from the assets
//! directory (`voices.json` and each voice's model file), its prosody per segment in batched
//! passes, its audio decoded chunk by chunk (it is causal: a chunk needs only its frames and
//! [`super::DECODER_CONTEXT`] frames of context each side).

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use speechstream_core::config::TaskType;
use speechstream_core::engine::{EngineCapabilities, Language, Voice};
use tch::Device;

use super::{Hibari, Precision, Prosody, SAMPLES_PER_FRAME};
use crate::chunks::{sentence_ranges, ChunkSizes};
use crate::dsp::SAMPLE_RATE;
use crate::family::{
    chunked_costs, Family, LoadContext, Loaded, Segment, SegmentInput, SegmentState, Speeds, VoiceModel,
};
use crate::g2p::{FrontEnd, Reader};
use crate::noise::NoiseSource;
use crate::options::DEFAULT_VOICE;
use crate::pacing::{Costs, Speed};
use crate::timing::Acoustics;
use crate::voices::{check_voice_file, read_voice_list};

// SAFETY: nothing in a loaded `Hibari` is written after loading (tensors and packed matrices
// that no forward pass writes; per-sentence state lives in each request's `Prosody`, per-thread
// scratch in thread-locals; the one lazily built tensor of `gemm::Packed` is behind a
// `OnceLock`), and libtorch's ops may read one tensor from several threads at once (its
// reference counts are atomic), which is how PyTorch serves one module from many threads. tch
// marks its tensors `Send` only, conservatively, so the voice is declared `Sync` here, where the
// workers' sharing of it is made.
unsafe impl Sync for Hibari {}

/// The phonemes ("hello.") a voice is warmed with.
const WARM_PHONEMES: &str = "həlˈO.";
/// The sentence whose stream measures a worker's speed at start.
const MEASURE_TEXT: &str = "Hello there, this sentence measures how fast the voice runs on this worker.";

/// The hibari family.
pub struct HibariFamily;

/// A hibari voice: its network and the front end of its accent.
pub struct HibariVoice {
    pub model: Hibari,
    pub front_end: Arc<FrontEnd>,
}

impl Family for HibariFamily {
    fn name(&self) -> &str {
        "hibari"
    }

    /// Every voice of `voices.json` whose file is present (checked against its size and
    /// sha256), and the front ends of their accents; `heart` must be among them.
    fn load(&self, context: &LoadContext) -> Result<Option<Loaded>, String> {
        let options = context.options;
        if !options.hibari.voices {
            return Ok(None);
        }
        let dir = &options.assets_dir;
        let missing =
            || format!("run scripts/setup.sh (or scripts/setup-voice.sh hibari) to put them in {}", dir.display());
        if !dir.join("hibari.onnx").is_file() {
            return Err(format!("hibari's assets are not in {}: {}", dir.display(), missing()));
        }
        let entries: Vec<_> = read_voice_list(dir)?
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
                accents.iter().map(|&british| context.front_ends.english(british)).collect::<Result<Vec<_>, _>>()
            });
            // fp16 is Kokoro's: hibari then runs fp32
            let mut precision = options.precision.map(|p| if p == Precision::Fp16 { Precision::Fp32 } else { p });
            let mut models = Vec::new();
            for entry in &entries {
                match load_voice(dir, &entry.file, device, precision) {
                    Ok((model, chosen)) => {
                        precision = Some(chosen);
                        models.push(model);
                    }
                    Err(e) => {
                        let _ = front_ends.join();
                        return (Ok(Vec::new()), Err(format!("voice {} ({}): {e}", entry.name, entry.file)));
                    }
                }
            }
            let front_ends =
                front_ends.join().unwrap_or_else(|_| Err("loading hibari's text front end panicked".to_owned()));
            (front_ends, Ok((models, precision)))
        });
        let (models, precision) = models?;
        let front_ends = front_ends?;
        if !entries.iter().any(|e| e.name == DEFAULT_VOICE) {
            return Err(format!("voice {DEFAULT_VOICE} is missing from {}: {}", dir.display(), missing()));
        }
        let mut voices = Vec::new();
        for (entry, model) in entries.into_iter().zip(models) {
            // Each voice as the engine declares it: its name, language and description from
            // voices.json.
            let mut voice = Voice::new(entry.name.clone());
            if let Some(language) = &entry.language {
                voice = voice.with_language(language.clone());
            }
            if let Some(description) = &entry.description {
                voice = voice.with_description(description.clone());
            }
            let front_end = accents.iter().position(|&b| b == entry.british).map(|k| front_ends[k].clone());
            let front_end = front_end.ok_or_else(|| format!("no front end for voice {}", entry.name))?;
            voices.push((voice, Arc::new(HibariVoice { model, front_end }) as Arc<dyn VoiceModel>));
        }
        // What hibari can do; the core refuses the rest before a request gets here.
        let capabilities = EngineCapabilities::new(options.hibari.model_name.clone(), SAMPLE_RATE)
            .with_voices(voices.iter().map(|(v, _)| v.clone()).collect::<Vec<Voice>>())
            .with_languages([Language::new("English", "en")])
            .with_task_types([TaskType::CustomVoice])
            .with_instructions(false)
            .with_word_timestamps(true);
        Ok(Some(Loaded {
            capabilities,
            voices,
            default_voice: DEFAULT_VOICE.to_owned(),
            precision: precision.unwrap_or(Precision::Fp32),
        }))
    }

    fn costs(&self, speeds: &Speeds) -> Costs {
        chunked_costs(speeds)
    }
}

/// One voice's network from `file`, in `precision` (`None`: the faster here, measured); returns
/// it and the precision it runs in.
fn load_voice(
    dir: &std::path::Path,
    file: &str,
    device: Device,
    precision: Option<Precision>,
) -> Result<(Hibari, Precision), super::HibariError> {
    let mut m = Hibari::load_voice(dir, file, device)?;
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
}

impl VoiceModel for HibariVoice {
    fn device(&self) -> Device {
        self.model.device()
    }

    fn sample_rate(&self) -> u32 {
        SAMPLE_RATE
    }

    fn samples_per_frame(&self) -> usize {
        SAMPLES_PER_FRAME
    }

    fn weights(&self) -> usize {
        &self.model as *const Hibari as usize
    }

    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        self.model.char_tokens(phonemes)
    }

    fn reader(&self, _language: Option<&str>, text: &str) -> Result<Reader, String> {
        crate::family::english_reads(text)?;
        Ok(Reader::English(self.front_end.clone()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn acoustics(&self) -> Acoustics {
        Acoustics::HIBARI
    }

    /// One batched prosody pass over the segments.
    fn start(&self, batch: &[SegmentInput]) -> Result<Vec<Result<Segment, String>>, String> {
        let ids: Vec<Vec<i64>> = batch.iter().map(|s| self.model.ids(s.phonemes)).collect();
        let items: Vec<(&[i64], f32)> = ids.iter().zip(batch).map(|(ids, s)| (ids.as_slice(), s.speed)).collect();
        let prosodies = self.model.prosody_batch(&items);
        Ok(batch
            .iter()
            .zip(prosodies)
            .map(|(s, prosody)| {
                Ok(Segment {
                    frames: prosody.frames,
                    samples: prosody.samples(),
                    durations: prosody.durations.clone(),
                    computed: 0,
                    opening: 0,
                    state: Box::new((prosody, NoiseSource::new(s.seed, s.index))),
                })
            })
            .collect())
    }

    /// One decoder pass over the chunks ([`Hibari::synthesize_chunks`]; the DSP per segment).
    fn chunks(&self, batch: &[(&SegmentState, Range<usize>)]) -> Result<Vec<Result<Vec<f32>, String>>, String> {
        let mut items = Vec::with_capacity(batch.len());
        for (state, frames) in batch {
            let (prosody, noise) =
                state.downcast_ref::<(Prosody, NoiseSource)>().ok_or("hibari: a segment of another family")?;
            items.push((prosody, frames.start, frames.end, noise));
        }
        Ok(self
            .model
            .synthesize_chunks(&items)
            .iter()
            .map(|audio| {
                Vec::<f32>::try_from(&audio.to_device(Device::Cpu))
                    .map_err(|e| format!("hibari: reading the audio failed: {e}"))
            })
            .collect())
    }

    fn warm_up(&self, frames: &ChunkSizes<usize>) {
        let model = &self.model;
        let prosody = model.prosody(&model.ids(WARM_PHONEMES), 1.0);
        let end = prosody.frames.min(frames.first);
        let _ = model.synthesize_chunk(&prosody, 0, end, &NoiseSource::new(0, 0));
        if end < prosody.frames {
            let _ = model.synthesize_chunk(&prosody, end, prosody.frames, &NoiseSource::new(0, 0));
        }
        let _ = self.front_end.sentences("Hello there.");
    }

    /// Streams [`MEASURE_TEXT`] three times: the first pass of these larger shapes still
    /// allocates; the faster of the other two is measured (a moment's preemption on a busy host
    /// would otherwise set the estimates a burst of new streams is admitted with). The text is
    /// one sentence, so the time to its prosody is the front end's and the prosody pass's, and
    /// the rest its chunks'; the first chunk is timed apart.
    fn measure(&self, frames: &ChunkSizes<usize>, speeds: &mut Speeds) -> Option<Speed> {
        let model = &self.model;
        // (audio s, chunk s, chars, front end and prosody s), and the first chunk's (audio s, s)
        let mut measured = (0.0, f64::MAX, 0.0, 0.0);
        let mut first = (0.0, 0.0);
        for pass in 0..3 {
            let started = Instant::now();
            let (mut samples, mut chars, mut prosody_s) = (0, 0, 0.0);
            let mut first_pass = (0.0, 0.0);
            for (index, sentence) in (0..).zip(self.front_end.sentences(MEASURE_TEXT)) {
                let prosody = model.prosody(&model.ids(&sentence.phonemes), 1.0);
                chars += sentence.phonemes.chars().count();
                prosody_s = started.elapsed().as_secs_f64();
                let noise = NoiseSource::new(0, 0);
                let f = frames;
                for (k, r) in sentence_ranges(prosody.frames, index, f.first, f.chunk, f.max).into_iter().enumerate() {
                    let chunk_started = Instant::now();
                    let n = model.synthesize_chunk(&prosody, r.start, r.end, &noise).numel();
                    if index == 0 && k == 0 {
                        first_pass = (n as f64 / f64::from(SAMPLE_RATE), chunk_started.elapsed().as_secs_f64());
                    }
                    samples += n;
                }
            }
            let chunk_s = started.elapsed().as_secs_f64() - prosody_s;
            if pass > 0 && chunk_s + prosody_s < measured.1 + measured.3 {
                measured = (samples as f64 / f64::from(SAMPLE_RATE), chunk_s, chars as f64, prosody_s);
                first = first_pass;
            }
        }
        speeds.chunk = Speed::new(measured.0 - first.0, measured.1 - first.1);
        speeds.first = Speed::new(first.0, first.1);
        speeds.segment = Speed::new(measured.2, measured.3);
        speeds.phonemes_per_char = (measured.2, MEASURE_TEXT.chars().count() as f64);
        Some(Speed::new(measured.0, measured.1 + measured.3))
    }
}
