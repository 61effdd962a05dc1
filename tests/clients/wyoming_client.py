"""Home Assistant's side of the Wyoming protocol, with the `wyoming` package's own client
(AsyncTcpClient), the way Home Assistant's wyoming integration talks to a TTS server:

1. describe -> info: a tts program with voices and supports_synthesize_streaming;
2. synthesize (one request, voice by name) -> audio-start, audio-chunk*, audio-stop;
3. a stream, written in a second task while the first reads (as Home Assistant does):
   synthesize-start, synthesize-chunk word by word, the whole text again as synthesize (for old
   servers), synthesize-stop -> per sentence audio-start, audio-chunk*, audio-stop, then
   synthesize-stopped. The first sentence's audio must arrive while the stream is still open;
4. a voice the server does not have -> an error event and the close;
5. the voice rule every protocol shares: an OpenAI voice name (`alloy`), a language alone (`en`)
   pick a voice; a language no voice speaks (`de-DE`) and an empty text -> an error event and
   the close (issue 34).

Run by tests/wyoming.rs and tests/deploy with the venv from scripts/setup-clients.sh:
    python wyoming_client.py HOST PORT TEXT OUT_PREFIX
writes OUT_PREFIX-whole.wav and OUT_PREFIX-streamed.wav; exits non-zero on any mismatch and
prints a one-line summary.
"""

import asyncio
import os
import sys
import wave

import wyoming
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

TIMEOUT = 300


async def read(client):
    event = await asyncio.wait_for(client.read_event(), TIMEOUT)
    assert event is not None, "connection closed early"
    return event


def save(path, start, pcm):
    with wave.open(path, "wb") as out:
        out.setframerate(start.rate)
        out.setsampwidth(start.width)
        out.setnchannels(start.channels)
        out.writeframes(pcm)


async def describe(host, port):
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Describe().event())
        event = await read(client)
        assert Info.is_type(event.type), event
        info = Info.from_event(event)
    tts = next(program for program in info.tts if program.installed)
    assert tts.supports_synthesize_streaming, tts
    assert tts.voices and all(voice.languages for voice in tts.voices), tts.voices
    return tts


async def whole(host, port, voice, text, path):
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Synthesize(text=text, voice=voice).event())
        start, pcm, chunks = None, bytearray(), 0
        while True:
            event = await read(client)
            if AudioStart.is_type(event.type):
                assert start is None, "two audio-starts for one synthesize"
                start = AudioStart.from_event(event)
            elif AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                assert start is not None and (chunk.rate, chunk.width, chunk.channels) == (
                    start.rate,
                    start.width,
                    start.channels,
                ), chunk
                pcm += chunk.audio
                chunks += 1
            elif AudioStop.is_type(event.type):
                break
            else:
                raise AssertionError(f"unexpected {event}")
    assert start.width == 2 and start.channels == 1 and len(pcm) > start.rate, (start, len(pcm))
    save(path, start, pcm)
    return chunks, len(pcm) / 2 / start.rate


async def streamed(host, port, voice, text, path):
    sentences = [s.strip() + "." for s in text.split(".") if s.strip()]
    first_audio = asyncio.Event()
    stream_open = True

    async with AsyncTcpClient(host, port) as client:

        async def write():
            nonlocal stream_open
            await client.write_event(SynthesizeStart(voice=voice).event())
            for i, sentence in enumerate(sentences):
                for word in sentence.split(" "):
                    await client.write_event(SynthesizeChunk(text=word + " ").event())
                if i == 0:
                    # The first sentence is complete: its audio comes before the stream ends.
                    await asyncio.wait_for(first_audio.wait(), TIMEOUT)
            await client.write_event(Synthesize(text=text, voice=voice).event())
            stream_open = False
            await client.write_event(SynthesizeStop().event())

        writer = asyncio.ensure_future(write())
        starts, stops, pcm, audio_while_open = [], 0, bytearray(), False
        while True:
            event = await read(client)
            if AudioStart.is_type(event.type):
                assert len(starts) == stops, "audio-start inside a cycle"
                starts.append(AudioStart.from_event(event))
            elif AudioChunk.is_type(event.type):
                assert len(starts) == stops + 1, "audio-chunk outside a cycle"
                pcm += AudioChunk.from_event(event).audio
                audio_while_open |= stream_open
                first_audio.set()
            elif AudioStop.is_type(event.type):
                stops += 1
            elif SynthesizeStopped.is_type(event.type):
                break
            else:
                raise AssertionError(f"unexpected {event}")
        await writer
    assert len(starts) == stops == len(sentences), (len(starts), stops, sentences)
    assert audio_while_open, "no audio before synthesize-stop"
    save(path, starts[0], pcm)
    return len(sentences), len(pcm) / 2 / starts[0].rate


async def refused(host, port, synthesize, code, needle):
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(synthesize.event())
        event = await read(client)
        assert Error.is_type(event.type), event
        error = Error.from_event(event)
        assert error.code == code and needle in error.text, error
        assert await asyncio.wait_for(client.read_event(), TIMEOUT) is None, "not closed after the error"


async def unknown_voice(host, port):
    voice = SynthesizeVoice(name="no-such-voice")
    await refused(host, port, Synthesize(text="Hi.", voice=voice), "unknown-voice", "no-such-voice")
    german = SynthesizeVoice(language="de-DE")
    await refused(host, port, Synthesize(text="Hallo.", voice=german), "unknown-voice", "'de-DE'")
    await refused(host, port, Synthesize(text=" "), "bad-request", "not empty")


async def main():
    host, port, text, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    tts = await describe(host, port)
    voice = SynthesizeVoice(name=tts.voices[0].name)
    chunks, whole_s = await whole(host, port, voice, text, f"{prefix}-whole.wav")
    sentences, streamed_s = await streamed(host, port, voice, text, f"{prefix}-streamed.wav")
    await unknown_voice(host, port)
    for other in [SynthesizeVoice(name="alloy"), SynthesizeVoice(language="en")]:
        await whole(host, port, other, text, f"{prefix}-other.wav")
        os.remove(f"{prefix}-other.wav")
    print(
        f"wyoming {wyoming.__version__}: {tts.name} {tts.version}, voices {[v.name for v in tts.voices]}; "
        f"synthesize {whole_s:.2f} s in {chunks} chunks; stream of {sentences} sentences {streamed_s:.2f} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
