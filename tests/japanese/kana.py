"""Print the reading (katakana, as pyopenjtalk-plus reads it) of each line of stdin, one line each,
marks and spaces left out: how tests/kokoro_japanese.rs compares what Whisper wrote with what was
sent, whatever mix of kanji and kana each side uses. Run with .venv-japanese's python
(scripts/setup-japanese.sh):

    .venv-japanese/bin/python tests/japanese/kana.py < lines
"""
import contextlib
import io
import sys

with contextlib.redirect_stdout(io.StringIO()):
    import pyopenjtalk

    out = []
    for line in sys.stdin.read().splitlines():
        kana = pyopenjtalk.g2p(line, kana=True) if line.strip() else ""
        out.append("".join(c for c in kana if "\u30a1" <= c <= "\u30fa" or c == "ー"))
print("\n".join(out))
