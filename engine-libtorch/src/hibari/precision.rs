//! The arithmetic of the Linear layers, and what the start-up probe chose.

pub use crate::precision::Precision;

/// What [`super::Hibari::set_fastest_precision`] measured and chose.
#[derive(Clone, Copy, Debug)]
pub struct PrecisionChoice {
    pub precision: Precision,
    /// The int8 kernels' level ([`crate::cpu::level`]).
    pub level: crate::cpu::Level,
    /// Best time of the probe (one decoder block on 128 frames) in each precision; None where
    /// not measured (CUDA: fp32 without measuring).
    pub int8_s: Option<f64>,
    pub fp32_s: Option<f64>,
}
