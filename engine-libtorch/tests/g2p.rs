//! The hibari text front end (speechstream-text with the OOV net on tch, as the engine runs it:
//! `load_front_end`) against the Python reference's own outputs (fixtures/g2p, written by
//! fixtures/g2p/make_expected.py). Needs the voice assets: `scripts/setup-voice.sh hibari`.
//! What needs no OOV net is tested in text/tests/front_end.rs.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;
use speechstream_engine_libtorch::g2p::FrontEnd;
use speechstream_engine_libtorch::{load_front_end, OovNet};
use tch::Device;

fn assets() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/hibari");
    assert!(
        dir.join("lexicon_us_gold.json.gz").exists() && dir.join("oov.onnx").exists(),
        "hibari voice assets missing in {}: run scripts/setup-voice.sh hibari",
        dir.display()
    );
    dir
}

fn front_end() -> &'static FrontEnd {
    static FE: OnceLock<FrontEnd> = OnceLock::new();
    FE.get_or_init(|| {
        let mut fe = load_front_end(&assets(), Device::Cpu, false).expect("load the hibari front end");
        // These tests compare with the reference's own readings: its normalisation, not the
        // spoken form of g2p::spoken (checked on its own in text/tests/normalize.rs).
        fe.set_reference_normalization(true);
        fe
    })
}

fn fixture(name: &str) -> Vec<Value> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/g2p").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect("json line")).collect()
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

#[test]
fn corpus_phonemes_match_reference() {
    let fe = front_end();
    let cases = fixture("expected.jsonl");
    assert!(cases.len() >= 200);
    let mut bad = 0;
    for c in &cases {
        let (text, want) = (s(c, "text"), s(c, "phonemes"));
        let got = fe.phonemize(&text);
        if got != want {
            bad += 1;
            println!("MISMATCH {text:?}\n   want {want}\n   got  {got}");
        }
    }
    let ok = cases.len() - bad;
    let pct = 100.0 * ok as f64 / cases.len() as f64;
    println!("g2p corpus: {ok}/{} identical ({pct:.1}%)", cases.len());
    assert!(pct >= 98.0, "only {pct:.1}% of the corpus matches the reference");
}

