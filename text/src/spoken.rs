//! Written text to its spoken form, as a person reads it aloud: the English text normalisation of
//! every voice family's front end (hibari now, Kokoro next). It needs no voice asset.
//!
//! Two passes, each linear in the input: markup (markdown, HTML tags and entities, emoji) is
//! removed or kept as its text, then each whitespace-separated token (with up to a few neighbours
//! for context: "Jan 5", "7:30 p.m.", "$2 billion", "Henry VIII") is read: numbers in every common
//! form, money, dates and times, phone numbers, units, URLs, e-mail addresses, paths, versions,
//! abbreviations and titles, acronyms and Roman numerals. Every output character keeps the char
//! range of the input it came from ([`Tracked`]), so what is heard maps back to the written words.
//!
//! Inline pronunciations (`[Kokoro](/kˈOkəɹO/)`) are kept as they are for the G2P; a
//! [`Pronunciations`] table rewrites its words into that markup (phonemes) or their respelling.

use std::collections::HashMap;
use std::ops::Range;

use super::normalize::Tracked;
use super::numbers::{ordinal_of, ONES, SCALES, TENS};

/// How fenced code blocks or inline code spans are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Read the code as text.
    Read,
    /// Leave it out.
    Skip,
}

/// How emoji are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emoji {
    /// Left out.
    Drop,
    /// Read by name ("thumbs up"); emoji without a name in the table are left out.
    Name,
}

/// What the normaliser does with markup. The defaults: inline code read, code blocks skipped,
/// emoji dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextOptions {
    /// Inline code (`` `x` ``).
    pub code_spans: Code,
    /// Fenced code blocks.
    pub code_blocks: Code,
    /// Emoji.
    pub emoji: Emoji,
}

impl Default for TextOptions {
    fn default() -> TextOptions {
        TextOptions { code_spans: Code::Read, code_blocks: Code::Skip, emoji: Emoji::Drop }
    }
}

/// How one word is to be said: phonemes in the voice's alphabet, or a respelling in letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pronunciation {
    /// Phonemes in the voice's alphabet, used as they are.
    Phonemes(String),
    /// Words to read instead ("engine x" for "nginx").
    Respelling(String),
}

impl Pronunciation {
    /// `/phonemes/` (as the inline markup writes them) or a respelling.
    pub fn parse(value: &str) -> Pronunciation {
        let v = value.trim();
        match v.strip_prefix('/').and_then(|x| x.strip_suffix('/')) {
            Some(p) if !p.is_empty() => Pronunciation::Phonemes(p.to_string()),
            _ => Pronunciation::Respelling(v.to_string()),
        }
    }
}

/// Words to say a given way, matched as whole tokens (exactly, else lowercased).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pronunciations {
    map: HashMap<String, Pronunciation>,
}

impl Pronunciations {
    /// None.
    pub fn new() -> Pronunciations {
        Pronunciations::default()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The number of words.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Says `word` as `p` (over an earlier entry of the same word).
    pub fn insert(&mut self, word: &str, p: Pronunciation) {
        self.map.insert(word.to_string(), p);
    }

    /// `other`'s entries over these.
    pub fn merged(&self, other: &Pronunciations) -> Pronunciations {
        let mut map = self.map.clone();
        map.extend(other.map.iter().map(|(k, v)| (k.clone(), v.clone())));
        Pronunciations { map }
    }

    /// The words and their pronunciations, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Pronunciation)> {
        self.map.iter()
    }

    fn get(&self, word: &str) -> Option<&Pronunciation> {
        if self.map.is_empty() {
            return None;
        }
        self.map.get(word).or_else(|| self.map.get(&word.to_lowercase()))
    }

