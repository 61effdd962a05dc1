//! Piper's front end against piper-tts 1.8.0: our phoneme ids for our own texts,
//! text/tests/piper/NAME.txt, against piper-tts's (NAME.ids, NAME.phonemes: its
//! `PiperVoice.phonemize` on its bundled espeak-ng 1.52.0.1 and data, and `phonemes_to_ids` with
//! joe's `phoneme_id_map`, id-map.json). Regenerate them with scripts/piper-reference.py (its
//! header says how).
//!
//! The front end runs espeak-ng in its helper program (tools/espeak-phonemes, built by
//! scripts/setup.sh); without the helper the tests that need it say so and pass. For Piper's
//! voices the helper loads piper-tts's own espeak-ng build, which set-up puts in
//! `.cache/espeak-piper` (`$SPEECHSTREAM_CACHE/espeak-piper`): these tests use it, and fail,
//! saying so, when it is not there.
//!
//! # How close to piper-tts
//!
//! With piper-tts's build every sentence is identical:
//!
//! | language | sentences identical (texts) |
//! | --- | --- |
//! | en-us | 49/49 (40/40) |
//! | de | 48/48 (40/40) |
//! | es | 46/46 (40/40) |
//! | fr | 46/46 (40/40) |
//! | ru | 45/45 (40/40) |
//! | misc (en-us) | 28/28 (17/17) |
//!
//! With Debian 12's espeak-ng 1.51 (the fallback when set-up has not put piper-tts's build there:
//! [`Espeak::for_piper`]) en-us 32/49, de 31/48, es 37/46, fr 43/46, ru 18/45 and misc 27/28 are:
//! 1.51 reads some words differently (`ɔːɹ` read `oːɹ`, no glide `ʲ`, German `r` after a
//! consonant read `ɾ`, Russian's little words stressed), and it has no
//! `espeak_TextToPhonemesWithTerminator`: the helper then works each clause's punctuation and
//! sentence end out from the text (its own unit tests, and
//! `clauses_carry_their_punctuation_and_sentence_ends` here, check that; so does
//! `ESPEAK_PHONEMES_EMULATE_TERMINATOR=1 cargo test -p speechstream-text --test piper`, which makes
//! the helper work them out with piper-tts's build too: every sentence is still identical).

mod common;

use std::path::PathBuf;
use std::time::Instant;

use speechstream_text::espeak::{Espeak, EspeakLibrary, CACHE_ENV, PIPER_LIBRARY_DIR};
use speechstream_text::piper::{clauses, PhonemeIdMap, Phonemizer};
use speechstream_text::Sentence;

use common::helper;

/// The files of each language and the espeak voice Piper's voices of it name (en_US, de_DE,
/// es_ES, fr_FR, ru_RU).
const LANGUAGES: [(&str, &str); 5] = [("en-us", "en-us"), ("de", "de"), ("es", "es"), ("fr", "fr"), ("ru", "ru")];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/piper")
}

/// piper-tts's espeak-ng build where set-up put it (`$SPEECHSTREAM_CACHE/espeak-piper`, else the
/// checkout's `.cache/espeak-piper`); panics, saying how to get it, when it is not there.
fn piper_library() -> EspeakLibrary {
    let cache = std::env::var_os(CACHE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
    EspeakLibrary::in_dir(cache.join(PIPER_LIBRARY_DIR)).unwrap_or_else(|e| {
        panic!("piper-tts's espeak-ng build, which these tests compare with piper-tts, is missing: {e}")
    })
}

/// The front end on piper-tts's espeak-ng build, checked to be running it.
fn piper_espeak(program: PathBuf) -> Espeak {
    let library = piper_library();
    let espeak = Espeak::with_program(program).with_library(library.clone());
    let v = espeak.version().unwrap_or_else(|e| panic!("the helper does not run piper-tts's espeak-ng: {e}"));
    println!("{v}");
    assert!(
        v.starts_with("espeak-ng 1.52.0.1 ") && v.ends_with("espeak-ng-data"),
        "the helper answers {v:?} with --library {}: rebuild it (cargo build --release --manifest-path \
         tools/espeak-phonemes/Cargo.toml; an older helper ignores --library)",
        library.library.display()
    );
    espeak
}

/// The lines of a fixture (`\n` in a text stands for a line break).
fn lines(name: &str) -> Vec<String> {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| l.replace("\\n", "\n")).collect()
}

