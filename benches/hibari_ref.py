"""In-process timings of hibari's Python package (the reference implementation, onnxruntime), for
benches/hibari-bench.sh. Run it with .venv-hibari's python (benches/setup-hibari-python.sh).

    python benches/hibari_ref.py --threads 1 --repeat 5 benches/texts/*.txt

For each text file: one warm-up call, then --repeat timed runs of `Hibari.stream(text, seed=...)`, the
package's streaming API (it phonemises the whole text, then yields one float32 array per sentence as
soon as that sentence is synthesised). Per run: wall time from the call to the first array (time to
first audio), to the last array (total), the seconds of audio, and the G2P time alone
(`Hibari.phonemize`, timed separately). One JSON object per text on stdout (medians over the runs),
the same schema as `hibari-rtf` writes for ours, with label "reference".

Threads: `Hibari(threads=N)` sets onnxruntime's intra- and inter-op threads; the script that calls this
also exports OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS = N for numpy and scipy.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="text files, one text each")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--label", default="reference")
    a = ap.parse_args()

    t0 = time.perf_counter()
    from hibari import Hibari
    from hibari import dsp

    tts = Hibari(threads=a.threads)
    tts.phonemize("Load the G2P.")
    load_s = time.perf_counter() - t0
    print(f"[{a.label}] loaded in {load_s:.2f} s, {a.threads} onnxruntime thread(s), fft backend "
          f"{dsp.FFT_BACKEND}", file=sys.stderr)

    for path in a.files:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        name = os.path.splitext(os.path.basename(path))[0]
        list(tts.stream(text, a.speed, a.seed))  # warm-up
        firsts, totals, g2ps, cpus = [], [], [], []
        samples = sentences = 0
        for _ in range(a.repeat):
            t = time.perf_counter()
            tts.phonemize(text)
            g2ps.append(time.perf_counter() - t)
            first = None
            n = k = 0
            c = time.process_time()
            t = time.perf_counter()
            for chunk in tts.stream(text, a.speed, a.seed):
                if first is None:
                    first = time.perf_counter() - t
                n += len(chunk)
                k += 1
            totals.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
            firsts.append(first)
            samples, sentences = n, k
        audio_s = samples / tts.sample_rate
        total = statistics.median(totals)
        line = {
            "kind": "rtf",
            "label": a.label,
            "impl": "hibari-tts 0.2.1 (onnxruntime)",
            "text": name,
            "threads": a.threads,
            "repeat": a.repeat,
            "sentences": sentences,
            "audio_s": round(audio_s, 4),
            "total_ms": round(total * 1e3, 3),
            "total_ms_min": round(min(totals) * 1e3, 3),
            "first_audio_ms": round(statistics.median(firsts) * 1e3, 3),
            "g2p_ms": round(statistics.median(g2ps) * 1e3, 3),
            "cpu_ms": round(statistics.median(cpus) * 1e3, 3),
            "rtf": round(total / audio_s, 5),
            "x_realtime": round(audio_s / total, 2),
            "load_s": round(load_s, 3),
            "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
        print(json.dumps(line), flush=True)
        print(f"[{a.label}] {name:>8}: {sentences:2d} sentences, {audio_s:6.2f} s audio in {total * 1e3:7.1f} ms "
              f"(G2P {line['g2p_ms']:.1f} ms, first audio {line['first_audio_ms']:.1f} ms): "
              f"{line['x_realtime']:.1f}x realtime", file=sys.stderr)


if __name__ == "__main__":
    main()
