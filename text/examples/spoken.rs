//! The spoken form of each line of standard input, one line out per line in (`spoken::verbalize`
//! with its default options): `cargo run -p speechstream-text --example spoken < text.txt`.
//! A `\n` in a line stands for a line break. Used by scripts/normalizer-side-by-side.py.

use std::io::{BufRead, Write};

use speechstream_text::spoken::{verbalize, Pronunciations, TextOptions};

fn main() {
    let (opts, prons) = (TextOptions::default(), Pronunciations::new());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("read standard input").replace("\\n", "\n");
        writeln!(out, "{}", verbalize(&line, &opts, &prons).text).expect("write standard output");
    }
}
