"""Helpers for tests of held speech in a session (qualified interruption): an answer
held open, every message handled, background babble."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bench.speech import silence
from bench.turns.scenarios import make_scenarios
from models.scripted import ScriptedExecutor
from tests.support.audio import append_chunked
from tests.support.fake_hearing import FakeHearing
from tests.support.harness import Harness


async def handled(h: Harness) -> None:
    """Until every message is handled and its events read, for 20 loop turns in a row
    (the answer is held open by the test, so the session never goes idle)."""
    s, quiet = h.session, 0
    while quiet < 20:
        await h.steps(1)
        quiet = quiet + 1 if s.handled() and not len(s.outbox) else 0


async def speaking(h: Harness) -> str:
    """An answer that streams until the test lets it finish; its id."""
    await h.send({"type": "response.create"})
    await h.run_until(lambda: bool(h.of("response.created")))
    return str(h.of("response.created")[0]["response"]["id"])


def finish(executor: ScriptedExecutor) -> None:
    assert executor.chunk_gate is not None
    for _ in range(1000):
        executor.chunk_gate.release()


def babble() -> npt.NDArray[np.int16]:
    """1.5 s of five espeak-ng talkers over each other, as loud as a user: a babble burst
    of `make eval-turns`' interruption set."""
    return [it.audio for it in make_scenarios(15).items if it.text == "babble"][1]


async def babble_heard_as_words(h: Harness, hearing: FakeHearing) -> None:
    """A babble burst and the silence after it, in 100 ms appends, every hearing of it
    answered as it is asked with the sure words Whisper heard in such babble."""
    audio, step = np.concatenate([silence(300), babble(), silence(900)]), 24_000 // 10
    for at in range(0, len(audio), step):
        await append_chunked(h, audio[at : at + step])
        await handled(h)
        while hearing.answer("No, I don't."):
            await handled(h)


def squashed(pcm: npt.NDArray[np.int16], drive: float = 8.0) -> npt.NDArray[np.int16]:
    """A voice compressed as a telephone line or a loud recording compresses it: its
    kurtosis drops from espeak's ~11 to ~4, inside the default background-talk band."""
    x = np.tanh(pcm.astype(np.float64) / 32768.0 * drive) / np.tanh(drive)
    return (x * 16384.0).astype(np.int16)
