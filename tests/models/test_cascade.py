"""The embedded CPU pipeline with its real models: speech in, speech out.

The models load once per module (a few seconds); each test builds its own
CascadeExecutor around them. Waiting here is on real model work, so the waits are
wall-clock with generous limits that only catch a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.speech import load_wav, silence
from models.cascade.llm import Ct2LanguageModel
from models.cascade.pipeline import CascadeExecutor
from models.cascade.text import ChatMessage
from models.speech.asr import WhisperRecognizer
from models.speech.files import ModelInfo
from models.speech.tts import PiperSynthesizer
from tests.support.audio import append_chunked, say
from tests.support.end_of_turn import FakeEndOfTurn
from tests.support.harness import Harness
from tests.support.hearing import QUESTIONS, wer


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("parley-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARLEY_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def asr() -> WhisperRecognizer:
    return WhisperRecognizer("tiny.en")


@pytest.fixture(scope="module")
def llm(cache: Path) -> Iterator[Ct2LanguageModel]:
    model = Ct2LanguageModel()
    yield model
    model.close()


@pytest.fixture(scope="module")
def tts() -> Iterator[PiperSynthesizer]:
    synthesizer = PiperSynthesizer()
    yield synthesizer
    synthesizer.close()


class StoryModel:
    """A language model that tells a long story at a model's pace (50 tokens/s), so
    a barge-in lands mid-answer whatever the real model would have said."""

    name = "story"
    calls_tools = False

    def __init__(self, *lengths: int) -> None:
        self.lengths = list(lengths)  # words per reply, in order; the last repeats

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        length = self.lengths.pop(0) if len(self.lengths) > 1 else self.lengths[0]
        for i in range(min(length, max_tokens)):
            if stop.is_set():
                return
            time.sleep(0.02)
            yield f" word{i}." if i % 8 == 7 else f" word{i}"

    def describe(self) -> ModelInfo:
        return ModelInfo("llm", self.name, "-", 0, "-", "test")

    def close(self) -> None:
        pass


def done_count(h: Harness) -> int:
    return len(h.responses_done())


async def test_spoken_questions_get_spoken_answers(
    asr: WhisperRecognizer, llm: Ct2LanguageModel, tts: PiperSynthesizer
) -> None:
    executor = CascadeExecutor(asr, llm, tts)
    heard: dict[str, str] = {}
    async with Harness(executor) as h:
        for n, name in enumerate(QUESTIONS, 1):
            await say(h, name)
            await h.wait_until(lambda n=n: done_count(h) == n)  # type: ignore[misc]
            item_id = h.of("input_audio_buffer.committed")[-1]["item_id"]
            heard[name] = executor.transcript(item_id) or ""
            response = h.responses_done()[-1]
            assert response["status"] == "completed", response
            item = h.session.conversation.get(response["output"][0]["id"])
            assert item is not None and item.audio is not None
            assert item.transcript.strip(), "the answer has text"
            assert len(item.audio) > 24_000 // 2, "the answer has audio"
            # The answer's audio says its own transcript.
            assert wer(item.transcript, asr.transcribe(item.audio, 24_000)) <= 0.35
        assert not h.errors()
    spoken = " ".join(QUESTIONS.values())
    recognized = " ".join(heard[name] for name in QUESTIONS)
    assert wer(spoken, recognized) <= 0.25, heard


async def test_truncation_counts_in_the_embedded_models_own_tokens(
    asr: WhisperRecognizer, llm: Ct2LanguageModel, tts: PiperSynthesizer
) -> None:
    """SmolLM2's 8192-token context, counted by its tokenizer: a text item over it
    fails a response when truncation is disabled, and the model is not asked."""
    assert llm.context_length == 8192
    assert llm.count_text("Hello world") == 2
    executor = CascadeExecutor(asr, llm, tts)
    long_text = " ".join(["weather"] * 8200)  # one token a word, and the spaces with them
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": long_text}],
    }
    async with Harness(executor) as h:
        session = {"output_modalities": ["text"], "truncation": "disabled"}
        await h.send({"type": "session.update", "session": session})
        await h.send({"type": "conversation.item.create", "item": item})
        await h.send({"type": "response.create"})
        await h.wait_until(lambda: done_count(h) == 1)
    done = h.responses_done()[0]
    assert done["status"] == "failed"
    error = done["status_details"]["error"]
    assert error["code"] == "context_length_exceeded"
    # 8200 tokens and the message's frame, over 8192 less the 120 of the answer and
    # the instructions' frame; exact: not said to be estimated.
    assert "takes 8205 tokens after" in error["message"], error
    assert "estimated" not in error["message"]
    assert not executor.stats.marks  # the model was never started


async def test_barge_in_stops_generation_and_synthesis(
    asr: WhisperRecognizer, tts: PiperSynthesizer
) -> None:
    executor = CascadeExecutor(asr, StoryModel(400, 16), tts, max_output_tokens=400)
    async with Harness(executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: len(h.of("response.output_audio.delta")) >= 1)
        story_id = h.of("response.created")[0]["response"]["id"]
        # The story may be the answer begun in the turn's final pause, adopted: while
        # it runs the model counts its tokens by the id it was begun under.
        model_id = executor.model_request_id(story_id)
        await say(h, "timer")  # the user talks over the story
        await h.wait_until(lambda: done_count(h) == 1)
        cancelled = h.responses_done()[0]
        assert cancelled["status"] == "cancelled"
        assert cancelled["status_details"]["reason"] == "turn_detected"
        await h.wait_until(lambda: not executor.running(story_id))
        tokens = executor.stats.tokens_by_request[model_id]
        sentences = executor.stats.sentences_by_request.get(model_id, 0)
        assert tokens < 400  # the story was cut short
        await h.wait_until(lambda: done_count(h) == 2)  # the interrupting question
        assert h.responses_done()[1]["status"] == "completed"
        # Seconds of model work later, nothing more was made for the story.
        assert executor.stats.tokens_by_request[model_id] == tokens
        assert executor.stats.sentences_by_request.get(model_id, 0) == sentences
        second = h.responses_done()[1]
        assert second["output"][0]["content"][0]["transcript"].startswith("word0")
        assert not h.errors()


async def test_two_sessions_answered_while_a_third_waits(
    asr: WhisperRecognizer, llm: Ct2LanguageModel, tts: PiperSynthesizer
) -> None:
    executor = CascadeExecutor(asr, llm, tts, concurrency=2)
    harnesses = [Harness(executor) for _ in range(3)]
    for h in harnesses:
        await h.__aenter__()
    try:
        for h, name in zip(harnesses, ["weather", "joke", "lights"], strict=True):
            await say(h, name)
        waited = False

        def all_answered() -> bool:
            nonlocal waited
            waited = waited or executor.queued > 0
            return all(done_count(h) == 1 for h in harnesses)

        await harnesses[0].wait_until(all_answered)
        assert waited, "the third session waited for a model slot"
        for h in harnesses:
            assert h.responses_done()[0]["status"] == "completed"
            assert not h.errors()
    finally:
        for h in harnesses:
            await h.__aexit__(None, None, None)


class CountingModel(StoryModel):
    """StoryModel that counts the replies it was asked for."""

    def __init__(self, *lengths: int) -> None:
        super().__init__(*lengths)
        self.calls = 0

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        self.calls += 1
        yield from super().stream(messages, max_tokens=max_tokens, stop=stop)


async def test_an_answer_begun_in_a_final_looking_pause_is_the_one_spoken(
    asr: WhisperRecognizer, tts: PiperSynthesizer
) -> None:
    # semantic_vad low: a near-certain score, then 750 ms of silence before the commit;
    # the answer begins in between, and the committed turn's response adopts it.
    model = CountingModel(12)
    executor = CascadeExecutor(asr, model, tts)
    end_of_turn = FakeEndOfTurn()
    low = {"type": "semantic_vad", "eagerness": "low"}
    async with Harness(executor, end_of_turn=end_of_turn) as h:
        await h.update_audio(input={"turn_detection": low})
        await h.settle()
        speech = np.concatenate([silence(300), load_wav("weather"), silence(300)])
        await append_chunked(h, speech)
        (await end_of_turn.asked(h)).set_result(0.99)
        await h.wait_until(lambda: executor.speculation.responses_started == 1)
        await h.wait_until(lambda: model.calls == 1)  # the model is answering already
        assert h.of("input_audio_buffer.committed") == []
        await append_chunked(h, silence(1000))
        await h.wait_until(lambda: done_count(h) == 1)
        response = h.responses_done()[0]
        assert response["status"] == "completed", response
        transcript = response["output"][0]["content"][0]["transcript"]
        assert transcript.split()[:2] == ["word0", "word1"]
        assert model.calls == 1, "the committed turn's answer is the one begun"
        stats = executor.speculation
        assert (stats.used, stats.responses_used, stats.responses_discarded) == (1, 1, 0)
        item_id = h.of("input_audio_buffer.committed")[0]["item_id"]
        assert "weather" in (executor.transcript(item_id) or "").lower()
        assert not h.errors()


async def test_a_spoken_answer_ends_after_its_sentences(
    asr: WhisperRecognizer, tts: PiperSynthesizer
) -> None:
    """With `max_sentences` the model stops writing once the answer holds that many:
    a 400-word story is two sentences of speech, and the response is complete."""
    executor = CascadeExecutor(asr, StoryModel(400), tts, max_output_tokens=400, max_sentences=2)
    async with Harness(executor) as h:
        await say(h, "weather")
        await h.wait_until(lambda: done_count(h) == 1)
        response = h.responses_done()[0]
        assert response["status"] == "completed", response
        transcript = response["output"][0]["content"][0]["transcript"]
        assert transcript.strip().endswith("word15.") and transcript.count(".") == 2
        rid = response["id"]
        # The model wrote up to " word16", where the second sentence was seen to end.
        assert executor.stats.tokens_by_request[rid] == 17
        assert not h.errors()
