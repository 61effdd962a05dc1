#!/usr/bin/env bash
# Create (or reuse) .venv-asr in the repo root with PocketSphinx, a small offline speech
# recogniser whose wheel ships its US English model: tests/hibari_intelligibility.rs transcribes
# the hibari voice with it to check that it speaks intelligible English. Idempotent.
#
#   scripts/setup-asr.sh            # uses python3 from PATH (PYTHON=... to choose another)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-asr"
PYTHON="${PYTHON:-python3}"
PIN="pocketsphinx==5.1.1"
STAMP="$VENV/.speechstream-pins"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$PIN" ]]; then
  exit 0
fi
command -v "$PYTHON" >/dev/null 2>&1 || { echo "setup-asr: '$PYTHON' not found" >&2; exit 1; }
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV" || { echo "setup-asr: '$PYTHON -m venv' failed (Debian: apt-get install python3-venv)" >&2; rm -rf "$VENV"; exit 1; }
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PIN" ||
  { echo "setup-asr: pip install $PIN failed (is the package index reachable?)" >&2; exit 1; }
echo "$PIN" >"$STAMP"
