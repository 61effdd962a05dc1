//! The espeak-ng front end: text to phonemes for every language espeak-ng reads (Kokoro's
//! Spanish, French, Hindi, Italian and Brazilian Portuguese; Piper's voices next), as misaki
//! 0.9.4's `EspeakG2P` gives them to hexgrad's kokoro (through phonemizer's espeak backend).
//!
//! espeak-ng is GPL-3.0-or-later and this crate is Apache-2.0, so espeak-ng is kept at arm's
//! length: it runs in a separate program, `espeak-phonemes` (tools/espeak-phonemes,
//! GPL-3.0-or-later, built by scripts/setup.sh), which this module starts once and talks to over
//! its stdin and stdout, one line each way (`LANG<TAB>TEXT` -> the IPA of the text, or `!error`).
//! Nothing here links or includes espeak-ng. The helper loads Debian's libespeak-ng (1.51) by
//! default, or another build of espeak-ng named by an [`EspeakLibrary`](crate::espeak::EspeakLibrary)
//! (piper-tts's, for Piper's voices: [`Espeak::for_piper`](crate::espeak::Espeak::for_piper)).
//! Without the helper or the library, [`Espeak::available`](crate::espeak::Espeak::available)
//! and every call say so, naming the Debian package and the set-up script; the rest of the
//! server is unaffected.
//!
//! What is done on this side, as phonemizer and misaki do it:
//! - misaki's `EspeakG2P.__call__`: `«»` become curly quotes and `()` become `«»`, and back at
//!   the end; the tied pairs become Kokoro's one-char phonemes (`a^ɪ`→`I`, `t^ʃ`→`ʧ`, ...);
//!   every other `^` and `-` is deleted;
//! - phonemizer's `preserve_punctuation=True` (`preserve`, `restore` below): runs of its
//!   punctuation marks (`;:,.!?¡¿—…"«»“”(){}[]` with the spaces around them) are split off, each
//!   piece between them is phonemised on its own (one request to the helper), and the marks are
//!   put back where they were;
//! - the helper does the rest: voice choice, `espeak_TextToPhonemes` clause by clause (IPA,
//!   stress, tie), language switch flags removed, the line cleaned as phonemizer cleans it.
//!
//! Characters outside Kokoro's vocabulary are left in the string, as misaki leaves them (the
//! model's tokeniser drops them). No English text normalisation runs here: espeak-ng reads
//! numbers, dates, times and symbols in each language's own way.
//! [`Espeak::sentences`](crate::espeak::Espeak::sentences) takes out markup first
//! ([`strip_markup`](crate::espeak::strip_markup): fenced code blocks, markdown markers, links'
//! targets, HTML tags, emoji), each char replaced by a space so that offsets hold; URLs and
//! e-mail addresses are left for espeak-ng to read (in the language's own words).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use unicode_normalization::UnicodeNormalization;

use super::{chunk_sentences, split, Sentence, Word};

/// The helper program's file name.
pub const HELPER: &str = "espeak-phonemes";

/// The environment variable naming the helper program (a path).
pub const HELPER_ENV: &str = "SPEECHSTREAM_ESPEAK_PHONEMES";

/// Where set-up builds the helper, relative to the repository root.
pub const HELPER_PATH: &str = "tools/espeak-phonemes/target/release/espeak-phonemes";

/// Where set-up (`scripts/setup-voice.sh espeak-piper`) puts piper-tts 1.8.0's own espeak-ng
/// build (1.52.0.1) and data, in its cache (`.cache/` in the checkout, or `$SPEECHSTREAM_CACHE`):
/// [`PIPER_LIBRARY_FILE`] and `espeak-ng-data/`.
pub const PIPER_LIBRARY_DIR: &str = "espeak-piper";

/// The library's file in [`PIPER_LIBRARY_DIR`]: piper-tts's `espeakbridge.so`, a Python
/// extension that holds espeak-ng and exports its C API (the helper gives it the few Python
/// symbols it names).
pub const PIPER_LIBRARY_FILE: &str = "espeakbridge.so";

/// The environment variable naming set-up's cache directory (default: the checkout's `.cache`).
pub const CACHE_ENV: &str = "SPEECHSTREAM_CACHE";

/// The Debian package that brings espeak-ng (its program, library `libespeak-ng1` and data
/// `espeak-ng-data`).
pub const DEBIAN_PACKAGE: &str = "espeak-ng";

/// Kokoro's language codes read with espeak-ng and the espeak language each stands for (kokoro
/// 0.9.4's `LANG_CODES`).
pub const KOKORO_LANGUAGES: [(char, &str); 5] = [('e', "es"), ('f', "fr-fr"), ('h', "hi"), ('i', "it"), ('p', "pt-br")];

/// phonemizer's default punctuation marks (`Punctuation.default_marks()`).
const MARKS: &str = ";:,.!?¡¿—…\"«»“”(){}[]";

/// misaki's `EspeakG2P.e2m` (version 1.0): tied pairs to Kokoro's phonemes.
const E2M: [(&str, &str); 11] = [
    ("a^ɪ", "I"),
    ("a^ʊ", "W"),
    ("d^z", "ʣ"),
    ("d^ʒ", "ʤ"),
    ("e^ɪ", "A"),
    ("o^ʊ", "O"),
    ("ə^ʊ", "Q"),
    ("s^s", "S"),
    ("t^s", "ʦ"),
    ("t^ʃ", "ʧ"),
    ("ɔ^ɪ", "Y"),
];

/// Abbreviations after which a full stop does not end a sentence (Spanish, French, Italian,
/// Portuguese, English).
const TITLES: &[&str] = &[
    "Sr", "Sra", "Srta", "Sres", "Dr", "Dra", "Drs", "Prof", "Profa", "Ing", "Lic", "Arq", "Av", "Avda", "Ud", "Uds",
    "Vd", "Vds", "Dña", "Sto", "Sta", "St", "Ste", "M", "MM", "Mme", "Mmes", "Mlle", "Mlles", "Me", "Pr", "Mgr", "Sig",
    "Sigg", "Dott", "Avv", "Arch", "Geom", "Rag", "On", "Gen", "Col", "Cap", "Mr", "Mrs", "Ms", "Jr", "pág", "págs",
    "núm", "tel", "art", "vol", "nº", "p", "pp", "cf", "ca",
];

/// How long the helper may take to answer before it is taken for hung, killed (and restarted
/// once): an answer takes well under a millisecond a sentence.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A build of espeak-ng for the helper to load instead of Debian's libespeak-ng, and its data:
/// the helper runs `espeak-phonemes --library LIBRARY --data DATA`.
///
/// The helper (GPL, a separate program) loads it; this crate only passes the two paths on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspeakLibrary {
    /// The shared library: any file that exports espeak-ng's C API (`espeak_Initialize`,
    /// `espeak_TextToPhonemes`, ...), e.g. piper-tts's `espeakbridge.so`.
    pub library: PathBuf,
    /// Its `espeak-ng-data` directory (of the same espeak-ng version).
    pub data: PathBuf,
}

