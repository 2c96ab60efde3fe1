"""Each model stage's time on the way to the user (models/stage_timing.py): the
cascade times its recognizer, language model and synthesizer where it calls them,
on a clock the fake stages move, so every value is known exactly."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict

import numpy as np
import pytest

from models.base import ExecutorStats, OutputChunk, Prompt, PromptItem
from models.speech.transcripts import Transcripts, Wait
from models.stage_timing import StageTimer, StageTiming, StageTimings
from tests.support.clock import FakeClock
from tests.support.timed_stages import HearingModel, cascade

AUDIO = np.zeros(1600, np.int16)
RID = "resp_1"


def turn() -> PromptItem:
    return PromptItem("item_1", "user", audio=AUDIO)


def prompt(*items: PromptItem) -> Prompt:
    return Prompt(RID, "Be brief.", items)


def table(timings: list[StageTiming]) -> set[tuple[str, str, str, float, bool]]:
    return {
        (t.stage, t.where, t.phase, round(t.seconds, 6), t.speculative)
        for t in timings
        if t.request_id == RID
    }


async def test_each_stage_of_a_spoken_answer_is_timed_once() -> None:
    clock = FakeClock()
    ex, llm, _ = cascade(clock)
    item = turn()
    await ex.prepare(item)  # the turn committed: its recognition
    chunks = 0
    async for _ in ex.generate(prompt(item)):
        chunks += 1
        llm.more.set()  # the first sentence is heard: the model writes the rest
    assert chunks == 2
    assert table(ex.stage_timings(RID)) == {
        ("asr", "embedded", "transcript", 0.3, False),
        ("llm", "embedded", "first_token", 0.2, False),
        ("tts", "embedded", "first_audio", 0.05, False),
        ("llm", "embedded", "total", 0.75, False),  # 0.2, the first synthesis, 0.5
    }
    assert ex.stage_timings(RID) == []  # taken once
    # Asked again for the same turn, the model has its text at once.
    again = Prompt("resp_2", "Be brief.", (item,))
    async for _ in ex.generate(again):
        pass
    assert "asr" not in {t.stage for t in ex.stage_timings("resp_2")}
    await ex.aclose()


async def test_a_cancelled_answer_reports_no_audio_it_never_had() -> None:
    clock = FakeClock()
    ex, llm, tts = cascade(clock, held=True)
    item = turn()
    await ex.prepare(item)

    async def hear() -> list[OutputChunk]:
        return [chunk async for chunk in ex.generate(prompt(item))]

    heard = asyncio.ensure_future(hear())
    await tts.asked.wait()  # the first sentence is in the synthesizer
    await ex.abort(RID)  # the user barged in
    llm.more.set()  # the model sees the abort
    tts.go.set()  # its audio arrives too late to be heard
    assert await heard == []
    assert table(ex.stage_timings(RID)) == {
        ("asr", "embedded", "transcript", 0.3, False),
        ("llm", "embedded", "first_token", 0.2, False),
    }
    await ex.aclose()


async def test_a_response_without_a_spoken_turn_times_no_recognition() -> None:
    clock = FakeClock()
    ex, _, _ = cascade(clock, written=True)
    async for _ in ex.generate(prompt(PromptItem("item_1", "user", text="Weather?"))):
        pass
    assert {(t.stage, t.phase) for t in ex.stage_timings(RID)} == {
        ("llm", "first_token"),
        ("llm", "total"),
        ("tts", "first_audio"),
    }
    await ex.aclose()


async def test_a_speculative_transcript_counts_only_what_was_left_of_it() -> None:
    clock = FakeClock()
    transcripts = Transcripts(HearingModel(clock), clock=clock)
    item = turn()
    assert transcripts.speculate(item)  # at a pause, before the commit
    assert await transcripts.speculative_text(item.id)
    await transcripts.get(item)  # committed: adopts the text already heard
    assert transcripts.waits[item.id] == Wait(0.0, speculative=True)
    fresh = PromptItem("item_2", "user", audio=AUDIO)
    await transcripts.get(fresh)
    assert transcripts.waits[fresh.id] == Wait(pytest.approx(0.3), speculative=False)
    assert transcripts.where == "embedded"
    await transcripts.aclose()


def test_the_first_of_each_stage_and_phase_counts_and_an_adopter_shares_them() -> None:
    timings = StageTimings(keep=2)
    first = StageTiming("llm", "remote", "first_token", 0.4, "spec")
    timings.add(first)
    timings.add(StageTiming("llm", "remote", "first_token", 0.1, "spec"))  # a second round
    timings.share("resp", "spec")  # the response adopted the early answer
    total = StageTiming("llm", "remote", "total", 0.9, "spec")
    timings.add(total)
    assert timings.take("resp") == [first, total]
    timings.add(StageTiming("tts", "embedded", "first_audio", 0.1, "a"))
    timings.add(StageTiming("tts", "embedded", "first_audio", 0.1, "b"))
    timings.add(StageTiming("tts", "embedded", "first_audio", 0.1, "c"))
    assert timings.take("a") == []  # the oldest forgotten: never taken
    assert len(timings.take("c")) == 1


def test_a_timer_reports_each_phase_once_and_nothing_before_it_began() -> None:
    clock = FakeClock(10.0)
    seen: list[StageTiming] = []
    timer = StageTimer("tts", "remote", "r", seen.append, clock)
    timer.reached("first_audio")  # never handed a clause
    assert seen == []
    timer.begin()
    clock.t += 0.25
    timer.reached("first_audio")
    clock.t += 1.0
    timer.reached("first_audio")
    assert seen == [StageTiming("tts", "remote", "first_audio", 0.25, "r")]


async def test_an_adopted_early_answer_brings_its_times_and_its_speculative_transcript() -> None:
    clock = FakeClock()
    ex, llm, _ = cascade(clock, written=True)
    item = turn()
    ex.prepare_early(item)  # a pause: the turn is heard before it is committed
    assert await ex.speculative_text(item.id)
    ex.answer_early(Prompt("resp_early", "Be brief.", (item,)))
    assert await asyncio.to_thread(llm.asked.wait, 10)  # the answer is being written
    await ex.prepare(item)  # committed as it was
    chunks = [chunk async for chunk in ex.generate(prompt(item))]
    assert len(chunks) == 2
    assert ex.speculation.responses_used == 1
    timings = ex.stage_timings(RID)
    assert {(t.stage, t.phase) for t in timings} == {
        ("asr", "transcript"),
        ("llm", "first_token"),
        ("llm", "total"),
        ("tts", "first_audio"),
    }
    (heard,) = [t for t in timings if t.stage == "asr"]
    assert (heard.seconds, heard.speculative) == (0.0, True)  # no wait left
    await ex.aclose()


def test_stats_with_timings_stay_plain_data_a_benchmark_serves_as_json() -> None:
    stats = ExecutorStats()
    stats.timings.add(StageTiming("tts", "remote", "first_audio", 0.1, "r"))
    served = json.loads(json.dumps(asdict(stats)))  # bench/probed_server.py's /bench/executor
    assert served["timings"]["by_request"]["r"][0]["phase"] == "first_audio"