    /// A lexicon file: one entry a line, `word` then a tab (or spaces) then `/phonemes/` or a
    /// respelling; blank lines and lines starting with `#` are skipped.
    pub fn parse_file(text: &str) -> Result<Pronunciations, String> {
        let mut out = Pronunciations::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((word, value)) = line.split_once(['\t', ' ']) else {
                return Err(format!("line {}: {line:?} has no pronunciation after the word", n + 1));
            };
            let value = value.trim();
            if value.is_empty() {
                return Err(format!("line {}: the word {word:?} has an empty pronunciation", n + 1));
            }
            out.insert(word, Pronunciation::parse(value));
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Number words (American: no "and" inside numbers).

fn below_1000(n: u64, out: &mut Vec<String>) {
    let (h, r) = (n / 100, n % 100);
    if h > 0 {
        out.push(ONES[h as usize].into());
        out.push("hundred".into());
    }
    if r >= 20 {
        let t = TENS[(r / 10) as usize];
        out.push(if r % 10 == 0 { t.into() } else { format!("{t}-{}", ONES[(r % 10) as usize]) });
    } else if r > 0 || h == 0 {
        out.push(ONES[r as usize].into());
    }
}

/// "one thousand two hundred thirty-four".
pub fn cardinal(n: u64) -> String {
    if n == 0 {
        return "zero".into();
    }
    let mut groups = Vec::new();
    let mut m = n;
    while m > 0 {
        groups.push(m % 1000);
        m /= 1000;
    }
    let mut out = Vec::new();
    for (i, &g) in groups.iter().enumerate().rev() {
        if g == 0 {
            continue;
        }
        below_1000(g, &mut out);
        if i > 0 {
            out.push(SCALES[i].into());
        }
    }
    out.join(" ")
}

/// "twenty-first".
pub fn ordinal(n: u64) -> String {
    ordinal_of(&cardinal(n))
}

/// A year as said: "nineteen ninety-nine", "two thousand five", "twenty twenty-four".
pub fn year(n: u64) -> String {
    if !(1000..=2099).contains(&n) || (2000..2010).contains(&n) || n.is_multiple_of(1000) {
        return cardinal(n);
    }
    let (hi, lo) = (n / 100, n % 100);
    if lo == 0 {
        format!("{} hundred", cardinal(hi))
    } else if lo < 10 {
        format!("{} oh {}", cardinal(hi), cardinal(lo))
    } else {
        format!("{} {}", cardinal(hi), cardinal(lo))
    }
}

/// The plural of a number word ("twenties", "nineteen nineties").
fn plural_number(w: &str) -> String {
    if let Some(s) = w.strip_suffix('y') {
        format!("{s}ies")
    } else if w.ends_with('x') {
        format!("{w}es")
    } else {
        format!("{w}s")
    }
}

fn digit_words(s: &str) -> String {
    s.chars().filter_map(|c| c.to_digit(10)).map(|d| ONES[d as usize]).collect::<Vec<_>>().join(" ")
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A number as written: digits with optional thousands commas, an optional fraction, an optional
/// sign. (negative, integer digits without commas, fraction digits)
fn parse_number(s: &str) -> Option<(bool, String, String)> {
    let (neg, body) = match s.strip_prefix(['-', '−']) {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (ip, fp) = match body.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (body, None),
    };
    if let Some(fp) = fp {
        if !all_digits(fp) {
            return None;
        }
    }
    if ip.is_empty() && fp.is_none() {
        return None;
    }
    let int = if ip.contains(',') {
        let mut parts = ip.split(',');
        let first = parts.next()?;
        if first.is_empty() || first.len() > 3 || !all_digits(first) {
            return None;
        }
        let mut s = first.to_string();
        for p in parts {
            if p.len() != 3 || !all_digits(p) {
                return None;
            }
            s.push_str(p);
        }
        s
    } else {
        if !ip.is_empty() && !all_digits(ip) {
            return None;
        }
        ip.to_string()
    };
    Some((neg, int, fp.unwrap_or("").to_string()))
}

/// Integer digits as a cardinal (digit by digit when too long or with a leading zero).
fn int_words(ip: &str) -> String {
    if ip.len() > 1 && ip.starts_with('0') {
        return digit_words(ip);
    }
    match ip.parse::<u64>() {
        Ok(n) if ip.len() <= 18 => cardinal(n),
        _ => digit_words(ip),
    }
}

/// "3.14" -> "three point one four", "-5" -> "minus five", ".5" -> "point five".
fn number_words(s: &str) -> Option<String> {
    let (neg, ip, fp) = parse_number(s)?;
    let mut w = String::new();
    if neg {
        w.push_str("minus ");
    }
    if !ip.is_empty() {
        w.push_str(&int_words(&ip));
    }
    if !fp.is_empty() {
        if !ip.is_empty() {
            w.push(' ');
        }
        w.push_str("point ");
        w.push_str(&digit_words(&fp));
    }
    Some(w)
}

/// Exactly one ("1", not "1.0"): for the singular of units and currencies.
fn is_one(s: &str) -> bool {
    s == "1"
}

// ---------------------------------------------------------------------------------------------
// Tables.

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn month(w: &str) -> Option<usize> {
    let w = w.strip_suffix('.').unwrap_or(w);
    if w.len() < 3 {
        return None;
    }
    let lower = w.to_lowercase();
    if lower == "sept" {
        return Some(8);
    }
    let first_upper = w.chars().next().is_some_and(char::is_uppercase);
    MONTHS.iter().position(|m| {
        let ml = m.to_lowercase();
        first_upper && (lower == ml || (lower.len() == 3 && ml.starts_with(&lower)))
    })
}

const WEEKDAYS: [(&str, &str); 7] = [
    ("Mon", "Monday"),
    ("Tue", "Tuesday"),
    ("Wed", "Wednesday"),
    ("Thu", "Thursday"),
    ("Fri", "Friday"),
    ("Sat", "Saturday"),
    ("Sun", "Sunday"),
];

fn weekday_abbrev(w: &str) -> Option<&'static str> {
    let w = w.strip_suffix('.').unwrap_or(w);
    let w = match w {
        "Tues" => "Tue",
        "Thur" | "Thurs" => "Thu",
        w => w,
    };
    WEEKDAYS.iter().find(|(a, _)| *a == w).map(|(_, f)| *f)
}

fn is_weekday_name(w: &str) -> bool {
    WEEKDAYS.iter().any(|(_, f)| *f == w)
}

/// Units after a number: (written, singular, plural).
const UNITS: &[(&str, &str, &str)] = &[
    ("km/h", "kilometer per hour", "kilometers per hour"),
    ("kph", "kilometer per hour", "kilometers per hour"),
    ("mph", "mile per hour", "miles per hour"),
    ("m/s", "meter per second", "meters per second"),
    ("km", "kilometer", "kilometers"),
    ("m", "meter", "meters"),
    ("cm", "centimeter", "centimeters"),
    ("mm", "millimeter", "millimeters"),
    ("µm", "micrometer", "micrometers"),
    ("nm", "nanometer", "nanometers"),
    ("mi", "mile", "miles"),
    ("ft", "foot", "feet"),
    ("yd", "yard", "yards"),
    ("kg", "kilogram", "kilograms"),
    ("g", "gram", "grams"),
    ("mg", "milligram", "milligrams"),
    ("lb", "pound", "pounds"),
    ("lbs", "pounds", "pounds"),
    ("oz", "ounce", "ounces"),
    ("ml", "milliliter", "milliliters"),
    ("mL", "milliliter", "milliliters"),
    ("L", "liter", "liters"),
    ("l", "liter", "liters"),
    ("tsp", "teaspoon", "teaspoons"),
    ("tbsp", "tablespoon", "tablespoons"),
    ("Tbsp", "tablespoon", "tablespoons"),
    ("gal", "gallon", "gallons"),
    ("qt", "quart", "quarts"),
    ("ms", "millisecond", "milliseconds"),
    ("sec", "second", "seconds"),
    ("secs", "seconds", "seconds"),
    ("min", "minute", "minutes"),
    ("mins", "minutes", "minutes"),
    ("hr", "hour", "hours"),
    ("hrs", "hours", "hours"),
    ("h", "hour", "hours"),
    ("Hz", "hertz", "hertz"),
    ("kHz", "kilohertz", "kilohertz"),
    ("MHz", "megahertz", "megahertz"),
    ("GHz", "gigahertz", "gigahertz"),
    ("B", "byte", "bytes"),
    ("KB", "kilobyte", "kilobytes"),
    ("kB", "kilobyte", "kilobytes"),
    ("MB", "megabyte", "megabytes"),
    ("GB", "gigabyte", "gigabytes"),
    ("TB", "terabyte", "terabytes"),
    ("KiB", "kibibyte", "kibibytes"),
    ("MiB", "mebibyte", "mebibytes"),
    ("GiB", "gibibyte", "gibibytes"),
    ("TiB", "tebibyte", "tebibytes"),
    ("kbps", "kilobit per second", "kilobits per second"),
    ("Kbps", "kilobit per second", "kilobits per second"),
    ("Mbps", "megabit per second", "megabits per second"),
    ("Gbps", "gigabit per second", "gigabits per second"),
    ("W", "watt", "watts"),
    ("kW", "kilowatt", "kilowatts"),
    ("MW", "megawatt", "megawatts"),
    ("kWh", "kilowatt hour", "kilowatt hours"),
    ("V", "volt", "volts"),
    ("mAh", "milliamp hour", "milliamp hours"),
    ("dB", "decibel", "decibels"),
    ("px", "pixel", "pixels"),
    ("fps", "frame per second", "frames per second"),
    ("rpm", "revolution per minute", "revolutions per minute"),
    ("kcal", "kilocalorie", "kilocalories"),
    ("cal", "calorie", "calories"),
    ("°C", "degree Celsius", "degrees Celsius"),
    ("°F", "degree Fahrenheit", "degrees Fahrenheit"),
    ("°", "degree", "degrees"),
    ("km²", "square kilometer", "square kilometers"),
    ("m²", "square meter", "square meters"),
    ("ft²", "square foot", "square feet"),
];

fn unit(w: &str) -> Option<(&'static str, &'static str)> {
    UNITS.iter().find(|(u, _, _)| *u == w).map(|(_, s, p)| (*s, *p))
}

/// Currency symbols and ISO codes: (written, singular, plural, cent singular, cent plural).
const CURRENCIES: &[(&str, &str, &str, &str, &str)] = &[
    ("$", "dollar", "dollars", "cent", "cents"),
    ("US$", "US dollar", "US dollars", "cent", "cents"),
    ("€", "euro", "euros", "cent", "cents"),
    ("£", "pound", "pounds", "penny", "pence"),
    ("¥", "yen", "yen", "", ""),
    ("₹", "rupee", "rupees", "paisa", "paise"),
    ("₩", "won", "won", "", ""),
    ("₽", "ruble", "rubles", "kopek", "kopeks"),
    ("₿", "bitcoin", "bitcoins", "", ""),
    ("Rs", "rupee", "rupees", "paisa", "paise"),
    ("USD", "US dollar", "US dollars", "cent", "cents"),
    ("EUR", "euro", "euros", "cent", "cents"),
    ("GBP", "British pound", "British pounds", "penny", "pence"),
    ("JPY", "Japanese yen", "Japanese yen", "", ""),
    ("CAD", "Canadian dollar", "Canadian dollars", "cent", "cents"),
    ("AUD", "Australian dollar", "Australian dollars", "cent", "cents"),
    ("CHF", "Swiss franc", "Swiss francs", "centime", "centimes"),
    ("CNY", "yuan", "yuan", "", ""),
    ("INR", "Indian rupee", "Indian rupees", "paisa", "paise"),
];

type Currency = (&'static str, &'static str, &'static str, &'static str, &'static str);

fn currency(w: &str) -> Option<Currency> {
    CURRENCIES.iter().find(|c| c.0 == w).copied()
}

fn scale_word(w: &str) -> Option<&'static str> {
    match w {
        "k" | "K" | "thousand" => Some("thousand"),
        "m" | "M" | "mn" | "million" => Some("million"),
        "b" | "B" | "bn" | "billion" => Some("billion"),
        "t" | "T" | "tn" | "trillion" => Some("trillion"),
        "hundred" => Some("hundred"),
        _ => None,
    }
}

/// Abbreviations read the same wherever they stand: (written, spoken, whether a full stop that
/// ends the abbreviation may also end the sentence).
const ABBREVIATIONS: &[(&str, &str, bool)] = &[
    ("e.g.", "for example", false),
    ("i.e.", "that is", false),
    ("etc.", "et cetera", true),
    ("vs.", "versus", false),
    ("vs", "versus", false),
    ("cf.", "compare", false),
    ("approx.", "approximately", false),
    ("a.k.a.", "also known as", false),
    ("aka", "also known as", false),
    ("Mr.", "Mister", false),
    ("Mrs.", "Missus", false),
    ("Ms.", "Miz", false),
    ("Dr.", "Doctor", false),
    ("Prof.", "Professor", false),
    ("Jr.", "Junior", true),
    ("Sr.", "Senior", true),
    ("Mt.", "Mount", false),
    ("Ft.", "Fort", false),
    ("Gen.", "General", false),
    ("Gov.", "Governor", false),
    ("Sen.", "Senator", false),
    ("Rep.", "Representative", false),
    ("Capt.", "Captain", false),
    ("Lt.", "Lieutenant", false),
    ("Col.", "Colonel", false),
    ("Sgt.", "Sergeant", false),
    ("Rev.", "Reverend", false),
    ("Hon.", "Honorable", false),
    ("Pres.", "President", false),
    ("Ave.", "Avenue", true),
    ("Blvd.", "Boulevard", true),
    ("Rd.", "Road", true),
    ("Ln.", "Lane", true),
    ("Hwy.", "Highway", true),
    ("Apt.", "Apartment", false),
    ("Ste.", "Suite", false),
    ("Inc.", "Incorporated", true),
    ("Ltd.", "Limited", true),
    ("Corp.", "Corporation", true),
    ("Co.", "Company", true),
    ("Bros.", "Brothers", true),
    ("Dept.", "Department", false),
    ("Univ.", "University", false),
    ("est.", "established", false),
    ("Fig.", "Figure", false),
    ("fig.", "figure", false),
    ("Vol.", "Volume", false),
    ("vol.", "volume", false),
    ("Ch.", "Chapter", false),
    ("ch.", "chapter", false),
    ("Eq.", "Equation", false),
    ("Sec.", "Section", false),
    ("et al.", "et al", true),
    ("w/", "with", false),
    ("w/o", "without", false),
    ("&", "and", false),
    ("+", "plus", false),
    ("=", "equals", false),
    ("×", "times", false),
    ("*", "times", false),
    ("÷", "divided by", false),
    ("±", "plus or minus", false),
    ("≈", "approximately", false),
    ("≠", "is not equal to", false),
    ("≤", "is at most", false),
    ("≥", "is at least", false),
    ("→", "to", false),
    ("->", "to", false),
    ("@", "at", false),
    ("%", "percent", false),
    ("§", "section", false),
    ("24/7", "twenty-four seven", false),
    ("TL;DR", "T L D R", false),
    ("tl;dr", "T L D R", false),
    ("FAQ", "F A Q", false),
    ("FAQs", "F A Qs", false),
];

fn abbreviation(w: &str) -> Option<(&'static str, bool)> {
    ABBREVIATIONS.iter().find(|a| a.0 == w).map(|a| (a.1, a.2))
}

/// All-capital acronyms said as a word (the rest are spelled).
const ACRONYM_WORDS: &[&str] = &[
    "NASA", "NATO", "UNESCO", "UNICEF", "NAFTA", "OPEC", "FEMA", "LASER", "RADAR", "SCUBA", "PIN", "ZIP", "AIDS",
    "NASDAQ", "FIFA", "COVID", "CAPTCHA", "GIF", "JPEG", "RAM", "ROM", "SIM", "OLED", "LED", "WAN", "LAN", "SIM",
    "POSIX", "YAML", "TOML", "JSON", "ASCII", "SCSI", "CRUD", "REST", "SWAT", "DARPA", "NOAA", "ISIS", "GIFs", "SARS",
    "MERS", "NOW", "OK", "I", "A", "AM", "PM", "TV", "ID", "IDs", "OS", "IT", "US", "UK", "EU", "UN", "AI",
];

/// Spelled regardless of vowels (said letter by letter).
const ACRONYM_SPELLED: &[&str] = &[
    "US", "UK", "EU", "UN", "AI", "TV", "ID", "OS", "IT", "API", "CEO", "CFO", "CTO", "FBI", "CIA", "USA", "IBM",
    "BBC", "CNN", "NBA", "NFL", "HTTP", "HTTPS", "HTML", "CSS", "URL", "URI", "SQL", "SDK", "CPU", "GPU", "TPU", "SSD",
    "HDD", "USB", "PDF", "FAQ", "DIY", "ETA", "FYI", "ASAP", "IOU", "IPO", "HR", "PR", "QA", "UI", "UX", "VPN", "DNS",
    "SSH", "TCP", "UDP", "IP", "IoT", "LLM", "GPT", "PhD", "MBA", "BA", "BS", "MD", "DVD", "CD", "PC", "ATM", "EV",
    "AC", "DC", "NYC", "LA", "DJ", "VIP", "CEOs", "APIs", "URLs", "GPUs", "CPUs", "PDFs", "ID", "IDs", "OK", "TTS",
    "STT", "ASR", "JS", "TS", "AWS", "GCP", "RSS", "XML", "JWT", "CLI", "IDE", "OCR", "NLP", "ML", "KPI", "ROI", "B2B",
    "B2C", "AM", "PM",
];

fn spelled(w: &str) -> String {
    // "APIs" -> "A P Is"; "PhD" -> "P H D"; "B2B" -> "B two B".
    let chars: Vec<char> = w.chars().collect();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if i + 1 == chars.len() && c == 's' && i > 0 {
            if let Some(last) = parts.last_mut() {
                last.push('s');
            }
        } else if let Some(d) = c.to_digit(10) {
            parts.push(ONES[d as usize].into());
        } else {
            parts.push(c.to_uppercase().collect());
        }
        i += 1;
    }
    parts.join(" ")
}

/// Words after which a Roman numeral is a regnal ordinal ("Henry VIII": "Henry the Eighth").
const REGNAL: &[&str] = &[
    "Pope",
    "King",
    "Queen",
    "Henry",
    "Louis",
    "Edward",
    "George",
    "William",
    "Charles",
    "James",
    "Richard",
    "Elizabeth",
    "Napoleon",
    "Pius",
    "Benedict",
    "Leo",
    "Paul",
    "John",
    "Ramses",
    "Frederick",
    "Philip",
    "Alexander",
    "Nicholas",
    "Peter",
    "Catherine",
    "Ivan",
    "Gustav",
    "Christian",
    "Ferdinand",
    "Mary",
    "Francis",
    "Gregory",
    "Innocent",
    "Clement",
    "Urban",
    "Otto",
    "Frederick",
];

/// Words after which a Roman numeral is a cardinal ("Chapter IV": "Chapter four").
const ROMAN_CARDINAL: &[&str] = &[
    "Chapter", "chapter", "Part", "part", "Act", "act", "Scene", "scene", "Section", "section", "Volume", "volume",
    "Book", "book", "Phase", "phase", "Article", "article", "War", "Bowl", "Episode", "episode", "Type", "type",
    "Level", "level", "Stage", "stage", "Class", "class", "Grade", "grade", "Round", "round", "Appendix", "Title",
    "Mark", "Apollo", "Rocky", "Fantasy", "Season", "season", "Unit", "unit", "Psalm", "Canto",
];

fn roman_value(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 12 {
        return None;
    }
    let v = |c: char| match c {
        'I' => Some(1),
        'V' => Some(5),
        'X' => Some(10),
        'L' => Some(50),
        'C' => Some(100),
        'D' => Some(500),
        'M' => Some(1000),
        _ => None,
    };
    let vals: Vec<i64> = s.chars().map(v).collect::<Option<_>>()?;
    let mut total = 0i64;
    for (i, &x) in vals.iter().enumerate() {
        if vals.get(i + 1).is_some_and(|&n| n > x) {
            total -= x;
        } else {
            total += x;
        }
    }
    let total = u64::try_from(total).ok().filter(|&t| t > 0)?;
    // Only the canonical spelling ("IIII" and "VX" are not numerals).
    (to_roman(total) == s).then_some(total)
}

fn to_roman(mut n: u64) -> String {
    const T: [(u64, &str); 13] = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut s = String::new();
    for (v, r) in T {
        while n >= v {
            s.push_str(r);
            n -= v;
        }
    }
    s
}

fn capitalize(s: &str) -> String {
    s.split('-')
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<String>>()
        .join("-")
}

const TLDS: &[&str] = &[
    "com", "org", "net", "io", "dev", "ai", "co", "edu", "gov", "app", "uk", "de", "fr", "jp", "ca", "au", "us",
    "info", "me", "tv", "ly", "gg", "xyz", "tech", "site", "online", "cloud", "nl", "es", "it", "ch", "se", "no", "eu",
    "in",
];

/// File extensions: how each is said (spelled unless listed).
const EXT_WORDS: &[(&str, &str)] = &[
    ("json", "JSON"),
    ("yaml", "YAML"),
    ("yml", "YAML"),
    ("toml", "TOML"),
    ("zip", "zip"),
    ("log", "log"),
    ("lock", "lock"),
    ("wav", "wave"),
    ("gif", "GIF"),
    ("jpeg", "JPEG"),
    ("conf", "conf"),
    ("docx", "doc X"),
    ("xlsx", "X L S X"),
    ("tar", "tar"),
    ("gz", "G Z"),
];

const EXTS: &[&str] = &[
    "txt", "md", "py", "rs", "js", "ts", "tsx", "jsx", "c", "h", "cpp", "go", "java", "rb", "sh", "html", "css", "csv",
    "pdf", "png", "jpg", "svg", "mp3", "mp4", "exe", "dll", "so", "ini", "xml", "sql", "db", "env", "cfg", "bin",
    "json", "yaml", "yml", "toml", "zip", "log", "lock", "wav", "gif", "jpeg", "conf", "docx", "xlsx", "tar", "gz",
    "ipynb", "onnx", "pt", "wasm", "kt", "swift", "php", "pl", "lua", "r", "m4a", "ogg", "flac", "webm", "doc", "ppt",
];

fn ext_words(ext: &str) -> String {
    match EXT_WORDS.iter().find(|(e, _)| *e == ext) {
        Some((_, w)) => (*w).into(),
        None => spelled(&ext.to_uppercase()),
    }
}

/// Emoji read by name when asked.
const EMOJI_NAMES: &[(&str, &str)] = &[
    ("😀", "grinning face"),
    ("😃", "grinning face"),
    ("😄", "grinning face"),
    ("😁", "beaming face"),
    ("😂", "face with tears of joy"),
    ("🤣", "rolling on the floor laughing"),
    ("😊", "smiling face"),
    ("🙂", "slightly smiling face"),
    ("😉", "winking face"),
    ("😍", "heart eyes"),
    ("😘", "face blowing a kiss"),
    ("😎", "smiling face with sunglasses"),
    ("🤔", "thinking face"),
    ("😢", "crying face"),
    ("😭", "loudly crying face"),
    ("😡", "angry face"),
    ("😱", "screaming face"),
    ("😅", "grinning face with sweat"),
    ("🙃", "upside-down face"),
    ("😴", "sleeping face"),
    ("🤯", "exploding head"),
    ("🥳", "partying face"),
    ("👍", "thumbs up"),
    ("👎", "thumbs down"),
    ("👏", "clapping hands"),
    ("🙏", "folded hands"),
    ("👋", "waving hand"),
    ("💪", "flexed biceps"),
    ("👀", "eyes"),
    ("❤", "red heart"),
    ("💔", "broken heart"),
    ("🔥", "fire"),
    ("✨", "sparkles"),
    ("⭐", "star"),
    ("🌟", "glowing star"),
    ("🎉", "party popper"),
    ("🚀", "rocket"),
    ("✅", "check mark"),
    ("✔", "check mark"),
    ("❌", "cross mark"),
    ("⚠", "warning"),
    ("💡", "light bulb"),
    ("📌", "pushpin"),
    ("📝", "memo"),
    ("💯", "hundred points"),
    ("☀", "sun"),
    ("🌧", "rain cloud"),
    ("☕", "hot beverage"),
    ("🍕", "pizza"),
    ("🐶", "dog face"),
    ("🐱", "cat face"),
    ("🎂", "birthday cake"),
    ("🎁", "wrapped gift"),
    ("📞", "telephone receiver"),
    ("📧", "e-mail"),
    ("🔗", "link"),
    ("🔒", "locked"),
    ("⏰", "alarm clock"),
    ("🤖", "robot"),
    ("🌍", "globe"),
    ("😬", "grimacing face"),
    ("🙌", "raising hands"),
    ("💬", "speech balloon"),
    ("➡", "right arrow"),
];

fn is_emoji_char(c: char) -> bool {
    let u = c as u32;
    matches!(u,
        0x1F000..=0x1FAFF | 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0xFE0F | 0x200D | 0x20E3 | 0xE0020..=0xE007F
        | 0x2300..=0x23FF | 0x2190..=0x21FF if !matches!(c, '→' | '←' | '↑' | '↓' | '↔'))
}

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(h) => u32::from_str_radix(h, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code);
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "rsquo" => '’',
        "lsquo" => '‘',
        "rdquo" => '”',
        "ldquo" => '“',
        "euro" => '€',
        "pound" => '£',
        "cent" => '¢',
        "deg" => '°',
        "times" => '×',
        "frac12" => '½',
        "frac14" => '¼',
        "frac34" => '¾',
        _ => return None,
    })
}

