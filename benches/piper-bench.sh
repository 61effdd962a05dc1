#!/usr/bin/env bash
# Piper's joe voice (en_US-joe-medium) in process on one thread, our engine against piper-tts 1.8.0
# (onnxruntime 1.32.0, intra_op_num_threads = 1), both pinned to the same CPU, text to audio with
# phonemization on both sides; then Whisper base and Distill-MOS on both sides' audio of held-out
# sentences (section 17). Home Assistant's path (the Wyoming servers) is `VOICE=piper benches/wyoming-bench.sh`.
#
#   benches/piper-bench.sh                              # ~7 min with the defaults
#   SPEECHSTREAM_SIMD=avx2 SKIP_ASR=1 SKIP_MOS=1 benches/piper-bench.sh   # our kernels capped to AVX2
#   SKIP_RTF=1 SKIP_ASR=1 benches/piper-bench.sh        # Distill-MOS alone (~2.5 min)
#
# Timings, per round (ROUNDS of them, the sides alternating within each):
#   piper-tts  benches/piper_ref.py rtf: one process loads the voice, then per text one cold run
#              (the first call after loading) and WARM warm runs of `PiperVoice.synthesize`
#   ours cold  `speechstream say --voice VOICE --threads 1 --precision P` per text: its log's
#              "in X s (Y s loading the voice)", X - Y (one request: no warm-up, so the first
#              call's costs are in it, as in piper-tts's cold run; X also holds writing the WAV)
#   ours warm  `speechstream serve --threads 1 --workers 1 --precision P` (Piper's voices beside
#              hibari's, which it always serves), warmed up, then WARM POST /v1/audio/speech
#              (`pcm`, whole) per text: curl's time_total
# for each P of PRECISIONS. RTF = compute s / audio s (lower is better); "x real time" its inverse.
# Our audio of a long first sentence is longer than piper-tts's (the engine speaks a sentence's
# first words as a segment of their own, for first audio, and a pause follows it), so the reports
# also give the compute time of the same text against piper-tts's.
#
# Whisper (SKIP_ASR=1 to leave out): the lines of SENTENCES through our server (`wav`, each
# P of PRECISIONS) and through piper-tts (`synthesize_wav`), transcribed by tests/asr/cer.py
# (Whisper base, greedy; .venv-whisper, scripts/setup-whisper.sh): CER per sentence and mean, and
# the word error rate from the same transcripts. A third set, piper-tts-split-first, is piper-tts
# reading each sentence cut as our engine cuts an utterance's first sentence (six words and a
# comma, then the rest; benches/piper_ref.py's split_first), to tell that cut's effect from the
# network's.
#
# Distill-MOS (SKIP_MOS=1 to leave out): naturalness predicted by distillmos 0.9.1 (1..5;
# benches/piper_mos.py, .venv-mos, benches/setup-mos.sh) on the lines of SENTENCES, one draw per
# seed of MOS_SEEDS: ours through each server (`wav` with `"seed": S`, so each P of PRECISIONS
# reads a sentence with the same seed of the noise), piper-tts (`synthesize_wav`; its noise is
# drawn inside its ONNX graph and takes no seed, so a draw is a fresh one), piper-tts-cut8
# (piper-tts reading each sentence cut as our engine cut Piper's first sentence until
# 2026-12-06: eight words and a comma, then the rest; piper_ref.py --split-first=8; it now keeps
# sentences up to sixteen words whole, so the held-out ones are not cut), and each voice of
# MOS_CONTEXT through `speechstream say --voice V --seed S` (hibari's heart by default, as
# context). Per set the mean, min and max over every file, the means per draw, and its mean
# difference from the first set (ours, the first of PRECISIONS) file by file.
#
# Knobs [defaults]: ROUNDS [3], WARM [2], TEXTS [benches/texts/{short,two-sentences,medium,long}.txt],
# PRECISIONS ["fp32 auto"], CPU [1], PORT [38220] (and PORT+1...), PIPER_DIR [.cache/piper],
# VOICE [en_US-joe-medium], SENTENCES [benches/piper-held-out.txt], BIN
# [target/release/speechstream], SKIP_BUILD [0], SKIP_RTF [0], SKIP_ASR [0], SKIP_MOS [0],
# MOS_SEEDS ["1 2 3"], MOS_CONTEXT [heart] (Kokoro's English voices, e.g. af_heart, need
# kokoro-onnx's voices-v1.0.bin in .cache/kokoro; scripts/setup-voice.sh fetches the Japanese ones);
# SPEECHSTREAM_SIMD caps our kernels (and ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
# libtorch's, as BENCHMARKS.md's capped runs do); REF_SIMD [native] caps piper-tts's onnxruntime
# (benches/cap-reference.sh, on .venv-piper's copy):
#   SPEECHSTREAM_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 REF_SIMD=avx2 benches/piper-bench.sh
# Needs .venv-piper (scripts/setup.sh: piper-tts 1.8.0) and the voice in PIPER_DIR; for Distill-MOS,
# .venv-mos (benches/setup-mos.sh).
# Results: target/bench/piper-<stamp>.md, the JSON lines, WAVs, transcripts and scores beside it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ROUNDS="${ROUNDS:-3}"
WARM="${WARM:-2}"
TEXTS="${TEXTS:-benches/texts/short.txt benches/texts/two-sentences.txt benches/texts/medium.txt benches/texts/long.txt}"
PRECISIONS="${PRECISIONS:-fp32 auto}"
CPU="${CPU:-1}"
PORT="${PORT:-38220}"
PIPER_DIR="${PIPER_DIR:-.cache/piper}"
VOICE="${VOICE:-en_US-joe-medium}"
SENTENCES="${SENTENCES:-benches/piper-held-out.txt}"
BIN="${BIN:-target/release/speechstream}"
SKIP_BUILD="${SKIP_BUILD:-0}"
SKIP_RTF="${SKIP_RTF:-0}"
SKIP_ASR="${SKIP_ASR:-0}"
SKIP_MOS="${SKIP_MOS:-0}"
MOS_SEEDS="${MOS_SEEDS:-1 2 3}"
MOS_CONTEXT="${MOS_CONTEXT-heart}"
PY=.venv-piper/bin/python
MODEL="$PIPER_DIR/$VOICE.onnx"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

