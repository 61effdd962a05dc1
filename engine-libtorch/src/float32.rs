//! Float32 arithmetic that the CPU loops share (the DSP's, the noise generator's and the int8
//! kernels'): rounding and integer conversion through the 1.5 · 2^23 trick, ln 2 in two parts,
//! polynomials in Estrin's form and e^x. All `#[inline(always)]` and written element by element,
//! so that the `cpu::simd_fn!` loops that call them vectorize them, with the same bits on every
//! level.

/// Round half to even for |v| < 2^22 (adding and removing 1.5 · 2^23 leaves no fraction bits);
/// unlike `round_ties_even` it vectorizes without SSE4.1.
#[inline(always)]
pub(crate) fn round_even(v: f32) -> f32 {
    const M: f32 = 12_582_912.0;
    (v + M) - M
}

/// An integer-valued float with |v| < 2^22 as an integer, through its bits (vectorizes, unlike
/// the saturating `as` cast).
#[inline(always)]
pub(crate) fn to_int(v: f32) -> i32 {
    const M: f32 = 12_582_912.0;
    (v + M).to_bits() as i32 - M.to_bits() as i32
}

/// Evaluates Σ c[i]·x^i in Estrin's form: the pairs c[2i] + c[2i+1]·x side by side, then Horner
/// over them in x², fused multiply-adds (exact on every level). For six coefficients that is
/// three steps deep instead of Horner's six: the loops that use it wait on these chains
/// (`spectrum_bins` capped to AVX2 on a Zen 4: 6.9 → 6.5 ns per bin).
#[inline(always)]
pub(crate) fn poly(x: f32, c: &[f32]) -> f32 {
    let x2 = x * x;
    c.chunks(2).rev().fold(0.0, |acc: f32, p| acc.mul_add(x2, if p.len() == 2 { p[1].mul_add(x, p[0]) } else { p[0] }))
}

/// 1/n! for n = 2..=7 (the Taylor coefficients of e^x that [`exp`] sums by [`poly`]).
const INV_FACT: [f32; 6] = [1.0 / 2.0, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];

/// ln 2 in two parts: the first with few significant bits, so n·LN2_HI is exact for |n| < 2^8.
#[allow(clippy::excessive_precision)] // an exact binary value, written in full
pub(crate) const LN2_HI: f32 = 0.693_359_375;
pub(crate) const LN2_LO: f32 = (std::f64::consts::LN_2 - 0.693_359_375) as f32;

/// e^x in float32 for x <= 88: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor series to
/// r^7 (remainder < 5e-9 relative), 2^n from the exponent bits; below −87 it gives e^−87 instead
/// of going subnormal.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = if x < -87.0 { -87.0 } else { x };
    let n = round_even(x * std::f32::consts::LOG2_E);
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // 1 + r + r²(1/2 + r/6 + ...): the small terms summed first
    let y = poly(r, &INV_FACT) * (r * r) + r + 1.0;
    // 2^n: n + 127 in the exponent bits
    y * f32::from_bits(((to_int(n) + 127) as u32) << 23)
}
