//! Opus in Ogg (RFC 7845): libopus encodes 20 ms packets; the Ogg stream around them is
//! written here. Pre-skip comes from the encoder's lookahead and the last page's granule
//! position trims the padding, so decoders return exactly the input length.

use std::ffi::CStr;
use std::os::raw::c_int;

use audiopus_sys as ffi;

use super::ogg::OggWriter;
use super::EncodeError;

/// Mono speech at 32 kb/s is near-transparent for 24 kHz TTS output.
const BITRATE: i32 = 32_000;
/// Granule positions count 48 kHz samples whatever the input rate.
const GRANULE_RATE: u32 = 48_000;
/// libopus' documented ceiling for one packet.
const MAX_PACKET: usize = 4000;
/// Close a page after about a second of audio so a reader can seek page by page.
const PACKETS_PER_PAGE: usize = 50;
/// Fixed so that identical input gives identical bytes; each file holds one stream.
const STREAM_SERIAL: u32 = 0x5353_5452;

pub(super) fn encode(samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    let mut stream = OpusStream::new(sample_rate, false)?;
    let mut out = stream.push(samples)?;
    out.extend(stream.finish()?);
    Ok(out)
}

/// An Ogg Opus stream made as audio arrives. Packets are encoded as soon as a whole 20 ms
/// frame is in; pages close every [`PACKETS_PER_PAGE`] packets (the whole-file layout, so
/// that a body streamed this way has exactly the bytes of [`encode`]) or, when `eager`, at the
/// end of every push (each push's audio leaves at once, in its own page).
pub(super) struct OpusStream {
    encoder: Encoder,
    ogg: OggWriter,
    frame: usize,
    scale: u64,
    pre_skip: u16,
    lookahead: usize,
    /// Input not yet encoded (less than one frame after a push).
    pending: Vec<i16>,
    /// Packets encoded so far.
    packets: usize,
    /// Samples received so far.
    received: u64,
    /// Packets added since the last page was closed.
    unflushed: usize,
    eager: bool,
    packet: Vec<u8>,
}

impl OpusStream {
    pub(super) fn new(sample_rate: u32, eager: bool) -> Result<OpusStream, EncodeError> {
        if !matches!(sample_rate, 8_000 | 12_000 | 16_000 | 24_000 | 48_000) {
            return Err(EncodeError(format!(
                "cannot encode opus: sample rate {sample_rate} Hz is not supported \
                 (Opus takes 8000, 12000, 16000, 24000 or 48000 Hz)"
            )));
        }
        let scale = u64::from(GRANULE_RATE / sample_rate);
        let frame = (sample_rate / 50) as usize;
        let mut encoder = Encoder::new(sample_rate)?;
        encoder.ctl_set(ffi::OPUS_SET_BITRATE_REQUEST, BITRATE)?;
        let lookahead = usize::try_from(encoder.ctl_get(ffi::OPUS_GET_LOOKAHEAD_REQUEST)?)
            .map_err(|_| EncodeError("opus: negative encoder lookahead".into()))?;
        let pre_skip = u16::try_from(lookahead as u64 * scale)
            .map_err(|_| EncodeError("opus: encoder lookahead too long for pre-skip".into()))?;
        let mut ogg = OggWriter::new(STREAM_SERIAL, 4096);
        ogg.packet(&opus_head(pre_skip, sample_rate), 0);
        ogg.flush();
        ogg.packet(&opus_tags(), 0);
        ogg.flush();
        Ok(OpusStream {
            encoder,
            ogg,
            frame,
            scale,
            pre_skip,
            lookahead,
            pending: Vec::with_capacity(frame),
            packets: 0,
            received: 0,
            unflushed: 0,
            eager,
            packet: vec![0u8; MAX_PACKET],
        })
    }

    /// Encode one frame as the next packet, ending at `granule`.
    fn add_packet(&mut self, pcm: &[i16], granule: u64) -> Result<(), EncodeError> {
        // A page holds PACKETS_PER_PAGE packets; the next one opens a new page (so the last
        // page, closed by `finish`, is never empty).
        if self.unflushed == PACKETS_PER_PAGE {
            self.ogg.flush();
            self.unflushed = 0;
        }
        let len = self.encoder.encode(pcm, &mut self.packet)?;
        self.ogg.packet(&self.packet[..len], granule);
        self.packets += 1;
        self.unflushed += 1;
        Ok(())
    }

