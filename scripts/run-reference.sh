#!/usr/bin/env bash
# Run the reference Python server (shared/reference/reference_server.py) from .venv-ref.
#
#   scripts/run-reference.sh --port 8901 [--audio-seconds 1.0 --chunk-ms 80 --chunk-delay-ms 0 ...]
#
# The shared folder is looked for at ../shared beside the repo root (as CI lays it out);
# set SPEECHSTREAM_SHARED=/path/to/shared to use another. Sets up .venv-ref first if needed.
# The server runs in the foreground (exec), so its pid is this script's pid.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED="${SPEECHSTREAM_SHARED:-$ROOT/../shared}"
SERVER="$SHARED/reference/reference_server.py"

if [[ ! -f "$SERVER" ]]; then
  echo "run-reference: $SERVER not found." >&2
  echo "  The shared folder is expected beside the repo (../shared); set SPEECHSTREAM_SHARED to its path." >&2
  exit 1
fi

"$ROOT/scripts/setup-reference.sh"
exec "$ROOT/.venv-ref/bin/python" "$SERVER" "$@"
