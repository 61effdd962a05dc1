// espeak-phonemes: speechstream's espeak-ng helper. Copyright the speechstream authors.
//
// This program is free software: you can redistribute it and/or modify it under the terms of the
// GNU General Public License as published by the Free Software Foundation, either version 3 of the
// License, or (at your option) any later version. It loads libespeak-ng (GPL-3.0-or-later).
//
// This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY;
// without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the
// GNU General Public License for more details: <https://www.gnu.org/licenses/>.

//! Text to IPA phonemes with espeak-ng, one line at a time, as phonemizer's espeak backend gives
//! them to misaki's `EspeakG2P` (`EspeakBackend(language, with_stress=True, tie='^',
//! language_switch='remove-flags')`, for one line of text that holds no punctuation mark of
//! phonemizer's list: the caller splits those off, as `preserve_punctuation=True` does).
//!
//! Protocol (UTF-8, one line each way):
//!
//! - request `LANG<TAB>TEXT\n`: LANG an espeak language code as phonemizer takes it (`es`,
//!   `fr-fr`, `hi`, `it`, `pt-br`, `en-us`, ...), TEXT the text (tabs and line breaks as spaces).
//!   Answer: the phonemes of the whole text, words separated by single spaces as phonemizer's
//!   `_postprocess_line` leaves them (less its trailing word separator); an empty line when
//!   espeak gives none.
//! - request `piper:VOICE<TAB>TEXT\n`: Piper's mode ([`piper`]): the text's clauses as piper-tts's
//!   `espeakbridge.get_phonemes` gives them, each `END<TAB>TERMINATOR<TAB>EOS<TAB>PHONEMES`
//!   (TEXT escaped: `\\` `\n` `\r` `\t`; README.md has the details).
//! - request `<TAB>\n` (empty LANG): answer `espeak-ng VERSION DATA_PATH` (a probe).
//! - any failure: `!message` (the helper goes on serving).
//!
//! The library is Debian's `libespeak-ng.so.1`, or the build `--library PATH` names (with its
//! data: `--data DIR`), loaded at start-up ([`library`]).
//!
//! What it does per request, as phonemizer 3.3 (phonemizer-fork) does: the voice is the first of
//! `espeak_ListVoices` whose first language is LANG (set again only when LANG changes);
//! `espeak_TextToPhonemes` in IPA mode with the tie U+0361 (`espeakPHONEMES_IPA |
//! espeakPHONEMES_TIE | 0x361 << 8`) is called clause after clause until the text is used up, the
//! clauses joined by spaces; then the line is stripped, line breaks made spaces, double spaces
//! halved, `_` runs squeezed and `_ ` made a space, language switch flags (`(en)`) removed, and
//! each space-separated word stripped with its ties written `^`.

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use library::Library;

mod library;
mod piper;
mod python;

/// `espeak_AUDIO_OUTPUT::AUDIO_OUTPUT_SYNCHRONOUS`, as phonemizer initialises espeak.
const AUDIO_OUTPUT_SYNCHRONOUS: c_int = 0x02;
/// `espeakINITIALIZE_DONT_EXIT`: report missing data instead of exiting.
const INITIALIZE_DONT_EXIT: c_int = 0x8000;
/// `espeakCHARS_UTF8`.
const CHARS_UTF8: c_int = 1;
/// `espeakPHONEMES_IPA`.
const PHONEMES_IPA: c_int = 0x02;
/// `espeakPHONEMES_TIE`.
const PHONEMES_TIE: c_int = 0x80;
/// The tie character phonemizer asks espeak for (U+0361 COMBINING DOUBLE INVERTED BREVE).
const TIE: char = '\u{361}';

/// The espeak library, initialised, and the voice set last.
struct Espeak {
    lib: Library,
    /// Language code -> voice identifier (the first voice listing it first), built once.
    voices: Option<Vec<(String, String)>>,
    /// The language whose voice is set.
    current: Option<String>,
}

