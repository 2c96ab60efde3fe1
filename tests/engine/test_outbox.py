"""The outbox: stale output dropped at a cancel, backpressure, and the control reserve."""

from __future__ import annotations

import asyncio

import pytest

from engine.emitter import Outbox, OutboxOverflow, OutEvent
from engine.playback import Playback


async def test_outbox_drops_stale_output_and_keeps_control() -> None:
    epoch, played = 0, Playback()
    box = Outbox(limit=4, reserve=2, current_epoch=lambda lane: epoch, on_taken=played.taken)
    await box.put(OutEvent("a1", "d", epoch=0, item_id="i", samples=10))
    await box.put(OutEvent("a2", "d", epoch=0, item_id="i", samples=10))
    first = await box.get()
    assert first is not None and first.text == "a1"
    epoch = 1  # a cancel
    box.put_control(OutEvent("done", "response.done"))
    second = await box.get()
    assert second is not None and second.text == "done"  # a2 never reaches the wire
    assert played.sent_samples("i") == 10 and list(played.sent_items()) == ["i"]


async def test_outbox_backpressure_and_reserve() -> None:
    box = Outbox(limit=2, reserve=1)
    await box.put(OutEvent("1", "d", epoch=0))
    await box.put(OutEvent("2", "d", epoch=0))
    blocked = asyncio.ensure_future(box.put(OutEvent("3", "d", epoch=0)))
    await asyncio.sleep(0)
    assert not blocked.done()  # output waits for the reader
    box.put_control(OutEvent("c", "error"))  # control uses the reserve
    with pytest.raises(OutboxOverflow):
        box.put_control(OutEvent("c2", "error"))
    texts = []
    for _ in range(4):
        event = await box.get()
        assert event is not None
        texts.append(event.text)
        await asyncio.sleep(0)
    await blocked
    assert texts[:3] == ["1", "2", "c"] and texts[3] == "3"
    box.close()
    assert await box.get() is None


async def test_an_item_is_forgotten_only_once_its_audio_left_the_queue() -> None:
    firsts: list[str] = []
    box = Outbox(limit=4, reserve=2, on_taken=lambda event: played.taken(event))
    played = Playback(first_audio=firsts.append, queued=box.holds_audio_of)
    delta = "response.output_audio.delta"
    await box.put(OutEvent("a", delta, 0, item_id="x", samples=5))
    await box.put(OutEvent("b", delta, 0, item_id="x", samples=10))
    assert await box.get() is not None
    played.forget("x")  # still queued: the writer would count it as a first audio again
    assert played.sent_samples("x") == 5 and box.holds_audio_of("x")
    assert await box.get() is not None
    played.forget("x")
    assert list(played.sent_items()) == [] and not box.holds_audio_of("x")
    assert firsts == ["x"]


async def test_outbox_is_bounded_in_characters_too() -> None:
    """Few large events (a sentence of audio, an echoed 16 MiB instruction) must not
    let a client that stops reading hold more than the character bound."""
    box = Outbox(limit=100, reserve=10, limit_chars=10, reserve_chars=5)
    await box.put(OutEvent("x" * 6, "d", epoch=0))
    await box.put(OutEvent("x" * 6, "d", epoch=0))  # 12 characters: at the limit
    blocked = asyncio.ensure_future(box.put(OutEvent("y", "d", epoch=0)))
    await asyncio.sleep(0)
    assert not blocked.done() and box.chars == 12
    box.put_control(OutEvent("c" * 3, "error"))  # 15: within the reserve
    with pytest.raises(OutboxOverflow):
        box.put_control(OutEvent("c", "error"))  # 16: past it
    taken = [await box.get() for _ in range(2)]
    assert [e.text for e in taken if e is not None] == ["x" * 6, "x" * 6]
    await asyncio.sleep(0)
    await blocked  # room again: output moves
    assert box.chars == 4


def test_an_empty_outbox_takes_an_event_larger_than_its_bound() -> None:
    """One event is bounded by the client message it echoes; a reading client whose
    queue is empty is never closed for sending a large update."""
    box = Outbox(limit=4, reserve=2, limit_chars=10, reserve_chars=5)
    box.put_control(OutEvent("u" * 100, "session.updated"))
    assert len(box) == 1 and box.chars == 100
    with pytest.raises(OutboxOverflow):
        box.put_control(OutEvent("e", "error"))
