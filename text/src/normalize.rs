//! Text normalisation before tokenising (hibari `g2p/normalize.py`): times, dates, money, units,
//! titles, abbreviations, Roman numerals, phone numbers, fractions, ranges and symbols, with the
//! word tables of `normalize.json`. Every rewrite keeps track of which characters of the input each
//! output character came from, so phonemes can be mapped back to the words of the text.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use fancy_regex::{Captures, Regex};
use serde_json::Value;

use super::numbers as num;
use super::G2pError;

/// A string with, for each char, the char range of the original text it came from.
#[derive(Debug, Clone)]
pub struct Tracked {
    /// The text.
    pub text: String,
    /// Per char of `text`, the char range of the original it came from.
    pub origin: Vec<Range<usize>>,
}

impl Tracked {
    /// `text` as it is: each char from itself.
    pub fn new(text: &str) -> Tracked {
        Tracked { text: text.to_string(), origin: (0..text.chars().count()).map(|i| i..i + 1).collect() }
    }

    /// [`Tracked::sub`] for a regex that matches only where a digit (`\d`, Unicode Nd) is: skipped
    /// when the text has no numeric character, as most texts have none (the regexes with
    /// look-behinds run on the backtracking engine, a fair share of the G2P's time).
    pub fn sub_numeric(&mut self, re: &Regex, f: impl FnMut(&Captures, &str) -> String) {
        if self.text.chars().any(char::is_numeric) {
            self.sub(re, f);
        }
    }

    /// `re.sub(re, f, text)`, keeping the origins: replaced text maps to the whole matched span.
    pub fn sub(&mut self, re: &Regex, mut f: impl FnMut(&Captures, &str) -> String) {
        let mut out = String::with_capacity(self.text.len());
        let mut origin = Vec::with_capacity(self.origin.len());
        let mut last = 0usize; // byte
        let mut last_char = 0usize;
        let text = &self.text;
        let mut any = false;
        for caps in re.captures_iter(text) {
            let Ok(caps) = caps else { break };
            let m = caps.get(0).expect("group 0");
            any = true;
            let seg = &text[last..m.start()];
            let n_seg = seg.chars().count();
            out.push_str(seg);
            origin.extend_from_slice(&self.origin[last_char..last_char + n_seg]);
            let mchars = m.as_str().chars().count();
            let span_from = last_char + n_seg;
            let span = if mchars > 0 {
                let o = &self.origin[span_from..span_from + mchars];
                o.iter().map(|r| r.start).min().unwrap_or(0)..o.iter().map(|r| r.end).max().unwrap_or(0)
            } else if span_from > 0 {
                self.origin[span_from - 1].end..self.origin[span_from - 1].end
            } else {
                0..0
            };
            let rep = f(&caps, text);
            origin.extend(std::iter::repeat_n(span, rep.chars().count()));
            out.push_str(&rep);
            last = m.end();
            last_char = span_from + mchars;
        }
        if !any {
            return;
        }
        out.push_str(&text[last..]);
        origin.extend_from_slice(&self.origin[last_char..]);
        self.text = out;
        self.origin = origin;
    }

    /// Plain one-char-to-one-char replacement (keeps origins as they are).
    pub fn map_chars(&mut self, f: impl Fn(char) -> char) {
        self.text = self.text.chars().map(f).collect();
    }

    /// Origin char range of the chars `r` of this text.
    pub fn origin_of(&self, r: Range<usize>) -> Option<Range<usize>> {
        let o = self.origin.get(r)?;
        let s = o.iter().map(|x| x.start).min()?;
        let e = o.iter().map(|x| x.end).max()?;
        Some(s..e)
    }
}

pub(crate) fn escape(s: &str) -> String {
    fancy_regex::escape(s).into_owned()
}

/// `_alt`: alternation of the words, longest first (stable for ties).
fn alt<S: AsRef<str>>(words: &[S]) -> String {
    let mut w: Vec<&str> = words.iter().map(|s| s.as_ref()).collect();
    w.sort_by_key(|s| std::cmp::Reverse(s.chars().count()));
    w.iter().map(|s| escape(s)).collect::<Vec<_>>().join("|")
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c.flat_map(|x| x.to_lowercase())).collect(),
        None => String::new(),
    }
}

fn re(p: &str) -> Result<Regex, G2pError> {
    Regex::new(p).map_err(|e| G2pError::Data(format!("regex {p:?}: {e}")))
}

