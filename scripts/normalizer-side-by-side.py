#!/usr/bin/env python3
"""Side by side (issue 33): our test set (text/tests/normalize/cases.tsv) through three
normalisers, with one reader for all: hibari's Python G2P (hibari-tts 0.2.1, its own normalisation
included). A normaliser reads a sentence as expected when hibari's G2P gives the same phonemes for
its output as for the expected spoken form, stress marks and spaces aside (so "F B I" and "FBI",
or "point" stressed or not, count as the same reading).

- ours: speechstream_text::spoken (`cargo run -p speechstream-text --example spoken`), its output fed
  to hibari's G2P;
- hibari: the written sentence straight into hibari's G2P (its normaliser and number reading);
- nemo: NVIDIA's nemo_text_processing (PyPI) English normaliser, its output fed to hibari's G2P.

Also reports ours by exact text (what text/tests/normalize.rs checks).

Needs a venv with `hibari-tts==0.2.1` (installed --no-deps from .cache/wheels), onnxruntime, numpy,
and optionally nemo_text_processing (skipped when missing):

    python3 -m venv /tmp/nvenv && /tmp/nvenv/bin/pip install --no-deps .cache/wheels/hibari_tts-0.2.1-py3-none-any.whl
    /tmp/nvenv/bin/pip install onnxruntime numpy nemo_text_processing
    /tmp/nvenv/bin/python scripts/normalizer-side-by-side.py [--out results.jsonl]
"""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases():
    out = []
    with open(os.path.join(ROOT, "text/tests/normalize/cases.tsv"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cat, written, expected = line.split("\t")
            out.append((cat, written, expected))
    return out


def ours(written):
    env = dict(os.environ)
    p = subprocess.run(
        ["cargo", "run", "-q", "-p", "speechstream-text", "--example", "spoken"],
        input="\n".join(written) + "\n", capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    lines = p.stdout.split("\n")
    return lines[:len(written)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write each case's readings here (JSON lines)")
    ap.add_argument("--no-nemo", action="store_true", help="leave NeMo out (its grammars take minutes to build)")
    args = ap.parse_args()
    from hibari.g2p import G2P
    g2p0 = G2P()
    g2p = lambda s: "".join(c for c in g2p0(s) if c not in "ˈˌ" and not c.isspace())
    cs = cases()
    written = [w for _, w, _ in cs]
    # hibari's G2P reads one line; a case's line breaks are spaces to it.
    flat = lambda s: " ".join(s.split())
    ours_text = ours([w.replace("\n", "\\n") for w in written])
    try:
        if args.no_nemo:
            raise ImportError("--no-nemo")
        from nemo_text_processing.text_normalization.normalize import Normalizer
        t = time.time()
        nemo = Normalizer(input_case="cased", lang="en", cache_dir=os.environ.get("NEMO_CACHE", "/tmp/nemo-tn-cache"))
        print(f"nemo grammars ready in {time.time() - t:.0f} s", file=sys.stderr)
    except Exception as e:  # not installed
        print(f"nemo_text_processing not available ({e}); skipped", file=sys.stderr)
        nemo = None
    score = {"ours (exact text)": 0, "ours": 0, "hibari": 0}
    if nemo:
        score["nemo"] = 0
    rows = []
    for (cat, w, exp), o in zip(cs, ours_text):
        want = g2p(flat(exp)) if flat(exp) else ""
        row = {"category": cat, "written": w, "expected": exp, "ours": o}
        ok = {"ours (exact text)": o == exp, "ours": (g2p(flat(o)) if flat(o) else "") == want,
              "hibari": (g2p(flat(w)) if flat(w) else "") == want}
        if nemo:
            n = nemo.normalize(flat(w), punct_post_process=True)
            row["nemo"] = n
            ok["nemo"] = (g2p(flat(n)) if flat(n) else "") == want
        for k, v in ok.items():
            score[k] += int(v)
        row["ok"] = ok
        rows.append(row)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    n = len(cs)
    print(f"{n} sentences (text/tests/normalize/cases.tsv)")
    for k, v in score.items():
        print(f"{k:>18}: {v}/{n} read as expected ({100.0 * v / n:.1f}%)")


if __name__ == "__main__":
    main()
