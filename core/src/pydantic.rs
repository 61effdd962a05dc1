//! pydantic v2's lax-mode coercions and its `ValidationError` rendering, for the request
//! models the reference validates with pydantic (`session.config`, the HTTP speech request):
//! clients see the same acceptance rules and, in the errors, the same inner messages.

use crate::json::{Int, Object, Value};
use std::fmt::Write as _;

pub(crate) const MAX_EMBEDDING: usize = 8192;

/// One pydantic error line: `loc` empty for model-level errors.
pub(crate) struct FieldError {
    pub(crate) loc: String,
    pub(crate) kind: &'static str,
    pub(crate) msg: String,
    /// Python repr of the input, untruncated.
    pub(crate) input: String,
    pub(crate) input_type: &'static str,
}

/// pydantic's `ValidationError` text for `model` (the model class name in its first line).
pub(crate) fn render(model: &str, errors: &[FieldError]) -> String {
    let n = errors.len();
    let mut out = format!("{n} validation error{} for {model}", if n == 1 { "" } else { "s" });
    for e in errors {
        out.push('\n');
        if !e.loc.is_empty() {
            out.push_str(&e.loc);
            out.push('\n');
        }
        let _ = write!(out, "  {} [type={}, input_value=", e.msg, e.kind);
        // pydantic shows reprs longer than 50 bytes as their first 25 bytes, `...`, and
        // their last 24 bytes, each cut shrunk to a char boundary.
        let s = e.input.as_str();
        if s.len() > 50 {
            let mut head = 25;
            while !s.is_char_boundary(head) {
                head -= 1;
            }
            let mut tail = s.len() - 24;
            while !s.is_char_boundary(tail) {
                tail += 1;
            }
            out.push_str(s.get(..head).unwrap_or(""));
            out.push_str("...");
            out.push_str(s.get(tail..).unwrap_or(""));
        } else {
            out.push_str(s);
        }
        let _ = write!(
            out,
            ", input_type={}]\n    For further information visit https://errors.pydantic.dev/2.13/v/{}",
            e.input_type, e.kind
        );
    }
    out
}

/// Why a value failed a coercion: (pydantic error type, message).
pub(crate) type Fail = (&'static str, &'static str);

const INT_TYPE: Fail = ("int_type", "Input should be a valid integer");
const INT_PARSING: Fail = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
const INT_FROM_FLOAT: Fail = ("int_from_float", "Input should be a valid integer, got a number with a fractional part");
const INT_SIZE: Fail = ("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size");
const FINITE: Fail = ("finite_number", "Input should be a finite number");
const FLOAT_TYPE: Fail = ("float_type", "Input should be a valid number");
const FLOAT_PARSING: Fail = ("float_parsing", "Input should be a valid number, unable to parse string as a number");
const BOOL_TYPE: Fail = ("bool_type", "Input should be a valid boolean");
const BOOL_PARSING: Fail = ("bool_parsing", "Input should be a valid boolean, unable to interpret input");

pub(crate) struct Validator<'a> {
    pub(crate) msg: &'a Object,
    pub(crate) errors: Vec<FieldError>,
}

