"""Qualified interruption's pure decisions (engine/interruption.py)."""

from __future__ import annotations

import pytest

from engine.interruption import (
    DEFAULT_BACKCHANNELS,
    SURE_ALONE_MS,
    Heard,
    InterruptionParams,
    Verdict,
    Voices,
    agree,
    confirmed,
    counted,
    heard_of,
    held_verdict,
    holds,
    laughed,
    needs_clarity,
    strong_words,
    voices_decide,
    voices_of,
    weigh,
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
        ("Ugh.", Heard.BACKCHANNEL),  # heard in a laugh, and in a gasp
        ("Eeeeeeeeeeeee", Heard.BACKCHANNEL),
        ("EHHH!", Heard.BACKCHANNEL),
        ("", Heard.NOISE),
        (" ... ", Heard.NOISE),
        ("Wait, stop.", Heard.WORDS),
        ("Yeah, but what about tomorrow?", Heard.WORDS),
        ("okay stop", Heard.WORDS),
    ],
)
def test_what_a_transcript_is(text: str, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS) is heard


@pytest.mark.parametrize(
    "text",
    # What Whisper tiny.en heard in recorded laughs (bench/turns/real_interruptions.py).
    ["Ha-ha.", "Hehehe.", "HAHA!", "Hahahahahahahaha", "Heh heh.", "He-he.", "ahaha", "Hah!"],
)
def test_laughter_alone_is_a_reaction_not_an_interruption(text: str) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS) is Heard.BACKCHANNEL
    assert strong_words(text, DEFAULT_BACKCHANNELS) == frozenset()


def test_laughter_with_words_interrupts_by_its_words() -> None:
    assert heard_of("Haha, no wait.", DEFAULT_BACKCHANNELS) is Heard.WORDS
    assert strong_words("Haha, no wait.", DEFAULT_BACKCHANNELS) == {"no", "wait"}
    assert heard_of("Hehe, stop.", DEFAULT_BACKCHANNELS, sure=False) is Heard.UNSURE


def test_a_hearing_of_laughter_alone_is_told_apart() -> None:
    for text in ("Ha-ha-ha", "Hehehe. Mm-hmm.", "Uh, hahaha", "(laughs) Ha-ha."):
        assert laughed(text, DEFAULT_BACKCHANNELS), text
    for text in ("Mm-hmm.", "Haha, no wait.", "", "Hello there"):
        assert not laughed(text, DEFAULT_BACKCHANNELS), text


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        ("(laughs)", Heard.NOISE),
        ("[LAUGHTER]", Heard.NOISE),
        ("*laughs*", Heard.NOISE),
        ("[BLANK_AUDIO]", Heard.NOISE),
        ("(sighs) Mm-hmm.", Heard.BACKCHANNEL),
        ("(laughs) Wait, stop.", Heard.WORDS),
    ],
)
def test_whispers_notes_of_sounds_are_no_words(text: str, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS) is heard


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        # Whisper spells bursts of breath or laughter as a stutter of lone letters.
        ("T-t-t", Heard.NOISE),
        ("P-s-s", Heard.NOISE),
        ("A-B-", Heard.NOISE),
        ("Uh-huh. C-p-p", Heard.BACKCHANNEL),
        ("I see", Heard.BACKCHANNEL),
        ("I-I want to ask", Heard.WORDS),
        ("T-t-today please", Heard.WORDS),
    ],
)
def test_lone_letters_are_no_words(text: str, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS) is heard


def test_the_list_is_the_clients() -> None:
    assert heard_of("go on", ("go on",)) is Heard.BACKCHANNEL
    assert heard_of("yeah", ("go on",)) is Heard.WORDS


def verdict(
    ms: int,
    *,
    ended: bool = False,
    heard: Heard | None = None,
    heard_ms: int = 0,
    pending: bool = False,
    can: bool = True,
) -> Verdict:
    return held_verdict(
        P, ms, ended=ended, heard=heard, heard_ms=heard_ms, pending=pending, can_classify=can
    )


def test_short_held_speech_waits_and_is_dropped_if_it_ends() -> None:
    assert verdict(100) is Verdict.WAIT
    assert verdict(100, ended=True) is Verdict.DROP  # a knock, a cough, "mm"


def test_held_speech_is_heard_as_it_grows_until_sure_words() -> None:
    assert verdict(260) is Verdict.CLASSIFY
    assert verdict(300, pending=True) is Verdict.WAIT  # one hearing at a time
    assert verdict(300, heard=Heard.NOISE, heard_ms=260) is Verdict.WAIT
    assert verdict(360, heard=Heard.NOISE, heard_ms=260) is Verdict.CLASSIFY  # 100 ms more
    assert verdict(400, heard=Heard.BACKCHANNEL, heard_ms=260) is Verdict.CLASSIFY
    assert verdict(400, heard=Heard.UNSURE, heard_ms=360) is Verdict.WAIT
    assert verdict(400, heard=Heard.WORDS, heard_ms=360) is Verdict.INTERRUPT


