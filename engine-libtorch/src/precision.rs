//! [`Precision`]: the arithmetic a voice family's networks run in. A leaf: the options, the
//! family contract and every family read it.

use std::fmt;
use std::str::FromStr;

/// Arithmetic of the network's Linear layers (45 matrices, 77 uses; everything else is fp32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// The shipped int8 weights with int8 activations (our own kernels, [`crate::gemm`], exact
    /// int32 accumulation), as the packaged onnxruntime graph computes them, but with one
    /// activation scale per row (frame or token) instead of per tensor, so a frame's output
    /// depends on that frame's inputs only. CPU only. Not the fp32 graph's math (like
    /// onnxruntime's int8 graph, it is as far from it as it is from onnxruntime's int8 output,
    /// see `tests/hibari_int8.rs`), but exact with itself: the row-wise kernels of
    /// `crate::kernels` compute every row as they would alone, so chunks equal the whole
    /// sentence and batches equal single items bit for bit, on every CPU level ([`crate::cpu`]).
    Int8,
    /// Weights dequantized to float32 (W = q·scale), float activations: the exact target of the
    /// fp32 graph (docs/hibari-architecture.md §6).
    Fp32,
    /// Kokoro only (hibari refuses it): fp32's arithmetic with the matrix products and
    /// convolutions in float16 (weights stored in float16, inputs cast, results back to float32;
    /// norms, LSTMs, the harmonic source and the iSTFT stay float32). For CUDA's half-precision
    /// units; on a CPU it runs, slower than fp32 (docs/kokoro-architecture.md §4).
    Fp16,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::Int8 => "int8",
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
        })
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "int8" => Ok(Precision::Int8),
            "fp32" => Ok(Precision::Fp32),
            "fp16" => Ok(Precision::Fp16),
            _ => Err(format!("precision {s:?}: int8, fp32 or fp16")),
        }
    }
}
