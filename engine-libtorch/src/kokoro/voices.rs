//! Kokoro's files as users have them, in `--kokoro-dir`: the model (`kokoro-v1.0.int8.onnx`
//! and/or `kokoro-v1.0.onnx`) and the voices, as kokoro-onnx's `voices-v1.0.bin` (an npz of
//! all 54), any other `.npz` of voices (`voices_ja.npz`), or one `.npy` per voice, or one `.pt`
//! per voice (hexgrad's `kokoro` package's and Kokoro-FastAPI's `voices/af_heart.pt`: a
//! `torch.save` of the table), in the directory or its `voices/` folder. A voice is a style
//! table: [510, 1, 256] (or [510, 256]) f32, one 256-float row per input length; its language is
//! the first letter of its name (Kokoro's convention: `af_heart` American English, `jf_alpha`
//! Japanese). Read with our own npy, zip (`super::zip`) and torch.save ([`super::torchfile`])
//! readers. hexgrad's model weights (`kokoro-v1_0.pth`) are not read: noted in `skipped`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use super::zip::unzip;

/// Floats per style row.
pub const STYLE_DIM: usize = 256;
/// The int8 model file, as kokoro-onnx's users download it.
pub const INT8_MODEL: &str = "kokoro-v1.0.int8.onnx";
/// The fp32 model file.
pub const FP32_MODEL: &str = "kokoro-v1.0.onnx";
/// kokoro-onnx's voices file: an npz of every voice.
pub const VOICES_BIN: &str = "voices-v1.0.bin";

/// One voice's style table: `rows` rows of [`STYLE_DIM`] floats, row `n` for `n` phoneme ids.
#[derive(Clone, Debug, PartialEq)]
pub struct VoicePack {
    data: Vec<f32>,
}

impl VoicePack {
    /// A table from its floats (a whole number of rows, at least one).
    pub fn new(data: Vec<f32>) -> Result<VoicePack, String> {
        if data.is_empty() || !data.len().is_multiple_of(STYLE_DIM) {
            return Err(format!("a voice has rows of {STYLE_DIM} floats, not {} floats", data.len()));
        }
        Ok(VoicePack { data })
    }

    pub fn rows(&self) -> usize {
        self.data.len() / STYLE_DIM
    }

    /// The style for an input of `ids` phoneme ids (without the two pad tokens): row `ids`, as
    /// kokoro-onnx picks it, the last row for longer inputs.
    pub fn style(&self, ids: usize) -> &[f32] {
        let row = ids.min(self.rows() - 1);
        &self.data[row * STYLE_DIM..(row + 1) * STYLE_DIM]
    }

    /// The weighted mean of `packs` (Kokoro-FastAPI's voice mixing); they must have as many
    /// rows each.
    pub fn mix(packs: &[(&VoicePack, f32)]) -> Result<VoicePack, String> {
        let Some((first, _)) = packs.first() else { return Err("no voice to mix".to_owned()) };
        if packs.iter().any(|(p, _)| p.data.len() != first.data.len()) {
            return Err("the voices mixed have style tables of different sizes".to_owned());
        }
        let total: f32 = packs.iter().map(|(_, w)| w).sum();
        if !(total.is_finite() && total > 0.0) {
            return Err("the weights of a voice mix must add up to a positive number".to_owned());
        }
        let mut data = vec![0f32; first.data.len()];
        for (pack, weight) in packs {
            let w = weight / total;
            for (out, x) in data.iter_mut().zip(&pack.data) {
                *out += w * x;
            }
        }
        Ok(VoicePack { data })
    }
}

/// A voice found in the directory.
#[derive(Clone, Debug, PartialEq)]
pub struct KokoroVoice {
    pub name: String,
    /// BCP 47 tag from the name's first letter (`None` for a letter Kokoro does not use).
    pub language: Option<&'static str>,
    pub pack: VoicePack,
    /// The file it came from.
    pub file: PathBuf,
}