def test_ended_held_speech_is_heard_whole_before_it_is_dropped() -> None:
    assert verdict(400, ended=True, pending=True) is Verdict.WAIT
    assert verdict(400, ended=True, heard=Heard.UNSURE, heard_ms=300) is Verdict.CLASSIFY
    assert verdict(400, ended=True, heard=Heard.UNSURE, heard_ms=400) is Verdict.DROP
    assert verdict(600, ended=True, heard=Heard.BACKCHANNEL, heard_ms=600) is Verdict.DROP
    assert verdict(600, ended=True, heard=Heard.NOISE, heard_ms=600) is Verdict.DROP
    assert verdict(400, ended=True, heard=Heard.WORDS, heard_ms=300) is Verdict.INTERRUPT


def test_a_long_run_of_unsure_words_interrupts_but_not_backchannels_or_noise() -> None:
    assert verdict(1000, heard=Heard.UNSURE, heard_ms=950) is Verdict.INTERRUPT
    assert verdict(999, heard=Heard.UNSURE, heard_ms=950) is Verdict.WAIT
    assert verdict(1500, heard=Heard.BACKCHANNEL, heard_ms=1450) is Verdict.WAIT
    assert verdict(1500, heard=Heard.NOISE, heard_ms=1450) is Verdict.WAIT


def test_without_a_classifier_duration_alone_decides() -> None:
    assert verdict(240, can=False) is Verdict.WAIT
    assert verdict(250, can=False) is Verdict.INTERRUPT
    assert verdict(200, ended=True, can=False) is Verdict.DROP


def test_deciding_now_keeps_only_what_was_heard() -> None:
    """`final` (new speech needs the floor, or the buffer is full): words interrupt,
    speech never heard interrupts rather than be swallowed, the rest is dropped."""
    assert verdict(400, ended=True, pending=True, can=False) is Verdict.INTERRUPT
    assert verdict(400, ended=True, heard=Heard.WORDS, can=False) is Verdict.INTERRUPT
    assert verdict(400, ended=True, heard=Heard.UNSURE, heard_ms=300, can=False) is Verdict.DROP
    assert verdict(400, ended=True, heard=Heard.NOISE, heard_ms=400, can=False) is Verdict.DROP


@pytest.mark.parametrize(
    ("text", "sure", "heard"),
    [
        ("Wait, stop.", False, Heard.UNSURE),
        ("Yeah.", False, Heard.BACKCHANNEL),  # a backchannel need not be sure
        ("", False, Heard.NOISE),
    ],
)
def test_words_the_recognizer_is_not_sure_of(text: str, sure: bool, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS, sure=sure) is heard


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        ("them.", Heard.UNSURE),  # an "mm-hm" as Whisper tiny heard it
        ("Thank you.", Heard.UNSURE),  # Whisper's word for a cough
        ("of the", Heard.UNSURE),  # a fragment of background talk
        ("The F", Heard.UNSURE),  # single letters carry nothing either
        ("Yeah, and then", Heard.UNSURE),
        ("them, yeah", Heard.UNSURE),  # a weak word, then a backchannel: nothing strong
        ("of the okay", Heard.UNSURE),
        ("No.", Heard.WORDS),
        ("wait", Heard.WORDS),
        ("Hold on", Heard.WORDS),
        ("with stop", Heard.WORDS),  # one word that carries it is enough
    ],
)
def test_weak_words_alone_are_no_evidence_however_sure(text: str, heard: Heard) -> None:
    assert heard_of(text, DEFAULT_BACKCHANNELS, sure=True) is heard


def test_strong_words_are_what_can_carry_an_interruption() -> None:
    assert strong_words("No, that's wrong.", DEFAULT_BACKCHANNELS) == {"no", "wrong"}
    # "That's" is weak like "it's": Whisper hears it at the start of a laugh.
    assert strong_words("That's... Ugh. Eeee.", DEFAULT_BACKCHANNELS) == set()
    assert strong_words("Okay, and then the F. Mmm.", DEFAULT_BACKCHANNELS) == set()
    assert strong_words("Thank you. Off the door.", DEFAULT_BACKCHANNELS) == {"door"}


def test_a_hearing_is_weighed_with_the_one_before_it() -> None:
    no, wrong = frozenset({"no"}), frozenset({"wrong"})
    # Unsure words count when the hearing before shares one.
    assert confirmed(Heard.UNSURE, no, no, 300) is Heard.WORDS
    assert confirmed(Heard.UNSURE, no, wrong, 300) is Heard.UNSURE
    assert confirmed(Heard.UNSURE, no, frozenset(), 300) is Heard.UNSURE
    # Sure words alone need SURE_ALONE_MS of speech, or a hearing that agrees.
    assert confirmed(Heard.WORDS, no, frozenset(), SURE_ALONE_MS - 100) is Heard.UNSURE
    assert confirmed(Heard.WORDS, no, no, SURE_ALONE_MS - 100) is Heard.WORDS
    assert confirmed(Heard.WORDS, no, frozenset(), SURE_ALONE_MS) is Heard.WORDS
    # Backchannels and noise stay what they are.
    assert confirmed(Heard.BACKCHANNEL, frozenset(), no, 500) is Heard.BACKCHANNEL
    assert confirmed(Heard.NOISE, frozenset(), no, 500) is Heard.NOISE