fn vulgar(c: char) -> Option<&'static str> {
    Some(match c {
        '½' => "one half",
        '⅓' => "one third",
        '⅔' => "two thirds",
        '¼' => "one quarter",
        '¾' => "three quarters",
        '⅕' => "one fifth",
        '⅖' => "two fifths",
        '⅗' => "three fifths",
        '⅘' => "four fifths",
        '⅙' => "one sixth",
        '⅚' => "five sixths",
        '⅛' => "one eighth",
        '⅜' => "three eighths",
        '⅝' => "five eighths",
        '⅞' => "seven eighths",
        _ => return None,
    })
}

/// "3/4" -> "three quarters" (denominators up to 10, and 12, 16, 32, 64, 100).
fn fraction_words(a: u64, b: u64) -> Option<String> {
    let den = match b {
        2 => ("half", "halves"),
        3 => ("third", "thirds"),
        4 => ("quarter", "quarters"),
        5..=10 | 12 | 16 | 32 | 64 | 100 => {
            let o = ordinal(b);
            return Some(format!("{} {}{}", cardinal(a), o, if a == 1 { "" } else { "s" }));
        }
        _ => return None,
    };
    if a == 0 {
        return None;
    }
    Some(format!("{} {}", cardinal(a), if a == 1 { den.0 } else { den.1 }))
}

// ---------------------------------------------------------------------------------------------
// Pass 1: markup.

/// Chars with, for each, the input char range it came from.
struct Buf {
    chars: Vec<char>,
    origin: Vec<Range<usize>>,
}

impl Buf {
    fn push(&mut self, c: char, o: Range<usize>) {
        self.chars.push(c);
        self.origin.push(o);
    }
    fn push_str(&mut self, s: &str, o: Range<usize>) {
        for c in s.chars() {
            self.push(c, o.clone());
        }
    }
}

/// The longest span (in chars) looked at for a link's or a tag's end; keeps the scan linear.
const MAX_MARKUP: usize = 300;
/// The longest inline code span (in chars).
const MAX_CODE_SPAN: usize = 1000;

const BLOCK_TAGS: &[&str] = &["p", "br", "div", "li", "ul", "ol", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "hr"];

fn markup(input: &[char], opts: &TextOptions) -> Buf {
    let mut b = Buf { chars: Vec::with_capacity(input.len()), origin: Vec::with_capacity(input.len()) };
    let mut in_block = false;
    let mut i = 0;
    let n = input.len();
    while i < n {
        // One line.
        let end = input[i..].iter().position(|&c| c == '\n').map_or(n, |p| i + p);
        let line = &input[i..end];
        let ind = line.iter().take_while(|c| **c == ' ' || **c == '\t').count();
        let body = &line[ind..];
        let fence = body.starts_with(&['`', '`', '`']) || body.starts_with(&['~', '~', '~']);
        if fence {
            in_block = !in_block;
        } else if in_block {
            if opts.code_blocks == Code::Read {
                for (k, &c) in line.iter().enumerate() {
                    b.push(c, i + k..i + k + 1);
                }
            }
        } else {
            inline_line(&mut b, input, i + ind, end, opts);
        }
        if end < n {
            b.push('\n', end..end + 1);
        }
        i = end + 1;
    }
    b
}

