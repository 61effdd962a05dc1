//! Kokoro-82M natively in tch, without onnxruntime: the network written out block by block
//! (`net`), its weights read by name out of kokoro-onnx's ONNX export (`kokoro-v1.0.int8.onnx`,
//! `load`), its int8 products on our own int8 kernels (`int8`, [`crate::gemm`]; the generator's
//! convolution inputs made in one pass, `fused`). The blocks, shapes, weight names and where
//! the int8 lives: docs/kokoro-architecture.md.
//!
//! [`KokoroModel::infer`] takes the phoneme ids of one utterance (without the two pad tokens,
//! which it adds), the voice's 256 style floats for that length and the speed, and returns 24 kHz
//! audio with the predicted durations (frames of [`SAMPLES_PER_FRAME`] samples per input token,
//! both pads included). [`KokoroModel::prepare`] runs the same pass up to the generator, for
//! [`KokoroModel::decode_opening`] to decode a segment's start before
//! [`KokoroModel::decode_whole`] decodes it whole (an utterance's first audio: §8 of
//! docs/kokoro-architecture.md).

mod approx;
mod dsp;
mod fused;
mod int8;
mod load;
mod net;
// How the engine's workers serve Kokoro's voices, and the voice files users have.
pub mod serve;
mod signal;
mod stats;
pub mod torchfile;
pub mod voices;
mod zip;

use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::onnx::Model;
use crate::precision::Precision;

/// Audio samples per duration frame (24 kHz, 40 frames a second).
pub const SAMPLES_PER_FRAME: usize = 600;
/// The sample rate of [`KokoroOutput::audio`].
pub const SAMPLE_RATE: u32 = 24_000;
/// Inputs longer than this many ids (pads excluded) are refused: ALBERT's positions end at 512,
/// the voices' style rows at 510.
pub const MAX_IDS: usize = 510;

/// The network of one Kokoro model file in one precision on one device.
pub struct KokoroModel {
    net: net::Kokoro,
}

// SAFETY: nothing in a loaded model is written after loading: `infer` takes `&self`, reads the
// constant tensors and makes new ones (no operator writes into an input; the one lazily built
// tensor of `gemm::Packed` is behind a `OnceLock`), and libtorch supports reading a tensor from
// several threads at once (as `Hibari`, crate::workers).
unsafe impl Sync for KokoroModel {}

/// What [`KokoroModel::infer`] returns.
#[derive(Debug, Clone)]
pub struct KokoroOutput {
    /// 24 kHz mono
    pub audio: Vec<f32>,
    /// Frames per input token, both pads included (the ids' count + 2 entries)
    pub durations: Vec<i64>,
    pub samples_per_frame: usize,
}

impl KokoroModel {
    /// Loads the network's weights from kokoro-onnx's int8 export. [`Precision::Int8`] needs the
    /// CPU (its products run on our kernels); [`Precision::Fp32`] runs anywhere, with the weights
    /// dequantized.
    pub fn load(onnx: &Path, device: Device, precision: Precision) -> Result<KokoroModel, String> {
        let model = Model::load(onnx).map_err(|e| format!("{}: {e}", onnx.display()))?;
        Self::from_model(&model, device, precision).map_err(|e| format!("{}: {e}", onnx.display()))
    }

    /// Loads the network on the CPU in `precision` (fp32 or fp16) with the code paths it takes
    /// on a GPU: the LSTMs as libtorch `lstm` passes, the source's running sum and its STFT as
    /// tensor passes, where the CPU's own path runs them one step after the other in Rust. To
    /// check those paths without a GPU (tests/kokoro_onnx.rs).
    pub fn load_device_paths(onnx: &Path, precision: Precision) -> Result<KokoroModel, String> {
        if precision == Precision::Int8 {
            return Err("the device paths run fp32 or fp16".into());
        }
        let model = Model::load(onnx).map_err(|e| format!("{}: {e}", onnx.display()))?;
        Self::from_model_with(&model, Device::Cpu, precision, true).map_err(|e| format!("{}: {e}", onnx.display()))
    }

