"""LiveKit Agents' OpenAI TTS plugin, unchanged and with its defaults, against speechstream.

Run by tests/agents.rs with the venv from scripts/setup-agents.sh:
    python livekit_tts.py BASE_URL API_KEY OUT.wav [MODEL [RESPONSE_FORMAT [VOICE]]]
Synthesizes through `openai.TTS(...).synthesize(text)` (the plugin decodes what the server
sends, mp3 by default, with its own decoder), writes the frames to OUT.wav and prints one JSON
line: frames, samples, sample_rate, request_id. Exits non-zero on any error or no audio.
"""

import asyncio
import json
import sys
import wave

from livekit.plugins import openai

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs into the forest."


async def main() -> int:
    base_url, api_key, out_path = sys.argv[1:4]
    kwargs = {}
    if len(sys.argv) > 4:
        kwargs["model"] = sys.argv[4]
    if len(sys.argv) > 5:
        kwargs["response_format"] = sys.argv[5]
    if len(sys.argv) > 6:
        kwargs["voice"] = sys.argv[6]
    tts = openai.TTS(base_url=f"{base_url}/v1", api_key=api_key, **kwargs)
    pcm, frames, rate, request_id = bytearray(), 0, None, None
    async with tts.synthesize(TEXT) as stream:
        async for event in stream:
            request_id = event.request_id
            frame = event.frame
            assert frame.num_channels == 1, frame.num_channels
            rate = frame.sample_rate
            pcm += bytes(frame.data.cast("B"))
            frames += 1
    await tts.aclose()
    with wave.open(out_path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate or 24000)
        w.writeframes(bytes(pcm))
    print(json.dumps({"frames": frames, "samples": len(pcm) // 2, "sample_rate": rate, "request_id": request_id}))
    # The plugin reads the id from the x-request-id header; it logs a warning without one.
    assert request_id, "no request id (x-request-id header)"
    return 0 if pcm else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
