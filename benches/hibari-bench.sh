#!/usr/bin/env bash
# The hibari voice side by side with hibari's own Python package (hibari-tts 0.2.1 on onnxruntime,
# the reference implementation), on the same texts (benches/texts/) and the same thread count:
#
#   1. real-time factor, in process, from text (G2P + network + DSP): target/release/hibari-rtf
#      (benches/src/bin/hibari_rtf.rs) against benches/hibari_ref.py (Hibari.stream);
#   2. whole-process time of one-shot synthesis to a WAV file: `speechstream say TEXT -o F --threads N`
#      against the package's CLI `hibari TEXT -o F --threads N` (hyperfine, or the median of repeated
#      runs), and peak memory / CPU time of one run under /usr/bin/time;
#   3. time to first audio: ours over the WebSocket (`speechstream serve --engine hibari`, loadgen run
#      -c 1: input.done -> first binary frame) for a one-sentence and a ten-sentence text; the
#      reference's is its streaming API's first sentence (Hibari.stream), taken in step 1;
#   4. peak memory of the long-running processes (our server's VmHWM, both in-process helpers).
#
#   benches/hibari-bench.sh                      # 1 thread, ~3.5 minutes on 2 CPUs
#   THREADS="1 2" REPEAT=5 RUNS=10 benches/hibari-bench.sh
#
# Environment knobs (defaults in brackets):
#   THREADS ["1"]       thread counts to run (onnxruntime intra/inter-op threads for the reference,
#                       libtorch threads for ours; OMP/OPENBLAS/MKL_NUM_THREADS for both)
#   TEXTS ["short medium long"]  files benches/texts/NAME.txt (short = 1 sentence, long = 10)
#   TTFA_TEXTS ["short long"]    texts for the server's time to first audio
#   REPEAT [5]          timed runs per text for the real-time factor (after one warm-up)
#   ROUNDS [2]          rounds of that, reference and ours alternating (the report pools them)
#   RUNS [10]           timed runs per `say` command (after WARMUP [2] untimed ones)
#   UTTERANCES [20]     utterances per first-audio run over the WebSocket
#   PIN [1]             with taskset and >= 2 CPUs and 1 thread: every measured process on CPU 1
#                       (loadgen on CPU 0), so "1 thread" is one CPU for both sides
#   PORT [18950]        our server's port
#   SKIP_OURS / SKIP_REF / SKIP_SAY / SKIP_TTFA [0]   leave a part out
#   SKIP_BUILD [0]      use the binaries already in target/release
#   OURS_SAY_ARGS       extra arguments for `speechstream say` (default "--seed 1 --device cpu")
#   OURS_SERVE_ARGS     full argument list for our server (default below; PORT and THREADS in it)
#   REF_SIMD [native]   avx2: the reference's onnxruntime and numpy as on a CPU without AVX-512 or AVX-VNNI
#                       (benches/cap-reference.sh), beside SPEECHSTREAM_SIMD=avx2 for ours
#                       avxvnni: the same with AVX-VNNI on, beside SPEECHSTREAM_SIMD=avxvnni
#
# Needs scripts/setup-voice.sh done (libtorch and the voice in .cache/); sets up .venv-hibari with
# benches/setup-hibari-python.sh; installs hyperfine with apt-get when missing and possible (else
# times the commands itself). Results: JSON lines in target/bench/hibari-<stamp>.jsonl, the markdown
# report on stdout and in target/bench/hibari-<stamp>.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

THREADS="${THREADS:-1}"
TEXTS="${TEXTS:-short medium long}"
TTFA_TEXTS="${TTFA_TEXTS:-short long}"
REPEAT="${REPEAT:-5}"
ROUNDS="${ROUNDS:-2}"
RUNS="${RUNS:-10}"
WARMUP="${WARMUP:-2}"
UTTERANCES="${UTTERANCES:-20}"
PIN="${PIN:-1}"
PORT="${PORT:-18950}"
SKIP_OURS="${SKIP_OURS:-0}"
SKIP_REF="${SKIP_REF:-0}"
SKIP_SAY="${SKIP_SAY:-0}"
SKIP_TTFA="${SKIP_TTFA:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
OURS_SAY_ARGS="${OURS_SAY_ARGS:---seed 1 --device cpu}"
WS_PATH=/v1/audio/speech/stream

