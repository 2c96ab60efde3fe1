"""Audio reaches the shared VAD at a bounded pace (engine/ingest_pace.py): real-time
streams never wait, a flood past the burst waits its turn, and the turns it holds are
cut exactly as they are unpaced."""

from __future__ import annotations

import numpy as np
import pytest

from bench.speech import load_wav, silence
from engine.ingest_pace import IngestPace
from engine.limits import EngineLimits
from engine.observer import Observer
from tests.support.harness import Harness


def test_a_stream_in_real_time_never_waits() -> None:
    pace = IngestPace(speed=10, burst_s=60)
    assert all(pace.delay_s(i * 0.02, 0.02) == 0 for i in range(10 * 60 * 50))  # 10 min


def test_a_flood_waits_past_its_burst_at_the_budgets_speed() -> None:
    pace = IngestPace(speed=10, burst_s=60)
    assert pace.delay_s(100.0, 240.0) == pytest.approx(18.0)  # (240 - 60) / 10
    # More at once waits behind it: one second of audio is 0.1 s of budget.
    assert pace.delay_s(100.0, 1.0) == pytest.approx(18.1)
    # Scored at the budget's speed, it waits no longer than that.
    assert pace.delay_s(118.1, 1.0) == pytest.approx(0.1)


def test_after_a_rest_the_burst_is_back() -> None:
    pace = IngestPace(speed=10, burst_s=60)
    pace.delay_s(0.0, 240.0)
    assert pace.delay_s(24.0, 60.0) == 0  # the 240 s were scored by 24 s
    assert pace.delay_s(24.0, 1.0) == pytest.approx(0.1)


class Paced(Observer):
    def __init__(self) -> None:
        self.waits: list[float] = []

    def audio_paced(self, session_id: str, seconds: float) -> None:
        self.waits.append(seconds)


async def test_a_flood_is_paced_and_its_turns_are_cut_as_unpaced() -> None:
    # One append, two utterances.
    audio = np.concatenate(
        [silence(300), load_wav("weather"), silence(1200), load_wav("joke"), silence(1200)]
    )
    cut: dict[float, list[tuple[str, int | None, int | None]]] = {}
    observers: dict[float, Paced] = {}
    for speed in (0.0, 100.0):  # 0: unpaced
        observers[speed] = observer = Paced()
        limits = EngineLimits(ingest_speed=speed, ingest_burst_s=1.0)
        async with Harness(limits=limits, observer=observer) as h:
            await h.update_audio(input={"turn_detection": {"type": "server_vad"}})
            await h.append(audio)
            await h.wait_until(lambda: len(h.of("input_audio_buffer.committed")) == 2)
            await h.settle()
            cut[speed] = [
                (e["type"], e.get("audio_start_ms"), e.get("audio_end_ms"))
                for e in h.events
                if e["type"].startswith("input_audio_buffer.")
            ]
            assert not h.errors()
    assert cut[100.0] == cut[0.0]
    assert [t for t, _, _ in cut[0.0]].count("input_audio_buffer.committed") == 2
    assert observers[0.0].waits == []
    assert observers[100.0].waits == [pytest.approx((len(audio) / 24_000 - 1.0) / 100)]
