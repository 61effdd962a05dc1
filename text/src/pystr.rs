//! Python `str` predicates the reference relies on (approximated with Rust's Unicode tables).

/// `s.isalpha()`.
pub fn is_alpha(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_alphabetic)
}

/// `s.isdigit()`.
pub fn is_digit_str(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_numeric)
}

fn cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase()
}

/// `s.islower()`: has a cased char and no uppercase one.
pub fn is_lower(s: &str) -> bool {
    s.chars().any(cased) && !s.chars().any(char::is_uppercase)
}

/// `s.isupper()`.
pub fn is_upper(s: &str) -> bool {
    s.chars().any(cased) && !s.chars().any(char::is_lowercase)
}

/// `s[-n:]`.
pub fn last_chars(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let skip = count - n;
    let (i, _) = s.char_indices().nth(skip).unwrap_or((0, ' '));
    &s[i..]
}

/// `s.capitalize()`.
pub fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect(),
        None => String::new(),
    }
}

/// Char count (`len(s)`).
pub fn clen(s: &str) -> usize {
    s.chars().count()
}

/// `s[:-n]` in chars.
pub fn drop_last(s: &str, n: usize) -> &str {
    let count = clen(s);
    if n >= count {
        return "";
    }
    match s.char_indices().nth(count - n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
