//! Piper's VITS voices as a voice family of the engine ([`crate::family`]): the voices of a
//! directory laid out as wyoming-piper's `--data-dir` (`NAME.onnx` beside its `NAME.onnx.json`,
//! [`scan`]), each on its own network ([`PiperModel`], read from its own file), read by the
//! espeak-ng front end as piper-tts reads it (`speechstream_text::piper`), at its own sample
//! rate.
//!
//! Piper is not causal: a sentence's durations come out of one pass over it all. But its flow
//! and generator, most of a pass's time, are convolutional with a short reach (joe: 32 and 12
//! of its frames each side). So it streams as hibari does ([`crate::family::Streaming::Chunked`]):
//! a segment's round runs the text encoder and the durations ([`PiperModel::prepare`]), and each
//! chunk's round decodes that chunk's frames with the context on each side
//! ([`PiperModel::decode`]): the first audio waits for the encoder and one chunk, and admission
//! costs each round as what it is. The chunks are counted in frames of two of the decoder's hops
//! (`FRAME_SECONDS`), so a sentence has few seams (each decodes the contexts twice). An
//! utterance's first segment is its first sentence up to sixteen words ([`split_first`]).
//!
//! Every segment of a voice is scaled by one gain, the voice's own (`calibrate`), where
//! piper-tts scales each sentence to a peak of 1: one gain keeps a voice's sentences at one
//! loudness (and lets a segment's audio leave before its peak is known).

use std::any::Any;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use speechstream_core::config::TaskType;
use speechstream_core::engine::{EngineCapabilities, Language, Voice};

use crate::chunks::sentence_ranges;
use crate::chunks::ChunkSizes;
use crate::family::{
    chunked_costs, guarded, split_first, Family, Lead, LoadContext, Loaded, Segment, SegmentInput, SegmentState,
    Speeds, Style, VoiceModel,
};
use crate::g2p::espeak::Espeak;
use crate::g2p::piper::{PhonemeIdMap, Phonemizer};
use crate::g2p::{Reader, Sentence};
use crate::pacing::{Costs, Speed};
use crate::piper::{PiperModel, Prepared, Scales};
use crate::precision::Precision;
use crate::timing::Acoustics;

/// Words a Piper voice's first segment holds at most (unless a clause ends earlier): its first
/// audio waits only for the text encoder and the durations over them and one chunk's decoding
/// (~60 ms for 12 words, one Zen 4 core), and a cut costs words and naturalness. Whisper base
/// on piper-tts's joe reading eight held-out sentences (10-13 words; three draws, 276 words):
/// whole 3.3% word errors, cut after six words with a comma 8.3%, after eight 4.3%; Distill-MOS
/// whole 4.14-4.19, cut after eight 4.06-4.08 (benches/results/17-piper.md).
pub const PIPER_FIRST_WORDS: usize = 16;

/// The model name Piper's voices are served under (`model: "piper"` picks the default voice).
pub const PIPER_MODEL_NAME: &str = "piper";

/// What one voice's `NAME.onnx.json` says that serving it needs.
#[derive(Clone, Debug)]
pub struct PiperConfig {
    pub sample_rate: u32,
    /// `audio.quality`: x_low, low, medium or high.
    pub quality: Option<String>,
    /// `dataset`: the voice's own name (`joe`).
    pub dataset: Option<String>,
    /// `language.code` (`en_US`), else `espeak.voice`, else the file name's first part (as
    /// wyoming-piper finds it).
    pub language: String,
    /// `language.name_english` (`English`).
    pub language_name: Option<String>,
    /// How its text becomes phonemes: espeak-ng's voice (`en-us`), or the text's own characters
    /// (`phoneme_type: text`).
    pub phonemizer: Phonemizer,
    pub ids: PhonemeIdMap,
    /// `speaker_id_map` in the order of the ids (empty for a voice of one speaker).
    pub speakers: Vec<(String, i64)>,
    /// `inference`'s defaults.
    pub scales: Scales,
}