say() { echo "hibari-bench: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

PY="$ROOT/.venv-hibari/bin/python"
UTIL=(python3 "$ROOT/benches/hibari_bench_util.py")
RTF_BIN="$ROOT/target/release/hibari-rtf"
OURS_BIN="$ROOT/target/release/speechstream"
LOADGEN="$ROOT/target/release/loadgen"
for t in $TEXTS $TTFA_TEXTS; do
  [[ -f "$ROOT/benches/texts/$t.txt" ]] || die "no text benches/texts/$t.txt"
done
command -v python3 >/dev/null || die "python3 not found"

# ---- set-up ----------------------------------------------------------------------------------
if [[ "$SKIP_REF" != 1 ]]; then
  "$ROOT/benches/setup-hibari-python.sh" || die "reference venv set-up failed (benches/setup-hibari-python.sh)"
fi
if [[ "$SKIP_OURS" != 1 ]]; then
  [[ -f "${SPEECHSTREAM_CACHE:-$ROOT/.cache}/hibari/hibari.onnx" ]] ||
    die "the voice is not set up: run scripts/setup-voice.sh first"
  if [[ "$SKIP_BUILD" != 1 ]]; then
    say "building hibari-rtf and loadgen (release)"
    cargo build --release --quiet -p speechstream-benches --features hibari --bin hibari-rtf --bin loadgen ||
      die "build of hibari-rtf failed"
    say "building speechstream (release)"
    cargo build --release --quiet -p speechstream --bin speechstream ||
      say "speechstream did not build; its say and serve parts are left out"
  fi
  [[ -x "$RTF_BIN" ]] || die "$RTF_BIN missing (run without SKIP_BUILD=1)"
fi

# Our CLI parts exist only once `say` and the hibari engine are wired in; detect them.
HAVE_SAY=0
HAVE_SERVE=0
if [[ "$SKIP_OURS" != 1 && -x "$OURS_BIN" ]]; then
  "$OURS_BIN" say --help >/dev/null 2>&1 && HAVE_SAY=1
  if "$OURS_BIN" serve --help 2>/dev/null | grep -q hibari &&
    "$OURS_BIN" serve --help 2>/dev/null | grep -q -- --threads; then
    HAVE_SERVE=1
  fi
fi
[[ "$HAVE_SAY" == 1 ]] || say "note: no \`speechstream say\` yet: whole-process rows for ours are left TBD"
[[ "$HAVE_SERVE" == 1 ]] || say "note: no \`speechstream serve --engine hibari --threads\` yet: server first-audio rows are left TBD"

HYPERFINE=""
TIMER="own timer (benches/hibari_bench_util.py time-cmd)"
if [[ "$SKIP_SAY" != 1 ]]; then
  if ! command -v hyperfine >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
    say "installing hyperfine (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null 2>&1; } ||
      say "could not install hyperfine; timing the commands with benches/hibari_bench_util.py"
  fi
  if command -v hyperfine >/dev/null 2>&1; then
    HYPERFINE="$(command -v hyperfine)"
    TIMER="$("$HYPERFINE" --version)"
  fi
fi

# ---- output ------------------------------------------------------------------------------------
OUT_DIR="$ROOT/target/bench"
mkdir -p "$OUT_DIR"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="$OUT_DIR/hibari-$STAMP.jsonl"
REPORT="$OUT_DIR/hibari-$STAMP.md"
WORK="$(mktemp -d)"
: >"$RESULTS"
LOAD_BEFORE="$(uptime)"

trap 'stop_all; rm -rf "$WORK"' EXIT

pin_for() { # THREADS -> the taskset prefix for measured processes
  if [[ "$PIN" == 1 && "$1" == 1 ]] && command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]]; then
    echo "taskset -c 1"
  fi
}
text_of() { cat "$ROOT/benches/texts/$1.txt"; }

# The reference's 1-thread settings: Hibari(threads=N) sets onnxruntime's intra- and inter-op
# threads; these cover numpy/scipy. The same environment is given to ours.
thread_env() { echo "OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 MKL_NUM_THREADS=$1"; }
caps="$("$ROOT/benches/cap-reference.sh" "${REF_SIMD:-native}")" || die "REF_SIMD=${REF_SIMD:-native}: benches/cap-reference.sh failed"
read -r -a REF_ENV <<<"$caps"

