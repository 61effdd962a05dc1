//! Branch-free transcendental functions in f32 (polynomials after Cephes and Cody and Waite),
//! for the int8 path's Rust passes (`dsp.rs`'s source and iSTFT, the LSTM cell, the Snake's sin²):
//! plain f32 operations without libm and without branches, so that loops of them vectorize and
//! give the same bits in the baseline, AVX2 and AVX-512 builds (`cpu::simd_fn!`). Checked against
//! libm in `dsp.rs`'s tests.

use std::f32::consts::{FRAC_PI_2, FRAC_PI_4, PI};

/// sin(r) for |r| ≤ π/2 (a little beyond is fine): its Taylor series to r¹¹ (error below 6e-8).
/// Odd to the bit.
#[inline(always)]
pub(super) fn sin_poly(r: f32) -> f32 {
    let r2 = r * r;
    let p =
        -1.0 / 6.0 + r2 * (1.0 / 120.0 + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362_880.0 + r2 * (-1.0 / 39_916_800.0))));
    r + r * r2 * p
}

/// cos(r) for |r| ≤ 1: its Taylor series to r¹⁰ (error below 3e-9).
#[inline(always)]
pub(super) fn cos_poly(r: f32) -> f32 {
    let r2 = r * r;
    1.0 + r2 * (-0.5 + r2 * (1.0 / 24.0 + r2 * (-1.0 / 720.0 + r2 * (1.0 / 40_320.0 + r2 * (-1.0 / 3_628_800.0)))))
}

/// sin(x): x = kπ + r in f64 (π in three parts, k·π's first part exact for |k| < 2²⁸, r within
/// ~1e-14), then [`sin_poly`] of r in f32 with the sign of (−1)ᵏ. The source's phases grow by up
/// to ~3e4 rad a second of audio, so |x| is clamped to 2²⁹ (five hours of it; ±∞ land there).
#[inline(always)]
pub(super) fn sin(x: f32) -> f32 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5·2⁵²: adding and removing it rounds to an integer
    const PI_A: f64 = PI as f64; // π's first 24 bits
    const PI_B: f64 = std::f64::consts::PI - PI_A; // the next 53 (the difference is exact)
    const PI_C: f64 = 1.224_646_799_147_353_2e-16; // π − π_f64
    let v = f64::from(x.clamp(-536_870_912.0, 536_870_912.0));
    let n = v * std::f64::consts::FRAC_1_PI + MAGIC;
    let k = n - MAGIC;
    let r = ((v - k * PI_A) - k * PI_B) - k * PI_C;
    // (−1)ᵏ on r (sin_poly is odd): k's parity is the last bit of n
    sin_poly(f64::from_bits(r.to_bits() ^ (n.to_bits() << 63)) as f32)
}

/// eˣ: x = k·ln 2 + r (ln 2 in two parts, k·ln 2's first exact), e^r by its Taylor series to r⁷
/// (|r| ≤ ln 2 / 2: relative error below 6e-9), × 2ᵏ in two factors, so that the result
/// overflows to ∞ and falls through the subnormals to 0 as eˣ does (x is clamped to
/// [−104, 89], where that has happened).
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2²³
    const LN2_A: f32 = 0.693_359_4; // 355/512
    const LN2_B: f32 = -2.121_944_4e-4;
    let x = x.clamp(-104.0, 89.0);
    let n = x * std::f32::consts::LOG2_E + MAGIC;
    let k = n - MAGIC;
    let r = (x - k * LN2_A) - k * LN2_B;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // k as an integer: n and MAGIC share their exponent
    let ki = (n.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let (k1, k2) = (ki >> 1, ki - (ki >> 1));
    let pow2 = |e: i32| f32::from_bits((e.wrapping_add(127) << 23) as u32);
    p * pow2(k1) * pow2(k2)
}

/// tanh(x) as Cephes' `tanhf` computes it: x + x³·P(x²) for |x| < 0.625, else 1 − 2/(e^{2|x|} + 1)
/// with x's sign (within ~2e-7; ±1 for large |x|).
#[inline(always)]
pub(super) fn tanh(x: f32) -> f32 {
    let z = x.abs();
    let far = (1.0 - 2.0 / (exp(z + z) + 1.0)).copysign(x);
    let x2 = x * x;
    let near = ((((-5.704_988_7e-3 * x2 + 2.063_909e-2) * x2 - 5.373_971_6e-2) * x2 + 1.333_144_2e-1) * x2
        - 3.333_328e-1)
        * x2
        * x
        + x;
    if z < 0.625 {
        near
    } else {
        far
    }
}

/// atan(x) as Cephes' `atanf` computes it: |x| above tan(3π/8) as π/2 + atan(−1/|x|), above tan(π/8)
/// as π/4 + atan((|x| − 1)/(|x| + 1)), a polynomial of what is left (|t| ≤ tan(π/8)), x's sign
/// (within ~2e-7; atan(±∞) = ±π/2).
#[inline(always)]
pub(super) fn atan(x: f32) -> f32 {
    let z = x.abs();
    let (high, mid) = (z > 2.414_213_6, z > 0.414_213_57);
    let num = if high {
        -1.0
    } else if mid {
        z - 1.0
    } else {
        z
    };
    let den = if high {
        z
    } else if mid {
        z + 1.0
    } else {
        1.0
    };
    let base = if high {
        FRAC_PI_2
    } else if mid {
        FRAC_PI_4
    } else {
        0.0
    };
    let t = num / den;
    let t2 = t * t;
    let p = (((8.053_744_5e-2 * t2 - 1.387_768_6e-1) * t2 + 1.997_771_1e-1) * t2 - 3.333_295e-1) * t2 * t + t;
    (base + p).copysign(x)
}
