//! A small FLAC encoder: 16-bit mono, fixed 4096-sample blocks, each subframe CONSTANT,
//! VERBATIM or FIXED (orders 0..=4) with partitioned Rice residuals. No LPC: speech
//! compresses to roughly 50-60 % with fixed predictors, and the code stays short.

use super::md5::Md5;
use super::EncodeError;

const BLOCK_SIZE: usize = 4096;
const MAX_FIXED_ORDER: usize = 4;
const MAX_PARTITION_ORDER: u32 = 6;
const BITS_PER_SAMPLE: u32 = 16;
/// FLAC's own ceiling for the 20-bit sample-rate field.
const MAX_SAMPLE_RATE: u32 = 655_350;

pub(super) fn encode(samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    if sample_rate > MAX_SAMPLE_RATE {
        return Err(EncodeError(format!(
            "cannot encode flac: sample rate {sample_rate} Hz is above FLAC's {MAX_SAMPLE_RATE} Hz"
        )));
    }
    let total = samples.len() as u64;
    if total >= 1 << 36 {
        return Err(EncodeError("cannot encode flac: too many samples".into()));
    }

    let mut out = Vec::with_capacity(42 + samples.len());
    out.extend_from_slice(b"fLaC");
    // Metadata block header: last-block flag, type 0 (STREAMINFO), 34 bytes.
    out.extend_from_slice(&[0x80, 0, 0, 34]);
    let streaminfo_at = out.len();
    out.extend_from_slice(&[0; 34]);

    let sr_code = sample_rate_code(sample_rate);
    let mut scratch = Scratch::default();
    let (mut min_frame, mut max_frame) = (u32::MAX, 0u32);
    for (index, block) in samples.chunks(BLOCK_SIZE).enumerate() {
        let start = out.len();
        write_frame(&mut out, &mut scratch, index, block, sr_code)?;
        let size = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
        min_frame = min_frame.min(size);
        max_frame = max_frame.max(size);
    }
    if min_frame == u32::MAX {
        // No frames: 0 means "unknown" for both fields.
        min_frame = 0;
    }

    let mut info = [0u8; 34];
    info[0..2].copy_from_slice(&(BLOCK_SIZE as u16).to_be_bytes());
    info[2..4].copy_from_slice(&(BLOCK_SIZE as u16).to_be_bytes());
    info[4..7].copy_from_slice(&min_frame.min(0xff_ffff).to_be_bytes()[1..]);
    info[7..10].copy_from_slice(&max_frame.min(0xff_ffff).to_be_bytes()[1..]);
    // rate (20 bits), channels - 1 (3 bits, 0 for mono), bits - 1 (5), total samples (36)
    let packed: u64 = (u64::from(sample_rate) << 44) | (u64::from(BITS_PER_SAMPLE - 1) << 36) | total;
    info[10..18].copy_from_slice(&packed.to_be_bytes());
    info[18..34].copy_from_slice(&audio_md5(samples));
    out[streaminfo_at..streaminfo_at + 34].copy_from_slice(&info);
    Ok(out)
}

/// FLAC made as audio arrives: STREAMINFO first with the total length, frame sizes and MD5
/// left "unknown" (0, as the format allows for streams), then a frame for each whole
/// 4096-sample block as it fills; `finish` writes the last, shorter block.
pub(super) struct FlacStream {
    sample_rate: u32,
    sr_code: u8,
    scratch: Scratch,
    pending: Vec<i16>,
    frames: usize,
    started: bool,
    received: u64,
}

impl FlacStream {
    pub(super) fn new(sample_rate: u32) -> Result<FlacStream, EncodeError> {
        if sample_rate > MAX_SAMPLE_RATE {
            return Err(EncodeError(format!(
                "cannot encode flac: sample rate {sample_rate} Hz is above FLAC's {MAX_SAMPLE_RATE} Hz"
            )));
        }
        Ok(FlacStream {
            sample_rate,
            sr_code: sample_rate_code(sample_rate),
            scratch: Scratch::default(),
            pending: Vec::with_capacity(BLOCK_SIZE),
            frames: 0,
            started: false,
            received: 0,
        })
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        out.extend_from_slice(b"fLaC");
        out.extend_from_slice(&[0x80, 0, 0, 34]);
        let mut info = [0u8; 34];
        info[0..2].copy_from_slice(&(BLOCK_SIZE as u16).to_be_bytes());
        info[2..4].copy_from_slice(&(BLOCK_SIZE as u16).to_be_bytes());
        // Frame sizes, total samples and MD5 stay 0: unknown.
        let packed: u64 = (u64::from(self.sample_rate) << 44) | (u64::from(BITS_PER_SAMPLE - 1) << 36);
        info[10..18].copy_from_slice(&packed.to_be_bytes());
        out.extend_from_slice(&info);
    }