/// What the command line chose: the library and its data.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    /// `--library PATH`: the espeak-ng library (None: [`library::DEFAULT`]).
    library: Option<PathBuf>,
    /// `--data DIR`: its espeak-ng-data directory (None: `espeak-ng-data` beside a `--library`
    /// when there is one, else espeak-ng's own choice: `ESPEAK_DATA_PATH`, else its built-in
    /// path).
    data: Option<PathBuf>,
}

const USAGE: &str = "usage: espeak-phonemes [--library PATH] [--data DIR]

Reads requests on stdin, one a line, and answers each on stdout (README.md):
  LANG<TAB>TEXT          the IPA of TEXT in espeak language LANG
  piper:VOICE<TAB>TEXT   TEXT's clauses as piper-tts reads them
  <TAB>                  espeak-ng VERSION DATA_PATH

  --library PATH  the espeak-ng library to load (default: libespeak-ng.so.1, Debian's), e.g.
                  piper-tts's espeakbridge.so
  --data DIR      its espeak-ng-data directory (default: espeak-ng-data beside --library's
                  file if there is one, else ESPEAK_DATA_PATH or the library's built-in path)";

impl Options {
    /// The options of the command line (without the program's name); Err: what to print, and
    /// whether that is an error.
    fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, (String, bool)> {
        let mut out = Options::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
            let (name, inline) = match text.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(PathBuf::from(v))),
                _ => (text.to_string(), None),
            };
            let slot = match name.as_str() {
                "--library" => &mut out.library,
                "--data" => &mut out.data,
                "-h" | "--help" => return Err((USAGE.to_string(), false)),
                _ => return Err((format!("espeak-phonemes: unknown argument {text:?}\n{USAGE}"), true)),
            };
            let value = match inline {
                Some(v) => v,
                None => args
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| (format!("espeak-phonemes: {name} needs a value"), true))?,
            };
            *slot = Some(value);
        }
        Ok(out)
    }

    /// The data directory to give espeak_Initialize, made absolute (None: espeak-ng's own
    /// choice).
    fn data(&self) -> Option<PathBuf> {
        let data = match &self.data {
            Some(d) => d.clone(),
            None => {
                let beside = self.library.as_ref()?.parent()?.join("espeak-ng-data");
                beside.is_dir().then_some(beside)?
            }
        };
        Some(std::fs::canonicalize(&data).unwrap_or(data))
    }
}

