#!/usr/bin/env bash
# .venv-agents: the voice-agent frameworks whose OpenAI TTS classes tests/agents.rs drives
# unchanged against our server: Pipecat's OpenAITTSService and LiveKit Agents' openai.TTS.
# Pinned (the versions the drop-in work was checked with) so a new release can't change what CI
# checks without a commit saying so.
exec "$(dirname "${BASH_SOURCE[0]}")/venv.sh" .venv-agents "pipecat-ai==1.14.0" "livekit-plugins-openai==1.8.9"
