#!/usr/bin/env bash
# Time to the first byte of a whole (non-streamed) POST /v1/audio/speech reply, by format:
# wav, flac and mp3 come whole (their headers need the length), opus and pcm as they are made.
# Real voice, one request at a time, curl's time_starttransfer and time_total; N runs each.
#   benches/first-byte.sh                 # TEXT=benches/texts/long.txt N=5
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
TEXT="${TEXT:-benches/texts/long.txt}"
N="${N:-5}"
export LD_LIBRARY_PATH="$ROOT/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --quiet --bin speechstream
PORT="${PORT:-18731}"
: >/tmp/first-byte-server.log
start_server speechstream "$PORT" /tmp/first-byte-server.log target/release/speechstream serve --port "$PORT" --admission off
BODY=$(python3 -c 'import json,sys; print(json.dumps({"input": open(sys.argv[1]).read()}))' "$TEXT")
echo "text: $TEXT ($(wc -w <"$TEXT") words); $N runs each; seconds: median first byte / median total"
for format in wav mp3 opus pcm; do
  body=$(python3 -c 'import json,sys; b=json.loads(sys.argv[1]); b["response_format"]=sys.argv[2]; print(json.dumps(b))' "$BODY" "$format")
  times=()
  for _ in $(seq "$N"); do
    times+=("$(curl -s -o /dev/null -w '%{time_starttransfer} %{time_total}' -H 'Content-Type: application/json' \
      -d "$body" "http://127.0.0.1:$PORT/v1/audio/speech")")
  done
  printf '%s\n' "${times[@]}" | python3 -c '
import sys, statistics
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
fmt = sys.argv[1]
print(f"{fmt:5s} first byte {statistics.median(r[0] for r in rows):.3f}  total {statistics.median(r[1] for r in rows):.3f}")' "$format"
done