impl Espeak {
    fn new(options: &Options) -> Result<Espeak, String> {
        let path = options.library.as_deref().unwrap_or(Path::new(library::DEFAULT));
        let lib = Library::open(path).map_err(|e| {
            if options.library.is_none() {
                format!("{e} (apt-get install libespeak-ng1 espeak-ng-data)")
            } else {
                e
            }
        })?;
        let data = options.data();
        let c_data = match &data {
            Some(d) => Some(
                CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| "a data path holds no NUL".to_string())?,
            ),
            None => None,
        };
        // SAFETY: called once, before any other espeak function; the path is null (espeak finds
        // its data: ESPEAK_DATA_PATH, else its compiled-in directory) or a NUL-terminated string
        // that outlives the call (espeak copies it).
        let rate = unsafe {
            (lib.initialize)(
                AUDIO_OUTPUT_SYNCHRONOUS,
                0,
                c_data.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
                INITIALIZE_DONT_EXIT,
            )
        };
        if rate <= 0 {
            return Err(match data {
                Some(d) => {
                    format!("espeak-ng ({}) could not be initialised with the data in {}", path.display(), d.display())
                }
                None => {
                    "espeak-ng could not be initialised: its data is missing (apt-get install espeak-ng-data)".into()
                }
            });
        }
        Ok(Espeak { lib, voices: None, current: None })
    }

    fn info(&self) -> String {
        let mut data: *const c_char = std::ptr::null();
        // SAFETY: espeak is initialised; both strings are static in the library.
        let version = unsafe { (self.lib.info)(&mut data) };
        let version = if version.is_null() { "?".into() } else { unsafe { cstr(version) } };
        let data = if data.is_null() { "?".into() } else { unsafe { cstr(data) } };
        format!("espeak-ng {version} {data}")
    }

    /// phonemizer's `EspeakWrapper.set_voice` (espeak voices, not mbrola).
    fn set_voice(&mut self, language: &str) -> Result<(), String> {
        if self.current.as_deref() == Some(language) {
            return Ok(());
        }
        let lib = &self.lib;
        let voices = self.voices.get_or_insert_with(|| list_voices(lib));
        let Some((_, identifier)) = voices.iter().find(|(l, _)| l == language) else {
            return Err(format!("invalid voice code \"{language}\""));
        };
        let name = CString::new(identifier.as_str()).map_err(|e| e.to_string())?;
        self.current = None;
        // SAFETY: espeak is initialised; `name` is a NUL-terminated string that outlives the call.
        if unsafe { (self.lib.set_voice_by_name)(name.as_ptr()) } != 0 {
            return Err(format!("failed to load voice \"{language}\""));
        }
        self.current = Some(language.to_string());
        Ok(())
    }

    /// phonemizer's `EspeakWrapper.text_to_phonemes(text, tie=True)`: each clause's phonemes,
    /// joined by spaces.
    fn text_to_phonemes(&self, text: &str) -> String {
        let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
        let mut ptr: *const c_void = text.as_ptr().cast();
        let mode = PHONEMES_IPA | PHONEMES_TIE | ((TIE as c_int) << 8);
        let mut out: Vec<String> = Vec::new();
        // espeak moves `ptr` on by at least a clause per call and sets it null at the end; the cap
        // only guards against a library that would not.
        let mut calls = 0usize;
        while !ptr.is_null() && calls <= text.as_bytes().len() + 1 {
            calls += 1;
            // SAFETY: a voice is set; `ptr` points into `text` (NUL-terminated, alive for the whole
            // loop), and espeak leaves it there or null; the result is espeak's static buffer,
            // copied before the next call.
            let ps = unsafe { (self.lib.text_to_phonemes)(&mut ptr, CHARS_UTF8, mode) };
            if !ps.is_null() {
                let s = unsafe { cstr(ps) };
                if !s.is_empty() {
                    out.push(s);
                }
            }
        }
        out.join(" ")
    }
}

