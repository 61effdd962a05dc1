"""Force-align text to audio with PocketSphinx: for each pair of arguments (an audio file that
ffmpeg reads, then its text), print one JSON line: a list of [word, start_ms, end_ms] for the
text's words as the aligner places them (10 ms frames, silences left out).

Run with .venv-asr's python (scripts/setup-asr.sh). An independent judge of word timestamps:
used by engine-libtorch/tests/hibari_timestamps.rs.
"""
import json
import re
import subprocess
import sys

from pocketsphinx import Decoder

FRAME_MS = 10


def words(text):
    out = []
    for w in text.split():
        w = re.sub(r"[^\w']", "", w.replace("\u2019", "'")).lower()
        if w:
            out.append(w)
    return out


def pcm16k(path):
    return subprocess.run(
        ["ffmpeg", "-v", "error", "-i", path, "-ar", "16000", "-ac", "1", "-f", "s16le", "-"],
        capture_output=True,
        check=True,
    ).stdout


def main(args):
    if len(args) % 2:
        sys.exit("usage: align.py AUDIO TEXT [AUDIO TEXT ...]")
    decoder = Decoder(samprate=16000, bestpath=False)
    for path, text in zip(args[::2], args[1::2]):
        wanted = words(text)
        missing = [w for w in wanted if decoder.lookup_word(w) is None]
        if missing:
            sys.exit(f"not in the aligner's dictionary: {missing}")
        decoder.set_align_text(" ".join(wanted))
        decoder.start_utt()
        decoder.process_raw(pcm16k(path), full_utt=True)
        decoder.end_utt()
        segs = [
            [s.word.split("(")[0], s.start_frame * FRAME_MS, (s.end_frame + 1) * FRAME_MS]
            for s in decoder.seg()
            if s.word not in ("<s>", "</s>", "<sil>", "(NULL)") and not s.word.startswith("[")
        ]
        print(json.dumps(segs), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