    pub(super) fn push(&mut self, samples: &[i16]) -> Result<Vec<u8>, EncodeError> {
        self.received += samples.len() as u64;
        if self.received >= 1 << 36 {
            return Err(EncodeError("cannot encode flac: too many samples".into()));
        }
        let mut out = Vec::with_capacity(samples.len() + 64);
        self.header(&mut out);
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (BLOCK_SIZE - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == BLOCK_SIZE {
                write_frame(&mut out, &mut self.scratch, self.frames, &self.pending, self.sr_code)?;
                self.frames += 1;
                self.pending.clear();
            }
        }
        Ok(out)
    }

    pub(super) fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        self.header(&mut out);
        if !self.pending.is_empty() {
            write_frame(&mut out, &mut self.scratch, self.frames, &self.pending, self.sr_code)?;
        }
        Ok(out)
    }
}

/// MD5 of the samples as interleaved signed little-endian bytes, as STREAMINFO defines it.
fn audio_md5(samples: &[i16]) -> [u8; 16] {
    let mut md5 = Md5::new();
    let mut bytes = [0u8; 2048];
    for chunk in samples.chunks(1024) {
        for (dst, s) in bytes.chunks_exact_mut(2).zip(chunk) {
            dst.copy_from_slice(&s.to_le_bytes());
        }
        md5.update(&bytes[..chunk.len() * 2]);
    }
    md5.finish()
}

/// Frame-header sample-rate code; 0 means "as in STREAMINFO".
fn sample_rate_code(rate: u32) -> u8 {
    match rate {
        88_200 => 1,
        176_400 => 2,
        192_000 => 3,
        8_000 => 4,
        16_000 => 5,
        22_050 => 6,
        24_000 => 7,
        32_000 => 8,
        44_100 => 9,
        48_000 => 10,
        96_000 => 11,
        _ => 0,
    }
}

/// Buffers reused across blocks so the encoder allocates per stream, not per block.
#[derive(Default)]
struct Scratch {
    residual: Vec<i32>,
    best_residual: Vec<i32>,
    partition_sums: Vec<u64>,
}

