//! What the text crate's integration tests share.

use std::path::PathBuf;

use speechstream_text::espeak::{HELPER_ENV, HELPER_PATH};

/// espeak-ng's helper as set-up builds it (or where [`HELPER_ENV`] points), or None (with a
/// message) when it is not there.
pub fn helper() -> Option<PathBuf> {
    let path = std::env::var_os(HELPER_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(HELPER_PATH));
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "skipping: espeak-ng's helper {} is not built (scripts/setup.sh builds it: cargo build --release \
             --manifest-path tools/espeak-phonemes/Cargo.toml)",
            path.display()
        );
        None
    }
}
