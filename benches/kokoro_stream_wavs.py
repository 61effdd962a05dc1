"""Streams each line of TEXTS from a speechstream server's Kokoro voices, as streaming clients
ask (`/v1/audio/speech`, raw PCM, `"stream": true`: an utterance's first segment opens with its
own decoding), and keeps each reply as a 24 kHz WAV: OUT/VOICE-I.wav. Used by
benches/kokoro-quality.sh. Standard library only.

    python3 benches/kokoro_stream_wavs.py PORT TEXTS OUT VOICE...
"""
import json
import sys
import urllib.request
import wave


def main():
    port, texts, out, voices = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    lines = open(texts, encoding="utf-8").read().splitlines()
    for voice in voices:
        for i, text in enumerate(lines):
            body = {"model": "kokoro", "voice": voice, "input": text, "response_format": "pcm",
                    "stream": True, "stream_format": "audio"}
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/audio/speech",
                                             json.dumps(body).encode(), {"content-type": "application/json"})
            pcm = urllib.request.urlopen(request, timeout=300).read()
            with wave.open(f"{out}/{voice}-{i}.wav", "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(24000)
                w.writeframes(pcm)


if __name__ == "__main__":
    main()
