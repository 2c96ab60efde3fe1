"""The history bound as a pure decision (engine/history.py), and what a released
item still does (engine/conversation.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.conversation import Conversation, Item, TranscriptMark
from engine.history import audio_held_ms, audio_to_release, items_to_drop, text_chars

MS = 24  # samples per millisecond at 24 kHz


def item(item_id: str, role: str, ms: int) -> Item:
    return Item(item_id, role, audio=np.zeros(ms * MS, np.int16))  # type: ignore[arg-type]


def test_oldest_audio_goes_first_until_the_rest_fits() -> None:
    items = [item("u1", "user", 1000), item("a1", "assistant", 1000), item("u2", "user", 1000)]
    items += [item("a2", "assistant", 1000), item("u3", "user", 500)]
    assert [i.id for i in audio_to_release(items, 2500, ())] == ["u1", "a1"]
    assert audio_to_release(items, 4500, ()) == []


def test_the_newest_user_turn_and_items_in_use_keep_their_audio() -> None:
    items = [item("u1", "user", 1000), item("a1", "assistant", 1000), item("u2", "user", 3000)]
    released = audio_to_release(items, 0, {"a1"})
    assert [i.id for i in released] == ["u1"]  # u2 is the turn to answer, a1 in use


@given(
    st.lists(st.tuples(st.sampled_from(["user", "assistant"]), st.integers(0, 5000)), max_size=30),
    st.integers(0, 20_000),
)
def test_what_is_left_fits_unless_only_kept_audio_is(
    shape: list[tuple[str, int]], max_ms: int
) -> None:
    items = [item(f"i{n}", role, ms) for n, (role, ms) in enumerate(shape)]
    for released in audio_to_release(items, max_ms, ()):
        released.release_audio()
    held = [i for i in items if i.audio is not None and i.audio_ms]
    assert audio_held_ms(items) <= max_ms or [i.role for i in held] == ["user"]


def test_a_released_item_keeps_its_length_transcript_and_wire_shape() -> None:
    user = item("u1", "user", 1000)
    user.transcript = "hello there"
    user.release_audio()
    assert user.audio is None and user.audio_ms == 1000
    (part,) = user.wire(with_audio=True)["content"]
    assert part == {"type": "input_audio", "transcript": "hello there"}


def test_truncating_released_audio_cuts_its_transcript() -> None:
    answer = item("a1", "assistant", 300)
    answer.transcript = "Hello world again"
    answer.marks = [TranscriptMark(100 * MS, 5), TranscriptMark(200 * MS, 11)]
    answer.marks.append(TranscriptMark(300 * MS, 17))
    answer.release_audio()
    conversation = Conversation("c")
    assert conversation.truncate(answer, 250, 300 * MS) == 250
    assert answer.audio is None and answer.audio_ms == 250
    assert answer.transcript == "Hello world"
    assert answer.marks == [TranscriptMark(100 * MS, 5), TranscriptMark(200 * MS, 11)]


def test_truncating_an_assistant_item_without_audio_keeps_its_text() -> None:
    """The client wrote this item's transcript; no audio was made, so none can be cut."""
    written = Item("a1", "assistant", transcript="I said this")
    assert Conversation("c").truncate(written, 1500, 0) == 0
    assert written.transcript == "I said this" and written.audio is None
    assert written.wire()["content"] == [{"type": "output_audio", "transcript": "I said this"}]


def test_the_oldest_items_leave_past_the_item_and_text_bounds() -> None:
    items = [Item(f"t{n}", "user", text="x" * 10) for n in range(5)]
    items.append(item("u", "user", 100))
    assert [i.id for i in items_to_drop(items, 4, 10**6, ())] == ["t0", "t1"]
    assert [i.id for i in items_to_drop(items, 100, 25, ())] == ["t0", "t1", "t2"]
    # The newest user audio and items in use stay even when nothing else is left.
    assert [i.id for i in items_to_drop(items, 0, 0, {"t4"})] == ["t0", "t1", "t2", "t3"]


def test_text_of_every_kind_counts() -> None:
    call = Item("c", "assistant", kind="function_call", name="f", arguments="{}")
    output = Item("o", "user", kind="function_call_output", call_id="c", output="sunny")
    spoken = Item("s", "assistant", transcript="hello")
    assert [text_chars(i) for i in (call, output, spoken)] == [3, 5, 5]
