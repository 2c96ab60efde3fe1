"""A session's inbox (engine/mailbox.py): client events wait for a slot, posts never."""

from __future__ import annotations

import asyncio

import numpy as np

from engine import protocol
from engine.mailbox import Close, Mailbox, Reject
from engine.playback import TrackAudio


async def test_client_events_take_slots_and_posts_never_wait() -> None:
    box = Mailbox(slots=2)
    clear = protocol.InputAudioBufferClear(type="input_audio_buffer.clear")
    await box.submit(clear)
    await box.feed(np.zeros(480, np.int16), None)
    third = asyncio.create_task(box.submit(protocol.ProtocolError("invalid_json", "bad")))
    await asyncio.sleep(0)
    assert not third.done()  # the reader waits: the client is pushed back on
    box.post(Close())  # the session's own messages never wait
    first = await box.get()
    assert first is clear
    box.taken(first)
    await asyncio.wait_for(third, 1)
    assert isinstance(await box.get(), TrackAudio)
    closing = await box.get()
    assert isinstance(closing, Close)
    box.taken(closing)  # frees no slot: it took none
    fourth = asyncio.create_task(box.submit(clear))
    await asyncio.sleep(0)
    assert not fourth.done()  # the track audio and the third event hold both slots
    rejected = await box.get()
    assert isinstance(rejected, Reject) and rejected.error.code == "invalid_json"
    box.taken(rejected)
    await asyncio.wait_for(fourth, 1)
    assert await box.get() is clear and box.empty()
