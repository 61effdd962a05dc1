#!/usr/bin/env bash
# Kokoro's in-process real-time factor on one thread, side by side: onnxruntime (what kokoro-onnx
# runs: one InferenceSession.run on the same model file) and the native engine (int8 and fp32), at
# the CPU's default level and capped to AVX2. Figures go to BENCHMARKS.md. ROUNDS rounds (default
# 3) run the five one after the other, so that a busy host's load falls on all of them alike;
# take each one's best.
# The AVX2 rows set our kernels and libtorch's capped to AVX2 (SPEECHSTREAM_SIMD, ATEN_CPU_CAPABILITY,
# MKL_ENABLE_INSTRUCTIONS, and ONEDNN_MAX_CPU_ISA for the oneDNN inside libtorch, whose JIT
# kernels otherwise use AVX-512 where the CPU has it) beside onnxruntime capped alike (benches/cap-reference.sh): what the
# two run on an AVX2-only CPU.
#
#   [ROUNDS=3] scripts/bench-kokoro.sh [CASE.json] [REPS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CASE="${1:-engine-libtorch/fixtures/kokoro/weather.json}"
REPS="${2:-3}"
ROUNDS="${ROUNDS:-3}"
MODEL=.cache/kokoro/kokoro-v1.0.int8.onnx
scripts/venv.sh .venv-kokoro onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6
# The release profile: what `speechstream serve` and `say` run (the dev profile's overflow and
# bounds checks cost the int8 kernels up to 2x; set PROFILE=dev to measure what the tests run).
PROFILE="${PROFILE:-release}"
cargo build -q --profile "$PROFILE" -p speechstream-engine-libtorch --example kokoro_rtf
BIN="target/$([[ $PROFILE == dev ]] && echo debug || echo "$PROFILE")/examples/kokoro_rtf"
# onnxruntime capped to AVX2 (benches/cap-reference.sh: a copy whose MLAS sees no AVX-512 and no
# AVX-VNNI), to set beside our kernels capped alike: what the two run on an AVX2-only CPU
CAPPED="$(CAP_PY=.venv-kokoro/bin/python benches/cap-reference.sh avx2)"
ORT_PY="$(mktemp)"
trap 'rm -f "$ORT_PY"' EXIT
cat >"$ORT_PY" <<'PY'
import json, sys, time
import numpy as np
import onnxruntime as ort
model, case, reps = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feed = {"tokens": np.array([[0, *case["ids"], 0]], dtype=np.int64),
        "style": np.array(case["style"], dtype=np.float32).reshape(1, 256),
        "speed": np.array([case["speed"]], dtype=np.float32)}
best = float("inf")
for _ in range(reps):
    t = time.perf_counter()
    audio = sess.run(None, feed)[0]
    best = min(best, time.perf_counter() - t)
sec = audio.size / 24000
print(f"onnxruntime {ort.__version__} int8, 1 thread{sys.argv[4]}: {sec:.2f} s of audio in {best:.3f} s (best of {reps}), RTF {best / sec:.3f}, {sec / best:.2f}x real time")
PY
for round in $(seq "$ROUNDS"); do
echo "round $round"
.venv-kokoro/bin/python "$ORT_PY" "$MODEL" "$CASE" "$REPS" ""
"$BIN" "$MODEL" "$CASE" "$REPS"
# shellcheck disable=SC2086 # CAPPED is a list of VAR=VALUE words
env $CAPPED .venv-kokoro/bin/python "$ORT_PY" "$MODEL" "$CASE" "$REPS" " (capped to AVX2)"
SPEECHSTREAM_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 "$BIN" "$MODEL" "$CASE" "$REPS" int8
done
