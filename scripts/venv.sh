#!/usr/bin/env bash
# Create (or reuse) a Python venv in the repo root holding exactly the pinned packages given.
# Idempotent: a venv whose stamp lists the same pins is left alone. Quiet unless pip fails.
#
#   scripts/venv.sh .venv-NAME 'pkg==1.2' 'other==3.4' ...     (PYTHON=... to choose python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$1"
shift
VENV="$ROOT/$NAME"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.speechstream-pins"
WANT="$(printf '%s\n' "$@")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "venv $NAME: '$PYTHON' not found; install Python >= 3.10 or set PYTHON=" >&2
  exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    echo "venv $NAME: '$PYTHON -m venv $VENV' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >"$LOG" 2>&1; then
  echo "venv $NAME: pip install failed for: $*" >&2
  echo "---- pip output ----" >&2
  cat "$LOG" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$STAMP"