say() { echo "piper-bench: $*" >&2; }

[[ -f "$MODEL" ]] || { say "no $MODEL (scripts/setup.sh)"; exit 1; }
[[ -x "$PY" ]] || { say "no $PY (scripts/setup.sh)"; exit 1; }
[[ "$SKIP_MOS" == 1 || -x .venv-mos/bin/python ]] || { say "no .venv-mos (benches/setup-mos.sh; or SKIP_MOS=1)"; exit 1; }
RATE="$(jq .audio.sample_rate "$MODEL.json")"
REF_SIMD="${REF_SIMD:-native}"
read -r -a ref_env <<<"$(CAP_PY="$ROOT/$PY" benches/cap-reference.sh "$REF_SIMD")"
if [[ "$SKIP_BUILD" != 1 ]]; then
  say "building speechstream (release)"
  cargo build --release --quiet --bin speechstream
fi
pin=(taskset -c "$CPU")

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="target/bench/piper-$STAMP"
mkdir -p "$OUT"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo " + uncommitted changes (diff sha256 $(git diff HEAD | sha256sum | cut -c1-12))")"
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'); flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "pinned: ${pin[*]}; rounds $ROUNDS, warm runs $WARM; precisions: $PRECISIONS; SPEECHSTREAM_SIMD=${SPEECHSTREAM_SIMD:-(unset)} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-(unset)} MKL_ENABLE_INSTRUCTIONS=${MKL_ENABLE_INSTRUCTIONS:-(unset)}; REF_SIMD=$REF_SIMD; $BIN"
  echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT.md" >&2

# One server per precision, on PORT, PORT+1, ...; idle but for its own requests.
declare -A port_of
p=$PORT
for precision in $PRECISIONS; do
  start_server "ours $precision" "$p" "$OUT/serve-$precision.log" "${pin[@]}" "$BIN" serve --threads 1 --workers 1 \
    --precision "$precision" --no-kokoro --piper-dir "$PIPER_DIR" --port "$p" --admission off
  port_of[$precision]=$p
  p=$((p + 1))
