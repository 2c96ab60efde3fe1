"""Failures the session state machine (tests/engine/test_session_machine.py) found,
each kept as the shortest example that showed it."""

from __future__ import annotations

from tests.support.harness import Harness


async def test_truncate_of_client_created_assistant_audio_item() -> None:
    """An assistant audio item the client created has a transcript but no audio; its
    truncation hit an assert (`internal_error`). It truncates to what was heard: none."""
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_audio", "transcript": "never heard"}],
    }
    async with Harness() as h:
        await h.send({"type": "conversation.item.create", "item": item})
        await h.settle()
        item_id = h.of("conversation.item.added")[-1]["item"]["id"]
        await h.send(
            {
                "type": "conversation.item.truncate",
                "item_id": item_id,
                "content_index": 0,
                "audio_end_ms": 500,
            }
        )
        await h.send({"type": "conversation.item.retrieve", "item_id": item_id})
        await h.settle()
        assert h.errors() == []
        truncated = h.of("conversation.item.truncated")
        assert [(e["item_id"], e["audio_end_ms"]) for e in truncated] == [(item_id, 0)]
        retrieved = h.of("conversation.item.retrieved")[-1]["item"]
        assert retrieved["content"][0]["transcript"] == ""  # nothing was heard
