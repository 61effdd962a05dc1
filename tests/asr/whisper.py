"""Print Whisper base's transcript of each audio file given (any format ffmpeg reads), one per line.

Run with .venv-whisper's python (scripts/setup-whisper.sh); the model is read from
$SPEECHSTREAM_CACHE/whisper-base (default: .cache/whisper-base in the repo root). Deterministic:
greedy decoding (beam 1, temperature 0), int8 on the CPU.

    .venv-whisper/bin/python tests/asr/whisper.py [--language en] FILE...
"""
import argparse
import os
import subprocess

import numpy as np
from faster_whisper import WhisperModel

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cache = os.environ.get("SPEECHSTREAM_CACHE", os.path.join(root, ".cache"))
parser = argparse.ArgumentParser()
parser.add_argument("--language", default=None, help="ISO 639-1 code (default: detect)")
parser.add_argument("files", nargs="+")
args = parser.parse_args()

model = WhisperModel(os.path.join(cache, "whisper-base"), device="cpu", compute_type="int8", cpu_threads=1)
for path in args.files:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", path, "-ar", "16000", "-ac", "1", "-f", "s16le", "-"],
        capture_output=True,
        check=True,
    ).stdout
    audio = np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0
    segments, _ = model.transcribe(audio, language=args.language, beam_size=1, temperature=0.0,
                                   condition_on_previous_text=False)
    print(" ".join(s.text.strip() for s in segments).strip(), flush=True)
