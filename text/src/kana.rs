//! Kana to Kokoro's phonemes, and numbers to kana: the rules of misaki 0.7's Japanese
//! romaniser (the phoneme style Kokoro-82M was trained on) and of the number reader it uses
//! (misaki's num2kana), written here from their behaviour.
//!
//! A word's reading (hiragana) becomes phonemes kana by kana: a kana and a small kana after it
//! are one sound (きゃ kʲa), っ is a glottal stop (ʔ), ー lengthens (ː), ん takes the place of
//! the consonant after it (m before m/p/b, ŋ before k/ɡ, ɲ before ɲ/ʨ/ʥ, n before n/t/d/ɾ/z,
//! ɴ elsewhere), and Japanese punctuation becomes ASCII's.

use std::collections::HashMap;
use std::sync::OnceLock;

/// `kana=phonemes` pairs: single kana, then the two-kana sounds.
const SINGLE: &str = "ぁ=a あ=a ぃ=i い=i ぅ=ɯ う=ɯ ぇ=e え=e ぉ=o お=o か=ka が=ɡa き=kʲi ぎ=ɡʲi く=kɯ \
ぐ=ɡɯ け=ke げ=ɡe こ=ko ご=ɡo さ=sa ざ=ʣa し=ɕi じ=ʥi す=sɨ ず=zɨ せ=se ぜ=ʣe そ=so ぞ=ʣo た=ta だ=da \
ち=ʨi ぢ=ʥi つ=ʦɨ づ=zɨ て=te で=de と=to ど=do な=na に=ɲi ぬ=nɯ ね=ne の=no は=ha ば=ba ぱ=pa ひ=çi \
び=bʲi ぴ=pʲi ふ=ɸɯ ぶ=bɯ ぷ=pɯ へ=he べ=be ぺ=pe ほ=ho ぼ=bo ぽ=po ま=ma み=mʲi む=mɯ め=me も=mo \
ゃ=ja や=ja ゅ=jɯ ゆ=jɯ ょ=jo よ=jo ら=ɾa り=ɾʲi る=ɾɯ れ=ɾe ろ=ɾo ゎ=βa わ=βa ゐ=i ゑ=e を=o ゔ=vɯ \
ゕ=ka ゖ=ke ヷ=va ヸ=vʲi ヹ=ve ヺ=vo";
const DOUBLE: &str = "いぇ=je うぃ=βi うぇ=βe うぉ=βo きぇ=kʲe きゃ=kʲa きゅ=kʲɨ きょ=kʲo ぎゃ=ɡʲa \
ぎゅ=ɡʲɨ ぎょ=ɡʲo くぁ=kᵝa くぃ=kᵝi くぇ=kᵝe くぉ=kᵝo ぐぁ=ɡᵝa ぐぃ=ɡᵝi ぐぇ=ɡᵝe ぐぉ=ɡᵝo しぇ=ɕe \
しゃ=ɕa しゅ=ɕɨ しょ=ɕo じぇ=ʥe じゃ=ʥa じゅ=ʥɨ じょ=ʥo ちぇ=ʨe ちゃ=ʨa ちゅ=ʨɨ ちょ=ʨo ぢゃ=ʥa ぢゅ=ʥɨ \
ぢょ=ʥo つぁ=ʦa つぃ=ʦʲi つぇ=ʦe つぉ=ʦo てぃ=tʲi てゅ=tʲɨ でぃ=dʲi でゅ=dʲɨ とぅ=tɯ どぅ=dɯ にぇ=ɲe \
にゃ=ɲa にゅ=ɲɨ にょ=ɲo ひぇ=çe ひゃ=ça ひゅ=çɨ ひょ=ço びゃ=bʲa びゅ=bʲɨ びょ=bʲo ぴゃ=pʲa ぴゅ=pʲɨ \
ぴょ=pʲo ふぁ=ɸa ふぃ=ɸʲi ふぇ=ɸe ふぉ=ɸo ふゅ=ɸʲɨ ふょ=ɸʲo みゃ=mʲa みゅ=mʲɨ みょ=mʲo りゃ=ɾʲa \
りゅ=ɾʲɨ りょ=ɾʲo ゔぁ=va ゔぃ=vʲi ゔぇ=ve ゔぉ=vo ゔゅ=bʲɨ ゔょ=bʲo";
/// Punctuation: (mark, phonemes).
const MARKS: &[(char, &str)] = &[
    ('。', "."),
    ('、', ","),
    ('？', "?"),
    ('！', "!"),
    ('「', "\u{201c}"),
    ('」', "\u{201d}"),
    ('『', "\u{201c}"),
    ('』', "\u{201d}"),
    ('：', ":"),
    ('；', ";"),
    ('（', "("),
    ('）', ")"),
    ('《', "("),
    ('》', ")"),
    ('【', "["),
    ('】', "]"),
    ('・', " "),
    ('，', ","),
    ('～', "—"),
    ('〜', "—"),
    ('—', "—"),
    ('«', "\u{201c}"),
    ('»', "\u{201d}"),
    // Voicing marks on their own are dropped.
    ('\u{3099}', ""),
    ('\u{309a}', ""),
    ('\u{309b}', ""),
    ('\u{309c}', ""),
];

