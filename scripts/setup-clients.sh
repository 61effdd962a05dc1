#!/usr/bin/env bash
# .venv-clients: the real client libraries the integration tests drive against our server
# (tests/deploy): the official `openai` package, `websockets` and `wyoming` (Home Assistant's
# Wyoming protocol, its reference implementation). Pinned so a new client release
# can't change what CI checks without a commit saying so.
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-clients "openai==3.57.0" "websockets==17.4" "wyoming==1.10.2"
