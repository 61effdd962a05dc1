//! Reading the front end's asset files fast: most of loading the voice used to be building
//! `serde_json::Value` trees of the tagger and lexicons (a map node and a `String` for every
//! entry), converting them, and dropping them again (at exit). The big files are now parsed
//! straight into their final maps with serde: a [`StrMap`], whose keys share one allocation and
//! are hashed with an FxHash rather than SipHash, for the ~300k words and features.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::G2pError;

/// An FxHash-style hash of a string (rustc's: one multiply per 8 bytes), several times faster
/// than the standard SipHash on short words. Not DoS-resistant, which [`StrMap`] doesn't need: its
/// keys come from the asset files, user text only looks them up.
fn hash_str(s: &str) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let add = |h: u64, word: u64| (h ^ word).wrapping_mul(K);
    // The length first, so that a tail padded with zeros is not another string's hash.
    let mut h = add(0, s.len() as u64);
    let mut chunks = s.as_bytes().chunks_exact(8);
    for c in &mut chunks {
        h = add(h, u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        h = add(h, u64::from_le_bytes(word));
    }
    // The multiplies mix best into the top bits; slots are picked with the low ones.
    h.rotate_left(26)
}

/// A map from strings that is built once and then only read: the keys lie back to back in one
/// `String` (under 4 GiB), found through an open-addressing table (linear probing) of
/// `(hash, entry)` slots, so that a map of 100k words takes a few allocations instead of 100k, and
/// dropping it is free.
pub struct StrMap<V> {
    keys: String,
    /// Each entry's key (a range of `keys`) and value.
    entries: Vec<(u32, u32, V)>,
    /// `(low 32 bits of the key's hash, entry index + 1)`, 0 for a free slot; a power of two
    /// in size, at most half full.
    slots: Vec<(u32, u32)>,
}

impl<V> Default for StrMap<V> {
    fn default() -> Self {
        StrMap { keys: String::new(), entries: Vec::new(), slots: vec![(0, 0); 16] }
    }
}

impl<V> StrMap<V> {
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The slot holding `key`, or the free slot where it would go.
    fn slot(&self, key: &str, hash: u32) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let (h, e) = self.slots[i];
            if e == 0 {
                return i;
            }
            if h == hash {
                let (start, end, _) = &self.entries[e as usize - 1];
                if &self.keys[*start as usize..*end as usize] == key {
                    return i;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        let e = self.slots[self.slot(key, hash_str(key) as u32)].1;
        (e != 0).then(|| &self.entries[e as usize - 1].2)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The keys and values, in the order they were first added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|(start, end, v)| (&self.keys[*start as usize..*end as usize], v))
    }

    /// Adds `key`, or gives it the new value if it is there (as `HashMap::insert`: the last of
    /// repeated JSON keys wins, as in Python).
    pub fn insert(&mut self, key: &str, value: V) {
        let hash = hash_str(key) as u32;
        let i = self.slot(key, hash);
        if self.slots[i].1 != 0 {
            self.entries[self.slots[i].1 as usize - 1].2 = value;
            return;
        }
        let start = self.keys.len() as u32;
        self.keys.push_str(key);
        self.entries.push((start, self.keys.len() as u32, value));
        self.slots[i] = (hash, self.entries.len() as u32);
        if self.entries.len() * 2 > self.slots.len() {
            // Twice the slots: every entry moves to its place in the larger table.
            let size = self.slots.len() * 2;
            let old = std::mem::replace(&mut self.slots, vec![(0, 0); size]);
            let mask = self.slots.len() - 1;
            for (h, e) in old.into_iter().filter(|&(_, e)| e != 0) {
                let mut i = h as usize & mask;
                while self.slots[i].1 != 0 {
                    i = (i + 1) & mask;
                }
                self.slots[i] = (h, e);
            }
        }
    }
}

/// A JSON object of `V`s.
impl<'de, V: Deserialize<'de>> Deserialize<'de> for StrMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StrMap<V>, D::Error> {
        struct Objects<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Objects<V> {
            type Value = StrMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<StrMap<V>, M::Error> {
                let mut map = StrMap::default();
                while let Some(key) = m.next_key::<Str>()? {
                    map.insert(&key.0, m.next_value()?);
                }
                Ok(map)
            }
        }
        d.deserialize_map(Objects(std::marker::PhantomData))
    }
}

/// A set of strings (a JSON array of them), as a [`StrMap`].
#[derive(Default)]
pub struct StrSet(StrMap<()>);

impl StrSet {
    /// Whether `key` is in the set.
    pub fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
}

impl<'de> Deserialize<'de> for StrSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StrSet, D::Error> {
        struct Strings;
        impl<'de> Visitor<'de> for Strings {
            type Value = StrSet;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut s: S) -> Result<StrSet, S::Error> {
                let mut set = StrSet::default();
                while let Some(key) = s.next_element::<Str>()? {
                    set.0.insert(&key.0, ());
                }
                Ok(set)
            }
        }
        d.deserialize_seq(Strings)
    }
}

/// A JSON string borrowed from the text being parsed when it has no escapes (no allocation),
/// else unescaped into a `String`.
pub struct Str<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Str<'a>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The text of an asset file, gunzipped if its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String, G2pError> {
    let io = |e| G2pError::Io(path.display().to_string(), e);
    let bytes = std::fs::read(path).map_err(io)?;
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        // gzip's trailer holds the inflated size (mod 2^32): one allocation, no regrowing.
        let size = bytes.len().checked_sub(4).map_or(0, |i| u32::from_le_bytes(bytes[i..].try_into().expect("4")));
        let mut out = Vec::with_capacity(size as usize);
        flate2::bufread::GzDecoder::new(&bytes[..]).read_to_end(&mut out).map_err(io)?;
        out
    } else {
        bytes
    };
    String::from_utf8(bytes).map_err(|e| G2pError::Data(format!("{}: {e}", path.display())))
}

/// Parses an asset's JSON text into `T`.
pub fn parse<'a, T: Deserialize<'a>>(path: &Path, text: &'a str) -> Result<T, G2pError> {
    serde_json::from_str(text).map_err(|e| G2pError::Data(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_borrows_unless_escaped() {
        let v: Vec<Str> = serde_json::from_str(r#"["ab", "a\"b", "\u00e9"]"#).unwrap();
        assert!(matches!(v[0].0, Cow::Borrowed("ab")));
        assert_eq!(v[1].0, "a\"b");
        assert_eq!(v[2].0, "é");
    }

    #[test]
    fn str_map_finds_and_replaces() {
        let mut m = StrMap::default();
        for i in 0..1000 {
            m.insert(&format!("w{i}"), i);
        }
        m.insert("w7", 70);
        m.insert("", -1);
        assert_eq!(m.len(), 1001);
        assert_eq!(m.get("w7"), Some(&70));
        assert_eq!(m.get("w999"), Some(&999));
        assert_eq!(m.get(""), Some(&-1));
        assert_eq!(m.get("w1000"), None);
        assert!(!m.contains_key("w"));
    }

    #[test]
    fn hash_tells_padded_tails_apart() {
        let h = hash_str;
        assert_ne!(h("ab"), h("ab\0"));
        assert_ne!(h(""), h("\0"));
        assert_ne!(h("abcdefgh"), h("abcdefgi"));
    }
}
