#!/usr/bin/env bash
# Side-by-side server benchmark: our server (synthetic engine) against the reference Python
# server (null engine), both on loopback, both answering every utterance with 1.0 s of
# 24 kHz s16le audio in 80 ms chunks with no delay, so that what is measured is transport
# and protocol overhead.
#
#   benches/run-server-bench.sh                 # everything, ~2.5 minutes
#   DURATION=5 CONNS="1 64" MODES=pcm benches/run-server-bench.sh
#
# Environment knobs (defaults in brackets):
#   DURATION [10]        seconds per load run (no new utterance after it)
#   CONNS ["1 64 512"]   concurrent connections per run
#   MODES ["pcm wav"]    pcm = streamed PCM (stream_audio), wav = one WAV frame per utterance
#   IDLE_CONNS [512]     connections for the idle-memory test
#   OURS_PORT [18900], REF_PORT [18901]
#   PIN [1]              with taskset and >= 2 CPUs: servers on CPU 1, loadgen on CPU 0, so
#                        each server gets one core (the reference is single-threaded anyway)
#   LOADGEN_THREADS [1]  loadgen runtime threads
#   SKIP_OURS / SKIP_REF [0]   leave a side out
#   SKIP_BUILD [0]       use the binaries already in target/release
#   OURS_ARGS            full argument list for our server (overrides the default below)
#   SPEECHSTREAM_SHARED  path of shared/ (default: ../shared beside the repo)
#
# Results: JSON lines in target/bench/server-<stamp>.jsonl, the markdown report on stdout
# and in target/bench/server-<stamp>.md. Both servers are killed on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

DURATION="${DURATION:-10}"
CONNS="${CONNS:-1 64 512}"
MODES="${MODES:-pcm wav}"
IDLE_CONNS="${IDLE_CONNS:-512}"
OURS_PORT="${OURS_PORT:-18900}"
REF_PORT="${REF_PORT:-18901}"
PIN="${PIN:-1}"
LOADGEN_THREADS="${LOADGEN_THREADS:-1}"
SKIP_OURS="${SKIP_OURS:-0}"
SKIP_REF="${SKIP_REF:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"

AUDIO_SECONDS="${AUDIO_SECONDS:-1.0}"
CHUNK_MS=80
CHUNK_DELAY_MS=0
WS_PATH=/v1/audio/speech/stream

# Our server's command line. Keep it in step with `speechstream serve --help`: it must
# configure the synthetic engine exactly as the reference's null engine is configured below.
if [[ -z "${OURS_ARGS:-}" ]]; then
  OURS_ARGS="serve --host 127.0.0.1 --port $OURS_PORT --engine synthetic \
--synthetic-audio-seconds $AUDIO_SECONDS --synthetic-chunk-ms $CHUNK_MS \
--synthetic-chunk-delay-ms $CHUNK_DELAY_MS"
fi
REF_ARGS="--port $REF_PORT --audio-seconds $AUDIO_SECONDS --chunk-ms $CHUNK_MS --chunk-delay-ms $CHUNK_DELAY_MS"

say() { echo "run-server-bench: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- descriptors: 512 connections need > 512 fds in the server and the loadgen ---------
want_fds=$((IDLE_CONNS > 512 ? IDLE_CONNS * 2 + 256 : 1280))
if [[ "$(ulimit -n)" != unlimited && "$(ulimit -n)" -lt $want_fds ]]; then
  ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  if [[ "$(ulimit -n)" != unlimited && "$(ulimit -n)" -lt $want_fds ]]; then
    say "warning: open-file limit is $(ulimit -n) (want $want_fds); 512 connections may fail."
    say "         raise the hard limit (e.g. /etc/security/limits.conf) or run as root."
  fi
fi

# ---- pinning -------------------------------------------------------------------------
SERVER_PIN=()
LOADGEN_PIN=()
if [[ "$PIN" == 1 ]] && command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]]; then
  SERVER_PIN=(taskset -c 1)
  LOADGEN_PIN=(taskset -c 0)
fi

# ---- build ---------------------------------------------------------------------------
LOADGEN="$ROOT/target/release/loadgen"
OURS_BIN="$ROOT/target/release/speechstream"
if [[ "$SKIP_BUILD" != 1 ]]; then
  say "building loadgen (release)"
  cargo build --release --quiet -p speechstream-benches --bin loadgen
  if [[ "$SKIP_OURS" != 1 ]]; then
    say "building speechstream (release)"
    if ! cargo build --release --quiet -p speechstream --bin speechstream; then
      say "our server did not build; continuing with the reference only"
      SKIP_OURS=1
    fi
  fi