fn write_frame(
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
    index: usize,
    block: &[i16],
    sr_code: u8,
) -> Result<(), EncodeError> {
    let frame_start = out.len();
    let n = block.len();
    let bs_code: u8 = match n {
        BLOCK_SIZE => 12,
        1..=256 => 6,
        _ => 7,
    };
    out.extend_from_slice(&[0xff, 0xf8, (bs_code << 4) | sr_code, 0x08]);
    write_utf8_number(out, index)?;
    match bs_code {
        6 => out.push((n - 1) as u8),
        7 => out.extend_from_slice(&((n - 1) as u16).to_be_bytes()),
        _ => {}
    }
    let crc = crc8(&out[frame_start..]);
    out.push(crc);

    {
        let mut bits = BitWriter::new(out);
        write_subframe(&mut bits, scratch, block);
        bits.align();
    }

    let crc = crc16(&out[frame_start..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The frame number in FLAC's extended UTF-8 coding (31 bits at most for fixed blocking).
fn write_utf8_number(out: &mut Vec<u8>, value: usize) -> Result<(), EncodeError> {
    let v = u32::try_from(value)
        .ok()
        .filter(|&v| v < 1 << 31)
        .ok_or_else(|| EncodeError("cannot encode flac: too many frames".into()))?;
    if v < 0x80 {
        out.push(v as u8);
        return Ok(());
    }
    let extra = match v {
        0..=0x7ff => 1,
        0x800..=0xffff => 2,
        0x1_0000..=0x1f_ffff => 3,
        0x20_0000..=0x3ff_ffff => 4,
        _ => 5,
    };
    let lead_mask: u8 = !(0xffu8 >> (extra + 1));
    out.push(lead_mask | (v >> (6 * extra)) as u8);
    for i in (0..extra).rev() {
        out.push(0x80 | ((v >> (6 * i)) & 0x3f) as u8);
    }
    Ok(())
}

fn write_subframe(bits: &mut BitWriter<'_>, scratch: &mut Scratch, block: &[i16]) {
    let n = block.len();
    let first = block.first().copied().unwrap_or(0);
    if block.iter().all(|&s| s == first) {
        bits.write(0x00, 8); // CONSTANT
        bits.write(u64::from(first as u16), BITS_PER_SAMPLE);
        return;
    }

    let verbatim_bits = n as u64 * u64::from(BITS_PER_SAMPLE);
    let mut best: Option<(usize, RicePlan, u64)> = None;
    for order in 0..=MAX_FIXED_ORDER.min(n - 1) {
        fixed_residual(block, order, &mut scratch.residual);
        let plan = plan_rice(&scratch.residual, n, order, &mut scratch.partition_sums);
        let cost = plan.bits + order as u64 * u64::from(BITS_PER_SAMPLE);
        if best.as_ref().is_none_or(|(_, _, c)| cost < *c) {
            std::mem::swap(&mut scratch.residual, &mut scratch.best_residual);
            best = Some((order, plan, cost));
        }
    }

    match best {
        Some((order, plan, cost)) if cost < verbatim_bits => {
            bits.write(0x10 | ((order as u64) << 1), 8); // FIXED, order in the low type bits
            for &s in &block[..order] {
                bits.write(u64::from(s as u16), BITS_PER_SAMPLE);
            }
            write_residual(bits, &scratch.best_residual, &plan, n, order);
        }
        _ => {
            bits.write(0x02, 8); // VERBATIM
            for &s in block {
                bits.write(u64::from(s as u16), BITS_PER_SAMPLE);
            }
        }
    }
}

/// Residual of FLAC's fixed polynomial predictor of `order`, for samples `order..`.
fn fixed_residual(block: &[i16], order: usize, residual: &mut Vec<i32>) {
    residual.clear();
    let s = |i: usize| i32::from(block[i]);
    match order {
        0 => residual.extend(block.iter().map(|&x| i32::from(x))),
        1 => residual.extend((1..block.len()).map(|i| s(i) - s(i - 1))),
        2 => residual.extend((2..block.len()).map(|i| s(i) - 2 * s(i - 1) + s(i - 2))),
        3 => residual.extend((3..block.len()).map(|i| s(i) - 3 * s(i - 1) + 3 * s(i - 2) - s(i - 3))),
        _ => residual.extend((4..block.len()).map(|i| s(i) - 4 * s(i - 1) + 6 * s(i - 2) - 4 * s(i - 3) + s(i - 4))),
    }
}

fn zigzag(r: i32) -> u32 {
    ((r << 1) ^ (r >> 31)) as u32
}

/// How one residual is partitioned and which Rice parameter each partition gets.
struct RicePlan {
    partition_order: u32,
    /// One parameter per partition (`1 << partition_order` of them).
    params: [u8; 1 << MAX_PARTITION_ORDER],
    /// RICE2 (5-bit parameters) when some parameter exceeds 14.
    wide: bool,
    /// Estimated size of the whole residual section in bits.
    bits: u64,
}

/// Pick the partition order and parameters that minimise the estimated size. Sums of the
/// zigzagged residual are taken once at the finest partition order and merged upwards.
fn plan_rice(residual: &[i32], n: usize, order: usize, sums: &mut Vec<u64>) -> RicePlan {
    let mut max_order = 0;
    while max_order < MAX_PARTITION_ORDER && n & ((1 << (max_order + 1)) - 1) == 0 && (n >> (max_order + 1)) > order {
        max_order += 1;
    }
    let parts = 1usize << max_order;
    let part_len = n >> max_order;
    sums.clear();
    sums.resize(parts, 0);
    // Partition 0 is shorter by `order` samples (the warm-up is not in the residual).
    let mut at = 0;
    for (p, sum) in sums.iter_mut().enumerate() {
        let len = if p == 0 { part_len - order } else { part_len };
        *sum = residual[at..at + len].iter().map(|&r| u64::from(zigzag(r))).sum();
        at += len;
    }

    let mut best = RicePlan { partition_order: 0, params: [0; 1 << MAX_PARTITION_ORDER], wide: false, bits: u64::MAX };
    let mut level = max_order;
    loop {
        let parts = 1usize << level;
        let part_len = n >> level;
        let mut params = [0u8; 1 << MAX_PARTITION_ORDER];
        let mut data_bits = 0u64;
        for (p, &sum) in sums[..parts].iter().enumerate() {
            let len = (if p == 0 { part_len - order } else { part_len }) as u64;
            let (k, cost) = best_rice_param(sum, len);
            params[p] = k;
            data_bits += cost;
        }
        let wide = params[..parts].iter().any(|&k| k > 14);
        let param_bits = if wide { 5 } else { 4 };
        let bits = 2 + 4 + parts as u64 * param_bits + data_bits;
        if bits < best.bits {
            best = RicePlan { partition_order: level, params, wide, bits };
        }
        if level == 0 {
            break;
        }
        // Merge neighbours for the next coarser level.
        for p in 0..parts / 2 {
            sums[p] = sums[2 * p] + sums[2 * p + 1];
        }
        level -= 1;
    }
    best
}

/// Rice parameter for `len` values summing to `sum`, with the estimated cost in bits
/// (`len * (k + 1) + sum >> k`, slightly optimistic but good enough to choose with).
fn best_rice_param(sum: u64, len: u64) -> (u8, u64) {
    if len == 0 {
        return (0, 0);
    }
    let mean = sum / len;
    let guess = if mean == 0 { 0 } else { 63 - mean.leading_zeros() };
    let mut best = (0u8, u64::MAX);
    for k in guess.saturating_sub(1)..=(guess + 1).min(30) {
        let cost = len * u64::from(k + 1) + (sum >> k);
        if cost < best.1 {
            best = (k as u8, cost);
        }
    }
    best
}

fn write_residual(bits: &mut BitWriter<'_>, residual: &[i32], plan: &RicePlan, n: usize, order: usize) {
    bits.write(u64::from(plan.wide), 2);
    bits.write(u64::from(plan.partition_order), 4);
    let param_bits = if plan.wide { 5 } else { 4 };
    let part_len = n >> plan.partition_order;
    let mut at = 0;
    for (p, &k) in plan.params[..1 << plan.partition_order].iter().enumerate() {
        let len = if p == 0 { part_len - order } else { part_len };
        bits.write(u64::from(k), param_bits);
        for &r in &residual[at..at + len] {
            bits.write_rice(zigzag(r), u32::from(k));
        }
        at += len;
    }
}

/// MSB-first bit writer appending to a byte vector.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    pending: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter { out, acc: 0, pending: 0 }
    }

    /// Append the low `count` (at most 32) bits of `value`.
    fn write(&mut self, value: u64, count: u32) {
        debug_assert!(count <= 32);
        self.acc = (self.acc << count) | (value & ((1u64 << count) - 1));
        self.pending += count;
        while self.pending >= 8 {
            self.pending -= 8;
            self.out.push((self.acc >> self.pending) as u8);
        }
    }

    /// Rice code: the quotient in unary (zeros closed by a one), then `k` low bits.
    fn write_rice(&mut self, u: u32, k: u32) {
        let mut q = u >> k;
        let low = u64::from(u) & ((1u64 << k) - 1);
        if q + 1 + k <= 32 {
            self.write((1u64 << k) | low, q + 1 + k);
            return;
        }
        while q >= 32 {
            self.write(0, 32);
            q -= 32;
        }
        self.write(1, q + 1);
        self.write(low, k);
    }

    fn align(&mut self) {
        if self.pending > 0 {
            self.write(0, 8 - self.pending);
        }
    }
}

const fn crc8_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u8;
        let mut b = 0;
        while b < 8 {
            c = if c & 0x80 != 0 { (c << 1) ^ 0x07 } else { c << 1 };
            b += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut b = 0;
        while b < 8 {
            c = if c & 0x8000 != 0 { (c << 1) ^ 0x8005 } else { c << 1 };
            b += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC8: [u8; 256] = crc8_table();
static CRC16: [u16; 256] = crc16_table();

/// CRC-8, polynomial x^8 + x^2 + x + 1, initial 0 (frame header).
fn crc8(data: &[u8]) -> u8 {
    data.iter().fold(0u8, |c, &b| CRC8[usize::from(c ^ b)])
}

/// CRC-16, polynomial x^16 + x^15 + x^2 + 1, initial 0 (whole frame).
fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |c, &b| (c << 8) ^ CRC16[usize::from(((c >> 8) as u8) ^ b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streaminfo(out: &[u8]) -> (u16, u16, u32, u32, u32, u8, u8, u64) {
        assert_eq!(&out[0..4], b"fLaC");
        assert_eq!(out[4], 0x80, "STREAMINFO, last metadata block");
        assert_eq!(&out[5..8], &[0, 0, 34]);
        let b = &out[8..42];
        let packed = u64::from_be_bytes(b[10..18].try_into().expect("8 bytes"));
        (
            u16::from_be_bytes([b[0], b[1]]),
            u16::from_be_bytes([b[2], b[3]]),
            u32::from_be_bytes([0, b[4], b[5], b[6]]),
            u32::from_be_bytes([0, b[7], b[8], b[9]]),
            (packed >> 44) as u32,
            ((packed >> 41) & 7) as u8 + 1,
            ((packed >> 36) & 31) as u8 + 1,
            packed & ((1 << 36) - 1),
        )
    }

    #[test]
    fn streaminfo_fields() {
        let samples: Vec<i16> = (0..10_000).map(|i| ((i * 37) % 2000 - 1000) as i16).collect();
        let out = encode(&samples, 24_000).expect("flac");
        let (min_bs, max_bs, min_fs, max_fs, rate, channels, bps, total) = streaminfo(&out);
        assert_eq!((min_bs, max_bs), (4096, 4096));
        assert!(min_fs > 0 && min_fs <= max_fs, "{min_fs} {max_fs}");
        assert_eq!(rate, 24_000);
        assert_eq!(channels, 1);
        assert_eq!(bps, 16);
        assert_eq!(total, 10_000);
        assert_eq!(&out[26..42], &audio_md5(&samples));
        // First frame header right after STREAMINFO: sync, 4096 block, 24 kHz, mono 16-bit.
        assert_eq!(&out[42..47], &[0xff, 0xf8, 0xc7, 0x08, 0x00]);
        assert_eq!(out[47], crc8(&out[42..47]));
    }

    #[test]
    fn empty_is_streaminfo_only() {
        let out = encode(&[], 44_100).expect("flac");
        assert_eq!(out.len(), 42);
        let (.., rate, _, _, total) = streaminfo(&out);
        assert_eq!((rate, total), (44_100, 0));
        assert_eq!(&out[26..42], &audio_md5(&[]));
    }

    #[test]
    fn rejects_rates_flac_cannot_store() {
        assert!(encode(&[1, 2], 700_000).is_err());
    }

    #[test]
    fn crc_check_values() {
        // Standard check values for "123456789".
        assert_eq!(crc8(b"123456789"), 0xf4);
        assert_eq!(crc16(b"123456789"), 0xfee8);
    }

    #[test]
    fn utf8_frame_numbers() {
        let enc = |v| {
            let mut out = Vec::new();
            write_utf8_number(&mut out, v).expect("fits");
            out
        };
        assert_eq!(enc(0), vec![0x00]);
        assert_eq!(enc(0x7f), vec![0x7f]);
        assert_eq!(enc(0x80), vec![0xc2, 0x80]);
        assert_eq!(enc(0x7ff), vec![0xdf, 0xbf]);
        assert_eq!(enc(0x800), vec![0xe0, 0xa0, 0x80]);
        assert_eq!(enc(0x10000), vec![0xf0, 0x90, 0x80, 0x80]);
    }

    #[test]
    fn rice_bits() {
        let mut out = Vec::new();
        {
            let mut w = BitWriter::new(&mut out);
            w.write_rice(5, 1); // q=2 -> 001, low 1 -> 0011
            w.write_rice(0, 0); // 1
            w.write_rice(40, 0); // 40 zeros then 1
            w.align();
        }
        // 0011 1, 40 zeros, 1, two bits of padding
        assert_eq!(out, vec![0b0011_1000u8, 0, 0, 0, 0, 0b0000_0100]);
    }

    #[test]
    fn compresses_smooth_signals_and_falls_back_to_verbatim_on_noise() {
        let smooth: Vec<i16> = (0..24_000).map(|i| ((i as f64 * 0.05).sin() * 8000.0) as i16).collect();
        let out = encode(&smooth, 24_000).expect("flac");
        assert!(out.len() < smooth.len(), "{} bytes", out.len());

        // Pseudo-random full-scale noise cannot be predicted: verbatim bounds the size.
        let mut x = 0x1234_5678u32;
        let noise: Vec<i16> = (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as i16
            })
            .collect();
        let out = encode(&noise, 24_000).expect("flac");
        assert!(out.len() <= 42 + 2 * (8192 * 2 + 16), "{} bytes", out.len());
    }
}
