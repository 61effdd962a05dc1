//! speechstream-engine-libtorch: voice families natively in tch, and [`TorchEngine`], which
//! hosts them behind speechstream-core's `Engine` trait with worker threads that stream, batch
//! and pace requests by their playback deadlines ([`pacing`], [`workers`]). A family is one
//! module behind one contract ([`family`]): hibari ([`Hibari`], [`dsp`], [`NoiseSource`]) and
//! Kokoro-82M ([`kokoro`]). Their text front ends are the `speechstream-text` crate ([`g2p`]).
//!
//! The weights come from the voice's ONNX file, read without onnxruntime (`onnx`, on the
//! protobuf walker in `proto`); `quant` names and dequantizes its int8 Linear weights, and
//! [`gemm`] and `kernels` run them in int8 on the CPU. It is not a server and holds no protocol
//! rule: what a request may ask for is declared in its capabilities and checked in the core.

// Public: what the binary, the benchmarks, the examples and the tests use; the rest is
// reached through the re-exports below.
mod chunks;
pub mod cpu;
pub mod dsp;
mod engine;
pub mod family;
mod float32;
pub mod gemm;
mod hibari;
mod kernels;
pub mod kokoro;
mod noise;
mod onnx;
mod oov;
mod options;
pub mod pacing;
pub mod piper;
mod precision;
mod proto;
mod quant;
mod scheduler;
mod stats;
mod tensor_slices;
pub mod timing;
pub mod voices;
pub mod workers;

pub use chunks::{chunk_ranges, sentence_ranges, stream_ranges, ChunkSizes};
pub use cpu::Level;
pub use engine::{families, TorchEngine};
pub use hibari::{Hibari, HibariError, PrecisionChoice, Prosody, Spectra};
pub use kokoro::{
    KokoroModel, KokoroOutput, KokoroTrace, MAX_IDS as KOKORO_MAX_IDS, SAMPLES_PER_FRAME as KOKORO_SAMPLES_PER_FRAME,
    SAMPLE_RATE as KOKORO_SAMPLE_RATE,
};
pub use noise::NoiseSource;
pub use onnx::{read_initializers, DataType, Model, OnnxError, Tensor};
pub use oov::{load_front_end, OovNet};
pub use options::{
    EngineOptions, HibariOptions, KokoroOptions, PiperOptions, DEFAULT_MODEL_NAME, DEFAULT_VOICE, FRAME_SECONDS,
};
pub use pacing::Pacing;
pub use precision::Precision;
pub use quant::{linear_weights, parameters, LinearWeight};
pub use stats::AdmissionMode;

/// Loads `libtorch_cuda.so` so that tch sees CUDA (the linker drops it as unneeded, see
/// docs/libtorch.md). Call once at start-up, before any CUDA query; returns whether it
/// loaded (false on a CPU-only libtorch, which is fine). Tries the plain name (LD_LIBRARY_PATH, the
/// binary's rpath), then the libtorch lib dir the crate was built against.
pub fn load_cuda() -> bool {
    use std::sync::OnceLock;
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        // libtorch lets cuDNN run fp32 convolutions in TF32 (10-bit mantissas) by default and tch
        // has no switch for it; NVIDIA's own, read by cuBLAS and cuDNN as they start, keeps fp32
        // fp32 (hibari on an H200: audio within 1.3e-3 of the CPU's without TF32, 0.14 with it).
        // Set before libtorch_cuda loads, at start-up (no other thread reads the environment
        // yet); a value the user set stands.
        if std::env::var_os("NVIDIA_TF32_OVERRIDE").is_none() {
            std::env::set_var("NVIDIA_TF32_OVERRIDE", "0");
        }
        let mut names = vec!["libtorch_cuda.so".to_string()];
        if let Some(dir) = option_env!("SPEECHSTREAM_LIBTORCH_LIB") {
            names.push(format!("{dir}/libtorch_cuda.so"));
        }
        names.iter().any(|n| {
            let Ok(c) = std::ffi::CString::new(n.as_str()) else { return false };
            // SAFETY: dlopen with a valid NUL-terminated path; the handle is kept open for the
            // life of the process on purpose.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            !h.is_null()
        })
    })
}
/// The text front end: the speechstream-text crate, under the name it had as this crate's
/// module. Its English G2P runs here with the OOV net on tch ([`load_front_end`]).
pub use speechstream_text as g2p;
/// The tch this crate is built on, for families written outside it.
pub use tch;

/// The device named by `--device`: `auto` (CUDA device 0 when libtorch sees one, else the CPU),
/// `cpu`, `cuda` or `cuda:N`. Loads libtorch_cuda first ([`load_cuda`]).
pub fn parse_device(spec: &str) -> Result<tch::Device, String> {
    let spec = spec.trim().to_lowercase();
    let cuda = load_cuda() && tch::Cuda::is_available();
    let count = if cuda { tch::Cuda::device_count() } else { 0 };
    let index = match spec.as_str() {
        "cpu" => return Ok(tch::Device::Cpu),
        "auto" => return Ok(if cuda { tch::Device::Cuda(0) } else { tch::Device::Cpu }),
        "cuda" => 0,
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(index)) => index,
            _ => return Err(format!("unknown device `{spec}`; use auto, cpu, cuda or cuda:N")),
        },
    };
    if !cuda {
        return Err(format!("device `{spec}`: libtorch sees no CUDA device here (use --device cpu or auto)"));
    }
    if index as i64 >= count {
        return Err(format!("device `{spec}`: there are {count} CUDA device(s)"));
    }
    Ok(tch::Device::Cuda(index))
}

/// Ends the process with `code` at once, after flushing stdout and stderr, without running
/// libtorch's static destructors: they unregister its thousands of operators one by one, ~50 ms
/// of a one-shot command's time. For a process that is done (files written and closed).
pub fn exit_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit only ends the process; nothing of ours is left to flush.
    unsafe { libc::_exit(code) }
}

/// Keeps freed memory in the process (glibc: no mmap below 64 MiB, trim above 256 MiB free).
/// libtorch frees and reallocates its per-op tensors all the time; with glibc's defaults the
/// larger ones are fresh mmaps whose pages are faulted in and zeroed each time (~8% of the 1-thread
/// CPU time here). Process-wide; a no-op outside glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
