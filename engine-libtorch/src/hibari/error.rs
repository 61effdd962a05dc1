//! Why loading a voice failed.

use super::*;

#[derive(Debug)]
pub enum HibariError {
    Io(std::io::Error),
    Onnx(OnnxError),
    Json(String),
    Invalid(String),
}

impl fmt::Display for HibariError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HibariError::Io(e) => write!(f, "{e}"),
            HibariError::Onnx(e) => write!(f, "{e}"),
            HibariError::Json(e) => write!(f, "vocab.json: {e}"),
            HibariError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HibariError {}

impl From<OnnxError> for HibariError {
    fn from(e: OnnxError) -> Self {
        HibariError::Onnx(e)
    }
}

impl From<std::io::Error> for HibariError {
    fn from(e: std::io::Error) -> Self {
        HibariError::Io(e)
    }
}
