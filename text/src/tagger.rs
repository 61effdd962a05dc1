//! Averaged-perceptron part-of-speech tagger (hibari `g2p/tagger.py`, weights in `tagger.json.gz`).

use std::fmt;
use std::ops::Range;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;

use super::assets::{Str, StrMap, StrSet};
use super::pystr::{is_alpha, is_digit_str, is_lower, is_upper, last_chars};
use super::G2pError;

/// The averaged perceptron of `tagger.json.gz`: Penn Treebank tags for a sentence's words.
pub struct Tagger {
    tagdict: StrMap<String>,
    tags: Vec<String>,
    vocab: Option<StrSet>,
    /// Each feature's `(tag index, weight)` pairs, as a range of `pairs`.
    weights: StrMap<Range<u32>>,
    pairs: Vec<(u16, f64)>,
}

fn norm(w: &str) -> String {
    if w.contains('-') && !w.starts_with('-') {
        return "!HYPHEN".into();
    }
    if is_digit_str(w) && w.chars().count() == 4 {
        return "!YEAR".into();
    }
    if w.chars().next().is_some_and(|c| c.is_numeric()) {
        return "!DIGITS".into();
    }
    w.to_lowercase()
}

fn shape(w: &str) -> String {
    if is_alpha(w) {
        if is_lower(w) {
            return "x".into();
        }
        if is_upper(w) {
            return if w.chars().count() > 1 { "XX".into() } else { "X1".into() };
        }
        let mut cs = w.chars();
        let first = cs.next().is_some_and(|c| c.is_uppercase());
        let rest: String = cs.collect();
        if first && is_lower(&rest) {
            return "Xx".into();
        }
        return "xX".into();
    }
    if is_digit_str(w) {
        return "d".into();
    }
    w.chars()
        .take(4)
        .map(|c| {
            if c.is_numeric() {
                'd'
            } else if c.is_alphabetic() {
                'x'
            } else {
                c
            }
        })
        .collect()
}

/// `weights` of `tagger.json.gz`, `{feature: {tag: weight}}`, as the tagger keeps it: every
/// feature's `(tag, weight)` pairs in one list, each feature with its range of the list. Tags are
/// numbered in order of first appearance while the text is read (`names`), and renumbered as in
/// `tags` afterwards: one lookup in a small map per pair while the text is still in cache.
#[derive(Default)]
struct WeightsFile {
    weights: StrMap<Range<u32>>,
    pairs: Vec<(u16, f64)>,
    names: StrMap<u16>,
}

impl<'de> Deserialize<'de> for WeightsFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WeightsFile, D::Error> {
        /// One feature's `{tag: weight}`, appended to the pairs.
        struct Feature<'w>(&'w mut WeightsFile);
        impl<'de> DeserializeSeed<'de> for Feature<'_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_map(self)
            }
        }
        impl<'de> Visitor<'de> for Feature<'_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of weights by tag")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<(), M::Error> {
                let w = self.0;
                while let Some(tag) = m.next_key::<Str>()? {
                    let weight: f64 = m.next_value()?;
                    let id = match w.names.get(&tag.0) {
                        Some(&id) => id,
                        None => {
                            let id = u16::try_from(w.names.len()).map_err(|_| M::Error::custom("too many tags"))?;
                            w.names.insert(&tag.0, id);
                            id
                        }
                    };
                    w.pairs.push((id, weight));
                }
                Ok(())
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WeightsFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of features")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<WeightsFile, M::Error> {
                let mut w = WeightsFile::default();
                while let Some(feature) = m.next_key::<Str>()? {
                    let start = w.pairs.len() as u32;
                    m.next_value_seed(Feature(&mut w))?;
                    let end = w.pairs.len() as u32;
                    w.weights.insert(&feature.0, start..end);
                }
                Ok(w)
            }
        }
        d.deserialize_map(V)
    }
}