/// A line of markdown outside code blocks: block markers, emphasis, links, code spans, HTML.
fn inline_line(b: &mut Buf, input: &[char], start: usize, end: usize, opts: &TextOptions) {
    let line = &input[start..end];
    let line_start = b.chars.len();
    let mut i = 0;
    // A thematic break ("---", "* * *"): nothing to read.
    if line.len() >= 3
        && line.iter().all(|c| matches!(c, '-' | '*' | '_' | ' ' | '='))
        && line.iter().filter(|c| **c != ' ').count() >= 3
    {
        return;
    }
    // Block markers: headings, quotes, list bullets and numbers, rules.
    let mut heading = false;
    loop {
        let rest = &line[i..];
        if rest.first() == Some(&'>') {
            i += 1;
            i += line[i..].iter().take_while(|c| **c == ' ').count();
            continue;
        }
        let hashes = rest.iter().take_while(|c| **c == '#').count();
        if (1..=6).contains(&hashes) && rest.get(hashes) == Some(&' ') {
            heading = true;
            i += hashes + 1;
            break;
        }
        if matches!(rest.first(), Some('-' | '*' | '+' | '•')) && rest.get(1) == Some(&' ') {
            i += 2;
            break;
        }
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if (1..=3).contains(&digits)
            && matches!(rest.get(digits), Some('.' | ')'))
            && rest.get(digits + 1) == Some(&' ')
        {
            i += digits + 2;
            break;
        }
        break;
    }
    let rest = &line[i..];
    if rest.len() >= 3
        && rest.iter().all(|c| matches!(c, '-' | '*' | '_' | ' ' | '='))
        && rest.iter().filter(|c| **c != ' ').count() >= 3
    {
        return;
    }
    // A table row's cells are read as a list.
    let table = rest.first() == Some(&'|');
    let at = |k: usize| line.get(k).copied();
    let o = |k: usize| start + k..start + k + 1;
    let mut out_start = b.chars.len();
    while i < line.len() {
        let c = line[i];
        // Inline pronunciation markup: kept whole for the G2P.
        if c == '[' {
            if let Some((text_end, close)) = link_at(line, i) {
                let target = &line[text_end + 2..close];
                if target.len() >= 2 && target[0] == '/' && target[target.len() - 1] == '/' {
                    for (k, &ch) in line.iter().enumerate().take(close + 1).skip(i) {
                        b.push(ch, o(k));
                    }
                } else {
                    // A link is read as its text.
                    inline_text(b, line, start, i + 1, text_end, opts);
                }
                i = close + 1;
                continue;
            }
        }
        if c == '!' && at(i + 1) == Some('[') {
            if let Some((text_end, close)) = link_at(line, i + 1) {
                inline_text(b, line, start, i + 2, text_end, opts);
                i = close + 1;
                continue;
            }
        }
        if c == '`' {
            let ticks = line[i..].iter().take_while(|c| **c == '`').count();
            // The closing run of as many backticks, within MAX_CODE_SPAN chars (keeps the scan
            // linear in a line of many unmatched runs).
            let mut k = i + ticks;
            let mut found = None;
            let lim = (i + ticks + MAX_CODE_SPAN).min(line.len());
            while k < lim {
                if line[k] == '`' {
                    let t = line[k..].iter().take_while(|c| **c == '`').count();
                    if t == ticks {
                        found = Some(k);
                        break;
                    }
                    k += t;
                } else {
                    k += 1;
                }
            }
            match found {
                Some(k) => {
                    if opts.code_spans == Code::Read {
                        for (j, &ch) in line.iter().enumerate().take(k).skip(i + ticks) {
                            b.push(ch, o(j));
                        }
                    }
                    i = k + ticks;
                }
                None => {
                    // No closing run: the backticks are left out, the text after them read.
                    i += ticks;
                }
            }
            continue;
        }
        if c == '<' {
            if let Some(close) = tag_at(line, i) {
                let inner: String = line[i + 1..close].iter().collect();
                if inner.starts_with("http://") || inner.starts_with("https://") || inner.contains('@') {
                    for (k, &ch) in line.iter().enumerate().take(close).skip(i + 1) {
                        b.push(ch, o(k));
                    }
                } else {
                    let name: String = inner
                        .trim_start_matches('/')
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect::<String>()
                        .to_lowercase();
                    if BLOCK_TAGS.contains(&name.as_str()) {
                        b.push(' ', o(i));
                    }
                }
                i = close + 1;
                continue;
            }
        }
        if c == '&' {
            let name_len =
                line[i + 1..].iter().take(10).take_while(|c| c.is_ascii_alphanumeric() || **c == '#').count();
            if name_len > 0 && at(i + 1 + name_len) == Some(';') {
                let name: String = line[i + 1..i + 1 + name_len].iter().collect();
                if let Some(ch) = entity(&name) {
                    b.push(ch, start + i..start + i + name_len + 2);
                    i += name_len + 2;
                    continue;
                }
            }
        }
        // Emphasis markers.
        if c == '*' || c == '~' && at(i + 1) == Some('~') {
            let run = line[i..].iter().take_while(|x| **x == c).count();
            let prev = if i > 0 { at(i - 1) } else { None };
            let next = at(i + run);
            let spaced = prev.is_none_or(char::is_whitespace) && next.is_none_or(char::is_whitespace);
            if !spaced {
                i += run;
                continue;
            }
        }
        if c == '_' {
            let run = line[i..].iter().take_while(|x| **x == '_').count();
            let prev = if i > 0 { at(i - 1) } else { None };
            let next = at(i + run);
            let inner = prev.is_some_and(char::is_alphanumeric) && next.is_some_and(char::is_alphanumeric);
            if !inner {
                i += run;
                continue;
            }
        }
        if table && c == '|' {
            let prev_text = b.chars[out_start..].iter().rev().find(|c| !c.is_whitespace());
            if prev_text.is_some_and(|p| !matches!(p, ',' | '|')) {
                b.push(',', o(i));
            }
            b.push(' ', o(i));
            out_start = out_start.min(b.chars.len());
            i += 1;
            continue;
        }
        if is_emoji_char(c) {
            let run = line[i..].iter().take_while(|x| is_emoji_char(**x)).count();
            if opts.emoji == Emoji::Name {
                let seq: String = line[i..i + run].iter().collect();
                let mut names = Vec::new();
                for ch in seq.chars() {
                    let s = ch.to_string();
                    if let Some((_, name)) = EMOJI_NAMES.iter().find(|(e, _)| *e == s) {
                        names.push(*name);
                    }
                }
                if !names.is_empty() {
                    b.push_str(&format!(" {} ", names.join(" ")), start + i..start + i + run);
                }
            } else if b.chars.last().is_some_and(|c| !c.is_whitespace()) {
                b.push(' ', o(i));
            }
            i += run;
            continue;
        }
        b.push(c, o(i));
        i += 1;
    }
    if heading {
        // A heading ends as a sentence: a full stop after its last char (before any trailing
        // spaces of the line; only those are moved).
        let mut trailing = Vec::new();
        while b.chars.len() > line_start && b.chars.last().is_some_and(|c| c.is_whitespace()) {
            trailing.push((b.chars.pop().unwrap_or(' '), b.origin.pop().unwrap_or(0..0)));
        }
        if b.chars.len() > line_start && !matches!(b.chars.last(), Some('.' | '!' | '?' | ':')) {
            let end = b.origin.last().map_or(0, |o| o.end);
            b.push('.', end.saturating_sub(1)..end);
        }
        for (c, o) in trailing.into_iter().rev() {
            b.push(c, o);
        }
    }
}

/// Text of a link, with emphasis and entities handled.
fn inline_text(b: &mut Buf, line: &[char], start: usize, from: usize, to: usize, opts: &TextOptions) {
    let sub: Vec<char> = line[from..to].to_vec();
    let mut inner = Buf { chars: Vec::new(), origin: Vec::new() };
    // The link text has no block markers; a leading "# " is left as it is.
    let mut tmp: Vec<char> = vec!['\u{1}'];
    tmp.extend(&sub);
    inline_line(&mut inner, &tmp, 0, tmp.len(), opts);
    for (c, o) in inner.chars.into_iter().zip(inner.origin) {
        if c == '\u{1}' {
            continue;
        }
        let s = start + from + o.start - 1;
        let e = start + from + o.end - 1;
        b.push(c, s..e.max(s + 1));
    }
}

/// `[text](target)` at `i`: (index of `]`, index of `)`), within [`MAX_MARKUP`] chars.
fn link_at(line: &[char], i: usize) -> Option<(usize, usize)> {
    let lim = (i + MAX_MARKUP).min(line.len());
    let text_end = (i + 1..lim).find(|&k| line[k] == ']' || line[k] == '[')?;
    if line[text_end] != ']' || line.get(text_end + 1) != Some(&'(') || text_end == i + 1 {
        return None;
    }
    let close = (text_end + 2..lim).find(|&k| line[k] == ')' || line[k] == ' ')?;
    (line[close] == ')').then_some((text_end, close))
}

/// `<tag ...>` at `i`: the index of `>`.
fn tag_at(line: &[char], i: usize) -> Option<usize> {
    let first = *line.get(i + 1)?;
    if !(first.is_ascii_alphabetic() || first == '/' || first == '!') {
        return None;
    }
    let lim = (i + MAX_MARKUP).min(line.len());
    let close = (i + 1..lim).find(|&k| line[k] == '>' || line[k] == '<')?;
    (line[close] == '>').then_some(close)
}

// ---------------------------------------------------------------------------------------------
// Pass 2: tokens.

#[derive(Debug, Clone)]
struct Token {
    /// Leading punctuation, core, trailing punctuation: index ranges into the buffer.
    lead: Range<usize>,
    core: Range<usize>,
    trail: Range<usize>,
    text: String,
}

const LEAD_PUNCT: &[char] = &['(', '[', '{', '"', '\'', '“', '‘', '¿', '¡', '«'];
const TRAIL_PUNCT: &[char] = &['.', ',', ';', ':', '!', '?', ')', ']', '}', '"', '\'', '”', '’', '…', '»'];

/// Tokens longer than this are left as they are (the G2P reads them with its own bounds).
const MAX_TOKEN: usize = 200;

fn tokens(chars: &[char]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        let s = i;
        while i < chars.len() && !chars[i].is_whitespace() {
            i += 1;
        }
        let e = i;
        let mut cs = s;
        // Where the token's last ']' and first '(' are (one pass each, not one per bracket).
        let last_close = chars[s..e].iter().rposition(|&c| c == ']').map(|p| s + p);
        let first_open = chars[s..e].iter().position(|&c| c == '(').map(|p| s + p);
        // Leading punctuation, but not a quote that starts "'90s" or a bracket that opens markup.
        while cs < e
            && LEAD_PUNCT.contains(&chars[cs])
            && !(chars[cs] == '\'' && chars.get(cs + 1).is_some_and(char::is_ascii_digit))
            && !(chars[cs] == '[' && last_close.is_some_and(|k| k > cs))
        {
            cs += 1;
        }
        let mut ce = e;
        while ce > cs && TRAIL_PUNCT.contains(&chars[ce - 1]) {
            // "(555)" keeps its brackets together.
            if chars[ce - 1] == ')' && first_open.is_some_and(|k| k >= cs && k < ce - 1) {
                break;
            }
            ce -= 1;
        }
        out.push(Token { lead: s..cs, core: cs..ce, trail: ce..e, text: chars[cs..ce].iter().collect() });
    }
    out
}

struct Ctx<'a> {
    toks: &'a [Token],
    chars: &'a [char],
    prons: &'a Pronunciations,
}

impl Ctx<'_> {
    fn text(&self, i: usize) -> Option<&str> {
        self.toks.get(i).map(|t| t.text.as_str())
    }
    fn trail(&self, i: usize) -> String {
        self.toks.get(i).map(|t| self.chars[t.trail.clone()].iter().collect()).unwrap_or_default()
    }
    fn lead(&self, i: usize) -> String {
        self.toks.get(i).map(|t| self.chars[t.lead.clone()].iter().collect()).unwrap_or_default()
    }
    /// Token `i` follows token `i - 1` with nothing but spaces between (no punctuation).
    fn joined(&self, i: usize) -> bool {
        i > 0 && i < self.toks.len() && self.toks[i - 1].trail.is_empty() && self.toks[i].lead.is_empty()
    }
}

/// What a run of tokens reads as: (spoken words, tokens consumed, chars of the last token's
/// trailing punctuation consumed).
struct Reading {
    words: String,
    n: usize,
    eat_trail: usize,
    /// The first token's leading punctuation is part of the reading ("(555) 123-4567").
    eat_lead: bool,
}

fn r(words: impl Into<String>, n: usize) -> Option<Reading> {
    Some(Reading { words: words.into(), n, eat_trail: 0, eat_lead: false })
}

fn rt(words: impl Into<String>, n: usize, eat_trail: usize) -> Option<Reading> {
    Some(Reading { words: words.into(), n, eat_trail, eat_lead: false })
}

/// The spoken form of `text`, with origins.
pub fn verbalize(text: &str, opts: &TextOptions, prons: &Pronunciations) -> Tracked {
    let input: Vec<char> = text.chars().collect();
    let buf = markup(&input, opts);
    let toks = tokens(&buf.chars);
    let ctx = Ctx { toks: &toks, chars: &buf.chars, prons };
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut origin: Vec<Range<usize>> = Vec::with_capacity(input.len());
    let push = |out: &mut String, origin: &mut Vec<Range<usize>>, s: &str, o: Range<usize>| {
        for c in s.chars() {
            out.push(c);
            origin.push(o.clone());
        }
    };
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if !out.is_empty() {
            // The space before a token maps to the char before it.
            let at = t.lead.start.saturating_sub(1);
            let o = buf.origin.get(at).cloned().unwrap_or(0..0);
            push(&mut out, &mut origin, " ", o.end..o.end);
        }
        let reading = if t.core.len() > MAX_TOKEN { None } else { read(&ctx, i) };
        if !reading.as_ref().is_some_and(|r| r.eat_lead) {
            for k in t.lead.clone() {
                out.push(buf.chars[k]);
                origin.push(buf.origin[k].clone());
            }
        }
        match reading {
            Some(rd) => {
                let last = &toks[i + rd.n - 1];
                let (s, e) = (buf.origin[t.core.start].start, buf.origin[last.core.end - 1].end);
                let mut o = s..e.max(s);
                for tk in &toks[i..i + rd.n] {
                    // Punctuation between the consumed tokens is part of the reading.
                    if let Some(x) = buf.origin.get(tk.core.end.saturating_sub(1)) {
                        o.end = o.end.max(x.end);
                    }
                }
                push(&mut out, &mut origin, &rd.words, o.clone());
                let trail = last.trail.start + rd.eat_trail..last.trail.end;
                if rd.eat_trail > 0 {
                    if let Some(x) = buf.origin.get(last.trail.start + rd.eat_trail - 1) {
                        let n = rd.words.chars().count();
                        let len = origin.len();
                        for oo in &mut origin[len - n..] {
                            oo.end = oo.end.max(x.end);
                        }
                    }
                }
                for k in trail {
                    out.push(buf.chars[k]);
                    origin.push(buf.origin[k].clone());
                }
                i += rd.n;
            }
            None => {
                for k in t.core.start..t.trail.end {
                    out.push(buf.chars[k]);
                    origin.push(buf.origin[k].clone());
                }
                i += 1;
            }
        }
    }
    Tracked { text: out, origin }
}

