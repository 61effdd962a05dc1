#!/usr/bin/env bash
# The servers with the real voice, side by side: `speechstream serve` (hibari, default flags but
# --threads 1) against the reference handler over hibari's own Python package
# (shared/reference/reference_server.py --engine hibari --threads 1: onnxruntime on the voice's
# int8 graph), both started first and pinned to the same single CPU, then loaded in turn by
# `loadgen run` (pinned to the other CPU) with streamed PCM, ours then the reference at each
# concurrency (so the two runs of a row are seconds apart on a host whose speed drifts):
# utterances/s and time to first audio (input.done -> first audio frame), p50/p99.
#
#   benches/voice-server-bench.sh                       # CONNS="1 4 16 32", 20 s each: ~6 min
#   CONNS=16 DURATION=10 benches/voice-server-bench.sh
#   SPEECHSTREAM_SIMD=avx2 benches/voice-server-bench.sh   # our kernels capped to AVX2
#
# Environment knobs (defaults in brackets):
#   CONNS ["1 4 16 32"]  concurrent connections (one utterance in flight on each); a value given
#                        more than once ("16 16 16") is run again, and the report adds each pair's ratio
#   DURATION [20]        seconds per run (no new utterance after it)
#   TEXT_FILE [benches/texts/short.txt]   the text of every utterance (one sentence, 4 s of audio)
#   PIN [1]              servers on CPU 1, loadgen on CPU 0 (needs taskset and >= 2 CPUs)
#   OURS_PORT [18960], REF_PORT [18961]
#   OURS_EXTRA           extra arguments for our server (e.g. "--precision fp32")
#   SKIP_OURS / SKIP_REF / SKIP_BUILD [0]
#   REF_SIMD [native]    avx2: the reference's onnxruntime and numpy as on a CPU without AVX-512 or AVX-VNNI
#                        (benches/cap-reference.sh), beside SPEECHSTREAM_SIMD=avx2 for ours
#                        avxvnni: the same with AVX-VNNI on, beside SPEECHSTREAM_SIMD=avxvnni
#   SPEECHSTREAM_SHARED  path of shared/ (default: ../shared beside the repo)
#
# Needs scripts/setup-voice.sh (libtorch and the voice) and benches/setup-hibari-python.sh (run
# here when .venv-hibari is missing); the reference's web stack (fastapi, uvicorn, pinned as in
# scripts/setup-reference.sh) is added to .venv-hibari. Results: JSON lines in
# target/bench/voice-server-<stamp>.jsonl, the markdown report (loadgen report) on stdout and in
# target/bench/voice-server-<stamp>.md. Both servers are stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
SHARED="${SPEECHSTREAM_SHARED:-$ROOT/../shared}"
CONNS="${CONNS:-1 4 16 32}"
DURATION="${DURATION:-20}"
TEXT_FILE="${TEXT_FILE:-benches/texts/short.txt}"
PIN="${PIN:-1}"
OURS_PORT="${OURS_PORT:-18960}"
REF_PORT="${REF_PORT:-18961}"
SKIP_OURS="${SKIP_OURS:-0}"
SKIP_REF="${SKIP_REF:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
WS_PATH=/v1/audio/speech/stream

say() { echo "voice-server-bench: $*" >&2; }

pin_server=() pin_load=()
if [[ "$PIN" == 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
  pin_server=(taskset -c 1) pin_load=(taskset -c 0)
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [[ "$SKIP_BUILD" != 1 ]]; then
  say "building speechstream and loadgen (release)"
  cargo build --release --quiet --bin speechstream
  cargo build --release --quiet -p speechstream-benches --bin loadgen
fi
if [[ "$SKIP_REF" != 1 ]]; then
  [[ -x .venv-hibari/bin/python ]] || benches/setup-hibari-python.sh
  if ! .venv-hibari/bin/python -c "import fastapi, uvicorn, websockets" 2>/dev/null; then
    say "adding the reference's web stack to .venv-hibari"
    .venv-hibari/bin/pip install --quiet --disable-pip-version-check \
      "fastapi==0.165.0" "uvicorn==0.54.0" "pydantic==2.14.4" "websockets==17.4"
  fi
fi

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/voice-server-$STAMP"
mkdir -p target/bench
TEXT="$(cat "$TEXT_FILE")"
run_one() { # label port pid conns
  say "$1: $4 connection(s), ${DURATION}s"
  "${pin_load[@]}" target/release/loadgen run -u "ws://127.0.0.1:$2$WS_PATH" -l "$1" -c "$4" \
    -d "$DURATION" -m pcm --text "$TEXT" --utterance-timeout 60 --pid "$3" >>"$OUT.jsonl"
}

{
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "SPEECHSTREAM_SIMD=${SPEECHSTREAM_SIMD:-(unset)} REF_SIMD=${REF_SIMD:-native} OURS_EXTRA=${OURS_EXTRA:-} text=$TEXT_FILE duration=${DURATION}s pin=${pin_server[*]:-none}"
} | tee "$OUT.md" >&2

ours_pid="" ref_pid=""
if [[ "$SKIP_OURS" != 1 ]]; then
  # shellcheck disable=SC2086
  start_server ours "$OURS_PORT" "$OUT.ours.log" \
    "${pin_server[@]}" target/release/speechstream serve --port "$OURS_PORT" --threads 1 ${OURS_EXTRA:-}
  ours_pid=$SERVER_PID
  grep -E "precision auto|cpu_kernels" "$OUT.ours.log" | sed 's/^/  ours: /' | tee -a "$OUT.md" >&2 || true
fi
if [[ "$SKIP_REF" != 1 ]]; then
  caps="$(benches/cap-reference.sh "${REF_SIMD:-native}")" || exit 1
  read -r -a REF_ENV <<<"$caps"
  start_server reference "$REF_PORT" "$OUT.ref.log" "${pin_server[@]}" env "${REF_ENV[@]}" \
    .venv-hibari/bin/python "$SHARED/reference/reference_server.py" --engine hibari --threads 1 --port "$REF_PORT"
  ref_pid=$SERVER_PID
fi
for c in $CONNS; do
  [[ -z "$ours_pid" ]] || run_one ours "$OURS_PORT" "$ours_pid" "$c"
  [[ -z "$ref_pid" ]] || run_one reference "$REF_PORT" "$ref_pid" "$c"
done
target/release/loadgen report "$OUT.jsonl" | tee -a "$OUT.md"
say "results: $OUT.jsonl, $OUT.md"
