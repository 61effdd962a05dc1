"""Clients written the way upstream vLLM-Omni's newer ones talk to the WebSocket
(docs/protocol-upstream.md §2 and §4), with the `websockets` package:

- split_granularity "sentence": the text word by word; each sentence's audio.start arrives with
  its first audio, carrying sample_rate and channels, before input.done for all but the last;
- streaming_mode "sentence_commit" (the open PR's example client): per sentence an input.text
  and an input.commit, input.committed for each, one audio stream, session.done without an
  utterance_index.

Run by tests/deploy/clients.rs with the venv from scripts/setup-clients.sh:
    python upstream_clients.py WS_URL API_KEY
Exits non-zero on any mismatch; prints a one-line summary.
"""

import asyncio
import json
import sys

import websockets

SENTENCES = ["Hello from the new client.", "It splits sentences.", "And it ends here."]


async def recv_until(ws, stop):
    """Messages (JSON as dicts, audio as bytes) until one for which stop(message) is true."""
    got = []
    while True:
        message = await asyncio.wait_for(ws.recv(), 30)
        message = message if isinstance(message, bytes) else json.loads(message)
        got.append(message)
        if stop(message):
            return got


def is_type(kind):
    return lambda m: isinstance(m, dict) and m.get("type") == kind


async def split_sentences(url, headers):
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        config = {"type": "session.config", "voice": "Vivian", "split_granularity": "sentence",
                  "stream_audio": True, "response_format": "pcm"}
        await ws.send(json.dumps(config))
        words = " ".join(SENTENCES).split(" ")
        for word in words[:-3]:
            await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
        # The first two sentences are complete: their audio comes before input.done.
        early = await recv_until(ws, lambda m: is_type("audio.done")(m) and m["sentence_index"] == 1)
        starts = [m for m in early if is_type("audio.start")(m)]
        assert [s["sentence_text"] for s in starts] == SENTENCES[:2], starts
        for s in starts:
            assert s["sample_rate"] == 24000 and s["channels"] == 1, s
        for word in words[-3:]:
            await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
        await ws.send(json.dumps({"type": "input.done"}))
        rest = await recv_until(ws, is_type("session.done"))
        assert rest[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}, rest[-1]
        last = [m for m in rest if is_type("audio.start")(m)]
        assert last[0]["sentence_index"] == 2 and last[0]["sentence_text"] == SENTENCES[2], last
        audio = sum(len(m) for m in early + rest if isinstance(m, bytes))
        assert audio > 0
        return audio


async def sentence_commit(url, headers):
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "Vivian",
                                  "streaming_mode": "sentence_commit", "response_format": "pcm"}))
        committed = []
        for i, sentence in enumerate(SENTENCES):
            await ws.send(json.dumps({"type": "input.text", "text": sentence + " "}))
            await ws.send(json.dumps({"type": "input.commit", "commit_id": f"sentence-{i}"}))
            got = await recv_until(ws, is_type("input.committed"))
            committed.append(got[-1])
            await asyncio.sleep(0.2)
        await ws.send(json.dumps({"type": "input.done"}))
        rest = await recv_until(ws, is_type("session.done"))
        assert [c["commit_id"] for c in committed] == ["sentence-0", "sentence-1", "sentence-2"], committed
        assert [c["sentence_index"] for c in committed] == [0, 1, 2], committed
        assert committed[0]["chars_committed"] == len(SENTENCES[0]) + 1, committed[0]
        assert rest[-1] == {"type": "session.done", "total_sentences": 3}, rest[-1]
        done = [m for m in rest if is_type("audio.done")(m)]
        audio = sum(len(m) for m in rest if isinstance(m, bytes))
        assert len(done) == 1 and done[0]["total_bytes"] > 0 and not done[0]["error"], done
        assert "utterance_index" not in done[0], done[0]
        return audio


async def main() -> None:
    url, api_key = sys.argv[1:3]
    headers = {"Authorization": f"Bearer {api_key}"}
    split = await split_sentences(url, headers)
    commit = await sentence_commit(url, headers)
    print(f"websockets {websockets.__version__}: split {split} bytes, sentence_commit {commit} bytes")


if __name__ == "__main__":
    asyncio.run(main())
