#!/usr/bin/env bash
# The references for Piper's tests (engine-libtorch/tests/piper*.rs, text/tests/piper.rs):
# .venv-piper with piper-tts 1.8.0 (GPL-3.0: a test tool only, never part of our binary; its
# espeak-ng build and phonemizer are what our ids are compared with) and onnxruntime with onnx
# (to run the voice's own .onnx file, the reference for our network).
#
#   scripts/setup-piper.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/venv.sh" .venv-piper piper-tts==1.8.0 onnxruntime==1.32.0 onnx==1.23.2