impl KokoroVoice {
    /// `Alpha (Japanese, female)`, from Kokoro's naming: language letter, gender letter, `_`,
    /// name.
    pub fn description(&self) -> String {
        let mut chars = self.name.chars();
        let (lang, gender) = (chars.next(), chars.next());
        let base = self.name.split_once('_').map_or(self.name.as_str(), |(_, n)| n);
        let mut title: String = base.chars().take(1).flat_map(char::to_uppercase).collect();
        title.extend(base.chars().skip(1));
        let language = match lang {
            Some('a') => Some("American English"),
            Some('b') => Some("British English"),
            Some('e') => Some("Spanish"),
            Some('f') => Some("French"),
            Some('h') => Some("Hindi"),
            Some('i') => Some("Italian"),
            Some('j') => Some("Japanese"),
            Some('p') => Some("Brazilian Portuguese"),
            Some('z') => Some("Mandarin Chinese"),
            _ => None,
        };
        let gender = match gender {
            Some('f') => Some("female"),
            Some('m') => Some("male"),
            _ => None,
        };
        let traits: Vec<&str> = [language, gender].into_iter().flatten().collect();
        if traits.is_empty() {
            title
        } else {
            format!("{title} ({})", traits.join(", "))
        }
    }
}

/// What `--kokoro-dir` holds.
#[derive(Debug, Default)]
pub struct KokoroFiles {
    /// The model files present: int8 and fp32.
    pub int8: Option<PathBuf>,
    pub fp32: Option<PathBuf>,
    /// The voices, sorted by name (one per name: a `.npy` or `.pt` of its own wins over a bundle).
    pub voices: Vec<KokoroVoice>,
    /// Files that could not be read, with why (logged and left out).
    pub skipped: Vec<String>,
}

impl KokoroFiles {
    /// The model file to load: fp32's when `fp32` is preferred and present, else int8's, else
    /// fp32's.
    pub fn model(&self, prefer_fp32: bool) -> Option<&Path> {
        let (a, b) = if prefer_fp32 { (&self.fp32, &self.int8) } else { (&self.int8, &self.fp32) };
        a.as_deref().or(b.as_deref())
    }
}

/// Reads the directory: the model files present and every voice. A missing directory holds
/// nothing; a voice file that can't be read is skipped (in `skipped`), not fatal.
pub fn scan(dir: &Path) -> KokoroFiles {
    let mut files = KokoroFiles::default();
    let present = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
    files.int8 = present(INT8_MODEL);
    files.fp32 = present(FP32_MODEL);
    // Bundles first, single voices after: a later voice of the same name replaces an earlier.
    let mut bundles = Vec::new();
    let mut singles = Vec::new();
    for folder in [dir.to_path_buf(), dir.join("voices")] {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name == VOICES_BIN || name.ends_with(".npz") {
                bundles.push(path);
            } else if name.ends_with(".npy") || name.ends_with(".pt") {
                singles.push(path);
            } else if name.ends_with(".pth") {
                files.skipped.push(format!(
                    "{}: PyTorch model weights (hexgrad's kokoro-v1_0.pth) are not read; Kokoro's model is \
                     read from kokoro-onnx's {INT8_MODEL} or {FP32_MODEL}",
                    path.display()
                ));
            }
        }
    }
    let mut voices: BTreeMap<String, KokoroVoice> = BTreeMap::new();
    let mut add = |name: &str, data: Result<Vec<f32>, String>, file: &Path, skipped: &mut Vec<String>| match data
        .and_then(VoicePack::new)
    {
        Ok(pack) => {
            let name = name.to_lowercase();
            let language = name.chars().next().and_then(speechstream_core::config::kokoro_language);
            voices.insert(name.clone(), KokoroVoice { name, language, pack, file: file.to_owned() });
        }
        Err(e) => skipped.push(format!("{} ({name}): {e}", file.display())),
    };
    for path in bundles {
        match read_npz(&path) {
            Ok(entries) => {
                for (name, bytes) in entries {
                    let Some(voice) = name.strip_suffix(".npy") else { continue };
                    add(voice, read_npy(&bytes), &path, &mut files.skipped);
                }
            }
            Err(e) => files.skipped.push(format!("{}: {e}", path.display())),
        }
    }
    for path in singles {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        let pt = path.extension().is_some_and(|e| e == "pt");
        let data =
            std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| if pt { read_pt(&b) } else { read_npy(&b) });
        add(&stem, data, &path, &mut files.skipped);
    }
    files.voices = voices.into_values().filter(|v| valid_name(&v.name)).collect();
    files
}

