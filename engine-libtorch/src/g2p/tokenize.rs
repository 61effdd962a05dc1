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
    pub text: String,
    pub whitespace: bool,
    pub start: usize,
    pub end: usize,
}

pub struct Tokenizer {
    special: HashMap<String, Vec<String>>,
    prefix: Regex,
    suffix: Regex,
    infix: Regex,
    url: Regex,
}

fn class_escape(s: &str) -> String {
    s.chars().map(|c| escape(&c.to_string())).collect()
}

fn each_escaped(s: &str) -> Vec<String> {
    s.chars().map(|c| escape(&c.to_string())).collect()
}

impl Tokenizer {
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

    fn find_prefix(&self, s: &str) -> usize {
        match self.prefix.find(s) {
            Ok(Some(m)) => m.end(),
            _ => 0,
        }
    }

    fn find_suffix(&self, s: &str) -> usize {
        match self.suffix.find(s) {
            Ok(Some(m)) => m.end() - m.start(),
            _ => 0,
        }
    }

    /// One whitespace-free chunk -> token texts.
    pub fn split(&self, s: &str) -> Vec<String> {
        let special = &self.special;
        if let Some(v) = special.get(s) {
            return v.clone();
        }
        let mut s = s.to_string();
        let mut pre: Vec<String> = Vec::new();
        let mut suf: Vec<String> = Vec::new();
        let mut last = usize::MAX;
        while !s.is_empty() && s.len() != last && !special.contains_key(&s) {
            last = s.len();
            let pre_len = self.find_prefix(&s);
            let (mut prefix, mut minus_pre) = (String::new(), String::new());
            if pre_len > 0 {
                prefix = s[..pre_len].to_string();
                minus_pre = s[pre_len..].to_string();
                if !minus_pre.is_empty() && special.contains_key(&minus_pre) {
                    s = minus_pre;
                    pre.push(prefix);
                    break;
                }
            }
            let suf_len = self.find_suffix(&s[pre_len..]);
            let (mut suffix, mut minus_suf) = (String::new(), String::new());
            if suf_len > 0 {
                suffix = s[s.len() - suf_len..].to_string();
                minus_suf = s[..s.len() - suf_len].to_string();
                if !minus_suf.is_empty() && special.contains_key(&minus_suf) {
                    s = minus_suf;
                    suf.push(suffix);
                    break;
                }
            }
            if pre_len > 0 && suf_len > 0 && pre_len + suf_len <= s.len() {
                s = s[pre_len..s.len() - suf_len].to_string();
                pre.push(prefix);
                suf.push(suffix);
            } else if pre_len > 0 {
                s = minus_pre;
                pre.push(prefix);
            } else if suf_len > 0 {
                s = minus_suf;
                suf.push(suffix);
            }
        }
        let mut toks = pre;
        if !s.is_empty() {
            if let Some(v) = special.get(&s) {
                toks.extend(v.iter().cloned());
            } else if self.url.is_match(&s).unwrap_or(false) {
                toks.push(s.clone());
            } else {
                let mut start = 0;
                for m in self.infix.find_iter(&s).flatten() {
                    if m.start() == 0 || m.start() == m.end() {
                        continue;
                    }
                    if m.start() > start {
                        toks.push(s[start..m.start()].to_string());
                    }
                    toks.push(m.as_str().to_string());
                    start = m.end();
                }
                if start < s.len() {
                    toks.push(s[start..].to_string());
                }
            }
        }
        toks.extend(suf.into_iter().rev());
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
                    if let Some(v) = self.special.get(&joined) {
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