impl EspeakLibrary {
    /// The library at `library` with its data in `data`.
    pub fn new(library: impl Into<PathBuf>, data: impl Into<PathBuf>) -> EspeakLibrary {
        EspeakLibrary { library: library.into(), data: data.into() }
    }

    /// piper-tts's build as set-up lays it out in `dir` (a [`PIPER_LIBRARY_DIR`]):
    /// [`PIPER_LIBRARY_FILE`], `espeak-ng-data/` and set-up's `.complete` marker; Err says what
    /// is missing.
    pub fn in_dir(dir: impl AsRef<Path>) -> Result<EspeakLibrary, String> {
        let dir = dir.as_ref();
        let found = EspeakLibrary::new(dir.join(PIPER_LIBRARY_FILE), dir.join("espeak-ng-data"));
        if dir.join(".complete").is_file() && found.library.is_file() && found.data.is_dir() {
            Ok(found)
        } else {
            Err(format!(
                "{} does not hold piper-tts's espeak-ng build ({PIPER_LIBRARY_FILE}, espeak-ng-data/ and .complete): \
                 run scripts/setup.sh (or scripts/setup-voice.sh espeak-piper)",
                dir.display()
            ))
        }
    }

    /// piper-tts's build where set-up put it, found as the helper program is: the first of
    /// `$SPEECHSTREAM_CACHE/espeak-piper`, `.cache/espeak-piper` above the running program (as in
    /// a checkout: `target/release/speechstream`) and `./.cache/espeak-piper` that holds it
    /// ([`EspeakLibrary::in_dir`]). Err says where it looked.
    pub fn find_piper() -> Result<EspeakLibrary, String> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(cache) = std::env::var_os(CACHE_ENV) {
            candidates.push(PathBuf::from(cache).join(PIPER_LIBRARY_DIR));
        }
        if let Ok(exe) = std::env::current_exe() {
            let exe = exe.canonicalize().unwrap_or(exe);
            candidates.extend(exe.ancestors().skip(1).take(5).map(|d| d.join(".cache").join(PIPER_LIBRARY_DIR)));
        }
        candidates.push(Path::new(".cache").join(PIPER_LIBRARY_DIR));
        candidates.iter().find_map(|d| EspeakLibrary::in_dir(d).ok()).ok_or_else(|| {
            format!(
                "piper-tts's espeak-ng build was not found (looked in {}): run scripts/setup.sh (or \
                 scripts/setup-voice.sh espeak-piper)",
                candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// The espeak-ng front end: the helper program, started on first use and kept running.
pub struct Espeak {
    /// The helper given by the caller, if any.
    program: Option<PathBuf>,
    /// The espeak-ng build the helper loads (None: Debian's).
    library: Option<EspeakLibrary>,
    helper: Mutex<Option<Helper>>,
    titles: HashSet<String>,
    /// [`TIMEOUT`], or what [`Espeak::with_timeout`] set.
    timeout: Duration,
}

/// A running helper's watchdog: it kills the helper when a request has waited past the timeout,
/// so that a hung espeak-ng costs that request an error, not a worker forever.
struct Watchdog {
    /// When the request being answered was sent.
    busy_since: Mutex<Option<Instant>>,
    /// Cleared when the helper is dropped: the watchdog's thread then ends.
    alive: AtomicBool,
    /// Set when it killed the helper.
    fired: AtomicBool,
    timeout: Duration,
}

/// A running helper.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// What it wrote on stderr (the last few kB), read by a thread.
    stderr: Arc<Mutex<String>>,
    stderr_thread: Option<JoinHandle<()>>,
    program: PathBuf,
    watchdog: Arc<Watchdog>,
    watchdog_thread: Option<JoinHandle<()>>,
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.watchdog.alive.store(false, Ordering::Relaxed);
        if let Some(t) = self.watchdog_thread.take() {
            let _ = t.join();
        }
        // Closing its stdin ends it; kill it in case it is stuck.
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
    }
}

/// What to do to get the helper.
fn set_up_hint() -> String {
    format!(
        "run scripts/setup.sh (it installs Debian's {DEBIAN_PACKAGE}, libespeak-ng1 and espeak-ng-data, and \
         builds {HELPER_PATH}), or point {HELPER_ENV} at the helper"
    )
}

impl Default for Espeak {
    fn default() -> Espeak {
        Espeak::new()
    }
}

impl Espeak {
    /// The front end with the helper found on first use: `$SPEECHSTREAM_ESPEAK_PHONEMES`, else
    /// `tools/espeak-phonemes/target/release/espeak-phonemes` above the running program (as in a
    /// checkout: `target/release/speechstream`) or under the working directory, else
    /// `espeak-phonemes` on `PATH`.
    pub fn new() -> Espeak {
        Espeak {
            program: None,
            library: None,
            helper: Mutex::new(None),
            titles: TITLES.iter().map(|t| t.to_string()).collect(),
            timeout: TIMEOUT,
        }
    }

    /// The same with another limit on the helper's answers ([`TIMEOUT`] by default).
    pub fn with_timeout(mut self, timeout: Duration) -> Espeak {
        self.timeout = timeout;
        self
    }

    /// The front end with the helper at `program`.
    pub fn with_program(program: impl Into<PathBuf>) -> Espeak {
        Espeak { program: Some(program.into()), ..Espeak::new() }
    }

    /// The same with the helper loading `library` (and its data) instead of Debian's
    /// libespeak-ng. Set it before the first request (a running helper keeps its library).
    pub fn with_library(mut self, library: EspeakLibrary) -> Espeak {
        self.library = Some(library);
        self
    }

    /// The espeak-ng build the helper loads: None for Debian's libespeak-ng.
    pub fn library(&self) -> Option<&EspeakLibrary> {
        self.library.as_ref()
    }

    /// The front end for Piper's voices ([`crate::piper`]): the helper found as by
    /// [`Espeak::new`], loading piper-tts's build when set-up put it there
    /// ([`Espeak::with_piper_library`]).
    pub fn for_piper() -> Espeak {
        Espeak::new().with_piper_library()
    }

    /// The same with the helper loading piper-tts's own espeak-ng build (1.52.0.1, with its data)
    /// when set-up put it there ([`EspeakLibrary::find_piper`]), else Debian's libespeak-ng (as
    /// before): `Espeak::with_program(p).with_piper_library()` for a helper of the caller's.
    ///
    /// With piper-tts's build every sentence of text/tests/piper reads exactly as piper-tts 1.8.0
    /// reads it. Debian 12's espeak-ng 1.51 is a fallback: it reads some words differently
    /// (sentences identical to piper-tts's there: en-us 32/49, de 31/48, es 37/46, fr 43/46,
    /// ru 18/45), and Piper's voices then sound a little off on those words.
    pub fn with_piper_library(self) -> Espeak {
        match EspeakLibrary::find_piper() {
            Ok(library) => self.with_library(library),
            Err(_) => self,
        }
    }

    /// The helper program's path, or why there is none.
    pub fn program(&self) -> Result<PathBuf, String> {
        if let Some(p) = &self.program {
            return if p.is_file() {
                Ok(p.clone())
            } else {
                Err(format!("espeak-ng's helper {} was not found: {}", p.display(), set_up_hint()))
            };
        }
        if let Some(p) = std::env::var_os(HELPER_ENV) {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(format!("{HELPER_ENV}={}: no such file: {}", p.display(), set_up_hint()))
            };
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Ok(exe) = std::env::current_exe() {
            let exe = exe.canonicalize().unwrap_or(exe);
            candidates.extend(exe.ancestors().skip(1).take(5).map(|d| d.join(HELPER_PATH)));
        }
        candidates.push(PathBuf::from(HELPER_PATH));
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path).map(|d| d.join(HELPER)));
        }
        candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
            format!(
                "espeak-ng's helper {HELPER} was not found ({HELPER_ENV} unset, no {HELPER_PATH} above the \
                 program or here, none on PATH): {}",
                set_up_hint()
            )
        })
    }

    /// Whether espeak-ng can be used: the helper starts and its library and data load. The error
    /// says what is missing and how to get it.
    pub fn available(&self) -> Result<(), String> {
        self.version().map(|_| ())
    }

    /// The helper's answer to its probe: `espeak-ng VERSION DATA_PATH`.
    pub fn version(&self) -> Result<String, String> {
        let mut out = self.request(&["\t".to_string()])?;
        out.pop().ok_or_else(|| "espeak-ng's helper gave no answer".to_string())
    }

    /// The phonemes of `text` in `language` (an espeak language code as phonemizer takes it:
    /// `es`, `fr-fr`, `hi`, `it`, `pt-br`, ...), exactly as misaki's `EspeakG2P(language)` gives
    /// them for the same espeak-ng. Line breaks read as spaces.
    pub fn phonemize(&self, language: &str, text: &str) -> Result<String, String> {
        let chars: Vec<char> = text.chars().collect();
        let words = word_ranges(&chars);
        let out = self.run(language, &chars, &words)?;
        Ok(out.into_iter().map(|(c, _)| c).collect())
    }

    /// `text`'s sentences ([`Espeak::split_sentences`]) read in `language`, each with its words
    /// (whitespace-separated, as written) and their phonemes, cut in chunks the model takes;
    /// sentences with no phonemes are left out.
    pub fn sentences(&self, language: &str, text: &str) -> Result<Vec<Sentence>, String> {
        let mut out = Vec::new();
        let (mut counted, mut chars) = (0usize, 0usize);
        for r in self.sentence_ranges(text) {
            let sent = &text[r.clone()];
            chars += text[counted..r.start].chars().count();
            counted = r.start;
            let original: Vec<char> = sent.chars().collect();
            let clean = strip_markup(&original);
            let words = word_ranges(&original);
            let tagged = self.run(language, &clean, &words)?;
            let phonemes: String = tagged.iter().map(|t| t.0).collect();
            if phonemes.trim().is_empty() {
                continue;
            }
            let offsets: Vec<usize> = sent.char_indices().map(|(b, _)| b).chain([sent.len()]).collect();
            let spans = word_spans(&tagged, words.len());
            let words: Vec<Word> = words
                .iter()
                .zip(spans)
                .map(|(w, p)| {
                    let b = offsets[w.start]..offsets[w.end];
                    Word {
                        text: sent[b.clone()].to_string(),
                        text_range: r.start + b.start..r.start + b.end,
                        chars: chars + w.start..chars + w.end,
                        phonemes: p,
                    }
                })
                .collect();
            out.extend(chunk_sentences(text, sent, &phonemes, words));
        }
        Ok(out)
    }

    /// `text`'s sentences, as slices of it: cut after `.` `!` `?` `…` (and closing quotes) before
    /// a space and a char that is not lower case (so Spanish `¿` and `¡` open the next one), not
    /// after the usual abbreviations or an initial; after Devanagari's danda `।` and `॥`; at line
    /// breaks; and no longer than [`crate::MAX_SENTENCE_CHARS`].
    pub fn split_sentences<'a>(&self, text: &'a str) -> Vec<&'a str> {
        self.sentence_ranges(text).into_iter().map(|r| &text[r]).collect()
    }

    /// Byte ranges of [`Espeak::split_sentences`].
    fn sentence_ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for r in split::split_sentence_ranges(text, &self.titles) {
            let mut start = r.start;
            let mut chars = text[r.clone()].char_indices().map(|(i, c)| (r.start + i, c)).peekable();
            while let Some((i, c)) = chars.next() {
                if !matches!(c, '।' | '॥') {
                    continue;
                }
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = chars.peek() {
                    if matches!(d, '।' | '॥' | '"' | '”' | '’' | ')' | ']' | '»') {
                        end = j + d.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                if text[end..r.end].trim().is_empty() {
                    break;
                }
                out.push(start..end);
                start = end + text[end..r.end].len() - text[end..r.end].trim_start().len();
            }
            if !text[start..r.end].trim().is_empty() {
                out.push(start..r.end);
            }
        }
        out
    }

    /// misaki's `EspeakG2P(language)` on `chars` (the text as it is read), each output char with
    /// the index of the word of `words` (char ranges of the text) it came from.
    fn run(
        &self,
        language: &str,
        chars: &[char],
        words: &[Range<usize>],
    ) -> Result<Vec<(char, Option<usize>)>, String> {
        if language.is_empty() || language.contains(['\t', '\n', '\r']) {
            return Err(format!("espeak-ng: {language:?} is not a language code"));
        }
        let text = misaki_pre(chars);
        let (pieces, marks) = preserve(&text);
        let requests: Vec<String> = pieces
            .iter()
            .map(|p| {
                let t: String = text[p.clone()].iter().map(|&c| if c.is_control() { ' ' } else { c }).collect();
                format!("{language}\t{t}")
            })
            .collect();
        let answers = self.request(&requests)?;
        let lines: Vec<Tagged> =
            pieces.iter().zip(&answers).map(|(p, a)| tag_piece(&text, p.clone(), a, words)).collect();
        let marks: Vec<(Tagged, Position)> = marks
            .into_iter()
            .map(|(r, pos)| (r.clone().map(|i| (text[i], tag_of(words, i, text[i]))).collect(), pos))
            .collect();
        Ok(misaki_post(restore(lines, marks)))
    }

    /// Sends each request line and reads its answer, restarting the helper once if it died.
    pub(crate) fn request(&self, lines: &[String]) -> Result<Vec<String>, String> {
        let mut guard = self.helper.lock().unwrap_or_else(|e| e.into_inner());
        let mut last_error = String::new();
        for _attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(self.spawn()?);
            }
            let helper = guard.as_mut().expect("just set");
            *helper.watchdog.busy_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            let answer = exchange(helper, lines);
            *helper.watchdog.busy_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
            match answer {
                Ok(answers) => {
                    let mut out = Vec::with_capacity(answers.len());
                    for a in answers {
                        if let Some(e) = a.strip_prefix('!') {
                            return Err(format!("espeak-ng: {e}"));
                        }
                        out.push(a);
                    }
                    return Ok(out);
                }
                Err(io) => {
                    let mut dead = guard.take().expect("running");
                    last_error = died(&mut dead, &io);
                }
            }
        }
        Err(last_error)
    }

    fn spawn(&self) -> Result<Helper, String> {
        let program = self.program()?;
        let mut command = Command::new(&program);
        if let Some(l) = &self.library {
            command.arg("--library").arg(&l.library).arg("--data").arg(&l.data);
        }
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| {
                format!("espeak-ng's helper {} could not be started: {e}: {}", program.display(), set_up_hint())
            })?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_thread = child.stderr.take().map(|mut pipe| {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 8192 {
                        let cut = s.len() - 4096;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
                        s.drain(..cut);
                    }
                }
            })
        });
        let timeout = self.timeout;
        let watchdog = Arc::new(Watchdog {
            busy_since: Mutex::new(None),
            alive: AtomicBool::new(true),
            fired: AtomicBool::new(false),
            timeout,
        });
        let watched = Arc::clone(&watchdog);
        let pid = child.id();
        let watchdog_thread = std::thread::spawn(move || {
            let tick = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
            while watched.alive.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                let since = *watched.busy_since.lock().unwrap_or_else(|e| e.into_inner());
                if since.is_some_and(|t| t.elapsed() > timeout) {
                    // The blocked read then ends (end of file): the request fails, the helper is
                    // restarted once.
                    watched.fired.store(true, Ordering::Relaxed);
                    if let Ok(pid) = libc::pid_t::try_from(pid) {
                        // SAFETY: kill only sends a signal, to the child this helper owns and
                        // has not reaped yet (it is reaped in `died` or on drop, after this
                        // thread stops watching it).
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                    *watched.busy_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
            }
        });
        Ok(Helper {
            child,
            stdin,
            stdout,
            stderr,
            stderr_thread,
            program,
            watchdog,
            watchdog_thread: Some(watchdog_thread),
        })
    }
}