/// A voice name a request can carry and a mix can be written with.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// The floats of a `.npy` file holding f32 (`<f4`) or f64 (`<f8`, converted) in C order, any
/// shape whose last dimension is [`STYLE_DIM`].
pub fn read_npy(bytes: &[u8]) -> Result<Vec<f32>, String> {
    let rest = bytes.strip_prefix(b"\x93NUMPY").ok_or("not an .npy file (no \\x93NUMPY magic)")?;
    let (&major, rest) = rest.split_first().ok_or("truncated .npy header")?;
    let rest = rest.get(1..).ok_or("truncated .npy header")?;
    let (len, rest) = match major {
        1 => (u16::from_le_bytes(take::<2>(rest)?) as usize, &rest[2..]),
        2 | 3 => (u32::from_le_bytes(take::<4>(rest)?) as usize, &rest[4..]),
        v => return Err(format!(".npy version {v} is not known")),
    };
    let header = rest.get(..len).ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| ".npy header is not text")?;
    let data = &rest[len..];
    let descr = dict_value(header, "descr").ok_or(".npy header has no descr")?;
    let descr = descr.get(1..).and_then(|d| d.split(['\'', '"']).next()).unwrap_or_default();
    if dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err("Fortran-ordered arrays are not supported".to_owned());
    }
    let shape = dict_value(header, "shape").ok_or(".npy header has no shape")?;
    let shape = shape.trim_start_matches('(');
    let shape = &shape[..shape.find(')').ok_or(".npy shape is not a tuple")?];
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse::<usize>().map_err(|_| format!(".npy shape has {d:?}")))
        .collect::<Result<_, _>>()?;
    if dims.last() != Some(&STYLE_DIM) {
        return Err(format!("a voice's shape ends with {STYLE_DIM}, this one is {dims:?}"));
    }
    let count: usize = dims.iter().product();
    let (size, read): (usize, fn(&[u8]) -> f32) = match descr {
        "<f4" | "|f4" => (4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        "<f8" => (8, |b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32),
        other => return Err(format!("a voice holds little-endian floats (<f4), this one {other}")),
    };
    let data =
        data.get(..count * size).ok_or_else(|| format!(".npy data is short: {dims:?} needs {} bytes", count * size))?;
    Ok(data.chunks_exact(size).map(read).collect())
}

/// The floats of a `.pt` voice: a `torch.save` file of one float tensor (f32; f64, f16 or bf16
/// converted) whose last dimension is [`STYLE_DIM`], or of a dict holding one such tensor.
pub fn read_pt(bytes: &[u8]) -> Result<Vec<f32>, String> {
    let tensors = super::torchfile::read(bytes)?;
    let [(_, tensor)] = &tensors[..] else {
        let names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).take(4).collect();
        return Err(format!("a voice file holds one tensor, this one {} ({names:?}...)", tensors.len()));
    };
    if !tensor.dtype.is_float() {
        return Err(format!("a voice holds floats, this one {:?}", tensor.dtype));
    }
    if tensor.shape.last() != Some(&STYLE_DIM) {
        return Err(format!(
            "a voice's shape is [510, 1, {STYLE_DIM}] (rows of {STYLE_DIM}), this one is {:?}",
            tensor.shape
        ));
    }
    Ok(tensor.to_f32())
}