fn read(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    if w.is_empty() {
        return None;
    }
    if let Some(p) = c.prons.get(w) {
        return r(
            match p {
                Pronunciation::Phonemes(ps) => format!("[{w}](/{ps}/)"),
                Pronunciation::Respelling(s) => s.clone(),
            },
            1,
        );
    }
    if w.starts_with('[') && w.contains("](/") {
        return None;
    }
    if !w.contains('.') && !w.chars().next().is_some_and(char::is_alphabetic) || w == "w/" || w == "w/o" {
        if let Some((spoken, _)) = abbreviation(w) {
            return r(spoken, 1);
        }
    }
    read_multi(c, i)
        .or_else(|| read_money(c, i))
        .or_else(|| read_time(c, i))
        .or_else(|| read_date(c, i))
        .or_else(|| read_phone(c, i))
        .or_else(|| email(w).and_then(|s| r(s, 1)))
        .or_else(|| url(w).and_then(|s| r(s, 1)))
        .or_else(|| read_version(c, i))
        .or_else(|| read_number(c, i))
        .or_else(|| path(w).and_then(|s| r(s, 1)))
        .or_else(|| read_word(c, i))
}

/// Readings that need the next token's trailing full stop or several tokens ("et al.").
fn read_multi(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    let trail = c.trail(i);
    // "St." is "Saint" before a name, "Street" after one.
    if w == "St" && trail.starts_with('.') {
        let next_name = trail == "."
            && c.lead(i + 1).is_empty()
            && c.text(i + 1).is_some_and(|n| n.chars().next().is_some_and(char::is_uppercase));
        let prev = if i > 0 && c.joined(i) { c.text(i - 1) } else { None };
        let after_name = prev.is_some_and(|p| {
            p.chars().next().is_some_and(|f| f.is_uppercase() || f.is_ascii_digit()) && !is_weekday_name(p)
        });
        let saint = next_name && !after_name;
        let keep_stop = !saint && (c.toks.len() == i + 1 || next_name);
        return rt(if saint { "Saint" } else { "Street" }, 1, if keep_stop { 0 } else { 1 });
    }
    // Abbreviations with their full stop.
    let dotted = format!("{w}.");
    if trail.starts_with('.') {
        if let Some((spoken, may_end)) = abbreviation(&dotted) {
            let next_upper = c.text(i + 1).is_none_or(|n| n.chars().next().is_some_and(char::is_uppercase));
            let keep = may_end && (i + 1 == c.toks.len() || next_upper);
            return rt(spoken, 1, if keep { 0 } else { 1 });
        }
        if let Some(day) = weekday_abbrev(w) {
            return rt(day, 1, 1);
        }
        // "p." and "pp." before a page number.
        if (w == "p" || w == "pp" || w == "No" || w == "no" || w == "Nos")
            && c.text(i + 1).is_some_and(|n| n.starts_with(|d: char| d.is_ascii_digit()))
        {
            let word = match w {
                "p" => "page",
                "pp" => "pages",
                "Nos" => "numbers",
                _ => "number",
            };
            return rt(word, 1, 1);
        }
        // Dotted initialisms: "U.S." -> "U S".
        let letters: Vec<&str> = dotted.split('.').filter(|s| !s.is_empty()).collect();
        if letters.len() >= 2 && letters.iter().all(|l| l.chars().count() == 1 && l.chars().all(char::is_alphabetic)) {
            let spoken = letters.iter().map(|l| l.to_uppercase()).collect::<Vec<_>>().join(" ");
            // The full stop stays only at the end of the text.
            let keep = i + 1 == c.toks.len();
            return rt(spoken, 1, if keep { 0 } else { 1 });
        }
    }
    if w == "et" && c.text(i + 1) == Some("al") && c.trail(i + 1).starts_with('.') {
        let keep = i + 2 == c.toks.len();
        return rt("et al", 2, if keep { 0 } else { 1 });
    }
    None
}

/// "$3.50", "$3.5M", "$2 billion", "€20", "USD 100", "100 USD", "50¢".
fn read_money(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    let (neg, w) = match w.strip_prefix(['-', '−']) {
        Some(x) => (true, x),
        None => (false, w),
    };
    let sign = if neg { "minus " } else { "" };
    // Symbol first.
    let sym_len = ["US$", "$", "€", "£", "¥", "₹", "₩", "₽", "₿"].iter().find(|s| w.starts_with(**s)).map(|s| s.len());
    if let Some(sl) = sym_len {
        let cur = currency(&w[..sl])?;
        let mut rest = &w[sl..];
        let mut per = String::new();
        if let Some((a, u)) = rest.split_once('/') {
            if !u.is_empty() && u.chars().all(char::is_alphabetic) {
                per = format!(" per {u}");
                rest = a;
            }
        }
        if !per.is_empty() {
            parse_number(rest)?;
            return r(format!("{sign}{}{per}", amount(rest, cur)?), 1);
        }
        // "$10-$20", "$10-20".
        if let Some((a, b)) = rest.split_once(['-', '–']) {
            let b = b.strip_prefix(&w[..sl]).unwrap_or(b);
            if parse_number(a).is_some() && parse_number(b).is_some() {
                return r(format!("{sign}{} to {}", amount_plain(a, "", cur), amount_plain(b, "", cur)), 1);
            }
        }
        let (num, scale) = split_scale(rest);
        parse_number(num)?;
        if let Some(sc) = scale {
            return r(format!("{sign}{} {sc} {}", number_words(num)?, cur.2), 1);
        }
        if let Some(sc) = c.text(i + 1).filter(|_| c.joined(i + 1) && c.trail(i).is_empty()).and_then(scale_word) {
            if sc != "hundred" || all_digits(num) {
                return r(format!("{sign}{} {sc} {}", number_words(num)?, cur.2), 2);
            }
        }
        return r(format!("{sign}{}", amount(num, cur)?), 1);
    }
    // Code before or after.
    let code = w.strip_suffix('.').unwrap_or(w);
    if let Some(cur) = currency(code).filter(|c| c.0.len() == 3 || c.0 == "Rs") {
        let num = c.text(i + 1).filter(|_| c.joined(i + 1) && c.trail(i).is_empty())?;
        let (n, scale) = split_scale(num);
        parse_number(n)?;
        return r(
            match scale {
                Some(sc) => format!("{sign}{} {sc} {}", number_words(n)?, cur.2),
                None => format!("{sign}{}", amount(n, cur)?),
            },
            2,
        );
    }
    if parse_number(w).is_some() && c.trail(i).is_empty() {
        if let Some(cur) = c.text(i + 1).filter(|_| c.joined(i + 1)).and_then(currency).filter(|c| c.0.len() == 3) {
            return r(format!("{sign}{}", amount(w, cur)?), 2);
        }
    }
    if let Some(n) = w.strip_suffix('¢') {
        parse_number(n)?;
        return r(format!("{sign}{} {}", number_words(n)?, if is_one(n) { "cent" } else { "cents" }), 1);
    }
    None
}

fn split_scale(s: &str) -> (&str, Option<&'static str>) {
    for suf in ["bn", "mn", "tn", "k", "K", "m", "M", "b", "B", "T"] {
        if let Some(n) = s.strip_suffix(suf) {
            if n.ends_with(|c: char| c.is_ascii_digit()) {
                return (n, scale_word(suf));
            }
        }
    }
    (s, None)
}

/// "3.50" dollars -> "three dollars and fifty cents".
fn amount(num: &str, cur: Currency) -> Option<String> {
    let (_, ip, fp) = parse_number(num)?;
    let whole = if ip.is_empty() { "0".to_string() } else { ip.clone() };
    let units = int_words(&whole);
    let unit_word = if whole == "1" { cur.1 } else { cur.2 };
    if fp.is_empty() || fp.bytes().all(|b| b == b'0') {
        return Some(format!("{units} {unit_word}"));
    }
    if fp.len() == 2 && !cur.3.is_empty() {
        let cents: u64 = fp.parse().ok()?;
        let cent_word = if cents == 1 { cur.3 } else { cur.4 };
        if whole.trim_start_matches('0').is_empty() {
            return Some(format!("{} {cent_word}", cardinal(cents)));
        }
        return Some(format!("{units} {unit_word} and {} {cent_word}", cardinal(cents)));
    }
    Some(format!("{} {}", number_words(num)?, cur.2))
}

fn amount_plain(num: &str, _sign: &str, cur: Currency) -> String {
    amount(num, cur).unwrap_or_else(|| num.to_string())
}

fn ampm(w: &str) -> Option<&'static str> {
    match w.to_lowercase().trim_end_matches('.') {
        "am" | "a.m" => Some("AM"),
        "pm" | "p.m" => Some("PM"),
        _ => None,
    }
}