/// Writes the requests (in batches small enough for the pipes) and reads their answers.
fn exchange(helper: &mut Helper, lines: &[String]) -> std::io::Result<Vec<String>> {
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let mut batch = String::new();
        let mut n = 0;
        while i + n < lines.len() && (n == 0 || batch.len() + lines[i + n].len() < 16 * 1024) {
            batch.push_str(&lines[i + n]);
            batch.push('\n');
            n += 1;
        }
        let stdin = helper.stdin.as_mut().ok_or_else(|| std::io::Error::other("stdin closed"))?;
        stdin.write_all(batch.as_bytes())?;
        stdin.flush()?;
        for _ in 0..n {
            let mut answer = String::new();
            if helper.stdout.read_line(&mut answer)? == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the helper closed its output"));
            }
            let answer = answer.strip_suffix('\n').unwrap_or(&answer);
            out.push(answer.strip_suffix('\r').unwrap_or(answer).to_string());
        }
        i += n;
    }
    Ok(out)
}

/// Why a helper stopped answering, with what it said on stderr and what to do.
fn died(helper: &mut Helper, io: &std::io::Error) -> String {
    helper.stdin.take();
    let status = match helper.child.try_wait() {
        Ok(Some(s)) => Some(s),
        _ => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            helper.child.try_wait().ok().flatten()
        }
    };
    if status.is_none() {
        let _ = helper.child.kill();
        let _ = helper.child.wait();
    }
    if let Some(t) = helper.stderr_thread.take() {
        let _ = t.join();
    }
    let stderr = helper.stderr.lock().unwrap_or_else(|e| e.into_inner()).trim().to_string();
    let what = match status {
        _ if helper.watchdog.fired.load(Ordering::Relaxed) => {
            format!("did not answer within {:?} and was stopped", helper.watchdog.timeout)
        }
        Some(s) => format!("stopped ({s})"),
        None => format!("stopped answering ({io})"),
    };
    let library = if stderr.contains("libespeak-ng") {
        " (libespeak-ng is missing: apt-get install libespeak-ng1 espeak-ng-data)"
    } else {
        ""
    };
    let said = if stderr.is_empty() { String::new() } else { format!(": {stderr}") };
    format!(
        "espeak-ng's helper {} {what}{said}{library}; is Debian's {DEBIAN_PACKAGE} installed? {}",
        helper.program.display(),
        set_up_hint()
    )
}

