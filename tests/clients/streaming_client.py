"""A client written the way vLLM-Omni's example streaming_speech_client.py talks to the
WebSocket (docs/protocol-reference.md §h): `speaker` in session.config, the text sent word by word as
input.text, input.done, wait for session.done, then session.close.

Run by tests/deploy/clients.rs with the venv from scripts/setup-clients.sh:
    python streaming_client.py WS_URL API_KEY
Exits non-zero on any mismatch; prints a one-line summary.
"""

import asyncio
import json
import sys

import websockets

UTTERANCES = [
    "Hello, this is the streaming speech client.",
    "It sends one word at a time.",
    "Then it waits for session done.",
]


async def utterance(ws, text: str, index: int, stream_audio: bool) -> int:
    for word in text.split(" "):
        await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
    await ws.send(json.dumps({"type": "input.done"}))
    audio = bytearray()
    start = done = None
    while True:
        message = await ws.recv()
        if isinstance(message, bytes):
            assert start is not None, "audio before audio.start"
            audio.extend(message)
            continue
        event = json.loads(message)
        kind = event["type"]
        if kind == "audio.start":
            start = event
            assert event["utterance_index"] == index and event["sentence_text"] == text, event
        elif kind == "audio.done":
            done = event
            assert not event["error"] and event["total_bytes"] == len(audio), (event, len(audio))
        elif kind == "session.done":
            assert event == {"type": "session.done", "utterance_index": index, "total_sentences": 1}, event
            break
        else:
            raise AssertionError(f"unexpected {event}")
    assert start and done and len(audio) > 0
    if not stream_audio:
        assert audio[:4] == b"RIFF", bytes(audio[:8])
    return len(audio)


async def main() -> None:
    url, api_key = sys.argv[1:3]
    total = 0
    for stream_audio in (False, True):
        config = {"type": "session.config", "speaker": "Vivian", "task_type": "CustomVoice", "language": "Auto"}
        if stream_audio:
            config.update({"stream_audio": True, "response_format": "pcm"})
        # Headers for clients that can set them; browsers would use ?api_key= instead.
        headers = {"Authorization": f"Bearer {api_key}"} if stream_audio else None
        target = url if stream_audio else f"{url}?api_key={api_key}"
        async with websockets.connect(target, additional_headers=headers, max_size=None) as ws:
            await ws.send(json.dumps(config))
            for index, text in enumerate(UTTERANCES):
                total += await utterance(ws, text, index, stream_audio)
            await ws.send(json.dumps({"type": "session.close"}))
            try:
                await asyncio.wait_for(ws.recv(), 10)
                raise AssertionError("message after session.close")
            except websockets.ConnectionClosedOK as closed:
                assert closed.rcvd.code == 1000, closed
    print(f"websockets {websockets.__version__}: {2 * len(UTTERANCES)} utterances, {total} audio bytes")


if __name__ == "__main__":
    asyncio.run(main())