/// The word tables of `normalize.json` and the compiled rewrites.
pub struct Normalizer {
    months: HashMap<String, String>,
    month_names: Vec<String>,
    /// Titles ("Dr", "Mr", ...) and how they are read; a title's stop ends no sentence.
    pub titles: HashMap<String, String>,
    abbrev: HashMap<String, String>,
    units: HashMap<String, (String, String)>,
    symbols: Vec<(Regex, String)>,
    currency: HashMap<String, (String, String)>,
    re_ws: Regex,
    re_time: Regex,
    re_date_us: Regex,
    re_date_iso: Regex,
    re_month_day: Regex,
    re_day_month: Regex,
    re_unit: Regex,
    re_deg: Regex,
    re_cents: Regex,
    re_currency: Regex,
    re_big_money: Regex,
    re_title: Regex,
    re_abbrev: Regex,
    re_no: Regex,
    re_hash: Regex,
    re_roman_c: Regex,
    re_roman_o: Regex,
    re_phone: Regex,
    re_range: Regex,
    re_fraction: Regex,
    re_plus: Regex,
    re_space_punct: Regex,
}

fn str_map(v: &Value, key: &str) -> Result<Vec<(String, String)>, G2pError> {
    let obj = v.get(key).and_then(Value::as_object).ok_or_else(|| G2pError::Data(format!("normalize.json: {key}")))?;
    Ok(obj.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
}

fn pair_map(v: &Value, key: &str) -> Result<HashMap<String, (String, String)>, G2pError> {
    let obj = v.get(key).and_then(Value::as_object).ok_or_else(|| G2pError::Data(format!("normalize.json: {key}")))?;
    Ok(obj
        .iter()
        .map(|(k, v)| {
            let a = v.get(0).and_then(Value::as_str).unwrap_or("").to_string();
            let b = v.get(1).and_then(Value::as_str).unwrap_or("").to_string();
            (k.clone(), (a, b))
        })
        .collect())
}

fn str_list(v: &Value, key: &str) -> Result<Vec<String>, G2pError> {
    let arr = v.get(key).and_then(Value::as_array).ok_or_else(|| G2pError::Data(format!("normalize.json: {key}")))?;
    Ok(arr.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
}

/// The keys of `normalize.json`'s `symbols` object in file order (serde_json's map is sorted).
fn symbol_order(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(at) = raw.find("\"symbols\"") else { return out };
    let rest = &raw[at..];
    let Some(open) = rest.find('{') else { return out };
    let body = &rest[open + 1..];
    // Walk "key": "value" pairs with serde_json's string parser.
    let mut s = body;
    loop {
        s = s.trim_start_matches([' ', '\n', '\r', '\t', ',']);
        if s.starts_with('}') || s.is_empty() {
            break;
        }
        let mut de = serde_json::Deserializer::from_str(s).into_iter::<String>();
        let Some(Ok(key)) = de.next() else { break };
        let used = de.byte_offset();
        s = s[used..].trim_start().trim_start_matches(':').trim_start();
        let mut de = serde_json::Deserializer::from_str(s).into_iter::<Value>();
        let Some(Ok(_)) = de.next() else { break };
        let used = de.byte_offset();
        s = &s[used..];
        out.push(key);
    }
    out
}

impl Normalizer {
    /// The normaliser of `normalize.json`'s text.
    pub fn new(raw_json: &str) -> Result<Normalizer, G2pError> {
        let v: Value = serde_json::from_str(raw_json).map_err(|e| G2pError::Data(format!("normalize.json: {e}")))?;
        let months_v = v.get("months").and_then(Value::as_object).ok_or_else(|| G2pError::Data("months".into()))?;
        let month_keys: Vec<String> =
            ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let months: HashMap<String, String> =
            months_v.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect();
        let month_names: Vec<String> = month_keys.iter().map(|k| months.get(k).cloned().unwrap_or_default()).collect();
        let titles: HashMap<String, String> = str_map(&v, "titles")?.into_iter().collect();
        let abbrev: HashMap<String, String> = str_map(&v, "abbreviations")?.into_iter().collect();
        let units = pair_map(&v, "units")?;
        let currency = pair_map(&v, "currency")?;
        let sym_map: HashMap<String, String> = str_map(&v, "symbols")?.into_iter().collect();
        let mut symbols = Vec::new();
        for sym in symbol_order(raw_json) {
            let word = sym_map.get(&sym).cloned().unwrap_or_default();
            let pat = if "=<>~".contains(sym.as_str()) {
                format!(r"(?<=\S) ?{} ?(?=\S)", escape(&sym))
            } else {
                escape(&sym)
            };
            let rep = if word.is_empty() { " ".to_string() } else { format!(" {word} ") };
            symbols.push((re(&pat)?, rep));
            let _ = &sym;
        }
        let mut mlist: Vec<String> = month_names.clone();
        mlist.extend(month_keys.iter().map(|m| capitalize(m)));
        mlist.push("Sept".into());
        let months_alt = alt(&mlist);
        let num_re = r"\d+(?:,\d{3})*(?:\.\d+)?";
        let unit_keys: Vec<&String> = units.keys().collect();
        let title_keys: Vec<&String> = titles.keys().collect();
        let abbrev_keys: Vec<&String> = abbrev.keys().collect();
        let roman = r"((?=[IVXLC])M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3}))";
        let n = Normalizer {
            re_ws: re(r"\s+")?,
            re_time: re(r"\b(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([AaPp])\.?[Mm]\.?(?![A-Za-z]))?(?!\d)")?,
            re_date_us: re(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b")?,
            re_date_iso: re(r"\b(\d{4})-(\d{2})-(\d{2})\b")?,
            re_month_day: re(&format!(r"\b({months_alt})\.? (\d{{1,2}})(?:st|nd|rd|th)?\b(?![\d:%])(,? \d{{4}}\b)?"))?,
            re_day_month: re(&format!(r"\b(the )?(\d{{1,2}}) (?:of )?({months_alt})\b\.?"))?,
            re_unit: re(&format!(r"(?<![\w.])(-?{num_re})\s?({})(?![\w])", alt(&unit_keys)))?,
            re_deg: re(&format!(r"(?<![\w.])(-?{num_re})\s?°\s?([CF])?(?![\w])"))?,
            re_cents: re(&format!(r"(?<![\w.])({num_re})\s?¢"))?,
            re_currency: re(&format!(
                r"(?<![\w])([¥₹₩]|Rs\.?|USD|EUR|GBP)\s?({num_re})(?:\s?(hundred|thousand|million|billion|trillion|[kKmMbB]\b))?"
            ))?,
            re_big_money: re(&format!(r"([$£€])({num_re})\s?(hundred|thousand|million|billion|trillion|[kKmMbB]\b)"))?,
            re_title: re(&format!(r"\b({})\.? (?=[A-Z])", alt(&title_keys)))?,
            re_abbrev: re(&format!(r"(?<![\w.])({})(?![\w])", alt(&abbrev_keys)))?,
            re_no: re(r"\b(No|Nos)\. ?(?=\d)")?,
            re_hash: re(r"(?<![\w&])#(?=\d)")?,
            re_roman_c: re(&format!(r"\b({}) {roman}\b(?![.'’]\w)", alt(&str_list(&v, "roman_cardinal")?)))?,
            re_roman_o: re(&format!(r"\b({}) {roman}\b(?![.'’]\w)", alt(&str_list(&v, "roman_ordinal")?)))?,
            re_phone: re(r"(?<![\w.\-])(?:\d{3}-)?\d{3}-\d{4}(?![\w.\-])")?,
            re_range: re(r"(?<![\w.\-])(\d{1,4})\s?[-–]\s?(\d{1,4})(?![\w.\-%])")?,
            re_fraction: re(r"(?<![\w./])(\d{1,2})/(\d{1,2})(?![\w./])")?,
            re_plus: re(r"(?<![\w+])\+(?=\d)")?,
            re_space_punct: re(r" +([,.;:!?])")?,
            months,
            month_names,
            titles,
            abbrev,
            units,
            symbols,
            currency,
        };
        Ok(n)
    }

    fn month(&self, m: &str) -> String {
        let key: String = m.to_lowercase().chars().take(3).collect();
        self.months.get(&key).cloned().unwrap_or_default()
    }

    fn date(&self, y: Option<&str>, mo: i128, d: i128) -> Option<String> {
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
            return None;
        }
        let mut s = format!("{} {}", self.month_names[(mo - 1) as usize], num::ordinal(d));
        if let Some(y) = y {
            s.push_str(", ");
            s.push_str(y);
        }
        Some(s)
    }

    /// `normalize(text)`: the rewritten text, with origins.
    pub fn normalize(&self, text: &str) -> Tracked {
        let mut t = Tracked::new(text);
        t.sub(&self.re_ws, |_, _| " ".into());
        trim(&mut t);
        if t.text.is_empty() {
            return t;
        }
        t.map_chars(|c| match c {
            '\u{a0}' => ' ',
            '’' => '\'',
            '‒' => '-',
            '―' => '—',
            c => c,
        });
        t.sub_numeric(&self.re_time, time);
        t.sub_numeric(&self.re_date_iso, |m, _| {
            self.date(Some(g(m, 1)), int(g(m, 2)), int(g(m, 3))).unwrap_or_else(|| g(m, 0).to_string())
        });
        t.sub_numeric(&self.re_date_us, |m, _| {
            let (a, b) = (int(g(m, 1)), int(g(m, 2)));
            let mut y = g(m, 3).to_string();
            if y.chars().count() == 2 {
                y = format!("{}{y}", if int(&y) > 30 { "19" } else { "20" });
            }
            let (mo, d) = if a <= 12 { (a, b) } else { (b, a) };
            self.date(Some(&y), mo, d).unwrap_or_else(|| g(m, 0).to_string())
        });
        t.sub_numeric(&self.re_big_money, |m, _| {
            let big = big_word(g(m, 3));
            let words = self.currency.get(g(m, 1)).map(|w| w.1.clone()).unwrap_or_default();
            format!("{} {big} {words}", g(m, 2))
        });
        t.sub_numeric(&self.re_cents, |m, _| {
            let n = g(m, 1);
            let w = self.currency.get("¢").cloned().unwrap_or_default();
            format!("{n} {}", plural(n, &w))
        });
        t.sub_numeric(&self.re_currency, |m, _| {
            let sym = g(m, 1).trim_end_matches('.');
            let words = self.currency.get(sym).cloned().unwrap_or_default();
            let n = g(m, 2);
            match m.get(3) {
                Some(b) if !b.as_str().is_empty() => format!("{n} {} {}", big_word(b.as_str()), words.1),
                _ => format!("{n} {}", plural(n, &words)),
            }
        });
        t.sub_numeric(&self.re_deg, |m, _| {
            let n = g(m, 1);
            let mut w = format!("{n} {}", plural(n, &("degree".into(), "degrees".into())));
            match g(m, 2) {
                "C" => w.push_str(" Celsius"),
                "F" => w.push_str(" Fahrenheit"),
                _ => {}
            }
            w
        });
        t.sub_numeric(&self.re_unit, |m, _| {
            let n = g(m, 1);
            let u = self.units.get(g(m, 2)).cloned().unwrap_or_default();
            format!("{n} {}", plural(n, &u))
        });
        t.sub_numeric(&self.re_month_day, |m, _| {
            let day = int(g(m, 2));
            if !(1..=31).contains(&day) {
                return g(m, 0).to_string();
            }
            format!("{} {}{}", self.month(g(m, 1)), num::ordinal(day), g(m, 3))
        });
        t.sub_numeric(&self.re_day_month, |m, _| {
            let day = int(g(m, 2));
            if !(1..=31).contains(&day) {
                return g(m, 0).to_string();
            }
            format!("the {} of {}", num::ordinal(day), self.month(g(m, 3)))
        });
        t.sub(&self.re_title, |m, _| format!("{} ", self.titles.get(g(m, 1)).cloned().unwrap_or_default()));
        t.sub(&self.re_abbrev, |m, s| {
            let k = g(m, 1);
            let mut w = self.abbrev.get(k).cloned().unwrap_or_default();
            if m.get(0).map(|x| x.end()) == Some(s.len()) && k.ends_with('.') {
                w.push('.');
            }
            w
        });
        t.sub_numeric(&self.re_no, |m, _| if g(m, 1) == "No" { "Number ".into() } else { "Numbers ".into() });
        t.sub_numeric(&self.re_hash, |_, _| "number ".into());
        t.sub(&self.re_roman_c, |m, _| format!("{} {}", g(m, 1), roman_value(g(m, 2))));
        t.sub(&self.re_roman_o, |m, _| format!("{} the {}", g(m, 1), num::ordinal(roman_value(g(m, 2)))));
        t.sub_numeric(&self.re_phone, |m, _| {
            let s = g(m, 0).replace('-', ", ");
            s.chars().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
        });
        t.sub_numeric(&self.re_fraction, |m, _| self.fraction(int(g(m, 1)), int(g(m, 2))));
        t.sub_numeric(&self.re_range, |m, _| format!("{} to {}", g(m, 1), g(m, 2)));
        t.sub_numeric(&self.re_plus, |_, _| "plus ".into());
        for (sym_re, rep) in &self.symbols {
            if sym_re.is_match(&t.text).unwrap_or(false) {
                t.sub(sym_re, |_, _| rep.clone());
            }
        }
        t.sub(&self.re_ws, |_, _| " ".into());
        t.sub(&self.re_space_punct, |m, _| g(m, 1).to_string());
        trim(&mut t);
        t
    }

    fn fraction(&self, a: i128, b: i128) -> String {
        if 0 < a && a < b && b <= 10 {
            let unit = ["", "", "half", "third", "quarter", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
                [b as usize];
            if unit == "half" {
                return if a == 1 { "one half".into() } else { format!("{a} halves") };
            }
            return format!("{a} {unit}{}", if a == 1 { "" } else { "s" });
        }
        if (1..=12).contains(&a) && (1..=31).contains(&b) {
            return self.date(None, a, b).unwrap_or_default();
        }
        format!("{a} slash {b}")
    }
}

fn trim(t: &mut Tracked) {
    let lead = t.text.chars().take_while(|c| c.is_whitespace()).count();
    let total = t.text.chars().count();
    let trail = t.text.chars().rev().take_while(|c| c.is_whitespace()).count();
    if lead == 0 && trail == 0 {
        return;
    }
    if lead == total {
        t.text.clear();
        t.origin.clear();
        return;
    }
    t.text = t.text.chars().skip(lead).take(total - lead - trail).collect();
    t.origin = t.origin[lead..total - trail].to_vec();
}

fn g<'t>(m: &Captures<'t>, i: usize) -> &'t str {
    m.get(i).map_or("", |x| x.as_str())
}

fn int(s: &str) -> i128 {
    s.parse().unwrap_or(0)
}

fn plural(n: &str, words: &(String, String)) -> String {
    if matches!(n.replace(',', "").as_str(), "1" | "1.0" | "-1") {
        words.0.clone()
    } else {
        words.1.clone()
    }
}

fn big_word(b: &str) -> String {
    match b.to_lowercase().as_str() {
        "k" => "thousand".into(),
        "m" => "million".into(),
        "b" => "billion".into(),
        _ => b.to_string(),
    }
}

fn roman_value(s: &str) -> i128 {
    let v = |c: char| match c {
        'I' => 1,
        'V' => 5,
        'X' => 10,
        'L' => 50,
        'C' => 100,
        'D' => 500,
        'M' => 1000,
        _ => 0,
    };
    let cs: Vec<char> = s.chars().collect();
    let mut total = 0;
    for (i, &c) in cs.iter().enumerate() {
        let x = v(c);
        total += if i + 1 < cs.len() && v(cs[i + 1]) > x { -x } else { x };
    }
    total
}

fn time(m: &Captures, s: &str) -> String {
    let (h, mi) = (int(g(m, 1)), int(g(m, 2)));
    let sec = m.get(3).map(|x| x.as_str());
    let ap = m.get(4).map(|x| x.as_str());
    if h > 24 || mi > 59 || sec.is_some_and(|x| int(x) > 59) {
        return g(m, 0).to_string();
    }
    let mut w = num::cardinal(h);
    if mi == 0 {
        if ap.is_none() && sec.is_none() {
            w.push_str(" o'clock");
        }
    } else if mi < 10 {
        w.push_str(" oh ");
        w.push_str(&num::cardinal(mi));
    } else {
        w.push(' ');
        w.push_str(&num::cardinal(mi));
    }
    if let Some(sec) = sec {
        let n = int(sec);
        w.push_str(&format!(" and {}{}", num::cardinal(n), if n == 1 { " second" } else { " seconds" }));
    }
    if let Some(ap) = ap {
        let end = m.get(0).map_or(0, |x| x.end());
        let dot = s[end..].starts_with('.');
        w.push_str(&format!(" {}.M{}", ap.to_uppercase(), if dot { "" } else { "." }));
    }
    w
}

/// Titles (the `titles` keys) for the sentence splitter.
pub fn title_set(n: &Normalizer) -> HashSet<String> {
    n.titles.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracked_sub_keeps_origins() {
        let mut t = Tracked::new("at 7:30 pm ok");
        let r = Regex::new(r"7:30 pm").unwrap();
        t.sub(&r, |_, _| "seven thirty P.M.".into());
        assert_eq!(t.text, "at seven thirty P.M. ok");
        assert_eq!(t.origin[3], 3..10);
        assert_eq!(t.origin[t.origin.len() - 1], 12..13);
    }

    #[test]
    fn roman() {
        assert_eq!(roman_value("VIII"), 8);
        assert_eq!(roman_value("XIV"), 14);
    }
}