/// "14:00", "7:30 p.m.", "7pm", "9 AM", "2:30:15".
fn read_time(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    // Attached am/pm: "7pm", "7:30pm".
    let lower = w.to_lowercase();
    let (clock, attached) = if let Some(p) = ["a.m", "p.m", "am", "pm"].iter().find(|p| lower.ends_with(**p)) {
        (&w[..w.len() - p.len()], ampm(p))
    } else {
        (w, None)
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if !parts.iter().all(|p| all_digits(p)) || parts.len() > 3 || parts[0].len() > 2 {
        return None;
    }
    if parts.len() == 1 && attached.is_none() {
        // "9 AM", "9 a.m.".
        let next = c.text(i + 1).filter(|_| c.joined(i + 1) && c.trail(i).is_empty())?;
        let ap = ampm(next)?;
        let h: u64 = parts[0].parse().ok()?;
        if !(1..=12).contains(&h) {
            return None;
        }
        let eat = usize::from(next.contains('.') && c.trail(i + 1).starts_with('.') && i + 2 < c.toks.len());
        return rt(format!("{} {}", cardinal(h), spelled(ap)), 2, eat);
    }
    if parts.len() >= 2 && parts[1..].iter().any(|p| p.len() != 2) {
        return None;
    }
    let h: u64 = parts[0].parse().ok()?;
    let m: u64 = parts.get(1).map_or(Some(0), |p| p.parse().ok())?;
    let s: Option<u64> = match parts.get(2) {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    if h > 24 || m > 59 || s.is_some_and(|s| s > 59) {
        return None;
    }
    let (ap, n, eat) = match attached {
        Some(a) => (Some(a), 1, 0),
        None => match c.text(i + 1).filter(|_| c.joined(i + 1) && c.trail(i).is_empty()).and_then(ampm) {
            Some(a) => {
                let next = c.text(i + 1).unwrap_or("");
                let eat = usize::from(next.contains('.') && c.trail(i + 1).starts_with('.') && i + 2 < c.toks.len());
                (Some(a), 2, eat)
            }
            None => (None, 1, 0),
        },
    };
    if ap.is_some() && !(1..=12).contains(&h) {
        return None;
    }
    let mut words = if ap.is_none() && h >= 13 && m == 0 && s.is_none() {
        format!("{} hundred", cardinal(h))
    } else if ap.is_none() && h == 0 && m == 0 {
        "midnight".to_string()
    } else {
        let mut x = if h == 0 { "zero".to_string() } else { cardinal(h) };
        if m == 0 {
            if ap.is_none() && s.is_none() {
                x.push_str(" o'clock");
            }
        } else if m < 10 {
            x.push_str(&format!(" oh {}", cardinal(m)));
        } else {
            x.push_str(&format!(" {}", cardinal(m)));
        }
        x
    };
    if let Some(s) = s {
        words.push_str(&format!(" and {} {}", cardinal(s), if s == 1 { "second" } else { "seconds" }));
    }
    if let Some(a) = ap {
        words.push(' ');
        words.push_str(&spelled(a));
    }
    rt(words, n, eat)
}

fn end_of_text(c: &Ctx, i: usize) -> bool {
    i >= c.toks.len() || c.text(i).is_some_and(|n| n.chars().next().is_some_and(char::is_uppercase))
}

/// Day of a month: "5", "5th", "21st" (1..=31).
fn day(w: &str) -> Option<u64> {
    let d = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suf = &w[d.len()..];
    if !matches!(suf, "" | "st" | "nd" | "rd" | "th") || !all_digits(d) || d.len() > 2 {
        return None;
    }
    let n: u64 = d.parse().ok()?;
    (1..=31).contains(&n).then_some(n)
}

fn year_of(w: &str) -> Option<u64> {
    if w.len() == 4 && all_digits(w) {
        let y: u64 = w.parse().ok()?;
        (1000..=2099).contains(&y).then_some(y)
    } else {
        None
    }
}

fn date_words(y: Option<u64>, m: usize, d: u64) -> String {
    let mut s = format!("{} {}", MONTHS[m], ordinal(d));
    if let Some(y) = y {
        s.push_str(", ");
        s.push_str(&year(y));
    }
    s
}

/// "2024-03-15", "3/15/2024", "15.03.2024", "Jan 5", "January 5th, 2024", "5 Jan 2024",
/// "Mon, Jan 5", "March 2024".
fn read_date(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    // Numeric dates.
    let sep = if w.contains('-') {
        '-'
    } else if w.contains('/') {
        '/'
    } else {
        '.'
    };
    let parts: Vec<&str> = w.split(sep).collect();
    if parts.len() == 3 && parts.iter().all(|p| all_digits(p)) {
        let n: Vec<u64> = parts.iter().map(|p| p.parse().unwrap_or(0)).collect();
        if sep == '-' && parts[0].len() == 4 && parts[1].len() == 2 && parts[2].len() == 2 {
            if (1..=12).contains(&n[1]) && (1..=31).contains(&n[2]) {
                return r(date_words(Some(n[0]), n[1] as usize - 1, n[2]), 1);
            }
            return None;
        }
        if (sep == '/' || sep == '.' || sep == '-') && parts[0].len() <= 2 && parts[1].len() <= 2 {
            let y = match parts[2].len() {
                4 => n[2],
                2 => {
                    if n[2] > 30 {
                        1900 + n[2]
                    } else {
                        2000 + n[2]
                    }
                }
                _ => return None,
            };
            // Month first, as in the US, unless the first can only be a day or the dots say Europe.
            let (mo, d) = if sep == '.' || n[0] > 12 { (n[1], n[0]) } else { (n[0], n[1]) };
            if (1..=12).contains(&mo) && (1..=31).contains(&d) {
                return r(date_words(Some(y), mo as usize - 1, d), 1);
            }
        }
        return None;
    }
    // A range of weekdays: "Mon-Fri", "Mon.-Fri.".
    if let Some((a, b)) = w.split_once(['-', '–']) {
        if let (Some(x), Some(y)) = (weekday_abbrev(a), weekday_abbrev(b)) {
            return r(format!("{x} to {y}"), 1);
        }
    }
    // Weekday abbreviation before a date: "Mon," "Tue".
    if let Some(day_name) = weekday_abbrev(w) {
        let trail = c.trail(i);
        let next_is_date = c.text(i + 1).is_some_and(|n| month(n).is_some() || day(n).is_some() || n.contains('/'));
        if (trail == "," || trail.is_empty()) && next_is_date {
            return r(day_name, 1);
        }
        return None;
    }
    // Month name or abbreviation and a day (and a year).
    if let Some(m) = month(w) {
        let abbreviated = w.trim_end_matches('.').len() <= 4 && !MONTHS.contains(&w);
        let trail = c.trail(i);
        let dot = usize::from(trail.starts_with('.') && abbreviated);
        if !(trail.is_empty() || dot == 1 && trail.len() == 1) {
            return if abbreviated && w.len() == 3 && trail == "." && !matches!(w, "May") {
                rt(MONTHS[m], 1, 1)
            } else {
                None
            };
        }
        let next = c.text(i + 1).filter(|_| c.lead(i + 1).is_empty());
        // "Aug 10-15": a range of days.
        if let Some((a, b)) = next.and_then(|n| n.split_once(['-', '–'])) {
            if let (Some(x), Some(y)) = (day(a), day(b)) {
                return r(format!("{} {} to {}", MONTHS[m], ordinal(x), ordinal(y)), 2);
            }
        }
        if let Some(d) = next.and_then(day) {
            let ntrail = c.trail(i + 1);
            if ntrail == "," || ntrail.is_empty() {
                if let Some(y) = c.text(i + 2).filter(|_| c.lead(i + 2).is_empty()).and_then(year_of) {
                    return r(date_words(Some(y), m, d), 3);
                }
            }
            return r(date_words(None, m, d), 2);
        }
        if let Some(y) = next.and_then(year_of) {
            return r(format!("{} {}", MONTHS[m], year(y)), 2);
        }
        if abbreviated && w != "May" && w != "Mar" {
            return if dot == 1 { rt(MONTHS[m], 1, 1) } else { None };
        }
        return None;
    }
    // A day and a month: "5 Jan 2024", "the 5th of March".
    if let Some(d) = day(w) {
        if !c.trail(i).is_empty() {
            return None;
        }
        let (k, has_of) = if c.text(i + 1) == Some("of") { (i + 2, true) } else { (i + 1, false) };
        let m = c.text(k).filter(|_| c.lead(k).is_empty()).and_then(month)?;
        let mtrail = c.trail(k);
        let mw = c.text(k).unwrap_or("");
        let prev_the = i > 0 && c.text(i - 1).is_some_and(|p| p.eq_ignore_ascii_case("the"));
        let the = if prev_the { "" } else { "the " };
        if mtrail.is_empty() || mtrail == "," {
            if let Some(y) = c.text(k + 1).filter(|_| c.lead(k + 1).is_empty()).and_then(year_of) {
                return r(format!("{the}{} of {}, {}", ordinal(d), MONTHS[m], year(y)), k + 2 - i);
            }
        }
        let eat =
            usize::from(mtrail.starts_with('.') && mw.len() <= 4 && !MONTHS.contains(&mw) && !end_of_text(c, k + 1));
        let _ = has_of;
        return rt(format!("{the}{} of {}", ordinal(d), MONTHS[m]), k + 1 - i, eat);
    }
    None
}

/// "555-123-4567", "1-800-555-0199", "(555) 123-4567", "+1 555 123 4567", "+44 20 7946 0958".
fn read_phone(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    let say = |groups: &[&str]| groups.iter().map(|g| digit_words(g)).collect::<Vec<_>>().join(", ");
    let lead = c.lead(i);
    if let Some(area) = w.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
        if area.len() == 3 && all_digits(area) {
            let next = c.text(i + 1).filter(|_| c.joined(i + 1) && c.trail(i).is_empty())?;
            let g: Vec<&str> = next.split('-').collect();
            if g.len() == 2 && g[0].len() == 3 && g[1].len() == 4 && g.iter().all(|x| all_digits(x)) {
                return r(say(&[area, g[0], g[1]]), 2);
            }
        }
        return None;
    }
    if lead.ends_with('(') && c.trail(i) == ")" && w.len() == 3 && all_digits(w) {
        let next = c.text(i + 1).filter(|_| c.lead(i + 1).is_empty())?;
        let g: Vec<&str> = next.split('-').collect();
        if g.len() == 2 && g[0].len() == 3 && g[1].len() == 4 && g.iter().all(|x| all_digits(x)) {
            return Some(Reading { words: say(&[w, g[0], g[1]]), n: 2, eat_trail: 0, eat_lead: true });
        }
        return None;
    }
    if let Some(cc) = w.strip_prefix('+') {
        if !all_digits(cc) || cc.is_empty() || cc.len() > 3 {
            // "+1-555-123-4567"
            let g: Vec<&str> = cc.split(['-', '.']).collect();
            if g.len() >= 3 && g.iter().all(|x| all_digits(x) && x.len() <= 4) && g[0].len() <= 3 {
                return r(format!("plus {}", say(&g)), 1);
            }
            return None;
        }
        let mut groups = vec![cc];
        let mut k = i + 1;
        while k < c.toks.len() && groups.len() < 6 && c.joined(k) && c.trail(k - 1).is_empty() {
            let t = c.text(k)?;
            let t = t.strip_prefix('(').and_then(|x| x.strip_suffix(')')).unwrap_or(t);
            if !(all_digits(t) && (2..=4).contains(&t.len())) {
                break;
            }
            groups.push(t);
            k += 1;
        }
        if groups.len() >= 3 {
            return r(format!("plus {}", say(&groups)), k - i);
        }
        return None;
    }
    for sep in ['-', '.'] {
        let g: Vec<&str> = w.split(sep).collect();
        let ok = g.iter().all(|x| all_digits(x));
        let shape: Vec<usize> = g.iter().map(|x| x.len()).collect();
        if ok
            && (shape == [3, 3, 4]
                || shape == [1, 3, 3, 4]
                || shape == [3, 4]
                    && sep == '-'
                    && i > 0
                    && c.text(i - 1).is_some_and(|p| p.eq_ignore_ascii_case("call")))
        {
            let mut parts: Vec<String> = Vec::new();
            for x in &g {
                if x.len() == 3 && (x.ends_with("00") && g.len() == 4 && x.starts_with('8')) {
                    parts.push(format!("{} hundred", ONES[(x.as_bytes()[0] - b'0') as usize]));
                } else {
                    parts.push(digit_words(x));
                }
            }
            return r(parts.join(", "), 1);
        }
    }
    None
}

fn email(w: &str) -> Option<String> {
    let w = w.strip_prefix("mailto:").unwrap_or(w);
    let (local, domain) = w.split_once('@')?;
    if local.is_empty()
        || !domain.contains('.')
        || domain.contains('@')
        || domain.starts_with('.')
        || domain.ends_with('.')
    {
        return None;
    }
    if !local.chars().all(|c| c.is_alphanumeric() || "._-+".contains(c)) {
        return None;
    }
    if !domain.chars().all(|c| c.is_alphanumeric() || ".-".contains(c)) {
        return None;
    }
    Some(format!("{} at {}", spoken_name(local), spoken_name(domain)))
}

/// The pieces of a name in a URL, address or path: words, "dot", "dash", numbers.
fn spoken_name(s: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if word.is_empty() {
            return;
        }
        if all_digits(word) {
            out.push(if word.len() <= 4 && !word.starts_with('0') { int_words(word) } else { digit_words(word) });
        } else if word.chars().any(|c| c.is_ascii_digit()) {
            // "page2", "v8" -> letters and numbers apart.
            let mut cur = String::new();
            let mut cur_digit = None;
            let mut parts = Vec::new();
            for ch in word.chars() {
                let d = ch.is_ascii_digit();
                if cur_digit.is_some_and(|x| x != d) {
                    parts.push(std::mem::take(&mut cur));
                }
                cur.push(ch);
                cur_digit = Some(d);
            }
            parts.push(cur);
            for p in parts {
                out.push(if all_digits(&p) { int_words(&p) } else { name_word(&p) });
            }
        } else {
            out.push(name_word(word));
        }
        word.clear();
    };
    for ch in s.chars() {
        let sym = match ch {
            '.' => Some("dot"),
            '-' => Some("dash"),
            '_' => Some("underscore"),
            '/' => Some("slash"),
            '\\' => Some("backslash"),
            '@' => Some("at"),
            ':' => Some("colon"),
            '?' => Some("question mark"),
            '=' => Some("equals"),
            '&' => Some("and"),
            '#' => Some("hash"),
            '~' => Some("tilde"),
            '+' => Some("plus"),
            '%' => Some("percent"),
            _ => None,
        };
        match sym {
            Some(sy) => {
                flush(&mut word, &mut out);
                out.push(sy.into());
            }
            None => word.push(ch),
        }
    }
    flush(&mut word, &mut out);
    out.join(" ")
}

