//! Japanese morphological analysis over a compiled MeCab dictionary (Debian's
//! `open-jtalk-mecab-naist-jdic`, the dictionary Open JTalk reads), read in place.
//!
//! What it is: the lattice MeCab builds (every dictionary word starting at every position that
//! a word ends at, plus unknown words by character class) and the cheapest path through it
//! (word costs plus the connection matrix's costs), giving each morpheme's span and its
//! feature string (part of speech, ..., reading, pronunciation). What it is not: MeCab's
//! options (N-best, partial analysis, user dictionaries, rewrite rules).
//!
//! The binary formats (facts from MeCab 0.996's dictionary compiler, written here anew):
//! - `sys.dic`/`unk.dic`: a 72-byte header (ten little-endian u32: magic, version 102,
//!   type, lexicon size, left and right id counts, then the byte sizes of the double array,
//!   the token table and the features; then the charset, 32 bytes), a Darts double array
//!   (units of `i32 base, u32 check`) whose leaf values are `first token << 8 | tokens`,
//!   the tokens (16 bytes: `u16 left id, u16 right id, u16 part of speech, i16 cost,
//!   u32 feature offset, u32 compound`), and the NUL-terminated feature strings.
//! - `matrix.bin`: `u16 left size, u16 right size`, then i16 costs indexed
//!   `previous right id + left size * next left id`.
//! - `char.bin`: `u32 n`, n category names of 32 bytes, then one u32 per UCS-2 code point
//!   (bits 0-17 the categories it is in, 18-25 its default category, 26-29 how many
//!   characters its unknown words may be, 30 group, 31 invoke).

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Where Debian's `open-jtalk-mecab-naist-jdic` puts the compiled dictionary.
pub const DEBIAN_NAIST_JDIC: &str = "/var/lib/mecab/dic/open-jtalk/naist-jdic";
/// The Debian package that holds it (named in errors when it is absent).
pub const DEBIAN_PACKAGE: &str = "open-jtalk-mecab-naist-jdic";

const HEADER: usize = 72;
const TOKEN: usize = 16;
/// MeCab's default: a run of same-class characters longer than this is not one unknown word.
const MAX_GROUPING: usize = 24;