impl PiperConfig {
    /// Reads a voice's `.onnx.json`; `name` is its file name without `.onnx`.
    pub fn read(path: &Path, name: &str) -> Result<PiperConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&json, name).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// [`PiperConfig::read`] from the parsed file.
    pub fn parse(json: &serde_json::Value, name: &str) -> Result<PiperConfig, String> {
        let str_at = |path: &[&str]| {
            let mut v = json;
            for key in path {
                v = v.get(key)?;
            }
            v.as_str().map(str::to_owned)
        };
        let sample_rate = json
            .pointer("/audio/sample_rate")
            .and_then(serde_json::Value::as_u64)
            .and_then(|r| u32::try_from(r).ok())
            .filter(|&r| (8_000..=48_000).contains(&r))
            .ok_or("no audio.sample_rate between 8000 and 48000")?;
        let espeak_voice = str_at(&["espeak", "voice"]);
        let phonemizer = Phonemizer::from_config(json)?;
        let ids = PhonemeIdMap::from_config(json)?;
        let mut speakers: Vec<(String, i64)> = json
            .get("speaker_id_map")
            .and_then(serde_json::Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_i64()?))).collect())
            .unwrap_or_default();
        speakers.sort_by_key(|(_, id)| *id);
        let num_speakers = json.get("num_speakers").and_then(serde_json::Value::as_u64).unwrap_or(1);
        if speakers.is_empty() && num_speakers > 1 {
            speakers = (0..num_speakers as i64).map(|id| (id.to_string(), id)).collect();
        }
        let scale = |key: &str, default: f32| {
            json.pointer(&format!("/inference/{key}")).and_then(serde_json::Value::as_f64).map_or(default, |v| v as f32)
        };
        let language = str_at(&["language", "code"])
            .or(espeak_voice)
            .unwrap_or_else(|| name.split('_').next().unwrap_or(name).to_owned());
        Ok(PiperConfig {
            sample_rate,
            quality: str_at(&["audio", "quality"]),
            dataset: str_at(&["dataset"]),
            language,
            language_name: str_at(&["language", "name_english"]),
            phonemizer,
            ids,
            speakers,
            scales: Scales {
                noise_scale: scale("noise_scale", 0.667),
                length_scale: scale("length_scale", 1.0),
                noise_w: scale("noise_w", 0.8),
            },
        })
    }

    /// How wyoming-piper describes it: `"<name> (<quality>)"`, its name with spaces for
    /// underscores (`"joe (medium)"`).
    pub fn description(&self, name: &str) -> String {
        let own = self.dataset.clone().unwrap_or_else(|| name.to_owned()).replace('_', " ");
        match &self.quality {
            Some(quality) => format!("{own} ({quality})"),
            None => own,
        }
    }

    /// Its language as a BCP 47 tag (`en-US`).
    pub fn language_tag(&self) -> String {
        self.language.replace('_', "-")
    }
}

/// One voice's files.
#[derive(Clone, Debug)]
pub struct PiperVoiceFile {
    /// Its name (the file name without `.onnx`: `en_US-joe-medium`), what clients ask for.
    pub name: String,
    pub onnx: PathBuf,
    pub config: PiperConfig,
}

/// What a directory of Piper voices holds.
#[derive(Debug, Default)]
pub struct PiperFiles {
    /// In the order of their names.
    pub voices: Vec<PiperVoiceFile>,
    /// The files left out, and why (logged).
    pub skipped: Vec<String>,
}

/// The voices of `dir` as wyoming-piper finds them: every `NAME.onnx` with a `NAME.onnx.json`
/// beside it. A model without its config, or a config that cannot be read or names a phoneme
/// type we do not read, is left out (in `skipped`), as wyoming-piper skips them.
pub fn scan(dir: &Path) -> PiperFiles {
    let mut files = PiperFiles::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        files.skipped.push(format!("{}: not a readable directory", dir.display()));
        return files;
    };
    let mut models: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx") && p.is_file())
        .collect();
    models.sort();
    for onnx in models {
        let Some(name) = onnx.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
        let json = onnx.with_extension("onnx.json");
        if !json.is_file() {
            files.skipped.push(format!("{}: no {name}.onnx.json beside it", onnx.display()));
            continue;
        }
        match PiperConfig::read(&json, &name) {
            Ok(config) => files.voices.push(PiperVoiceFile { name, onnx, config }),
            Err(e) => files.skipped.push(e),
        }
    }
    files
}

/// The Piper family.
pub struct PiperFamily;

