"""The partial transcript's policy (engine/partials.py): a word goes out once two
consecutive recognitions agree on it, each delta only new words, and the final
recognition adds the rest so the deltas add up to the completed transcript."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine.partials import (
    PARTIAL_EVERY_MS,
    PartialHeard,
    Partials,
    TurnPartials,
    Word,
    agree,
    delta_logprobs,
    delta_text,
    partial_due,
    remainder,
    words_of,
)
from engine.protocol.beta import to_beta
from engine.transcription import wire_logprobs
from models.base import Heard, TokenLogprob
from models.scripted import ScriptedExecutor
from tests.support.sdk_check import assert_beta_event, assert_sdk_event


def w(text: str) -> tuple[Word, ...]:
    return words_of(Heard(text))


def texts(words: tuple[Word, ...]) -> str:
    return " ".join(x.text for x in words)


def test_words_agreed_by_two_recognitions_go_out_and_the_tail_waits() -> None:
    state = TurnPartials("item_1")
    state, new = agree(state, w("What is"))
    assert new == ()  # nothing to agree with yet
    state, new = agree(state, w("What is the weather"))
    assert texts(new) == "What is"
    state, new = agree(state, w("What is the weather like"))
    assert texts(new) == "the weather"
    state, new = agree(state, w("What is the weather like today?"))
    assert texts(new) == "like"
    assert texts(state.sent) == "What is the weather like"


def test_agreement_ignores_case_and_edge_punctuation_and_keeps_the_newer_spelling() -> None:
    state, _ = agree(TurnPartials("i"), w("hey there"))
    state, new = agree(state, w("Hey, there you"))
    assert texts(new) == "Hey, there"


def test_a_recognition_that_contradicts_a_sent_word_adds_nothing_until_one_agrees() -> None:
    state = TurnPartials("i", sent=w("I want"), latest=w("I want to"))
    state, new = agree(state, w("I wanted to go"))
    assert new == ()
    state, new = agree(state, w("I wanted to go home"))
    assert new == ()  # agrees with the one before, but not with what was sent
    state, new = agree(state, w("I want to go home now"))
    assert new == ()  # "want" against "wanted": the prefix ends at the first word
    state, new = agree(state, w("I want to go home now please"))
    assert texts(new) == "to go home now"


def test_the_remainder_is_the_final_words_after_those_sent() -> None:
    assert texts(remainder(w("What is the"), w("What is the weather like today?"))) == (
        "weather like today?"
    )
    # A revised word counts as one either way; the sent word stands.
    assert texts(remainder(w("I want to"), w("I wanted to go"))) == "go"
    # The final recognition dropped a sent word.
    assert texts(remainder(w("set a timer for"), w("set timer for ten minutes"))) == ("ten minutes")
    assert texts(remainder((), w("tell me a joke"))) == "tell me a joke"
    assert remainder(w("tell me a joke"), w("Tell me a joke.")) == ()


@given(
    st.lists(st.sampled_from(["a", "b", "c", "the", "The,", "cat"]), max_size=8),
    st.lists(st.lists(st.sampled_from(["a", "b", "c", "the", "cat"]), max_size=8), max_size=6),
)
def test_the_deltas_always_add_up_to_the_completed_transcript(
    final: list[str], partials: list[list[str]]
) -> None:
    state = TurnPartials("i")
    deltas: list[str] = []
    for hypothesis in partials:
        first = not state.sent
        state, new = agree(state, w(" ".join(hypothesis)))
        if new:
            deltas.append(delta_text(new, first=first))
    rest = remainder(state.sent, w(" ".join(final)))
    if rest:
        deltas.append(delta_text(rest, first=not state.sent))
    transcript = delta_text(state.sent, first=True) + (
        delta_text(rest, first=not state.sent) if rest else ""
    )
    assert "".join(deltas) == transcript
    assert transcript.split() == [x.text for x in (*state.sent, *rest)]


def test_tokens_are_grouped_into_the_words_they_spell() -> None:
    tokens = tuple(TokenLogprob(t, -0.1) for t in ["What", " is", " the", " weat", "her", "?"])
    words = words_of(Heard("What is the weather?", tokens))
    assert [x.text for x in words] == ["What", "is", "the", "weather?"]
    assert [t.token for t in words[3].tokens] == [" weat", "her", "?"]
    # Tokens that do not spell the text: the words, without tokens.
    assert words_of(Heard("What is", tokens)) == (Word("What"), Word("is"))


def test_a_partial_is_due_after_each_half_second_of_new_speech_and_one_at_a_time() -> None:
    assert not partial_due(400, 0, running=False, every_ms=500)
    assert partial_due(500, 0, running=False, every_ms=500)
    assert not partial_due(900, 500, running=False, every_ms=500)
    assert not partial_due(2000, 500, running=True, every_ms=500)
    assert not partial_due(2000, 0, running=False, every_ms=0)  # turned off


def test_logprobs_take_the_sdks_shape_ga_and_beta() -> None:
    spelled = (TokenLogprob("Caf", -0.2), TokenLogprob("é", -0.5), TokenLogprob(" time", -0.01))
    tokens = wire_logprobs(delta_logprobs(words_of(Heard("Café time", spelled))))
    assert tokens[1] == {"token": "é", "logprob": -0.5, "bytes": [0xC3, 0xA9]}
    usage = {"type": "duration", "seconds": 1.0}
    for kind, text in (
        ("delta", {"delta": "Café time"}),
        ("completed", {"transcript": "Café time", "usage": usage}),
    ):
        event = {
            "type": f"conversation.item.input_audio_transcription.{kind}",
            "event_id": "event_1",
            "item_id": "item_1",
            "content_index": 0,
            "logprobs": tokens,
            **text,
        }
        ga = assert_sdk_event(event)
        assert [t.token for t in ga.logprobs] == ["Caf", "é", " time"]
        beta = to_beta(event)
        assert beta is not None
        assert_beta_event(beta)


def test_a_recognition_of_a_turn_committed_or_replaced_meanwhile_is_ignored() -> None:
    partials = Partials(ScriptedExecutor(), lambda message: None, PARTIAL_EVERY_MS)
    partials.announced("item_1")
    assert partials.heard(PartialHeard("item_1", Heard("set a"), 500)) == ()
    assert texts(partials.heard(PartialHeard("item_1", Heard("set a timer"), 1000))) == "set a"
    assert partials.heard(PartialHeard("item_0", Heard("set a timer for"), 1000)) == ()
    assert partials.heard(PartialHeard("item_1", None, 1500)) == ()  # the recognizer was busy
    assert texts(partials.take("item_1")) == "set a"
    assert partials.heard(PartialHeard("item_1", Heard("set a timer for"), 2000)) == ()
    partials.announced("item_2")
    assert partials.take("item_1") == ()  # another turn's words are not this one's
