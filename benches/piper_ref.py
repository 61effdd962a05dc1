"""piper-tts 1.8.0 in process, one onnxruntime thread: the reference side of benches/piper-bench.sh.

Run with .venv-piper's python (scripts/setup.sh makes it), pinned to one CPU by the caller:

    python benches/piper_ref.py rtf MODEL.onnx REPS TEXT_FILE...
        per text: load once, then REPS + 1 runs of `PiperVoice.synthesize(text)` consumed to the
        end (text to audio, espeak-ng's phonemization included); prints one JSON line a run:
        {"side": "piper-tts", "text": ..., "run": i, "audio_s": ..., "compute_s": ...}; run 0 is
        the first call after loading (cold), the others warm.
    python benches/piper_ref.py wav MODEL.onnx OUT_DIR SENTENCES_FILE [--split-first[=N]]
        one WAV per line of SENTENCES_FILE (OUT_DIR/NN.wav, from 01), through `synthesize_wav`;
        --split-first: each line as our engine cut an utterance's first sentence for Piper at
        first (its first six words, a comma added, then the rest: `split_first` below), one call
        each, the audio concatenated (to tell the cut's effect from the network's); --split-first=N
        after N words (8: Piper's cut now, PIPER_FIRST_WORDS in engine-libtorch/src/piper/serve.rs).

Two helpers that need only the standard library (any python):

    python benches/piper_ref.py report RUNS.jsonl
        the tables of benches/piper-bench.sh from its JSON lines (both sides'), medians per text.
    python benches/piper_ref.py wer SENTENCES_FILE CER_OUTPUT
        word error rate of tests/asr/cer.py's transcripts (its output: "CER<TAB>transcript" a
        line, then "mean ..."), normalised as cer.py does: per sentence, then the pooled WER.

The session is onnxruntime's CPU provider with intra_op_num_threads = inter_op_num_threads = 1
(PiperVoice.load builds it with default options, so it is rebuilt here with these; the graph is
the same file, the optimisation level onnxruntime's default). Synthesis uses the voice's own
noise and length scales (SynthesisConfig's defaults), as wyoming-piper does.
"""
import json
import os
import statistics
import sys
import time
import wave

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "asr"))
from textdist import distance, normalise  # noqa: E402  (tests/asr, standard library only)


def load(model):
    import onnxruntime
    from piper import PiperVoice

    voice = PiperVoice.load(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    voice.session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    return voice


def rtf(model, reps, files):
    t = time.perf_counter()
    voice = load(model)
    print(json.dumps({"side": "piper-tts", "load_s": round(time.perf_counter() - t, 4)}), flush=True)
    for path in files:
        text = open(path, encoding="utf-8").read().strip()
        for run in range(reps + 1):
            t = time.perf_counter()
            samples = 0
            rate = voice.config.sample_rate
            for chunk in voice.synthesize(text):
                samples += len(chunk.audio_float_array)
            compute = time.perf_counter() - t
            print(json.dumps({"side": "piper-tts", "mode": "cold" if run == 0 else "warm",
                              "text": os.path.basename(path), "audio_s": round(samples / rate, 4),
                              "compute_s": round(compute, 4)}), flush=True)


def split_first(text, n=6):
    """Our engine's first-segment cut (engine-libtorch/src/family.rs `split_first`), on words
    split at spaces: a sentence of more than n words is cut after its first clause break (`,`
    `;` `:` or a dash after word 2 to n), else after word n with a comma added."""
    words = text.split()
    if len(words) <= n:
        return [text]
    clause = next((k for k in range(1, n) if words[k][-1] in ",;:\u2014\u2013"), None)
    cut = n - 1 if clause is None else clause
    head = " ".join(words[: cut + 1]) + ("," if clause is None else "")
    return [head, " ".join(words[cut + 1:])]


def wav(model, out_dir, sentences, split=0):
    voice = load(model)
    lines = [line.strip() for line in open(sentences, encoding="utf-8") if line.strip()]
    for i, text in enumerate(lines, 1):
        with wave.open(os.path.join(out_dir, f"{i:02d}.wav"), "wb") as w:
            for j, part in enumerate(split_first(text, split) if split else [text]):
                voice.synthesize_wav(part, w, set_wav_format=j == 0)


def report(path):
    """Medians per (side, mode, text); RTF = compute s / audio s; x = audio s / compute s."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    rows = [r for r in rows if "text" in r]
    groups = {}
    for r in rows:
        groups.setdefault((r["side"], r["mode"], r["text"]), []).append(r)
    texts = list(dict.fromkeys(r["text"] for r in rows))
    sides = list(dict.fromkeys((r["side"], r["mode"]) for r in rows))
    med = lambda key, g: statistics.median(r[key] for r in g)
    print("| text | side | mode | runs | audio s | compute s (min-max) | RTF | x real time | piper-tts warm's compute / this |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for text in texts:
        ref = groups.get(("piper-tts", "warm", text))
        for side, mode in sides:
            g = groups.get((side, mode, text))
            if not g:
                continue
            audio, compute = med("audio_s", g), med("compute_s", g)
            lo, hi = min(r["compute_s"] for r in g), max(r["compute_s"] for r in g)
            ratio = f"{med('compute_s', ref) / compute:.2f}x" if ref else ""
            print(f"| {text} | {side} | {mode} | {len(g)} | {audio:.2f} | {compute:.3f} ({lo:.3f}-{hi:.3f}) "
                  f"| {compute / audio:.4f} | {audio / compute:.1f} | {ratio} |")
    # All texts together: the sums of the medians.
    print()
    print("| side | mode | audio s | compute s | RTF | x real time | speed / piper-tts warm's | compute / piper-tts warm's |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    sums = {}
    for side, mode in sides:
        gs = [groups.get((side, mode, t)) for t in texts]
        if any(g is None for g in gs):
            continue
        sums[(side, mode)] = (sum(med("audio_s", g) for g in gs), sum(med("compute_s", g) for g in gs))
    ref = sums.get(("piper-tts", "warm"))
    for (side, mode), (audio, compute) in sums.items():
        speed = f"{(audio / compute) / (ref[0] / ref[1]):.2f}x" if ref else ""
        share = f"{compute / ref[1]:.2f}x" if ref else ""
        print(f"| {side} | {mode} | {audio:.2f} | {compute:.3f} | {compute / audio:.4f} | {audio / compute:.1f} | {speed} | {share} |")


def words(text):
    """cer.py's normalisation, then words."""
    return normalise(text).split()


def wer(sentences, cer_output):
    texts = [line.strip() for line in open(sentences, encoding="utf-8") if line.strip()]
    heard = [line.rstrip("\n").split("\t", 1) for line in open(cer_output, encoding="utf-8")
             if "\t" in line]
    assert len(heard) == len(texts), f"{len(heard)} transcripts for {len(texts)} sentences"
    errors = total = 0
    for text, (cer, transcript) in zip(texts, heard):
        e, n = distance(words(text), words(transcript)), len(words(text))
        errors, total = errors + e, total + n
        print(f"{e}/{n}\t{cer}\t{transcript}")
    print(f"WER {errors}/{total} = {errors / total:.4f}")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "rtf":
        rtf(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif command == "wav":
        split = [int(a.partition("=")[2] or 6) for a in sys.argv[5:] if a.partition("=")[0] == "--split-first"]
        wav(sys.argv[2], sys.argv[3], sys.argv[4], split=split[-1] if split else 0)
    elif command == "report":
        report(sys.argv[2])
    elif command == "wer":
        wer(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {command!r}: rtf, wav, report or wer")