    fn from_model(model: &Model, device: Device, precision: Precision) -> Result<KokoroModel, String> {
        Self::from_model_with(model, device, precision, false)
    }

    /// `device_paths`: the device's paths on the CPU too (they are taken on any other device).
    fn from_model_with(
        model: &Model,
        device: Device,
        precision: Precision,
        device_paths: bool,
    ) -> Result<KokoroModel, String> {
        if precision == Precision::Int8 && device != Device::Cpu {
            return Err("int8 runs on the CPU only; use fp32 on CUDA".into());
        }
        for input in ["tokens", "style", "speed"] {
            if !model.graph.inputs.iter().any(|i| i == input) {
                return Err(format!("not a Kokoro export: no input `{input}`"));
            }
        }
        if !model.graph.nodes.iter().any(|n| n.op_type == "MatMulInteger") {
            return Err(format!(
                "not the int8 export: the network reads the weights of kokoro-onnx's int8 file \
                 ({}), which fp32 runs dequantized; the fp32 export is not supported",
                voices::INT8_MODEL
            ));
        }
        let _g = tch::no_grad_guard();
        let mut weights = load::Weights::new(model, precision, device);
        weights.device_paths |= device_paths;
        Ok(KokoroModel { net: net::Kokoro::load(&weights)? })
    }

    /// The precision `auto` means: int8 on a CPU with our AVX2 or AVX-512 int8 kernels, fp32 on
    /// the portable baseline and on other devices (int8 runs on the CPU only). Release build, one
    /// thread, the weather fixture, Intel Xeon (Sapphire Rapids class), 2026-12-04: int8 0.30 s
    /// at AVX-512 VNNI; capped to AVX2 (our kernels and libtorch's: `SPEECHSTREAM_SIMD=avx2
    /// ATEN_CPU_CAPABILITY=avx2`) int8 0.55-0.57 s against fp32's 0.83-0.85 s; at the baseline
    /// int8 9.1 s (scalar products). (Before the AVX2 kernel summed runs of groups in int16,
    /// fp32 was the faster at AVX2.)
    pub fn auto_precision(device: Device) -> Precision {
        use crate::cpu::Level;
        match (device, crate::cpu::level()) {
            (Device::Cpu, Level::Baseline) => Precision::Fp32,
            (Device::Cpu, _) => Precision::Int8,
            _ => Precision::Fp32,
        }
    }

    pub fn precision(&self) -> Precision {
        self.net.precision
    }

    pub fn device(&self) -> Device {
        self.net.device
    }

    /// Whether [`KokoroModel::infer_batch`] runs a batch in one pass (on a device's paths).
    pub fn batches(&self) -> bool {
        self.net.batches()
    }

    /// Speaks `ids` (phoneme ids WITHOUT the two pad tokens) in the voice whose style row for
    /// this length is `style` (256 floats), at `speed` (1.0 = natural).
    pub fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<KokoroOutput, String> {
        Ok(self.infer_traced(ids, style, speed, None)?.0)
    }

    /// [`KokoroModel::infer`] with the durations `forced` (one per token and pad) instead of the
    /// predicted ones, returning also the values the fixture tests compare with onnxruntime's.
    pub fn infer_traced(
        &self,
        ids: &[i64],
        style: &[f32],
        speed: f32,
        forced: Option<&[i64]>,
    ) -> Result<(KokoroOutput, KokoroTrace), String> {
        check_input(ids, style, speed)?;
        check_forced(ids, forced)?;
        let _g = tch::no_grad_guard();
        let mut tokens = Vec::with_capacity(ids.len() + 2);
        tokens.push(0);
        tokens.extend_from_slice(ids);
        tokens.push(0);
        let pass = caught(|| self.net.forward(&tokens, style, speed, forced))?;
        let out = KokoroOutput {
            audio: floats(&pass.audio)?,
            durations: pass.durations,
            samples_per_frame: SAMPLES_PER_FRAME,
        };
        let trace =
            KokoroTrace { durations_raw: floats(&pass.durations_raw)?, f0: floats(&pass.f0)?, n: floats(&pass.n)? };
        Ok((out, trace))
    }
}

