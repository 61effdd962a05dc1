"""The official `openai` package asking speechstream for Kokoro, as Kokoro-FastAPI's users do.

Run by tests/kokoro.rs with the venv from scripts/setup-clients.sh:
    python openai_kokoro.py BASE_URL OUT_WAV TEXT [STREAMED_WAV]
Writes the wav of model="kokoro", voice="jf_alpha" to OUT_WAV and, if given, the same text
streamed to STREAMED_WAV (tests/kokoro.rs has Whisper transcribe them); exits non-zero on a
failed check.
"""

import sys
import wave

from openai import OpenAI


def main() -> None:
    base_url, out, text = sys.argv[1:4]
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    models = [m.id for m in client.models.list().data]
    assert "kokoro" in models, models
    audio = client.audio.speech.create(model="kokoro", voice="jf_alpha", input=text, response_format="wav")
    data = audio.content
    assert data[:4] == b"RIFF" and len(data) > 24_000, (data[:8], len(data))
    with open(out, "wb") as f:
        f.write(data)
    # Streamed raw audio: the same samples as the whole file, but for the streamed reply's
    # opening (its first segment's first ~0.6 s, decoded on its own so that it leaves before the
    # whole pass: docs/kokoro-architecture.md section 8).
    with client.audio.speech.with_streaming_response.create(
            model="kokoro", voice="jf_alpha", input=text, response_format="pcm",
            extra_body={"stream_format": "audio"}) as response:
        streamed = b"".join(response.iter_bytes())
    whole = data[44:]
    second = 2 * 24_000
    assert len(streamed) == len(whole), (len(streamed), len(whole))
    assert streamed[second:] == whole[second:], "the streamed reply differs past its first second"
    if len(sys.argv) > 4:
        with wave.open(sys.argv[4], "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(24_000)
            w.writeframes(streamed)
    print(f"ok: {len(data)} bytes of wav, models {models}")


if __name__ == "__main__":
    main()