done
grep -h -E "precision auto|loading the hibari" "$OUT"/serve-*.log | sed 's/^[^ ]* *//' | tee -a "$OUT.md" >&2 || true

# POST one text to a server; prints "audio_s compute_s".
post() {
  local port=$1 text=$2 out
  out="$(jq -n --arg t "$text" --arg v "$VOICE" '{input: $t, voice: $v, response_format: "pcm"}' |
    curl -sf -o "$OUT/post.pcm" -w '%{time_total}' -H 'content-type: application/json' --data-binary @- \
      "http://127.0.0.1:$port/v1/audio/speech")"
  echo "$(($(stat -c %s "$OUT/post.pcm") / 2)) $out" | awk -v r="$RATE" '{printf "%.4f %.4f", $1 / r, $2}'
}
# POST one text to a server as a WAV file: speak PORT OUT.wav TEXT [SEED].
speak() {
  jq -n --arg t "$3" --arg v "$VOICE" --arg s "${4:-}" \
    '{input: $t, voice: $v, response_format: "wav"} + (if $s == "" then {} else {seed: ($s | tonumber)} end)' |
    curl -sf -o "$2" -H 'content-type: application/json' --data-binary @- "http://127.0.0.1:$1/v1/audio/speech"
}
row() { # side mode text audio_s compute_s
  printf '{"side": "%s", "mode": "%s", "text": "%s", "audio_s": %s, "compute_s": %s}\n' "$@" >>"$OUT/runs.jsonl"
}

if [[ "$SKIP_RTF" != 1 ]]; then
  for precision in $PRECISIONS; do # warm-up: each text once
    for text in $TEXTS; do post "${port_of[$precision]}" "$(cat "$text")" >/dev/null; done
  done
  for round in $(seq 1 "$ROUNDS"); do
    say "round $round of $ROUNDS"
    # shellcheck disable=SC2086 # TEXTS is a list of paths
    env "${ref_env[@]}" "${pin[@]}" "$PY" benches/piper_ref.py rtf "$MODEL" "$WARM" $TEXTS >>"$OUT/runs.jsonl"
    for precision in $PRECISIONS; do
      for text in $TEXTS; do
        line="$("${pin[@]}" "$BIN" say --voice "$VOICE" --piper-dir "$PIPER_DIR" --threads 1 --precision "$precision" \
          -o "$OUT/say-$precision.wav" "$(cat "$text")" 2>&1 | grep 'loading the voice)' | tail -n 1)"
        # "... (wav, 4.11 s of audio) in 0.67 s (0.10 s loading the voice)"
        read -r audio total loading <<<"$(sed -E 's/.*, ([0-9.]+) s of audio\) in ([0-9.]+) s \(([0-9.]+) s loading.*/\1 \2 \3/' <<<"$line")"
        row "ours $precision" cold "$(basename "$text")" "$audio" "$(awk -v t="$total" -v l="$loading" 'BEGIN {printf "%.2f", t - l}')"
        for _ in $(seq 1 "$WARM"); do
          read -r audio compute <<<"$(post "${port_of[$precision]}" "$(cat "$text")")"
          row "ours $precision" warm "$(basename "$text")" "$audio" "$compute"
        done
      done
    done
  done
  {
    echo
    echo "## In process, one thread (medians; RTF = compute s / audio s)"
    echo
    python3 benches/piper_ref.py report "$OUT/runs.jsonl"
  } | tee -a "$OUT.md"
fi

