//! Our own test set for the spoken-form normaliser (issue 33): tests/normalize/cases.tsv, one
//! written sentence a line with the reading we expect, across numbers, money, dates and times,
//! phone numbers, units, URLs, e-mail addresses, paths, versions, abbreviations, acronyms, Roman
//! numerals, markdown, HTML and emoji. The normaliser's output must equal the expected reading
//! exactly for at least 95% of the set; the failures are listed. No voice assets needed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use speechstream_text::spoken::{verbalize, Pronunciations, TextOptions};

/// (category, written, expected) of every case.
fn cases() -> Vec<(String, String, String)> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/normalize/cases.tsv");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "a case is category, written, expected: {l:?}");
            (f[0].to_string(), f[1].replace("\\n", "\n"), f[2].to_string())
        })
        .collect()
}

#[test]
fn the_test_set_reads_as_expected() {
    let cases = cases();
    assert!(cases.len() >= 300, "the set has {} sentences, fewer than 300", cases.len());
    let mut per_cat: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for (cat, text, want) in &cases {
        let got = verbalize(text, &TextOptions::default(), &Pronunciations::new()).text;
        let e = per_cat.entry(cat.clone()).or_default();
        e.1 += 1;
        if &got == want {
            e.0 += 1;
        } else {
            failures.push(format!("[{cat}] {text:?}\n    want {want:?}\n    got  {got:?}"));
        }
    }
    for f in &failures {
        println!("{f}");
    }
    for (cat, (ok, n)) in &per_cat {
        println!("{cat:>12}: {ok}/{n}");
    }
    let ok = cases.len() - failures.len();
    let share = 100.0 * ok as f64 / cases.len() as f64;
    println!("normaliser test set: {ok}/{} read as expected ({share:.1}%)", cases.len());
    assert!(share >= 95.0, "only {share:.1}% of the test set reads as expected:\n{}", failures.join("\n"));
}

#[test]
fn every_case_keeps_origins_in_the_written_text() {
    for (_, text, _) in cases() {
        let t = verbalize(&text, &TextOptions::default(), &Pronunciations::new());
        let n = text.chars().count();
        assert_eq!(t.origin.len(), t.text.chars().count(), "{text:?}");
        assert!(t.origin.iter().all(|o| o.start <= o.end && o.end <= n), "{text:?}: {:?}", t.origin);
    }
}