/// A read-only memory map of a whole file (the dictionary is ~100 MB: mapped, its pages are
/// read on demand and shared by every process that maps it).
struct Mapped {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and private to this value; sharing reads across threads is
// as safe as sharing a `&[u8]`.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    fn open(path: &Path) -> Result<Mapped, String> {
        use std::os::fd::AsRawFd;
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len() as usize;
        if len == 0 {
            return Err(format!("{}: empty file", path.display()));
        }
        // SAFETY: a fresh private read-only mapping of a file we opened; the fd may be closed
        // afterwards (the mapping keeps the file). A file truncated under us would fault, as
        // any mmap reader would; the dictionary is a package's file, not rewritten in place.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(format!("{}: mmap: {}", path.display(), std::io::Error::last_os_error()));
        }
        Ok(Mapped { ptr: ptr as *const u8, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `open` made; no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// One dictionary word's entry.
#[derive(Clone, Copy, Debug)]
struct Token {
    left: u16,
    right: u16,
    cost: i16,
    feature: u32,
}

/// A compiled MeCab dictionary file (`sys.dic` or `unk.dic`).
struct Lexicon {
    map: Mapped,
    /// Byte ranges of the double array, the tokens and the features in `map`.
    array: Range<usize>,
    tokens: Range<usize>,
    features: Range<usize>,
}

impl Lexicon {
    fn open(path: &Path) -> Result<Lexicon, String> {
        let map = Mapped::open(path)?;
        let b = map.bytes();
        let bad = |what: &str| format!("{}: not a MeCab dictionary ({what})", path.display());
        let field = |i: usize| u32_at(b, i * 4).map(|v| v as usize).ok_or_else(|| bad("short header"));
        if (field(0)? as u32) ^ 0xef71_8f77 != b.len() as u32 {
            return Err(bad("magic"));
        }
        if field(1)? != 102 {
            return Err(bad("version"));
        }
        let charset = &b[40..HEADER];
        if !charset.starts_with(b"UTF-8\0") && !charset.starts_with(b"utf-8\0") && !charset.starts_with(b"utf8\0") {
            return Err(bad("not UTF-8"));
        }
        let (dsize, tsize, fsize) = (field(6)?, field(7)?, field(8)?);
        let array = HEADER..HEADER + dsize;
        let tokens = array.end..array.end + tsize;
        let features = tokens.end..tokens.end + fsize;
        if features.end > b.len() || dsize % 8 != 0 || tsize % TOKEN != 0 {
            return Err(bad("sizes"));
        }
        Ok(Lexicon { map, array, tokens, features })
    }

    fn unit(&self, index: usize) -> Option<(i32, u32)> {
        let b = &self.map.bytes()[self.array.clone()];
        let at = index.checked_mul(8)?;
        Some((u32_at(b, at)? as i32, u32_at(b, at + 4)?))
    }

    /// Every entry that is a prefix of `key`: (its length in bytes, its value), shortest first
    /// (Darts' common prefix search).
    fn prefixes(&self, key: &[u8], out: &mut Vec<(usize, u32)>) {
        out.clear();
        let Some((mut b, _)) = self.unit(0) else { return };
        for i in 0..=key.len() {
            // A leaf hangs off the node at `b`: key[..i] is an entry.
            if let Some((n, check)) = self.unit(b as u32 as usize) {
                if check == b as u32 && n < 0 {
                    out.push((i, (-n - 1) as u32));
                }
            }
            let Some(&byte) = key.get(i) else { break };
            let p = (b as u32 as usize) + byte as usize + 1;
            match self.unit(p) {
                Some((next, check)) if check == b as u32 => b = next,
                _ => break,
            }
        }
    }

    fn token(&self, index: usize) -> Option<Token> {
        let b = &self.map.bytes()[self.tokens.clone()];
        let at = index.checked_mul(TOKEN)?;
        Some(Token {
            left: u16_at(b, at)?,
            right: u16_at(b, at + 2)?,
            cost: u16_at(b, at + 6)? as i16,
            feature: u32_at(b, at + 8)?,
        })
    }

    /// The tokens a double-array value names.
    fn tokens_of(&self, value: u32) -> impl Iterator<Item = Token> + '_ {
        let first = (value >> 8) as usize;
        (first..first + (value & 0xff) as usize).filter_map(|i| self.token(i))
    }

    fn feature(&self, offset: u32) -> &str {
        let b = &self.map.bytes()[self.features.clone()];
        let rest = b.get(offset as usize..).unwrap_or_default();
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }
}

/// A character's classes (`char.bin`).
#[derive(Clone, Copy, Debug, Default)]
struct CharInfo(u32);

impl CharInfo {
    fn types(self) -> u32 {
        self.0 & 0x3ffff
    }
    fn default_type(self) -> usize {
        ((self.0 >> 18) & 0xff) as usize
    }
    fn length(self) -> usize {
        ((self.0 >> 26) & 0xf) as usize
    }
    fn group(self) -> bool {
        self.0 & (1 << 30) != 0
    }
    fn invoke(self) -> bool {
        self.0 & (1 << 31) != 0
    }
    fn is_kind_of(self, other: CharInfo) -> bool {
        self.types() & other.types() != 0
    }
}

/// One morpheme of an analysis: its span in the analysed text (chars) and its features.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Morpheme<'d> {
    /// Its char range in the analysed text.
    pub chars: Range<usize>,
    /// MeCab's feature CSV (naist-jdic: part of speech x4, conjugation type and form, base form,
    /// reading, pronunciation, accent, chain rule; unknown words stop after the base form).
    pub feature: &'d str,
    /// Not in the dictionary: made up from its characters' class.
    pub unknown: bool,
}

impl Morpheme<'_> {
    /// Its pronunciation in katakana (naist-jdic's 9th field), if it has one.
    pub fn pronunciation(&self) -> Option<&str> {
        self.feature.split(',').nth(8).filter(|p| !p.is_empty() && *p != "*")
    }

    /// Its part of speech (the first field).
    pub fn part_of_speech(&self) -> &str {
        self.feature.split(',').next().unwrap_or("")
    }
}

