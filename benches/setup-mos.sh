#!/usr/bin/env bash
# The venv of benches/piper_mos.py: Distill-MOS (distillmos 0.9.1, MIT, Microsoft; 4.1 M parameters,
# its weights inside the wheel), a predictor of speech naturalness/quality ratings (1..5), on CPU.
#
#   .venv-mos/   torch 2.11.0 and torchaudio 2.11.0 (PyPI's Linux wheels: CUDA builds, so pip also
#                brings their CUDA 13 libraries, ~4 GB of the venv's ~4.7 GB, unused here), numpy,
#                and distillmos 0.9.1 + xls-r-sqa 0.1.0 without their declared dependencies
#                (soundfile, librosa, transformers: Distill-MOS's path imports none of them; it
#                needs torch, torchaudio and numpy only).
#
# torch is the version scripts/setup-voice.sh extracts libtorch from; its wheel, and distillmos's,
# are taken from <cache>/wheels when setup-voice.sh left them there (sha256 checked against its
# pins), else from PyPI. Idempotent: a venv whose stamp lists the same pins is left alone.
#
#   benches/setup-mos.sh                       (PYTHON=... to choose python3, >= 3.10)
#   .venv-mos/bin/python benches/piper_mos.py A.wav B.wav ...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
WHEELS="$CACHE/wheels"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv-mos"
STAMP="$VENV/.speechstream-pins"

TORCH_WHEEL="torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl" # as in scripts/setup-voice.sh
TORCH_SHA256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a
DISTILLMOS_WHEEL="distillmos-0.9.1-py3-none-any.whl"
DISTILLMOS_SHA256=f82e5326ed963ddc28a3e079ded4dbb1bd072ad54be5bdc4380290a9bce3536a
PINS=(torch==2.11.0 torchaudio==2.11.0 numpy==2.4.6)
NO_DEPS=(distillmos==0.9.1 xls-r-sqa==0.1.0)
WANT="$(printf '%s\n' "${PINS[@]}" --no-deps "${NO_DEPS[@]}")"

say() { echo "setup-mos: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  say ".venv-mos already set up (skipping)"
  exit 0
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found; install Python >= 3.10 or set PYTHON="
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)"
fi

# cached FILE SHA256 REQUIREMENT: the cached wheel's path when it is there and matches, else REQUIREMENT.
cached() {
  if [[ -f "$WHEELS/$1" && "$(sha256sum "$WHEELS/$1" | cut -d' ' -f1)" == "$2" ]]; then
    echo "$WHEELS/$1"
  else
    echo "$3"
  fi
}
torch="${PINS[0]}"
# The cached wheel is CPython 3.11's; another python takes its own from PyPI.
if "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  torch="$(cached "$TORCH_WHEEL" "$TORCH_SHA256" "${PINS[0]}")"
fi
distillmos="$(cached "$DISTILLMOS_WHEEL" "$DISTILLMOS_SHA256" "${NO_DEPS[0]}")"

pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --progress-bar off)
say "installing torch 2.11.0 and torchaudio 2.11.0 with their dependencies (from ${torch%%==*}; ~4.7 GB installed)"
"${pip[@]}" "$torch" "${PINS[@]:1}" || die "pip install ${PINS[*]} failed (is PyPI reachable?)"
say "installing ${NO_DEPS[*]} without their dependencies"
"${pip[@]}" --no-deps "$distillmos" "${NO_DEPS[@]:1}" || die "pip install --no-deps ${NO_DEPS[*]} failed"
"$VENV/bin/python" -c 'import distillmos' >/dev/null || die "import distillmos failed in .venv-mos"
printf '%s\n' "$WANT" >"$STAMP"
say "done: .venv-mos"
