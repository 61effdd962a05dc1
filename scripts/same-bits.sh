#!/usr/bin/env bash
# Same bits before and after: synthesizes a fixed matrix of texts with every packaged voice, at
# every SIMD level of our kernels this CPU has, with one `speechstream` binary, and prints the MD5
# of each output WAV. Run it with the binary from before a change and with the one from after,
# then compare the two listings: a refactor that must not change the audio gives the same lines.
#
#   scripts/same-bits.sh BINARY [OUT_FILE]       # print (and write to OUT_FILE) the listing
#   scripts/same-bits.sh -j 2 BINARY [OUT_FILE]  # the same, two syntheses at a time
#   scripts/same-bits.sh --compare OLD NEW       # report the lines that differ; exit 1 if any
#
#   e.g. cp target/release/speechstream /tmp/speechstream-old   # before the change
#        scripts/same-bits.sh /tmp/speechstream-old /tmp/same-bits-old.txt
#        cargo build --release                                  # after it
#        scripts/same-bits.sh target/release/speechstream /tmp/same-bits-new.txt
#        scripts/same-bits.sh --compare /tmp/same-bits-old.txt /tmp/same-bits-new.txt
#
# Each line is `LEVEL VOICE CASE PRECISION MD5` (MD5 of the whole WAV file, header included;
# FAILED where the binary failed). The matrix:
#   LEVEL      each of our kernels' levels (engine-libtorch/src/cpu.rs) this CPU supports, highest
#              first: avx512vnni, avx512, avxvnni, avx2, baseline, each run as SPEECHSTREAM_SIMD=LEVEL
#              with libtorch, MKL and oneDNN left as they are by default (a level the CPU lacks is
#              skipped with a message on stderr: the engine would run a lower one); then
#              `avx2-full`, scripts/cpu-paths.sh's `avx2` path (the AVX2-only CPU class:
#              SPEECHSTREAM_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
#              ONEDNN_MAX_CPU_ISA=AVX2). Each run clears the other switches (as cpu-paths.sh does),
#              and the level the binary reports (its `cpu_kernels=` log field) must be the one asked for.
#              SAME_BITS_LEVELS="avx2 baseline" runs only those (a quick check; the listing then
#              has only their lines).
#   VOICE      hibari's voices whose model file is in the assets (voices.json; only `heart` is
#              packaged), Kokoro's voices in its directory (.npz bundles, voices-v1.0.bin,
#              voices/*.npy: the five Japanese voices), and one mix of the first and last Kokoro
#              voices (`jf_alpha(2)+jm_kumo`). SAME_BITS_KOKORO_VOICES="a b" names Kokoro's instead.
#   CASE       `en`: the English sentence below in the voice's default language (American for
#              Kokoro's Japanese voices); `en-GB`: the same with --language en-GB (hibari's voices,
#              whose American `heart` reads it as its own accent, and the first Kokoro voice);
#              `ja`: the Japanese sentence (each Japanese voice, j*)
#   PRECISION  int8 and fp32, except int8 alone for `ja` and the mix (`auto` picks by timing, so
#              its result is not reproducible: not run)
# Every synthesis: `say TEXT -o out.wav --voice V --seed 1 --speed 1 --threads 1 --device cpu
# --precision P [--language L]`, assets from $SPEECHSTREAM_CACHE (default: this checkout's .cache;
# SPEECHSTREAM_ASSETS and SPEECHSTREAM_KOKORO are cleared). SAME_BITS_KEEP=DIR keeps the WAVs there
# (LEVEL/VOICE/CASE-PRECISION.wav) to look at a difference.
#
# Time: 22 syntheses a level (110 here); the baseline level is the slow one (Kokoro int8 at
# 20-45 s a sentence without SIMD, the others 1-5 s). Measured on 2 vCPUs of a Zen 4 (AMD EPYC)
# shared with a Rust build (load ~4.5): 14.5 min one at a time, of which baseline 9 min
# (avx512vnni 1, avx512 1.2, avx2 1.5, avx2-full 1.9). -j 2 helps where the CPUs are free.
# Exit status: 0 when every synthesis succeeded (--compare: the two listings are the same), 1 when
# one failed (--compare: a line differs or is in one listing only), 2 on a usage error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

EN_TEXT='On May 3rd, Dr. Smith paid $12.50 for two coffees.'
JA_TEXT='今日は天気が良いので、友達と公園へ散歩に行きました。'

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "same-bits: $*" >&2; exit 2; }

# --compare OLD NEW: the lines whose key (LEVEL VOICE CASE PRECISION) has another hash, or is in
# one listing only.
compare() {
  [ -r "$1" ] || die "cannot read $1"
  [ -r "$2" ] || die "cannot read $2"
  awk '
    FNR == 1 { file++ }
    NF == 0 || $1 ~ /^#/ { next }
    file == 1 { key = $1 " " $2 " " $3 " " $4; a[key] = $5; order[++n] = key; next }
    { key = $1 " " $2 " " $3 " " $4; b[key] = $5; if (!(key in a)) extra[++m] = key }
    END {
      bad = 0
      for (i = 1; i <= n; i++) {
        k = order[i]
        if (!(k in b)) { print "ONLY IN OLD  " k "  " a[k]; bad++ }
        else if (a[k] != b[k] || a[k] == "FAILED") { print "DIFFERS      " k "  " a[k] " -> " b[k]; bad++ }
      }
      for (i = 1; i <= m; i++) { print "ONLY IN NEW  " extra[i] "  " b[extra[i]]; bad++ }
      if (bad) { printf "same-bits: %d of %d lines differ\n", bad, n + m; exit 1 }
      printf "same-bits: same bits, all %d lines\n", n
    }' "$1" "$2"
}