/// Output chars, each with the index of the input word it came from (None: a space).
pub(crate) type Tagged = Vec<(char, Option<usize>)>;

/// A punctuation mark: its char range in the line and where it sits.
type Mark = (Range<usize>, Position);

/// Where a punctuation mark sits in its line (phonemizer's `_MarkIndex.position`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// At the beginning.
    B,
    /// Inside.
    I,
    /// At the end.
    E,
    /// The whole line.
    A,
}

/// misaki's `EspeakG2P.__call__` before phonemizer: angles to curly quotes, parentheses to
/// angles (one char for one).
fn misaki_pre(chars: &[char]) -> Vec<char> {
    chars
        .iter()
        .map(|&c| match c {
            '«' => '“',
            '»' => '”',
            '(' => '«',
            ')' => '»',
            c => c,
        })
        .collect()
}

/// Char ranges of the whitespace-separated words of `chars`.
pub(crate) fn word_ranges(chars: &[char]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in chars.iter().enumerate() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(s..i);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(s..chars.len());
    }
    out
}

/// The word of `words` holding char `i` (None for whitespace or outside every word).
pub(crate) fn tag_of(words: &[Range<usize>], i: usize, c: char) -> Option<usize> {
    if c.is_whitespace() {
        return None;
    }
    let k = words.partition_point(|w| w.end <= i);
    words.get(k).filter(|w| w.start <= i).map(|_| k)
}