/// The text after `'key':` in a Python dict literal, up to the end.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

fn take<const N: usize>(bytes: &[u8]) -> Result<[u8; N], String> {
    bytes.get(..N).and_then(|b| b.try_into().ok()).ok_or_else(|| "truncated file".to_owned())
}

/// Every file of a zip archive (an `.npz`), by name: stored or deflated entries; sizes and
/// offsets from the central directory, zip64 where the 32-bit fields say so.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    unzip(&bytes)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// An .npy file of `data` with `shape`, as numpy writes it (version 1, padded header).
    fn npy(shape: &[usize], data: &[f32]) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
        let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for x in data {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// A zip of `files`, each stored or deflated; `zip64` writes the sizes and offset in a zip64
    /// extra field of the central directory, as numpy's `force_zip64` may.
    fn zip(files: &[(&str, Vec<u8>)], deflate: bool, zip64: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data) in files {
            let stored = if deflate {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            } else {
                data.clone()
            };
            let method: u16 = if deflate { 8 } else { 0 };
            let offset = out.len() as u32;
            out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
            out.extend_from_slice(&[20, 0, 0, 0]);
            out.extend_from_slice(&method.to_le_bytes());
            out.extend_from_slice(&[0; 8]); // time, date, crc (not checked)
            out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&stored);
            let big = |v: u32| if zip64 { 0xffff_ffffu32 } else { v };
            central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            central.extend_from_slice(&[20, 0, 20, 0, 0, 0]);
            central.extend_from_slice(&method.to_le_bytes());
            central.extend_from_slice(&[0; 8]);
            central.extend_from_slice(&big(stored.len() as u32).to_le_bytes());
            central.extend_from_slice(&big(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(name.len() as u16).to_le_bytes());
            central.extend_from_slice(&(if zip64 { 28u16 } else { 0 }).to_le_bytes());
            central.extend_from_slice(&[0; 6]); // comment, disk, internal attributes
            central.extend_from_slice(&[0; 4]); // external attributes
            central.extend_from_slice(&big(offset).to_le_bytes());
            central.extend_from_slice(name.as_bytes());
            if zip64 {
                central.extend_from_slice(&1u16.to_le_bytes());
                central.extend_from_slice(&24u16.to_le_bytes());
                central.extend_from_slice(&(data.len() as u64).to_le_bytes());
                central.extend_from_slice(&(stored.len() as u64).to_le_bytes());
                central.extend_from_slice(&u64::from(offset).to_le_bytes());
            }
        }
        let cd = out.len() as u32;
        out.extend_from_slice(&central);
        out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(files.len() as u16).to_le_bytes());
        out.extend_from_slice(&(files.len() as u16).to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    fn table(rows: usize, base: f32) -> Vec<f32> {
        (0..rows * STYLE_DIM).map(|i| base + i as f32 * 0.5).collect()
    }

    #[test]
    fn npy_round_trips_and_bad_files_say_why() {
        let data = table(3, 1.0);
        assert_eq!(read_npy(&npy(&[3, 1, 256], &data)), Ok(data.clone()));
        assert_eq!(read_npy(&npy(&[3, 256], &data)), Ok(data.clone()));
        let err = read_npy(&npy(&[3, 128, 2], &data)).unwrap_err();
        assert!(err.contains("shape ends with 256"), "{err}");
        let mut short = npy(&[3, 1, 256], &data);
        short.truncate(short.len() - 4);
        assert!(read_npy(&short).unwrap_err().contains("short"));
        assert!(read_npy(b"PK\x03\x04").unwrap_err().contains("magic"));
    }

    #[test]
    fn npz_stored_deflated_and_zip64() {
        let a = npy(&[2, 1, 256], &table(2, 0.0));
        let b = npy(&[2, 1, 256], &table(2, 7.0));
        for (deflate, zip64) in [(false, false), (true, false), (false, true), (true, true)] {
            let files = unzip(&zip(&[("af_one.npy", a.clone()), ("bm_two.npy", b.clone())], deflate, zip64))
                .unwrap_or_else(|e| panic!("{deflate} {zip64}: {e}"));
            assert_eq!(files, vec![("af_one.npy".to_owned(), a.clone()), ("bm_two.npy".to_owned(), b.clone())]);
        }
        assert!(unzip(b"not a zip at all, not at all").is_err());
    }

    #[test]
    fn a_directory_of_voices_as_users_have_it() {
        let dir = std::env::temp_dir().join(format!("kokoro-voices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("voices")).unwrap();
        let bundle = zip(
            &[
                ("af_heart.npy", npy(&[4, 1, 256], &table(4, 0.0))),
                ("bm_lewis.npy", npy(&[4, 1, 256], &table(4, 1.0))),
                ("jf_alpha.npy", npy(&[4, 1, 256], &table(4, 2.0))),
            ],
            false,
            false,
        );
        std::fs::write(dir.join(VOICES_BIN), bundle).unwrap();
        // A voice of its own replaces the bundle's of the same name; a broken file is skipped.
        std::fs::write(dir.join("voices/af_heart.npy"), npy(&[4, 1, 256], &table(4, 9.0))).unwrap();
        std::fs::write(dir.join("zf_xiaobei.npy"), npy(&[4, 256], &table(4, 3.0))).unwrap();
        std::fs::write(dir.join("broken.npy"), b"\x93NUMPY").unwrap();
        std::fs::write(dir.join(INT8_MODEL), b"x").unwrap();
        let files = scan(&dir);
        let names: Vec<&str> = files.voices.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["af_heart", "bm_lewis", "jf_alpha", "zf_xiaobei"]);
        let languages: Vec<_> = files.voices.iter().map(|v| v.language).collect();
        assert_eq!(languages, [Some("en-US"), Some("en-GB"), Some("ja"), Some("zh-CN")]);
        assert_eq!(files.voices[0].pack.style(0)[0], 9.0);
        assert_eq!(files.voices[1].description(), "Lewis (British English, male)");
        assert_eq!(files.skipped.len(), 1, "{:?}", files.skipped);
        assert!(files.skipped[0].contains("broken.npy"), "{:?}", files.skipped);
        assert_eq!(files.model(true), Some(dir.join(INT8_MODEL).as_path()));
        assert_eq!(files.fp32, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn style_rows_and_mixes() {
        let a = VoicePack::new(table(3, 0.0)).unwrap();
        let b = VoicePack::new(table(3, 3.0)).unwrap();
        assert_eq!(a.style(1)[0], 128.0);
        // Longer inputs take the last row.
        assert_eq!(a.style(99), a.style(2));
        let mix = VoicePack::mix(&[(&a, 2.0), (&b, 1.0)]).unwrap();
        assert_eq!(mix.style(0)[0], 1.0);
        assert_eq!(mix.style(2)[5], (2.0 * a.style(2)[5] + b.style(2)[5]) / 3.0);
        let short = VoicePack::new(table(2, 0.0)).unwrap();
        assert!(VoicePack::mix(&[(&a, 1.0), (&short, 1.0)]).is_err());
        assert!(VoicePack::new(vec![0.0; 255]).is_err());
    }

    /// The packaged voices (scripts/setup-voice.sh kokoro), when set up.
    #[test]
    fn the_packaged_japanese_voices() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/kokoro");
        if !dir.join("voices_ja.npz").is_file() {
            eprintln!("skipped: run scripts/setup-voice.sh kokoro");
            return;
        }
        let files = scan(&dir);
        let names: Vec<&str> = files.voices.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]);
        assert!(files.voices.iter().all(|v| v.pack.rows() == 510 && v.language == Some("ja")));
        assert!(files.int8.is_some());
    }
}