jobs_max=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --compare) [ $# -eq 3 ] || die "usage: $0 --compare OLD_FILE NEW_FILE"; compare "$2" "$3"; exit $? ;;
    -j) [ $# -ge 2 ] || die "-j needs a number"; jobs_max="$2"; shift 2 ;;
    -j*) jobs_max="${1#-j}"; shift ;;
    -*) die "unknown option $1 (--help)" ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || die "-j: not a positive number: $jobs_max"
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || { usage >&2; exit 2; }
BIN="${args[0]}"
OUT="${args[1]:-}"
case "$BIN" in /*) ;; */*) BIN="$PWD/$BIN" ;; *) BIN="$(command -v "$BIN" || echo "$BIN")" ;; esac
[ -x "$BIN" ] || die "not an executable: $BIN"
[ -z "$OUT" ] || : >"$OUT" || die "cannot write $OUT"

CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
CACHE="$(cd "$CACHE" && pwd)" || die "no asset cache at $CACHE"

# --- The voices -----------------------------------------------------------------------------
# hibari's: voices.json's entries whose model file is in the assets.
mapfile -t HIBARI < <(python3 - "$CACHE/hibari" <<'EOF'
import json, os, sys
d = sys.argv[1]
try:
    voices = json.load(open(os.path.join(d, "voices.json")))
except OSError:
    voices = {}
for name, v in voices.items():
    if os.path.isfile(os.path.join(d, v.get("file", ""))):
        print(name)
EOF
)
# Kokoro's: the .npy members of its bundles, and loose .npy files.
if [ -n "${SAME_BITS_KOKORO_VOICES:-}" ]; then
  read -r -a KOKORO <<<"$SAME_BITS_KOKORO_VOICES"