impl Family for PiperFamily {
    fn name(&self) -> &str {
        "piper"
    }

    /// The voices of [`crate::PiperOptions::dir`]: a directory the operator named must hold at
    /// least one that loads; the default one may hold none.
    fn load(&self, context: &LoadContext) -> Result<Option<Loaded>, String> {
        let options = &context.options.piper;
        let Some(dir) = options.dir.as_deref() else {
            return if options.required { Err("Piper: no directory of voices".to_owned()) } else { Ok(None) };
        };
        let files = scan(dir);
        for skipped in &files.skipped {
            tracing::warn!("Piper voice left out: {skipped}");
        }
        let only = context.options.only_request.as_ref().and_then(|r| r.voice.as_deref());
        let started = Instant::now();
        let mut voices = Vec::new();
        for file in &files.voices {
            // (`say` with one voice loads that voice alone)
            if only.is_some_and(|name| !name.eq_ignore_ascii_case(&file.name)) {
                continue;
            }
            let device = context.options.device;
            match PiperModel::load(
                &file.onnx,
                device,
                context.options.precision.unwrap_or_else(|| PiperModel::auto_precision(device)),
            ) {
                Ok(model) => voices.push((file, Arc::new(model))),
                Err(e) => tracing::warn!("Piper voice left out: {}: {e}", file.onnx.display()),
            }
        }
        if voices.is_empty() {
            let why = format!("{} has no Piper voice that loads (NAME.onnx with NAME.onnx.json)", dir.display());
            return if options.required { Err(format!("Piper: {why}")) } else { Ok(None) };
        }
        tracing::info!(
            voices = voices.len(),
            precision = %voices[0].1.precision(),
            s = started.elapsed().as_secs_f64(),
            "Piper voices served"
        );
        let espeak = context.front_ends.espeak_piper();
        match espeak.library() {
            Some(library) => {
                tracing::info!(library = %library.library.display(), "Piper reads with piper-tts's espeak-ng")
            }
            None => tracing::warn!(
                "Piper reads with Debian's espeak-ng, not piper-tts's (run scripts/setup.sh): some words read \
                 differently from piper-tts"
            ),
        }
        Ok(Some(loaded(voices, espeak)))
    }

    /// Its segments (the encoder and the durations) cost per character, its chunks (the flow
    /// and the generator) per audio second.
    fn costs(&self, speeds: &Speeds) -> Costs {
        chunked_costs(speeds)
    }
}

/// The loaded voices as the engine serves them: one set of capabilities per sample rate (the
/// core announces a request's rate from its capabilities), hosted together.
fn loaded(voices: Vec<(&PiperVoiceFile, Arc<PiperModel>)>, espeak: Arc<Espeak>) -> Loaded {
    let default_voice = voices[0].0.name.clone();
    let precision: Precision = voices[0].1.precision();
    let mut served: Vec<(Voice, Arc<dyn VoiceModel>)> = Vec::new();
    for (file, model) in voices {
        let config = &file.config;
        let listed = Voice::new(file.name.clone())
            .with_language(config.language_tag())
            .with_description(config.description(&file.name))
            .with_speakers(config.speakers.iter().map(|(name, _)| name.clone()));
        let speaker = config.speakers.first().map(|(_, id)| *id);
        let voice = PiperVoice {
            name: file.name.clone(),
            gain: calibrate(&file.name, &model, config, speaker),
            model,
            config: Arc::new(config.clone()),
            espeak: espeak.clone(),
            speaker,
        };
        served.push((listed, Arc::new(voice)));
    }
    let mut rates: Vec<u32> = served.iter().map(|(_, v)| v.sample_rate()).collect();
    rates.sort_unstable();
    rates.dedup();
    let mut hosted: Vec<EngineCapabilities> = rates
        .iter()
        .map(|&rate| {
            let at_rate: Vec<&(Voice, Arc<dyn VoiceModel>)> =
                served.iter().filter(|(_, v)| v.sample_rate() == rate).collect();
            let mut languages: Vec<Language> = Vec::new();
            for (voice, model) in &at_rate {
                let config = &model.as_any().downcast_ref::<PiperVoice>().expect("a Piper voice").config;
                let code = voice.language.as_deref().unwrap_or("en").split('-').next().unwrap_or("en").to_lowercase();
                let language = Language::new(config.language_name.clone().unwrap_or_else(|| code.clone()), code);
                if !languages.contains(&language) {
                    languages.push(language);
                }
            }
            EngineCapabilities::new(PIPER_MODEL_NAME, rate)
                .with_voices(at_rate.iter().map(|(v, _)| v.clone()).collect::<Vec<Voice>>())
                .with_languages(languages)
                .with_task_types([TaskType::CustomVoice])
                .with_instructions(false)
                .with_word_timestamps(true)
        })
        .collect();
    // The default voice's rate first: a request naming only `piper` goes to it.
    let default_rate = served[0].1.sample_rate();
    hosted.sort_by_key(|c| c.sample_rate != default_rate);
    let capabilities = if hosted.len() == 1 {
        hosted.remove(0)
    } else {
        EngineCapabilities::hosting(hosted).expect("one rate at least")
    };
    Loaded { capabilities, voices: served, default_voice, precision }
}