impl Validator<'_> {
    pub(crate) fn fail(&mut self, loc: String, kind: &'static str, msg: String, x: &Value) {
        self.errors.push(FieldError { loc, kind, msg, input: x.py_repr(), input_type: x.py_type_name() });
    }

    pub(crate) fn fail_with(&mut self, loc: &str, f: Fail, x: &Value) {
        self.fail(loc.to_owned(), f.0, f.1.to_owned(), x);
    }

    pub(crate) fn opt_str(&mut self, name: &'static str) -> Option<String> {
        let x = self.msg.get(name)?;
        self.str_value(name, x)
    }

    pub(crate) fn str_value(&mut self, loc: &str, x: &Value) -> Option<String> {
        match x {
            Value::Null => None,
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.fail_with(loc, ("string_type", "Input should be a valid string"), x);
                None
            }
        }
    }

    /// The index of the matching literal; `None` when absent, null-and-optional, or bad.
    pub(crate) fn literal(&mut self, name: &'static str, optional: bool, allowed: &[&str], msg: &str) -> Option<usize> {
        let x = self.msg.get(name)?;
        if optional && *x == Value::Null {
            return None;
        }
        if let Value::Str(s) = x {
            if let Some(n) = allowed.iter().position(|a| a == s) {
                return Some(n);
            }
        }
        self.fail(name.to_owned(), "literal_error", msg.to_owned(), x);
        None
    }

    pub(crate) fn speed(&mut self) -> Option<f64> {
        let x = self.msg.get("speed")?;
        if *x == Value::Null {
            return None;
        }
        let f = match to_float(x) {
            Ok(f) => f,
            Err(e) => {
                self.fail_with("speed", e, x);
                return None;
            }
        };
        // pydantic checks `le` before `ge`, and NaN fails the first.
        if f.is_nan() || f > 4.0 {
            let m = "Input should be less than or equal to 4".to_owned();
            self.fail("speed".into(), "less_than_equal", m, x);
        } else if f < 0.25 {
            let m = "Input should be greater than or equal to 0.25".to_owned();
            self.fail("speed".into(), "greater_than_equal", m, x);
        }
        Some(f)
    }

    /// An optional int field with an optional lower bound.
    pub(crate) fn int(&mut self, name: &'static str, ge: Option<i64>) -> Option<Int> {
        let x = self.msg.get(name)?;
        if *x == Value::Null {
            return None;
        }
        let i = match to_int(x) {
            Ok(i) => i,
            Err(e) => {
                self.fail_with(name, e, x);
                return None;
            }
        };
        let Some(ge) = ge else { return Some(i) };
        // Digits too long for i64 are far below (negative) or above any bound we use.
        let below = match i.to_i64() {
            Some(n) => n < ge,
            None => i.0.starts_with('-'),
        };
        if below {
            let m = format!("Input should be greater than or equal to {ge}");
            self.fail(name.to_owned(), "greater_than_equal", m, x);
            return None;
        }
        Some(i)
    }

    pub(crate) fn bool(&mut self, name: &'static str, optional: bool) -> Option<bool> {
        let x = self.msg.get(name)?;
        if optional && *x == Value::Null {
            return None;
        }
        match to_bool(x) {
            Ok(b) => Some(b),
            Err(e) => {
                self.fail_with(name, e, x);
                None
            }
        }
    }

    /// Our extension `pronunciations`: an object of words to `/phonemes/` or a respelling, each
    /// a non-empty string (as pydantic's `dict[constr(min_length=1), constr(min_length=1)]`).
    pub(crate) fn pronunciations(&mut self) -> Vec<(String, String)> {
        let Some(x) = self.msg.get("pronunciations") else { return Vec::new() };
        let entries = match x {
            Value::Null => return Vec::new(),
            Value::Object(o) => &o.0,
            _ => {
                self.fail_with("pronunciations", ("dict_type", "Input should be a valid dictionary"), x);
                return Vec::new();
            }
        };
        let short = ("string_too_short", "String should have at least 1 character");
        let mut out = Vec::with_capacity(entries.len());
        for (word, value) in entries {
            if word.trim().is_empty() {
                self.fail_with(&format!("pronunciations.{word}.[key]"), short, &Value::Str(word.clone()));
                continue;
            }
            match value {
                Value::Str(s) if !s.trim().is_empty() => out.push((word.clone(), s.clone())),
                Value::Str(_) => self.fail_with(&format!("pronunciations.{word}"), short, value),
                _ => self.fail_with(
                    &format!("pronunciations.{word}"),
                    ("string_type", "Input should be a valid string"),
                    value,
                ),
            }
        }
        out
    }

    pub(crate) fn embedding(&mut self) -> Option<Vec<f64>> {
        let x = self.msg.get("speaker_embedding")?;
        let items = match x {
            Value::Null => return None,
            Value::Array(items) => items,
            _ => {
                let f = ("list_type", "Input should be a valid list");
                self.fail_with("speaker_embedding", f, x);
                return None;
            }
        };
        if items.len() > MAX_EMBEDDING {
            let m = format!("List should have at most {MAX_EMBEDDING} items after validation, not {}", items.len());
            self.fail("speaker_embedding".into(), "too_long", m, x);
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (n, item) in items.iter().enumerate() {
            match to_float(item) {
                Ok(f) => out.push(f),
                Err(e) => {
                    ok = false;
                    self.fail(format!("speaker_embedding.{n}"), e.0, e.1.to_owned(), item);
                }
            }
        }
        ok.then_some(out)
    }
}

pub(crate) fn saturate(i: &Int) -> i64 {
    i.to_i64().unwrap_or(if i.0.starts_with('-') { i64::MIN } else { i64::MAX })
}

