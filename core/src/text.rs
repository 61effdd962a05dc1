//! Text helpers that must behave as Python does.

/// Python's `str.isspace` for one character: Unicode White_Space plus the
/// information separators U+001C..U+001F, which Python counts and Rust does not.
pub(crate) fn is_py_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()` with no arguments.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_what_python_strips() {
        assert_eq!(py_strip("  Hello world. \n"), "Hello world.");
        assert_eq!(py_strip("\u{1c}\u{1f}x\u{1d}"), "x");
        assert_eq!(py_strip("\u{3000}\u{a0}x\u{2028}\u{85}"), "x");
        assert_eq!(py_strip(" \t\u{0b}\u{0c}\r "), "");
    }

    #[test]
    fn keeps_what_python_keeps() {
        // U+200B ZERO WIDTH SPACE and U+180E are not whitespace to Python 3.11.
        assert_eq!(py_strip("\u{200b}x"), "\u{200b}x");
        assert_eq!(py_strip("\u{180e}x"), "\u{180e}x");
        assert_eq!(py_strip("a b"), "a b");
    }
}
