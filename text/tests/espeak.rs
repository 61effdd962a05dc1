//! The espeak-ng front end against its reference: misaki 0.9.4's `EspeakG2P` (phonemizer-fork's
//! espeak backend) on our own sentences, text/tests/espeak/LANG.txt, whose outputs are
//! LANG.expected (misaki on Debian's espeak-ng 1.51, which the front end uses here) and
//! LANG.expected-1.52 (misaki on espeakng-loader's 1.52, as kokoro ships it). Regenerate them
//! with scripts/setup-espeak-reference.sh and scripts/espeak-reference.py (its header says how).
//!
//! The front end runs espeak-ng in its helper program (tools/espeak-phonemes, built by
//! scripts/setup.sh); without it these tests say so and pass.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use speechstream_text::espeak::Espeak;
use speechstream_text::Sentence;

use common::helper;

/// The files of each language and the espeak language it is read in (kokoro's e, f, h, i, p).
const LANGUAGES: [(&str, &str); 5] = [("es", "es"), ("fr", "fr-fr"), ("hi", "hi"), ("it", "it"), ("pt-br", "pt-br")];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/espeak")
}

fn lines(name: &str) -> Vec<String> {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(str::to_string).collect()
}

#[test]
fn phonemes_agree_with_misaki() {
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    espeak.available().expect("espeak-ng's helper runs");
    println!("{}", espeak.version().unwrap());
    let mut failed = Vec::new();
    for (name, language) in LANGUAGES {
        let sentences = lines(&format!("{name}.txt"));
        let expected = lines(&format!("{name}.expected"));
        assert_eq!(sentences.len(), expected.len(), "{name}.expected is not from {name}.txt: regenerate it");
        let newer = std::fs::read_to_string(dir().join(format!("{name}.expected-1.52")))
            .ok()
            .map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|l| l.len() == sentences.len());
        let (mut same, mut same_newer) = (0usize, 0usize);
        let started = std::time::Instant::now();
        let got: Vec<String> = sentences
            .iter()
            .enumerate()
            .map(|(k, s)| espeak.phonemize(language, s).unwrap_or_else(|e| panic!("{name} line {}: {e}", k + 1)))
            .collect();
        let per_sentence = started.elapsed() / sentences.len() as u32;
        for (k, ((s, want), got)) in sentences.iter().zip(&expected).zip(got).enumerate() {
            if &got == want {
                same += 1;
            } else {
                println!("{name} line {}: {s}\n  misaki+1.51: {want}\n  ours:        {got}", k + 1);
            }
            if let Some(n) = &newer {
                if got == n[k] {
                    same_newer += 1;
                } else if &got == want {
                    println!("{name} line {} (espeak 1.51 vs 1.52): {s}\n  1.51: {got}\n  1.52: {}", k + 1, n[k]);
                }
            }
        }
        let n = sentences.len();
        let share = same as f64 / n as f64;
        print!("{name} ({language}): {same}/{n} identical to misaki+espeak 1.51 ({:.1}%)", 100.0 * share);
        if newer.is_some() {
            print!(", {same_newer}/{n} to misaki+espeak 1.52 ({:.1}%)", 100.0 * same_newer as f64 / n as f64);
        }
        println!(" [{per_sentence:.2?} a sentence]");
        assert!(n >= 100, "{name}: only {n} sentences");
        if share < 0.95 {
            failed.push(format!("{name}: {same}/{n}"));
        }
    }
    assert!(failed.is_empty(), "below 95% identical: {failed:?}");
}

/// Words in order, within bounds, their text where their ranges say.
fn check_words(text: &str, sentences: &[Sentence]) {
    let char_at: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
    let mut last = 0usize;
    for s in sentences {
        let n = s.phonemes.chars().count();
        assert!(n > 0, "empty sentence {s:?}");
        let mut end = 0usize;
        for w in &s.words {
            assert!(w.text_range.start >= last && w.text_range.end <= text.len(), "{w:?}");
            assert_eq!(&text[w.text_range.clone()], w.text);
            assert_eq!(char_at[w.chars.start]..char_at[w.chars.end], w.text_range, "{w:?}");
            assert!(
                w.phonemes.start >= end && w.phonemes.end <= n && w.phonemes.start <= w.phonemes.end,
                "{w:?} in {s:?}"
            );
            end = w.phonemes.end;
            last = w.text_range.end;
        }
    }
}

