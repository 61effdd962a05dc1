#!/usr/bin/env python3
"""Writes misaki 0.9.4's phonemes for each line of text/tests/mandarin/sentences.txt into
text/tests/mandarin/expected.txt (one line each, in order): the reference that
text/tests/mandarin.rs holds the Mandarin front end to. misaki's ZHG2P() is the zh G2P that
hexgrad's kokoro KPipeline builds for lang_code 'z' with Kokoro v1.0 (version None: the legacy
path).

    scripts/setup-mandarin-reference.sh && .venv-mandarin/bin/python scripts/mandarin-expected.py

With a file argument it reads that file's lines instead and writes their phonemes to stdout.
"""

import logging
import os
import sys
import warnings

import jieba
from misaki import __version__, zh

assert __version__ == "0.9.4", __version__
jieba.setLogLevel(logging.WARNING)
warnings.simplefilter("ignore")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SENTENCES = os.path.join(ROOT, "text", "tests", "mandarin", "sentences.txt")
EXPECTED = os.path.join(ROOT, "text", "tests", "mandarin", "expected.txt")


def main():
    g2p = zh.ZHG2P()
    source = sys.argv[1] if len(sys.argv) > 1 else SENTENCES
    with open(source, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    out = []
    for line in lines:
        phonemes, _ = g2p(line)
        assert "\n" not in phonemes, line
        out.append(phonemes)
    text = "".join(p + "\n" for p in out)
    if len(sys.argv) > 1:
        sys.stdout.write(text)
    else:
        with open(EXPECTED, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"{EXPECTED}: {len(out)} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
