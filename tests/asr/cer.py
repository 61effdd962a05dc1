"""Character error rate of Whisper base's transcripts against the texts read, one line per file.

Run with .venv-whisper's python (scripts/setup-whisper.sh):

    .venv-whisper/bin/python tests/asr/cer.py --language es TEXTS WAV...

TEXTS holds one text per line, the i-th read in the i-th WAV. Prints, per file, its CER and the
transcript (tab-separated), then `mean <CER>`. Both sides are normalised as Whisper's
BasicTextNormalizer does (lower case, symbols and punctuation to spaces, runs of spaces to one;
bracketed asides dropped), and, for languages written without spaces (zh, ja), compared without
spaces. CER is the Levenshtein distance between the characters over the reference's length.
Transcribed by tests/asr/whisper.py's `transcribe`: greedy, temperature 0, int8 on the CPU.
"""
import argparse

from textdist import distance, normalise
from whisper import load, transcribe


parser = argparse.ArgumentParser()
parser.add_argument("--language", required=True, help="ISO 639-1 code")
parser.add_argument("texts")
parser.add_argument("files", nargs="+")
args = parser.parse_args()
texts = [line.rstrip("\n") for line in open(args.texts, encoding="utf-8")]
assert len(texts) == len(args.files), f"{len(texts)} texts for {len(args.files)} files"
spaceless = args.language in ("zh", "ja")

model = load()
rates = []
for text, path in zip(texts, args.files):
    heard = transcribe(model, path, args.language)
    expected = normalise(text, spaceless)
    # (at most 1: a decoder caught in a loop says one phrase hundreds of times)
    rate = min(1.0, distance(expected, normalise(heard, spaceless)) / max(1, len(expected)))
    rates.append(rate)
    print(f"{rate:.3f}\t{heard}", flush=True)
print(f"mean {sum(rates) / len(rates):.4f}", flush=True)