for T in $THREADS; do
  read -r -a PINP <<<"$(pin_for "$T")"
  read -r -a TENV <<<"$(thread_env "$T")"
  files=()
  for t in $TEXTS; do files+=("$ROOT/benches/texts/$t.txt"); done

  # ---- 1. real-time factor in process (the two sides alternate) --------------------------------
  for round in $(seq "$ROUNDS"); do
    if [[ "$SKIP_REF" != 1 ]]; then
      say "rtf: reference, $T thread(s), round $round, $REPEAT runs per text"
      env "${TENV[@]}" "${REF_ENV[@]}" "${PINP[@]}" "$PY" "$ROOT/benches/hibari_ref.py" --threads "$T" --repeat "$REPEAT" \
        "${files[@]}" >>"$RESULTS"
    fi
    if [[ "$SKIP_OURS" != 1 ]]; then
      say "rtf: ours, $T thread(s), round $round, $REPEAT runs per text"
      env "${TENV[@]}" "${PINP[@]}" "$RTF_BIN" --threads "$T" --repeat "$REPEAT" "${files[@]}" >>"$RESULTS"
    fi
  done

  # ---- 2. whole process: say ---------------------------------------------------------------------
  if [[ "$SKIP_SAY" != 1 ]]; then
    for t in $TEXTS; do
      text="$(text_of "$t")"
      for side in reference ours; do
        if [[ $side == reference ]]; then
          [[ "$SKIP_REF" == 1 ]] && continue
          cmd=(env "${REF_ENV[@]}" "$ROOT/.venv-hibari/bin/hibari" "$text" -o "$WORK/ref-$t.wav" --threads "$T" --seed 1)
        else
          [[ "$HAVE_SAY" == 1 ]] || continue
          # shellcheck disable=SC2206 # OURS_SAY_ARGS is a word list on purpose
          cmd=("$OURS_BIN" say "$text" -o "$WORK/ours-$t.wav" --threads "$T" $OURS_SAY_ARGS)
        fi
        full=(env "${TENV[@]}" "${PINP[@]}" "${cmd[@]}")
        say "say: $side, $t, $T thread(s), $RUNS runs"
        if [[ -n "$HYPERFINE" ]]; then
          "$HYPERFINE" --style none --shell=bash --warmup "$WARMUP" --runs "$RUNS" \
            --export-json "$WORK/hf.json" "$(printf '%q ' "${full[@]}")" >/dev/null ||
            die "hyperfine failed on: ${cmd[*]:0:2} ..."
          "${UTIL[@]}" hyperfine-json --label "$side" --text "$t" --threads "$T" "$WORK/hf.json" >>"$RESULTS"
        else
          "${UTIL[@]}" time-cmd --label "$side" --text "$t" --threads "$T" --runs "$RUNS" --warmup "$WARMUP" \
            -- "${full[@]}" >>"$RESULTS"
        fi
        "${UTIL[@]}" mem --label "$side" --text "$t" --threads "$T" -- "${full[@]}" >>"$RESULTS"
      done
    done
  fi

  # ---- 3. time to first audio over the WebSocket (ours) -------------------------------------------
  if [[ "$SKIP_TTFA" != 1 && "$HAVE_SERVE" == 1 && -x "$LOADGEN" ]]; then
    # --max-lead: the long text is 49 s of audio; paced to a listener's playback (the default, 10 s
    # of lead) each utterance would last ~40 s. What is measured here is the first audio, which
    # pacing does not touch, so the server computes as fast as it can.
    args="${OURS_SERVE_ARGS:-serve --host 127.0.0.1 --port $PORT --engine hibari --device cpu --threads $T --max-lead 3600}"
    port_free "$PORT" || die "port $PORT is in use (set PORT)"
    # shellcheck disable=SC2086
    if start_server "our server" "$PORT" "$OUT_DIR/hibari-server-$STAMP.log" \
      env "${TENV[@]}" "${PINP[@]}" "$OURS_BIN" $args; then
      lpin=()
      [[ ${#PINP[@]} -gt 0 ]] && lpin=(taskset -c 0)
      for t in $TTFA_TEXTS; do
        say "first audio: ours server, $t, $T thread(s), $UTTERANCES utterances"
        "${lpin[@]}" "$LOADGEN" run -u "ws://127.0.0.1:$PORT$WS_PATH" -l "ours:$t:$T" -m pcm -c 1 \
          -n "$UTTERANCES" -d 120 --text "$(text_of "$t")" --pid "$SERVER_PID" >>"$RESULTS" ||
          say "loadgen on ours ($t) failed"
      done
      stop_server "$SERVER_PID"
    fi
  fi
done

# ---- report ------------------------------------------------------------------------------------
{
  echo "## hibari benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1), $(uname -r)"
  echo "- load: before \`$LOAD_BEFORE\`; after \`$(uptime)\`"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "- reference: $("$PY" -c 'import hibari, onnxruntime, numpy, scipy; print(f"hibari-tts {hibari.__version__}, onnxruntime {onnxruntime.__version__}, numpy {numpy.__version__}, scipy {scipy.__version__}")' 2>/dev/null || echo 'not run')"
  echo "- threads: $THREADS; pinning for 1 thread: $(pin_for 1 || true)${PIN:+ (PIN=$PIN)}; $(thread_env '<threads>')"
  echo "- runs: ROUNDS=$ROUNDS x REPEAT=$REPEAT per text in process, RUNS=$RUNS (+$WARMUP warm-up) per say command ($TIMER), UTTERANCES=$UTTERANCES per first-audio run"
  echo "- command: \`benches/hibari-bench.sh\` (THREADS=\"$THREADS\" TEXTS=\"$TEXTS\")"
  echo "- raw results: target/bench/hibari-$STAMP.jsonl"
  echo
  "${UTIL[@]}" report "$RESULTS"
} | tee "$REPORT"
