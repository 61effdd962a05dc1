"""The official `openai` package against speechstream's POST /v1/audio/speech.

Run by tests/deploy/clients.rs with the venv from scripts/setup-clients.sh:
    python openai_speech.py BASE_URL API_KEY MODEL
Exits non-zero (with the failing check) on any mismatch.
"""

import base64
import json
import sys

import openai
from openai import OpenAI

MAGIC = {"wav": b"RIFF", "flac": b"fLaC", "mp3": None, "opus": b"OggS"}


def main() -> None:
    base_url, api_key, model = sys.argv[1:4]
    client = OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=30)
    checks = 0

    # Plain: every format, whole files.
    for fmt in ["wav", "pcm", "flac", "mp3", "opus"]:
        audio = client.audio.speech.create(model=model, voice="vivian", input="Hello from the openai client.",
                                           response_format=fmt)
        data = audio.content
        assert len(data) > 1000, (fmt, len(data))
        magic = MAGIC.get(fmt)
        if magic:
            assert data.startswith(magic), (fmt, data[:8])
        if fmt == "mp3":
            assert data[:3] == b"ID3" or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0), data[:4]
        if fmt == "pcm":
            assert len(data) % 2 == 0
        checks += 1
    pcm_whole = client.audio.speech.create(model=model, voice="vivian", input="Streaming works too.",
                                           response_format="pcm").content

    # Streaming raw audio: the same bytes as the whole pcm reply, in chunks.
    with client.audio.speech.with_streaming_response.create(
            model=model, voice="vivian", input="Streaming works too.", response_format="pcm",
            extra_body={"stream_format": "audio"}) as response:
        assert response.headers["content-type"] == "audio/pcm", response.headers
        streamed = b"".join(response.iter_bytes())
    assert streamed == pcm_whole, (len(streamed), len(pcm_whole))
    checks += 1

    # Streaming wav: the streaming header, then the samples.
    with client.audio.speech.with_streaming_response.create(
            model=model, voice="vivian", input="Streaming works too.", response_format="wav",
            extra_body={"stream_format": "audio"}) as response:
        wav = response.read()
    assert wav[:4] == b"RIFF" and wav[4:8] == b"\xff\xff\xff\xff" and wav[40:44] == b"\xff\xff\xff\xff"
    assert wav[44:] == pcm_whole
    checks += 1

    # SSE: deltas that add up to the same audio, then done with usage.
    with client.audio.speech.with_streaming_response.create(
            model=model, voice="vivian", input="Streaming works too.", response_format="pcm",
            extra_body={"stream_format": "sse"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = []
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[len("data: "):])))
    names = [name for name, _ in events]
    assert names[-1] == "speech.audio.done" and set(names[:-1]) == {"speech.audio.delta"}, names
    audio = b"".join(base64.b64decode(data["audio"]) for name, data in events[:-1])
    assert audio == pcm_whole
    usage = events[-1][1]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0, usage
    checks += 1

    # Errors come back as the exceptions the package raises for OpenAI's own errors.
    try:
        client.audio.speech.create(model="no-such-model", voice="vivian", input="x")
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and "does not exist" in str(e), e
    try:
        client.audio.speech.create(model=model, voice="nobody", input="x")
        raise AssertionError("unknown voice accepted")
    except openai.BadRequestError as e:
        assert "Invalid voice 'nobody'" in str(e), e
    try:
        OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0).audio.speech.create(
            model=model, voice="vivian", input="x")
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e
    checks += 3

    models = [m.id for m in client.models.list()]
    assert models == [model], models
    checks += 1
    print(f"openai {openai.__version__}: {checks} checks passed")


if __name__ == "__main__":
    main()
