"""Print PocketSphinx's transcript of each audio file given (any format ffmpeg reads), one per line.

Run with .venv-asr's python (scripts/setup-asr.sh). Used by tests/hibari_intelligibility.rs.
"""
import subprocess
import sys

from pocketsphinx import Decoder

decoder = Decoder(samprate=16000)
for path in sys.argv[1:]:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", path, "-ar", "16000", "-ac", "1", "-f", "s16le", "-"],
        capture_output=True,
        check=True,
    ).stdout
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    print(hyp.hypstr if hyp else "")
