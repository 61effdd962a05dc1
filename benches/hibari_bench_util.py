"""Helpers for benches/hibari-bench.sh (standard library only; any python3 >= 3.8).

    hibari_bench_util.py time-cmd --label L --text T --threads N --runs R --warmup W -- CMD...
        Runs CMD W times untimed, then R times timed (wall clock, stdout/stderr discarded); prints one
        JSON line {"kind": "say", ...} with the median, mean, min and max in ms. The fallback when
        hyperfine is not installed.
    hibari_bench_util.py hyperfine-json --label L --text T --threads N FILE
        The same JSON line from a `hyperfine --export-json FILE` result (one command).
    hibari_bench_util.py mem --label L --text T --threads N -- CMD...
        Runs CMD once under /usr/bin/time; prints {"kind": "mem", ...}: max RSS (KiB), user and
        system CPU seconds, elapsed seconds.
    hibari_bench_util.py report FILE.jsonl
        Markdown tables (ours, reference, ours/reference) from the JSON lines of one run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _fail(msg):
    print(f"hibari_bench_util: {msg}", file=sys.stderr)
    sys.exit(1)


def time_cmd(a):
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    times = []
    for i in range(a.warmup + a.runs):
        t = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t
        if r.returncode != 0:
            _fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr.decode(errors='replace')}")
        if i >= a.warmup:
            times.append(dt * 1e3)
    print(json.dumps({"kind": "say", "label": a.label, "text": a.text, "threads": a.threads,
                      "tool": "median of repeated runs", "runs": a.runs,
                      "median_ms": round(statistics.median(times), 2), "mean_ms": round(statistics.mean(times), 2),
                      "min_ms": round(min(times), 2), "max_ms": round(max(times), 2)}))


def hyperfine_json(a):
    with open(a.file) as f:
        r = json.load(f)["results"][0]
    ms = [t * 1e3 for t in r["times"]]
    print(json.dumps({"kind": "say", "label": a.label, "text": a.text, "threads": a.threads,
                      "tool": "hyperfine", "runs": len(ms),
                      "median_ms": round(r["median"] * 1e3, 2), "mean_ms": round(r["mean"] * 1e3, 2),
                      "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2),
                      "command": r.get("command")}))


def mem(a):
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not os.access("/usr/bin/time", os.X_OK):
        _fail("/usr/bin/time not found (apt-get install time)")
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out:
        r = subprocess.run(["/usr/bin/time", "-o", out.name, "-f", "%M %U %S %e"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            _fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr.decode(errors='replace')}")
        rss, user, sys_s, elapsed = out.read().split()[-4:]
    print(json.dumps({"kind": "mem", "label": a.label, "text": a.text, "threads": a.threads,
                      "max_rss_kib": int(rss), "user_s": float(user), "sys_s": float(sys_s),
                      "elapsed_s": float(elapsed)}))


# ---- report ------------------------------------------------------------------------------------

def _ratio(o, r):
    if o is None or r is None or r == 0:
        return "TBD"
    return f"{o / r:.2f}"


def _f(x, nd=1):
    return "TBD" if x is None else f"{x:.{nd}f}"


def report(a):
    rows = []
    with open(a.file) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    texts = []
    for r in rows:
        if r.get("text") and r["text"] not in texts:
            texts.append(r["text"])
    threads = sorted({r["threads"] for r in rows if "threads" in r})

    def find(kind, label, text, threads, way=None):
        hits = [r for r in rows
                if r.get("kind") == kind and r.get("label") == label and r.get("text") == text
                and r.get("threads") == threads and (way is None or r.get("way") == way)]
        if len(hits) <= 1 or kind != "rtf":
            return hits[0] if hits else None
        # Several rounds of the same measurement: pool them.
        m = dict(hits[0])
        m["total_ms"] = statistics.median(h["total_ms"] for h in hits)
        m["total_ms_min"] = min(h["total_ms_min"] for h in hits)
        m["first_audio_ms"] = statistics.median(h["first_audio_ms"] for h in hits)
        m["g2p_ms"] = statistics.median(h["g2p_ms"] for h in hits)
        if all("cpu_ms" in h for h in hits):
            m["cpu_ms"] = statistics.median(h["cpu_ms"] for h in hits)
        m["x_realtime"] = m["audio_s"] / m["total_ms"] * 1e3
        m["repeat"] = sum(h["repeat"] for h in hits)
        m["max_rss_kib"] = max(h["max_rss_kib"] for h in hits)
        return m

    out = []
    p = out.append
    p("### Real-time factor (in process, from text: G2P + network + DSP)\n")
    p("Wall time to synthesise each text once (median of the runs), after one warm-up. ours streamed = "
      "each sentence in frame chunks as the server sends it; ours whole = each sentence decoded at once, "
      "as the Python package does. CPU ms = the process's user + system time over the same span "
      "(all threads; less sensitive to other load than wall time). x realtime = audio seconds / wall "
      "seconds (higher is better); the ratios are ours' wall time / the reference's on every row (below 1 = ours faster).\n")
    p("| text | threads | audio s | metric | ours streamed | ours whole | reference "
      "| streamed/reference | whole/reference |")
    p("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for t in threads:
        for text in texts:
            ref = find("rtf", "reference", text, t)
            os_ = find("rtf", "ours", text, t, "streamed")
            ow = find("rtf", "ours", text, t, "whole")
            if not (ref or os_):
                continue
            any_ = ref or os_
            g = lambda r, k: r.get(k) if r else None  # noqa: E731
            for k, name, nd in (("total_ms", "wall ms, median", 1), ("total_ms_min", "wall ms, min", 1),
                                ("cpu_ms", "CPU ms (user+sys), median", 1),
                                ("x_realtime", "x realtime (median)", 1)):
                inv = k == "x_realtime"
                rs = lambda o: _ratio(g(ref, k), g(o, k)) if inv else _ratio(g(o, k), g(ref, k))  # noqa: E731
                p(f"| {text} ({any_['sentences']} sent.) | {t} | {any_['audio_s']:.2f} | {name} | "
                  f"{_f(g(os_, k), nd)} | {_f(g(ow, k), nd)} | {_f(g(ref, k), nd)} | {rs(os_)} | {rs(ow)} |")
    p("")

    says = [r for r in rows if r.get("kind") == "say"]
    mems = [r for r in rows if r.get("kind") == "mem"]
    if says or mems:
        p("### Whole process: `say` text to a WAV file\n")
        p("Wall time of the whole process (start-up, model load, synthesis, WAV write), and one run under "
          "`/usr/bin/time` for peak memory and CPU time.\n")
        p("| text | threads | metric | ours | reference | ours/reference |")
        p("|---|---:|---|---:|---:|---:|")
        for t in threads:
            for text in texts:
                o, r = find("say", "ours", text, t), find("say", "reference", text, t)
                if o or r:
                    for k, name in (("median_ms", "wall ms, median"), ("min_ms", "wall ms, min")):
                        ov, rv = (o or {}).get(k), (r or {}).get(k)
                        p(f"| {text} | {t} | {name} | {_f(ov)} | {_f(rv)} | {_ratio(ov, rv)} |")
                o, r = find("mem", "ours", text, t), find("mem", "reference", text, t)
                if o or r:
                    ov, rv = (o or {}).get("max_rss_kib"), (r or {}).get("max_rss_kib")
                    p(f"| {text} | {t} | max RSS MiB | {_f(ov and ov / 1024)} | {_f(rv and rv / 1024)} "
                      f"| {_ratio(ov, rv)} |")
                    cpu = lambda x: x and x["user_s"] + x["sys_s"]  # noqa: E731
                    p(f"| {text} | {t} | CPU s (user+sys) | {_f(cpu(o), 2)} | {_f(cpu(r), 2)} "
                      f"| {_ratio(cpu(o), cpu(r))} |")
        p("")

    p("### Time to first audio\n")
    p("ours server = over the WebSocket, from writing `input.done` to the first binary audio frame "
      "(`loadgen run -c 1`, pcm streamed, p50 / p99 over the utterances); ours in process and the "
      "reference = from the call to the first audio of the first sentence (the reference's "
      "`Hibari.stream`, which yields one array per sentence; it phonemises the whole text first).\n")
    p("| text | threads | ours server p50 ms | ours server p99 ms | utterances | ours in process ms "
      "| reference ms | ours server p50/reference | ours in process/reference |")
    p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in threads:
        for text in texts:
            srv = next((r for r in rows if r.get("kind") == "run" and r.get("label") == f"ours:{text}:{t}"), None)
            os_ = find("rtf", "ours", text, t, "streamed")
            ref = find("rtf", "reference", text, t)
            if not (srv or ref):
                continue
            measured = any(r.get("kind") == "run" and str(r.get("label", "")).endswith(f":{t}") for r in rows)
            na = lambda v, nd: _f(v, nd) if (v is not None or not measured) else "n/a"  # noqa: E731
            sp50 = srv["ttfa_ms"]["p50"] if srv else None
            sp99 = srv["ttfa_ms"]["p99"] if srv else None
            n = srv["utterances_ok"] if srv else ("n/a" if measured else "TBD")
            ratio = _ratio(sp50, ref and ref["first_audio_ms"]) if srv or not measured else "n/a"
            p(f"| {text} | {t} | {na(sp50, 2)} | {na(sp99, 2)} | {n} | {_f(os_ and os_['first_audio_ms'])} | "
              f"{_f(ref and ref['first_audio_ms'])} | {ratio} | "
              f"{_ratio(os_ and os_['first_audio_ms'], ref and ref['first_audio_ms'])} |")
    p("")

    p("### Peak memory of the long-running processes\n")
    p("| process | threads | max RSS MiB |")
    p("|---|---:|---:|")
    for t in threads:
        for label, name in (("ours", "ours, in process (hibari-rtf, after all texts)"),
                            ("reference", "reference, in process (hibari_ref.py, after all texts)")):
            rs = [r for r in rows if r.get("kind") == "rtf" and r.get("label") == label and r.get("threads") == t]
            if rs:
                p(f"| {name} | {t} | {max(r['max_rss_kib'] for r in rs) / 1024:.1f} |")
        srv = [r for r in rows if r.get("kind") == "run" and str(r.get("label", "")).startswith("ours:")
               and str(r.get("label", "")).endswith(f":{t}")]
        if srv:
            hwm = max(r.get("server_peak_rss_kib") or 0 for r in srv)
            p(f"| ours, server (`serve --engine hibari`, VmHWM after the first-audio runs) | {t} | {hwm / 1024:.1f} |")
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd_name", required=True)
    for name in ("time-cmd", "hyperfine-json", "mem"):
        s = sub.add_parser(name)
        s.add_argument("--label", required=True)
        s.add_argument("--text", required=True)
        s.add_argument("--threads", type=int, required=True)
        if name == "time-cmd":
            s.add_argument("--runs", type=int, default=10)
            s.add_argument("--warmup", type=int, default=2)
        if name == "hyperfine-json":
            s.add_argument("file")
        else:
            s.add_argument("cmd", nargs=argparse.REMAINDER)
    s = sub.add_parser("report")
    s.add_argument("file")
    a = ap.parse_args()
    {"time-cmd": time_cmd, "hyperfine-json": hyperfine_json, "mem": mem, "report": report}[a.cmd_name](a)


if __name__ == "__main__":
    main()
