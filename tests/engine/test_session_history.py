"""A session's history audio stays within `max_history_audio_ms`; items whose audio
was released stay addressable, and truncation works on every assistant audio item."""

from __future__ import annotations

import asyncio

import numpy as np

from bench.speech import load_wav
from engine.history import audio_held_ms
from engine.limits import EngineLimits
from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

MANUAL = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


async def turn(h: Harness, pcm: np.ndarray) -> None:
    """A manual turn and its answer."""
    await h.append(pcm)
    await h.send({"type": "input_audio_buffer.commit"})
    await h.send({"type": "response.create"})
    await h.settle()


async def test_history_audio_stays_within_its_bound_over_many_turns() -> None:
    joke = load_wav("joke")
    bound_ms = 6000
    async with Harness(limits=EngineLimits(max_history_audio_ms=bound_ms)) as h:
        await h.send(MANUAL)
        for _ in range(12):
            await turn(h, joke)
            assert audio_held_ms(h.session.conversation.items) <= bound_ms
        items = h.session.conversation.items
        assert len(items) == 24 and all(i.id for i in items)  # every item is still there
        released = [i for i in items if i.audio is None]
        assert len(released) >= 12
        # A released answer keeps its transcript; a released user turn, which had
        # none (no input transcription), gets the executor's.
        for item in released:
            assert item.transcript and item.audio_ms > 0
        assert released[0].role == "user"
        assert released[0].transcript == f"audio of {len(joke)} samples"
        assert h.of("conversation.item.input_audio_transcription.completed") == []
        # Every response still heard its own turn as audio.
        for prompt in h.scripted.prompts:
            assert prompt.items[-1].audio is not None and len(prompt.items[-1].audio) == len(joke)
        # The latest prompt holds the released turns by their transcripts.
        last = h.scripted.prompts[-1]
        assert last.items[0].audio is None
        assert last.items[0].text == f"audio of {len(joke)} samples"
        assert not h.errors()


async def test_released_items_stay_addressable() -> None:
    joke = load_wav("joke")
    async with Harness(limits=EngineLimits(max_history_audio_ms=0)) as h:
        await h.send(MANUAL)
        await turn(h, joke)
        await turn(h, joke)
        user, answer, user2, answer2 = h.session.conversation.items
        assert user.audio is None and answer.audio is None and answer2.audio is None
        assert user2.audio is not None  # the newest turn keeps its audio
        words = answer.transcript.split()
        await h.send({"type": "conversation.item.retrieve", "item_id": answer.id})
        await h.truncate(answer.id, 250, event_id="t")
        await h.send({"type": "conversation.item.retrieve", "item_id": user.id})
        await h.send(
            {
                "type": "conversation.item.create",
                "previous_item_id": user.id,
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "after the first"}],
                },
            }
        )
        await h.send({"type": "conversation.item.delete", "item_id": answer2.id})
        await h.settle()
        assert not h.errors()
        retrieved = h.of("conversation.item.retrieved")
        (part,) = retrieved[0]["item"]["content"]
        assert part == {"type": "output_audio", "transcript": " ".join(words)}
        (truncated,) = h.of("conversation.item.truncated")
        assert truncated["audio_end_ms"] == 250
        assert answer.transcript == " ".join(words[:2]) and answer.audio_ms == 250
        (part,) = retrieved[1]["item"]["content"]
        assert part["type"] == "input_audio" and "audio" not in part
        added = h.of("conversation.item.added")[-1]
        assert added["previous_item_id"] == user.id
        assert [i.id for i in h.session.conversation.items][:3] == [
            user.id,
            added["item"]["id"],
            answer.id,
        ]
        assert h.session.conversation.get(answer2.id) is None
        assert answer2.id not in h.session.playback.sent_items()  # its ledger entry went too


async def test_truncate_an_assistant_item_the_client_wrote() -> None:
    """An assistant audio item made by `conversation.item.create` has a transcript
    and no audio: the truncation clamps to 0 and keeps the text, not internal_error."""
    async with Harness() as h:
        await h.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "id": "said",
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_audio", "transcript": "I said this"}],
                },
            }
        )
        await h.truncate("said", 1500, event_id="t")
        await h.send({"type": "response.create"})
        await h.settle()
        assert not h.errors()
        (truncated,) = h.of("conversation.item.truncated")
        assert truncated["item_id"] == "said" and truncated["audio_end_ms"] == 0
        said = h.session.conversation.get("said")
        assert said is not None and said.transcript == "I said this"
        assert h.scripted.prompts[-1].items[0].text == "I said this"
        assert h.responses_done()[0]["status"] == "completed"


async def test_an_answer_in_progress_keeps_its_input_audio() -> None:
    """Audio a response still needs for its prompt is never released, however small
    the bound: here its explicit input, while the response waits for its gate."""
    executor = ScriptedExecutor(prepare_gate=asyncio.Event())
    joke = load_wav("joke")
    async with Harness(executor, limits=EngineLimits(max_history_audio_ms=0)) as h:
        await h.send(MANUAL)
        await h.append(joke)
        await h.send({"type": "input_audio_buffer.commit"})
        await h.run_until(lambda: len(h.of("input_audio_buffer.committed")) == 1)
        first_id = h.of("input_audio_buffer.committed")[0]["item_id"]
        await h.send(
            {
                "type": "response.create",
                "response": {"input": [{"type": "item_reference", "id": first_id}]},
            }
        )
        await h.append(joke)
        await h.send({"type": "input_audio_buffer.commit"})  # bounds the history again
        await h.run_until(lambda: len(h.of("input_audio_buffer.committed")) == 2)
        assert executor.prompts == []  # the gate still waits for the turns
        assert executor.prepare_gate is not None
        executor.prepare_gate.set()
        await h.settle()
        (prompt,) = executor.prompts
        assert prompt.items[0].audio is not None and len(prompt.items[0].audio) == len(joke)
        assert not h.errors()


async def test_the_oldest_items_leave_past_the_item_bound_and_the_client_is_told() -> None:
    """Items a client creates are bounded too: by count, and by text however few."""
    limits = EngineLimits(max_history_items=5, max_history_text_chars=9_020)
    async with Harness(limits=limits) as h:
        for n in range(8):
            await h.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "id": f"t{n}",
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": f"note {n}"}],
                    },
                }
            )
        await h.settle()
        assert [e["item_id"] for e in h.of("conversation.item.deleted")] == ["t0", "t1", "t2"]
        assert [i.id for i in h.session.conversation.items] == ["t3", "t4", "t5", "t6", "t7"]
        big = {"type": "input_text", "text": "y" * 9_000}
        await h.send(
            {
                "type": "conversation.item.create",
                "item": {"id": "big", "type": "message", "role": "user", "content": [big]},
            }
        )
        await h.send({"type": "conversation.item.retrieve", "item_id": "t3", "event_id": "gone"})
        await h.settle()
        # 5 items, but 9030 characters: t3 and t4 go.
        assert [i.id for i in h.session.conversation.items] == ["t5", "t6", "t7", "big"]
        await h.send({"type": "response.create"})
        await h.settle()
        assert sum(len(i.text or "") for i in h.session.conversation.items) <= 9_020
        (error,) = h.errors()
        assert error["code"] == "item_not_found" and error["event_id"] == "gone"
        assert h.responses_done()[0]["status"] == "completed"
