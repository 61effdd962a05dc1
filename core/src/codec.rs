//! Codec-token frames (docs/protocol.md §d): a 7-byte `<IHB` header (seq u32 LE,
//! n_frames u16 LE, flags u8) and `n_frames * codebooks` int16 LE codes, frame-major.

/// Bytes before the codes: seq (u32), n_frames (u16), flags (u8).
pub const HEADER_LEN: usize = 7;
/// The frame ends the utterance's codec stream.
pub const FLAG_EOS: u8 = 0x1;
/// The frame ends a segment (a sentence) of the stream.
pub const FLAG_SEGMENT_END: u8 = 0x2;
/// The decoder should reset its state before this frame.
pub const FLAG_RESET: u8 = 0x4;

/// Why a frame could not be packed or unpacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecError(pub &'static str);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Pack one frame. `codes` holds whole frames of `codebooks` codes each. `seq` is
/// masked to 32 bits as the reference's packer does.
pub fn pack_frame(seq: u64, codes: &[i32], codebooks: usize, flags: u8) -> Result<Vec<u8>, CodecError> {
    if codebooks == 0 || !codes.len().is_multiple_of(codebooks) {
        return Err(CodecError("codes must be whole frames of `codebooks` values"));
    }
    let n_frames =
        u16::try_from(codes.len() / codebooks).map_err(|_| CodecError("too many frames for one packet (max 65535)"))?;
    let mut out = Vec::with_capacity(HEADER_LEN + codes.len() * 2);
    out.extend_from_slice(&((seq & 0xFFFF_FFFF) as u32).to_le_bytes());
    out.extend_from_slice(&n_frames.to_le_bytes());
    out.push(flags);
    for &code in codes {
        let code = i16::try_from(code).ok().filter(|c| *c >= 0).ok_or(CodecError("codec ids must fit in int16"))?;
        out.extend_from_slice(&code.to_le_bytes());
    }
    Ok(out)
}

/// An unpacked frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecFrame {
    /// The packet's sequence number within its utterance, from 0.
    pub seq: u32,
    /// Frames in the packet.
    pub n_frames: u16,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// `n_frames * codebooks` codes, frame-major.
    pub codes: Vec<i16>,
}

/// Read one packed frame of `codebooks` codes per frame; the inverse of [`pack_frame`].
pub fn unpack_frame(buf: &[u8], codebooks: usize) -> Result<CodecFrame, CodecError> {
    if buf.len() < HEADER_LEN {
        return Err(CodecError("codec frame shorter than its 7-byte header"));
    }
    let seq = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let n_frames = u16::from_le_bytes([buf[4], buf[5]]);
    let flags = buf[6];
    let body = &buf[HEADER_LEN..];
    if body.len() != usize::from(n_frames) * codebooks * 2 {
        return Err(CodecError("codec frame body length does not match n_frames * codebooks"));
    }
    let codes = body.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
    Ok(CodecFrame { seq, n_frames, flags, codes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_with_flags() {
        let codes: Vec<i32> = (0..25 * 16).map(|i| (i * 7919) % 2048).collect();
        let buf = pack_frame(7, &codes, 16, FLAG_SEGMENT_END).unwrap();
        assert_eq!(buf.len(), 7 + 25 * 16 * 2);
        let f = unpack_frame(&buf, 16).unwrap();
        assert_eq!((f.seq, f.n_frames, f.flags), (7, 25, FLAG_SEGMENT_END));
        assert_eq!(f.codes.iter().map(|&c| i32::from(c)).collect::<Vec<_>>(), codes);
    }

    #[test]
    fn empty_eos_and_seq_wraps() {
        let f = unpack_frame(&pack_frame(8, &[], 16, FLAG_EOS).unwrap(), 16).unwrap();
        assert_eq!((f.seq, f.n_frames, f.flags), (8, 0, FLAG_EOS));
        let f = unpack_frame(&pack_frame((1 << 32) + 5, &[0; 16], 16, FLAG_RESET).unwrap(), 16).unwrap();
        assert_eq!((f.seq, f.n_frames, f.flags), (5, 1, FLAG_RESET));
    }

    #[test]
    fn rejects_bad_values_and_buffers() {
        assert!(pack_frame(0, &[40000; 16], 16, 0).is_err());
        assert!(pack_frame(0, &[-1; 16], 16, 0).is_err());
        assert!(pack_frame(0, &[1; 15], 16, 0).is_err());
        assert!(unpack_frame(&[0, 0], 16).is_err());
        let buf = pack_frame(1, &[3; 32], 16, 0).unwrap();
        assert!(unpack_frame(&buf[..buf.len() - 2], 16).is_err());
    }
}
