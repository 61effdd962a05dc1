#!/usr/bin/env bash
# .venv-asr: PocketSphinx, a small offline speech recogniser whose wheel ships its US English
# model: tests/hibari_intelligibility.rs transcribes the hibari voice with it to check that it
# speaks intelligible English.
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-asr "pocketsphinx==5.1.1"
