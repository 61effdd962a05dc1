//! hibari's voice list (`voices.json`): a voice is a whole model file of the same graph (NOTES.md,
//! "Voices"). Only heart ships in the wheel; a user may drop another voice's file into the assets
//! directory, and it is served once its size and sha256 match the list. Nothing is downloaded.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// One entry of `voices.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoiceEntry {
    pub name: String,
    /// Model file name in the assets directory.
    pub file: String,
    pub bytes: Option<u64>,
    /// Lowercase hex.
    pub sha256: Option<String>,
    /// Uses the British front end (lexicons and OOV net).
    pub british: bool,
    /// Its language code (`en-US`), when the list gives one.
    pub language: Option<String>,
    /// For people choosing a voice: `Heart (American, female)`.
    pub description: Option<String>,
}

/// Every voice `voices.json` lists, sorted by name.
pub fn read_voice_list(assets_dir: &Path) -> Result<Vec<VoiceEntry>, String> {
    let path = assets_dir.join("voices.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let object = value.as_object().ok_or_else(|| format!("{}: not a JSON object", path.display()))?;
    let mut out = Vec::new();
    for (name, v) in object {
        let Some(file) = v.get("file").and_then(|f| f.as_str()) else {
            return Err(format!("{}: voice {name} has no file", path.display()));
        };
        // A file name only: voices.json must not point outside the assets directory.
        if file.contains('/') || file.contains('\\') || file.starts_with('.') {
            return Err(format!("{}: voice {name} has a bad file name {file:?}", path.display()));
        }
        out.push(VoiceEntry {
            name: name.to_lowercase(),
            file: file.to_owned(),
            bytes: v.get("bytes").and_then(|b| b.as_u64()),
            sha256: v.get("sha256").and_then(|s| s.as_str()).map(str::to_lowercase),
            british: v.get("british").and_then(|b| b.as_bool()).unwrap_or(false),
            language: v.get("language").and_then(|l| l.as_str()).map(str::to_owned),
            description: describe(name, v),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn describe(name: &str, entry: &serde_json::Value) -> Option<String> {
    let mut title = name.to_lowercase();
    if let Some(first) = title.get(..1) {
        title = first.to_uppercase() + &title[1..];
    }
    let traits: Vec<&str> = ["accent", "gender"].iter().filter_map(|key| entry.get(*key)?.as_str()).collect();
    Some(if traits.is_empty() { title } else { format!("{title} ({})", traits.join(", ")) })
}

/// Whether the voice's file is in `assets_dir` and is the one the list describes. `Ok(false)`
/// when it is absent; `Err` when it is there but differs (a partial download, another version).
pub fn check_voice_file(assets_dir: &Path, voice: &VoiceEntry) -> Result<bool, String> {
    let path = assets_dir.join(&voice.file);
    let Ok(meta) = std::fs::metadata(&path) else { return Ok(false) };
    if let Some(bytes) = voice.bytes.filter(|&b| b != meta.len()) {
        return Err(format!("{} has {} bytes, voices.json says {bytes}", path.display(), meta.len()));
    }
    if let Some(expected) = &voice.sha256 {
        let got = sha256_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if &got != expected {
            return Err(format!("{} has sha256 {got}, voices.json says {expected}", path.display()));
        }
    }
    Ok(true)
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