/// joe's phoneme_id_map (en_US-joe-medium.onnx.json's, which is piper's default map's first 151
/// entries).
fn joe() -> PhonemeIdMap {
    let path = dir().join("id-map.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("id-map.json")).unwrap();
    PhonemeIdMap::from_json(&json).unwrap()
}

/// Sentences' ids as the fixtures write them.
fn ids_line(map: &PhonemeIdMap, sentences: &[Sentence]) -> String {
    let ids: Vec<String> = sentences
        .iter()
        .map(|s| map.ids(&s.phonemes).iter().map(i64::to_string).collect::<Vec<_>>().join(" "))
        .collect();
    ids.join("\t")
}

/// Words in order, within bounds, their text where their ranges say.
fn check_words(text: &str, sentences: &[Sentence]) {
    let char_at: Vec<usize> = text.char_indices().map(|(b, _)| b).chain([text.len()]).collect();
    let mut last = 0usize;
    for s in sentences {
        let n = s.phonemes.chars().count();
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

/// How many of the texts, and of their sentences, are identical.
#[derive(Debug, Default, Clone, Copy)]
struct Agreement {
    texts: usize,
    of_texts: usize,
    sentences: usize,
    of_sentences: usize,
}

impl Agreement {
    fn share(&self) -> f64 {
        self.sentences as f64 / self.of_sentences.max(1) as f64
    }
}

impl std::fmt::Display for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} sentences identical ({:.1}%), {}/{} texts",
            self.sentences,
            self.of_sentences,
            100.0 * self.share(),
            self.texts,
            self.of_texts
        )
    }
}

/// Our sentences of each text of `name` read by `phonemizer`. Also checks that each text's
/// pieces (`split_sentences`) read one at a time give its sentences, and that words are in
/// order.
fn read_all(espeak: &Espeak, map: &PhonemeIdMap, name: &str, phonemizer: &Phonemizer) -> Vec<Vec<Sentence>> {
    lines(&format!("{name}.txt"))
        .iter()
        .enumerate()
        .map(|(k, text)| {
            let sentences = phonemizer.sentences(espeak, text).unwrap_or_else(|e| panic!("{name} line {}: {e}", k + 1));
            check_words(text, &sentences);
            let pieces = phonemizer.split_sentences(espeak, text);
            let mut one_by_one = Vec::new();
            for p in &pieces {
                one_by_one.extend(phonemizer.sentences(espeak, p).unwrap());
            }
            let whole = ids_line(map, &sentences);
            assert_eq!(ids_line(map, &one_by_one), whole, "{name} line {}: read in pieces {pieces:?}", k + 1);
            sentences
        })
        .collect()
}

/// Our sentences' ids against those of `name.ids`, every difference printed.
fn compare(map: &PhonemeIdMap, name: &str, ours: &[Vec<Sentence>]) -> Agreement {
    let texts = lines(&format!("{name}.txt"));
    let expected = lines(&format!("{name}.ids"));
    let phonemes = lines(&format!("{name}.phonemes"));
    assert_eq!(texts.len(), expected.len(), "{name}.ids is not from {name}.txt: regenerate it");
    let mut a = Agreement { of_texts: texts.len(), ..Agreement::default() };
    for (k, (text, sentences)) in texts.iter().zip(ours).enumerate() {
        let want: Vec<&str> = expected[k].split('\t').filter(|s| !s.is_empty()).collect();
        let got: Vec<String> = sentences.iter().map(|s| ids_line(map, std::slice::from_ref(s))).collect();
        a.of_sentences += want.len();
        if want.len() == got.len() {
            a.sentences += want.iter().zip(&got).filter(|(w, g)| *w == g).count();
        }
        if want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| *w == g) {
            a.texts += 1;
        } else {
            let ours: Vec<&str> = sentences.iter().map(|s| s.phonemes.as_str()).collect();
            println!(
                "{name} line {}: {text:?}\n  piper-tts: {:?}\n  ours:      {ours:?}",
                k + 1,
                phonemes[k].split('\t').collect::<Vec<_>>()
            );
        }
    }
    a
}