/// A compiled MeCab dictionary directory: `sys.dic`, `unk.dic`, `matrix.bin`, `char.bin`.
pub struct Dictionary {
    system: Lexicon,
    unknown: Lexicon,
    matrix: Mapped,
    left_size: usize,
    /// Per UCS-2 code point.
    chars: Vec<CharInfo>,
    /// The unknown-word tokens of each character category (by its index in `char.bin`).
    unknown_tokens: Vec<Vec<Token>>,
    space: CharInfo,
    dir: PathBuf,
}

/// A lattice node: a word from `start` to `end` (byte offsets; `start` after any spaces
/// skipped before it).
struct Node<'d> {
    start: usize,
    end: usize,
    token: Token,
    unknown: bool,
    lexicon: &'d Lexicon,
    cost: i64,
    prev: usize,
}

impl Dictionary {
    /// Opens the dictionary in `dir`.
    pub fn open(dir: &Path) -> Result<Dictionary, String> {
        let system = Lexicon::open(&dir.join("sys.dic"))?;
        let unknown = Lexicon::open(&dir.join("unk.dic"))?;
        let matrix = Mapped::open(&dir.join("matrix.bin"))?;
        let m = matrix.bytes();
        let (left, right) = (u16_at(m, 0).unwrap_or(0) as usize, u16_at(m, 2).unwrap_or(0) as usize);
        if m.len() != 4 + 2 * left * right {
            return Err(format!("{}: not a MeCab matrix", dir.join("matrix.bin").display()));
        }
        let path = dir.join("char.bin");
        let c = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let n = u32_at(&c, 0).unwrap_or(0) as usize;
        let names_end = 4 + 32 * n;
        if c.len() != names_end + 4 * 0xffff {
            return Err(format!("{}: not a MeCab char.bin", path.display()));
        }
        let name = |i: usize| {
            let raw = &c[4 + 32 * i..4 + 32 * (i + 1)];
            let end = raw.iter().position(|&x| x == 0).unwrap_or(32);
            raw[..end].to_vec()
        };
        let chars = (0..0xffff).map(|i| CharInfo(u32_at(&c, names_end + 4 * i).unwrap_or(0))).collect();
        let mut found = Vec::new();
        let mut unknown_tokens = Vec::new();
        for i in 0..n {
            let key = name(i);
            unknown.prefixes(&key, &mut found);
            let tokens = found.iter().filter(|(len, _)| *len == key.len()).flat_map(|(_, v)| unknown.tokens_of(*v));
            unknown_tokens.push(tokens.collect());
        }
        let space = (0..n).find(|&i| name(i) == b"SPACE").map_or(CharInfo(0), |i| CharInfo(1 << i));
        Ok(Dictionary { system, unknown, matrix, left_size: left, chars, unknown_tokens, space, dir: dir.to_owned() })
    }