if [[ "$SKIP_ASR" != 1 ]]; then
  mkdir -p "$OUT/asr-piper-tts" "$OUT/asr-piper-tts-split-first"
  env "${ref_env[@]}" "${pin[@]}" "$PY" benches/piper_ref.py wav "$MODEL" "$OUT/asr-piper-tts" "$SENTENCES"
  env "${ref_env[@]}" "${pin[@]}" "$PY" benches/piper_ref.py wav "$MODEL" "$OUT/asr-piper-tts-split-first" "$SENTENCES" --split-first
  sets=(piper-tts piper-tts-split-first)
  for precision in $PRECISIONS; do
    mkdir -p "$OUT/asr-ours-$precision"
    i=0
    while IFS= read -r sentence; do
      [[ -n "$sentence" ]] || continue
      i=$((i + 1))
      speak "${port_of[$precision]}" "$(printf '%s/asr-ours-%s/%02d.wav' "$OUT" "$precision" "$i")" "$sentence"
    done <"$SENTENCES"
    sets+=("ours-$precision")
  done
fi

if [[ "$SKIP_MOS" != 1 ]]; then # the audio, while the servers are up; scored below
  mos_sets=()
  for precision in $PRECISIONS; do mos_sets+=("ours-$precision"); done
  mos_sets+=(piper-tts piper-tts-cut8)
  for v in $MOS_CONTEXT; do mos_sets+=("$v"); done
  for seed in $MOS_SEEDS; do
    say "Distill-MOS audio, seed $seed"
    for set in "${mos_sets[@]}"; do mkdir -p "$OUT/mos-$set/s$seed"; done
    env "${ref_env[@]}" "${pin[@]}" "$PY" benches/piper_ref.py wav "$MODEL" "$OUT/mos-piper-tts/s$seed" "$SENTENCES"
    env "${ref_env[@]}" "${pin[@]}" "$PY" benches/piper_ref.py wav "$MODEL" "$OUT/mos-piper-tts-cut8/s$seed" "$SENTENCES" --split-first=8
    i=0
    while IFS= read -r sentence; do
      [[ -n "$sentence" ]] || continue
      i=$((i + 1))
      for precision in $PRECISIONS; do
        speak "${port_of[$precision]}" "$(printf '%s/mos-ours-%s/s%s/%02d.wav' "$OUT" "$precision" "$seed" "$i")" "$sentence" "$seed"
      done
      for v in $MOS_CONTEXT; do
        "${pin[@]}" "$BIN" say --voice "$v" --threads 1 --seed "$seed" \
          -o "$(printf '%s/mos-%s/s%s/%02d.wav' "$OUT" "$v" "$seed" "$i")" "$sentence" 2>>"$OUT/mos-say.log"
      done
    done <"$SENTENCES"
  done
fi
stop_all # Whisper and Distill-MOS get the CPUs

if [[ "$SKIP_ASR" != 1 ]]; then
  {
    echo
    echo "## Whisper base on $(grep -c . "$SENTENCES") held-out sentences ($SENTENCES)"
  } | tee -a "$OUT.md"
  for set in "${sets[@]}"; do
    .venv-whisper/bin/python tests/asr/cer.py --language en "$SENTENCES" "$OUT/asr-$set"/*.wav >"$OUT/asr-$set.cer"
    python3 benches/piper_ref.py wer "$SENTENCES" "$OUT/asr-$set.cer" >"$OUT/asr-$set.wer"
    {
      echo
      echo "### $set: $(tail -n 1 "$OUT/asr-$set.cer" | sed 's/mean/CER mean/'); $(tail -n 1 "$OUT/asr-$set.wer")"
      echo
      echo '```'
      head -n -1 "$OUT/asr-$set.wer"
      echo '```'
    } | tee -a "$OUT.md"
  done
fi

if [[ "$SKIP_MOS" != 1 ]]; then
  scores=()
  for set in "${mos_sets[@]}"; do
    .venv-mos/bin/python benches/piper_mos.py --label "$set" "$OUT/mos-$set"/s*/*.wav >"$OUT/mos-$set.txt" 2>>"$OUT/mos.log"
    scores+=("$OUT/mos-$set.txt")
  done
  {
    echo
    echo "## Distill-MOS on $(grep -c . "$SENTENCES") held-out sentences ($SENTENCES), seeds $MOS_SEEDS"
    echo
    python3 benches/piper_mos.py --table "${scores[@]}"
  } | tee -a "$OUT.md"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT.md" >&2
say "results: $OUT.md"