#[test]
fn sentences_keep_their_words() {
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    for (name, language) in LANGUAGES {
        let lines = lines(&format!("{name}.txt"));
        let expected = lines_of(&format!("{name}.expected"));
        let mut one_to_one = 0;
        let (mut read, mut unread) = (0usize, Vec::new());
        for (line, want) in lines.iter().zip(&expected) {
            let got = espeak.sentences(language, line).unwrap();
            check_words(line, &got);
            // A line that is one sentence reads as misaki reads it.
            if let [s] = got.as_slice() {
                assert_eq!(s.phonemes, espeak.phonemize(language, line).unwrap(), "{line}");
                if &s.phonemes == want {
                    one_to_one += 1;
                }
                // Words that are read have phonemes (but for those espeak joins to the next, as
                // in "tout le monde": tulmˈɔ̃d).
                for w in s.words.iter().filter(|w| w.text.chars().any(char::is_alphanumeric)) {
                    read += 1;
                    if w.phonemes.is_empty() {
                        unread.push(w.text.clone());
                    }
                }
            }
        }
        assert!(one_to_one * 100 >= lines.len() * 90, "{name}: {one_to_one} sentences as misaki reads them");
        println!("{name}: {} of {read} words without phonemes: {unread:?}", unread.len());
        assert!(unread.len() * 100 <= read * 3, "{name}: words without phonemes: {unread:?}");
        // The whole file as paragraphs, and as one run of text.
        for text in [lines.join("\n"), lines.join(" ")] {
            let got = espeak.sentences(language, &text).unwrap();
            assert!(got.len() >= lines.len() * 9 / 10, "{name}: {} sentences", got.len());
            check_words(&text, &got);
        }
    }
}

fn lines_of(name: &str) -> Vec<String> {
    lines(name)
}

#[test]
fn markup_and_odd_input_never_panic() {
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    let texts = [
        "# Título\n\n**Hola**, _amigo_ 😀! Mira [esto](https://ejemplo.es).",
        "```\nlet x = 1;\n```\nFin.",
        "«¿(…)?»  —  ",
        "\t\u{0}\u{7}tab\there",
        "(((",
        "a...b,,,c;;;d",
        "١٢٣ 123 ½ € $ % & @",
        "",
        "   ",
    ];
    for language in ["es", "fr-fr", "hi", "it", "pt-br"] {
        for t in texts {
            let got = espeak.sentences(language, t).unwrap();
            check_words(t, &got);
            espeak.phonemize(language, t).unwrap();
        }
        let long = "palabra ".repeat(400) + "fin.";
        let got = espeak.sentences(language, &long).unwrap();
        assert!(got.iter().all(|s| s.phonemes.chars().count() <= speechstream_text::MAX_CHUNK_PHONEMES));
        check_words(&long, &got);
    }
    // Markup is not read.
    let got = espeak.sentences("es", "**Hola** 😀").unwrap();
    assert_eq!(got[0].phonemes, espeak.phonemize("es", "Hola").unwrap());
    let err = espeak.phonemize("xx-nope", "hola").unwrap_err();
    assert!(err.contains("xx-nope"), "{err}");
}

