//! Averaged-perceptron part-of-speech tagger (hibari `g2p/tagger.py`, weights in `tagger.json.gz`).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::pystr::{is_alpha, is_digit_str, is_lower, is_upper, last_chars};
use super::G2pError;

pub struct Tagger {
    tagdict: HashMap<String, String>,
    tags: Vec<String>,
    vocab: Option<HashSet<String>>,
    weights: HashMap<String, Vec<(u16, f64)>>,
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

impl Tagger {
    pub fn from_json(v: &Value) -> Result<Tagger, G2pError> {
        let bad = |k: &str| G2pError::Data(format!("tagger.json.gz: missing {k}"));
        let tags: Vec<String> = v
            .get("tags")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("tags"))?
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect();
        let tag_ix: HashMap<&str, u16> = tags.iter().enumerate().map(|(i, t)| (t.as_str(), i as u16)).collect();
        let tagdict = v
            .get("tagdict")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("tagdict"))?
            .iter()
            .map(|(k, t)| (k.clone(), t.as_str().unwrap_or("NN").to_string()))
            .collect();
        let vocab = v
            .get("vocab")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect());
        let mut weights = HashMap::new();
        for (f, ws) in v.get("weights").and_then(Value::as_object).ok_or_else(|| bad("weights"))? {
            let Some(ws) = ws.as_object() else { continue };
            let mut list = Vec::with_capacity(ws.len());
            for (t, w) in ws {
                if let (Some(&i), Some(w)) = (tag_ix.get(t.as_str()), w.as_f64()) {
                    list.push((i, w));
                }
            }
            weights.insert(f.clone(), list);
        }
        Ok(Tagger { tagdict, tags, vocab, weights })
    }

    fn predict(&self, feats: &[String]) -> String {
        let mut scores: Vec<Option<f64>> = vec![None; self.tags.len()];
        let mut any = false;
        for f in feats {
            if let Some(ws) = self.weights.get(f) {
                if ws.is_empty() {
                    continue;
                }
                for &(t, w) in ws {
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
            let tag = match self.tagdict.get(*w) {
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