/// A Piper voice as the workers run it.
pub struct PiperVoice {
    pub name: String,
    pub model: Arc<PiperModel>,
    pub config: Arc<PiperConfig>,
    pub espeak: Arc<Espeak>,
    /// The speaker a request naming none gets (a multi-speaker voice's first).
    pub speaker: Option<i64>,
    /// The one factor every segment of the voice is scaled by ([`calibrate`]).
    gain: f32,
}

/// The style of a request naming one of a voice's speakers: its id.
struct Speaker(i64);

/// The length of a frame of Piper's chunks (the scheduler cuts them in whole frames): two of a
/// medium voice's hops (256 samples at 22,050 Hz), 23 ms. Each seam between chunks decodes the
/// generator's and the flow's contexts twice (joe: 24 hops of generator, 88 of flow, ~12 ms of
/// one Zen 4 core), so Piper's chunks are twice hibari's 12.5 ms frames long: a sentence of
/// 3 s opening an utterance is two chunks (16 frames, 372 ms, then the rest), a later one one.
const FRAME_SECONDS: f64 = 512.0 / 22_050.0;
/// The level a voice's gain puts its calibration sentence at: RMS −21 dBFS (a gain of 1.46 for
/// joe). piper-tts's own peak normalisation puts joe's sentences at −17.7 to −22.5 dBFS RMS
/// (median −19.5, 18 sentences), as each sentence's peak decides; joe's raw sentences are within
/// ±1.2 dB of one level (−24.2 to −26.6 dBFS; the calibration sentence −24.3) and peak at 15.7 to
/// 22.5 dB over it, so this keeps nearly all their peaks under full scale, and a rare louder one
/// is clipped there (as piper-tts clips).
const LEVEL_DBFS: f32 = -21.0;
/// The sentence a voice's gain is measured on when it loads, espeak-ng's en-us IPA as piper-tts
/// reads it: "The weather today is sunny with a light breeze." (2.5 s of joe, ~0.1 s of one
/// core; a voice of another language maps the same IPA through its own table).
const CALIBRATION_PHONEMES: &str = "ðə wˈɛðɚ tədˈeɪ ɪz sˈʌni wɪð ɐ lˈaɪt bɹˈiːz.";
/// The phonemes ("hello.") its network is warmed with, espeak-ng's en-us IPA.
const WARM_PHONEMES: &str = "həlˈoʊ.";
/// The text of `CALIBRATION_PHONEMES`, whose stream measures a worker's speed at start.
const MEASURE_TEXT: &str = "The weather today is sunny with a light breeze.";

impl PiperVoice {
    /// The generator's hops in one of the frames its chunks are cut in (`FRAME_SECONDS`, at
    /// least one).
    fn hops_per_frame(&self) -> usize {
        let hop = self.model.samples_per_frame().max(1);
        ((f64::from(self.config.sample_rate) * FRAME_SECONDS / hop as f64).round() as usize).max(1)
    }

    /// A pass over `phonemes` up to its decoder, at the request's speed.
    fn prepare(&self, phonemes: &str, speed: f32, seed: u64, speaker: Option<i64>) -> Result<Prepared, String> {
        let ids = self.config.ids.ids(phonemes);
        let mut scales = self.config.scales;
        scales.length_scale /= speed.max(0.05);
        guarded(|| self.model.prepare(&ids, speaker, scales, seed)).and_then(|r| r)
    }

