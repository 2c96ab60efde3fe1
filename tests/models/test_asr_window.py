"""The cascade's recognizer in a short window (models/speech/asr.py): every word of
the spoken fixtures, the window it uses, and the 30 s path for a transcript that runs
away or audio too long for one window."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from bench.speech import FIXTURES, load_wav
from models.base import PCM_RATE, Heard, SpeechHint
from models.speech.asr import MAX_PROMPT_TOKENS, TURN_WINDOW_S, WhisperRecognizer, runs_away
from models.speech.whisper_files import WHISPER_RATE
from models.speech.whisper_window import MAX_WINDOW_S, window_s
from tests.support.hearing import QUESTIONS, spoken_words


@pytest.fixture(scope="module")
def asr() -> WhisperRecognizer:
    return WhisperRecognizer("tiny.en")


def whole_window(asr: WhisperRecognizer, pcm: np.ndarray) -> str:
    """What faster-whisper's `transcribe` (the 30 s window) makes of `pcm`."""
    audio = soxr.resample(pcm.astype(np.float32) / 32768.0, PCM_RATE, WHISPER_RATE)
    segments, _ = asr._model.transcribe(
        audio, beam_size=5, language="en", without_timestamps=True, vad_filter=False
    )
    return "".join(s.text for s in segments).strip()


@pytest.mark.parametrize("name", FIXTURES)
def test_every_word_of_a_question_is_heard(asr: WhisperRecognizer, name: str) -> None:
    """(The 30 s window heard "set a timer" as "Center timer".)"""
    heard = asr.transcribe(load_wav(name), PCM_RATE)
    assert spoken_words(heard) == spoken_words(QUESTIONS[name])


def test_the_sessions_prompt_goes_before_the_task_and_its_newest_words_are_kept(
    asr: WhisperRecognizer,
) -> None:
    plain = asr.decoder_prompt(None)
    tokenizer = asr._tokenizer
    assert plain == [*tokenizer.sot_sequence, tokenizer.no_timestamps]
    hinted = asr.decoder_prompt(SpeechHint(prompt="Parley, Kubernetes"))
    assert hinted == [tokenizer.sot_prev, *tokenizer.encode(" Parley, Kubernetes"), *plain]
    long = asr.decoder_prompt(SpeechHint(prompt="word " * 500 + "Parley"))
    assert len(long) == 1 + MAX_PROMPT_TOKENS + len(plain)
    assert tokenizer.decode(long[1 : 1 + MAX_PROMPT_TOKENS]).endswith("Parley")
    # tiny.en knows English only: another language is not asked of it.
    assert asr.language_of(SpeechHint(language="de")) == "en"
    assert asr.decoder_prompt(SpeechHint(language="de")) == plain


@pytest.mark.parametrize("name", FIXTURES)
def test_every_word_is_heard_with_a_prompt_too(asr: WhisperRecognizer, name: str) -> None:
    hint = SpeechHint("en", "A voice assistant answers questions about the weather and timers.")
    heard = asr.transcribe(load_wav(name), PCM_RATE, hint)
    assert spoken_words(heard) == spoken_words(QUESTIONS[name])


def test_a_turn_window_is_ten_seconds_at_least() -> None:
    assert window_s(WHISPER_RATE * 3, TURN_WINDOW_S) == TURN_WINDOW_S
    assert window_s(WHISPER_RATE * 12, TURN_WINDOW_S) == 13
    assert window_s(WHISPER_RATE * 60, TURN_WINDOW_S) == MAX_WINDOW_S


def test_a_loop_is_told_from_speech() -> None:
    assert runs_away("Who wants to take notes" + " to take notes" * 20 + ".")
    assert runs_away("Aren't they suing you? " * 3 + "Aren " * 20)
    assert not runs_away("What is the weather like in Paris today?")
    assert not runs_away("No, no, no, no.")  # a few repeats are speech
    assert not runs_away("")


def test_a_runaway_transcript_is_heard_again_in_the_whole_window(
    asr: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcm = load_wav("weather")
    loop = Heard("the the the " * 30)
    monkeypatch.setattr(asr, "_in_one_window", lambda audio, prompt, scored: loop)
    assert asr.transcribe(pcm, PCM_RATE) == whole_window(asr, pcm)


def test_audio_longer_than_a_window_goes_through_transcribe(
    asr: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(audio: np.ndarray, prompt: list[int], scored: bool) -> Heard:
        raise AssertionError("one window cannot hold it")

    monkeypatch.setattr(asr, "_in_one_window", never)
    pcm = np.concatenate([load_wav("weather"), np.zeros(PCM_RATE * MAX_WINDOW_S, np.int16)])
    assert "weather" in asr.transcribe(pcm, PCM_RATE).lower()


def test_scored_tokens_add_up_to_the_text_and_its_bytes(asr: WhisperRecognizer) -> None:
    """A character spread over tokens: its text comes with the token that ends it, and
    every token's own bytes add up to the transcript's UTF-8."""
    text = "Café naïve 日本 ok"
    ids = asr._tokenizer.encode(" " + text)
    tokens = asr._scored_tokens(ids, [0.5] * len(ids))
    assert "".join(t.token for t in tokens) == text
    spelled = b"".join(t.raw if t.raw is not None else t.token.encode() for t in tokens)
    assert spelled == text.encode()
    assert any(t.token == "" for t in tokens)  # part of 日
    assert all(t.logprob == pytest.approx(-0.693, abs=1e-3) for t in tokens)