/// pydantic's lax float: bools, ints, numeric strings (Rust's float grammar, which
/// includes `inf`/`nan`, after trimming; or with single underscores between chars).
pub(crate) fn to_float(x: &Value) -> Result<f64, Fail> {
    match x {
        Value::Float(f) => Ok(*f),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        // Python's float(int) raises OverflowError where the rounded value is infinite.
        Value::Int(i) => match i.0.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(f),
            _ => Err(FLOAT_TYPE),
        },
        Value::Str(s) => {
            if let Ok(f) = s.trim().parse::<f64>() {
                return Ok(f);
            }
            match strip_underscores(s) {
                Some(t) => t.parse::<f64>().map_err(|_| FLOAT_PARSING),
                None => Err(FLOAT_PARSING),
            }
        }
        _ => Err(FLOAT_TYPE),
    }
}

/// `1_000` -> `1000`; `None` without underscores or with leading, trailing or doubled ones.
fn strip_underscores(s: &str) -> Option<String> {
    if !s.contains('_') || s.starts_with('_') || s.ends_with('_') || s.contains("__") {
        return None;
    }
    Some(s.replace('_', ""))
}

/// pydantic's lax int.
pub(crate) fn to_int(x: &Value) -> Result<Int, Fail> {
    match x {
        Value::Int(i) => Ok(i.clone()),
        Value::Bool(b) => Ok(Int(if *b { "1" } else { "0" }.to_owned())),
        Value::Float(f) => float_as_int(*f).map(|n| Int(n.to_string())),
        Value::Str(s) => str_as_int(s),
        _ => Err(INT_TYPE),
    }
}

fn float_as_int(f: f64) -> Result<i64, Fail> {
    if !f.is_finite() {
        Err(FINITE)
    } else if f.fract() != 0.0 {
        Err(INT_FROM_FLOAT)
    } else if (i64::MIN as f64) < f && f < (i64::MAX as f64) {
        Ok(f as i64)
    } else {
        Err(INT_SIZE)
    }
}

/// pydantic's str -> int. The size limit (CPython's 4300 digits) was mapped out
/// against pydantic 2.13: a leading `-?[1-9][0-9]*` run longer than 4300 chars is
/// `int_parsing_size`; a number that only parses after normalising (`+`, leading
/// zeros, underscores, `.000`) and is longer than 4300 chars is `int_parsing`.
fn str_as_int(s: &str) -> Result<Int, Fail> {
    let t = s.trim();
    let b = t.as_bytes();
    let sign = usize::from(b.first() == Some(&b'-'));
    if matches!(b.get(sign), Some(b'1'..=b'9')) {
        let run = b[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
        if sign + run > MAX_INT_CHARS {
            return Err(INT_SIZE);
        }
    }
    let parsed = parse_int_digits(t).or_else(|| {
        // `12.000` is accepted as 12 (at least one zero after the point).
        let (whole, frac) = t.split_once('.')?;
        if !frac.is_empty() && frac.bytes().all(|b| b == b'0') {
            parse_int_digits(whole)
        } else {
            None
        }
    });
    match parsed {
        Some(i) if i.0.len() <= MAX_INT_CHARS => Ok(i),
        _ => Err(INT_PARSING),
    }
}

const MAX_INT_CHARS: usize = 4300;

/// `[+-]?[0-9]+`, with single underscores between chars allowed; canonical digits out.
fn parse_int_digits(t: &str) -> Option<Int> {
    let stripped = strip_underscores(t);
    let t = stripped.as_deref().unwrap_or(t);
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    Some(Int(match (digits.is_empty(), neg) {
        (true, _) => "0".to_owned(),
        (false, true) => format!("-{digits}"),
        (false, false) => digits.to_owned(),
    }))
}

/// pydantic's lax bool.
pub(crate) fn to_bool(x: &Value) -> Result<bool, Fail> {
    match x {
        Value::Bool(b) => Ok(*b),
        Value::Int(i) => match i.0.as_str() {
            "0" => Ok(false),
            "1" => Ok(true),
            _ if i.to_i64().is_some() => Err(BOOL_PARSING),
            _ => Err(BOOL_TYPE),
        },
        Value::Float(f) => match float_as_int(*f) {
            Ok(0) => Ok(false),
            Ok(1) => Ok(true),
            Ok(_) => Err(BOOL_PARSING),
            Err(_) => Err(BOOL_TYPE),
        },
        Value::Str(s) => {
            const TRUE: &[&str] = &["1", "on", "t", "true", "y", "yes"];
            const FALSE: &[&str] = &["0", "off", "f", "false", "n", "no"];
            if TRUE.iter().any(|w| w.eq_ignore_ascii_case(s)) {
                Ok(true)
            } else if FALSE.iter().any(|w| w.eq_ignore_ascii_case(s)) {
                Ok(false)
            } else {
                Err(BOOL_PARSING)
            }
        }
        _ => Err(BOOL_TYPE),
    }
}