    /// `hops` of a prepared pass decoded, scaled by the voice's gain.
    fn decode(&self, prepared: &Prepared, hops: Range<usize>) -> Result<Vec<f32>, String> {
        let mut audio = guarded(|| self.model.decode(prepared, hops)).and_then(|r| r)?;
        audio.iter_mut().for_each(|x| *x = (*x * self.gain).clamp(-1.0, 1.0));
        Ok(audio)
    }

    /// A prepared pass decoded in the chunks the scheduler would cut it in (as the first
    /// segment of an utterance); returns (its audio seconds, the first chunk's audio seconds
    /// and seconds of compute, the whole decoding's seconds).
    fn decode_as_streamed(&self, prepared: &Prepared, frames: &ChunkSizes<usize>) -> (f64, f64, f64, f64) {
        let h = self.hops_per_frame();
        let rate = f64::from(self.config.sample_rate);
        let started = Instant::now();
        let (mut samples, mut first) = (0, (0.0, 0.0));
        let ranges = sentence_ranges(prepared.frames().div_ceil(h), 0, frames.first, frames.chunk, frames.max);
        for (k, r) in ranges.into_iter().enumerate() {
            let chunk_started = Instant::now();
            let n = self.decode(prepared, r.start * h..r.end * h).map_or(0, |a| a.len());
            if k == 0 {
                first = (n as f64 / rate, chunk_started.elapsed().as_secs_f64());
            }
            samples += n;
        }
        (samples as f64 / rate, first.0, first.1, started.elapsed().as_secs_f64())
    }
}

/// The one factor every segment of a voice is scaled by, measured as it loads: the gain that
/// puts its calibration sentence (`CALIBRATION_PHONEMES`, seed 0, its default speaker) at
/// `LEVEL_DBFS` RMS.
fn calibrate(name: &str, model: &PiperModel, config: &PiperConfig, speaker: Option<i64>) -> f32 {
    let ids = config.ids.ids(CALIBRATION_PHONEMES);
    let rms = match guarded(|| model.infer(&ids, speaker, config.scales, 0)) {
        Ok(Ok(out)) if !out.audio.is_empty() => {
            (out.audio.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / out.audio.len() as f64).sqrt()
        }
        _ => 0.0,
    };
    let level = 10f64.powf(f64::from(LEVEL_DBFS) / 20.0);
    // (a voice that says nothing of these phonemes: joe's gain)
    let gain = if rms > 1e-4 { (level / rms).clamp(0.25, 16.0) } else { 1.5 };
    tracing::debug!(voice = %name, rms, gain, "Piper voice's gain");
    gain as f32
}

/// Piper's ids as word timings count tokens: one per phoneme. Its ids are `^ _ p1 _ p2 _ ... pn
/// _ $`, a pad after every phoneme; word timings ([`crate::timing::word_timings`]) take a token
/// per phoneme character (and a boundary token at each end), so each phoneme's ids are folded
/// with the pad after them into one token: token 0 is `^ _`, token k the k-th phoneme's ids and
/// pad, the last `$`. `tokens`: each char's id index ([`PhonemeIdMap::char_tokens`]); returns
/// each char's folded token, and the first id of each folded token (then the id count).
pub fn fold_tokens(tokens: &[Option<usize>], ids: usize) -> (Vec<Option<usize>>, Vec<usize>) {
    let mut firsts: Vec<usize> = tokens.iter().flatten().copied().filter(|&t| t > 0 && t + 1 < ids).collect();
    firsts.sort_unstable();
    firsts.dedup();
    let folded = tokens.iter().map(|t| t.and_then(|t| firsts.binary_search(&t).ok()).map(|k| k + 1)).collect();
    // token 0: `^ _`; one per phoneme; the last: `$`
    let mut bounds = Vec::with_capacity(firsts.len() + 3);
    bounds.push(0);
    bounds.extend(firsts);
    if ids > 0 {
        bounds.push(ids - 1);
    }
    bounds.push(ids);
    (folded, bounds)
}