/// `tagger.json.gz`.
#[derive(Deserialize)]
struct TaggerFile {
    tags: Vec<String>,
    tagdict: StrMap<String>,
    vocab: Option<StrSet>,
    weights: WeightsFile,
}

/// Tag number of the weights of a tag the model doesn't have (skipped).
const NO_TAG: u16 = u16::MAX;

impl Tagger {
    /// From the text of `tagger.json.gz` (`{"tags": [..], "tagdict": {word: tag}, "vocab": [..],
    /// "weights": {feature: {tag: weight}}}`).
    pub fn from_json(text: &str) -> Result<Tagger, G2pError> {
        let file: TaggerFile =
            serde_json::from_str(text).map_err(|e| G2pError::Data(format!("tagger.json.gz: {e}")))?;
        let WeightsFile { weights, mut pairs, names } = file.weights;
        let mut renumber = vec![NO_TAG; names.len()];
        for (name, &id) in names.iter() {
            if let Some(i) = file.tags.iter().position(|t| t == name) {
                renumber[id as usize] = i as u16;
            }
        }
        for (t, _) in &mut pairs {
            *t = renumber[*t as usize];
        }
        Ok(Tagger { tagdict: file.tagdict, tags: file.tags, vocab: file.vocab, weights, pairs })
    }

    fn predict(&self, feats: &[String]) -> String {
        let mut scores: Vec<Option<f64>> = vec![None; self.tags.len()];
        let mut any = false;
        for f in feats {
            if let Some(r) = self.weights.get(f) {
                for &(t, w) in &self.pairs[r.start as usize..r.end as usize] {
                    if t == NO_TAG {
                        continue;
                    }
                    any = true;
                    let s = &mut scores[t as usize];
                    *s = Some(s.unwrap_or(0.0) + w);
                }
            }
        }
        if !any {
            return "NN".into();
        }
        let mut best: Option<(f64, &str)> = None;
        for (i, t) in self.tags.iter().enumerate() {
            let s = scores[i].unwrap_or(0.0);
            let better = match best {
                None => true,
                Some((bs, bt)) => s > bs || (s == bs && t.as_str() > bt),
            };
            if better {
                best = Some((s, t));
            }
        }
        best.map_or("NN".into(), |b| b.1.to_string())
    }

    /// Penn tags for the words.
    pub fn tag(&self, words: &[&str]) -> Vec<String> {
        let mut ctx: Vec<String> = vec!["-START2-".into(), "-START-".into()];
        for w in words {
            let n = norm(w);
            let keep = self.vocab.as_ref().is_none_or(|v| v.contains(&n));
            ctx.push(if keep { n } else { format!("<{}>", shape(w)) });
        }
        ctx.push("-END-".into());
        ctx.push("-END2-".into());
        let (mut prev, mut prev2) = ("-START-".to_string(), "-START2-".to_string());
        let mut tags = Vec::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            let tag = match self.tagdict.get(w) {
                Some(t) => t.clone(),
                None => {
                    let j = i + 2;
                    let first: String = w.chars().next().map(String::from).unwrap_or_default();
                    let feats = vec![
                        "b".to_string(),
                        format!("s3={}", last_chars(w, 3)),
                        format!("p1={first}"),
                        format!("w={}", ctx[j]),
                        format!("sh={}", shape(w)),
                        if i == 0 { "i0".into() } else { "i+".into() },
                        format!("t-1={prev}"),
                        format!("t-2={prev2}"),
                        format!("t-12={prev},{prev2}"),
                        format!("w-1={}", ctx[j - 1]),
                        format!("s3-1={}", last_chars(&ctx[j - 1], 3)),
                        format!("w-2={}", ctx[j - 2]),
                        format!("w+1={}", ctx[j + 1]),
                        format!("s3+1={}", last_chars(&ctx[j + 1], 3)),
                        format!("w+2={}", ctx[j + 2]),
                    ];
                    self.predict(&feats)
                }
            };
            prev2 = std::mem::replace(&mut prev, tag.clone());
            tags.push(tag);
        }
        tags
    }
}