    /// Feed audio; returns the bytes of the pages this completes (the headers first).
    pub(super) fn push(&mut self, samples: &[i16]) -> Result<Vec<u8>, EncodeError> {
        self.received += samples.len() as u64;
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (self.frame - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == self.frame {
                let granule = (self.packets + 1) as u64 * self.frame as u64 * self.scale;
                let pcm = std::mem::take(&mut self.pending);
                self.add_packet(&pcm, granule)?;
                self.pending = pcm;
                self.pending.clear();
            }
        }
        if self.eager && self.unflushed > 0 {
            self.ogg.flush();
            self.unflushed = 0;
        }
        Ok(self.ogg.take())
    }

    /// End of audio: the tail padded with silence, enough frames that a decoder still yields
    /// every sample after dropping pre-skip, the last granule trimming the padding, and EOS.
    pub(super) fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        let total = self.received as usize;
        let frames = (total + self.lookahead).div_ceil(self.frame).max(1);
        let end_granule = u64::from(self.pre_skip) + total as u64 * self.scale;
        let mut pcm = std::mem::take(&mut self.pending);
        pcm.resize(self.frame, 0);
        while self.packets < frames {
            let granule = (self.packets + 1) as u64 * self.frame as u64 * self.scale;
            self.add_packet(&pcm, granule.min(end_granule))?;
            pcm.fill(0);
        }
        Ok(self.ogg.finish())
    }
}

fn opus_head(pre_skip: u16, input_rate: u32) -> [u8; 19] {
    let mut head = [0u8; 19];
    head[0..8].copy_from_slice(b"OpusHead");
    head[8] = 1; // version
    head[9] = 1; // channels
    head[10..12].copy_from_slice(&pre_skip.to_le_bytes());
    head[12..16].copy_from_slice(&input_rate.to_le_bytes());
    // output gain 0, channel mapping family 0 (mono/stereo, no table)
    head
}

fn opus_tags() -> Vec<u8> {
    // SAFETY: opus_get_version_string returns a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(ffi::opus_get_version_string()) };
    let vendor = version.to_bytes();
    let mut tags = Vec::with_capacity(16 + vendor.len() + 4);
    tags.extend_from_slice(b"OpusTags");
    tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    tags.extend_from_slice(vendor);
    tags.extend_from_slice(&0u32.to_le_bytes()); // no user comments
    tags
}

fn opus_error(what: &str, code: c_int) -> EncodeError {
    // SAFETY: opus_strerror returns a static NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(ffi::opus_strerror(code)) };
    EncodeError(format!("opus: {what}: {}", text.to_string_lossy()))
}

/// Owns one libopus encoder; destroyed on drop.
struct Encoder(*mut ffi::OpusEncoder);

// SAFETY: the encoder state is owned by this value alone and libopus keeps no thread-local
// state, so it may move between threads; every call that touches it takes `&mut self`, so a
// shared `&Encoder` can do nothing with it.
unsafe impl Send for Encoder {}
unsafe impl Sync for Encoder {}

impl Encoder {
    fn new(sample_rate: u32) -> Result<Self, EncodeError> {
        let mut error: c_int = 0;
        // SAFETY: plain constructor; the rate was checked above and `error` is a valid out-pointer.
        let st = unsafe { ffi::opus_encoder_create(sample_rate as i32, 1, ffi::OPUS_APPLICATION_AUDIO, &mut error) };
        if st.is_null() || error != ffi::OPUS_OK {
            if !st.is_null() {
                // SAFETY: `st` came from opus_encoder_create and is not used afterwards.
                unsafe { ffi::opus_encoder_destroy(st) };
            }
            return Err(opus_error("creating encoder", error));
        }
        Ok(Encoder(st))
    }

    fn ctl_set(&mut self, request: c_int, value: i32) -> Result<(), EncodeError> {
        // SAFETY: SET requests take one opus_int32 argument.
        let rc = unsafe { ffi::opus_encoder_ctl(self.0, request, value) };
        if rc == ffi::OPUS_OK {
            Ok(())
        } else {
            Err(opus_error("configuring encoder", rc))
        }
    }