/// phonemizer's `Punctuation.preserve` on one line: the pieces to phonemise (char ranges, none
/// empty) and the marks (char ranges, with their positions).
fn preserve(line: &[char]) -> (Vec<Range<usize>>, Vec<Mark>) {
    let is_mark = |c: char| MARKS.contains(c);
    // The matches of `(\s*[marks]+\s*)+`: maximal runs of spaces and marks holding a mark.
    let mut matches: Vec<Range<usize>> = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if !(line[i].is_whitespace() || is_mark(line[i])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && (line[i].is_whitespace() || is_mark(line[i])) {
            i += 1;
        }
        if line[start..i].iter().any(|&c| is_mark(c)) {
            matches.push(start..i);
        }
    }
    if matches.is_empty() {
        let whole = Some(0..line.len()).filter(|r| !r.is_empty());
        return (whole.into_iter().collect(), vec![]);
    }
    if matches.len() == 1 && matches[0] == (0..line.len()) {
        return (vec![], vec![(0..line.len(), Position::A)]);
    }
    let last = matches.len() - 1;
    let marks: Vec<Mark> = matches
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let group = &line[m.clone()];
            let pos = if k == 0 && line.starts_with(group) {
                Position::B
            } else if k == last && line.ends_with(group) {
                Position::E
            } else {
                Position::I
            };
            (m.clone(), pos)
        })
        .collect();
    // `line.split(mark)`: the text before the mark's first occurrence in what is left.
    let mut pieces = Vec::new();
    let mut rest = 0;
    for (m, _) in &marks {
        let group = &line[m.clone()];
        let at = (rest..=line.len() - group.len()).find(|&s| &line[s..s + group.len()] == group).unwrap_or(m.start);
        pieces.push(rest..at);
        rest = at + group.len();
    }
    pieces.push(rest..line.len());
    pieces.retain(|p| !p.is_empty());
    // The marks as they were found by `split` (the same places as the regex's).
    (pieces, marks)
}

/// A piece's phonemes as phonemizer's `_phonemize_aux` returns them (the helper's answer and
/// the word separator after it), each espeak word tagged with the input word it is taken to come
/// from.
fn tag_piece(text: &[char], piece: Range<usize>, answer: &str, words: &[Range<usize>]) -> Tagged {
    if answer.is_empty() {
        return Vec::new();
    }
    // The piece's own words, each with the input word it belongs to.
    let inputs: Vec<(Range<usize>, Option<usize>)> = word_ranges(&text[piece.clone()])
        .into_iter()
        .map(|r| {
            let r = piece.start + r.start..piece.start + r.end;
            let tag = tag_of(words, r.start, text[r.start]);
            (r, tag)
        })
        .collect();
    let outputs: Vec<&str> = answer.split(' ').collect();
    let spoken: Vec<usize> = (0..outputs.len()).filter(|&k| !outputs[k].is_empty()).collect();
    let mut owner: Vec<Option<usize>> = vec![None; outputs.len()];
    if !inputs.is_empty() {
        let written: Vec<&[char]> = inputs.iter().map(|(r, _)| &text[r.clone()]).collect();
        let said: Vec<&str> = spoken.iter().map(|&k| outputs[k]).collect();
        for (k, j) in spoken.iter().zip(align(&written, &said)) {
            owner[*k] = inputs[j].1;
        }
    }
    let mut out: Tagged = Vec::with_capacity(answer.len() + 1);
    for (k, w) in outputs.iter().enumerate() {
        if k > 0 {
            out.push((' ', None));
        }
        out.extend(w.chars().map(|c| (c, owner[k])));
    }
    out.push((' ', None));
    out
}

/// Which written word each espeak word comes from (indices into `written`, in order): the
/// monotone alignment that costs least, where a word of letters is expected to give one espeak
/// word of about its length, a word with digits or symbols (a number, a date, `km/h`) as many
/// as its reading takes, and a word of punctuation none. Never fails: when no alignment is
/// found (more espeak words than can be placed), the words are spread by length.
pub(crate) fn align(written: &[&[char]], said: &[&str]) -> Vec<usize> {
    let (n, m) = (written.len(), said.len());
    if n == 0 || m == 0 {
        return vec![0; if n == 0 { 0 } else { m }];
    }
    if n == m {
        return (0..n).collect();
    }
    let lens: Vec<f64> =
        said.iter().map(|w| w.chars().filter(|c| !matches!(c, 'ˈ' | 'ˌ' | 'ː')).count() as f64).collect();
    // Per written word: (letters only, expected phoneme chars, the most espeak words it may take).
    let kinds: Vec<(bool, f64, usize)> = written
        .iter()
        .map(|w| {
            let letters = w.iter().all(|&c| is_letter(c) || matches!(c, '\'' | '’' | '-' | '.'));
            // A run of digits reads as about this many phoneme chars ("7", "12", "612", "1987").
            let digits = |k: usize| -> f64 {
                [0.0, 4.0, 9.0, 16.0, 26.0].get(k).copied().unwrap_or(26.0 + 8.0 * k.saturating_sub(4) as f64)
            };
            let mut run = 0usize;
            let mut numbers = 0.0;
            for c in w.iter().chain([&' ']) {
                if c.is_numeric() {
                    run += 1;
                } else {
                    numbers += digits(run);
                    run = 0;
                }
            }
            let expected: f64 = numbers
                + w.iter()
                    .map(|c| {
                        if c.is_numeric() {
                            0.0
                        } else if c.is_alphabetic() {
                            1.0
                        } else if is_letter(*c) || MARKS.contains(*c) {
                            0.0
                        } else {
                            3.0
                        }
                    })
                    .sum::<f64>();
            (letters, expected, if letters { 4 } else { m })
        })
        .collect();
    let cost = |i: usize, from: usize, g: usize| -> f64 {
        let (letters, expected, _) = kinds[i];
        let len: f64 = lens[from..from + g].iter().sum();
        let ratio = ((len + 2.0) / (expected + 2.0)).ln().abs();
        if g == 0 {
            return if expected == 0.0 { 0.0 } else { 2.0 };
        }
        if letters {
            let onset = if sounds_like(written[i], said[from]) { -0.7 } else { 0.0 };
            0.5 * ratio + 1.5 * (g - 1) as f64 + onset
        } else {
            ratio + 0.1 * g as f64
        }
    };
    // best[i][k]: the least cost of the first i written words giving the first k espeak words.
    let mut best = vec![vec![f64::INFINITY; m + 1]; n + 1];
    let mut take = vec![vec![0usize; m + 1]; n + 1];
    best[0][0] = 0.0;
    for i in 0..n {
        for k in 0..=m {
            if best[i][k].is_infinite() {
                continue;
            }
            for g in 0..=kinds[i].2.min(m - k) {
                let c = best[i][k] + cost(i, k, g);
                if c < best[i + 1][k + g] {
                    best[i + 1][k + g] = c;
                    take[i + 1][k + g] = g;
                }
            }
        }
    }
    if best[n][m].is_infinite() {
        // Spread by length.
        let total: f64 = lens.iter().sum::<f64>().max(1.0);
        let mut before = 0.0;
        return lens
            .iter()
            .map(|l| {
                let at = ((before + l / 2.0) / total * n as f64) as usize;
                before += l;
                at.min(n - 1)
            })
            .collect();
    }
    let mut owner = vec![0usize; m];
    let mut k = m;
    for i in (1..=n).rev() {
        let g = take[i][k];
        owner[k - g..k].fill(i - 1);
        k -= g;
    }
    owner
}