/// Small kana that join the kana before them.
const SMALL: &str = "ゃゅょぁぃぅぇぉ";

fn table() -> &'static HashMap<String, &'static str> {
    static TABLE: OnceLock<HashMap<String, &'static str>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = HashMap::new();
        for pair in SINGLE.split(' ').chain(DOUBLE.split(' ')) {
            if let Some((k, v)) = pair.split_once('=') {
                t.insert(k.to_owned(), v);
            }
        }
        for &(k, v) in MARKS {
            t.insert(k.to_string(), v);
        }
        t
    })
}

fn lookup(key: &str) -> Option<&'static str> {
    table().get(key).copied()
}

fn lookup2(a: char, b: char) -> Option<&'static str> {
    let mut key = String::with_capacity(8);
    key.push(a);
    key.push(b);
    lookup(&key)
}

fn lookup1(c: char) -> Option<&'static str> {
    lookup(c.encode_utf8(&mut [0; 4]))
}

/// Katakana to hiragana (the other characters as they are).
pub fn hiragana(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{30a1}'..='\u{30f6}' => char::from_u32(c as u32 - 0x60).unwrap_or(c),
            'ヽ' => 'ゝ',
            'ヾ' => 'ゞ',
            _ => c,
        })
        .collect()
}

/// Hiragana to katakana.
pub fn katakana(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{3041}'..='\u{3096}' => char::from_u32(c as u32 + 0x60).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// Whether `c` is a kana (either script, with the prolonged sound mark).
pub fn is_kana(c: char) -> bool {
    matches!(c, '\u{3041}'..='\u{3096}' | '\u{30a1}'..='\u{30fa}' | 'ー' | 'ゝ' | 'ゞ' | 'ヽ' | 'ヾ')
}

/// The voiced kana of `k` (か -> が), if it has one.
fn voiced(k: char) -> Option<char> {
    const PLAIN: &str = "かきくけこさしすせそたちつてとはひふへほ";
    const VOICED: &str = "がぎぐげござじずぜぞだぢづでどばびぶべぼ";
    let i = PLAIN.chars().position(|c| c == k)?;
    VOICED.chars().nth(i)
}

/// One kana's phonemes given its neighbours in the word's reading.
fn kana_phonemes(prev: Option<char>, k: char, next: Option<char>) -> String {
    match k {
        // Iteration marks: repeat the kana before (voiced for ゞ); 々 and 〃 can't be read.
        'ゝ' | 'ヽ' => return prev.map(|p| p.to_string()).unwrap_or_default(),
        'ゞ' | 'ヾ' => return prev.and_then(voiced).and_then(lookup1).unwrap_or("").to_owned(),
        '〃' | '々' => return String::new(),
        _ => {}
    }
    if let Some(p) = prev.and_then(|p| lookup2(p, k)) {
        return p.to_owned();
    }
    if next.is_some_and(|n| lookup2(k, n).is_some()) {
        return String::new();
    }
    if let Some(n) = next.filter(|n| SMALL.contains(*n)) {
        if k == 'っ' {
            return String::new();
        }
        // The kana's consonant with the small kana's vowel.
        let mut own: Vec<char> = lookup1(k).unwrap_or("").chars().collect();
        own.pop();
        return own.into_iter().collect::<String>() + lookup1(n).unwrap_or("");
    }
    if SMALL.contains(k) {
        return String::new();
    }
    match k {
        'ー' => "ː".to_owned(),
        'っ' => "ʔ".to_owned(),
        'ん' => {
            let after = next.and_then(lookup1).unwrap_or("");
            let n = if after.starts_with(['m', 'p', 'b']) {
                "m"
            } else if after.starts_with(['k', 'ɡ']) {
                "ŋ"
            } else if after.starts_with(['ɲ', 'ʨ', 'ʥ']) {
                "ɲ"
            } else if after.starts_with(['n', 't', 'd', 'ɾ', 'z']) {
                "n"
            } else {
                "ɴ"
            };
            n.to_owned()
        }
        _ => lookup1(k).unwrap_or("").to_owned(),
    }
}

/// The phonemes of a word written `surface` and read `reading` (hiragana).
pub fn word_phonemes(surface: &str, reading: &str) -> String {
    if surface.is_ascii() {
        return surface.to_owned();
    }
    let kana: Vec<char> = reading.chars().collect();
    let mut out = String::new();
    for (i, &k) in kana.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| kana[p]);
        out += &kana_phonemes(prev, k, kana.get(i + 1).copied());
    }
    out
}