def test_the_kurtosis_says_how_many_voices() -> None:
    p = InterruptionParams(crowd_kurtosis=6.5, one_voice_kurtosis=8.0)
    assert voices_of(1.5, p) is Voices.NONE  # a sine: tonal, no voice
    assert voices_of(2.99, p) is Voices.NONE
    assert voices_of(3.0, p) is Voices.MANY  # a Gaussian: many talkers summed
    assert voices_of(6.49, p) is Voices.MANY
    assert voices_of(6.5, p) is Voices.UNCLEAR
    assert voices_of(7.99, p) is Voices.UNCLEAR
    assert voices_of(8.0, p) is Voices.ONE
    assert voices_of(15.0, p) is Voices.ONE
    # Both at 0: always one voice, the count off (as before it existed).
    off = InterruptionParams(crowd_kurtosis=0.0, one_voice_kurtosis=0.0)
    assert voices_of(0.0, off) is Voices.ONE
    assert voices_of(1.5, InterruptionParams(crowd_kurtosis=2.0)) is Voices.NONE
    assert voices_of(2.5, InterruptionParams(crowd_kurtosis=2.0)) is Voices.UNCLEAR
    assert voices_of(3.0, off) is Voices.ONE


def test_a_clear_pitch_is_one_voice_whatever_the_kurtosis() -> None:
    p = InterruptionParams(crowd_kurtosis=6.0, one_voice_kurtosis=7.0, one_voice_clarity=0.8)
    assert voices_of(4.0, p) is Voices.MANY  # no clarity measured: the bands decide
    assert voices_of(4.0, p, 0.79) is Voices.MANY
    assert voices_of(4.0, p, 0.8) is Voices.ONE  # a recorded voice, level-compressed
    assert voices_of(6.5, p, 0.9) is Voices.ONE
    assert voices_of(2.5, p, 1.0) is Voices.NONE  # tonal: music is clearer than a voice
    off = InterruptionParams(one_voice_clarity=0.0)
    assert voices_of(4.0, off, 0.99) is Voices.MANY
    # The clarity is measured only where it could change the answer.
    assert needs_clarity(4.0, p) and needs_clarity(6.5, p)
    assert not needs_clarity(7.0, p) and not needs_clarity(2.5, p)
    assert not needs_clarity(4.0, off)


def test_words_count_by_how_many_voices_say_them() -> None:
    assert agree(frozenset({"no", "wait"}), frozenset({"no"}))
    assert not agree(frozenset({"no"}), frozenset({"even"}))
    # One voice: sure words count alone.
    assert counted(Heard.WORDS, False, Voices.ONE) is Heard.WORDS
    # Maybe several: only words two hearings in a row agree on.
    assert counted(Heard.WORDS, False, Voices.UNCLEAR) is Heard.UNSURE
    assert counted(Heard.WORDS, True, Voices.UNCLEAR) is Heard.WORDS
    # Several at once: background talk's words are unsure words, agreed or not.
    assert counted(Heard.WORDS, False, Voices.MANY) is Heard.UNSURE
    assert counted(Heard.WORDS, True, Voices.MANY) is Heard.UNSURE
    # No voice at all (music): whatever is heard in it is noise, sure or not.
    assert counted(Heard.WORDS, True, Voices.NONE) is Heard.NOISE
    assert counted(Heard.UNSURE, False, Voices.NONE) is Heard.NOISE
    # What is not words stays what it is.
    for heard in (Heard.UNSURE, Heard.BACKCHANNEL, Heard.NOISE):
        for voices in (Voices.ONE, Voices.UNCLEAR, Voices.MANY):
            assert counted(heard, True, voices) is heard
    assert counted(Heard.BACKCHANNEL, True, Voices.NONE) is Heard.BACKCHANNEL


def test_the_voices_decide_words_and_long_unsure_words() -> None:
    p = InterruptionParams(max_backchannel_ms=1000)
    assert voices_decide(Heard.WORDS, 200, p)
    assert not voices_decide(Heard.UNSURE, 999, p)
    assert voices_decide(Heard.UNSURE, 1000, p)  # about to interrupt by duration
    for heard in (Heard.BACKCHANNEL, Heard.NOISE, None):
        assert not voices_decide(heard, 5000, p)


def test_a_transcript_is_weighed_with_the_hearing_before() -> None:
    bc = DEFAULT_BACKCHANNELS
    agreed = weigh("No, that's", False, frozenset({"no"}), 300, bc)
    assert (agreed.heard, agreed.words, agreed.agreed) == (
        Heard.WORDS,
        frozenset({"no"}),
        True,
    )
    alone = weigh("No, that's", False, frozenset({"even"}), 300, bc)
    assert (alone.heard, alone.agreed) == (Heard.UNSURE, False)
    assert weigh("Mm-hmm.", True, frozenset(), 300, bc).heard is Heard.BACKCHANNEL
