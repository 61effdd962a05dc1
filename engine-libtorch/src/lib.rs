//! speechstream-engine-libtorch: the hibari voice natively in tch. Not yet implemented: see issue "The real voice".
//!
//! Groundwork so far (no libtorch needed to build): a dependency-free reader of ONNX files
//! ([`onnx`], on the protobuf walker in [`proto`]) and the naming and dequantization of hibari's
//! int8 Linear weights ([`quant`]), which together give the model's float parameters by their
//! PyTorch names. See `NOTES.md` for what the Python reference does around the network.

pub mod onnx;
pub mod proto;
pub mod quant;

pub use onnx::{read_initializers, DataType, Model, OnnxError, Tensor};
pub use quant::{linear_weights, parameters, LinearWeight};
