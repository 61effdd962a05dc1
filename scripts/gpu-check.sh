#!/usr/bin/env bash
# The GPU checks in one command: the network on the device against the CPU (fp32, within 1e-3),
# then the server on the device under 1, 16, 256 and 1024 concurrent streams (audio seconds per
# second, time to first audio p50/p99, late chunks from both sides, refusals), all figures into
# one file.
#
#   scripts/gpu-check.sh build                  # here: release binaries + the voice into target/gpu-check
#   scripts/gpu-check.sh run --device cuda      # on the GPU machine: no Rust, no network needed
#   scripts/gpu-check.sh --device cpu           # both, end to end on a CPU-only machine
#
# `run` finds libtorch in the machine's own Python torch (`import torch`; the 2.11 CUDA build, see
# docs/libtorch.md), else in the checkout's .cache/libtorch. The bundle (target/gpu-check,
# ~60 MiB: stripped speechstream, loadgen, device-check and hibari's assets) is what the GPU machine
# needs besides this script: carry it (`target/` is ignored by git).
#
# Knobs: DURATION [15] seconds per load point, CONNS ["1 16 256 1024"], WORKERS [server default],
# PORT [28990], RESULTS [$OUT/gpu-check-<device>.md when $OUT is a folder (the device machine's
# return folder), else target/gpu-check/results-<device>-<stamp>.md] (JSON lines beside it, .jsonl).
# Stays within 10 minutes with the defaults: ~1 min of start-up and checks, 4 x (15 s + drain).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUNDLE="$ROOT/target/gpu-check"
step=all
case "${1:-}" in
  build | run) step="$1"; shift ;;
esac
DEVICE=cuda
while (($#)); do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --device=*) DEVICE="${1#--device=}"; shift ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
say() { echo "gpu-check: $*" >&2; }

build() {
  say "building release binaries"
  cargo build --release --quiet --bin speechstream
  cargo build --release --quiet -p speechstream-benches --bin loadgen
  cargo build --release --quiet -p speechstream-benches --features hibari --bin device-check
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/hibari"
  for b in speechstream loadgen device-check; do
    cp "target/release/$b" "$BUNDLE/bin/"
    strip "$BUNDLE/bin/$b" 2>/dev/null || true
  done
  cp -L .cache/hibari/* "$BUNDLE/hibari/"
  cp benches/texts/short.txt "$BUNDLE/"
  say "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"
}

run() {
  [[ -x "$BUNDLE/bin/speechstream" ]] || { say "no bundle in $BUNDLE: run '$0 build' first"; exit 1; }
  local lib=""
  if lib="$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)" \
    && [[ -e "$lib/libtorch_cpu.so" ]]; then
    say "libtorch from Python's torch: $lib"
  else
    lib="$ROOT/.cache/libtorch/lib"
    say "libtorch from $lib"
  fi
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export SPEECHSTREAM_ASSETS="$BUNDLE/hibari"
  ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  local duration="${DURATION:-15}" conns="${CONNS:-1 16 256 1024}" port="${PORT:-28990}"
  local stamp out
  stamp="$(date -u +%Y%m%dT%H%M%SZ)"
  if [[ -n "${RESULTS:-}" ]]; then
    out="$RESULTS"
  elif [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    out="$OUT/gpu-check-${DEVICE//:/}.md"
  else
    out="$BUNDLE/results-${DEVICE//:/}-$stamp.md"
  fi
  local jsonl="${out%.md}.jsonl"
  : >"$jsonl"
  {
    echo "# gpu-check, device $DEVICE, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
    command -v nvidia-smi >/dev/null && echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "- libtorch: $lib"
    echo
  } >"$out"

  say "numeric check: $DEVICE against the CPU (fp32, 1e-3)"
  local check=ok
  "$BUNDLE/bin/device-check" --device "$DEVICE" --tolerance 1e-3 --assets "$BUNDLE/hibari" >>"$jsonl" || check=FAIL
  python3 - "$jsonl" >>"$out" <<'EOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
print(f"## Network on {r['device']} against the CPU ({r['precision']}, tolerance {r['tolerance']:g})\n")
print(f"worst absolute difference {r['worst']:.3e}: **{'pass' if r['pass'] else 'FAIL'}**\n")
print("| sentence | frames | f0/100 | lh | theta | ln | lr | phi | audio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in r["sentences"]:
    d = s["max_abs_diff"]
    cells = " | ".join(f"{d[k]:.2e}" for k in ["f0", "lh", "theta", "ln", "lr", "phi", "audio"])
    print(f"| {s['text'][:40]} | {s['frames']} | {cells} |")
print()
EOF

  local args=(serve --port "$port" --device "$DEVICE")
  [[ -n "${WORKERS:-}" ]] && args+=(--workers "$WORKERS")
  say "server: ${args[*]}"
  "$BUNDLE/bin/speechstream" "${args[@]}" 2>"${out%.md}.server.log" &
  local server=$!
  trap 'kill "$server" 2>/dev/null || true' EXIT
  local up=0
  for _ in $(seq 1 1200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  ((up)) || { say "the server did not start: $(tail -5 "${out%.md}.server.log")"; exit 1; }
  grep -E "ready|precision" "${out%.md}.server.log" | sed 's/^/    /' >>"$out" || true
  {
    echo
    echo "## Load: streamed PCM over the WebSocket, closed loop, ${duration} s per point (benches/texts/short.txt, 4.03 s per utterance)"
    echo
    echo "| streams | utterances/s | audio s/s | TTFA p50 ms | TTFA p99 ms | late chunks (client) | of chunks | lateness p99 ms | underruns (server, cumulative) | refused | errors |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  } >>"$out"
  local text
  text="$(cat "$BUNDLE/short.txt")"
  for c in $conns; do
    say "load: $c stream(s), ${duration}s"
    local line
    line="$("$BUNDLE/bin/loadgen" run -u "ws://127.0.0.1:$port/v1/audio/speech/stream" -l "$DEVICE" -c "$c" \
      -d "$duration" -m pcm --text "$text" --utterance-timeout 60 --connect-timeout 30 --pid "$server")" || line='{}'
    echo "$line" >>"$jsonl"
    local under
    under="$(curl -s "127.0.0.1:$port/metrics" | awk '$1 == "speechstream_stream_underruns_total" {print $2}')" || under=-
    echo "$line" | python3 -c "
import json, sys
r = json.load(sys.stdin)
def g(*path):
    v = r
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    return '-' if v is None else v
print(f\"| $c | {g('utterances_per_s')} | {g('audio_seconds_per_s')} | {g('ttfa_ms','p50')} | {g('ttfa_ms','p99')} | {g('late_chunks')} | {g('chunks')} | {g('lateness_ms','p99')} | ${under:--} | {g('refused')} | {g('errors')} |\")
" >>"$out"
  done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  trap - EXIT
  echo >>"$out"
  echo "Numeric check: $check. Raw: $jsonl" >>"$out"
  cat "$out"
  say "figures: $out"
  [[ "$check" == ok ]]
}

case "$step" in
  build) build ;;
  run) run ;;
  all) build; run ;;
esac