impl KokoroModel {
    /// [`KokoroModel::infer`] of several segments (`(ids, style, speed)` each), in one pass of
    /// the network where it runs on a device's paths (a GPU, [`KokoroModel::load_device_paths`]):
    /// each segment's output as alone within float rounding (the longer ones padded, each
    /// normalization and attention over a segment's own steps). Elsewhere one after the other.
    /// Each segment's output, or why it was refused; an error (the pass failed) for all.
    pub fn infer_batch(&self, items: &[(&[i64], &[f32], f32)]) -> Result<Vec<Result<KokoroOutput, String>>, String> {
        Ok(self.infer_batch_traced(items)?.into_iter().map(|r| r.map(|(out, _)| out)).collect())
    }

    /// [`KokoroModel::infer_batch`], with each segment's [`KokoroTrace`].
    #[allow(clippy::type_complexity)]
    pub fn infer_batch_traced(
        &self,
        items: &[(&[i64], &[f32], f32)],
    ) -> Result<Vec<Result<(KokoroOutput, KokoroTrace), String>>, String> {
        let _g = tch::no_grad_guard();
        let checked: Vec<Result<Vec<i64>, String>> = items
            .iter()
            .map(|&(ids, style, speed)| {
                check_input(ids, style, speed)?;
                Ok(std::iter::once(0).chain(ids.iter().copied()).chain(std::iter::once(0)).collect())
            })
            .collect();
        let batch: Vec<net::Item> = checked
            .iter()
            .zip(items)
            .filter_map(|(tokens, &(_, style, speed))| Some(net::Item { tokens: tokens.as_ref().ok()?, style, speed }))
            .collect();
        let mut passes = caught(|| self.net.forward_batch(&batch))?.into_iter();
        checked
            .into_iter()
            .map(|checked| {
                Ok(match checked {
                    Err(e) => Err(e),
                    Ok(_) => {
                        let pass = passes.next().ok_or("a segment's pass is missing")?;
                        let trace = KokoroTrace {
                            durations_raw: floats(&pass.durations_raw)?,
                            f0: floats(&pass.f0)?,
                            n: floats(&pass.n)?,
                        };
                        let out = KokoroOutput {
                            audio: floats(&pass.audio)?,
                            durations: pass.durations,
                            samples_per_frame: SAMPLES_PER_FRAME,
                        };
                        Ok((out, trace))
                    }
                })
            })
            .collect()
    }
}

/// What [`KokoroModel::infer`] and [`KokoroModel::prepare`] refuse.
fn check_input(ids: &[i64], style: &[f32], speed: f32) -> Result<(), String> {
    if ids.is_empty() || ids.len() > MAX_IDS {
        return Err(format!("{} phoneme ids: Kokoro takes 1 to {MAX_IDS}", ids.len()));
    }
    if style.len() != 256 {
        return Err(format!("a style of {} floats, not 256", style.len()));
    }
    if !(speed.is_finite() && speed > 0.0) {
        return Err(format!("speed {speed}: must be a positive number"));
    }
    Ok(())
}

fn check_forced(ids: &[i64], forced: Option<&[i64]>) -> Result<(), String> {
    if let Some(f) = forced {
        if f.len() != ids.len() + 2 || f.iter().any(|&d| !(1..=10_000).contains(&d)) {
            return Err(format!("{} forced durations for {} tokens (1 to 10000 frames each)", f.len(), ids.len() + 2));
        }
    }
    Ok(())
}

/// Runs a pass of the network, its panic (libtorch's exceptions) an error.
fn caught<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(format!("Kokoro's network failed: {}", crate::family::panic_text(&*p).unwrap_or_default())),
    }
}

/// Frames (12.5 ms) over which the rest of a segment fades in from its opening
/// ([`KokoroModel::decode_opening`]): the two normalizations give the same sound in other
/// phases, and a cut from one to the other is heard as a click.
pub const SEAM: usize = 2;

