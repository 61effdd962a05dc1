//! What the network computes for a sentence: its prosody (before the decoder) and the decoder's
//! spectra for a range of frames.

use super::*;

/// The global, per-sentence part of the synthesis: everything before the decoder.
#[derive(Debug)]
pub struct Prosody {
    pub ids: Vec<i64>,
    pub speed: f32,
    /// s_i, the predicted ln(1 + duration) per token
    pub log_durations: Vec<f32>,
    /// coarse frames (25 ms) per token
    pub durations: Vec<i64>,
    /// F, the number of fine frames (12.5 ms); the audio has F · 300 samples
    pub frames: usize,
    /// \[F\] Hz (the network's f0 output)
    pub f0: Tensor,
    /// \[F\] the internal noise-level channel n
    pub n: Tensor,
    /// decoder input [F, 130] (time-major)
    pub(super) z: Tensor,
    /// STFT of the pulse train of the whole sentence, (re, im) [F, 601]
    pub(super) pulse: (Tensor, Tensor),
    /// the int8 path's m.dec_in share of each token ([`crate::kernels::DecIn::token_taps`])
    pub(super) dec_taps: Option<Tensor>,
    /// the int8 decoder's rows kept for this sentence's next chunk
    pub(super) dec: RefCell<Option<DecState>>,
}

impl Prosody {
    /// Samples of audio for the whole sentence.
    pub fn samples(&self) -> usize {
        self.frames * SAMPLES_PER_FRAME
    }

    /// The token of each fine frame (token i spans 2 d_i frames).
    pub(super) fn fine_tokens(&self) -> Vec<usize> {
        self.durations.iter().enumerate().flat_map(|(i, &d)| std::iter::repeat_n(i, 2 * d as usize)).collect()
    }

    /// First fine frame of each token (F-based timing: token i spans frames
    /// `starts[i] .. starts[i] + 2 d_i`).
    pub fn token_starts(&self) -> Vec<usize> {
        let mut acc = 0usize;
        self.durations
            .iter()
            .map(|&d| {
                let s = acc;
                acc += 2 * d as usize;
                s
            })
            .collect()
    }
}

/// Network outputs for fine frames `start .. start + n`, each \[n, 601\] float32 (time-major), f0 \[n\].
#[derive(Debug)]
pub struct Spectra {
    pub start: usize,
    pub lh: Tensor,
    pub theta: Tensor,
    pub ln: Tensor,
    pub lr: Tensor,
    pub phi: Tensor,
    pub f0: Tensor,
}

impl Spectra {
    /// The five spectral outputs in the order lh, theta, ln, lr, phi.
    pub fn outputs(&self) -> [&Tensor; 5] {
        [&self.lh, &self.theta, &self.ln, &self.lr, &self.phi]
    }

    /// Frames a..a + n of sentence `p`, output i (in [`Spectra::outputs`] order) from `part(i)`.
    pub(super) fn from_parts(p: &Prosody, a: usize, n: i64, part: impl Fn(usize) -> Tensor) -> Spectra {
        Spectra {
            start: a,
            lh: part(0),
            theta: part(1),
            ln: part(2),
            lr: part(3),
            phi: part(4),
            f0: p.f0.narrow(0, a as i64, n),
        }
    }

    pub(super) fn frames(&self) -> SpectralFrames<'_> {
        SpectralFrames { lh: &self.lh, theta: &self.theta, ln: &self.ln, lr: &self.lr, phi: &self.phi }
    }
}
