#!/usr/bin/env bash
# `speechstream say` with a Kokoro voice against kokoro-onnx's way of doing the same job
# (onnxruntime on the same int8 model file, one thread), end to end (issue 32): each side is one
# process, pinned to the same CPU, timed from its start to its WAV on disk: start-up, loading the
# model and the voice, synthesis, writing the file. The text's phonemes are given to
# onnxruntime (our front end's, from the kokoro_phonemes example, cut into the passes the engine
# makes: the first sentence split early, then one per sentence), so its side excludes a front end while `say`
# includes ours (text normalisation and G2P, a few ms a sentence): the comparison leans towards
# onnxruntime by that much. `say` picks its precision as `--precision auto` does (int8 where our
# int8 kernels have VNNI, else fp32); onnxruntime runs the int8 file's graph as it is.
# Run it alone on the machine (its figures are timings):
#   benches/kokoro-say-bench.sh                    # ~1 min with the defaults
#
# Knobs: TEXT [benches/texts/two-sentences.txt's], VOICE [jf_alpha], REPS [3] (runs of each
# side; the median and the best are reported), CPU [0], SKIP_BUILD [0].
# Needs .cache/kokoro (scripts/setup.sh); makes .venv-kokoro as scripts/bench-kokoro.sh does.
# Results: target/bench/kokoro-say-<stamp>.md (and the two WAVs beside it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TEXT="${TEXT:-$(cat benches/texts/two-sentences.txt)}"
VOICE="${VOICE:-jf_alpha}"
REPS="${REPS:-3}"
CPU="${CPU:-0}"
export LD_LIBRARY_PATH="$ROOT/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
scripts/venv.sh .venv-kokoro onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release --quiet --bin speechstream
  cargo build --quiet -p speechstream-engine-libtorch --example kokoro_phonemes
fi
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/kokoro-say-$STAMP"
mkdir -p target/bench
target/debug/examples/kokoro_phonemes "$TEXT" >"$OUT.phonemes"
cat >"$OUT.onnx.py" <<'PY'
import sys, time
t0 = time.perf_counter()
import json, wave
import numpy as np
import onnxruntime as ort
model, voices, vocab, voice, phonemes, out = sys.argv[1:7]
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
pack = np.load(voices)[voice]
vocab = json.load(open(vocab))["vocab"]
t1 = time.perf_counter()
audio = []
for line in open(phonemes, encoding="utf-8").read().splitlines():
    ids = [vocab[c] for c in line if c in vocab][:510]
    if not ids:
        continue
    feed = {"tokens": np.array([[0, *ids, 0]], dtype=np.int64),
            "style": pack[len(ids)].reshape(1, 256).astype(np.float32),
            "speed": np.array([1.0], dtype=np.float32)}
    audio.append(sess.run(None, feed)[0].reshape(-1))
pcm = (np.clip(np.concatenate(audio), -1, 1) * 32767).astype("<i2")
with wave.open(out, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000); w.writeframes(pcm.tobytes())
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {pcm.size / 24000:.3f}", file=sys.stderr)
PY
K=.cache/kokoro
elapsed() { local t=$EPOCHREALTIME; "$@" >/dev/null 2>>"$OUT.log"; echo "$EPOCHREALTIME - $t" | bc; }
ours=() theirs=()
for _ in $(seq 1 "$REPS"); do
  ours+=("$(elapsed taskset -c "$CPU" target/release/speechstream say --voice "$VOICE" --threads 1 \
    -o "$OUT.say.wav" "$TEXT")")
  theirs+=("$(elapsed taskset -c "$CPU" .venv-kokoro/bin/python "$OUT.onnx.py" "$K/kokoro-v1.0.int8.onnx" \
    "$K/voices_ja.npz" "$K/vocab.json" "$VOICE" "$OUT.phonemes" "$OUT.onnx.wav")")
done
seconds() { ffprobe -v error -show_entries format=duration -of csv=p=0 "$1"; }
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {printf "%.2f %.2f", v[int((NR+1)/2)], v[1]}'; }
read -r our_med our_best <<<"$(stats "${ours[@]}")"
read -r their_med their_best <<<"$(stats "${theirs[@]}")"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD); nproc $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "voice $VOICE, both pinned to CPU $CPU, $REPS runs each; text: $TEXT"
  echo "onnxruntime's phonemes (our front end's): $(tr '\n' ' ' <"$OUT.phonemes")"
  echo "onnxruntime's own split, per run (s): start-up and loading, synthesis and WAV, audio: $(grep -E '^[0-9.]+ [0-9.]+ [0-9.]+$' "$OUT.log" | tr '\n' ';')"
  echo
  echo "| end to end, one process, one thread | audio s | wall s, median | best | real-time factor (median) |"
  echo "|---|---:|---:|---:|---:|"
  for side in "speechstream say (front end included)|$OUT.say.wav|$our_med|$our_best" \
    "onnxruntime $(.venv-kokoro/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)') int8 (phonemes given)|$OUT.onnx.wav|$their_med|$their_best"; do
    IFS='|' read -r name wav med best <<<"$side"
    audio="$(seconds "$wav")"
    echo "| $name | $(printf '%.2f' "$audio") | $med | $best | $(echo "scale=3; $med / $audio" | bc) |"
  done
} | tee "$OUT.md"
echo "kokoro-say-bench: results: $OUT.md" >&2
