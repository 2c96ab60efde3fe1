"""Session `truncation` against a small executor context: the decision (pure), the
cut kept across turns, and each mode through a session (the scripted executor counts
a word as a token)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.speech import load_wav, silence
from engine.session_config import RetentionRatio, Truncation
from engine.truncation import (
    ContextCut,
    ContextTooLong,
    Fits,
    TooLong,
    plan_cut,
    room_after_instructions,
)
from models.base import Prompt, PromptItem, prompt_key
from models.context import count_prompt
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.harness import Harness

ANY = [True] * 8


# --- the decision ---------------------------------------------------------------------


def test_a_conversation_that_fits_is_read_whole_whatever_the_mode() -> None:
    for mode in ("auto", "disabled", RetentionRatio(0.5)):
        assert plan_cut([5, 5, 5], ANY, 15, mode) == Fits(0)
    assert plan_cut([50, 50], ANY, None, "disabled") == Fits(0)  # no bound known


def test_auto_drops_the_oldest_items_until_the_rest_fits() -> None:
    assert plan_cut([4, 4, 4, 4], ANY, 9, "auto") == Fits(2)
    assert plan_cut([4, 4, 4, 4], ANY, 12, "auto") == Fits(1)


def test_auto_never_fails_the_latest_item_is_read_even_when_it_alone_overflows() -> None:
    assert plan_cut([4, 40], ANY, 9, "auto") == Fits(1)
    assert plan_cut([4, 4], ANY, -3, "auto") == Fits(1)  # the instructions alone overflow


def test_a_retention_ratio_cuts_down_to_its_share_of_the_room() -> None:
    # room 20: auto stops at 20 tokens, a ratio of 0.5 at 10.
    tokens = [5, 5, 5, 5, 5]
    assert plan_cut(tokens, ANY, 20, "auto") == Fits(1)
    assert plan_cut(tokens, ANY, 20, RetentionRatio(0.5)) == Fits(3)
    assert plan_cut(tokens, ANY, 20, RetentionRatio(0.0)) == Fits(4)  # the latest only


def test_the_last_cut_stays_while_the_rest_fits() -> None:
    # Cut at 3 earlier; two items more still fit the room: the model starts at 3 again
    # (auto from scratch would start at 2: the prefix, and its cache, would move).
    assert plan_cut([5, 5, 5, 5, 5, 5], ANY, 15, RetentionRatio(0.5), first=3) == Fits(3)
    assert plan_cut([5, 5, 5, 5, 5, 5, 5], ANY, 15, RetentionRatio(0.5), first=3) == Fits(6)


def test_disabled_never_drops_and_reports_what_overflows() -> None:
    assert plan_cut([5, 5, 5], ANY, 12, "disabled") == TooLong(15, 12)
    assert plan_cut([5, 5, 5], ANY, 12, "disabled", first=2) == TooLong(15, 12)


def test_a_cut_never_leaves_a_function_output_without_its_call() -> None:
    can_start = [True, True, False, True]  # item 2 is the output of call 1
    assert plan_cut([4, 4, 4, 4], can_start, 9, "auto") == Fits(3)


@given(
    parts=st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=1, max_size=12),
    room=st.integers(-10, 200),
    ratio=st.sampled_from([None, 0.0, 0.3, 0.8, 1.0]),
    last=st.integers(0, 12),
)
def test_a_cut_only_moves_on_and_only_as_far_as_it_must(
    parts: list[tuple[int, bool]], room: int, ratio: float | None, last: int
) -> None:
    tokens = [t for t, _ in parts]
    can_start = [s for _, s in parts]
    mode: Truncation = "auto" if ratio is None else RetentionRatio(ratio)
    plan = plan_cut(tokens, can_start, room, mode, last)
    assert isinstance(plan, Fits)  # only disabled fails
    start, n = min(last, len(tokens) - 1), len(tokens)
    assert start <= plan.first <= n - 1  # never back, and the latest item is read
    if sum(tokens[start:]) <= room:
        assert plan.first == start  # it fits from the last cut: the cut holds
        return
    target = room * (1.0 if ratio is None else ratio)
    if plan.first < n - 1:
        assert sum(tokens[plan.first :]) <= target and can_start[plan.first]
    earlier = plan.first - 1  # one item less dropped would not do
    assert earlier < start or sum(tokens[earlier:]) > target or not can_start[earlier]
    disabled = plan_cut(tokens, can_start, room, "disabled", last)
    assert disabled == (Fits(0) if sum(tokens) <= room else TooLong(sum(tokens), room))


def test_post_instructions_caps_the_room_after_the_instructions() -> None:
    assert room_after_instructions(10, 100, "auto") == 90
    assert room_after_instructions(10, None, "auto") is None
    capped = RetentionRatio(0.8, post_instructions=30, token_limits_sent=True)
    assert room_after_instructions(10, 100, capped) == 30
    assert room_after_instructions(10, 35, capped) == 25  # never above the context's
    assert room_after_instructions(10, None, capped) == 30


# --- the cut applied to prompts -------------------------------------------------------


def text_prompt(*words: int, instructions: str = "") -> Prompt:
    items = tuple(
        PromptItem(f"i{n}", "user" if n % 2 == 0 else "assistant", text="w " * count)
        for n, count in enumerate(words)
    )
    return Prompt(request_id="r", instructions=instructions, items=items)


def test_the_cut_is_kept_by_item_and_restarts_when_that_item_is_gone() -> None:
    small = ScriptedExecutor(context_tokens=12)
    cut = ContextCut()
    kept = cut.apply(text_prompt(5, 5, 5), small, RetentionRatio(0.5))
    assert [i.id for i in kept.items] == ["i2"]
    assert cut.first_id == "i2"
    grown = cut.apply(text_prompt(5, 5, 5, 5), small, RetentionRatio(0.5))
    assert [i.id for i in grown.items] == ["i2", "i3"]  # fits from i2: stays there
    early = cut.apply(text_prompt(5, 5, 5, 5, 5), small, RetentionRatio(0.5), keep=False)
    assert [i.id for i in early.items] == ["i4"] and cut.first_id == "i2"
    prompt = text_prompt(5, 5, 5, 5)
    gone = Prompt("r", "", tuple(i for i in prompt.items if i.id != "i2"))
    assert [i.id for i in cut.apply(gone, small, "auto").items] == ["i1", "i3"]


def test_an_explicit_input_starts_from_its_first_item_and_leaves_the_cut() -> None:
    small = ScriptedExecutor(context_tokens=12)
    cut = ContextCut()
    cut.apply(text_prompt(5, 5, 5), small, "auto")
    assert cut.first_id == "i1"
    own = cut.apply(text_prompt(2, 2, 2), small, "auto", conversation=False)
    assert len(own.items) == 3 and cut.first_id == "i1"


def test_the_answers_tokens_are_left_free_and_the_instructions_count() -> None:
    small = ScriptedExecutor(context_tokens=20)
    prompt = text_prompt(5, 5, 5)
    assert ContextCut().apply(prompt, small, "disabled") == prompt
    with pytest.raises(ContextTooLong, match="15 tokens after the instructions, over the 14"):
        ContextCut().apply(Prompt("r", "", prompt.items, max_output_tokens=6), small, "disabled")
    with pytest.raises(ContextTooLong):
        ContextCut().apply(text_prompt(5, 5, 5, instructions="a b c d e f"), small, "disabled")


def test_an_estimate_says_so_and_counts_audio_by_its_length() -> None:
    speech = PromptItem("a", "user", audio=np.zeros(24_000, np.int16))
    tokens = count_prompt(Prompt("r", "Be brief.", (speech,)))
    assert not tokens.exact
    assert tokens.items == (5 + 4,)  # a chat frame and a second of speech


# --- each mode through a session ------------------------------------------------------

# Each user turn is 8 words; each scripted reply ("I heard no audio in N items.") 7.
TURN = "one two three four five six seven eight"


@dataclass
class Turns:
    h: Harness

    async def say(self, text: str = TURN) -> dict[str, Any]:
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        await self.h.send({"type": "conversation.item.create", "item": item})
        await self.h.send({"type": "response.create"})
        await self.h.settle()
        return self.h.responses_done()[-1]

    def seen(self) -> int:
        """How many items the last prompt the model got held."""
        return len(self.h.scripted.prompts[-1].items)


@asynccontextmanager
async def session(
    truncation: Truncation | dict[str, Any], context: int | None = 30
) -> AsyncIterator[Turns]:
    async with Harness(ScriptedExecutor(context_tokens=context)) as h:
        sent = {"output_modalities": ["text"], "truncation": truncation}
        await h.send({"type": "session.update", "session": sent})
        yield Turns(h)


async def test_auto_drops_the_oldest_turns_of_a_small_context_and_never_fails() -> None:
    async with session("auto") as t:
        seen = []
        for _ in range(5):
            assert (await t.say())["status"] == "completed"
            seen.append(t.seen())
        # 8, 23, then 38 words of a 30-word context: the oldest turn goes (30 left), and
        # at every turn since the cut moves on again (auto cuts to the limit only).
        assert seen == [1, 3, 4, 4, 4]


async def test_a_retention_ratio_cuts_deeper_and_the_cut_holds_for_the_next_turns() -> None:
    async with session({"type": "retention_ratio", "retention_ratio": 0.5}) as t:
        seen = []
        for _ in range(6):
            assert (await t.say())["status"] == "completed"
            seen.append(t.seen())
        # Turn 3 overflows (38 > 30): cut to at most 15 words (the last answer and the
        # turn); turn 4 (30 words from there) starts at the same item; turn 5
        # overflows again.
        assert seen == [1, 3, 2, 4, 2, 4]
        prompts = t.h.scripted.prompts
        assert prompts[3].items[0].id == prompts[2].items[0].id


async def test_post_instructions_caps_the_conversation_without_any_context_limit() -> None:
    limits = {"post_instructions": 20}
    async with session(
        {"type": "retention_ratio", "retention_ratio": 1.0, "token_limits": limits}, context=None
    ) as t:
        await t.say()
        assert t.seen() == 1
        assert (await t.say())["status"] == "completed"
        assert t.seen() == 2  # 23 words over 20: the first turn goes, its answer stays


async def test_disabled_fails_the_response_that_does_not_fit_and_the_session_lives_on() -> None:
    async with session("disabled") as t:
        await t.say()
        await t.say()
        asked = len(t.h.scripted.prompts)
        done = await t.say()
        assert len(t.h.scripted.prompts) == asked  # the model was not asked
        assert done["status"] == "failed"
        error = done["status_details"]["error"]
        assert (error["type"], error["code"]) == (
            "invalid_request_error",
            "context_length_exceeded",
        )
        assert "38 tokens after the instructions, over the 30" in error["message"]
        assert done["output"] == []
        await t.h.send({"type": "session.update", "session": {"truncation": "auto"}})
        assert (await t.say())["status"] == "completed"
        assert t.seen() == 3  # 46 words: cut to the 23 that fit


class EarlyAnswers(ScriptedExecutor):
    """A small context, recording the prompts of the answers begun early."""

    def __init__(self) -> None:
        super().__init__(context_tokens=10)
        self.early: list[Prompt] = []

    def answer_early(self, prompt: Prompt) -> None:
        self.early.append(prompt)


async def test_an_answer_begun_early_is_cut_as_its_response_will_be() -> None:
    """Else its prompt would hold the items the response leaves out, and the response
    could never adopt it (server_vad begins one at the turn's last pause)."""
    executor = EarlyAnswers()
    async with Harness(executor) as h:
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": TURN}],
        }
        for _ in range(3):
            await h.send({"type": "conversation.item.create", "item": item})
        speech = load_wav("weather")
        await append_chunked(h, np.concatenate([silence(300), speech, silence(900)]))
        await h.settle()
    [asked_for] = executor.prompts
    assert len(asked_for.items) == 1  # 24 words of text and the turn: the turn alone fits
    assert executor.early and prompt_key(executor.early[-1]) == prompt_key(asked_for)
