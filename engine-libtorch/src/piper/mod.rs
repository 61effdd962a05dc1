//! Piper's voices (rhasspy/piper, piper1-gpl: VITS exported to ONNX) natively in tch, without
//! onnxruntime: the network written out block by block (`net`, `duration`), its weights and
//! shapes read out of the voice's own `.onnx` file (`load`), so that every Piper export loads
//! (x_low, low, medium, high; single- and multi-speaker). Checked against onnxruntime on the
//! same file by tests/piper_model.rs.
//!
//! [`PiperModel::infer`] takes one utterance's phoneme ids (as Piper's phonemizer makes them,
//! `^`, pads and `$` included), the speaker, the three scales and a seed, and returns the
//! network's raw audio at the voice's sample rate (which the ONNX file does not carry: it is
//! `audio.sample_rate` of the voice's `.onnx.json`) with the durations it used. Its two noise
//! draws (the duration predictor's and the prior's) come from our counter-based generator
//! ([`crate::NoiseSource`]) rather than libtorch's global one, so the same request gives the
//! same audio whatever else runs.
//!
//! Two precisions ([`PiperModel::load`]): fp32, onnxruntime's arithmetic (within float
//! rounding), and on the CPU int8 (`int8`: the decoder's and the flow's convolutions on our int8
//! kernels, ~2.2× onnxruntime's speed on one Zen 4 core; its audio 13-21 dB SNR from fp32's,
//! Whisper's transcripts the same on 5 of 6 held-out sentences; tests/piper_model.rs).

mod duration;
mod int8;
mod load;
mod net;
// How the engine's workers serve Piper's voices (the family integration).
pub mod serve;

use std::ops::Range;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::noise::{NoiseSource, BINS};
use crate::onnx::Model;
use crate::precision::Precision;

/// The inputs a Piper export has (`sid` besides for a multi-speaker voice).
const INPUTS: [&str; 3] = ["input", "input_lengths", "scales"];
/// The noise streams of one seed: the duration predictor's and the prior's.
const DURATION_STREAM: u64 = 0;
const PRIOR_STREAM: u64 = 1;
/// Frames one pass may make (~4 minutes at 22,050 Hz and a hop of 256): a bound on memory for
/// ids and scales that would ask for more.
pub const MAX_FRAMES: usize = 20_000;

/// The network of one Piper voice on one device.
pub struct PiperModel {
    net: net::Vits,
    precision: Precision,
}

// SAFETY: nothing in a loaded model is written after loading: `infer` takes `&self`, reads the
// constant tensors and makes new ones (no operator writes into an input), and libtorch supports
// reading a tensor from several threads at once (as `KokoroModel`, `Hibari`, crate::workers).
unsafe impl Sync for PiperModel {}
// SAFETY: the model owns its tensors, which libtorch lets another thread use and free.
unsafe impl Send for PiperModel {}

/// VITS's three scales (Piper's `scales` input, in its order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scales {
    /// The prior's noise (σ multiplier): 0.667 in Piper's voices
    pub noise_scale: f32,
    /// Frames per predicted frame: above 1 slower, below faster
    pub length_scale: f32,
    /// The stochastic duration predictor's noise: 0.8 in Piper's voices
    pub noise_w: f32,
}

impl Default for Scales {
    /// Piper's defaults (the `inference` section of most voices' `.onnx.json`).
    fn default() -> Self {
        Scales { noise_scale: 0.667, length_scale: 1.0, noise_w: 0.8 }
    }
}

/// What [`PiperModel::infer`] returns.
#[derive(Debug, Clone)]
pub struct PiperOutput {
    /// The model's raw output (tanh, within ±1), not normalised: `durations.sum() ·
    /// samples_per_frame` samples (one frame's worth when every duration is 0, as VITS does)
    pub audio: Vec<f32>,
    /// Frames per input id as VITS computes them: ⌈exp(log w)·length_scale⌉ (0 is possible)
    pub durations: Vec<i64>,
    /// The decoder's hop: 256 for Piper's medium and high voices
    pub samples_per_frame: usize,
}

impl PiperModel {
    /// Loads a Piper voice's `.onnx` (fp32, as Piper publishes them) onto `device`, to run in
    /// `precision`: [`Precision::Int8`] on the CPU (see [`PiperModel::precision`]), fp32
    /// otherwise (fp16 and int8 elsewhere than on the CPU load as fp32). An error for a file
    /// that is not a Piper VITS export or whose network this code does not cover.
    pub fn load(onnx: &Path, device: Device, precision: Precision) -> Result<PiperModel, String> {
        let model = Model::load(onnx).map_err(|e| format!("{}: {e}", onnx.display()))?;
        Self::from_model(&model, device, precision).map_err(|e| format!("{}: {e}", onnx.display()))
    }

