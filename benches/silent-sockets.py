#!/usr/bin/env python3
"""Silent sockets against a running server (issue 36): open N TCP connections that send
nothing, then time what a new client gets while they are held: `/health`, `/metrics`, and the
first audio of one utterance over the WebSocket.

    .venv-clients/bin/python benches/silent-sockets.py --port 8000 --silent 1100

Prints one line of JSON. Raise this process's own descriptor limit first (`ulimit -n 8192`).
"""

import argparse
import asyncio
import json
import socket
import time

import websockets


def get(host, port, path):
    start = time.perf_counter()
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data else 0
    return status, (time.perf_counter() - start) * 1000


async def first_audio(host, port, text):
    start = time.perf_counter()
    try:
        async with websockets.connect(f"ws://{host}:{port}/v1/audio/speech/stream", max_size=None) as ws:
            await ws.send(json.dumps({"type": "session.config", "stream_audio": True, "response_format": "pcm"}))
            await ws.send(json.dumps({"type": "input.text", "text": text}))
            await ws.send(json.dumps({"type": "input.done"}))
            first = None
            async for message in ws:
                if isinstance(message, bytes) and first is None:
                    first = (time.perf_counter() - start) * 1000
                if isinstance(message, str) and json.loads(message).get("type") == "session.done":
                    return first
    except Exception as e:  # a refusal (1013) or a failed handshake
        return f"failed: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--silent", type=int, default=1100, help="silent sockets to hold")
    ap.add_argument("--text", default="The quick brown fox jumps over the lazy dog.")
    args = ap.parse_args()
    held = []
    for _ in range(args.silent):
        held.append(socket.create_connection((args.host, args.port), timeout=30))
    time.sleep(0.5)
    health, health_ms = get(args.host, args.port, "/health")
    metrics, metrics_ms = get(args.host, args.port, "/metrics")
    audio_ms = asyncio.run(first_audio(args.host, args.port, args.text))
    print(json.dumps({
        "silent": args.silent,
        "health": health, "health_ms": round(health_ms, 1),
        "metrics": metrics, "metrics_ms": round(metrics_ms, 1),
        "first_audio_ms": round(audio_ms, 1) if isinstance(audio_ms, float) else audio_ms,
    }))
    for s in held:
        s.close()


if __name__ == "__main__":
    main()
