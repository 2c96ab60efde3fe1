"""Speculative work during a pause: the pure step, the session's calls into the
executor, and the transcript cache adopting (or dropping) what was begun."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import numpy.typing as npt
import pytest

from bench.speech import load_wav, silence
from engine.speculation import (
    ANSWER_LEAD_MS,
    MAX_SPECULATED_MS,
    SPECULATE_AFTER_MS,
    Step,
    answer_early_due,
    speculation_step,
)
from engine.vad import ScriptedScorer
from models.base import Prompt, PromptItem, SpeechHint, prompt_key
from models.scripted import ScriptedExecutor
from models.speech.slots import StageSlots
from models.speech.transcripts import Transcripts
from tests.support.audio import append_chunked
from tests.support.end_of_turn import FakeEndOfTurn
from tests.support.harness import Harness

# --- the step ---------------------------------------------------------------------------


def test_begins_once_the_pause_is_long_enough() -> None:
    assert speculation_step(None, speculating=False) is None
    assert speculation_step(SPECULATE_AFTER_MS - 20, speculating=False) is None
    assert speculation_step(SPECULATE_AFTER_MS, speculating=False) is Step.BEGIN


def test_discards_when_the_user_goes_on_and_keeps_through_the_pause() -> None:
    assert speculation_step(SPECULATE_AFTER_MS + 300, speculating=True) is None
    assert speculation_step(None, speculating=True) is Step.DISCARD


def test_server_vad_answers_early_once_a_pause_nears_its_window() -> None:
    # The default 500 ms window: with the speculation, 300 ms before the window ends.
    assert answer_early_due(SPECULATE_AFTER_MS, 500, answered=False)
    assert not answer_early_due(SPECULATE_AFTER_MS - 20, 500, answered=False)
    assert not answer_early_due(None, 500, answered=False)  # in speech
    assert not answer_early_due(400, 500, answered=True)  # once per pause
    # A longer window: ANSWER_LEAD_MS before it ends, not at the speculation.
    assert not answer_early_due(SPECULATE_AFTER_MS, 1000, answered=False)
    assert answer_early_due(1000 - ANSWER_LEAD_MS, 1000, answered=False)
    # A window shorter than the lead: never before the speculation.
    assert not answer_early_due(100, 200, answered=False)
    assert answer_early_due(SPECULATE_AFTER_MS, 200, answered=False)


def test_a_turn_too_long_is_not_speculated_on() -> None:
    at = SPECULATE_AFTER_MS
    assert speculation_step(at, speculating=False, turn_ms=MAX_SPECULATED_MS) is Step.BEGIN
    assert speculation_step(at, speculating=False, turn_ms=MAX_SPECULATED_MS + 1) is None


# --- the session ------------------------------------------------------------------------


class Recording(ScriptedExecutor):
    """The scripted executor, recording the speculation hooks and preparations."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []  # (hook, item id, samples)
        self.responses: list[Prompt] = []  # answer_early's prompts
        self.hints: list[SpeechHint | None] = []  # of the turns prepared, early or not

    def prepare_early(self, item: PromptItem) -> None:
        assert item.audio is not None
        self.calls.append(("prepare_early", item.id, len(item.audio)))
        self.hints.append(item.hint)

    def discard_speculation(self, item_id: str) -> None:
        self.calls.append(("discard", item_id, 0))

    def answer_early(self, prompt: Prompt) -> None:
        self.responses.append(prompt)

    async def prepare(self, item: PromptItem) -> None:
        assert item.audio is not None
        self.calls.append(("prepare", item.id, len(item.audio)))
        self.hints.append(item.hint)
        await super().prepare(item)


async def a_turn_with_a_pause(executor: Recording, **transcription: str) -> str:
    """The user says a turn with a 350 ms pause inside it (under server_vad's 500 ms
    window), then ends it; the committed item's id. `transcription`: the session's
    `audio.input.transcription`, when given."""
    async with Harness(executor) as h:
        if transcription:
            await h.update_audio(input={"transcription": transcription})
        speech = load_wav("weather")
        pcm = np.concatenate([silence(300), speech, silence(350), speech, silence(900)])
        await append_chunked(h, pcm)
        await h.settle()
        [committed] = h.of("input_audio_buffer.committed")
        return str(committed["item_id"])


async def test_a_pause_the_user_speaks_through_is_discarded_and_the_final_one_used() -> None:
    executor = Recording()
    item_id = await a_turn_with_a_pause(executor)
    calls = executor.calls
    hooks = [hook for hook, _, _ in calls]
    # Every call is about the one turn.
    assert {i for _, i, _ in calls} == {item_id}
    # The pause inside the turn was speculated on, then discarded when speech went on.
    first = hooks.index("prepare_early")
    assert "discard" in hooks[first:]
    # The last speculation began in the final pause and is the committed turn's now:
    # nothing discards it, and the turn prepared is that audio plus silence.
    last = len(hooks) - 1 - hooks[::-1].index("prepare_early")
    assert hooks[last + 1 :] == ["prepare"]
    speculated, prepared = calls[last][2], calls[-1][2]
    assert len(load_wav("weather")) * 2 < speculated <= prepared