/// Per-id durations summed into the folded tokens whose first ids are `bounds` ([`fold_tokens`]).
pub fn fold_durations(durations: &[i64], bounds: &[usize]) -> Vec<i64> {
    bounds.windows(2).map(|w| durations.get(w[0]..w[1].min(durations.len())).map_or(0, |d| d.iter().sum())).collect()
}

/// Durations in frames of `samples_per_frame` samples at `rate` Hz as the fine frames of 300
/// samples at 24 kHz that [`crate::timing::word_timings`] counts Piper's in
/// ([`Acoustics::PIPER`]; cumulative, so that the rounding does not drift).
pub fn fine_durations_at(durations: &[i64], samples_per_frame: usize, rate: u32) -> Vec<i64> {
    let scale = f64::from(crate::timing::SAMPLE_RATE) / f64::from(rate.max(1)) / 300.0;
    let mut out = Vec::with_capacity(durations.len());
    let (mut total, mut done) = (0i64, 0i64);
    for &d in durations {
        total += d.max(0) * samples_per_frame as i64;
        let end = (total as f64 * scale).round() as i64;
        out.push(end - done);
        done = end;
    }
    out
}

impl VoiceModel for PiperVoice {
    fn device(&self) -> tch::Device {
        self.model.device()
    }

    fn sample_rate(&self) -> u32 {
        self.config.sample_rate
    }

    fn samples_per_frame(&self) -> usize {
        self.model.samples_per_frame() * self.hops_per_frame()
    }

    fn weights(&self) -> usize {
        Arc::as_ptr(&self.model) as usize
    }

