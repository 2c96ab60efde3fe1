"""The first spoken chunk of a reply: its first clause, cut by a pure function of the
text so far, the same however the text is streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.speech.first_clause import FIRST_MAX_WORDS, FIRST_MIN_WORDS, first_clause_end
from models.speech.sentences import sentences_of, split_sentences, split_speakable


def chunks_of(text: str) -> list[str]:
    """Every piece of a whole reply, as the speaker gets them."""
    pieces, rest = split_speakable(text, first=True)
    return [*pieces, rest.strip()] if rest.strip() else pieces


def streamed(tokens: list[str]) -> list[str]:
    """What sentences_of does with a reply arriving token by token."""
    pieces: list[str] = []
    rest, first = "", True
    for token in tokens:
        done, rest = split_speakable(rest + token, first=first)
        first = first and not done
        pieces += done
    return [*pieces, rest.strip()] if rest.strip() else pieces


def tokens(text: str) -> list[str]:
    """Roughly how a language model's tokenizer streams text: words with their
    leading space, punctuation apart."""
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        lead = " " if i else ""
        core = word.rstrip(",.;:!?")
        out += [lead + core, *word[len(core) :]] if core else [lead + word]
    return [t for t in out if t]


@pytest.mark.parametrize(
    ("text", "chunks"),
    [
        # A clause mark once there are FIRST_MIN_WORDS words; the rest stays whole.
        (
            "Sure, I can do that for you, no problem at all. Next one, here.",
            ["Sure, I can do that for you,", "no problem at all.", "Next one, here."],
        ),
        ("It rains today; bring an umbrella.", ["It rains today; bring an umbrella."]),
        (
            "Here is the plan: we leave at noon.",
            ["Here is the plan:", "we leave at noon."],
        ),
        (
            "Well, I think that is right \u2014 the sky is blue.",
            ["Well, I think that is right \u2014", "the sky is blue."],
        ),
        (
            "Well, I think that is right - the sky is blue.",
            ["Well, I think that is right -", "the sky is blue."],
        ),
        # Before a clause-opening conjunction.
        (
            "The capital of France is Paris because it was chosen.",
            ["The capital of France is Paris", "because it was chosen."],
        ),
        # No mark by FIRST_MAX_WORDS: forced at a phrase boundary, never after "a".
        (
            "The weather today is mostly sunny with a light breeze.",
            ["The weather today is mostly sunny", "with a light breeze."],
        ),
        (
            "Set a timer for 10 minutes and have a great time.",
            ["Set a timer for 10 minutes", "and have a great time."],
        ),
        # A short first sentence is the first chunk; later sentences are whole.
        (
            "Sure. I will set a timer for ten minutes, starting now.",
            ["Sure.", "I will set a timer for ten minutes, starting now."],
        ),
        # Numbers and abbreviations are not clause marks.
        (
            "It costs 3,000 dollars, or 2.5 euros.",
            ["It costs 3,000 dollars,", "or 2.5 euros."],
        ),
        (
            "Fruit, e.g., apples and pears, is good.",
            ["Fruit, e.g., apples and pears,", "is good."],
        ),
        ("Meet me at 10:30 today.", ["Meet me at 10:30 today."]),
        # "and" joins words: no early cut before it.
        ("I like salt and pepper on chips.", ["I like salt and pepper on chips."]),
    ],
)
def test_the_first_clause_is_cut_and_the_rest_kept_whole(text: str, chunks: list[str]) -> None:
    assert chunks_of(text) == chunks


@pytest.mark.parametrize(
    "text",
    [
        "Sure, I can do that for you, no problem at all. Next one, here.",
        "The weather today is mostly sunny with a light breeze.",
        "It costs 3,000 dollars, or 2.5 euros, e.g., a lot.",
        "The capital of France is Paris because it was chosen. Yes.",
        "Set a timer for 10 minutes and have a great time.",
    ],
)
def test_token_by_token_gives_the_same_chunks(text: str) -> None:
    assert streamed(tokens(text)) == chunks_of(text)
    assert streamed(list(text)) == chunks_of(text)  # character by character


def test_a_clause_mark_waits_for_the_next_character() -> None:
    # "3," may yet become "3,000": nothing is cut until whitespace follows.
    assert split_speakable("It costs about 3,", first=True) == ([], "It costs about 3,")
    assert split_speakable("It costs about 3,000", first=True) == ([], "It costs about 3,000")
    assert split_speakable("It costs about 3, ", first=True) == (["It costs about 3,"], "")


def test_too_few_words_wait() -> None:
    short = " ".join(["word"] * (FIRST_MIN_WORDS - 1))
    assert split_speakable(short + ", more ", first=True) == ([], short + ", more ")
    assert first_clause_end(short + ",") is None


def test_a_forced_cut_comes_at_the_latest_at_the_maximum() -> None:
    words = " ".join(f"word{i}" for i in range(3 * FIRST_MAX_WORDS))
    pieces, rest = split_speakable(words, first=True)
    assert len(pieces[0].split()) == FIRST_MAX_WORDS
    assert pieces[1:] == [] and rest.startswith(f"word{FIRST_MAX_WORDS} ")


def test_a_forced_cut_never_leaves_a_phrase_hanging() -> None:
    text = "Please put the kettle on the stove for the tea now "
    end = first_clause_end(text.rstrip())
    assert end is not None
    chunk = text[:end].split()
    assert FIRST_MIN_WORDS <= len(chunk) <= FIRST_MAX_WORDS
    assert chunk[-1] not in {"the", "on", "for", "a"}


def test_after_the_first_chunk_only_sentences_are_cut() -> None:
    # The same clause that would start a reply is not cut later in it.
    text = "Sure, I can do that for you, no problem at all. "
    assert split_speakable(text, first=False) == split_sentences(text)
    assert split_speakable(text, first=False) == (
        ["Sure, I can do that for you, no problem at all."],
        "",
    )


async def test_sentences_of_speaks_the_first_clause_first() -> None:
    async def reply() -> AsyncIterator[str]:
        for token in tokens("The capital of France is Paris, a lovely city. It is big."):
            yield token

    said = [s async for s in sentences_of(reply())]
    assert said == ["The capital of France is Paris,", "a lovely city.", "It is big."]


WORDS = ["word", "a", "the", "and", "but", "with", "3,000", "e.g.,", "Mr.", "x" * 30]
MARKS = [" ", "  ", "\n", ",", ";", ":", "\u2014", " - ", ".", "!", '"', "\t"]
TEXTS = st.lists(st.sampled_from(WORDS + MARKS), max_size=60).map("".join)


@given(st.lists(TEXTS, max_size=8))
def test_split_streamed_equals_split_whole(chunks: list[str]) -> None:
    whole = "".join(chunks)
    assert streamed(chunks) == chunks_of(whole)


@given(TEXTS)
def test_the_first_chunk_loses_nothing_and_is_bounded(text: str) -> None:
    pieces, rest = split_speakable(text, first=True)
    assert "".join("".join([*pieces, rest]).split()) == "".join(text.split())
    if pieces:
        assert len(pieces[0].split()) <= FIRST_MAX_WORDS