    fn ctl_get(&mut self, request: c_int) -> Result<i32, EncodeError> {
        let mut value: i32 = 0;
        // SAFETY: GET requests take one opus_int32 out-pointer, valid for the call.
        let rc = unsafe { ffi::opus_encoder_ctl(self.0, request, &mut value as *mut i32) };
        if rc == ffi::OPUS_OK {
            Ok(value)
        } else {
            Err(opus_error("querying encoder", rc))
        }
    }

    /// Encode one whole frame into `out`, returning the packet length.
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, EncodeError> {
        let frame = c_int::try_from(pcm.len()).map_err(|_| EncodeError("opus: frame too long".into()))?;
        let capacity = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: `pcm` holds `frame` mono samples and `out` has `capacity` writable bytes.
        let len = unsafe { ffi::opus_encode(self.0, pcm.as_ptr(), frame, out.as_mut_ptr(), capacity) };
        usize::try_from(len).map_err(|_| opus_error("encoding", len))
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        // SAFETY: the pointer came from opus_encoder_create and is destroyed exactly once.
        unsafe { ffi::opus_encoder_destroy(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (flags, granule, first packet bytes) of each page; packets here never span pages.
    fn pages(mut data: &[u8]) -> Vec<(u8, u64, Vec<u8>)> {
        let mut out = Vec::new();
        while data.len() >= 27 {
            assert_eq!(&data[0..4], b"OggS");
            let n = usize::from(data[26]);
            let body: usize = data[27..27 + n].iter().map(|&l| usize::from(l)).sum();
            let granule = u64::from_le_bytes(data[6..14].try_into().expect("8"));
            let first = usize::from(data[27]);
            out.push((data[5], granule, data[27 + n..27 + n + first].to_vec()));
            data = &data[27 + n + body..];
        }
        assert!(data.is_empty());
        out
    }

    #[test]
    fn headers_and_final_granule() {
        let samples: Vec<i16> = (0..24_000 + 123).map(|i| ((i as f64 * 0.1).sin() * 5000.0) as i16).collect();
        let out = encode(&samples, 24_000).expect("opus");
        let pages = pages(&out);
        let (flags, granule, head) = &pages[0];
        assert_eq!(*flags, 0x02, "BOS");
        assert_eq!(*granule, 0);
        assert_eq!(&head[0..8], b"OpusHead");
        assert_eq!(head.len(), 19);
        assert_eq!((head[8], head[9]), (1, 1));
        let pre_skip = u16::from_le_bytes([head[10], head[11]]);
        assert!(pre_skip > 0 && pre_skip < 2000, "pre-skip {pre_skip}");
        assert_eq!(u32::from_le_bytes([head[12], head[13], head[14], head[15]]), 24_000);
        assert_eq!(&head[16..19], &[0, 0, 0]);
        assert_eq!(&pages[1].2[0..8], b"OpusTags");
        assert_eq!(pages[1].0, 0);
        let last = pages.last().expect("pages");
        assert_eq!(last.0, 0x04, "EOS on the last page only");
        assert_eq!(last.1, u64::from(pre_skip) + 2 * samples.len() as u64);
        for window in pages[2..].windows(2) {
            assert!(window[0].1 < window[1].1, "granules increase");
            assert_eq!(window[0].0 & 0x04, 0);
        }
    }

    #[test]
    fn empty_input_is_headers_and_one_trimmed_packet() {
        let out = encode(&[], 48_000).expect("opus");
        let pages = pages(&out);
        assert_eq!(pages.len(), 3);
        let pre_skip = u16::from_le_bytes([pages[0].2[10], pages[0].2[11]]);
        assert_eq!(pages[2].0, 0x04);
        assert_eq!(pages[2].1, u64::from(pre_skip));
    }

    #[test]
    fn rejects_rates_opus_lacks() {
        let err = encode(&[0; 100], 44_100).expect_err("44.1 kHz");
        assert!(err.0.contains("44100 Hz"), "{err}");
        assert!(encode(&[0; 100], 22_050).is_err());
    }
}
