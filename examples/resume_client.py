"""A session that survives a dropped connection, with the official SDK and Parley's
resume extension (docs/protocol.md): python examples/resume_client.py speech.wav [base_url]

Opened with `?resume=true`, the session announces a resume token (a new one on each
connection, each good once). When the connection drops, the loop reconnects with the
newest token and the id of the last event it handled, gets every event it missed, and
goes on.
"""

import asyncio
import base64
import contextlib
import sys
import wave
from collections.abc import AsyncGenerator, Awaitable, Callable

from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from openai.types.realtime import RealtimeServerEvent
from websockets.exceptions import ConnectionClosedError

TOKEN_EVENT: str = "parley.resume_token"
# Waits before each reconnect; the server keeps the session for 30 s (window_s).
BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


async def resumable_events(
    client: AsyncOpenAI,
    start: Callable[[AsyncRealtimeConnection], Awaitable[None]],
    model: str = "parley",
) -> AsyncGenerator[tuple[AsyncRealtimeConnection, RealtimeServerEvent], None]:
    """Every server event of one session, across drops, each with the connection it
    came on (send on that one). `start` runs once, on the first connection. A refused
    resume (HTTP 404 or 409: websockets' InvalidStatus) is raised: open a new session."""
    query = {"resume": "true"}
    token, last_event_id, failures = None, None, 0
    while True:
        try:
            async with client.realtime.connect(model=model, extra_query=query) as conn:
                if token is None:
                    await start(conn)
                async for event in conn:
                    failures = 0
                    if event.type == TOKEN_EVENT:  # not in the SDK's types: an extra field
                        token = (event.model_extra or {})["resume_token"]
                    yield conn, event
                    # Handled: not to be replayed (the SDK's DTMF event type has no id).
                    last_event_id = getattr(event, "event_id", last_event_id)
                return  # the server closed the session (1000 or 1001)
        except (ConnectionClosedError, OSError) as lost:
            # A close frame (1008, 1011, 1013...) means the server ended the session; a
            # drop has none. An OSError: a reconnect that found no network yet.
            closed_by_server = isinstance(lost, ConnectionClosedError) and lost.rcvd is not None
            if token is None or closed_by_server or failures == len(BACKOFF_S):
                raise
            await asyncio.sleep(BACKOFF_S[failures])
            failures += 1
            query = {"resume_token": token}
            if last_event_id is not None:
                query["last_event_id"] = last_event_id


async def main(wav_path: str, base_url: str = "http://127.0.0.1:8000/v1") -> None:
    with wave.open(wav_path, "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
        pcm = wav.readframes(wav.getnframes()) + bytes(48_000)  # then 1 s of silence

    async def speak(conn: AsyncRealtimeConnection) -> None:
        for i in range(0, len(pcm), 4_800):  # 100 ms per append; server VAD finds the turn
            chunk = base64.b64encode(pcm[i : i + 4_800]).decode()
            await conn.input_audio_buffer.append(audio=chunk)

    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    # aclosing: leaving the loop closes the connection (1000), which ends the session.
    async with contextlib.aclosing(resumable_events(client, speak)) as events:
        async for _, event in events:
            print(event.type, getattr(event, "transcript", None) or "")
            if event.type == "response.done":
                break


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
