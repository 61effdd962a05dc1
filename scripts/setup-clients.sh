#!/usr/bin/env bash
# Create (or reuse) .venv-clients in the repo root with the real client libraries the
# integration tests drive against our server (tests/deploy): the official `openai` package and
# `websockets`. Idempotent: a venv that already has the pinned versions is left alone.
#
#   scripts/setup-clients.sh            # uses python3 from PATH
#   PYTHON=python3.12 scripts/setup-clients.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-clients"
PYTHON="${PYTHON:-python3}"

# Pinned so a new client release can't change what CI checks without a commit saying so.
PINS=(
  "openai==3.57.0"
  "websockets==17.4"
)
STAMP="$VENV/.speechstream-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup-clients: '$PYTHON' not found; install Python >= 3.10 or set PYTHON=" >&2
  exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    echo "setup-clients: '$PYTHON -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >"$LOG" 2>&1; then
  echo "setup-clients: pip install failed for: ${PINS[*]}" >&2
  echo "---- pip output ----" >&2
  cat "$LOG" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$STAMP"