/// Whether espeak word `said` may start with the sound of written word `written`'s first letter
/// (Latin script; a silent `h` skipped): what tells one word from the next when espeak joins
/// words ("tout le monde" -> "tulmˈɔ̃d").
fn sounds_like(written: &[char], said: &str) -> bool {
    let mut letters = written.iter().filter(|c| c.is_alphabetic()).map(|&c| {
        if let Some(l) = devanagari(c) {
            return l;
        }
        let base = std::iter::once(c).nfd().next().unwrap_or(c);
        base.to_lowercase().next().unwrap_or(base)
    });
    let Some(mut first) = letters.next() else { return false };
    if first == 'h' && !written.iter().any(|&c| devanagari(c).is_some()) {
        match letters.next() {
            Some(next) => first = next,
            None => return false,
        }
    }
    if !first.is_ascii_lowercase() {
        return false;
    }
    let Some(sound) = said.chars().find(|c| !matches!(c, 'ˈ' | 'ˌ' | '(' | '“' | '"' | '¿' | '¡')) else {
        return false;
    };
    let vowel = |c: char| "aeiouy".contains(c);
    let sounds: &str = match sound {
        'b' | 'β' => "bvw",
        'v' | 'ʋ' => "vwb",
        'p' => "p",
        't' | 'ʈ' => "tc",
        'd' | 'ɖ' => "dgj",
        'ð' => "dt",
        'k' => "ckqx",
        'ɡ' | 'ɣ' | 'g' => "gw",
        'ʤ' | 'ɟ' => "gjd",
        'θ' => "czt",
        's' | 'S' => "sczx",
        'z' => "zsx",
        'ʃ' => "csx",
        'ʧ' | 'ʦ' => "ctz",
        'ʣ' => "z",
        'ʒ' => "jg",
        'x' | 'χ' | 'h' | 'ɦ' => "jgrxh",
        'c' => "c",
        'f' => "fp",
        'm' => "m",
        'n' | 'ɲ' | 'ŋ' | 'ɳ' => "ng",
        'l' | 'ʎ' | 'ɭ' => "l",
        'r' | 'ɾ' | 'ʁ' | 'ɽ' | 'ɹ' | 'ɻ' => "rw",
        'j' | 'ʝ' => "yilhj",
        'w' => "wouh",
        c if "aeiouɐɑæʌəɛɪʊɔøœyɨɯɜɚɝɒɵɤIWAOQY".contains(c) => return vowel(first),
        _ => return false,
    };
    sounds.contains(first)
}

/// A letter, or a mark that is part of one (combining accents; Devanagari's virama and nukta).
fn is_letter(c: char) -> bool {
    c.is_alphabetic() || matches!(c, '\u{300}'..='\u{36f}' | '\u{900}'..='\u{963}' | '\u{970}'..='\u{97f}')
}

/// A Devanagari letter as the Latin letter of its sound (for [`sounds_like`]): vowels as `a`.
fn devanagari(c: char) -> Option<char> {
    Some(match c {
        'अ' | 'आ' | 'इ' | 'ई' | 'उ' | 'ऊ' | 'ऋ' | 'ए' | 'ऐ' | 'ओ' | 'औ' | 'ऑ' => 'a',
        'क' | 'ख' | '\u{958}' | '\u{959}' => 'k',
        'ग' | 'घ' | '\u{95a}' => 'g',
        'च' | 'छ' => 'c',
        'ज' | 'झ' | '\u{95b}' => 'j',
        'ट' | 'ठ' | 'त' | 'थ' => 't',
        'ड' | 'ढ' | '\u{95c}' | '\u{95d}' | 'द' | 'ध' => 'd',
        'ण' | 'न' => 'n',
        // फ़ is often written फ and a nukta.
        'प' | 'फ' => 'p',
        '\u{95e}' => 'f',
        'ब' | 'भ' => 'b',
        'म' => 'm',
        'य' => 'y',
        'र' => 'r',
        'ल' => 'l',
        'व' => 'v',
        'श' | 'ष' | 'स' => 's',
        'ह' => 'h',
        _ => return None,
    })
}

fn ends_with_space(t: &Tagged) -> bool {
    t.last().is_some_and(|c| c.0 == ' ')
}

/// phonemizer's `Punctuation.restore` for one line (word separator ' ', strip=False), and
/// misaki's taking of its first element.
fn restore(lines: Vec<Tagged>, marks: Vec<(Tagged, Position)>) -> Tagged {
    let mut text: std::collections::VecDeque<Tagged> = lines.into();
    let mut marks: std::collections::VecDeque<(Tagged, Position)> = marks.into();
    let mut out: Vec<Tagged> = Vec::new();
    let mut pos = 0usize;
    while !text.is_empty() || !marks.is_empty() {
        if marks.is_empty() {
            for mut line in text.drain(..) {
                if !ends_with_space(&line) {
                    line.push((' ', None));
                }
                out.push(line);
            }
        } else if text.is_empty() {
            out.push(marks.drain(..).flat_map(|m| m.0).collect());
        } else if pos == 0 {
            let (mark, position) = marks.pop_front().expect("not empty");
            if ends_with_space(&text[0]) {
                text[0].pop();
            }
            let sep = |m: &Tagged| if ends_with_space(m) { None } else { Some((' ', None)) };
            match position {
                Position::B => {
                    let mut joined = mark;
                    joined.append(&mut text[0]);
                    text[0] = joined;
                }
                Position::E => {
                    let mut line = text.pop_front().expect("not empty");
                    let s = sep(&mark);
                    line.extend(mark);
                    line.extend(s);
                    out.push(line);
                    pos += 1;
                }
                Position::A => {
                    let s = sep(&mark);
                    let mut line = mark;
                    line.extend(s);
                    out.push(line);
                    pos += 1;
                }
                Position::I => {
                    if text.len() == 1 {
                        text[0].extend(mark);
                    } else {
                        let mut first = text.pop_front().expect("not empty");
                        first.extend(mark);
                        first.append(&mut text[0]);
                        text[0] = first;
                    }
                }
            }
        } else {
            out.push(text.pop_front().expect("not empty"));
            pos += 1;
        }
    }
    out.into_iter().next().unwrap_or_default()
}

