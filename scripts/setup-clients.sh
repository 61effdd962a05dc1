#!/usr/bin/env bash
# .venv-clients: the real client libraries the integration tests drive against our server
# (tests/deploy): the official `openai` package and `websockets`. Pinned so a new client release
# can't change what CI checks without a commit saying so.
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-clients "openai==3.57.0" "websockets==17.4"
