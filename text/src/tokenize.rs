//! Word tokeniser with spaCy's English rules (hibari `g2p/tokenize.py`): special cases from
//! `tokenizer_exceptions.json`, prefix/suffix peeling, infix splits, URLs kept whole, and a
//! rejoin of split pieces that spell a special case.

use std::collections::HashMap;

use fancy_regex::Regex;

use super::normalize::escape;
use super::G2pError;

const LO: &str = "a-zß-öø-ÿ";
const UP: &str = "A-ZÀ-ÖØ-Þ";
const L: &str = r"[^\W\d_]";
const Q: &str = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉";
const PUNCT: &str = "…,:;!?¿¡()[]{}<>_#*&。？！，、；：～·";
const ICONS: &str = "™®©°§¶†‡•";
const CURRENCY: &str = r"\$|£|€|¥|฿|US\$|C\$|A\$|₽|₹|₩|₪|₺|₴|₦|₫|₱|₲|₵|₸|₼|₾|₿";
const UNITS: &str = r"km|km²|km³|m|m²|m³|dm|dm²|dm³|cm|cm²|cm³|mm|mm²|mm³|ha|µm|nm|yd|in|ft|kg|g|mg|µg|t|lb|oz|m/s|km/h|kmh|mph|hPa|Pa|mbar|mb|MB|kb|KB|gb|GB|tb|TB|T|G|M|K|%";

/// A token: text, whether whitespace followed, and its char range in the tokenised text.
#[derive(Debug, Clone, PartialEq)]
pub struct RawToken {
    /// The token's text.
    pub text: String,
    /// Whether whitespace followed it.
    pub whitespace: bool,
    /// Its first char in the tokenised text.
    pub start: usize,
    /// The char after its last.
    pub end: usize,
}

/// spaCy's English tokenizer rules, with the special cases of `tokenizer_exceptions.json`.
pub struct Tokenizer {
    special: HashMap<String, Vec<String>>,
    /// Bytes of the longest special case.
    longest_special: usize,
    prefix: Regex,
    suffix: Regex,
    infix: Regex,
    url: Regex,
}

/// Chars of a chunk's start or end the prefix and suffix patterns look at: enough for the longest
/// fixed affix ("km/h", "US$") and the char a lookbehind checks before it.
const AFFIX_WINDOW: usize = 16;