/// A C string of espeak's, as UTF-8 (invalid bytes replaced).
///
/// # Safety
/// `p` is a valid NUL-terminated string.
unsafe fn cstr(p: *const c_char) -> String {
    // SAFETY: as the caller promises.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Every voice's first language and identifier, in espeak's order (phonemizer's
/// `available_voices`).
fn list_voices(lib: &Library) -> Vec<(String, String)> {
    let mut out = Vec::new();
    // SAFETY: espeak is initialised; the list is a null-terminated array of voices that espeak
    // keeps until the next call of espeak_ListVoices.
    unsafe {
        let list = (lib.list_voices)(std::ptr::null_mut());
        if list.is_null() {
            return out;
        }
        let mut i = 0;
        while !(*list.add(i)).is_null() {
            let v = &**list.add(i);
            i += 1;
            if v.languages.is_null() || v.identifier.is_null() {
                continue;
            }
            // The languages field starts with a priority byte; phonemizer reads up to the first
            // NUL and drops that byte.
            let first = CStr::from_ptr(v.languages).to_bytes();
            let language = String::from_utf8_lossy(first.get(1..).unwrap_or_default()).into_owned();
            let identifier = cstr(v.identifier);
            if !out.iter().any(|(l, _)| *l == language) {
                out.push((language, identifier));
            }
        }
    }
    out
}

/// phonemizer's `BaseLanguageSwitch._ESPEAK_FLAGS_RE` (`\(.+?\)`) matches removed.
fn remove_flags(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '(' {
            // `.+?`: at least one char, then the first ')' after it.
            if let Some(k) = chars.iter().skip(i + 2).position(|&c| c == ')') {
                i += 2 + k + 1;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// phonemizer's `EspeakBackend._postprocess_line` with stress kept, tie '^', 'remove-flags',
/// the default separator (words by ' ', no phone separator), without its trailing word separator.
fn postprocess(line: &str) -> String {
    let line = line.trim().replace('\n', " ").replace("  ", " ");
    // re.sub(r'_+', '_', line)
    let mut squeezed = String::with_capacity(line.len());
    for c in line.chars() {
        if !(c == '_' && squeezed.ends_with('_')) {
            squeezed.push(c);
        }
    }
    let line = remove_flags(&squeezed.replace("_ ", " "));
    if line.is_empty() {
        return String::new();
    }
    line.split(' ').map(|w| w.trim().replace(TIE, "^")).collect::<Vec<_>>().join(" ")
}

/// One request line's answer.
fn answer(espeak: &mut Result<Espeak, String>, line: &str) -> String {
    let espeak = match espeak {
        Ok(e) => e,
        Err(e) => return format!("!{e}"),
    };
    if let Some(rest) = line.strip_prefix(piper::PREFIX) {
        return piper::answer(espeak, rest);
    }
    let (language, text) = line.split_once('\t').unwrap_or((line, ""));
    let language = language.trim();
    if language.is_empty() {
        return espeak.info();
    }
    if let Err(e) = espeak.set_voice(language) {
        return format!("!{e}");
    }
    let text = text.replace(['\t', '\r', '\n'], " ");
    postprocess(&espeak.text_to_phonemes(&text)).replace(['\r', '\n'], " ")
}

fn main() {
    let options = match Options::parse(std::env::args_os().skip(1)) {
        Ok(o) => o,
        Err((message, error)) => {
            if error {
                eprintln!("{message}");
                std::process::exit(2);
            }
            println!("{message}");
            return;
        }
    };
    let mut espeak = Espeak::new(&options);
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match input.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.strip_suffix('\n').unwrap_or(&line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let reply = answer(&mut espeak, line);
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_removed_as_phonemizer_removes_them() {
        assert_eq!(remove_flags("ʒɛm lə (en)fʊtbɔːl(fr)"), "ʒɛm lə fʊtbɔːl");
        assert_eq!(remove_flags("a () b)"), "a ");
        assert_eq!(remove_flags("a (b"), "a (b");
    }

    #[test]
    fn options_name_the_library_and_its_data() {
        let parse = |args: &[&str]| Options::parse(args.iter().map(OsString::from));
        assert_eq!(parse(&[]), Ok(Options::default()));
        assert_eq!(
            parse(&["--library", "/x/espeakbridge.so", "--data=/x/data"]),
            Ok(Options { library: Some("/x/espeakbridge.so".into()), data: Some("/x/data".into()) })
        );
        assert!(parse(&["--library"]).is_err_and(|(_, error)| error));
        assert!(parse(&["--bogus"]).is_err_and(|(_, error)| error));
        assert!(parse(&["--help"]).is_err_and(|(_, error)| !error));
        // No --data: espeak-ng-data beside the library, when there is one.
        let options = Options { library: Some("/nonexistent/espeakbridge.so".into()), data: None };
        assert_eq!(options.data(), None);
    }

    #[test]
    fn python_symbols_are_exported() {
        let list = include_str!("../python-symbols.list");
        let listed: Vec<&str> =
            list.lines().filter_map(|l| l.trim().strip_suffix(';')).filter(|l| !l.starts_with('}')).collect();
        assert_eq!(listed, python::NAMES);
        extern "C" {
            fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        }
        for name in python::NAMES {
            let c = CString::new(name).unwrap();
            // SAFETY: RTLD_DEFAULT (null) looks the name up among the loaded objects.
            assert!(!unsafe { dlsym(std::ptr::null_mut(), c.as_ptr()) }.is_null(), "{name} is not exported");
        }
    }

    #[test]
    fn lines_are_postprocessed_as_phonemizer_does() {
        assert_eq!(postprocess(" ˈola  kˈomo\n"), "ˈola kˈomo");
        assert_eq!(postprocess("a__ b"), "a b");
        assert_eq!(postprocess("t\u{361}ʃa (en)x(es)"), "t^ʃa x");
        assert_eq!(postprocess("(en)"), "");
        assert_eq!(postprocess("a   b"), "a  b");
    }
}