/// Fades `audio` in from `tail` over `tail`'s samples (a raised cosine).
fn fade_in(audio: &mut [f32], tail: &[f32]) {
    let n = tail.len().min(audio.len());
    for (i, (a, &t)) in audio[..n].iter_mut().zip(tail).enumerate() {
        let w = 0.5 - 0.5 * (std::f32::consts::PI * (i as f32 + 0.5) / n as f32).cos();
        *a = t + (*a - t) * w;
    }
}

/// Samples in one of a segment's frames ([`KokoroSegment::frames`]): 12.5 ms, half a duration
/// frame, one row of the decoder's output.
pub const SAMPLES_PER_ROW: usize = SAMPLES_PER_FRAME / 2;

/// Frames of speech after its leading silence that a segment's opening decodes
/// ([`KokoroModel::decode_opening`]): its normalizations are over that much speech (with 16
/// frames, the leading silence came out as audible noise; docs/kokoro-architecture.md §8).
pub const OPENING_SPEECH: usize = 24;

/// [`OPENING_SPEECH`] of an opening decoded while its segment's leading silence plays
/// ([`KokoroSegment::open_after_silence`]): 0.5 s. Its pass no longer delays the first audio,
/// and each frame more gives the whole pass after it 12.5 ms more for ~1.8 ms of its own (a
/// Zen 4 core keeps six words of first segment, where 0.3 s left it five); its normalizations
/// over more speech are nearer the whole pass's (1.7-3.4 dB of spectral distance over the
/// packaged voices, against 2.2-4.4).
pub const OPENING_SPEECH_AFTER_SILENCE: usize = 40;

/// The predicted energy (the prosody predictor's N, per frame) below which a first pad token's
/// frames are taken for silence ([`KokoroSegment::silence_frames`]): the silence's ran -9.3 to
/// -4 over the packaged voices, speech's first audible frame (-60 dBFS) came at -2 or more.
const SILENCE_ENERGY: f32 = -2.0;

/// Frames before the first one over [`SILENCE_ENERGY`] that still count as speech: the
/// decoder and the generator spread a sound's start ~2-3 frames earlier (with 4, the frames
/// left as silence peaked at -68 dBFS in the whole pass, over 5 voices, 11 English sentences in
/// both accents and 4 Japanese, 2026-12-07: the model's own noise floor, -70).
const SILENCE_GUARD: usize = 4;

/// The least leading silence that goes out before a segment's opening
/// ([`KokoroSegment::silence_frames`]): 0.15 s. The opening's round must end while it plays
/// (~140 ms on a Zen 4 core): the engine checks that against its measured cost, segment by
/// segment (`kokoro::serve`).
pub const SILENCE_LEAST: usize = 12;

/// A segment prepared for decoding ([`KokoroModel::prepare`]): its pass up to the generator's
/// up-sampling stages.
pub struct KokoroSegment {
    prepared: net::Prepared,
    /// [`KokoroSegment::silence_frames`]
    silence: usize,
    /// Frames of speech its opening decodes ([`OPENING_SPEECH`], or
    /// [`OPENING_SPEECH_AFTER_SILENCE`])
    speech: usize,
}

impl KokoroSegment {
    /// Its length in frames of [`SAMPLES_PER_ROW`] samples.
    pub fn frames(&self) -> usize {
        self.prepared.frames
    }

    /// Frames per token (of [`SAMPLES_PER_FRAME`] samples), both pads included.
    pub fn durations(&self) -> &[i64] {
        &self.prepared.durations
    }

    /// Whether decoding its opening first pays: the whole segment is more than twice the
    /// opening's pass (a shorter one is decoded whole at once, exact, and nearly as soon).
    pub fn worth_opening(&self) -> bool {
        self.frames() > 2 * (self.opening_frames() + SEAM + net::GENERATOR_REACH)
    }

    /// The frames its opening covers ([`KokoroModel::decode_opening`]): the leading silence (its
    /// first pad token) and [`OPENING_SPEECH`] frames of speech, or the whole segment.
    pub fn opening_frames(&self) -> usize {
        (self.lead() + self.speech).min(self.frames())
    }