/// Byte offset of the `n`th char of `s` (its length if shorter).
fn byte_at(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

fn class_escape(s: &str) -> String {
    s.chars().map(|c| escape(&c.to_string())).collect()
}

fn each_escaped(s: &str) -> Vec<String> {
    s.chars().map(|c| escape(&c.to_string())).collect()
}

impl Tokenizer {
    /// The tokenizer with `special` cases (a string and the tokens it is split into).
    pub fn new(special: HashMap<String, Vec<String>>) -> Result<Tokenizer, G2pError> {
        let punct = each_escaped(PUNCT);
        let quotes = each_escaped(Q);
        let icons = [format!("[{}]", class_escape(ICONS))];
        let mut prefixes: Vec<String> =
            ["§", "%", "=", "—", "–", r"\+(?![0-9])", "…", "……"].iter().map(|s| s.to_string()).collect();
        prefixes.extend(punct.iter().cloned());
        prefixes.extend([r"\.\.+".to_string(), "…".to_string()]);
        prefixes.extend(quotes.iter().cloned());
        prefixes.push(CURRENCY.to_string());
        prefixes.extend(icons.iter().cloned());

        let mut suffixes: Vec<String> = vec!["…".into(), "……".into()];
        suffixes.extend(punct.iter().cloned());
        suffixes.extend([r"\.\.+".to_string(), "…".to_string()]);
        suffixes.extend(quotes.iter().cloned());
        suffixes.extend(icons.iter().cloned());
        suffixes.extend(["'s", "'S", "’s", "’S", "—", "–"].iter().map(|s| s.to_string()));
        suffixes.push(r"(?<=[0-9])\+".into());
        suffixes.push(r"(?<=°[FfCcKk])\.".into());
        suffixes.push(format!(r"(?<=[0-9])(?:{CURRENCY})"));
        suffixes.push(format!(r"(?<=[0-9])(?:{UNITS})"));
        suffixes.push(format!(r"(?<=[0-9{LO}%²\-\+{}{}])\.", class_escape(PUNCT), class_escape(Q)));
        suffixes.push(format!(r"(?<=[{UP}][{UP}])\."));

        let infixes: Vec<String> = vec![
            r"\.\.+".into(),
            "…".into(),
            icons[0].clone(),
            r"(?<=[0-9])[+\-\*^](?=[0-9-])".into(),
            format!(r"(?<=[{LO}{q}])\.(?=[{UP}{q}])", q = class_escape(Q)),
            format!(r"(?<={L}),(?={L})"),
            format!(r"(?<=[^\W_])(?:-|–|—|--|---|——|~)(?={L})"),
            format!(r"(?<=[^\W_])[:<>=/](?={L})"),
        ];
        let mk = |p: String| Regex::new(&p).map_err(|e| G2pError::Data(format!("tokenizer regex: {e}")));
        Ok(Tokenizer {
            longest_special: special.keys().map(String::len).max().unwrap_or(0),
            special,
            prefix: mk(prefixes.iter().map(|p| format!("^(?:{p})")).collect::<Vec<_>>().join("|"))?,
            suffix: mk(suffixes.iter().map(|s| format!("(?:{s})$")).collect::<Vec<_>>().join("|"))?,
            infix: mk(infixes.iter().map(|s| format!("(?:{s})")).collect::<Vec<_>>().join("|"))?,
            url: mk(r"(?i)^(?:(?:https?|ftp)://|www\.)\S+$|^[\w.+-]+@[\w-]+(?:\.[\w-]+)+$|^(?:[\w-]+\.)+(?:com|org|net|edu|gov|io|co|uk|de|fr|info|biz|us|ca|au|tv|me|ly|ai)(?:/\S*)?$".into())?,
        })
    }

    /// Tokens of `text` with whitespace flags and char offsets.
    pub fn tokenize(&self, text: &str) -> Vec<RawToken> {
        let mut out = Vec::new();
        let mut char_pos = 0usize;
        let mut byte_pos = 0usize;
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i].1.is_whitespace() {
                i += 1;
                continue;
            }
            let start = i;
            while i < chars.len() && !chars[i].1.is_whitespace() {
                i += 1;
            }
            let (b0, b1) = (chars[start].0, if i < chars.len() { chars[i].0 } else { text.len() });
            let chunk = &text[b0..b1];
            let _ = (&mut char_pos, &mut byte_pos);
            let toks = self.split(chunk);
            let ws = i < chars.len();
            let concat: String = toks.concat();
            let mut c = start;
            let n = toks.len();
            for (k, t) in toks.into_iter().enumerate() {
                let len = t.chars().count();
                let (s, e) = if concat == chunk { (c, c + len) } else { (start, i) };
                c += len;
                out.push(RawToken { text: t, whitespace: ws && k + 1 == n, start: s, end: e });
            }
        }
        out
    }

    /// Length of the prefix the prefix patterns match at the start of `s`.
    fn find_prefix(&self, s: &str) -> usize {
        let find = |s: &str| match self.prefix.find(s) {
            Ok(Some(m)) => m.end(),
            _ => 0,
        };
        // Every prefix but a run of dots is a few chars long, so a window keeps each peel of a
        // long chunk cheap; a match reaching the window's end may go on, so it is redone in full.
        let window = &s[..byte_at(s, AFFIX_WINDOW)];
        match find(window) {
            n if n == window.len() && n < s.len() => find(s),
            n => n,
        }
    }

    /// Length of the suffix the suffix patterns match at the end of `s`.
    fn find_suffix(&self, s: &str) -> usize {
        let find = |s: &str| match self.suffix.find(s) {
            Ok(Some(m)) => (m.start() == 0, m.end() - m.start()),
            _ => (false, 0),
        };
        // As in `find_prefix`, from the end: the regex is only anchored at `$`, so on the whole
        // chunk it would try every start position, for every char peeled.
        let from = s.char_indices().rev().nth(AFFIX_WINDOW - 1).map_or(0, |(i, _)| i);
        match find(&s[from..]) {
            (true, _) if from > 0 => find(s).1,
            (_, n) => n,
        }
    }

    fn is_special(&self, s: &str) -> bool {
        // Hashing a long chunk on every peel would make peeling quadratic; no key is that long.
        s.len() <= self.longest_special && self.special.contains_key(s)
    }

    /// One whitespace-free chunk -> token texts.
    pub fn split(&self, s: &str) -> Vec<String> {
        if self.is_special(s) {
            return self.special.get(s).cloned().unwrap_or_default();
        }
        // The chunk still to split is s[lo..hi]: peeling moves the bounds instead of copying.
        let (mut lo, mut hi) = (0, s.len());
        let mut pre: Vec<&str> = Vec::new();
        let mut suf: Vec<&str> = Vec::new();
        let mut last = usize::MAX;
        while lo < hi && hi - lo != last && !self.is_special(&s[lo..hi]) {
            last = hi - lo;
            let cur = &s[lo..hi];
            let pre_len = self.find_prefix(cur);
            if pre_len > 0 && pre_len < cur.len() && self.is_special(&cur[pre_len..]) {
                pre.push(&cur[..pre_len]);
                lo += pre_len;
                break;
            }
            let suf_len = self.find_suffix(&cur[pre_len..]);
            let cut = cur.len() - suf_len;
            if suf_len > 0 && cut > 0 && self.is_special(&cur[..cut]) {
                suf.push(&cur[cut..]);
                hi -= suf_len;
                break;
            }
            if pre_len > 0 {
                pre.push(&cur[..pre_len]);
                lo += pre_len;
            }
            if suf_len > 0 {
                suf.push(&cur[cut..]);
                hi -= suf_len;
            }
        }
        let rest = &s[lo..hi];
        let mut toks: Vec<String> = pre.into_iter().map(str::to_string).collect();
        if !rest.is_empty() {
            if self.is_special(rest) {
                toks.extend(self.special.get(rest).into_iter().flatten().cloned());
            } else if self.url.is_match(rest).unwrap_or(false) {
                toks.push(rest.to_string());
            } else {
                let mut start = 0;
                for m in self.infix.find_iter(rest).flatten() {
                    if m.start() == 0 || m.start() == m.end() {
                        continue;
                    }
                    if m.start() > start {
                        toks.push(rest[start..m.start()].to_string());
                    }
                    toks.push(m.as_str().to_string());
                    start = m.end();
                }
                if start < rest.len() {
                    toks.push(rest[start..].to_string());
                }
            }
        }
        toks.extend(suf.into_iter().rev().map(str::to_string));
        if toks.len() > 1 {
            self.rejoin(toks)
        } else {
            toks
        }
    }

    fn rejoin(&self, toks: Vec<String>) -> Vec<String> {
        let mut out = Vec::new();
        let mut i = 0;
        'outer: while i < toks.len() {
            for k in [3, 2] {
                if i + k <= toks.len() {
                    let joined: String = toks[i..i + k].concat();
                    if let Some(v) = self.special.get(&joined).filter(|_| joined.len() <= self.longest_special) {
                        out.extend(v.iter().cloned());
                        i += k;
                        continue 'outer;
                    }
                }
            }
            out.push(toks[i].clone());
            i += 1;
        }
        out
    }
}
