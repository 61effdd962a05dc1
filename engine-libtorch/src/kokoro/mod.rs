//! Kokoro-82M natively in tch, read off kokoro-onnx's ONNX export (`kokoro-v1.0.int8.onnx`, or
//! the fp32 `kokoro-v1.0.onnx`) without onnxruntime: the export's graph is run node by node on
//! tch tensors ([`graph`], [`ops`]), its int8 products on our own int8 kernels ([`int8`],
//! [`crate::gemm`]). The blocks, shapes and where the int8 lives: docs/kokoro-architecture.md.
//!
//! [`KokoroModel::infer`] takes the phoneme ids of one utterance (without the two pad tokens,
//! which it adds), the voice's 256 style floats for that length and the speed, and returns 24 kHz
//! audio with the predicted durations (frames of [`SAMPLES_PER_FRAME`] samples per input token,
//! both pads included).

mod graph;
mod int8;
mod ops;
// How the engine's workers serve Kokoro's voices, and the voice files users have.
pub mod serve;
pub mod voices;

use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::onnx::Model;
use crate::Precision;

/// Audio samples per duration frame (24 kHz, 40 frames a second).
pub const SAMPLES_PER_FRAME: usize = 600;
/// The sample rate of [`KokoroOutput::audio`].
pub const SAMPLE_RATE: u32 = 24_000;
/// Inputs longer than this many ids (pads excluded) are refused: ALBERT's positions end at 512,
/// the voices' style rows at 510.
pub const MAX_IDS: usize = 510;

/// The per-token durations in the export's graph: round(duration / speed) clipped to ≥ 1.
const DURATIONS: &str = "/encoder/Clip_output_0";

/// The network of one Kokoro model file in one precision on one device.
pub struct KokoroModel {
    graph: graph::Graph,
    precision: Precision,
    device: Device,
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
    /// Loads a Kokoro ONNX export. [`Precision::Int8`] needs the CPU and an int8 file (its int8
    /// nodes run on our kernels); [`Precision::Fp32`] runs anywhere, with the int8 file's weights
    /// dequantized.
    pub fn load(onnx: &Path, device: Device, precision: Precision) -> Result<KokoroModel, String> {
        let model = Model::load(onnx).map_err(|e| format!("{}: {e}", onnx.display()))?;
        Self::from_model(&model, device, precision, &[]).map_err(|e| format!("{}: {e}", onnx.display()))
    }

    fn from_model(model: &Model, device: Device, precision: Precision, keep: &[&str]) -> Result<KokoroModel, String> {
        if precision == Precision::Int8 && device != Device::Cpu {
            return Err("int8 runs on the CPU only; use fp32 on CUDA".into());
        }
        for input in ["tokens", "style", "speed"] {
            if !model.graph.inputs.iter().any(|i| i == input) {
                return Err(format!("not a Kokoro export: no input `{input}`"));
            }
        }
        let mut keep = keep.to_vec();
        keep.push(DURATIONS);
        let _g = tch::no_grad_guard();
        let graph = graph::Graph::new(model, device, precision, &keep)?;
        Ok(KokoroModel { graph, precision, device })
    }

