#!/usr/bin/env bash
# The reference for the Mandarin front end (text/src/mandarin.rs): .venv-mandarin with misaki 0.9.4's
# zh G2P (the legacy path Kokoro v1.0 uses: cn2an, jieba, pypinyin, pinyin-to-IPA) and the exact
# versions of its dependencies. Used to (re)generate text/tests/mandarin/expected.txt
# (scripts/mandarin-expected.py) and text/data/mandarin-pinyin.txt.gz (scripts/mandarin-data.py);
# the Rust front end and its test need neither the venv nor Python.
#
#   scripts/setup-mandarin-reference.sh
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-mandarin \
  "misaki[zh]==0.9.4" "cn2an==0.5.24" "proces==0.1.7" "jieba==0.42.1" "pypinyin==0.55.0" \
  "pypinyin-dict==0.9.0" "ordered-set==4.1.0"