    /// One token per phoneme ([`fold_tokens`]).
    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        let ids = self.config.ids.ids(phonemes).len();
        fold_tokens(&self.config.ids.char_tokens(phonemes), ids).0
    }

    /// Its own language: a request naming another is refused (a Piper voice was trained on
    /// one), naming the language it speaks.
    fn reader(&self, language: Option<&str>, text: &str) -> Result<Reader, String> {
        let asked = language.map(str::trim).filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("auto"));
        if let Some(asked) = asked {
            let primary = |l: &str| l.replace('_', "-").split('-').next().unwrap_or_default().to_lowercase();
            let own = self.config.language_name.as_deref().unwrap_or_default().to_lowercase();
            if primary(asked) != primary(&self.config.language) && asked.to_lowercase() != own {
                return Err(format!(
                    "voice '{}' speaks {}, not '{asked}': choose a voice of that language",
                    self.name, self.config.language
                ));
            }
        }
        let _ = text;
        if let Phonemizer::Espeak(_) = &self.config.phonemizer {
            self.espeak.available().map_err(|why| format!("{} is not available: {why}", self.config.language))?;
        }
        Ok(Reader::Piper(self.espeak.clone(), self.config.phonemizer.clone()))
    }

    /// Its first segment's encoder and durations come before its first audio: a long first
    /// sentence is cut ([`split_first`], [`PIPER_FIRST_WORDS`]).
    fn recut(&self, mut sentences: Vec<Sentence>, lead: &mut Lead) -> Vec<Sentence> {
        if lead.segments == 0 && !sentences.is_empty() {
            let first = split_first(sentences.remove(0), PIPER_FIRST_WORDS);
            sentences.splice(0..0, first);
        }
        lead.segments += sentences.len();
        sentences
    }

    fn speaker(&self, speaker: &str) -> Result<Style, String> {
        let id = self
            .config
            .speakers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(speaker))
            .map(|(_, id)| *id)
            .ok_or_else(|| format!("voice '{}' has no speaker '{speaker}'", self.name))?;
        Ok(Arc::new(Speaker(id)))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn acoustics(&self) -> Acoustics {
        Acoustics::PIPER
    }

    /// Each segment's pass up to its decoder (the text encoder, the durations, the prior's
    /// sample), its word timings from the durations.
    fn start(&self, batch: &[SegmentInput]) -> Result<Vec<Result<Segment, String>>, String> {
        let (hop, hops) = (self.model.samples_per_frame(), self.hops_per_frame());
        Ok(batch
            .iter()
            .map(|s| {
                let speaker = s.style.and_then(|style| style.downcast_ref::<Speaker>()).map(|s| s.0).or(self.speaker);
                let seed = crate::noise::splitmix64(s.seed ^ crate::noise::splitmix64(s.index));
                let prepared = self.prepare(s.phonemes, s.speed, seed, speaker).map_err(|e| format!("piper: {e}"))?;
                let (_, bounds) = fold_tokens(&self.config.ids.char_tokens(s.phonemes), prepared.durations().len());
                let durations = fold_durations(prepared.durations(), &bounds);
                Ok(Segment {
                    frames: prepared.frames().div_ceil(hops),
                    samples: prepared.frames() * hop,
                    durations: fine_durations_at(&durations, hop, self.config.sample_rate),
                    computed: 0,
                    opening: 0,
                    state: Box::new(prepared),
                })
            })
            .collect())
    }

    /// Each chunk's hops decoded with their contexts ([`PiperModel::decode`]), one segment
    /// after the other (a segment's state is its pass up to the decoder).
    fn chunks(&self, batch: &[(&SegmentState, Range<usize>)]) -> Result<Vec<Result<Vec<f32>, String>>, String> {
        let h = self.hops_per_frame();
        Ok(batch
            .iter()
            .map(|(state, frames)| {
                let prepared = state.downcast_ref::<Prepared>().ok_or("piper: a segment of another family")?;
                self.decode(prepared, frames.start * h..frames.end * h).map_err(|e| format!("piper: {e}"))
            })
            .collect())
    }

    /// One: its passes run one segment, one chunk, at a time.
    fn max_batch(&self) -> usize {
        1
    }

    fn warm_up(&self, frames: &ChunkSizes<usize>) {
        if let Ok(prepared) = self.prepare(WARM_PHONEMES, 1.0, 0, self.speaker) {
            self.decode_as_streamed(&prepared, frames);
        }
    }

    /// Streams `CALIBRATION_PHONEMES` three times, as a first segment: the first pass of
    /// these shapes still allocates; the faster of the other two is measured. Its pass up to
    /// the decoder is the segment's cost, its first chunk is timed apart from the rest.
    fn measure(&self, frames: &ChunkSizes<usize>, speeds: &mut Speeds) -> Option<Speed> {
        // (audio s, decoding s, first chunk's audio s and s, prepare s)
        let mut best: Option<(f64, f64, f64, f64, f64)> = None;
        for pass in 0..3 {
            let started = Instant::now();
            let Ok(prepared) = self.prepare(CALIBRATION_PHONEMES, 1.0, 0, self.speaker) else { return None };
            let prepare_s = started.elapsed().as_secs_f64();
            let (audio, first_audio, first_s, decode_s) = self.decode_as_streamed(&prepared, frames);
            if pass > 0 && best.is_none_or(|b| prepare_s + decode_s < b.1 + b.4) {
                best = Some((audio, decode_s, first_audio, first_s, prepare_s));
            }
        }
        let (audio, decode_s, first_audio, first_s, prepare_s) = best?;
        let chars = CALIBRATION_PHONEMES.chars().count() as f64;
        speeds.chunk = Speed::new(audio - first_audio, decode_s - first_s);
        speeds.first = Speed::new(first_audio, first_s);
        speeds.segment = Speed::new(chars, prepare_s);
        speeds.phonemes_per_char = (chars, MEASURE_TEXT.chars().count() as f64);
        Some(Speed::new(audio, decode_s + prepare_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joe_like(extra: serde_json::Value) -> serde_json::Value {
        let mut json = serde_json::json!({
            "audio": {"sample_rate": 22050, "quality": "medium"},
            "espeak": {"voice": "en-us"},
            "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
            "phoneme_type": "espeak",
            "phoneme_id_map": {"_": [0], "^": [1], "$": [2], " ": [3], "a": [14]},
            "num_speakers": 1,
            "speaker_id_map": {},
            "language": {"code": "en_US", "name_english": "English"},
            "dataset": "joe"
        });
        if let (Some(json), Some(extra)) = (json.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                json.insert(k.clone(), v.clone());
            }
        }
        json
    }

    #[test]
    fn a_config_reads_as_wyoming_piper_lists_it() {
        let config = PiperConfig::parse(&joe_like(serde_json::json!({})), "en_US-joe-medium").unwrap();
        assert_eq!(config.sample_rate, 22_050);
        assert_eq!(config.description("en_US-joe-medium"), "joe (medium)");
        assert_eq!(config.language, "en_US");
        assert_eq!(config.language_tag(), "en-US");
        assert_eq!(config.phonemizer, Phonemizer::Espeak("en-us".into()));
        assert!(config.speakers.is_empty());
        assert_eq!(config.scales.noise_w, 0.8);
        // Several speakers, in the order of their ids; a name with underscores described with
        // spaces, as wyoming-piper's catalog does.
        let config = PiperConfig::parse(
            &joe_like(serde_json::json!({
                "num_speakers": 3, "speaker_id_map": {"c": 2, "a": 0, "b": 1},
                "dataset": "northern_english_male", "audio": {"sample_rate": 16000, "quality": "low"}
            })),
            "en_GB-northern_english_male-low",
        )
        .unwrap();
        let names: Vec<&str> = config.speakers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(config.description("x"), "northern english male (low)");
        assert_eq!(config.sample_rate, 16_000);
        // Text voices; phoneme types we do not read are refused by name.
        let text = PiperConfig::parse(&joe_like(serde_json::json!({"phoneme_type": "text"})), "x").unwrap();
        assert_eq!(text.phonemizer, Phonemizer::Text);
        let err = PiperConfig::parse(&joe_like(serde_json::json!({"phoneme_type": "pinyin"})), "x").unwrap_err();
        assert!(err.contains("pinyin"), "{err}");
        let err = PiperConfig::parse(&joe_like(serde_json::json!({"audio": {}})), "x").unwrap_err();
        assert!(err.contains("sample_rate"), "{err}");
    }

    #[test]
    fn scan_finds_pairs_and_says_why_it_left_a_file_out() {
        let dir = std::env::temp_dir().join(format!("piper-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = joe_like(serde_json::json!({})).to_string();
        std::fs::write(dir.join("b_voice.onnx"), b"x").unwrap();
        std::fs::write(dir.join("b_voice.onnx.json"), &config).unwrap();
        std::fs::write(dir.join("a_voice.onnx"), b"x").unwrap();
        std::fs::write(dir.join("a_voice.onnx.json"), &config).unwrap();
        std::fs::write(dir.join("lonely.onnx"), b"x").unwrap();
        std::fs::write(dir.join("broken.onnx"), b"x").unwrap();
        std::fs::write(dir.join("broken.onnx.json"), b"{").unwrap();
        let files = scan(&dir);
        let names: Vec<&str> = files.voices.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a_voice", "b_voice"]);
        assert_eq!(files.skipped.len(), 2, "{:?}", files.skipped);
        assert!(files.skipped.iter().any(|s| s.contains("lonely.onnx.json")), "{:?}", files.skipped);
        assert!(files.skipped.iter().any(|s| s.contains("broken.onnx.json")), "{:?}", files.skipped);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_phoneme_and_the_pad_after_it_are_one_token() {
        // "ab c": ids ^ _ a _ b _ ␠ _ c _ $ (11); b dropped from the map in the second case.
        let tokens = [Some(2), Some(4), Some(6), Some(8)];
        let (folded, bounds) = fold_tokens(&tokens, 11);
        assert_eq!(folded, [Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(bounds, [0, 2, 4, 6, 8, 10, 11]);
        let durations = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        assert_eq!(fold_durations(&durations, &bounds), [3, 7, 11, 15, 19, 11]);
        let (folded, bounds) = fold_tokens(&[Some(2), None, Some(4), Some(6)], 9);
        assert_eq!(folded, [Some(1), None, Some(2), Some(3)]);
        assert_eq!(fold_durations(&durations[..9], &bounds), [3, 7, 11, 15, 9]);
    }

    #[test]
    fn durations_at_another_rate_keep_their_total_time() {
        // 256-sample frames at 22,050 Hz: 100 frames are 1.161 s, 92.9 fine frames of 12.5 ms.
        let d = fine_durations_at(&[10; 10], 256, 22_050);
        assert_eq!(d.iter().sum::<i64>(), 93);
        assert!(d.iter().all(|&x| x == 9 || x == 10), "{d:?}");
        assert_eq!(fine_durations_at(&[2, 3], 300, 24_000), [2, 3]);
    }
}