    /// The precision `auto` means: int8 on a CPU with our AVX2 or AVX-512 int8 kernels, fp32 on
    /// the portable baseline (scalar products) and on other devices.
    pub fn auto_precision(device: Device) -> Precision {
        use crate::cpu::Level;
        match (device, crate::cpu::level()) {
            (Device::Cpu, Level::Baseline) => Precision::Fp32,
            (Device::Cpu, _) => Precision::Int8,
            _ => Precision::Fp32,
        }
    }

    /// The precision the network runs in: [`Precision::Int8`] (the generator's up-samplings and
    /// residual blocks, the flow's WaveNet layers and the text encoder's FFN on our int8
    /// kernels, the rest fp32: see `net::Vits::quantize`) or [`Precision::Fp32`].
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The same model with its text encoder all fp32 (in int8 its FFN is int8, which moves a
    /// few durations by a frame): its durations are fp32's, so the rest of int8 (the flow, the
    /// generator) can be compared with fp32 sample by sample.
    pub fn with_float_encoder(mut self) -> PiperModel {
        self.net.float_encoder();
        self
    }

    fn from_model(model: &Model, device: Device, precision: Precision) -> Result<PiperModel, String> {
        for input in INPUTS {
            if !model.graph.inputs.iter().any(|i| i == input) {
                return Err(format!("not a Piper VITS export: no input `{input}`"));
            }
        }
        let _g = tch::no_grad_guard();
        let weights = load::Weights::new(model, device);
        let mut net = net::Vits::load(&weights).map_err(|e| format!("not a Piper VITS export as expected: {e}"))?;
        if net.channels as usize > BINS {
            return Err(format!("{} prior channels: the noise covers {BINS}", net.channels));
        }
        let precision = if precision == Precision::Int8 && device == Device::Cpu {
            if net.quantize() {
                Precision::Int8
            } else {
                Precision::Fp32
            }
        } else {
            Precision::Fp32
        };
        Ok(PiperModel { net, precision })
    }

    pub fn device(&self) -> Device {
        self.net.device
    }

    /// Speakers of the voice: 1 for a single-speaker voice.
    pub fn num_speakers(&self) -> usize {
        self.net.speakers() as usize
    }

    /// The size of the phoneme id table: ids must be below it.
    pub fn num_symbols(&self) -> usize {
        self.net.symbols() as usize
    }

    /// Audio samples per duration frame (the decoder's hop): 256 for medium and high voices.
    pub fn samples_per_frame(&self) -> usize {
        self.net.dec.hop()
    }

    /// Frames of context [`PiperModel::decode`] computes on each side of a stretch: the
    /// generator's receptive field (12 for a medium voice), then the flow's, beyond it (32).
    pub fn context(&self) -> (usize, usize) {
        self.net.context()
    }

    /// Whether the durations come from the stochastic predictor (noise_w matters), as in all
    /// of Piper's voices, or the plain one.
    pub fn stochastic_durations(&self) -> bool {
        self.net.stochastic()
    }

    /// The standard-normal noise [`PiperModel::infer`] draws for `seed`: the duration
    /// predictor's, [2, `ids`] row-major, and the prior's, [channels, `frames`] row-major (the
    /// values of frame t do not depend on how many frames there are). For checks that feed the
    /// same noise to another implementation.
    pub fn noise(&self, seed: u64, ids: usize, frames: usize) -> (Vec<f32>, Vec<f32>) {
        let dp = Self::noise_tensor(seed, DURATION_STREAM, 2, ids as i64);
        let prior = Self::noise_tensor(seed, PRIOR_STREAM, self.net.channels, frames as i64);
        let v = |t: Tensor| Vec::<f32>::try_from(t.contiguous().view([-1])).expect("float noise");
        (v(dp), v(prior))
    }

    /// [1, `channels`, `n`] of the stream: step t, channel c is the real part of bin c of
    /// frame t of [`NoiseSource`].
    fn noise_tensor(seed: u64, stream: u64, channels: i64, n: i64) -> Tensor {
        let (re, _) = NoiseSource::new(seed, stream).frames_tensor(0, n as usize);
        re.narrow(1, 0, channels).transpose(0, 1).unsqueeze(0)
    }

    /// Speaks `ids` (phoneme ids, each below [`PiperModel::num_symbols`]) as `speaker` (None for
    /// a single-speaker voice; None means speaker 0 of a multi-speaker one, as Piper does), at
    /// `scales`, with the noise of `seed`: [`PiperModel::prepare`], then all its frames
    /// [`PiperModel::decode`]d.
    pub fn infer(&self, ids: &[i64], speaker: Option<i64>, scales: Scales, seed: u64) -> Result<PiperOutput, String> {
        let prepared = self.prepare(ids, speaker, scales, seed)?;
        let audio = self.decode(&prepared, 0..prepared.frames())?;
        Ok(PiperOutput { audio, durations: prepared.prior.durations, samples_per_frame: self.samples_per_frame() })
    }

    /// A pass up to the flow (the text encoder, the durations, the prior's sample), whose
    /// frames [`PiperModel::decode`] then turns into audio a stretch at a time: the first audio
    /// of a long sentence need not wait for all of it. Arguments as [`PiperModel::infer`]'s.
    pub fn prepare(&self, ids: &[i64], speaker: Option<i64>, scales: Scales, seed: u64) -> Result<Prepared, String> {
        let symbols = self.num_symbols() as i64;
        if ids.is_empty() {
            return Err("no phoneme ids".into());
        }
        if let Some(bad) = ids.iter().find(|&&i| !(0..symbols).contains(&i)) {
            return Err(format!("phoneme id {bad}: the voice has {symbols} symbols"));
        }
        let speakers = self.num_speakers() as i64;
        let speaker = match speaker {
            Some(s) if !(0..speakers).contains(&s) => {
                return Err(format!("speaker {s}: the voice has {speakers} speaker(s)"));
            }
            _ if speakers == 1 => None,
            s => Some(s.unwrap_or(0)),
        };
        let Scales { noise_scale, length_scale, noise_w } = scales;
        if !(noise_scale.is_finite() && noise_scale >= 0.0 && noise_w.is_finite() && noise_w >= 0.0) {
            return Err(format!("noise scales {noise_scale} and {noise_w}: must be finite and not negative"));
        }
        if !(length_scale.is_finite() && length_scale > 0.0) {
            return Err(format!("length scale {length_scale}: must be a positive number"));
        }
        let _g = tch::no_grad_guard();
        let device = self.device();
        let s = net::PassScales {
            noise_scale: f64::from(noise_scale),
            length_scale: f64::from(length_scale),
            noise_w: f64::from(noise_w),
        };
        let ids_t = Tensor::from_slice(ids).to_device(device);
        let dp_noise = Self::noise_tensor(seed, DURATION_STREAM, 2, ids.len() as i64).to_device(device);
        let channels = self.net.channels;
        let prior = |t: i64| Self::noise_tensor(seed, PRIOR_STREAM, channels, t).to_device(device);
        let prior = caught(|| self.net.prepare(&ids_t, speaker, &s, &dp_noise, prior, MAX_FRAMES as i64))??;
        Ok(Prepared { prior })
    }

    /// The audio of `frames` of a prepared pass (its frames counted from 0; a range past its
    /// end is cut there): `(end − start) · samples_per_frame` samples, raw as
    /// [`PiperOutput::audio`]: the flow and the generator over those frames, each with the
    /// context its receptive field needs on each side ([`PiperModel::context`]), so stretches
    /// laid end to end sound as the whole: in fp32 the same samples up to float rounding, in
    /// int8 within int8's own noise (tests/piper_model.rs). All its frames are the whole pass.
    pub fn decode(&self, prepared: &Prepared, frames: Range<usize>) -> Result<Vec<f32>, String> {
        let audio = caught(|| {
            let _g = tch::no_grad_guard();
            self.net.decode(&prepared.prior, frames)
        })?;
        Vec::<f32>::try_from(audio.to_kind(Kind::Float).to_device(Device::Cpu)).map_err(|e| e.to_string())
    }
}

/// A pass of [`PiperModel::prepare`]: the frames its generator has to decode.
pub struct Prepared {
    prior: net::Prior,
}

// SAFETY: its tensors are made for it alone and only read; libtorch lets another thread use them.
unsafe impl Send for Prepared {}

impl Prepared {
    /// Its length in frames (the durations' sum; 1 when every duration is 0, as VITS decodes).
    pub fn frames(&self) -> usize {
        self.prior.z_p.size()[2] as usize
    }

    /// Frames per input id ([`PiperOutput::durations`]).
    pub fn durations(&self) -> &[i64] {
        &self.prior.durations
    }
}

/// Runs network code, turning a panic (tch's form of libtorch's exceptions) into an error.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|p| format!("Piper's network failed: {}", crate::family::panic_text(&*p).unwrap_or_default()))
}