/// A word inside a name: acronym-like pieces spelled.
fn name_word(w: &str) -> String {
    if ACRONYM_SPELLED.contains(&w) || (w.len() <= 4 && w.chars().all(|c| c.is_ascii_uppercase()) && w.len() >= 2) {
        spelled(w)
    } else {
        w.to_string()
    }
}

fn url(w: &str) -> Option<String> {
    let (scheme, rest) = if let Some(r) = w.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = w.strip_prefix("http://") {
        (true, r)
    } else if let Some(r) = w.strip_prefix("ftp://") {
        (true, r)
    } else {
        (false, w)
    };
    let rest = rest.trim_end_matches('/');
    let (host, path) = match rest.find(['/', '?', '#']) {
        Some(p) => (&rest[..p], &rest[p..]),
        None => (rest, ""),
    };
    if host.is_empty() || !host.chars().all(|c| c.is_alphanumeric() || ".-:".contains(c)) {
        return None;
    }
    if !scheme && host.split(':').next() != Some("localhost") {
        // A bare domain: "example.com", "www.example.org/docs", with a known top-level domain.
        let labels: Vec<&str> = host.split('.').collect();
        let tld = labels.last()?;
        if labels.len() < 2
            || labels.iter().any(|l| l.is_empty())
            || !TLDS.contains(tld)
            || !path.is_empty() && !path.starts_with('/')
        {
            return None;
        }
        if host.chars().any(|c| c.is_uppercase()) && !host.starts_with("www.") {
            return None;
        }
    }
    let host_words = match host.strip_prefix("www.") {
        Some(h) => format!("W W W dot {}", spoken_name(h)),
        None => spoken_name(host),
    };
    if path.is_empty() {
        return Some(host_words);
    }
    Some(format!("{host_words} {}", spoken_name(path)))
}

/// "src/main.rs", "/etc/hosts", "~/notes.txt", "C:\Users", "config.yaml", "and/or".
fn path(w: &str) -> Option<String> {
    let looks_path = w.starts_with('/') && w.len() > 1
        || w.starts_with("~/")
        || w.starts_with("./")
        || w.starts_with("../")
        || w.len() > 3 && w.as_bytes()[1] == b':' && w.as_bytes()[2] == b'\\';
    if looks_path {
        let body = w.replace('\\', "/");
        return Some(path_words(&body));
    }
    // Words joined by a slash: "and/or", "input/output".
    if let Some((a, b)) = w.split_once('/') {
        if !a.is_empty()
            && !b.is_empty()
            && !b.contains('/')
            && a.chars().all(char::is_alphabetic)
            && b.chars().all(char::is_alphabetic)
        {
            // "and/or" is said "and or"; "input/output" "input or output".
            return Some(if a == "and" && b == "or" { "and or".into() } else { format!("{a} or {b}") });
        }
        if w.chars().all(|c| c.is_alphanumeric() || "._-/".contains(c)) && w.chars().any(char::is_alphabetic) {
            return Some(path_words(w));
        }
    }
    // A file name with a known extension.
    let (stem, ext) = w.rsplit_once('.')?;
    if !stem.is_empty()
        && EXTS.contains(&ext)
        && stem.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c))
        && stem.chars().any(char::is_alphabetic)
    {
        return Some(format!("{} dot {}", spoken_name(stem), ext_words(ext)));
    }
    None
}

fn path_words(p: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut first = true;
    for seg in p.split('/') {
        if !first {
            out.push("slash".into());
        }
        first = false;
        if seg.is_empty() {
            continue;
        }
        if seg == "~" {
            out.push("tilde".into());
            continue;
        }
        if seg == "." || seg == ".." {
            out.push(if seg == "." { "dot".into() } else { "dot dot".into() });
            continue;
        }
        match seg.rsplit_once('.') {
            Some((stem, ext)) if !stem.is_empty() && EXTS.contains(&ext) => {
                out.push(format!("{} dot {}", spoken_name(stem), ext_words(ext)));
            }
            _ => out.push(spoken_name(seg)),
        }
    }
    out.join(" ")
}

/// "v2.0", "1.2.3", "version 3.11".
fn read_version(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    let prev_version = i > 0
        && c.text(i - 1).is_some_and(|p| {
            p.eq_ignore_ascii_case("version")
                || p == "v"
                || p == "Python"
                || p == "iOS"
                || p == "Android"
                || p == "macOS"
        });
    let (prefix, body) = match w.strip_prefix(['v', 'V']) {
        Some(b) if b.starts_with(|c: char| c.is_ascii_digit()) => ("version ", b),
        _ => ("", w),
    };
    let parts: Vec<&str> = body.split('.').collect();
    if !parts.iter().all(|p| all_digits(p)) {
        return None;
    }
    if parts.len() >= 3 && !(parts.len() == 3 && parts[2].len() == 4)
        || (parts.len() == 2 && (!prefix.is_empty() || prev_version))
        || parts.len() == 1 && !prefix.is_empty()
    {
        let words: Vec<String> = parts
            .iter()
            .map(|p| {
                if *p == "0" {
                    "oh".to_string()
                } else if p.len() > 1 && p.starts_with('0') {
                    digit_words(p)
                } else {
                    int_words(p)
                }
            })
            .collect();
        return r(format!("{prefix}{}", words.join(" point ")), 1);
    }
    None
}

const YEAR_CUES: &[&str] = &[
    "in",
    "In",
    "since",
    "Since",
    "by",
    "By",
    "from",
    "From",
    "until",
    "till",
    "to",
    "of",
    "year",
    "during",
    "During",
    "before",
    "after",
    "After",
    "Before",
    "circa",
    "around",
    "early",
    "late",
    "mid",
    "summer",
    "winter",
    "spring",
    "fall",
    "autumn",
    "born",
    "and",
    "or",
    "through",
    "between",
    "Between",
    "the",
    "©",
    "(c)",
    "Copyright",
    "of",
];