    /// The precision `auto` means: int8 on a CPU whose int8 kernels have VNNI dot products
    /// (AVX-512 VNNI or AVX-VNNI), fp32 elsewhere. On a quiet Zen 4 (BENCHMARKS.md, one thread)
    /// int8 took 0.64 of real time against fp32's 0.72 at AVX-512 VNNI, and 1.07 capped to AVX2,
    /// where libtorch's float convolutions are the faster; int8 runs on the CPU only.
    pub fn auto_precision(device: Device) -> Precision {
        use crate::cpu::Level;
        match (device, crate::cpu::level()) {
            (Device::Cpu, Level::Avx512Vnni | Level::AvxVnni) => Precision::Int8,
            _ => Precision::Fp32,
        }
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Speaks `ids` (phoneme ids WITHOUT the two pad tokens) in the voice whose style row for
    /// this length is `style` (256 floats), at `speed` (1.0 = natural).
    pub fn infer(&self, ids: &[i64], style: &[f32], speed: f32) -> Result<KokoroOutput, String> {
        let (audio, durations) = self.run(ids, style, speed, &[], &[])?.0;
        Ok(KokoroOutput { audio, durations, samples_per_frame: SAMPLES_PER_FRAME })
    }

    /// [`KokoroModel::infer`] returning also the named intermediate values (the fixture tests
    /// compare them with onnxruntime's). Only values of a model loaded with them kept can be read.
    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        ids: &[i64],
        style: &[f32],
        speed: f32,
        extra: &[&str],
        replace: &[(&str, Tensor)],
    ) -> Result<((Vec<f32>, Vec<i64>), Vec<Tensor>), String> {
        if ids.is_empty() || ids.len() > MAX_IDS {
            return Err(format!("{} phoneme ids: Kokoro takes 1 to {MAX_IDS}", ids.len()));
        }
        if style.len() != 256 {
            return Err(format!("a style of {} floats, not 256", style.len()));
        }
        if !(speed.is_finite() && speed > 0.0) {
            return Err(format!("speed {speed}: must be a positive number"));
        }
        let _g = tch::no_grad_guard();
        let mut tokens = Vec::with_capacity(ids.len() + 2);
        tokens.push(0);
        tokens.extend_from_slice(ids);
        tokens.push(0);
        let n = tokens.len() as i64;
        let inputs = [
            ("tokens", Tensor::from_slice(&tokens).view([1, n])),
            ("style", Tensor::from_slice(style).view([1, 256])),
            ("speed", Tensor::from_slice(&[speed])),
        ];
        let mut want = vec!["audio", DURATIONS];
        want.extend_from_slice(extra);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.graph.run(&inputs, &want, replace)));
        let mut outs = match run {
            Ok(r) => r?,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                return Err(format!("Kokoro's network failed: {msg}"));
            }
        };
        let rest = outs.split_off(2);
        let audio = Vec::<f32>::try_from(outs[0].to_kind(Kind::Float).flatten(0, -1).to_device(Device::Cpu))
            .map_err(|e| e.to_string())?;
        let durations = Vec::<i64>::try_from(outs[1].to_kind(Kind::Int64).flatten(0, -1).to_device(Device::Cpu))
            .map_err(|e| e.to_string())?;
        Ok(((audio, durations), rest))
    }
}

/// For the fixture tests and the dump example: a model that keeps `keep` (value names of the
/// graph) and returns them from [`KokoroProbe::infer`].
pub struct KokoroProbe {
    model: KokoroModel,
    keep: Vec<String>,
}

impl KokoroProbe {
    pub fn load(onnx: &Path, device: Device, precision: Precision, keep: &[&str]) -> Result<KokoroProbe, String> {
        let model = Model::load(onnx).map_err(|e| format!("{}: {e}", onnx.display()))?;
        let model = KokoroModel::from_model(&model, device, precision, keep)?;
        Ok(KokoroProbe { model, keep: keep.iter().map(|s| s.to_string()).collect() })
    }

    /// The output and the kept values, in `keep`'s order; `replace`: values of the graph set
    /// from outside (by name) instead of computed.
    pub fn infer(
        &self,
        ids: &[i64],
        style: &[f32],
        speed: f32,
        replace: &[(&str, Tensor)],
    ) -> Result<(KokoroOutput, Vec<Tensor>), String> {
        let keep: Vec<&str> = self.keep.iter().map(String::as_str).collect();
        let ((audio, durations), rest) = self.model.run(ids, style, speed, &keep, replace)?;
        Ok((KokoroOutput { audio, durations, samples_per_frame: SAMPLES_PER_FRAME }, rest))
    }
}
