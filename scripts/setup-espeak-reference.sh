#!/usr/bin/env bash
# The reference for the espeak-ng front end's differential test (text/tests/espeak.rs): .venv-espeak
# with misaki 0.9.4's EspeakG2P (what hexgrad's kokoro KPipeline uses for lang codes e, f, h, i, p),
# phonemizer-fork (its espeak backend) and espeakng-loader (the espeak-ng 1.52 build misaki loads).
# Only the fixtures' regeneration needs it (scripts/espeak-reference.py); the front end itself
# needs Debian's espeak-ng (scripts/apt-packages.txt) and tools/espeak-phonemes (scripts/setup.sh).
#
#   scripts/setup-espeak-reference.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# misaki without extras: its [en] extra pulls spaCy, which EspeakG2P does not use.
"$ROOT/scripts/venv.sh" .venv-espeak misaki==0.9.4 phonemizer-fork==3.3.2 espeakng-loader==0.2.4