/// Numbers: ordinals, percentages, degrees, units, ranges, fractions, scientific notation, years,
/// "#1", "3x", "1990s", "½".
fn read_number(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    let first = w.chars().next()?;
    if !(first.is_ascii_digit() || matches!(first, '-' | '−' | '.' | '#' | '~' | '+' | '\'') || vulgar(first).is_some())
    {
        return None;
    }
    let next_unit = |i: usize| -> Option<(&'static str, &'static str)> {
        if !c.trail(i).is_empty() {
            return None;
        }
        c.text(i + 1).filter(|_| c.joined(i + 1)).and_then(unit)
    };
    // "a 30 cm strip": a measure before its noun is singular.
    let article = i > 0 && c.text(i - 1).is_some_and(|p| matches!(p, "a" | "an" | "A" | "An"));
    let with_unit = |num: &str, words: String, i: usize, n: usize| -> Option<Reading> {
        if let Some((s, p)) = next_unit(i) {
            return r(format!("{words} {}", if is_one(num) || article && !s.ends_with('s') { s } else { p }), n + 1);
        }
        r(words, n)
    };
    // Unicode vulgar fractions: "½", "1½".
    if let Some(last) = w.chars().last().filter(|c| vulgar(*c).is_some()) {
        let ip = &w[..w.len() - last.len_utf8()];
        let frac = vulgar(last)?;
        let words = if ip.is_empty() {
            frac.to_string()
        } else if all_digits(ip) {
            let f = if frac.starts_with("one ") { frac.replacen("one ", "a ", 1) } else { frac.to_string() };
            format!("{} and {f}", int_words(ip))
        } else {
            return None;
        };
        if let Some((_, p)) = next_unit(i) {
            return r(format!("{words} {p}"), 2);
        }
        return r(words, 1);
    }
    if let Some(n) = w.strip_prefix('#') {
        if all_digits(n) {
            return r(format!("number {}", int_words(n)), 1);
        }
        return None;
    }
    if let Some(n) = w.strip_prefix('~') {
        let words = number_words(n)?;
        return with_unit(n, format!("about {words}"), i, 1);
    }
    if let Some(n) = w.strip_prefix('+') {
        let words = number_words(n)?;
        return with_unit(n, format!("plus {words}"), i, 1);
    }
    // Decades: "1990s", "'90s", "90s".
    let dec = w.strip_prefix(['\'', '’']).unwrap_or(w);
    if let Some(d) = dec.strip_suffix('s').or_else(|| dec.strip_suffix("'s")) {
        if all_digits(d) && (d.len() == 4 || d.len() == 2) && d.ends_with('0') {
            let n: u64 = d.parse().ok()?;
            let words = if d.len() == 4 { year(n) } else { cardinal(n) };
            let (head, last) = match words.rfind(' ') {
                Some(k) => (&words[..=k], &words[k + 1..]),
                None => ("", words.as_str()),
            };
            return r(format!("{head}{}", plural_number(last)), 1);
        }
    }
    // Ordinals.
    if let Some(d) = ["st", "nd", "rd", "th"].iter().find_map(|s| w.strip_suffix(s)) {
        if all_digits(d) && d.len() <= 9 {
            let n: u64 = d.parse().ok()?;
            let ok = match (n % 10, n % 100) {
                (_, 11..=13) => w.ends_with("th"),
                (1, _) => w.ends_with("st"),
                (2, _) => w.ends_with("nd"),
                (3, _) => w.ends_with("rd"),
                _ => w.ends_with("th"),
            };
            if ok {
                return r(ordinal(n), 1);
            }
        }
    }
    // Percentages.
    if let Some(n) = w.strip_suffix('%') {
        if let Some((a, b)) = n.split_once(['-', '–']).filter(|(a, _)| !a.is_empty()) {
            let b = b.strip_suffix('%').unwrap_or(b);
            return r(format!("{} to {} percent", number_words(a)?, number_words(b)?), 1);
        }
        return r(format!("{} percent", number_words(n)?), 1);
    }
    // Degrees: "25°C", "25°", "-5°F".
    if let Some(k) = w.find('°') {
        let (n, u) = (&w[..k], &w[k..]);
        let (s, p) = unit(u)?;
        let nw = number_words(n)?;
        return r(format!("{nw} {}", if is_one(n) { s } else { p }), 1);
    }
    // Scientific notation: "6.02e23", "1e-9", "1.5×10^9", "10^6".
    if let Some((m, e)) = w.split_once(['e', 'E']) {
        if parse_number(m).is_some() && !m.is_empty() {
            let (neg, ed) = match e.strip_prefix('-') {
                Some(x) => (true, x),
                None => (false, e.strip_prefix('+').unwrap_or(e)),
            };
            if all_digits(ed) && ed.len() <= 3 {
                let ex: u64 = ed.parse().ok()?;
                return r(
                    format!("{} times ten to the {}{}", number_words(m)?, if neg { "minus " } else { "" }, ordinal(ex)),
                    1,
                );
            }
        }
    }
    if let Some((m, e)) = w.split_once('^') {
        let (m, base) = match m.split_once(['×', 'x', '*']) {
            Some((a, b)) => (Some(a), b),
            None => (None, m),
        };
        if all_digits(base) && all_digits(e.trim_start_matches('-')) && !e.is_empty() {
            let ex: u64 = e.trim_start_matches('-').parse().ok()?;
            let pw =
                format!("{} to the {}{}", int_words(base), if e.starts_with('-') { "minus " } else { "" }, ordinal(ex));
            return r(
                match m {
                    Some(m) => format!("{} times {pw}", number_words(m)?),
                    None => pw,
                },
                1,
            );
        }
    }
    // "3x" (times), "2FA" stays.
    if let Some(n) = w.strip_suffix('x') {
        if parse_number(n).is_some() && !n.is_empty() {
            return r(format!("{} times", number_words(n)?), 1);
        }
    }
    // Attached units: "5kg", "100ms", "2.5GHz", "10km/h".
    let split = w.find(|c: char| !(c.is_ascii_digit() || ".,-−".contains(c)));
    if let Some(k) = split.filter(|&k| k > 0) {
        let (n, u) = (&w[..k], &w[k..]);
        if let (Some(nw), Some((s, p))) = (number_words(n), unit(u)) {
            if u != "s" {
                return r(format!("{nw} {}", if is_one(n) { s } else { p }), 1);
            }
        }
        // "10+" (ten plus).
        if u == "+" {
            return r(format!("{} plus", number_words(n)?), 1);
        }
    }
    // "1.2k", "3bn" (no currency).
    if let (n, Some(sc)) = split_scale(w) {
        if w.ends_with(['k', 'K']) || w.ends_with("bn") {
            return r(format!("{} {sc}", number_words(n)?), 1);
        }
    }
    // A number joined to a word: "5-year", "10-minute".
    if let Some((a, b)) = w.split_once('-') {
        if all_digits(a) && !b.is_empty() && b.chars().all(|ch| ch.is_ascii_lowercase()) {
            return r(format!("{}-{b}", int_words(a)), 1);
        }
    }
    // Ranges: "10-20", "1990-1995", "5–10".
    if let Some((a, b)) = w.split_once(['-', '–']).filter(|(a, _)| !a.is_empty()) {
        if all_digits(a) && all_digits(b) && a.len() <= 4 && b.len() <= 4 {
            let (x, y): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            let yearish = a.len() == 4 && year_of(a).is_some() && (b.len() == 4 || b.len() == 2) && y < 100
                || a.len() == 4 && b.len() == 4 && year_of(a).is_some() && year_of(b).is_some() && x < y;
            let words = if yearish {
                let yb = if b.len() == 2 { x / 100 * 100 + y } else { y };
                format!("{} to {}", year(x), year(yb))
            } else {
                format!("{} to {}", int_words(a), int_words(b))
            };
            return with_unit(b, words, i, 1);
        }
        if parse_number(a).is_some() && parse_number(b).is_some() {
            return with_unit(b, format!("{} to {}", number_words(a)?, number_words(b)?), i, 1);
        }
        return None;
    }
    // Fractions and mixed numbers: "3/4", "2 1/2"; ratings: "4.5/5".
    if let Some((a, b)) = w.split_once('/') {
        if a.contains('.') && parse_number(a).is_some() && all_digits(b) {
            return r(format!("{} out of {}", number_words(a)?, int_words(b)), 1);
        }
        if all_digits(a) && all_digits(b) && a.len() <= 3 && b.len() <= 3 {
            let (x, y): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
            let words = fraction_words(x, y).or_else(|| {
                ((1..=12).contains(&x) && (13..=31).contains(&y)).then(|| date_words(None, x as usize - 1, y))
            })?;
            if let Some((_, p)) = next_unit(i) {
                return r(format!("{words} {p}"), 2);
            }
            return r(words, 1);
        }
        return None;
    }
    let (_, ip, _) = parse_number(w)?;
    // A whole number and a fraction: "2 1/2 cups".
    if all_digits(w) && c.trail(i).is_empty() && c.joined(i + 1) {
        if let Some((a, b)) = c.text(i + 1).and_then(|n| n.split_once('/')) {
            if let (Ok(x), Ok(y)) = (a.parse::<u64>(), b.parse::<u64>()) {
                if x < y && all_digits(a) && all_digits(b) {
                    if let Some(f) = fraction_words(x, y) {
                        let f = if x == 1 { f.replacen("one ", "a ", 1) } else { f };
                        let words = format!("{} and {f}", int_words(w));
                        if let Some((_, p)) = next_unit(i + 1) {
                            return r(format!("{words} {p}"), 3);
                        }
                        return r(words, 2);
                    }
                }
            }
        }
    }
    // Status codes: "HTTP 404", "error 503".
    let prev_plain = if i > 0 && c.joined(i) { c.text(i - 1) } else { None };
    if w.len() == 3
        && all_digits(w)
        && prev_plain.is_some_and(|p| matches!(p, "HTTP" | "error" | "Error" | "status" | "code"))
    {
        let d = &w[..1];
        let rest: u64 = w[1..].parse().ok()?;
        let words = match rest {
            0 => format!("{} hundred", int_words(d)),
            1..=9 => format!("{} oh {}", int_words(d), cardinal(rest)),
            _ => format!("{} {}", int_words(d), cardinal(rest)),
        };
        return r(words, 1);
    }
    // Years.
    if let Some(y) = year_of(w) {
        let prev = if i > 0 && c.lead(i).is_empty() { c.text(i - 1) } else { None };
        let quarter = |p: &str| {
            let b = p.as_bytes();
            b.len() == 2 && matches!(b[0], b'Q' | b'H') && b[1].is_ascii_digit() || p == "FY"
        };
        let prev_date =
            prev.is_some_and(|p| month(p).is_some() || p.trim_end_matches(',').parse::<u64>().is_ok() || quarter(p));
        let era = c.text(i + 1).is_some_and(|n| matches!(n, "BC" | "AD" | "BCE" | "CE"));
        // A count of things ("2024 copies", "5000 mAh") is a number; otherwise a four-digit
        // number from 1100 to 2099 is most often a year.
        let counted = c.trail(i).is_empty()
            && c.text(i + 1).is_some_and(|n| {
                unit(n).is_some() || n.len() > 2 && n.ends_with('s') && n.chars().all(|ch| ch.is_ascii_lowercase())
            });
        let cue = prev.is_some_and(|p| YEAR_CUES.contains(&p)) || prev_date || era;
        if cue
            || y >= 1100
                && !counted
                && !prev.is_some_and(|p| matches!(p, "of" | "Of" | "about" | "than" | "over" | "under"))
        {
            return r(year(y), 1);
        }
    }
    let words = number_words(w)?;
    let _ = ip;
    with_unit(w, words, i, 1)
}

/// Words: abbreviations without a full stop, acronyms, Roman numerals, weekday names.
fn read_word(c: &Ctx, i: usize) -> Option<Reading> {
    let w = c.text(i)?;
    if let Some((spoken, _)) = abbreviation(w) {
        return r(spoken, 1);
    }
    // Roman numerals after a name or a chapter word.
    if w.len() <= 8 && w.chars().all(|ch| "IVXLCDM".contains(ch)) && c.joined(i) {
        let prev = c.text(i - 1).unwrap_or("");
        if let Some(v) = roman_value(w) {
            // "Henry I" but not "when Henry I left" read as "I": a lone "I" only before no word.
            let lone_i_ok = w != "I" || c.text(i + 1).is_none_or(|n| !n.chars().next().is_some_and(char::is_lowercase));
            if REGNAL.contains(&prev) && lone_i_ok {
                return r(format!("the {}", capitalize(&ordinal(v))), 1);
            }
            if ROMAN_CARDINAL.contains(&prev) {
                return r(cardinal(v), 1);
            }
        }
    }
    // Possessive of a regnal numeral: "Henry VIII's".
    if let Some(base) = w.strip_suffix("'s") {
        if base.chars().all(|ch| "IVXLCDM".contains(ch)) && c.joined(i) && REGNAL.contains(&c.text(i - 1).unwrap_or(""))
        {
            let v = roman_value(base)?;
            return r(format!("the {}'s", capitalize(&ordinal(v))), 1);
        }
    }
    // Possessive acronyms: "CEO's".
    if let Some(base) = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")) {
        if ACRONYM_SPELLED.contains(&base) {
            return r(format!("{}'s", spelled(base)), 1);
        }
    }
    // Acronyms.
    let letters: Vec<char> = w.chars().collect();
    let upper = letters.iter().filter(|c| c.is_uppercase()).count();
    if letters.len() >= 2 && letters.iter().all(|c| c.is_ascii_alphanumeric()) && upper >= 2 {
        if ACRONYM_SPELLED.contains(&w) {
            return r(spelled(w), 1);
        }
        if ACRONYM_WORDS.contains(&w) {
            return None;
        }
        let core = w.strip_suffix('s').unwrap_or(w);
        let all_caps = core.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        let vowels = core.chars().any(|c| "AEIOU".contains(c));
        if all_caps && (!vowels || core.len() <= 3) && core.len() <= 6 && core.chars().any(|c| c.is_ascii_uppercase()) {
            return r(spelled(w), 1);
        }
    }
    // A letter and a number: "Q3", "A4", "F1".
    if letters.len() >= 2
        && letters.len() <= 3
        && letters[0].is_ascii_uppercase()
        && letters[1..].iter().all(char::is_ascii_digit)
    {
        return r(format!("{} {}", letters[0], int_words(&w[1..])), 1);
    }
    // Words with a symbol between letters: "R&D", "AT&T" (spelled), "Q&A".
    if let Some((a, b)) = w.split_once('&') {
        if !a.is_empty()
            && !b.is_empty()
            && a.chars().all(|c| c.is_ascii_uppercase())
            && b.chars().all(|c| c.is_ascii_uppercase())
        {
            return r(format!("{} and {}", spelled(a), spelled(b)), 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> String {
        verbalize(s, &TextOptions::default(), &Pronunciations::new()).text
    }

    #[test]
    fn numbers() {
        assert_eq!(cardinal(1234), "one thousand two hundred thirty-four");
        assert_eq!(cardinal(1_000_021), "one million twenty-one");
        assert_eq!(ordinal(101), "one hundred first");
        assert_eq!(year(1905), "nineteen oh five");
        assert_eq!(year(2005), "two thousand five");
        assert_eq!(year(2024), "twenty twenty-four");
    }

    #[test]
    fn origins_span_the_written_token() {
        let t = verbalize("It costs $3.50 today", &TextOptions::default(), &Pronunciations::new());
        assert_eq!(t.text, "It costs three dollars and fifty cents today");
        let k = t.text.find("three").unwrap();
        assert_eq!(t.origin[k], 9..14);
        assert_eq!(t.origin.len(), t.text.chars().count());
    }

    #[test]
    fn markup_options() {
        let code = "Run `ls -la` now.\n```\nrm -rf /\n```\nDone.";
        assert_eq!(v(code), "Run ls -la now. Done.");
        let opts = TextOptions { code_spans: Code::Skip, code_blocks: Code::Read, emoji: Emoji::Name };
        let t = verbalize("Run `ls` now 👍\n```\necho hi\n```", &opts, &Pronunciations::new()).text;
        assert_eq!(t, "Run now thumbs up echo hi");
    }

    #[test]
    fn pronunciations() {
        let mut p = Pronunciations::new();
        p.insert("Kokoro", Pronunciation::parse("/kˈOkəɹO/"));
        p.insert("nginx", Pronunciation::parse("engine x"));
        let t = verbalize("Kokoro runs nginx.", &TextOptions::default(), &p).text;
        assert_eq!(t, "[Kokoro](/kˈOkəɹO/) runs engine x.");
    }
}
