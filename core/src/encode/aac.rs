//! AAC-LC in ADTS through FFmpeg's native AAC encoder (libavcodec, LGPL-2.1+), loaded when
//! the first `aac` reply is made: the binary starts and serves every other format on a machine
//! without libavcodec, and `aac` is then refused saying what to install.
//!
//! libavcodec's structs change layout between its major versions (59, 60 and 61 are on users'
//! machines), so nothing here reads or writes a field past the prefixes that every one of them
//! shares (AVFrame's `data`, `nb_samples`, `format`; AVPacket's `data`, `size`): the contexts
//! are set through the AVOptions API, the sample format (which has no AVOption) is copied from
//! the parameters of libavcodec's own AAC decoder, and the one frame we fill is made by
//! libavcodec too (a `pcm_f32le` decoder decodes a block of silence into a frame that carries
//! the right rate and channel layout; we overwrite its samples).
//!
//! The encoder takes 1024-sample blocks (the input is padded with silence to a whole block at
//! the end) and holds one block back for look-ahead; its first packet is its priming, 1024
//! samples of silence before the audio, which ADTS has no field to announce. We drop that
//! packet, so a decoder's output starts on the first sample we were given and is the input's
//! length rounded up to a whole block (at most 1023 samples longer). The cost: the first
//! block (21 ms at 48 kHz, 128 ms at 8 kHz) fades in, as its overlap with the dropped packet
//! is missing; speech replies start with silence there.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use super::EncodeError;

/// Samples per AAC-LC frame.
const BLOCK: usize = 1024;
/// ADTS header without CRC.
const ADTS_HEADER_LEN: usize = 7;
/// AVSampleFormat values, stable across versions.
const AV_SAMPLE_FMT_FLT: c_int = 3;
const AV_SAMPLE_FMT_FLTP: c_int = 8;
const AV_LOG_QUIET: c_int = -8;
/// AVERROR(EAGAIN) and AVERROR_EOF.
const EAGAIN: c_int = -11;
const AVERROR_EOF: c_int = -0x2046_4F45;
/// Field offsets in the prefixes AVFrame and AVPacket have kept since FFmpeg 4 (LP64).
const FRAME_DATA0: usize = 0;
const FRAME_NB_SAMPLES: usize = 112;
const FRAME_FORMAT: usize = 116;
const PACKET_DATA: usize = 24;
const PACKET_SIZE: usize = 32;

/// The bit rate: 64 kb/s, plenty for speech; 32 kb/s below 16 kHz (AAC allows at most
/// 6 bits a sample per channel, 48 kb/s at 8 kHz).
pub(super) fn bitrate(sample_rate: u32) -> i64 {
    if sample_rate < 16_000 {
        32_000
    } else {
        64_000
    }
}

/// The libavcodec/libavutil pairs we know (FFmpeg 5.x, 6.x, 7.x).
const VERSIONS: &[(u32, u32)] = &[(61, 59), (60, 58), (59, 57)];

/// What to tell a user whose machine has no usable libavcodec.
const INSTALL: &str = "install FFmpeg's libavcodec (Debian 12: libavcodec59, Ubuntu 24.04: libavcodec60, \
                       Debian 13: libavcodec61; or the ffmpeg package)";

type Ptr = *mut c_void;

#[allow(clippy::type_complexity)]
struct Lib {
    find_encoder_by_name: unsafe extern "C" fn(*const c_char) -> *const c_void,
    find_decoder_by_name: unsafe extern "C" fn(*const c_char) -> *const c_void,
    alloc_context3: unsafe extern "C" fn(*const c_void) -> Ptr,
    free_context: unsafe extern "C" fn(*mut Ptr),
    open2: unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> c_int,
    send_frame: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    receive_packet: unsafe extern "C" fn(Ptr, Ptr) -> c_int,
    send_packet: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    receive_frame: unsafe extern "C" fn(Ptr, Ptr) -> c_int,
    packet_alloc: unsafe extern "C" fn() -> Ptr,
    packet_free: unsafe extern "C" fn(*mut Ptr),
    packet_unref: unsafe extern "C" fn(Ptr),
    new_packet: unsafe extern "C" fn(Ptr, c_int) -> c_int,
    parameters_alloc: unsafe extern "C" fn() -> Ptr,
    parameters_free: unsafe extern "C" fn(*mut Ptr),
    parameters_from_context: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    parameters_to_context: unsafe extern "C" fn(Ptr, *const c_void) -> c_int,
    frame_alloc: unsafe extern "C" fn() -> Ptr,
    frame_free: unsafe extern "C" fn(*mut Ptr),
    frame_make_writable: unsafe extern "C" fn(Ptr) -> c_int,
    opt_set: unsafe extern "C" fn(Ptr, *const c_char, *const c_char, c_int) -> c_int,
    opt_set_int: unsafe extern "C" fn(Ptr, *const c_char, i64, c_int) -> c_int,
    opt_get_int: unsafe extern "C" fn(Ptr, *const c_char, c_int, *mut i64) -> c_int,
    strerror: unsafe extern "C" fn(c_int, *mut c_char, usize) -> c_int,
}