else
  mapfile -t KOKORO < <(
    shopt -s nullglob
    for f in "$CACHE"/kokoro/*.npz "$CACHE"/kokoro/voices/*.npz "$CACHE"/kokoro/voices-v1.0.bin; do
      unzip -Z1 "$f" 2>/dev/null | sed -n 's/\.npy$//p'
    done
    for f in "$CACHE"/kokoro/*.npy "$CACHE"/kokoro/voices/*.npy; do basename "$f" .npy; done
  ) 
  mapfile -t KOKORO < <(printf '%s\n' "${KOKORO[@]}" | sed '/^$/d' | LC_ALL=C sort -u)
fi
[ ${#HIBARI[@]} -gt 0 ] || [ ${#KOKORO[@]} -gt 0 ] || die "no voices under $CACHE"

# The cases: VOICE CASE PRECISION, one a line.
CASES=()
for v in "${HIBARI[@]}"; do
  CASES+=("$v en int8" "$v en fp32" "$v en-GB int8" "$v en-GB fp32")
done
for v in "${KOKORO[@]}"; do
  CASES+=("$v en int8" "$v en fp32")
done
if [ ${#KOKORO[@]} -gt 0 ]; then
  CASES+=("${KOKORO[0]} en-GB int8" "${KOKORO[0]} en-GB fp32")
fi
for v in "${KOKORO[@]}"; do
  [[ "$v" == j* ]] && CASES+=("$v ja int8")
done
if [ ${#KOKORO[@]} -ge 2 ]; then
  CASES+=("${KOKORO[0]}(2)+${KOKORO[-1]} en int8")
fi

# --- The levels -----------------------------------------------------------------------------
FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { local f; for f in "$@"; do [[ "$FLAGS" == *" $f "* ]] || return 1; done; }
supported() {
  case "$1" in
    baseline) return 0 ;;
    avx2) has avx2 fma ;;
    avxvnni) has avx2 fma avx_vnni ;;
    avx512) has avx512f avx512bw avx512dq avx512vl ;;
    avx512vnni) has avx512f avx512bw avx512dq avx512vl avx512_vnni ;;
    avx2-full) has avx2 fma ;;
  esac
}
# LEVEL -> the environment it runs with, and the kernel level the binary must report.
level_env() {
  case "$1" in
    avx2-full) echo "SPEECHSTREAM_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" ;;
    *) echo "SPEECHSTREAM_SIMD=$1" ;;
  esac
}
level_kernels() { [ "$1" = avx2-full ] && echo avx2 || echo "$1"; }

LEVELS=()
ALL_LEVELS=(avx512vnni avx512 avxvnni avx2 baseline avx2-full)
if [ -n "${SAME_BITS_LEVELS:-}" ]; then
  read -r -a ALL_LEVELS <<<"$SAME_BITS_LEVELS"
  for l in "${ALL_LEVELS[@]}"; do
    case "$l" in avx512vnni|avx512|avxvnni|avx2|baseline|avx2-full) ;; *) die "SAME_BITS_LEVELS: unknown level $l" ;; esac
  done
fi
for l in "${ALL_LEVELS[@]}"; do
  if supported "$l"; then LEVELS+=("$l"); else echo "same-bits: skipping $l: this CPU lacks it" >&2; fi
done

[ ${#LEVELS[@]} -gt 0 ] || die "no level to run on this CPU"

UNSET=()
for var in SPEECHSTREAM_SIMD ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS MKL_CBWR ONEDNN_MAX_CPU_ISA \
    SPEECHSTREAM_ASSETS SPEECHSTREAM_KOKORO RUST_LOG; do
  UNSET+=(-u "$var")
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/same-bits.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# One synthesis: writes its listing line to $TMP/IDX.line (and a log to $TMP/IDX.log).
run_case() {
  local idx="$1" level="$2" voice="$3" case="$4" precision="$5"
  local dir="$TMP/$idx" text="$EN_TEXT" lang=() vars want got md5
  mkdir -p "$dir"
  case "$case" in
    en-GB) lang=(--language en-GB) ;;
    ja) text="$JA_TEXT" ;;
  esac
  read -r -a vars <<<"$(level_env "$level")"
  if (cd "$dir" && env "${UNSET[@]}" "${vars[@]}" SPEECHSTREAM_CACHE="$CACHE" \
        "$BIN" say "$text" -o out.wav --voice "$voice" --seed 1 --speed 1 --threads 1 \
        --device cpu --precision "$precision" "${lang[@]}") >"$TMP/$idx.log" 2>&1 \
      && [ -s "$dir/out.wav" ]; then
    md5="$(md5sum "$dir/out.wav" | cut -d' ' -f1)"
    want="$(level_kernels "$level")"
    got="$(sed 's/\x1b\[[0-9;]*m//g' "$TMP/$idx.log" | grep -o 'cpu_kernels=[a-z0-9]*' | head -1 | cut -d= -f2 || true)"
    if [ -z "$got" ]; then
      echo "same-bits: warning: $level $voice $case $precision: the binary did not log cpu_kernels=" >&2
    elif [ "$got" != "$want" ]; then
      echo "same-bits: $level $voice $case $precision ran our kernels at $got, not $want" >&2
      md5=FAILED
    fi
    if [ -n "${SAME_BITS_KEEP:-}" ]; then
      mkdir -p "$SAME_BITS_KEEP/$level/$voice"
      cp "$dir/out.wav" "$SAME_BITS_KEEP/$level/$voice/$case-$precision.wav"
    fi
  else
    md5=FAILED
    { echo "same-bits: $level $voice $case $precision failed:"; tail -5 "$TMP/$idx.log" | sed 's/^/    /'; } >&2
  fi
  rm -rf "$dir"
  echo "$level $voice $case $precision $md5" >"$TMP/$idx.line"
}

echo "same-bits: $BIN; assets $CACHE; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs" >&2
echo "same-bits: levels ${LEVELS[*]}; ${#CASES[@]} cases a level (${#HIBARI[@]} hibari voices: ${HIBARI[*]:-none}; ${#KOKORO[@]} Kokoro voices: ${KOKORO[*]:-none}); -j $jobs_max" >&2
start_all=$(date +%s)
idx=0
failed=0
for level in "${LEVELS[@]}"; do
  start=$(date +%s)
  first=$idx
  for c in "${CASES[@]}"; do
    read -r voice case precision <<<"$c"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    run_case "$idx" "$level" "$voice" "$case" "$precision" &
    idx=$((idx + 1))
  done
  wait
  for ((i = first; i < idx; i++)); do
    line="$(cat "$TMP/$i.line")"
    [[ "$line" != *" FAILED" ]] || failed=$((failed + 1))
    echo "$line"
    [ -z "$OUT" ] || echo "$line" >>"$OUT"
  done
  echo "same-bits: $level done in $(( $(date +%s) - start )) s" >&2
done

# For information: cpu.rs promises our kernels the same bits at every level; the lines on which
# the levels (SPEECHSTREAM_SIMD alone, not avx2-full, whose libtorch kernels differ) disagree.
for ((i = 0; i < idx; i++)); do cat "$TMP/$i.line"; done | awk '
  $1 != "avx2-full" && $5 != "FAILED" { k = $2 " " $3 " " $4; if (!(k in h)) { h[k] = $5; order[++n] = k } else if (h[k] != $5) diff[k] = 1 }
  END { d = 0; for (i = 1; i <= n; i++) if (order[i] in diff) { d++; print "same-bits: note: the levels disagree on " order[i] > "/dev/stderr" }
        if (!d) print "same-bits: every level gave the same bits on every case" > "/dev/stderr" }'

echo "same-bits: $idx syntheses in $(( $(date +%s) - start_all )) s${OUT:+; written to $OUT}" >&2
if [ "$failed" -gt 0 ]; then
  echo "same-bits: $failed syntheses FAILED" >&2
  exit 1
fi