const DIGITS: [&str; 10] = ["ゼロ", "いち", "に", "さん", "よん", "ご", "ろく", "なな", "はち", "きゅう"];

fn digit(d: u8) -> &'static str {
    DIGITS[(d - b'0') as usize % 10]
}

/// 0-99 (two digits, a leading zero read as the one digit).
fn tens(s: &[u8]) -> String {
    match s {
        [b'0', d] => digit(*d).to_owned(),
        [b'1', b'0'] => "じゅう".to_owned(),
        [b'1', d] => format!("じゅう{}", digit(*d)),
        [t, b'0'] => format!("{}じゅう", digit(*t)),
        [t, d] => format!("{}じゅう{}", digit(*t), digit(*d)),
        _ => String::new(),
    }
}

/// 100-999.
fn hundreds(s: &[u8]) -> String {
    let head = match s[0] {
        b'1' => "ひゃく".to_owned(),
        b'3' => "さんびゃく".to_owned(),
        b'6' => "ろっぴゃく".to_owned(),
        b'8' => "はっぴゃく".to_owned(),
        d => format!("{}ひゃく", digit(d)),
    };
    let rest = match &s[1..] {
        b"00" => String::new(),
        [b'0', d] => digit(*d).to_owned(),
        r => tens(r),
    };
    head + &rest
}

/// 0-9999 as four digits (leading zeros allowed); `alone`: not the lower part of a bigger
/// number (1000 is せん alone, いっせん in 11000).
fn thousands(s: &[u8], alone: bool) -> String {
    let start = s.iter().position(|&d| d != b'0');
    let Some(start) = start else { return String::new() };
    let s = &s[start..];
    match s.len() {
        1 => return digit(s[0]).to_owned(),
        2 => return tens(s),
        3 => return hundreds(s),
        _ => {}
    }
    let head = match s[0] {
        b'1' if alone => "せん".to_owned(),
        b'1' => "いっせん".to_owned(),
        b'3' => "さんぜん".to_owned(),
        b'8' => "はっせん".to_owned(),
        d => format!("{}せん", digit(d)),
    };
    let rest = match &s[1..] {
        b"000" => String::new(),
        [b'0', r @ ..] => tens(r),
        r => hundreds(r),
    };
    head + &rest
}

/// A run of ASCII digits read as a number in hiragana (up to nine digits, as misaki reads
/// them; a longer run is read digit by digit).
pub fn number(digits: &str) -> String {
    let mut s = digits.as_bytes();
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return String::new();
    }
    if s.len() > 9 {
        return s.iter().map(|&d| digit(d)).collect();
    }
    while s.len() > 1 && s[0] == b'0' {
        s = &s[1..];
    }
    match s.len() {
        1 => digit(s[0]).to_owned(),
        2 => tens(s),
        3 => hundreds(s),
        4 => thousands(s, true),
        n => {
            let (high, low) = s.split_at(n - 4);
            let high = match high.len() {
                1 => format!("{}まん", digit(high[0])),
                2 => format!("{}まん", tens(high)),
                3 => format!("{}まん", hundreds(high)),
                4 => format!("{}まん", thousands(high, false)),
                _ => {
                    let man = if &high[1..] == b"0000" { "" } else { "まん" };
                    format!("{}おく{}{man}", digit(high[0]), thousands(&high[1..], false))
                }
            };
            high + &thousands(low, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_misaki_reads_them() {
        for (n, kana) in [
            ("0", "ゼロ"),
            ("7", "なな"),
            ("10", "じゅう"),
            ("15", "じゅうご"),
            ("40", "よんじゅう"),
            ("333", "さんびゃくさんじゅうさん"),
            ("600", "ろっぴゃく"),
            ("1000", "せん"),
            ("1001", "せんいち"),
            ("2026", "にせんにじゅうろく"),
            ("8000", "はっせん"),
            ("10000", "いちまん"),
            ("11000", "いちまんいっせん"),
            ("1000000", "ひゃくまん"),
            ("123456789", "いちおくにせんさんびゃくよんじゅうごまんろくせんななひゃくはちじゅうきゅう"),
            ("007", "なな"),
        ] {
            assert_eq!(number(n), kana, "{n}");
        }
    }

    #[test]
    fn kana_rules() {
        assert_eq!(word_phonemes("今日は", "きょーわ"), "kʲoːβa");
        assert_eq!(word_phonemes("こんにちは", "こんにちわ"), "koɲɲiʨiβa");
        assert_eq!(word_phonemes("新聞", "しんぶん"), "ɕimbɯɴ");
        assert_eq!(word_phonemes("日本語", "にほんご"), "ɲihoŋɡo");
        assert_eq!(word_phonemes("言っ", "いっ"), "iʔ");
        assert_eq!(word_phonemes("コンピューター", "こんぴゅーたー"), "kompʲɨːtaː");
        assert_eq!(word_phonemes("、", "、"), ",");
    }
}
