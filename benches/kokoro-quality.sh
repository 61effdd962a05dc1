#!/usr/bin/env bash
# What Kokoro's voices say and how natural they sound, build against build (issue 51): each build
# in BINS serves every packaged Kokoro voice (`serve --workers 1 --threads 1 --precision int8`),
# and streams each line of TEXTS as one utterance over the HTTP API (raw PCM with `"stream":
# true`, as streaming clients ask: benches/kokoro_stream_wavs.py, kept as WAV); then Whisper base
# (tests/asr/whisper.py, greedy) counts the words it gets wrong per build, and Distill-MOS
# (benches/piper_mos.py) scores every file, file by file against the first build's. What differs
# between builds is each utterance's start (its first segment's audio), so the texts are short
# replies and the first sentences of longer ones.
#   BINS="main=target/bench/speechstream-main now=target/release/speechstream" benches/kokoro-quality.sh
# Knobs: BINS ["ours=target/release/speechstream"], TEXTS [benches/piper-held-out.txt plus the
# short replies below], VOICES [every packaged voice], PORT [28990], SKIP_MOS [0].
# Needs .cache/kokoro, .venv-whisper (scripts/setup.sh) and, for Distill-MOS, .venv-mos
# (benches/setup-mos.sh). Results: target/bench/kokoro-quality-<stamp>/ (WAVs, transcripts,
# scores, quality.md).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source benches/lib.sh
BINS="${BINS:-ours=target/release/speechstream}"
PORT="${PORT:-28990}"
VOICES="${VOICES:-jf_alpha jf_gongitsune jf_nezumi jf_tebukuro jm_kumo}"
OUT="target/bench/kokoro-quality-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
if [[ -n "${TEXTS:-}" ]]; then
  cp "$TEXTS" "$OUT/texts.txt"
else
  {
    cat benches/piper-held-out.txt
    printf '%s\n' "Yes." "Sure, I can help with that." "Okay, let me check the schedule for you." \
      "Good morning! How are you today?"
  } >"$OUT/texts.txt"
fi
mapfile -t LINES <"$OUT/texts.txt"
export LD_LIBRARY_PATH="$PWD/.cache/libtorch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
labels=()
for spec in $BINS; do
  label=${spec%%=*} bin=${spec#*=}
  labels+=("$label")
  mkdir -p "$OUT/$label"
  start_server "$label" "$PORT" "$OUT/$label.server.log" \
    "$bin" serve --port "$PORT" --workers 1 --threads 1 --precision int8 --kokoro-dir .cache/kokoro
  read -ra voices <<<"$VOICES"
  python3 benches/kokoro_stream_wavs.py "$PORT" "$OUT/texts.txt" "$OUT/$label" "${voices[@]}"
  stop_server "$SERVER_PID"
  _bench_say "$label: $(find "$OUT/$label" -name '*.wav' | wc -l) files"
done
{
  echo "# Kokoro quality, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)"
  echo
  echo "builds: $BINS; voices: $VOICES; $(wc -l <"$OUT/texts.txt") texts"
  echo
  echo "| build | Whisper base: words wrong | of words |"
  echo "|---|---:|---:|"
} >"$OUT/quality.md"
for label in "${labels[@]}"; do
  files=()
  for voice in $VOICES; do for i in "${!LINES[@]}"; do files+=("$OUT/$label/$voice-$i.wav"); done; done
  .venv-whisper/bin/python tests/asr/whisper.py --language en "${files[@]}" >"$OUT/$label.transcripts"
  python3 - "$OUT/texts.txt" "$OUT/$label.transcripts" "$label" >>"$OUT/quality.md" <<'EOF'
import re, sys
sys.path.insert(0, "tests/asr")
from textdist import distance  # (standard library only)
texts = open(sys.argv[1]).read().splitlines()
heard = open(sys.argv[2]).read().splitlines()
words = lambda s: re.findall(r"[a-z0-9']+", s.lower())
wrong = total = 0
for k, h in enumerate(heard):
    want = words(texts[k % len(texts)])
    wrong += distance(want, words(h))
    total += len(want)
print(f"| {sys.argv[3]} | {wrong} | {total} |")
EOF
  if [[ "${SKIP_MOS:-0}" != 1 ]]; then
    .venv-mos/bin/python benches/piper_mos.py --label "$label" "${files[@]}" >"$OUT/$label.mos"
  fi
done
if [[ "${SKIP_MOS:-0}" != 1 ]]; then
  echo >>"$OUT/quality.md"
  mos=()
  for label in "${labels[@]}"; do mos+=("$OUT/$label.mos"); done
  python3 benches/piper_mos.py --table "${mos[@]}" >>"$OUT/quality.md"
fi
cat "$OUT/quality.md"