    /// Makes its opening [`OPENING_SPEECH_AFTER_SILENCE`] frames of speech: the opening of a
    /// segment whose leading silence goes out first ([`KokoroSegment::silence_frames`]).
    pub fn open_after_silence(&mut self) {
        self.speech = OPENING_SPEECH_AFTER_SILENCE;
    }

    /// Frames of its first pad token.
    fn lead(&self) -> usize {
        2 * self.prepared.durations.first().map_or(0, |&d| d.max(0) as usize)
    }

    /// The frames of its leading silence known before any audio is decoded: those of its first
    /// pad token before the predicted energy first reaches speech's (`SILENCE_ENERGY`), less
    /// `SILENCE_GUARD`; 0 where that is under [`SILENCE_LEAST`] or the segment is not
    /// [`KokoroSegment::worth_opening`] (with an opening of [`OPENING_SPEECH`]). A streamed
    /// utterance's first audio is that much
    /// silence (zeros), sent before its opening is decoded (`kokoro::serve`); the whole pass
    /// there peaks at -68 dBFS.
    pub fn silence_frames(&self) -> usize {
        self.silence
    }
}

/// [`KokoroSegment::silence_frames`] of a segment whose first pad token lasts `lead` frames, from
/// its predicted energy per frame.
fn silence_frames(lead: usize, energy: &[f32]) -> usize {
    let speech = energy.iter().take(lead).position(|&n| n >= SILENCE_ENERGY).unwrap_or(lead.min(energy.len()));
    Some(speech.saturating_sub(SILENCE_GUARD)).filter(|&n| n >= SILENCE_LEAST).unwrap_or(0)
}

/// A segment's opening ([`KokoroModel::decode_opening`]).
pub struct Opening {
    /// The audio of frames `0..frames`
    pub audio: Vec<f32>,
    pub frames: usize,
    /// The [`SEAM`] frames after them, decoded with the same normalizations: what the rest of the
    /// segment fades in from ([`Opening::join`]).
    pub tail: Vec<f32>,
}

impl Opening {
    /// The opening after its first `frames` went out as silence
    /// ([`KokoroSegment::silence_frames`]): those zeros, and the frame after them fading in from
    /// zero (a raised cosine), so the listener gets no step from the zeros to the noise floor;
    /// with no frames of silence, the opening as it was decoded.
    pub fn after_silence(mut self, frames: usize) -> Opening {
        if frames == 0 {
            return self;
        }
        let at = (frames * SAMPLES_PER_ROW).min(self.audio.len());
        self.audio[..at].fill(0.0);
        fade_in(&mut self.audio[at..], &[0.0; SAMPLES_PER_ROW]);
        self
    }

    /// The whole segment: this opening, then the rest of `whole` (the segment decoded whole,
    /// [`KokoroModel::decode_whole`]) fading in from the opening's tail.
    pub fn join(&self, whole: &[f32]) -> Vec<f32> {
        let at = (self.frames * SAMPLES_PER_ROW).min(whole.len());
        let mut audio = self.audio.clone();
        let mut rest = whole[at..].to_vec();
        fade_in(&mut rest, &self.tail);
        audio.extend_from_slice(&rest);
        audio
    }
}