/// libavcodec, loaded once; `Err` says why `aac` cannot be served here.
fn lib() -> Result<&'static Lib, EncodeError> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| EncodeError(e.clone()))
}

/// Whether `aac` can be encoded on this machine, and if not why (with what to install).
pub(super) fn available() -> Result<(), EncodeError> {
    lib().map(|_| ())
}

fn dlopen(name: &str) -> Option<Ptr> {
    let name = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; the handle is kept for the life of the process.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    (!handle.is_null()).then_some(handle)
}

/// The function `name` of a loaded library, as the function pointer type `F`.
///
/// # Safety
///
/// `F` must be the symbol's C signature.
unsafe fn sym<F: Copy>(handle: Ptr, name: &str, codec: u32) -> Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>(), "a function pointer");
    let cname = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: a live handle and a NUL-terminated symbol name.
    let p = unsafe { libc::dlsym(handle, cname.as_ptr()) };
    if p.is_null() {
        return Err(format!("aac: {name} missing from libavcodec {codec}; {INSTALL}"));
    }
    // SAFETY: a non-null code address of the size of `F`, which the caller vouches for.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn load() -> Result<Lib, String> {
    let mut tried = Vec::new();
    for &(codec, util) in VERSIONS {
        let (codec_so, util_so) = (format!("libavcodec.so.{codec}"), format!("libavutil.so.{util}"));
        tried.push(codec_so.clone());
        let (Some(c), Some(u)) = (dlopen(&codec_so), dlopen(&util_so)) else { continue };
        // SAFETY: each symbol has the C signature declared in FFmpeg's public headers for
        // these major versions, which the field's type repeats.
        let lib = unsafe {
            macro_rules! f {
                ($h:expr, $name:literal) => {
                    sym($h, $name, codec)?
                };
            }
            let version: unsafe extern "C" fn() -> u32 = f!(c, "avcodec_version");
            let util_version: unsafe extern "C" fn() -> u32 = f!(u, "avutil_version");
            if version() >> 16 != codec || util_version() >> 16 != util {
                return Err(format!(
                    "aac: {codec_so} reports version {}.{}, {util_so} {}.{}; {INSTALL}",
                    version() >> 16,
                    (version() >> 8) & 0xff,
                    util_version() >> 16,
                    (util_version() >> 8) & 0xff
                ));
            }
            let log_set_level: unsafe extern "C" fn(c_int) = f!(u, "av_log_set_level");
            // Errors come back to us as codes and are reported with the request.
            log_set_level(AV_LOG_QUIET);
            Lib {
                find_encoder_by_name: f!(c, "avcodec_find_encoder_by_name"),
                find_decoder_by_name: f!(c, "avcodec_find_decoder_by_name"),
                alloc_context3: f!(c, "avcodec_alloc_context3"),
                free_context: f!(c, "avcodec_free_context"),
                open2: f!(c, "avcodec_open2"),
                send_frame: f!(c, "avcodec_send_frame"),
                receive_packet: f!(c, "avcodec_receive_packet"),
                send_packet: f!(c, "avcodec_send_packet"),
                receive_frame: f!(c, "avcodec_receive_frame"),
                packet_alloc: f!(c, "av_packet_alloc"),
                packet_free: f!(c, "av_packet_free"),
                packet_unref: f!(c, "av_packet_unref"),
                new_packet: f!(c, "av_new_packet"),
                parameters_alloc: f!(c, "avcodec_parameters_alloc"),
                parameters_free: f!(c, "avcodec_parameters_free"),
                parameters_from_context: f!(c, "avcodec_parameters_from_context"),
                parameters_to_context: f!(c, "avcodec_parameters_to_context"),
                frame_alloc: f!(u, "av_frame_alloc"),
                frame_free: f!(u, "av_frame_free"),
                frame_make_writable: f!(u, "av_frame_make_writable"),
                opt_set: f!(u, "av_opt_set"),
                opt_set_int: f!(u, "av_opt_set_int"),
                opt_get_int: f!(u, "av_opt_get_int"),
                strerror: f!(u, "av_strerror"),
            }
        };
        return Ok(lib);
    }
    Err(format!("aac output needs FFmpeg's libavcodec, not found on this machine ({}): {INSTALL}", tried.join(", ")))
}