async def test_the_sessions_transcription_language_and_prompt_reach_every_recognition() -> None:
    executor = Recording()
    await a_turn_with_a_pause(executor)
    assert executor.hints and set(executor.hints) == {None}  # nothing asked: no hint

    executor = Recording()
    settings = {"model": "whisper-1", "language": "de", "prompt": "Parley, Kubernetes"}
    await a_turn_with_a_pause(executor, **settings)
    hint = SpeechHint("de", "Parley, Kubernetes")
    # Speculative recognitions in the pauses and the committed turn alike.
    assert {"prepare_early", "prepare"} <= {hook for hook, _, _ in executor.calls}
    assert set(executor.hints) == {hint}


async def test_clearing_the_buffer_discards_the_speculation() -> None:
    executor = Recording()
    async with Harness(executor) as h:
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(300)]))
        await h.settle()
        assert [hook for hook, _, _ in executor.calls] == ["prepare_early"]
        await h.send({"type": "input_audio_buffer.clear"})
        await h.settle()
        assert [hook for hook, _, _ in executor.calls] == ["prepare_early", "discard"]
        assert h.of("input_audio_buffer.committed") == []


LOW = {
    "type": "session.update",
    "session": {
        "type": "realtime",
        "instructions": "Be brief.",
        "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}},
    },
}


async def test_a_pause_that_looks_final_begins_the_answer_before_the_commit() -> None:
    # eagerness low: a near-certain score still waits for 750 ms of silence.
    executor, model = Recording(), FakeEndOfTurn()
    async with Harness(executor, end_of_turn=model) as h:
        await h.send(LOW)
        await h.settle()
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(300)]))
        asked = await model.asked(h)
        asked.set_result(0.99)
        await h.run_until(lambda: len(executor.responses) == 1)
        [speculated] = executor.responses
        item_id = h.of("input_audio_buffer.speech_started")[0]["item_id"]
        assert speculated.items[-1].id == item_id and speculated.items[-1].audio is not None
        assert speculated.instructions == "Be brief."
        assert h.of("input_audio_buffer.committed") == []  # nothing on the wire yet
        assert h.of("response.created") == []
        # The silence grows to 750 ms: the turn commits and its answer is asked for.
        await append_chunked(h, silence(600))
        await h.settle()
        [committed] = h.of("input_audio_buffer.committed")
        assert committed["item_id"] == item_id
        assert len(h.responses_done()) == 1
        assert ("discard", item_id, 0) not in executor.calls
        # The response asked for has the prompt the answer was begun on.
        [asked_for] = executor.prompts
        assert prompt_key(asked_for) == prompt_key(speculated)


def server_vad(silence_ms: int) -> dict[str, object]:
    detection = {"type": "server_vad", "silence_duration_ms": silence_ms}
    return {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
    }


async def test_server_vad_begins_the_answer_in_its_window_and_the_commit_adopts_it() -> None:
    """A 350 ms pause inside the turn (under the 500 ms window) begins an answer that the
    user's going on throws away; the final pause begins another, and the response asked
    for at the commit has its prompt."""
    executor = Recording()
    item_id = await a_turn_with_a_pause(executor)
    assert len(executor.responses) == 2  # one per pause, however many appends
    first, last = executor.responses
    assert first.items[-1].id == last.items[-1].id == item_id
    assert first.items[-1].audio is not None and last.items[-1].audio is not None
    assert len(first.items[-1].audio) < len(last.items[-1].audio)  # the whole turn
    assert ("discard", item_id, 0) in executor.calls  # the user went on
    [asked_for] = executor.prompts
    assert prompt_key(asked_for) == prompt_key(last)


async def test_a_longer_window_answers_early_only_near_its_end() -> None:
    """A 1000 ms window: a 400 ms pause begins the speculation but no answer (that
    waits until 620 ms); the final pause begins one."""
    executor = Recording()
    async with Harness(executor) as h:
        await h.send(server_vad(1000))
        await h.settle()
        speech = load_wav("weather")
        await append_chunked(h, np.concatenate([silence(300), speech, silence(400)]))
        await h.settle()
        assert [hook for hook, _, _ in executor.calls] == ["prepare_early"]
        assert executor.responses == []
        await append_chunked(h, np.concatenate([speech, silence(1400)]))
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert len(executor.responses) == 1