/// misaki's `EspeakG2P.__call__` after phonemizer: strip, tied pairs to Kokoro's phonemes,
/// ties and hyphens deleted, angles back to parentheses.
fn misaki_post(mut ps: Tagged) -> Tagged {
    let start = ps.iter().position(|c| !c.0.is_whitespace()).unwrap_or(ps.len());
    let end = ps.iter().rposition(|c| !c.0.is_whitespace()).map_or(start, |e| e + 1);
    ps.truncate(end);
    ps.drain(..start);
    let mut e2m = E2M;
    e2m.sort();
    for (old, new) in e2m {
        let old: Vec<char> = old.chars().collect();
        let new: Vec<char> = new.chars().collect();
        let mut out: Tagged = Vec::with_capacity(ps.len());
        let mut i = 0;
        while i < ps.len() {
            if i + old.len() <= ps.len() && ps[i..i + old.len()].iter().map(|c| c.0).eq(old.iter().copied()) {
                let tag = ps[i..i + old.len()].iter().find_map(|c| c.1);
                out.extend(new.iter().map(|&c| (c, tag)));
                i += old.len();
            } else {
                out.push(ps[i]);
                i += 1;
            }
        }
        ps = out;
    }
    ps.retain(|c| c.0 != '^' && c.0 != '-');
    for c in &mut ps {
        c.0 = match c.0 {
            '«' => '(',
            '»' => ')',
            x => x,
        };
    }
    ps
}

