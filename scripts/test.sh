#!/usr/bin/env bash
# Run the whole test suite: unit, property, integration (real sockets on loopback),
# encoder checks against ffmpeg/sox, and differential tests against the reference server.
# Runs the (idempotent) set-up first, so a missing set-up step fails here too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
exec cargo test --workspace --quiet "$@"
