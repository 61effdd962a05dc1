"""Pipecat's OpenAITTSService, unchanged, against speechstream's POST /v1/audio/speech.

Run by tests/agents.rs with the venv from scripts/setup-agents.sh:
    python pipecat_tts.py BASE_URL API_KEY OUT.wav [VOICE [MODEL]]
Runs the service alone through Pipecat's own single-processor harness (pipecat.tests.utils
.run_test: a TTSSpeakFrame in, the frames it pushes out), writes the audio frames to OUT.wav
(24 kHz mono) and prints one JSON line: chunks, bytes, errors. Exits non-zero when the service
pushes an error frame or no audio.
"""

import asyncio
import json
import sys
import wave

from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.tests.utils import run_test

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs into the forest."


async def main() -> int:
    base_url, api_key, out_path = sys.argv[1:4]
    kwargs = {}
    if len(sys.argv) > 4:
        kwargs["voice"] = sys.argv[4]
    if len(sys.argv) > 5:
        kwargs["model"] = sys.argv[5]
    service = OpenAITTSService(api_key=api_key, base_url=f"{base_url}/v1", **kwargs)
    down, up = await run_test(service, frames_to_send=[TTSSpeakFrame(TEXT)])
    audio, chunks, errors = bytearray(), 0, []
    for frame in list(down) + list(up):
        if isinstance(frame, TTSAudioRawFrame):
            assert frame.sample_rate == 24000 and frame.num_channels == 1, (frame.sample_rate, frame.num_channels)
            audio += frame.audio
            chunks += 1
        elif isinstance(frame, ErrorFrame):
            errors.append(frame.error)
    with wave.open(out_path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(bytes(audio))
    print(json.dumps({"chunks": chunks, "bytes": len(audio), "errors": errors}))
    return 0 if audio and not errors else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