    /// Where it was read from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn connection(&self, right: u16, left: u16) -> i64 {
        let at = 4 + 2 * (right as usize + self.left_size * left as usize);
        u16_at(self.matrix.bytes(), at).map_or(0, |v| v as i16 as i64)
    }

    fn char_info(&self, c: char) -> CharInfo {
        self.chars.get(c as usize).copied().unwrap_or_else(|| self.chars[0])
    }

    /// The cheapest analysis of `text` into morphemes (spaces between them are skipped).
    pub fn analyse(&self, text: &str) -> Vec<Morpheme<'_>> {
        let text = text.trim_end();
        let len = text.len();
        // BOS is node 0; `ends[p]`: the nodes ending at byte p.
        let bos = Token { left: 0, right: 0, cost: 0, feature: 0 };
        let mut nodes =
            vec![Node { start: 0, end: 0, token: bos, unknown: false, lexicon: &self.system, cost: 0, prev: 0 }];
        let mut ends: Vec<Vec<usize>> = vec![Vec::new(); len + 1];
        ends[0].push(0);
        let mut found = Vec::new();
        let mut fresh: Vec<(usize, Token, bool, &Lexicon)> = Vec::new();
        for pos in 0..len {
            if ends[pos].is_empty() || !text.is_char_boundary(pos) {
                continue;
            }
            fresh.clear();
            self.lookup(text, pos, &mut found, &mut fresh);
            let start = skip_spaces(text, pos, |c| self.char_info(c).is_kind_of(self.space));
            for &(end, token, unknown, lexicon) in &fresh {
                let (mut best, mut best_cost) = (usize::MAX, i64::MAX);
                for &l in &ends[pos] {
                    let cost = nodes[l].cost + self.connection(nodes[l].token.right, token.left);
                    if cost < best_cost {
                        (best, best_cost) = (l, cost);
                    }
                }
                nodes.push(Node {
                    start,
                    end,
                    token,
                    unknown,
                    lexicon,
                    cost: best_cost + token.cost as i64,
                    prev: best,
                });
                ends[end].push(nodes.len() - 1);
            }
        }
        // EOS (left id 0) after the cheapest node ending at the end.
        let last = ends[len].iter().copied().min_by_key(|&l| nodes[l].cost + self.connection(nodes[l].token.right, 0));
        let mut path = Vec::new();
        let mut at = last.unwrap_or(0);
        while at != 0 {
            path.push(at);
            at = nodes[at].prev;
        }
        path.reverse();
        // Byte offsets to char offsets.
        let mut char_at = vec![0usize; len + 1];
        let mut n = 0;
        for (i, c) in text.char_indices() {
            char_at[i] = n;
            n += 1;
            char_at[i + 1..i + c.len_utf8()].fill(n);
        }
        char_at[len] = n;
        path.into_iter()
            .map(|i| {
                let node = &nodes[i];
                Morpheme {
                    chars: char_at[node.start]..char_at[node.end],
                    feature: node.lexicon.feature(node.token.feature),
                    unknown: node.unknown,
                }
            })
            .collect()
    }

    /// The words starting at `pos` (after any spaces): the dictionary's, and unknown words by
    /// the class of the first character, as MeCab's tokenizer makes them.
    fn lookup<'d>(
        &'d self,
        text: &str,
        pos: usize,
        found: &mut Vec<(usize, u32)>,
        out: &mut Vec<(usize, Token, bool, &'d Lexicon)>,
    ) {
        let start = skip_spaces(text, pos, |c| self.char_info(c).is_kind_of(self.space));
        let rest = &text[start..];
        let Some(first) = rest.chars().next() else { return };
        let info = self.char_info(first);
        self.system.prefixes(rest.as_bytes(), found);
        for &(n, value) in found.iter() {
            if n == 0 || !rest.is_char_boundary(n) {
                continue;
            }
            for token in self.system.tokens_of(value) {
                out.push((start + n, token, false, &self.system));
            }
        }
        if !out.is_empty() && !info.invoke() {
            return;
        }
        let unknown_tokens = self.unknown_tokens.get(info.default_type()).map_or(&[][..], |t| &t[..]);
        let add = |end: usize, out: &mut Vec<(usize, Token, bool, &'d Lexicon)>| {
            for &token in unknown_tokens {
                out.push((start + end, token, true, &self.unknown));
            }
        };
        let mut group_end = None;
        if info.group() {
            // The run of characters of this class (each of a kind with the one before).
            let (mut end, mut kind, mut count) = (first.len_utf8(), info, 0usize);
            for c in rest[first.len_utf8()..].chars() {
                let ci = self.char_info(c);
                if !kind.is_kind_of(ci) {
                    break;
                }
                end += c.len_utf8();
                kind = ci;
                count += 1;
            }
            if count <= MAX_GROUPING {
                add(end, out);
            }
            group_end = Some(end);
        }
        // Unknown words of 1..=length characters of its class.
        let mut end = 0usize;
        let mut chars = rest.chars();
        let mut added = false;
        for i in 1..=info.length() {
            let Some(c) = chars.next() else { break };
            if i > 1 && !info.is_kind_of(self.char_info(c)) {
                break;
            }
            end += c.len_utf8();
            if Some(end) == group_end {
                break;
            }
            add(end, out);
            added = true;
        }
        if out.is_empty() && !added {
            add(first.len_utf8(), out);
        }
    }
}

/// The byte offset after the characters of `is_space` from `pos`.
fn skip_spaces(text: &str, pos: usize, is_space: impl Fn(char) -> bool) -> usize {
    let rest = &text[pos..];
    rest.char_indices().find(|&(_, c)| !is_space(c)).map_or(text.len(), |(i, _)| pos + i)
}