#[test]
fn random_text_never_breaks_the_words() {
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    let alphabet: Vec<char> =
        "abcñé ÁL  xyz 0123456789 .,;:!?¡¿—…\"«»“”(){}[]'-/%€$@#*_~`<>\n\tनमस्ते।॥ 😀\u{301}\u{200d}".chars().collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..300 {
        let len = (round % 60) + 1;
        let text: String = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                alphabet[(seed % alphabet.len() as u64) as usize]
            })
            .collect();
        let language = ["es", "fr-fr", "hi", "it", "pt-br"][round % 5];
        let got = espeak.sentences(language, &text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        check_words(&text, &got);
        espeak.phonemize(language, &text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
}

#[test]
fn phonemes_read_as_kokoro_expects() {
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    // Tied pairs become Kokoro's phonemes; language switch flags are gone.
    let es = espeak.phonemize("es", "Hola, ¿cómo estás? Tengo 25 años (más o menos).").unwrap();
    assert_eq!(es, "ˈola, ¿kˈomo estˈas? tˈɛŋɡo βˌAntiθˈinko ˈaɲos (mˈas o mˈenos).");
    let fr = espeak.phonemize("fr-fr", "J'aime le football.").unwrap();
    assert!(!fr.contains('(') && !fr.contains('^'), "{fr}");
}

#[cfg(unix)]
mod helper_process {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("speechstream-espeak-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, source) = (dir.join(name), dir.join(format!("{name}.sh")));
        std::fs::write(&source, format!("#!/bin/sh\n{body}\n")).unwrap();
        // The script to run is written by another process: a file this one holds open for
        // writing is inherited by whatever another test thread forks meanwhile, and exec'ing it
        // then fails with "Text file busy" (seen once in a CI run).
        let copied = std::process::Command::new("cp").arg(&source).arg(&path).status().unwrap();
        assert!(copied.success(), "cp {} {}", source.display(), path.display());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_helper_that_dies_is_restarted() {
        // Answers one request, then exits.
        let espeak = Espeak::with_program(script("once", "read line; echo ˈola"));
        for _ in 0..3 {
            assert_eq!(espeak.phonemize("es", "hola").unwrap(), "ˈola");
        }
    }

    #[test]
    fn a_missing_library_names_the_package() {
        let espeak = Espeak::with_program(script(
            "nolib",
            "echo 'espeak-phonemes: error while loading shared libraries: libespeak-ng.so.1: cannot open shared \
             object file' >&2; exit 127",
        ));
        let err = espeak.available().unwrap_err();
        assert!(
            err.contains("libespeak-ng1") && err.contains("espeak-ng") && err.contains("scripts/setup.sh"),
            "{err}"
        );
        let err = espeak.sentences("es", "Hola.").unwrap_err();
        assert!(err.contains("libespeak-ng1"), "{err}");
    }

    #[test]
    fn a_helper_that_hangs_is_stopped_and_the_request_fails() {
        // Reads a request, then never answers.
        let espeak =
            Espeak::with_program(script("hang", "read line; exec sleep 600")).with_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let err = espeak.phonemize("es", "hola").unwrap_err();
        // Killed after the timeout, restarted once, killed again: well under the sleep.
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert!(err.contains("did not answer within"), "{err}");
    }

    #[test]
    fn helper_errors_are_errors() {
        let espeak = Espeak::with_program(script("err", "while read line; do echo '!invalid voice code \"zz\"'; done"));
        let err = espeak.phonemize("zz", "hola").unwrap_err();
        assert!(err.contains("invalid voice code"), "{err}");
    }
}

/// With SPEECHSTREAM_ESPEAK_DUMP=LANG (a file name: es, fr, hi, it, pt-br), prints each word of
/// that language's sentences with its phonemes, to look at the alignment.
#[test]
fn dump_words() {
    let Ok(name) = std::env::var("SPEECHSTREAM_ESPEAK_DUMP") else { return };
    let Some(program) = helper() else { return };
    let espeak = Espeak::with_program(program);
    let language = LANGUAGES.iter().find(|l| l.0 == name).map_or(name.as_str(), |l| l.1);
    for line in lines(&format!("{name}.txt")) {
        for s in espeak.sentences(language, &line).unwrap() {
            let ps: Vec<char> = s.phonemes.chars().collect();
            let words: Vec<String> = s
                .words
                .iter()
                .map(|w| format!("{}={}", w.text, ps[w.phonemes.clone()].iter().collect::<String>()))
                .collect();
            println!("{}", words.join(" | "));
        }
    }
}