/// Each word's phoneme char range in the tagged string: from its first to its last char, in
/// order and within bounds (a word with none: an empty range where the last one ended).
pub(crate) fn word_spans(tagged: &Tagged, n: usize) -> Vec<Range<usize>> {
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, (_, t)) in tagged.iter().enumerate() {
        if let Some(w) = t.filter(|&w| w < n) {
            first[w] = first[w].min(i);
            last[w] = i + 1;
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut end = 0;
    for w in 0..n {
        if first[w] == usize::MAX {
            out.push(end..end);
            continue;
        }
        let s = first[w].max(end);
        let e = last[w].max(s);
        out.push(s..e);
        end = e;
    }
    out
}

/// `chars` with markup replaced by spaces (one for one, so offsets hold), as the English front
/// end's normaliser leaves it out: fenced code blocks, thematic breaks, block markers
/// (headings, quotes, bullets), emphasis markers at word edges, code span backticks, links'
/// brackets and targets, HTML tags, emoji.
pub fn strip_markup(chars: &[char]) -> Vec<char> {
    let mut out = chars.to_vec();
    let n = chars.len();
    let mut in_block = false;
    let mut i = 0;
    while i < n {
        let end = chars[i..].iter().position(|&c| c == '\n').map_or(n, |p| i + p);
        let line = &chars[i..end];
        let ind = line.iter().take_while(|c| matches!(c, ' ' | '\t')).count();
        let body = &line[ind..];
        let fence = body.starts_with(&['`', '`', '`']) || body.starts_with(&['~', '~', '~']);
        let rule = body.len() >= 3
            && body.iter().all(|c| matches!(c, '-' | '*' | '_' | ' ' | '='))
            && body.iter().filter(|c| **c != ' ').count() >= 3;
        if fence || in_block || rule {
            in_block ^= fence;
            out[i..end].fill(' ');
        } else {
            strip_line(&mut out[i + ind..end]);
        }
        i = end + 1;
    }
    for c in &mut out {
        if is_emoji(*c) {
            *c = ' ';
        }
    }
    out
}

/// One line of markdown outside code blocks (see [`strip_markup`]).
fn strip_line(line: &mut [char]) {
    let n = line.len();
    let mut i = 0;
    // Block markers.
    loop {
        let rest = &line[i..];
        if rest.first() == Some(&'>') {
            line[i] = ' ';
            i += 1 + line[i + 1..].iter().take_while(|c| **c == ' ').count();
            continue;
        }
        let hashes = rest.iter().take_while(|c| **c == '#').count();
        if (1..=6).contains(&hashes) && rest.get(hashes) == Some(&' ') {
            line[i..i + hashes].fill(' ');
        } else if matches!(rest.first(), Some('-' | '*' | '+' | '•')) && rest.get(1) == Some(&' ') {
            line[i] = ' ';
        }
        break;
    }
    let edge = |c: Option<&char>| c.is_none_or(|c| c.is_whitespace() || MARKS.contains(*c) || "*_~`'".contains(*c));
    let mut k = 0;
    while k < n {
        let c = line[k];
        match c {
            '*' | '_' | '~' | '`' => {
                let run = line[k..].iter().take_while(|&&d| d == c).count();
                let before = if k == 0 { None } else { line.get(k - 1) };
                let after = line.get(k + run);
                let (b, a) = (edge(before), edge(after));
                // A marker touches a word on one side only (`**bold**`, `_it_`); `a * b` and
                // `snake_case` stay.
                if c == '`' || (b != a) {
                    line[k..k + run].fill(' ');
                }
                k += run;
            }
            '!' if line.get(k + 1) == Some(&'[') => {
                line[k] = ' ';
                k += 1;
            }
            '[' => {
                // `[text](target)`: the text is read.
                let close = line[k..].iter().position(|&d| d == ']').map(|p| k + p);
                if let Some(cl) = close.filter(|&cl| line.get(cl + 1) == Some(&'(')) {
                    if let Some(p) = line[cl..].iter().position(|&d| d == ')') {
                        line[k] = ' ';
                        line[cl..cl + p + 1].fill(' ');
                    }
                }
                k += 1;
            }
            '<' if line.get(k + 1).is_some_and(|d| d.is_ascii_alphabetic() || *d == '/' || *d == '!') => {
                if let Some(p) = line[k..].iter().position(|&d| d == '>') {
                    line[k..k + p + 1].fill(' ');
                    k += p + 1;
                } else {
                    k += 1;
                }
            }
            _ => k += 1,
        }
    }
}

/// Emoji and their joiners and modifiers (the English normaliser's set).
fn is_emoji(c: char) -> bool {
    let u = c as u32;
    matches!(u,
        0x1F000..=0x1FAFF | 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0xFE0F | 0x200D | 0x20E3 | 0xE0020..=0xE007F
        | 0x2300..=0x23FF | 0x2190..=0x21FF if !matches!(c, '→' | '←' | '↑' | '↓' | '↔'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces and marks of `line`, as strings.
    fn pieces(line: &str) -> (Vec<String>, Vec<(String, Position)>) {
        let chars: Vec<char> = line.chars().collect();
        let (p, m) = preserve(&chars);
        (
            p.into_iter().map(|r| chars[r].iter().collect()).collect(),
            m.into_iter().map(|(r, pos)| (chars[r].iter().collect(), pos)).collect(),
        )
    }

    /// The whole pipeline with a fake espeak that upper-cases each word.
    fn fake(line: &str) -> String {
        let chars: Vec<char> = misaki_pre(&line.chars().collect::<Vec<_>>());
        let words = word_ranges(&chars);
        let (p, m) = preserve(&chars);
        let lines = p
            .iter()
            .map(|r| {
                let t: String = chars[r.clone()].iter().collect();
                let a = t.split_whitespace().map(str::to_uppercase).collect::<Vec<_>>().join(" ");
                tag_piece(&chars, r.clone(), &a, &words)
            })
            .collect();
        let marks = m
            .into_iter()
            .map(|(r, pos)| (r.clone().map(|i| (chars[i], tag_of(&words, i, chars[i]))).collect(), pos))
            .collect();
        misaki_post(restore(lines, marks)).into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn punctuation_is_split_off_as_phonemizer_does() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pieces("hello, my world!"),
            (s(&["hello", "my world"]), vec![(", ".into(), Position::I), ("!".into(), Position::E)])
        );
        assert_eq!(pieces("¿qué?"), (s(&["qué"]), vec![("¿".into(), Position::B), ("?".into(), Position::E)]));
        assert_eq!(pieces("..."), (s(&[]), vec![("...".into(), Position::A)]));
        assert_eq!(pieces("sin marcas"), (s(&["sin marcas"]), vec![]));
        assert_eq!(
            pieces("a « b » c"),
            (s(&["a", "b", "c"]), vec![(" « ".into(), Position::I), (" » ".into(), Position::I)])
        );
    }

    #[test]
    fn punctuation_is_put_back_as_phonemizer_does() {
        assert_eq!(fake("hello, my world!"), "HELLO, MY WORLD!");
        assert_eq!(fake("¿Qué? ¡No!"), "¿QUÉ? ¡NO!");
        assert_eq!(fake("..."), "...");
        assert_eq!(fake("Il a dit « oui »."), "IL A DIT “ OUI ”.");
        assert_eq!(fake("El libro (nuevo) es caro"), "EL LIBRO (NUEVO) ES CARO");
        assert_eq!(fake(""), "");
    }

    #[test]
    fn ties_become_kokoro_phonemes() {
        let t = |s: &str| -> Tagged { s.chars().map(|c| (c, Some(0))).collect() };
        let out: String = misaki_post(t(" t^ʃa a^ɪ d^ʒ lə- x^y «a» ")).into_iter().map(|c| c.0).collect();
        assert_eq!(out, "ʧa I ʤ lə xy (a)");
    }

    #[test]
    fn words_get_their_phonemes() {
        let chars: Vec<char> = "Tengo 1.250 casas.".chars().collect();
        let words = word_ranges(&chars);
        let tagged = tag_piece(&chars, 0..17, "tˈɛŋɡo mˈil doθjˈɛntos θinkwˈenta kˈasas", &words);
        let spans = word_spans(&tagged, words.len());
        assert_eq!(spans[0], 0..6);
        assert!(spans[1].start == 7 && spans[2].start > spans[1].end, "{spans:?}");
        let tagged = tag_piece(&chars, 0..5, "", &words);
        assert_eq!(word_spans(&tagged, words.len()), vec![0..0, 0..0, 0..0]);
    }

    #[test]
    fn markup_is_blanked_in_place() {
        let s = |t: &str| -> String { strip_markup(&t.chars().collect::<Vec<_>>()).into_iter().collect() };
        assert_eq!(s("# Hola **mundo** 😀"), "  Hola   mundo    ");
        assert_eq!(s("a * b snake_case"), "a * b snake_case");
        assert_eq!(
            s("ver [el sitio](https://x.es) <b>ya</b>"),
            format!("ver  el sitio{}ya{}", " ".repeat(19), " ".repeat(4))
        );
        assert_eq!(s("```\ncode\n```\nfin"), "   \n    \n   \nfin");
    }

    #[test]
    fn sentences_are_split_in_each_language() {
        let e = Espeak::with_program("/nonexistent");
        assert_eq!(e.split_sentences("Hola. ¿Cómo estás? ¡Bien!"), vec!["Hola.", "¿Cómo estás?", "¡Bien!"]);
        assert_eq!(e.split_sentences("El Sr. García llegó. Adiós."), vec!["El Sr. García llegó.", "Adiós."]);
        assert_eq!(e.split_sentences("नमस्ते। आप कैसे हैं? ठीक॥"), vec!["नमस्ते।", "आप कैसे हैं?", "ठीक॥"]);
        assert_eq!(
            e.split_sentences("M. Dupont est là. Il dit « oui ». "),
            vec!["M. Dupont est là.", "Il dit « oui »."]
        );
        assert!(e.split_sentences("  \n ").is_empty());
    }

    #[test]
    fn piper_build_is_found_where_set_up_puts_it() {
        let err = EspeakLibrary::in_dir("/nonexistent/espeak-piper").unwrap_err();
        assert!(err.contains("scripts/setup.sh"), "{err}");
        let dir = std::env::temp_dir().join(format!("speechstream-espeak-piper-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("espeak-ng-data")).unwrap();
        std::fs::write(dir.join(PIPER_LIBRARY_FILE), b"").unwrap();
        assert!(EspeakLibrary::in_dir(&dir).is_err(), "no .complete yet");
        std::fs::write(dir.join(".complete"), b"").unwrap();
        let found = EspeakLibrary::in_dir(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let found = found.unwrap();
        assert_eq!(found, EspeakLibrary::new(dir.join("espeakbridge.so"), dir.join("espeak-ng-data")));
        let e = Espeak::with_program("/nonexistent").with_library(found.clone());
        assert_eq!(e.library(), Some(&found));
        assert_eq!(Espeak::new().library(), None);
    }

    #[test]
    fn a_missing_helper_is_a_clear_error() {
        let e = Espeak::with_program("/nonexistent/espeak-phonemes");
        let err = e.available().unwrap_err();
        assert!(err.contains("espeak-ng") && err.contains("scripts/setup.sh"), "{err}");
        assert!(e.phonemize("es", "hola").is_err());
    }
}
