"""Talk to Parley with the official SDK: python examples/sdk_client.py speech.wav [base_url]"""

import asyncio
import base64
import sys
import wave

from openai import AsyncOpenAI


async def main(wav_path: str, base_url: str = "http://127.0.0.1:8000/v1") -> None:
    with wave.open(wav_path, "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
        pcm = wav.readframes(wav.getnframes()) + bytes(48_000)  # then 1 s of silence
    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    async with client.realtime.connect(model="parley") as conn:
        for i in range(0, len(pcm), 4_800):  # 100 ms per append; server VAD finds the turn
            chunk = base64.b64encode(pcm[i : i + 4_800]).decode()
            await conn.input_audio_buffer.append(audio=chunk)
        async for event in conn:
            print(event.type, getattr(event, "transcript", None) or "")
            if event.type == "response.done":
                break


asyncio.run(main(*sys.argv[1:]))
