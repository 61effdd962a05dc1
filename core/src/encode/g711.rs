//! G.711 companding (ITU-T G.711): μ-law (North America, Japan) and A-law (elsewhere), one byte
//! per sample, the telephone network's 8 kHz audio. Written from the standard's segment tables:
//! eight segments of sixteen steps, the step doubling from one segment to the next.

/// μ-law: 14-bit magnitude plus a bias of 33, segment = position of the top bit, all bits
/// inverted on the wire.
fn ulaw(sample: i16) -> u8 {
    const BIAS: i32 = 0x84; // 33 at 14-bit scale, shifted to 16-bit
    const CLIP: i32 = 32_635;
    let s = sample as i32;
    let sign = if s < 0 { 0x80 } else { 0x00 };
    let magnitude = s.unsigned_abs().min(CLIP as u32) as i32 + BIAS;
    // Segment: how far the top bit sits above bit 7.
    let segment = (31 - (magnitude as u32).leading_zeros()) as i32 - 7;
    let mantissa = (magnitude >> (segment + 3)) & 0x0f;
    !(sign | (segment << 4) | mantissa) as u8
}

/// A-law: 13-bit magnitude, segment 0 and 1 share a step, even bits inverted on the wire (0x55).
fn alaw(sample: i16) -> u8 {
    let s = sample as i32;
    // The sign bit is set for positive values in A-law.
    let (sign, magnitude) = if s >= 0 { (0x80, s) } else { (0x00, (-s - 1).min(32_767)) };
    let magnitude = magnitude >> 3; // 13-bit
    let code = if magnitude < 32 {
        magnitude >> 1
    } else {
        let segment = (31 - (magnitude as u32).leading_zeros()) as i32 - 4;
        (segment << 4) | ((magnitude >> segment) & 0x0f)
    };
    ((sign | code) ^ 0x55) as u8
}

/// Every sample to μ-law bytes.
pub(super) fn encode_ulaw(samples: &[i16]) -> Vec<u8> {
    samples.iter().map(|&s| ulaw(s)).collect()
}

/// Every sample to A-law bytes.
pub(super) fn encode_alaw(samples: &[i16]) -> Vec<u8> {
    samples.iter().map(|&s| alaw(s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard's decoders, for the round trip (the encode-decode test against ffmpeg is in
    /// core/tests/encode_decode.rs).
    fn ulaw_decode(code: u8) -> i32 {
        let c = !code;
        let segment = ((c >> 4) & 0x07) as i32;
        let magnitude = ((((c & 0x0f) as i32) << 3) + 0x84) << segment;
        let value = magnitude - 0x84;
        if c & 0x80 != 0 {
            -value
        } else {
            value
        }
    }

    fn alaw_decode(code: u8) -> i32 {
        let c = code ^ 0x55;
        let segment = ((c >> 4) & 0x07) as i32;
        let mantissa = (c & 0x0f) as i32;
        let magnitude = if segment == 0 { (mantissa << 4) + 8 } else { ((mantissa << 4) + 0x108) << (segment - 1) };
        if c & 0x80 != 0 {
            magnitude
        } else {
            -magnitude
        }
    }

    #[test]
    fn known_codes() {
        // Silence and the extremes, as the standard's tables give them.
        assert_eq!(ulaw(0), 0xff);
        assert_eq!(ulaw(-1), 0x7f);
        assert_eq!(ulaw(i16::MAX), 0x80);
        assert_eq!(ulaw(i16::MIN), 0x00);
        assert_eq!(alaw(0), 0xd5);
        assert_eq!(alaw(-1), 0x55);
        assert_eq!(alaw(i16::MAX), 0xaa);
        assert_eq!(alaw(i16::MIN), 0x2a);
    }

    #[test]
    fn every_sample_round_trips_within_its_step() {
        for s in i16::MIN..=i16::MAX {
            let x = s as i32;
            let u = ulaw_decode(ulaw(s));
            // μ-law's step at this magnitude is 2^(segment+3); the error is at most one step
            // (half a step plus the clip at the top).
            let step_u = 8 << ((x.unsigned_abs().min(32_635) + 0x84).ilog2() - 7);
            assert!((u - x).abs() <= step_u.max(x.abs() - 32_635), "ulaw {s} -> {u}");
            let a = alaw_decode(alaw(s));
            let step_a = if x.abs() < 512 { 16 } else { 16 << ((x.unsigned_abs() >> 3).ilog2() - 5) };
            assert!((a - x).abs() <= step_a, "alaw {s} -> {a}");
        }
    }

    #[test]
    fn monotonic() {
        let mut last_u = ulaw_decode(ulaw(i16::MIN));
        let mut last_a = alaw_decode(alaw(i16::MIN));
        for s in i16::MIN + 1..=i16::MAX {
            let (u, a) = (ulaw_decode(ulaw(s)), alaw_decode(alaw(s)));
            assert!(u >= last_u && a >= last_a, "not monotonic at {s}");
            (last_u, last_a) = (u, a);
        }
    }
}
