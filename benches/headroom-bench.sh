#!/usr/bin/env bash
# What a balancer reads (issue 53): `speechstream_capacity_usage` and the agent-check port of a
# hibari server on one worker and one thread, idle and under paced listeners (`loadgen --playback`),
# read every 50 ms as HAProxy's `agent-inter 50ms` would: the reads' cost (agent and /metrics round
# trips) and the usage at each load, with the refusals admission made.
#
#   benches/headroom-bench.sh            # LISTENERS="60 120 240" SECONDS_PER_POINT=12
# Needs scripts/setup.sh (release builds of speechstream and loadgen are made here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benches/lib.sh
LISTENERS="${LISTENERS:-60 120 240}"
SECONDS_PER_POINT="${SECONDS_PER_POINT:-12}"
HTTP_PORT="${HTTP_PORT:-18300}"
AGENT_PORT="${AGENT_PORT:-18301}"
export LD_LIBRARY_PATH="$PWD/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cargo build --release --quiet --bin speechstream
  cargo build --release --quiet -p speechstream-benches --bin loadgen
fi
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "date: $(date -u '+%Y-%m-%d %H:%M') UTC; commit $(git rev-parse --short HEAD)"
start_server ours "$HTTP_PORT" target/bench-headroom.log target/release/speechstream serve \
  --port "$HTTP_PORT" --agent-port "$AGENT_PORT" --no-kokoro --no-piper --workers 1 --threads 1
echo "idle: $(python3 benches/headroom_probe.py "$HTTP_PORT" "$AGENT_PORT" 3)"
for n in $LISTENERS; do
  before=$(metric "$HTTP_PORT" speechstream_admission_refusals_total)
  target/release/loadgen run -u "ws://127.0.0.1:$HTTP_PORT/v1/audio/speech/stream" -c "$n" \
    -d "$SECONDS_PER_POINT" --playback --ramp 3 >/dev/null 2>target/bench-headroom-load.txt &
  load=$!
  track_pid "$load"
  sleep 5
  probe=$(python3 benches/headroom_probe.py "$HTTP_PORT" "$AGENT_PORT" $((SECONDS_PER_POINT - 6)))
  wait "$load" || true
  after=$(metric "$HTTP_PORT" speechstream_admission_refusals_total)
  late=$(grep -o 'late chunks [0-9]* of [0-9]*' target/bench-headroom-load.txt || true)
  echo "$n listeners: $probe; refused $((after - before)); $late"
done