fi
[[ -x "$LOADGEN" ]] || die "$LOADGEN missing (run without SKIP_BUILD=1)"
if [[ "$SKIP_OURS" != 1 ]] && ! "$OURS_BIN" serve --help >/dev/null 2>&1; then
  say "our server has no working 'serve' command yet; continuing with the reference only"
  SKIP_OURS=1
fi
if [[ "$SKIP_REF" != 1 ]]; then
  "$ROOT/scripts/setup-reference.sh" || die "reference venv setup failed"
fi

# ---- servers -------------------------------------------------------------------------
OURS_PID=""
REF_PID=""
OUT_DIR="$ROOT/target/bench"
mkdir -p "$OUT_DIR"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="$OUT_DIR/server-$STAMP.jsonl"
REPORT="$OUT_DIR/server-$STAMP.md"
: >"$RESULTS"

if [[ "$SKIP_OURS" != 1 ]]; then
  port_free "$OURS_PORT" || die "port $OURS_PORT is in use (set OURS_PORT)"
  # shellcheck disable=SC2086 # OURS_ARGS is a word list on purpose
  if start_server ours "$OURS_PORT" "$OUT_DIR/ours-$STAMP.log" "${SERVER_PIN[@]}" "$OURS_BIN" $OURS_ARGS; then
    OURS_PID=$SERVER_PID
  else
    say "continuing with the reference only"
    SKIP_OURS=1
  fi
fi
if [[ "$SKIP_REF" != 1 ]]; then
  port_free "$REF_PORT" || die "port $REF_PORT is in use (set REF_PORT)"
  # run-reference.sh execs python, so SERVER_PID is the server's own pid (for /proc readings).
  # shellcheck disable=SC2086
  start_server reference "$REF_PORT" "$OUT_DIR/reference-$STAMP.log" \
    "${SERVER_PIN[@]}" "$ROOT/scripts/run-reference.sh" $REF_ARGS || die "reference did not start"
  REF_PID=$SERVER_PID
fi
[[ -n "$OURS_PID$REF_PID" ]] || die "no server to benchmark"

SIDES=()
[[ -n "$OURS_PID" ]] && SIDES+=(ours)
[[ -n "$REF_PID" ]] && SIDES+=(reference)
side_pid() { if [[ $1 == ours ]]; then echo "$OURS_PID"; else echo "$REF_PID"; fi; }
side_url() {
  if [[ $1 == ours ]]; then echo "ws://127.0.0.1:$OURS_PORT$WS_PATH"; else echo "ws://127.0.0.1:$REF_PORT$WS_PATH"; fi
}

loadgen() { "${LOADGEN_PIN[@]}" "$LOADGEN" "$@" --threads "$LOADGEN_THREADS"; }

# ---- idle memory first: on freshly started servers, before any load has grown their heaps
for side in "${SIDES[@]}"; do
  say "idle memory: $side, $IDLE_CONNS connections"
  loadgen idle-mem -u "$(side_url "$side")" -l "$side" -c "$IDLE_CONNS" --pid "$(side_pid "$side")" \
    >>"$RESULTS" || say "idle-mem on $side failed"
  sleep 1
done

# ---- load: the two sides alternate at each step so they see similar background noise -------
for mode in $MODES; do
  for c in $CONNS; do
    for side in "${SIDES[@]}"; do
      say "load: $side, $mode, $c connections, ${DURATION}s"
      loadgen run -u "$(side_url "$side")" -l "$side" -m "$mode" -c "$c" -d "$DURATION" \
        --pid "$(side_pid "$side")" >>"$RESULTS" || say "run on $side failed"
      sleep 1
    done
  done
done

# ---- report ----------------------------------------------------------------------------
{
  echo "## Server benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "- engine: ${AUDIO_SECONDS}s of 24 kHz s16le per utterance, ${CHUNK_MS} ms chunks, ${CHUNK_DELAY_MS} ms delay"
  echo "- ${DURATION}s per run; pinning: ${SERVER_PIN[*]:-none} (servers), ${LOADGEN_PIN[*]:-none} (loadgen, $LOADGEN_THREADS thread)"
  echo "- command: \`benches/run-server-bench.sh\` (DURATION=$DURATION CONNS=\"$CONNS\" MODES=\"$MODES\" IDLE_CONNS=$IDLE_CONNS)"
  echo "- raw results: target/bench/server-$STAMP.jsonl"
  echo
  "$LOADGEN" report "$RESULTS"
} | tee "$REPORT"