impl Lib {
    fn error(&self, what: &str, code: c_int) -> EncodeError {
        let mut buf = [0 as c_char; 128];
        // SAFETY: the buffer and its length; av_strerror always NUL-terminates.
        unsafe { (self.strerror)(code, buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated above.
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        EncodeError(format!("aac: {what}: {text}"))
    }

    fn check(&self, what: &str, code: c_int) -> Result<(), EncodeError> {
        if code < 0 {
            Err(self.error(what, code))
        } else {
            Ok(())
        }
    }

    /// Set an option of a codec context by name (the AVOptions API, layout-independent).
    fn set(&self, ctx: Ptr, name: &str, value: &str) -> Result<(), EncodeError> {
        let (n, v) = (CString::new(name).expect("name"), CString::new(value).expect("value"));
        // SAFETY: a live context and NUL-terminated strings.
        self.check(&format!("setting {name}"), unsafe { (self.opt_set)(ctx, n.as_ptr(), v.as_ptr(), 0) })
    }

    fn set_int(&self, ctx: Ptr, name: &str, value: i64) -> Result<(), EncodeError> {
        let n = CString::new(name).expect("name");
        // SAFETY: a live context and a NUL-terminated name.
        self.check(&format!("setting {name}"), unsafe { (self.opt_set_int)(ctx, n.as_ptr(), value, 0) })
    }

    /// A codec context for `codec` (an encoder or decoder name), mono at `sample_rate`.
    fn context(&'static self, codec: &str, encoder: bool, sample_rate: u32) -> Result<Context, EncodeError> {
        let name = CString::new(codec).expect("name");
        // SAFETY: a NUL-terminated name; a null result is handled.
        let found = unsafe {
            if encoder {
                (self.find_encoder_by_name)(name.as_ptr())
            } else {
                (self.find_decoder_by_name)(name.as_ptr())
            }
        };
        if found.is_null() {
            return Err(EncodeError(format!("aac: this libavcodec has no {codec} codec; {INSTALL}")));
        }
        // SAFETY: a codec libavcodec returned.
        let ctx = Context { lib: self, ptr: unsafe { (self.alloc_context3)(found) }, codec: found };
        if ctx.ptr.is_null() {
            return Err(EncodeError("aac: out of memory".into()));
        }
        self.set_int(ctx.ptr, "ar", i64::from(sample_rate))?;
        // `ch_layout` since libavcodec 59.24; the older `ac` (channels) before it.
        if self.set(ctx.ptr, "ch_layout", "mono").is_err() {
            self.set_int(ctx.ptr, "ac", 1)?;
        }
        self.set_int(ctx.ptr, "threads", 1)?;
        Ok(ctx)
    }
}

/// An owned AVCodecContext, and the codec it was made for.
struct Context {
    lib: &'static Lib,
    ptr: Ptr,
    codec: *const c_void,
}

impl Context {
    fn open(&self, what: &str) -> Result<(), EncodeError> {
        // SAFETY: a live, unopened context and its codec; no options dictionary.
        self.lib
            .check(&format!("opening {what}"), unsafe { (self.lib.open2)(self.ptr, self.codec, std::ptr::null_mut()) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: allocated by avcodec_alloc_context3, freed once.
        unsafe { (self.lib.free_context)(&mut self.ptr) };
    }
}

/// An owned AVPacket.
struct Packet {
    lib: &'static Lib,
    ptr: Ptr,
}

impl Packet {
    fn new(lib: &'static Lib) -> Result<Packet, EncodeError> {
        // SAFETY: plain allocation; null is handled.
        let ptr = unsafe { (lib.packet_alloc)() };
        if ptr.is_null() {
            return Err(EncodeError("aac: out of memory".into()));
        }
        Ok(Packet { lib, ptr })
    }

    /// The payload of a packet libavcodec filled.
    fn bytes(&self) -> &[u8] {
        // SAFETY: `data` and `size` sit in AVPacket's stable prefix; libavcodec set them.
        unsafe {
            let data = *(self.ptr.cast::<u8>().add(PACKET_DATA).cast::<*const u8>());
            let size = *(self.ptr.cast::<u8>().add(PACKET_SIZE).cast::<c_int>());
            if data.is_null() || size <= 0 {
                &[]
            } else {
                std::slice::from_raw_parts(data, size as usize)
            }
        }
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        // SAFETY: allocated by av_packet_alloc, freed once.
        unsafe { (self.lib.packet_free)(&mut self.ptr) };
    }
}

/// An owned AVFrame.
struct Frame {
    lib: &'static Lib,
    ptr: Ptr,
}

impl Drop for Frame {
    fn drop(&mut self) {
        // SAFETY: allocated by av_frame_alloc, freed once.
        unsafe { (self.lib.frame_free)(&mut self.ptr) };
    }
}

impl Frame {
    fn int_at(&self, offset: usize) -> *mut c_int {
        // SAFETY (for the callers): offsets in AVFrame's stable prefix.
        unsafe { self.ptr.cast::<u8>().add(offset).cast::<c_int>() }
    }
}

/// Give `encoder` the sample format the AAC encoder takes, planar float. AVCodecContext's
/// `sample_fmt` has no AVOption and moves between versions, so it comes from libavcodec's
/// own AAC decoder, whose output is planar float: its parameters are copied over.
fn planar_float(lib: &'static Lib, encoder: &Context, sample_rate: u32) -> Result<(), EncodeError> {
    let decoder = lib.context("aac", false, sample_rate)?;
    decoder.open("the aac decoder")?;
    struct Params(&'static Lib, Ptr);
    impl Drop for Params {
        fn drop(&mut self) {
            // SAFETY: allocated by avcodec_parameters_alloc, freed once.
            unsafe { (self.0.parameters_free)(&mut self.1) };
        }
    }
    // SAFETY: plain allocation; null is handled.
    let params = Params(lib, unsafe { (lib.parameters_alloc)() });
    if params.1.is_null() {
        return Err(EncodeError("aac: out of memory".into()));
    }
    // SAFETY: live parameters and contexts.
    unsafe {
        lib.check("reading the decoder's parameters", (lib.parameters_from_context)(params.1, decoder.ptr))?;
        lib.check("setting the sample format", (lib.parameters_to_context)(encoder.ptr, params.1))?;
    }
    Ok(())
}

/// A mono 1024-sample frame at `sample_rate`, made by libavcodec (so that the fields whose
/// place differs between versions, the rate and the channel layout, are set by it): a
/// `pcm_f32le` decoder decodes a block of silence.
fn block_frame(lib: &'static Lib, sample_rate: u32) -> Result<Frame, EncodeError> {
    let decoder = lib.context("pcm_f32le", false, sample_rate)?;
    decoder.open("pcm_f32le")?;
    let packet = Packet::new(lib)?;
    // SAFETY: a live packet; av_new_packet zero-fills the payload (silence).
    lib.check("allocating a packet", unsafe { (lib.new_packet)(packet.ptr, (BLOCK * 4) as c_int) })?;
    // SAFETY: a live opened decoder and a filled packet.
    lib.check("decoding silence", unsafe { (lib.send_packet)(decoder.ptr, packet.ptr) })?;
    // SAFETY: plain allocation; null is handled.
    let frame = Frame { lib, ptr: unsafe { (lib.frame_alloc)() } };
    if frame.ptr.is_null() {
        return Err(EncodeError("aac: out of memory".into()));
    }
    // SAFETY: a live decoder and frame.
    lib.check("decoding silence", unsafe { (lib.receive_frame)(decoder.ptr, frame.ptr) })?;
    // SAFETY: nb_samples and format are in the stable prefix.
    unsafe {
        let (samples, format) = (*frame.int_at(FRAME_NB_SAMPLES), *frame.int_at(FRAME_FORMAT));
        if samples != BLOCK as c_int || format != AV_SAMPLE_FMT_FLT {
            return Err(EncodeError(format!(
                "aac: libavcodec's frame layout is not the one expected ({samples} samples, format {format}); {INSTALL}"
            )));
        }
        // Mono: interleaved and planar float are the same bytes; the encoder takes planar.
        *frame.int_at(FRAME_FORMAT) = AV_SAMPLE_FMT_FLTP;
    }
    Ok(frame)
}

/// AAC-LC frames in ADTS, made as audio arrives. Memory is bounded: under a block of
/// samples here, and the encoder's own three blocks.
pub(super) struct AacStream {
    lib: &'static Lib,
    encoder: Context,
    frame: Frame,
    packet: Packet,
    header: [u8; ADTS_HEADER_LEN],
    pending: Vec<f32>,
    /// Packets received so far (the first, the priming, is not sent).
    packets: u64,
}

// SAFETY: the libavcodec objects are owned by this value alone and used from one thread at
// a time (libavcodec contexts are not tied to the thread that made them).
unsafe impl Send for AacStream {}
// SAFETY: every method that touches them takes `&mut self` (or `self`): a shared reference
// gives no access to the libavcodec objects.
unsafe impl Sync for AacStream {}

impl AacStream {
    pub(super) fn new(sample_rate: u32) -> Result<AacStream, EncodeError> {
        let index = rate_index(sample_rate).ok_or_else(|| {
            EncodeError(format!(
                "cannot encode aac: sample rate {sample_rate} Hz is not an AAC rate (8000, 11025, 12000, 16000, \
                 22050, 24000, 32000, 44100, 48000, 64000, 88200 or 96000 Hz)"
            ))
        })?;
        let lib = lib()?;
        let encoder = lib.context("aac", true, sample_rate)?;
        planar_float(lib, &encoder, sample_rate)?;
        lib.set_int(encoder.ptr, "ar", i64::from(sample_rate))?;
        lib.set(encoder.ptr, "ch_layout", "mono").or_else(|_| lib.set_int(encoder.ptr, "ac", 1))?;
        lib.set_int(encoder.ptr, "b", bitrate(sample_rate))?;
        encoder.open("the aac encoder")?;
        let mut frame_size = 0i64;
        let name = CString::new("frame_size").expect("name");
        // SAFETY: a live, opened context; the out-parameter is ours.
        lib.check("reading frame_size", unsafe { (lib.opt_get_int)(encoder.ptr, name.as_ptr(), 0, &mut frame_size) })?;
        if frame_size != BLOCK as i64 {
            return Err(EncodeError(format!("aac: the encoder takes {frame_size}-sample frames, not {BLOCK}")));
        }
        let frame = block_frame(lib, sample_rate)?;
        let packet = Packet::new(lib)?;
        Ok(AacStream {
            lib,
            encoder,
            frame,
            packet,
            header: adts_header(index),
            pending: Vec::with_capacity(BLOCK),
            packets: 0,
        })
    }

    pub(super) fn push(&mut self, samples: &[i16]) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        for &s in samples {
            self.pending.push(f32::from(s) / 32768.0);
            if self.pending.len() == BLOCK {
                self.send_block()?;
                self.drain(&mut out)?;
            }
        }
        Ok(out)
    }

    pub(super) fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        if self.packets == 0 && self.pending.is_empty() {
            // No audio: one block of silence, so that the file still decodes (to 1024 samples).
            self.pending.resize(BLOCK, 0.0);
        }
        if !self.pending.is_empty() {
            self.pending.resize(BLOCK, 0.0);
            self.send_block()?;
            self.drain(&mut out)?;
        }
        // SAFETY: a live encoder; a null frame starts the flush.
        self.lib.check("flushing", unsafe { (self.lib.send_frame)(self.encoder.ptr, std::ptr::null()) })?;
        self.drain(&mut out)?;
        Ok(out)
    }

    /// Hand the pending block to the encoder.
    fn send_block(&mut self) -> Result<(), EncodeError> {
        let lib = self.lib;
        // SAFETY: the frame is live; after av_frame_make_writable its buffer is ours alone,
        // `data[0]` (the stable prefix) points at BLOCK floats (mono, planar).
        unsafe {
            lib.check("preparing a frame", (lib.frame_make_writable)(self.frame.ptr))?;
            let data = *(self.frame.ptr.cast::<u8>().add(FRAME_DATA0).cast::<*mut f32>());
            std::ptr::copy_nonoverlapping(self.pending.as_ptr(), data, BLOCK);
            lib.check("encoding", (lib.send_frame)(self.encoder.ptr, self.frame.ptr))?;
        }
        self.pending.clear();
        Ok(())
    }

    /// Append every packet the encoder has ready, each behind its ADTS header.
    fn drain(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        loop {
            // SAFETY: a live encoder and packet.
            let code = unsafe { (self.lib.receive_packet)(self.encoder.ptr, self.packet.ptr) };
            if code == EAGAIN || code == AVERROR_EOF {
                return Ok(());
            }
            self.lib.check("encoding", code)?;
            self.packets += 1;
            let payload = self.packet.bytes();
            if self.packets > 1 {
                let len = ADTS_HEADER_LEN + payload.len();
                if len >= 1 << 13 {
                    return Err(EncodeError(format!("aac: a {len}-byte frame does not fit ADTS")));
                }
                let mut header = self.header;
                header[3] |= (len >> 11) as u8;
                header[4] = (len >> 3) as u8;
                header[5] |= ((len & 7) << 5) as u8;
                out.extend_from_slice(&header);
                out.extend_from_slice(payload);
            }
            // SAFETY: a live packet, filled by receive_packet.
            unsafe { (self.lib.packet_unref)(self.packet.ptr) };
        }
    }
}

/// The whole file: the stream's bytes, in one piece.
pub(super) fn encode(samples: &[i16], sample_rate: u32) -> Result<Vec<u8>, EncodeError> {
    let mut stream = AacStream::new(sample_rate)?;
    let mut out = stream.push(samples)?;
    out.extend(stream.finish()?);
    Ok(out)
}

/// MPEG-4's sampling frequency index.
fn rate_index(sample_rate: u32) -> Option<u8> {
    const RATES: [u32; 12] =
        [96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000];
    RATES.iter().position(|&r| r == sample_rate).map(|i| i as u8)
}

/// The fixed part of an ADTS header: MPEG-4, no CRC, AAC LC, mono, buffer fullness 0x7FF
/// (variable rate), one raw data block; the frame length (13 bits) is filled in per frame.
fn adts_header(rate_index: u8) -> [u8; ADTS_HEADER_LEN] {
    const LC: u8 = 1; // audio object type 2, minus one
    const MONO: u8 = 1;
    [0xFF, 0xF1, (LC << 6) | (rate_index << 2) | (MONO >> 2), (MONO & 3) << 6, 0, 0x1F, 0xFC]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames in an ADTS stream: (sampling index, channel configuration, length) each.
    fn frames(mut b: &[u8]) -> Vec<(u8, u8, usize)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            assert!(b.len() >= 7 && b[0] == 0xFF && b[1] & 0xF6 == 0xF0, "sync lost with {} bytes left", b.len());
            assert_eq!(b[1] & 1, 1, "no CRC");
            assert_eq!(b[2] >> 6, 1, "AAC LC");
            let len = (usize::from(b[3] & 3) << 11) | (usize::from(b[4]) << 3) | usize::from(b[5] >> 5);
            out.push(((b[2] >> 2) & 0xF, ((b[2] & 1) << 2) | (b[3] >> 6), len));
            b = &b[len..];
        }
        out
    }

    #[test]
    fn adts_frames_one_per_block_whole_or_streamed() {
        if let Err(e) = available() {
            eprintln!("skipped: {e}");
            return;
        }
        let samples: Vec<i16> = (0..10_000).map(|i| ((i as f64 * 0.05).sin() * 8000.0) as i16).collect();
        let whole = encode(&samples, 24_000).expect("aac");
        let parsed = frames(&whole);
        // ceil(10000 / 1024) blocks: the priming packet is not sent.
        assert_eq!(parsed.len(), 10);
        assert!(parsed.iter().all(|&(rate, channels, _)| rate == 6 && channels == 1), "{parsed:?}");

        let mut stream = AacStream::new(24_000).expect("stream");
        let mut streamed = Vec::new();
        for piece in samples.chunks(777) {
            streamed.extend(stream.push(piece).expect("push"));
        }
        streamed.extend(stream.finish().expect("finish"));
        assert_eq!(streamed, whole, "the same bytes however the audio is chunked");

        // The first frame leaves once three blocks are in (look-ahead, overlap, the dropped
        // priming packet), then one per block.
        let mut stream = AacStream::new(24_000).expect("stream");
        assert!(stream.push(&samples[..3 * 1024 - 1]).expect("push").is_empty());
        assert_eq!(frames(&stream.push(&samples[3 * 1024 - 1..3 * 1024]).expect("push")).len(), 1);
        assert_eq!(frames(&stream.push(&samples[3 * 1024..4 * 1024]).expect("push")).len(), 1);
        assert_eq!(frames(&encode(&[], 24_000).expect("empty")).len(), 1, "no audio: one frame of silence");
    }

    #[test]
    fn rejects_rates_aac_has_not() {
        let err = encode(&[0; 10], 25_000).expect_err("25 kHz");
        assert!(err.0.contains("25000 Hz"), "{err}");
    }
}