#[test]
fn sentence_and_clause_splitting_match_reference() {
    let fe = front_end();
    for c in fixture("splits.jsonl") {
        let text = s(&c, "text");
        let want: Vec<String> =
            c["sentences"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
        assert_eq!(fe.split_sentences(&text), want, "sentences of {text:?}");
        let chunks: Vec<String> =
            c["chunks"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
        let got: Vec<String> = fe.sentences(&text).into_iter().map(|s| s.phonemes).collect();
        assert_eq!(got, chunks, "phoneme chunks of {text:?}");
    }
}

#[test]
fn long_sentence_is_clause_split() {
    let fe = front_end();
    let cases = fixture("splits.jsonl");
    let long = cases
        .iter()
        .find(|c| c["chunks"].as_array().unwrap().len() > c["sentences"].as_array().unwrap().len())
        .expect("a long case");
    let text = s(long, "text");
    let want: Vec<String> =
        long["chunks"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    let got: Vec<String> = fe.sentences(&text).into_iter().map(|s| s.phonemes).collect();
    assert_eq!(got, want);
}

#[test]
fn words_map_to_phonemes() {
    let fe = front_end();
    let text = "Dr. Smith paid $9.99 at 7:30 pm.  Zyxqwort is a word!";
    let sents = fe.sentences(text);
    assert_eq!(sents.len(), 2);
    for s in &sents {
        let n = s.phonemes.chars().count();
        let mut last = 0;
        for w in &s.words {
            assert_eq!(&text[w.text_range.clone()], w.text);
            assert!(w.phonemes.start >= last && w.phonemes.end <= n, "{w:?} in {}", s.phonemes);
            last = w.phonemes.start;
        }
    }
    let words: Vec<&str> = sents[0].words.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(words, ["Dr.", "Smith", "paid", "$9.99", "at", "7:30 pm."]);
    let chars: Vec<char> = sents[0].phonemes.chars().collect();
    let piece = |i: usize| chars[sents[0].words[i].phonemes.clone()].iter().collect::<String>();
    assert_eq!(piece(0), "dˈɑktəɹ");
    assert_eq!(piece(1), "smˈɪθ");
    assert!(piece(3).starts_with("nˈIn dˈɑləɹz"), "{}", piece(3));
}

#[test]
fn oov_net_matches_onnxruntime() {
    let oov = OovNet::load(&assets().join("oov.onnx"), Device::Cpu).expect("load the OOV net");
    let cases = fixture("oov.jsonl");
    let mut bad = 0;
    for c in &cases {
        let word = s(c, "word");
        let want: Vec<i64> = c["ids"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let got = oov.forward_ids(&oov.ids(&word));
        if got != want {
            bad += 1;
            println!("OOV {word}: want {want:?}\n          got  {got:?}");
        }
        if let Some(p) = c["phonemes"].as_str() {
            if got == want {
                assert_eq!(oov.phonemize(&word).as_deref(), Some(p));
            }
        }
    }
    println!("oov net: {}/{} words identical", cases.len() - bad, cases.len());
    assert_eq!(bad, 0);
}

#[test]
fn numbers_read_as_reference() {
    let fe = front_end();
    for (text, want) in [
        ("It costs $1.50.", "ˌɪt kˈɔsts wˈʌn dˈɑləɹ ænd fˈɪfti sˈɛnts."),
        ("In 1066 they came.", "ɪn tˈɛn sˈɪksti sˈɪks ðA kˈAm."),
        ("Pi is roughly 3.14159.", "pˈI ɪz ɹˈʌfli θɹˈi pYnt wˈʌn fˈɔɹ wˈʌn fˈIv nˈIn."),
    ] {
        assert_eq!(fe.phonemize(text), want, "{text:?}");
    }
}

#[test]
fn british_front_end() {
    let fe = load_front_end(&assets(), Device::Cpu, true).expect("load the British front end");
    assert_eq!(fe.phonemize("Hello there."), "həlˈQ ðˈɛː.");
    // The OOV net (oov_gb.onnx, int8 in the wheel; dequantized here).
    assert_eq!(fe.phonemize("Zyxqwort is a word."), "zˈɪkskwɔːt ɪz ɐ wˈɜːd.");
}

/// The default front end: the spoken form first. On the reference corpus (plain prose, with a few
/// numbers and titles), it still reads nearly every sentence as the reference does.
#[test]
fn spoken_form_front_end() {
    use speechstream_engine_libtorch::g2p::spoken::{Pronunciation, Pronunciations};
    let mut fe = load_front_end(&assets(), Device::Cpu, false).expect("load the hibari front end");
    let cases = fixture("expected.jsonl");
    let mut same = 0;
    for c in &cases {
        let (text, want) = (s(c, "text"), s(c, "phonemes"));
        let got = fe.phonemize(&text);
        if got == want {
            same += 1;
        } else {
            println!("differs: {text:?}\n  spoken {:?}\n  reference {want}\n  ours      {got}", fe.spoken(&text));
        }
    }
    let pct = 100.0 * same as f64 / cases.len() as f64;
    println!("spoken-form front end on the reference corpus: {same}/{} identical ({pct:.1}%)", cases.len());
    assert!(pct >= 85.0, "{pct:.1}%");
    // Read as written words, not as hibari's normalisation reads them.
    assert_eq!(
        fe.spoken("Call 1-800-555-0199, e.g. now."),
        "Call one, eight hundred, five five five, zero one nine nine, for example now."
    );
    assert_ne!(
        fe.phonemize("Visit https://example.com/docs"),
        fe.phonemize("Visit HTTPS slash slash example com slash docs")
    );
    assert_eq!(fe.phonemize("Visit https://example.com/docs"), fe.phonemize("Visit example dot com slash docs"));
    // Inline markup, the server's lexicon and a request's entries.
    assert_eq!(fe.phonemize("[Kokoro](/kˈOkəɹO/) speaks."), "kˈOkəɹO spˈiks.");
    let mut lex = Pronunciations::new();
    lex.insert("Kokoro", Pronunciation::parse("/kˈOkəɹO/"));
    lex.insert("nginx", Pronunciation::parse("engine x"));
    fe.set_pronunciations(lex);
    assert_eq!(fe.phonemize("Kokoro speaks."), "kˈOkəɹO spˈiks.");
    assert_eq!(fe.phonemize("nginx"), fe.phonemize("engine x"));
    let mut req = Pronunciations::new();
    req.insert("Kokoro", Pronunciation::parse("/kəkˈɔɹO/"));
    let p = fe.phonemize_spans_with("Kokoro speaks.", &req);
    assert_eq!(p.phonemes, "kəkˈɔɹO spˈiks.");
    // Words keep the written token: "$3.50" is one word spanning its spoken words.
    let sent = &fe.sentences("It costs $3.50 at https://example.com today.")[0];
    let texts: Vec<&str> = sent.words.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(texts, ["It", "costs", "$3.50", "at", "https://example.com", "today."]);
    let money = &sent.words[2];
    let ps: String = sent.phonemes.chars().skip(money.phonemes.start).take(money.phonemes.len()).collect();
    assert_eq!(ps, fe.phonemize("three dollars and fifty cents"), "{ps}");
}
