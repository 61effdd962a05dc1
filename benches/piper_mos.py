"""Distill-MOS (distillmos 0.9.1) scores of WAV files: the naturalness step of benches/piper-bench.sh.

Run with .venv-mos's python (benches/setup-mos.sh makes it):

    python benches/piper_mos.py [--label NAME] FILE.wav...
        one line a file, "score<TAB>path", then "mean M min N max X (K files)" (with "NAME: " in
        front when --label is given). Scores run from 1 (bad) to 5 (excellent).
    python benches/piper_mos.py --table SCORES...
        a Markdown table of several runs' outputs (each file as written above, its label taken
        from its last line, else its name): mean, min and max per set, the means per draw (a
        draw: the WAVs of one folder, e.g. one seed's) when there are several, and each set's
        mean difference from the first set's, file by file (the files paired in the order given).
        Standard library only: any python.

Each WAV (16-bit PCM, the format both our server and piper-tts write) is read with the standard
library, its channels averaged to mono, resampled to 16 kHz with torchaudio's sinc resampler (the
`torchaudio.transforms.Resample` distillmos's own command line uses), and scored whole:
`ConvTransformerSQAModel` pads a file shorter than 7.68 s and averages overlapping 7.68 s windows
of a longer one, and peak-normalises each window itself, so the level of the file does not count.
"""
import os
import statistics
import sys
import wave


def read(path):
    import numpy as np

    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            sys.exit(f"{path}: {8 * w.getsampwidth()}-bit samples; 16-bit PCM expected")
        rate, channels = w.getframerate(), w.getnchannels()
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    return samples.reshape(-1, channels).mean(axis=1), rate


def score(paths, label=None):
    import contextlib

    import torch
    import torchaudio
    import distillmos

    torch.set_grad_enabled(False)
    with contextlib.redirect_stdout(sys.stderr):  # it prints where its weights came from
        model = distillmos.ConvTransformerSQAModel()
    model.eval()
    scores = []
    for path in paths:
        samples, rate = read(path)
        x = torch.from_numpy(samples)[None, :]
        if rate != 16000:
            x = torchaudio.functional.resample(x, rate, 16000)
        s = float(model(x).reshape(-1)[0])
        scores.append(s)
        print(f"{s:.4f}\t{path}", flush=True)
    prefix = f"{label}: " if label else ""
    print(f"{prefix}mean {statistics.fmean(scores):.4f} min {min(scores):.4f} max {max(scores):.4f} "
          f"({len(scores)} files)")


def parse(path):
    """(label, [(draw, score)]) of one output of `score`; a file's draw is its folder's name."""
    rows, label = [], None
    for line in open(path, encoding="utf-8"):
        if "\t" in line:
            score, wav = line.rstrip("\n").split("\t", 1)
            rows.append((os.path.basename(os.path.dirname(wav)), float(score)))
        elif ": mean " in line:
            label = line.split(": mean ", 1)[0]
    return label or path, rows


def table(paths):
    sets = [parse(p) for p in paths]
    ref_label, ref = sets[0]
    print(f"| set | files | Distill-MOS mean | min | max | means per draw | mean difference from {ref_label}, "
          f"file by file (min to max) |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for label, rows in sets:
        scores = [s for _, s in rows]
        draws = {}
        for draw, s in rows:
            draws.setdefault(draw, []).append(s)
        per_draw = " / ".join(f"{statistics.fmean(v):.3f}" for v in draws.values()) if len(draws) > 1 else ""
        diff = ""
        if len(rows) == len(ref) and rows is not ref:
            d = [a - b for a, (_, b) in zip(scores, ref)]
            diff = f"{statistics.fmean(d):+.3f} ({min(d):+.3f} to {max(d):+.3f})"
        print(f"| {label} | {len(scores)} | {statistics.fmean(scores):.3f} | {min(scores):.3f} "
              f"| {max(scores):.3f} | {per_draw} | {diff} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--table"]:
        table(args[1:])
    elif args[:1] == ["--label"]:
        score(args[2:], label=args[1])
    elif args:
        score(args)
    else:
        sys.exit(__doc__)
