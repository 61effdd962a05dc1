#!/usr/bin/env bash
# Would CI pass on another CPU class? Runs the suite's numeric tests (those whose figures come from
# the voices' floating-point arithmetic: agreement with onnxruntime, word timestamps against the
# aligner, what Whisper and PocketSphinx hear) once under each CPU code path this machine can
# emulate, and prints each run's verdict and the figures the tests report. Run it before stopping
# after any change to the numerics (docs/engines.md, "The same tests on every CPU").
#
#   scripts/cpu-paths.sh                 # the engine's numeric tests, every path (~20 min on 2 vCPUs)
#   scripts/cpu-paths.sh --full          # and the server's recogniser tests (~55 min)
#   scripts/cpu-paths.sh avx2 native     # only these paths
#
# The paths (the environment each run gets):
#   native        nothing set: what this CPU picks
#   mkl-compatible  MKL_CBWR=COMPATIBLE: MKL's SSE2 branch, another summation order in every MKL
#                 call (sgemm, its vector math). MKL picks its branch by vendor as well as by
#                 instructions: an Intel Xeon runs its AVX-512 branch, an AMD EPYC its AVX2 one
#                 even with AVX-512, and refuses another vendor's branch (MKL_CBWR=AVX512 on an
#                 EPYC is the AVX2 branch again). This path stands in for the branch we cannot reach
#   mkl-avx2      MKL_ENABLE_INSTRUCTIONS=AVX2: on an Intel CPU, the branch an AMD one takes (on an
#                 AMD CPU the same as native)
#   avx2          the AVX2-only class (Zen 1-3, Haswell to Comet Lake): SPEECHSTREAM_SIMD=avx2
#                 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
#   avxvnni       Alder Lake's class: the same with SPEECHSTREAM_SIMD=avxvnni, ONEDNN_MAX_CPU_ISA=AVX2_VNNI
#   scalar-aten   ATEN_CPU_CAPABILITY=default: libtorch's unvectorised kernels, a larger change to
#                 every float operation than any real CPU class makes (a stress path; not in the
#                 default set, name it to run it)
#
# Logs: target/cpu-paths/PATH/TEST.log. Exit status: non-zero when any test failed on any path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The engine's test binaries (`lib`: its unit tests, which hold our kernels to libtorch's);
# CPU_PATHS_TESTS="a b" runs only those. tests/cpu_paths.rs is not among them: it runs every
# path itself, in the suite.
read -r -a ENGINE_TESTS <<<"${CPU_PATHS_TESTS:-kokoro_onnx piper_model hibari_native hibari_int8 g2p hibari_engine word_timestamps lib}"
SERVER_TESTS=(kokoro kokoro_japanese piper hibari_intelligibility normalize_whisper wyoming agents)
DEFAULT_PATHS=(native mkl-compatible mkl-avx2 avx2 avxvnni)

full=0
paths=()
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    native|mkl-compatible|mkl-avx2|avx2|avxvnni|scalar-aten) paths+=("$arg") ;;
    *) echo "cpu-paths: unknown argument $arg (--help lists the paths)" >&2; exit 2 ;;
  esac
done
[ ${#paths[@]} -gt 0 ] || paths=("${DEFAULT_PATHS[@]}")

# The switches the paths set, cleared before each run sets its own (as tests/cpu_paths.rs does).
UNSET=()
for var in SPEECHSTREAM_SIMD ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS MKL_CBWR ONEDNN_MAX_CPU_ISA; do
  UNSET+=(-u "$var")
done

path_env() {
  case "$1" in
    native) echo "" ;;
    mkl-compatible) echo "MKL_CBWR=COMPATIBLE" ;;
    mkl-avx2) echo "MKL_ENABLE_INSTRUCTIONS=AVX2" ;;
    avx2) echo "SPEECHSTREAM_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" ;;
    avxvnni) echo "SPEECHSTREAM_SIMD=avxvnni ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2_VNNI" ;;
    scalar-aten) echo "ATEN_CPU_CAPABILITY=default" ;;
  esac
}

echo "cpu-paths: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; paths: ${paths[*]}"
# Build once (the set-up's packages, venvs and weights must be there: scripts/setup.sh).
cargo test -p speechstream-engine-libtorch --no-run --quiet 2>&1 | grep -v '^ *Executable' || true
if [ "$full" = 1 ]; then
  cargo build --release --quiet
  cargo test -p speechstream --no-run --quiet 2>&1 | grep -v '^ *Executable' || true
fi

# The figures worth a glance in a log: the lines the tests print about what they measured.
FIGURES='dB|p90|mean \|Δ\||heard|CER|max abs|onnxruntime|words:|against native|[0-9]+/[0-9]+:|together'
failed=()
for path in "${paths[@]}"; do
  dir="target/cpu-paths/$path"
  rm -rf "$dir"
  mkdir -p "$dir"
  read -r -a vars <<<"$(path_env "$path")"
  echo "== $path: ${vars[*]:-(nothing set)}"
  runs=()
  for t in "${ENGINE_TESTS[@]}"; do runs+=("speechstream-engine-libtorch $t"); done
  if [ "$full" = 1 ]; then
    for t in "${SERVER_TESTS[@]}"; do runs+=("speechstream $t"); done
  fi
  for run in "${runs[@]}"; do
    read -r pkg name <<<"$run"
    if [ "$name" = lib ]; then selector=(--lib); else selector=(--test "$name"); fi
    start=$(date +%s)
    # Our kernels' every-level check (Kokoro's runs the network at the portable level, minutes)
    # gives the same on every path: once, on the first.
    skip=()
    [ "$path" = "${paths[0]}" ] || skip=(--skip every_cpu_level_gives_the_baseline_bits)
    # Each path's switches and no others (one set in this shell would bend `native` too).
    if env "${UNSET[@]}" "${vars[@]}" cargo test -p "$pkg" "${selector[@]}" --quiet -- --nocapture --test-threads 1 "${skip[@]}" \
        >"$dir/$name.log" 2>&1; then
      verdict=ok
    else
      verdict=FAILED
      failed+=("$path/$name")
    fi
    printf '  %-24s %-6s %4ss\n' "$name" "$verdict" "$(( $(date +%s) - start ))"
    grep -E "$FIGURES" "$dir/$name.log" | grep -v '^test ' | sed 's/^/      /' | head -40 || true
  done
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "cpu-paths: FAILED on ${failed[*]} (logs in target/cpu-paths/)"
  exit 1
fi
echo "cpu-paths: every numeric test passed on every path (${paths[*]})"
