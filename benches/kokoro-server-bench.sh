#!/usr/bin/env bash
# Kokoro in the server on one core (issue 32): how many listeners `serve --workers 1 --threads 1`,
# pinned to one CPU, streams a Kokoro voice to in real time with 0 late chunks. `loadgen run
# --playback --voice $VOICE` (pinned to another CPU) opens N connections, each sending
# benches/texts/short.txt, playing its audio out in real time from the first byte, then sending
# the next (a listener); a binary frame that arrives after the audio before it ran out is a late
# chunk. N steps through STREAMS, for each admission mode of ADMISSIONS: `off` gives the raw
# capacity (the largest N with 0 late chunks), `realtime` (the server's default) shows whether
# admission refuses what would run late (refusals) or admits it (late chunks); each N of
# MAX_STREAMS adds a run with `--admission realtime --max-streams N` at the largest of STREAMS.
# Run it alone on the machine (its figures are timings):
#   benches/kokoro-server-bench.sh                 # ~5 min with the defaults
#   STREAMS="1 2" DURATION=10 benches/kokoro-server-bench.sh
#   BINS="before=target/bench/speechstream-old now=target/release/speechstream" SKIP_BUILD=1 \
#     benches/kokoro-server-bench.sh              # builds side by side, point by point
#
# Knobs: VOICE [jf_alpha], TEXT_FILE [benches/texts/short.txt] (what each listener asks
# for), STREAMS ["1 2 3 4"], ADMISSIONS ["off realtime"], MAX_STREAMS [""],
# DURATION [20] (s per run: no utterance starts after it), RAMP [2] (s over which the listeners
# start), CPU [0] (the server's), LOADGEN_CPU [1], PORT [28970], SKIP_BUILD [0], BINS
# ["ours=target/release/speechstream"]: LABEL=PATH of each build, run one after the other at
# each point. The server inherits the environment (SPEECHSTREAM_SIMD=avx2
# ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 caps it to AVX2).
# Needs .cache/kokoro (scripts/setup.sh). Results: target/bench/kokoro-server-<stamp>.{md,jsonl}.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
VOICE="${VOICE:-jf_alpha}"
STREAMS="${STREAMS:-1 2 3 4}"
ADMISSIONS="${ADMISSIONS:-off realtime}"
DURATION="${DURATION:-20}"
RAMP="${RAMP:-2}"
CPU="${CPU:-0}"
LOADGEN_CPU="${LOADGEN_CPU:-1}"
PORT="${PORT:-28970}"
BINS="${BINS:-ours=target/release/speechstream}"
WS=/v1/audio/speech/stream
export LD_LIBRARY_PATH="$ROOT/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "kokoro-server-bench: $*" >&2; }
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release --quiet --bin speechstream
  cargo build --release --quiet -p speechstream-benches --bin loadgen
fi
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/kokoro-server-$STAMP"
mkdir -p target/bench
TEXT="$(cat "${TEXT_FILE:-benches/texts/short.txt}")"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD); nproc $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "server: serve --workers 1 --threads 1 on CPU $CPU; voice $VOICE; text: $TEXT"
  echo
  echo "builds: $BINS"
  echo
  echo "| build | admission | listeners | utterances | audio s/s | TTFA p50 ms | TTFA p99 ms | late chunks | of chunks | lateness p99 ms | underruns (server) | refused |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT.md" >&2
run() { # build=path label n server-args...
  local build=${1%%=*} bin=${1#*=} label=$2 n=$3
  start_server speechstream "$PORT" "$OUT.server.log" \
    taskset -c "$CPU" "$bin" serve --port "$PORT" --workers 1 --threads 1 "${@:4}"
  say "$build, $label, $n listener(s), ${DURATION}s"
  line="$(taskset -c "$LOADGEN_CPU" target/release/loadgen run -u "ws://127.0.0.1:$PORT$WS" -l "$label" -c "$n" \
    -d "$DURATION" -m pcm --playback --ramp "$RAMP" --voice "$VOICE" --text "$TEXT" --utterance-timeout 60 \
    --pid "$SERVER_PID")"
  echo "$line" >>"$OUT.jsonl"
  under="$(metric "$PORT" speechstream_stream_underruns_total)"
  echo "$line" | python3 -c "
import json, sys
r = json.load(sys.stdin)
g = lambda *p: (lambda v: '-' if v is None else v)(__import__('functools').reduce(lambda a, k: (a or {}).get(k), p, r))
print(f\"| $build | $label | $n | {g('utterances_ok')} | {g('audio_seconds_per_s')} | {g('ttfa_ms','p50')} | {g('ttfa_ms','p99')} | {g('late_chunks')} | {g('chunks')} | {g('lateness_ms','p99')} | ${under:--} | {g('refused')} |\")
" | tee -a "$OUT.md"
  stop_server "$SERVER_PID"
}
for admission in $ADMISSIONS; do
  for n in $STREAMS; do
    for bin in $BINS; do
      run "$bin" "$admission" "$n" --admission "$admission"
    done
  done
done
largest="${STREAMS##* }"
for m in ${MAX_STREAMS:-}; do
  for bin in $BINS; do
    run "$bin" "realtime, --max-streams $m" "$largest" --admission realtime --max-streams "$m"
  done
done
say "results: $OUT.md, $OUT.jsonl"