impl KokoroModel {
    /// A segment's pass up to the generator's up-sampling stages (ALBERT, the prosody predictor,
    /// the text encoder, the decoder, the harmonic source), to decode with
    /// [`KokoroModel::decode_opening`] and [`KokoroModel::decode_whole`].
    pub fn prepare(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<KokoroSegment, String> {
        check_input(ids, style, speed)?;
        let _g = tch::no_grad_guard();
        let tokens: Vec<i64> = std::iter::once(0).chain(ids.iter().copied()).chain(std::iter::once(0)).collect();
        let prepared = caught(|| {
            let mut profile = net::Profile::new();
            let prepared = self.net.prepare(&tokens, style, speed, None, &mut profile);
            profile.report();
            prepared
        })?;
        let mut segment = KokoroSegment { prepared, silence: 0, speech: OPENING_SPEECH };
        if segment.worth_opening() && segment.prepared.n.device() == Device::Cpu {
            let lead = segment.lead();
            let energy = floats(&segment.prepared.n.flatten(0, -1).narrow(0, 0, lead as i64))?;
            segment.silence = silence_frames(lead, &energy);
        }
        Ok(segment)
    }

    /// The segment whole, as [`KokoroModel::infer`] decodes it (bit for bit).
    pub fn decode_whole(&self, segment: &KokoroSegment) -> Result<Vec<f32>, String> {
        let _g = tch::no_grad_guard();
        caught(|| {
            let frames = 0..segment.frames();
            floats(&self.net.generate(&segment.prepared, frames, &mut net::Tape::Own, &mut net::Profile::new()))
        })
    }

    /// The segment's opening ([`KokoroSegment::opening_frames`]), for its first audio to leave
    /// before the generator's pass over the whole segment: the generator over those frames, the
    /// [`SEAM`] after them and the generator's reach (10 frames) of context, each instance norm
    /// over the opening's own rows instead of the whole segment's (which no window can see;
    /// docs/kokoro-architecture.md §8). Where the opening is the whole segment, that is the whole pass.
    pub fn decode_opening(&self, segment: &KokoroSegment) -> Result<Opening, String> {
        let _g = tch::no_grad_guard();
        let total = segment.frames();
        let upto = segment.opening_frames();
        let past = (upto + SEAM).min(total);
        let window = 0..(past + net::GENERATOR_REACH).min(total);
        // the opening's rows at each stage's rate (10 and 60 a frame; the last stage has one
        // more where the window is the segment's end)
        let rows = [0..10 * upto, 0..60 * upto + usize::from(upto == total)];
        let mut tape = net::Tape::Window { rows, stage: 0 };
        let audio =
            caught(|| floats(&self.net.generate(&segment.prepared, window, &mut tape, &mut net::Profile::new())))?;
        let (n, m) = (upto * SAMPLES_PER_ROW, past * SAMPLES_PER_ROW);
        Ok(Opening { audio: audio[..n].to_vec(), frames: upto, tail: audio[n..m].to_vec() })
    }
}

/// A tensor's values, on the CPU, as f32.
fn floats(t: &Tensor) -> Result<Vec<f32>, String> {
    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1).to_device(Device::Cpu)).map_err(|e| e.to_string())
}

/// Intermediate values of one pass ([`KokoroModel::infer_traced`]).
#[derive(Debug, Clone)]
pub struct KokoroTrace {
    /// The durations before rounding, in frames, per token and pad
    pub durations_raw: Vec<f32>,
    /// The predicted pitch curve, Hz, two values per frame
    pub f0: Vec<f32>,
    /// The predicted energy curve, two values per frame
    pub n: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(frames: usize) -> Opening {
        let audio: Vec<f32> = (0..frames * SAMPLES_PER_ROW).map(|i| 0.01 + (i as f32 * 0.37).sin() * 0.5).collect();
        Opening { audio, frames, tail: vec![0.25; SEAM * SAMPLES_PER_ROW] }
    }

    /// The silence sent first comes back as zeros, the frame after it fades in from zero, and the
    /// rest is the opening as decoded; with no silence, the opening is untouched (no fade at its
    /// start: the pass's own leading silence, as before the silence went first).
    #[test]
    fn an_opening_after_its_silence_starts_from_zero() {
        let plain = opening(6);
        assert!(opening(6).after_silence(0).audio == plain.audio, "no silence: the opening as decoded");
        let after = opening(6).after_silence(2);
        let (n, past) = (2 * SAMPLES_PER_ROW, 3 * SAMPLES_PER_ROW);
        assert!(after.audio[..n].iter().all(|&x| x == 0.0), "the silence is zeros");
        assert!(after.audio[n].abs() < plain.audio[n].abs() * 1e-3, "the next frame starts from zero");
        let faded = &after.audio[n..past];
        assert!(faded.iter().zip(&plain.audio[n..past]).all(|(a, p)| a.abs() <= p.abs()), "and fades in");
        assert!(after.audio[past..] == plain.audio[past..], "then the opening as decoded");
        assert!(after.tail == plain.tail && after.frames == plain.frames);
    }
}
