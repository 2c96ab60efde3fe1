"""Qualified interruption's pure decisions (engine/interruption.py)."""

from __future__ import annotations

import pytest

from engine.interruption import (
    DEFAULT_BACKCHANNELS,
    Heard,
    InterruptionParams,
    Verdict,
    heard_of,
    held_verdict,
    holds,
)

P = InterruptionParams(min_speech_ms=250, max_backchannel_ms=1000)


def test_only_speech_while_the_assistant_is_audible_is_held() -> None:
    assert holds(P, assistant_audible=True)
    assert not holds(P, assistant_audible=False)
    assert not holds(None, assistant_audible=True)
    assert not holds(InterruptionParams(enabled=False), assistant_audible=True)


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        ("Mm-hm.", Heard.BACKCHANNEL),
        ("uh huh", Heard.BACKCHANNEL),
        ("Yeah, yeah.", Heard.BACKCHANNEL),
        ("Okay. Right.", Heard.BACKCHANNEL),
        ("I see", Heard.BACKCHANNEL),
        ("Mmm, Mmm.", Heard.BACKCHANNEL),
        ("Uh-uh.", Heard.BACKCHANNEL),
        ("Hmm, okay.", Heard.BACKCHANNEL),
        ("Ummm", Heard.BACKCHANNEL),
        ("", Heard.NOISE),
        (" ... ", Heard.NOISE),
        ("Wait, stop.", Heard.WORDS),
        ("Yeah, but what about tomorrow?", Heard.WORDS),
        ("okay stop", Heard.WORDS),
    ],
)
def test_what_a_transcript_is(text: str, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS) is heard


def test_the_list_is_the_clients() -> None:
    assert heard_of("go on", ("go on",)) is Heard.BACKCHANNEL
    assert heard_of("yeah", ("go on",)) is Heard.WORDS


def verdict(
    ms: int,
    *,
    ended: bool = False,
    heard: Heard | None = None,
    asked: bool = False,
    can: bool = True,
) -> Verdict:
    return held_verdict(P, ms, ended=ended, heard=heard, asked=asked, can_classify=can)


def test_short_held_speech_waits_and_is_dropped_if_it_ends() -> None:
    assert verdict(100) is Verdict.WAIT
    assert verdict(100, ended=True) is Verdict.DROP  # a knock, a cough, "mm"


def test_long_enough_speech_is_classified_then_decided() -> None:
    assert verdict(260) is Verdict.CLASSIFY
    assert verdict(300, asked=True) is Verdict.WAIT  # the answer is not back yet
    assert verdict(300, asked=True, heard=Heard.WORDS) is Verdict.INTERRUPT
    assert verdict(300, asked=True, heard=Heard.BACKCHANNEL) is Verdict.WAIT
    assert verdict(600, ended=True, asked=True, heard=Heard.BACKCHANNEL) is Verdict.DROP
    assert verdict(600, ended=True, asked=True, heard=Heard.NOISE) is Verdict.DROP


def test_speech_too_long_for_a_backchannel_interrupts_whatever_it_was_heard_as() -> None:
    assert verdict(1000, asked=True, heard=Heard.BACKCHANNEL) is Verdict.INTERRUPT
    assert verdict(1000, asked=True) is Verdict.INTERRUPT


def test_without_a_classifier_duration_alone_decides() -> None:
    assert verdict(200, can=False) is Verdict.WAIT
    assert verdict(250, can=False) is Verdict.INTERRUPT
    assert verdict(200, ended=True, can=False) is Verdict.DROP


def test_speech_that_ended_while_being_classified_waits_for_the_answer() -> None:
    assert verdict(400, ended=True, asked=True) is Verdict.WAIT
    assert verdict(400, ended=True, asked=True, heard=Heard.WORDS) is Verdict.INTERRUPT
