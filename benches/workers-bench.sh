#!/usr/bin/env bash
# Engine workers and admission, with the real voice (benches/texts/short.txt, 4.03 s of audio per
# utterance), streamed PCM over the WebSocket, `loadgen` on the same machine:
#   1. scaling: `serve --workers 1` against the default (one worker per CPU), both with
#      `--admission off` (a closed loop saturates the server), both servers up
#      at once and loaded in turn at each concurrency (closed loop: each connection sends its
#      next utterance when the last one is done): utterances/s, time to first audio.
#   2. overload: connections that listen (`loadgen --playback`: each utterance is played out in
#      real time before the next), at CAPACITY connections with admission off, then at twice
#      that with admission off and on: late chunks (client and server side), refusals; then
#      twice that again with admission on while a neighbour (a busy loop pinned to CPU 1, at
#      nice 10, as a profiler or a fuzzer would be) takes a CPU for NEIGHBOUR_S seconds from a
#      third of the run on.
#   3. closed loop with admission on: CLOSED_CONNS connections, CLOSED_UTTERANCES utterances each
#      of benches/texts/two-sentences.txt, as fast as they are read, against --admission off:
#      refusals, time to first audio, streams admitted with a later first audio (delayed). A
#      refused connection waits the refusal's Retry-After (1 s, loadgen's --refusal-backoff) before
#      its next utterance, as the openai SDK does; the refused try counts as one of its utterances.
# Run it alone on the machine (its figures are timings):
#   benches/workers-bench.sh        # ~3.5 min with the defaults
#
# Knobs: CONNS ["1 4 16 32 64"], DURATION [10] (scaling, s per point), CAPACITY [300],
# OVERLOAD_DURATION [15], RAMP [4] (s over which the listeners start), PORT [28960] (and +1, +2),
# NEIGHBOUR_S [10], CLOSED_CONNS ["16 32 64"], CLOSED_UTTERANCES [6], SKIP_BUILD [0],
# SKIP_SCALING [0], SKIP_OVERLOAD [0], SKIP_NEIGHBOUR [0], SKIP_CLOSED [0].
# Results: target/bench/workers-<stamp>.{jsonl,md}.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
CONNS="${CONNS:-1 4 16 32 64}"
DURATION="${DURATION:-10}"
CAPACITY="${CAPACITY:-300}"
OVERLOAD_DURATION="${OVERLOAD_DURATION:-15}"
RAMP="${RAMP:-4}"
PORT="${PORT:-28960}"
WS=/v1/audio/speech/stream
export LD_LIBRARY_PATH="$ROOT/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "workers-bench: $*" >&2; }
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release --quiet --bin speechstream
  cargo build --release --quiet -p speechstream-benches --bin loadgen
fi
ulimit -n 16384 2>/dev/null || true
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/workers-$STAMP"
mkdir -p target/bench
TEXT="$(cat benches/texts/short.txt)"
start() { # port args... -> pid in $server
  start_server speechstream "$1" "$OUT.server.log" target/release/speechstream serve --port "$1" "${@:2}"
  server=$SERVER_PID
}
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD); nproc $(nproc)"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} | tee "$OUT.md" >&2

if [[ "${SKIP_SCALING:-0}" != 1 ]]; then
  # Throughput, not admission, is measured here: a closed loop saturates the server and would
  # otherwise be refused (its first audio is past due), so both run with --admission off.
  start "$PORT" --workers 1 --admission off; one=$server
  start "$((PORT + 1))" --admission off; all=$server
  for c in $CONNS; do
    for side in workers-1 default; do
      if [[ $side == workers-1 ]]; then port=$PORT pid=$one; else port=$((PORT + 1)) pid=$all; fi
      say "scaling: $side, $c connection(s), ${DURATION}s"
      target/release/loadgen run -u "ws://127.0.0.1:$port$WS" -l "$side" -c "$c" -d "$DURATION" -m pcm \
        --text "$TEXT" --utterance-timeout 60 --pid "$pid" >>"$OUT.jsonl"
    done
  done
  echo "### scaling: default (one worker per CPU) against --workers 1" | tee -a "$OUT.md"
  target/release/loadgen report --ours default --reference workers-1 "$OUT.jsonl" | tee -a "$OUT.md"
  stop_server "$one" "$all"
fi

