#!/usr/bin/env bash
# The GPU checks in one command: each network on the device against the CPU (hibari: fp32, within
# 1e-3; Kokoro-82M: fp32 and fp16, the tolerances of benches/src/bin/device_check.rs), then the server on
# the device: hibari under 1, 16, 256 and 1024 concurrent closed-loop streams (audio seconds per
# second, time to first audio p50/p99, late chunks from both sides, refusals), and a Kokoro voice
# under a few counts of real-time listeners (streams per GPU at 0 late chunks, TTFA p50/p99); all
# figures into one file.
#
#   scripts/gpu-check.sh build                  # here: release binaries + the voices, see below
#   scripts/gpu-check.sh run --device cuda      # on the GPU machine: no Rust, no network needed
#   scripts/gpu-check.sh --device cpu           # both, end to end on a CPU-only machine
#
# `run` finds libtorch in the machine's own Python torch (`import torch`; the 2.11 CUDA build, see
# docs/libtorch.md), else in the checkout's .cache/libtorch. The bundle (target/gpu-check,
# ~35 MiB: stripped speechstream, loadgen, device-check, kokoro_rtf, hibari's assets, libopus,
# two Kokoro cases) is what the GPU machine needs besides this script: carry it (`target/` is
# ignored by git). Kokoro's files (~95 MB) do
# not fit beside it in one carry of the device tool (64 MiB with the working tree), so `build`
# cuts them (one tar, .cache/kokoro without the fp32 export) into parts of KOKORO_PART_MIB
# [48] MiB, target/gpu-check-kokoro/part-NN, with their sha256 in the bundle: carry each part in
# its own call, back to back while the machine stays warm (a call's ignored files stay there for
# the next), then the bundle in the call that runs (docs/libtorch.md lists the calls). `run`
# checks the parts against the bundle's sums, unpacks them and adds Kokoro; KOKORO_DIR=DIR on the
# machine names a Kokoro directory instead; without either, Kokoro is left out and the results
# say why.
#
# Knobs: DURATION [15] seconds per load point, CONNS ["1 16 256 1024"; empty: no hibari load],
# WORKERS [server default], PORT [28990], RESULTS [$OUT/gpu-check-<device>.md when $OUT is a
# folder (the device machine's return folder), else target/gpu-check/results-<device>-<stamp>.md]
# (JSON lines beside it, .jsonl); Kokoro: KOKORO_CONNS ["1 8 32 64"] listeners (loadgen
# --playback: each plays its audio out in real time before sending the next; a chunk that comes
# after the audio before it ran out is late), KOKORO_VOICE [jf_alpha], KOKORO_ADMISSION [off: the
# raw capacity], KOKORO_WORKERS [WORKERS; a list runs the server once per count],
# KOKORO_PRECISION ["auto fp16": the server once per precision; auto is fp32 on CUDA, fp16 runs
# its products in float16]. Kokoro's numeric check runs in fp32 and in fp16, each against the
# CPU's fp32, then its in-process speed (kokoro_rtf, fp32 and fp16, a short and a long segment).
# The order: numeric checks, Kokoro in process, hibari's load, Kokoro's load; a server that does
# not start is reported and the rest still runs.
# KOKORO_REPS [5] runs per in-process figure. Stays within 10 minutes with the defaults on a GPU:
# ~1 min of start-up and checks, ~1 min for Kokoro's checks and in-process runs, 4 x (15 s +
# drain) for hibari, 2 x (start-up + 4 x (15 s + 2 s ramp + drain)) for Kokoro.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUNDLE="$ROOT/target/gpu-check"
KPARTS="$ROOT/target/gpu-check-kokoro"
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
  cargo build --release --quiet -p speechstream-engine-libtorch --example kokoro_rtf
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/hibari" "$BUNDLE/cases"
  for b in speechstream loadgen device-check examples/kokoro_rtf; do
    cp "target/release/$b" "$BUNDLE/bin/"
    strip "$BUNDLE/bin/${b##*/}" 2>/dev/null || true
  done
  cp engine-libtorch/fixtures/kokoro/weather.json "$BUNDLE/cases/"
  # A long segment too: weather's ids eight times over (the time per segment, not what it says)
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["ids"] = c["ids"] * 8; json.dump(c, open(sys.argv[2], "w"))' \
    engine-libtorch/fixtures/kokoro/weather.json "$BUNDLE/cases/long.json"
  # libopus (the Opus encoder) is a Debian package here, absent on the GPU machine: it travels
  mkdir -p "$BUNDLE/lib"
  ldd target/release/speechstream | awk '$1 ~ /^libopus/ {print $3}' | xargs -r -I{} cp -L {} "$BUNDLE/lib/"
  cp -L .cache/hibari/* "$BUNDLE/hibari/"
  cp benches/texts/short.txt "$BUNDLE/"
  say "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"
  rm -rf "$KPARTS"
  if [[ -f .cache/kokoro/kokoro-v1.0.int8.onnx ]]; then
    mkdir -p "$KPARTS"
    tar -C .cache -chf - --exclude=kokoro-v1.0.onnx --exclude=.complete kokoro |
      split -b "${KOKORO_PART_MIB:-48}M" -d -a 2 - "$KPARTS/part-"
    (cd "$KPARTS" && sha256sum part-*) >"$BUNDLE/kokoro-parts.sha256"
    say "Kokoro: $(wc -l <"$BUNDLE/kokoro-parts.sha256") part(s) in $KPARTS ($(du -sh "$KPARTS" | cut -f1)): carry each in its own call before the bundle's"
  else
    say "Kokoro: no .cache/kokoro/kokoro-v1.0.int8.onnx (scripts/setup-voice.sh kokoro): the bundle checks hibari only"
  fi
}

# Kokoro's directory for `run`: KOKORO_DIR, else the parts unpacked (once) when all are present
# and match the bundle's sums; else empty, with why in $kokoro_why.
kokoro_dir=""
kokoro_why=""
find_kokoro() {
  if [[ -n "${KOKORO_DIR:-}" ]]; then
    kokoro_dir="$KOKORO_DIR"
    return
  fi
  local sums="$BUNDLE/kokoro-parts.sha256"
  if [[ ! -f "$sums" ]]; then
    kokoro_why="the bundle was built without Kokoro's files"
    return
  fi
  if [[ -f "$KPARTS/kokoro/.unpacked" ]] && cmp -s "$sums" "$KPARTS/kokoro/.unpacked"; then
    kokoro_dir="$KPARTS/kokoro"
    return
  fi
  local bad
  if ! bad="$(cd "$KPARTS" 2>/dev/null && sha256sum -c --quiet "$sums" 2>&1)"; then
    kokoro_why="its parts are missing or differ in $KPARTS (carry each of target/gpu-check-kokoro/part-NN in a call just before this one): ${bad//$'\n'/; }"
    return
  fi
  rm -rf "$KPARTS/kokoro"
  local parts
  mapfile -t parts < <(awk '{print $2}' "$sums")
  (cd "$KPARTS" && cat "${parts[@]}") | tar -C "$KPARTS" -xf -
  cp "$sums" "$KPARTS/kokoro/.unpacked"
  kokoro_dir="$KPARTS/kokoro"
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
  export LD_LIBRARY_PATH="$lib:$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export SPEECHSTREAM_ASSETS="$BUNDLE/hibari"
  ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  local duration="${DURATION:-15}" conns="${CONNS-1 16 256 1024}" port="${PORT:-28990}"
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
  find_kokoro
  {
    echo "# gpu-check, device $DEVICE, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
    command -v nvidia-smi >/dev/null && echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "- libtorch: $lib"
    if [[ -n "$kokoro_dir" ]]; then echo "- Kokoro: $kokoro_dir"; else echo "- Kokoro: left out: $kokoro_why"; fi
    echo
  } >"$out"

  say "numeric check: $DEVICE against the CPU (fp32, 1e-3)"
  local check=ok
  # The engine turns CUDA's TF32 off (NVIDIA_TF32_OVERRIDE=0, docs/libtorch.md): with it on,
  # hibari's audio on an H200 was 0.14 away; to see it, run with NVIDIA_TF32_OVERRIDE=1
  "$BUNDLE/bin/device-check" --device "$DEVICE" --tolerance 1e-3 --assets "$BUNDLE/hibari" >>"$jsonl" || check=FAIL
  python3 - "$jsonl" >>"$out" <<'PY'
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
PY

  local server=""
  trap '[[ -n "$server" ]] && kill "$server" 2>/dev/null || true' EXIT
  start_server() { # log args... -> $server
    local log="$1"
    shift
    say "server: $*"
    "$BUNDLE/bin/speechstream" "$@" 2>"$log" &
    server=$!
    local up=0
    for _ in $(seq 1 1200); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
      kill -0 "$server" 2>/dev/null || break
      sleep 0.1
    done
    if ((!up)); then
      say "the server did not start: $(tail -5 "$log")"
      echo "the server did not start: $(tail -5 "$log")" >>"$out"
      check=FAIL
      kill "$server" 2>/dev/null || true
      server=""
      return 1
    fi
    grep -E "ready|precision" "$log" | sed 's/^/    /' >>"$out" || true
  }
  stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  }
  local text
  text="$(cat "$BUNDLE/short.txt")"
  load_point() { # label loadgen-args... -> one table row
    local label="$1"
    shift
    local line under
    line="$("$BUNDLE/bin/loadgen" run -u "ws://127.0.0.1:$port/v1/audio/speech/stream" -l "$DEVICE" \
      -d "$duration" -m pcm --text "$text" --utterance-timeout 60 --connect-timeout 30 --pid "$server" "$@")" || line='{}'
    echo "$line" >>"$jsonl"
    under="$(curl -s "127.0.0.1:$port/metrics" | awk '$1 == "speechstream_stream_underruns_total" {print $2}')" || under=-
    echo "$line" | python3 -c "
import json, sys
r = json.load(sys.stdin)
def g(*path):
    v = r
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    return '-' if v is None else v
print(f\"| $label | {g('utterances_per_s')} | {g('audio_seconds_per_s')} | {g('ttfa_ms','p50')} | {g('ttfa_ms','p99')} | {g('late_chunks')} | {g('chunks')} | {g('lateness_ms','p99')} | ${under:--} | {g('refused')} | {g('errors')} |\")
" >>"$out"
  }
  local header="| utterances/s | audio s/s | TTFA p50 ms | TTFA p99 ms | late chunks (client) | of chunks | lateness p99 ms | underruns (server, cumulative) | refused | errors |"
  local rule="|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"

  hibari_load() {
    [[ -n "$conns" ]] || return 0
    local args=(serve --port "$port" --device "$DEVICE")
    [[ -n "${WORKERS:-}" ]] && args+=(--workers "$WORKERS")
    start_server "${out%.md}.server.log" "${args[@]}" || return 0
    {
      echo
      echo "## Load: streamed PCM over the WebSocket, closed loop, ${duration} s per point (benches/texts/short.txt, 4.03 s per utterance)"
      echo
      echo "| streams $header"
      echo "$rule"
    } >>"$out"
    for c in $conns; do
      say "load: $c stream(s), ${duration}s"
      load_point "$c" -c "$c"
    done
    stop_server
  }
  if [[ -n "$kokoro_dir" ]]; then
    local voice="${KOKORO_VOICE:-jf_alpha}" admission="${KOKORO_ADMISSION:-off}" workers="${KOKORO_WORKERS:-${WORKERS:-}}"
    for kp in fp32 fp16; do
    say "Kokoro: numeric check, $DEVICE in $kp against the CPU (fp32)"
    echo >>"$out"
    "$BUNDLE/bin/device-check" --device "$DEVICE" --kokoro "$kokoro_dir" --voice "$voice" --precision "$kp" \
      --assets "$BUNDLE/hibari" >>"$jsonl" || check=FAIL
    python3 - "$jsonl" "$kp" >>"$out" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = next((r for r in reversed(rs) if r.get("kind") == "device_check_kokoro" and r.get("precision") == sys.argv[2]), None)
if r is None:
    print("## Kokoro-82M on the device against the CPU\n\nno result (device-check failed: see the log)\n")
    sys.exit()
t = r["tolerance"]
print(f"## Kokoro-82M ({r['voice']}) on {r['device']} in {r['precision']} against the CPU's fp32\n")
print(f"tolerances: durations before rounding {t['durations_raw_frames']:g} frames, F0 and N {t['curves_rel_rms']:g} relative RMS, "
      f"audio {t['spectral_db']:g} dB log-spectral distance (another voice, {r['another_voice']}, must be twice that away): "
      f"**{'pass' if r['pass'] else 'FAIL'}**\n")
print("| sentence | frames | durations ± frames | F0 rel. RMS | N rel. RMS | audio rel. RMS | audio dB | another voice dB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for s in r["sentences"]:
    print(f"| {s['text'][:40]} | {s['frames']} | {s['durations_raw_max_abs']:.2e} | {s['f0_rel_rms']:.2e} | {s['n_rel_rms']:.2e} | "
          f"{s['audio_rel_rms']:.2e} | {s['spectral_db']:.3f} | {s['another_voice_spectral_db']:.2f} |")
print()
PY
    done
    local model="$kokoro_dir/kokoro-v1.0.int8.onnx"
    [[ -f "$kokoro_dir/kokoro-v1.0.onnx" ]] && model="$kokoro_dir/kokoro-v1.0.onnx"
    {
      echo "## Kokoro-82M in process on $DEVICE (one utterance at a time, best of ${KOKORO_REPS:-5}, kokoro_rtf; long: the same ids eight times over)"
      echo
      echo '```'
    } >>"$out"
    for c in weather long; do
      say "Kokoro in process: $c"
      KOKORO_DEVICE="$DEVICE" "$BUNDLE/bin/kokoro_rtf" "$model" "$BUNDLE/cases/$c.json" "${KOKORO_REPS:-5}" fp32,fp16 2>&1 |
        grep -E "native|rror|panic" | sed "s/^/$c: /" >>"$out" || check=FAIL
    done
    echo '```' >>"$out"
  fi
  hibari_load
  if [[ -n "$kokoro_dir" ]]; then
    for kw in ${workers:-default}; do
    for kprec in ${KOKORO_PRECISION:-auto fp16}; do
    args=(serve --port "$port" --device "$DEVICE" --kokoro-dir "$kokoro_dir" --admission "$admission"
      --precision "$kprec")
    [[ "$kw" != default ]] && args+=(--workers "$kw")
    start_server "${out%.md}.kokoro-server-$kprec-$kw.log" "${args[@]}" || continue
    {
      echo
      echo "## Kokoro-82M ($voice, --precision $kprec): real-time listeners (loadgen --playback, 2 s ramp), --admission $admission, --workers $kw, ${duration} s per point"
      echo
      echo "Streams per GPU at 0 late chunks: the most listeners with 0 late chunks (client) and 0 refused."
      echo
      echo "| listeners $header"
      echo "$rule"
    } >>"$out"
    for c in ${KOKORO_CONNS:-1 8 32 64}; do
      say "Kokoro load ($kprec): $c listener(s), ${duration}s"
      load_point "$c" -c "$c" --playback --ramp 2 --voice "$voice"
    done
    stop_server
    done
    done
  fi
  trap - EXIT
  echo >>"$out"
  echo "Numeric checks: $check. Raw: $jsonl" >>"$out"
  cat "$out"
  say "figures: $out"
  [[ "$check" == ok ]]
}

case "$step" in
  build) build ;;
  run) run ;;
  all) build; run ;;
esac
