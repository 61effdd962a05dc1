#!/usr/bin/env bash
# .venv-ref: what the reference server (shared/reference/reference_server.py) needs, for the
# differential tests and the side-by-side benchmarks. Pinned so reference numbers and error
# texts (pydantic renders config errors) stay comparable.
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-ref \
  "fastapi==0.165.0" "uvicorn==0.54.0" "pydantic==2.14.4" "websockets==17.4"