if [[ "${SKIP_OVERLOAD:-0}" != 1 ]]; then
  echo "### overload: listeners (--playback), admission off and realtime" | tee -a "$OUT.md"
  echo "| admission | conns | utterances/s | audio s/s | TTFA p50 ms | TTFA p99 ms | late chunks (client) | of chunks | lateness p99 ms | underruns (server) | refused | refusal p99 ms | delayed (server) |" | tee -a "$OUT.md"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" | tee -a "$OUT.md"
  runs=("off $CAPACITY" "off $((2 * CAPACITY))" "realtime $((2 * CAPACITY))")
  [[ "${SKIP_NEIGHBOUR:-0}" != 1 ]] && runs+=("realtime $((2 * CAPACITY)) neighbour")
  for run in "${runs[@]}"; do
    set -- $run
    port=$((PORT + 2))
    start "$port" --admission "$1"
    if [[ "${3:-}" == neighbour ]]; then
      # A busy loop on CPU 1 at nice 10 from a third of the run, for NEIGHBOUR_S seconds.
      (sleep "$((RAMP + OVERLOAD_DURATION / 3))"; exec nice -n 10 taskset -c 1 timeout "${NEIGHBOUR_S:-10}" sh -c 'while :; do :; done') &
      track_pid "$!"
    fi
    say "overload: admission $1, $2 listeners, ${OVERLOAD_DURATION}s ${3:-}"
    line="$(target/release/loadgen run -u "ws://127.0.0.1:$port$WS" -l "admission-$1" -c "$2" \
      -d "$OVERLOAD_DURATION" -m pcm --playback --ramp "$RAMP" --text "$TEXT" --utterance-timeout 60 \
      --pid "$server")"
    echo "$line" >>"$OUT.overload.jsonl"
    under="$(metric "$port" speechstream_stream_underruns_total)"
    delayed="$(metric "$port" speechstream_admission_delayed_total)"
    echo "$line" | python3 -c "
import json, sys
r = json.load(sys.stdin)
g = lambda *p: (lambda v: '-' if v is None else v)(__import__('functools').reduce(lambda a, k: (a or {}).get(k), p, r))
print(f\"| $1${3:+ + neighbour} | $2 | {g('utterances_per_s')} | {g('audio_seconds_per_s')} | {g('ttfa_ms','p50')} | {g('ttfa_ms','p99')} | {g('late_chunks')} | {g('chunks')} | {g('lateness_ms','p99')} | $under | {g('refused')} | {g('refusal_ms','p99')} | $delayed |\")
" | tee -a "$OUT.md"
    stop_server "$server"
  done
fi
if [[ "${SKIP_CLOSED:-0}" != 1 ]]; then
  # Clients that read as fast as audio comes: admission must refuse none of what --admission off
  # serves within the first-audio target.
  echo "### closed loop: ${CLOSED_UTTERANCES:-6} utterances per connection, two sentences each" | tee -a "$OUT.md"
  echo "| admission | conns | utterances | refused | TTFA p50 ms | TTFA p99 ms | utterances/s | delayed (server) |" | tee -a "$OUT.md"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|" | tee -a "$OUT.md"
  CLOSED_TEXT="$(cat benches/texts/two-sentences.txt)"
  for c in ${CLOSED_CONNS:-16 32 64}; do
    for mode in off realtime; do
      port=$((PORT + 2))
      start "$port" --admission "$mode"
      n=$((c * ${CLOSED_UTTERANCES:-6}))
      say "closed loop: admission $mode, $c connections, $n utterances"
      line="$(target/release/loadgen run -u "ws://127.0.0.1:$port$WS" -l "closed-$mode" -c "$c" -n "$n" -d 600 -m pcm \
        --text "$CLOSED_TEXT" --utterance-timeout 60 --pid "$server")"
      echo "$line" >>"$OUT.closed.jsonl"
      delayed="$(metric "$port" speechstream_admission_delayed_total)"
      echo "$line" | python3 -c "
import json, sys
r = json.load(sys.stdin)
g = lambda *p: (lambda v: '-' if v is None else v)(__import__('functools').reduce(lambda a, k: (a or {}).get(k), p, r))
print(f\"| $mode | $c | {g('utterances_ok')} | {g('refused')} | {g('ttfa_ms','p50')} | {g('ttfa_ms','p99')} | {g('utterances_per_s')} | $delayed |\")
" | tee -a "$OUT.md"
      stop_server "$server"
    done
  done
fi
say "results: $OUT.md, $OUT.jsonl, $OUT.overload.jsonl, $OUT.closed.jsonl"
