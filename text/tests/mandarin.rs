//! The Mandarin front end against misaki 0.9.4's zh G2P (the legacy path of Kokoro v1.0's `z`
//! voices), on the sentences of tests/mandarin/sentences.txt (numbers, dates, percentages,
//! punctuation, quotes, names, Latin words, polyphones) with misaki's phonemes for each in
//! tests/mandarin/expected.txt, and on every pinyin syllable of the embedded data with misaki's
//! IPA for it (tests/mandarin/syllables.txt). The references are committed; regenerate them with
//! scripts/setup-mandarin-reference.sh, then .venv-mandarin/bin/python scripts/mandarin-expected.py
//! (and scripts/mandarin-data.py for the data and syllables). No Python is needed to run this.

use std::path::PathBuf;
use std::sync::OnceLock;

use speechstream_text::mandarin::{has_han, syllable_ipa, Mandarin};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mandarin")
}

fn lines(name: &str) -> Vec<String> {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(str::to_owned).collect()
}

fn mandarin() -> &'static Mandarin {
    static M: OnceLock<Mandarin> = OnceLock::new();
    M.get_or_init(|| Mandarin::new().expect("the Mandarin front end"))
}

/// At least 95% of the sentences read exactly as misaki reads them; every difference printed.
#[test]
fn sentences_match_misaki() {
    let sentences = lines("sentences.txt");
    let expected = lines("expected.txt");
    assert_eq!(sentences.len(), expected.len(), "sentences.txt and expected.txt differ in length");
    assert!(sentences.len() >= 100);
    let m = mandarin();
    let mut same = 0;
    for (i, (text, want)) in sentences.iter().zip(&expected).enumerate() {
        let got = m.phonemize(text);
        if &got == want {
            same += 1;
        } else {
            println!("line {}: {text}\n  misaki: {want}\n  ours:   {got}", i + 1);
        }
    }
    let rate = same as f64 / sentences.len() as f64;
    println!("Mandarin: {same} of {} sentences identical to misaki 0.9.4 ({:.1}%)", sentences.len(), rate * 100.0);
    assert!(rate >= 0.95, "only {same} of {} sentences identical", sentences.len());
}

/// Our pinyin-to-IPA gives misaki's for every syllable the data holds.
#[test]
fn syllables_match_misaki() {
    let mut n = 0;
    for line in lines("syllables.txt") {
        if line.starts_with('#') {
            continue;
        }
        let (pinyin, ipa) = line.split_once('\t').expect("syllable<TAB>ipa");
        assert_eq!(syllable_ipa(pinyin).as_deref(), Some(ipa), "{pinyin}");
        n += 1;
    }
    assert!(n > 1000, "{n} syllables");
}

/// Sentences read one by one give what the text read at once gives, and their words point at
/// their text and phonemes.
#[test]
fn sentences_and_words() {
    let m = mandarin();
    let text = "我们银行的行长还没有还钱。今天是2024年3月15日，气温25℃！他说：“我用iPhone。”\n增长了12.5%吗？";
    let sentences = m.sentences(text);
    let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(
        texts,
        ["我们银行的行长还没有还钱。", "今天是2024年3月15日，气温25℃！", "他说：“我用iPhone。”\n", "增长了12.5%吗？"]
    );
    // Each is misaki's reading of it; read at once, sentences that end in 。！？ are spaced as
    // one by one (misaki's `. ` for 。; after a closing quote misaki puts no space).
    for s in &sentences {
        assert_eq!(s.phonemes, m.phonemize(&s.text));
    }
    assert_eq!(
        format!("{} {}", sentences[0].phonemes, sentences[1].phonemes),
        m.phonemize(&format!("{}{}", sentences[0].text, sentences[1].text))
    );
    let chars: Vec<char> = text.chars().collect();
    for s in &sentences {
        let ps: Vec<char> = s.phonemes.chars().collect();
        let mut last = 0;
        for w in &s.words {
            assert_eq!(&text[w.text_range.clone()], w.text);
            assert_eq!(chars[w.chars.clone()].iter().collect::<String>(), w.text);
            assert!(w.text_range.start >= last, "words in order: {:?}", s.words);
            last = w.text_range.end;
            assert!(w.phonemes.end <= ps.len());
            assert!(!w.phonemes.is_empty(), "{w:?}");
        }
    }
    let first = &sentences[0];
    let words: Vec<&str> = first.words.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(words, ["我们", "银行", "的", "行长", "还", "没有", "还", "钱"]);
    let ps: Vec<char> = first.phonemes.chars().collect();
    let read = |w: usize| ps[first.words[w].phonemes.clone()].iter().collect::<String>();
    assert_eq!(read(1), "i↗nxa↗ŋ");
    assert_eq!(read(3), "xa↗ŋꭧa↓ŋ");
    // One number's reading is one word, with the digits' place in the text.
    let date = &sentences[1];
    let words: Vec<&str> = date.words.iter().map(|w| w.text.as_str()).collect();
    assert!(words.contains(&"2024年"), "{words:?}");
    let latin = &sentences[2];
    assert!(latin.words.iter().any(|w| w.text == "iPhone"), "{:?}", latin.words);
}

#[test]
fn split_sentences() {
    let m = mandarin();
    assert_eq!(m.split_sentences("圆周率是3.14。对吗?对! Yes."), ["圆周率是3.14。", "对吗?", "对! ", "Yes."]);
    assert_eq!(m.split_sentences("「好！」他说。"), ["「好！」", "他说。"]);
    assert!(m.split_sentences("  \n ").is_empty());
    assert!(m.sentences("").is_empty());
    assert!(m.sentences("。").iter().all(|s| !s.phonemes.trim().is_empty()));
}

#[test]
fn han() {
    assert!(has_han("你好"));
    assert!(has_han("Hello 世界"));
    assert!(!has_han("こんにちは"));
    assert!(!has_han("Hello"));
}
