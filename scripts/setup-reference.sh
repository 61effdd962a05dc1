#!/usr/bin/env bash
# Create (or reuse) .venv-ref in the repo root with the Python packages the reference server
# (shared/reference/reference_server.py) needs. Idempotent: a venv that already has the pinned
# versions is left alone. Quiet unless something fails.
#
#   scripts/setup-reference.sh            # uses python3 from PATH
#   PYTHON=python3.12 scripts/setup-reference.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-ref"
PYTHON="${PYTHON:-python3}"

# Pinned so reference numbers and error texts (pydantic renders config errors) stay comparable.
PINS=(
  "fastapi==0.165.0"
  "uvicorn==0.54.0"
  "pydantic==2.14.4"
  "websockets==17.4"
)
STAMP="$VENV/.speechstream-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup-reference: '$PYTHON' not found; install Python >= 3.10 or set PYTHON=" >&2
  exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian's python3 lacks ensurepip unless python3-venv is installed.
    echo "setup-reference: '$PYTHON -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >"$LOG" 2>&1; then
  echo "setup-reference: pip install failed for: ${PINS[*]}" >&2
  echo "---- pip output ----" >&2
  cat "$LOG" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$STAMP"