#[test]
fn ids_agree_with_piper_tts() {
    let Some(program) = helper() else { return };
    let espeak = piper_espeak(program);
    let map = joe();
    let mut failed = Vec::new();
    for (name, voice) in LANGUAGES {
        let started = Instant::now();
        let ours = read_all(&espeak, &map, name, &Phonemizer::Espeak(voice.into()));
        let elapsed = started.elapsed();
        let a = compare(&map, name, &ours);
        println!("{name} ({voice}) vs piper-tts: {a} [{elapsed:.2?} for {} texts twice]", a.of_texts);
        assert!(a.of_texts >= 40, "{name}: only {} texts", a.of_texts);
        if a.share() < 0.95 {
            failed.push(format!("{name}: {a}"));
        }
    }
    assert!(failed.is_empty(), "below 95% identical: {failed:?}");
}

/// `[[ ]]` blocks, line breaks, paragraphs, runs of punctuation, quotes and brackets (en-us).
#[test]
fn blocks_and_punctuation_agree_with_piper_tts() {
    let Some(program) = helper() else { return };
    let espeak = piper_espeak(program);
    let map = joe();
    let ours = read_all(&espeak, &map, "misc", &Phonemizer::Espeak("en-us".into()));
    let a = compare(&map, "misc", &ours);
    println!("misc (en-us) vs piper-tts: {a}");
    assert_eq!(a.texts, a.of_texts, "misc: {a}");
}

#[test]
fn text_voices_agree_with_piper_tts() {
    // No espeak-ng: a `phoneme_type: text` voice reads the text's code points.
    let espeak = Espeak::with_program("/nonexistent/espeak-phonemes");
    let map = joe();
    let ours = read_all(&espeak, &map, "text", &Phonemizer::Text);
    let a = compare(&map, "text", &ours);
    assert_eq!(a.texts, a.of_texts, "{a}");
}

#[test]
fn ids_are_laid_out_as_piper_tts_lays_them_out() {
    let map = joe();
    // ^ _ p _ ... _ $ with joe's ids: ^ 1, _ 0, $ 2, h 20, ə 59, ˈ 120.
    assert_eq!(map.ids(""), vec![1, 0, 2]);
    assert_eq!(map.ids("hə"), vec![1, 0, 20, 0, 59, 0, 2]);
    assert_eq!(map.char_tokens("hə"), vec![Some(2), Some(4)]);
    // A char missing from joe's map (ʦ came later) is dropped.
    assert_eq!(map.ids("hʦə"), vec![1, 0, 20, 0, 59, 0, 2]);
    assert_eq!(map.char_tokens("hʦə"), vec![Some(2), None, Some(4)]);
    // Every char of every expected sentence: its token is its own id, followed by the pad.
    let phonemes = lines("en-us.phonemes");
    for line in &phonemes {
        for s in line.split('\t') {
            let ids = map.ids(s);
            for (c, t) in s.chars().zip(map.char_tokens(s)) {
                let own = map.get(&c.to_string());
                match (t, own) {
                    (Some(t), Some(own)) => assert_eq!((ids[t], ids[t + own.len()]), (own[0], 0), "{c:?} in {s:?}"),
                    (None, None) => {}
                    other => panic!("{c:?} in {s:?}: {other:?}"),
                }
            }
        }
    }
}

/// With piper-tts's build (its `espeak_TextToPhonemesWithTerminator`) and with Debian's 1.51
/// (the fallback, which lacks it: the helper works the terminators out).
#[test]
fn clauses_carry_their_punctuation_and_sentence_ends() {
    let Some(program) = helper() else { return };
    for espeak in [piper_espeak(program.clone()), Espeak::with_program(program.clone())] {
        let version = espeak.version().unwrap();
        let got = clauses(&espeak, "en-us", &["Hello, world! Is it?\n\nYes... no", ""]).unwrap();
        let summary: Vec<Vec<(usize, Option<char>, bool)>> =
            got.iter().map(|c| c.iter().map(|c| (c.text.end, c.terminator, c.end_of_sentence)).collect()).collect();
        // As piper-tts's espeakbridge.get_phonemes gives them (espeak-ng 1.52): a blank line
        // after `?` is a paragraph end (no terminator), an ellipsis no terminator and no sentence
        // end.
        assert_eq!(
            summary,
            vec![
                vec![
                    (7, Some(','), false),
                    (14, Some('!'), true),
                    (22, None, true),
                    (29, None, false),
                    (31, None, true)
                ],
                vec![(0, None, true)]
            ],
            "{version}"
        );
        assert_eq!(got[0][0].phonemes, "həlˈoʊ", "{version}");
    }
}