async def test_no_answer_is_begun_early_without_create_response() -> None:
    executor = Recording()
    async with Harness(executor) as h:
        update = server_vad(500)
        detection = update["session"]["audio"]["input"]["turn_detection"]  # type: ignore[index]
        detection["create_response"] = False
        await h.send(update)
        await h.settle()
        await append_chunked(h, np.concatenate([silence(300), load_wav("weather"), silence(900)]))
        await h.settle()
        assert len(h.of("input_audio_buffer.committed")) == 1
        assert executor.responses == []


async def test_an_unsure_pause_begins_no_answer_and_speech_going_on_discards() -> None:
    executor, model = Recording(), FakeEndOfTurn()
    async with Harness(executor, end_of_turn=model) as h:
        await h.send(LOW)
        await h.settle()
        speech = load_wav("weather")
        await append_chunked(h, np.concatenate([silence(300), speech, silence(300)]))
        (await model.asked(h)).set_result(0.2)
        await h.steps(20)
        assert executor.responses == []  # unsure: no answer begun
        # A second pause looks final, then the user goes on.
        await append_chunked(h, np.concatenate([speech, silence(300)]))
        (await model.asked(h)).set_result(0.99)
        await h.run_until(lambda: len(executor.responses) == 1)
        item_id = executor.responses[0].items[-1].id
        await append_chunked(h, speech)
        await h.run_until(lambda: executor.calls[-1] == ("discard", item_id, 0))
        assert h.of("input_audio_buffer.committed") == []


# --- the transcript cache ---------------------------------------------------------------


class GatedRecognizer:
    """Transcribes to the length of its input; each call waits until released."""

    def __init__(self) -> None:
        self.heard: list[int] = []
        self.release = threading.Event()

    def transcribe(
        self, pcm: npt.NDArray[np.int16], rate: int, hint: SpeechHint | None = None
    ) -> str:
        self.heard.append(len(pcm))
        assert self.release.wait(10)
        return f"{len(pcm)} samples"


def item(samples: int, item_id: str = "item_1") -> PromptItem:
    return PromptItem(item_id, "user", audio=np.ones(samples, dtype=np.int16), rate=24_000)


async def steps(n: int = 5) -> None:
    """Let the created tasks run their first steps (a recognition takes its slot)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_committed_turn_adopts_the_speculation() -> None:
    asr = GatedRecognizer()
    transcripts = Transcripts(asr, StageSlots("asr", 1))
    assert transcripts.speculate(item(4800))
    asr.release.set()
    # Committed with more (silent) audio after the pause: one recognition, of the pause.
    text = await transcripts.get(item(6000))
    assert text == "4800 samples"
    assert asr.heard == [4800]
    assert transcripts.known["item_1"] == "4800 samples"
    stats = transcripts.speculation
    assert (stats.started, stats.used, stats.discarded) == (1, 1, 0)
    await transcripts.aclose()


async def test_a_discarded_speculation_is_never_used() -> None:
    asr = GatedRecognizer()
    asr.release.set()
    transcripts = Transcripts(asr, StageSlots("asr", 1))
    assert transcripts.speculate(item(4800))
    transcripts.discard("item_1")
    assert await transcripts.get(item(9600)) == "9600 samples"
    assert "item_1" in transcripts.known
    stats = transcripts.speculation
    assert (stats.started, stats.used, stats.discarded) == (1, 0, 1)
    assert stats.wasted_audio_s == pytest.approx(0.2)
    await transcripts.aclose()


async def test_speculation_never_waits_for_a_busy_recognizer() -> None:
    asr = GatedRecognizer()
    transcripts = Transcripts(asr, StageSlots("asr", 1))
    committed = transcripts.start(item(2400, "item_0"))
    assert committed is not None
    await steps()  # item_0 holds the recognizer
    assert not transcripts.speculate(item(4800))
    assert transcripts.speculation.skipped_busy == 1
    asr.release.set()
    assert await committed == "2400 samples"
    assert transcripts.speculate(item(4800))
    await transcripts.aclose()


async def test_a_long_turn_is_recognized_once_committed_never_speculatively() -> None:
    # Speech, by the scripted VAD's word, for longer than a speculation may cover: the
    # shared recognizer would have run over all of it even had the user gone on.
    frames = (MAX_SPECULATED_MS + 1000) // 30
    executor = Recording()
    vad = ScriptedScorer(lambda i: 1.0 if 10 <= i < 10 + frames else 0.0)
    async with Harness(executor, vad=vad) as h:
        await append_chunked(h, silence(300 + (frames + 40) * 30))
        await h.settle()
        [committed] = h.of("input_audio_buffer.committed")
        assert [hook for hook, _, _ in executor.calls] == ["prepare"]
        assert executor.calls[0][1] == committed["item_id"]
