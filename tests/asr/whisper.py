"""Print Whisper base's transcript of each audio file given (any format ffmpeg reads), one per line.

Run with .venv-whisper's python (scripts/setup-whisper.sh); the model is read from
$SPEECHSTREAM_CACHE/whisper-base (default: .cache/whisper-base in the repo root). Deterministic:
greedy decoding (beam 1, temperature 0), int8 on the CPU. tests/asr/cer.py imports `load` and
`transcribe` from here.

    .venv-whisper/bin/python tests/asr/whisper.py [--language en] FILE...
"""
import argparse
import os
import subprocess

import numpy as np
from faster_whisper import WhisperModel

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cache = os.environ.get("SPEECHSTREAM_CACHE", os.path.join(root, ".cache"))


def load():
    return WhisperModel(os.path.join(cache, "whisper-base"), device="cpu", compute_type="int8", cpu_threads=1)


def transcribe(model, path, language):
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", path, "-ar", "16000", "-ac", "1", "-f", "s16le", "-"],
        capture_output=True,
        check=True,
    ).stdout
    audio = np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0
    segments, _ = model.transcribe(audio, language=language, beam_size=1, temperature=0.0,
                                   condition_on_previous_text=False)
    return " ".join(s.text.strip() for s in segments).strip()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--language", default=None, help="ISO 639-1 code (default: detect)")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    model = load()
    for path in args.files:
        print(transcribe(model, path, args.language), flush=True)
