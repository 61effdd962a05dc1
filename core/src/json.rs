//! JSON as Python's `json.loads` reads it (the reference decides what is valid):
//! NaN/Infinity literals, arbitrary-size integers, duplicate keys (last wins, at the
//! first key's position), lone surrogate escapes. Plus Python's `str()`/`repr()` of
//! the parsed values, which the protocol's error strings embed.
//!
//! OWNER: helper A (json + config). Types below are the agreed interface.

/// A Python int of any size, kept as its canonical decimal digits (optional '-').
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Int(pub String);

impl Int {
    pub fn to_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(Int),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Object(Object),
}

/// A JSON object in Python dict order (first occurrence of each key, last value).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Object(pub Vec<(String, Value)>);

impl Object {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError;

pub fn parse(_text: &str) -> Result<Value, JsonError> {
    todo!("helper A")
}

impl Value {
    /// Python `str(value)`: `None`, `True`, `1.5`, `x` (strings bare), `[1]`, `{'a': 1}`.
    pub fn py_str(&self) -> String {
        todo!("helper A")
    }
    /// Python `repr(value)`: like `py_str` but strings quoted as Python quotes them.
    pub fn py_repr(&self) -> String {
        todo!("helper A")
    }
}
