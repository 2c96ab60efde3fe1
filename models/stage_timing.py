"""How long each model stage of a response took, on the way to the user.

The executors that call Parley's own stages (the cascade's recognizer, language
model and synthesizer; the synthesizer of the text-then-speech executors) time them
where they call them, so one code times an embedded stage and a remote one alike.
A timing is kept by the model's request id until the engine takes the response's
(`Executor.stage_timings`) as it ends and hands them to its observer.

Every label is one of a few fixed words, so the metrics made of them stay few.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Stage = Literal["asr", "llm", "tts"]
Where = Literal["embedded", "remote"]
# transcript: asked for the turn's text → the text (asr); first_token: request → the
# first text piece or tool call, total: request → the reply's end (llm); first_audio:
# the first clause handed to it → its audio (tts). Each includes waiting for the
# stage's slot, as the user does.
Phase = Literal["transcript", "first_token", "total", "first_audio"]
PHASES: dict[Stage, tuple[Phase, ...]] = {
    "asr": ("transcript",),
    "llm": ("first_token", "total"),
    "tts": ("first_audio",),
}
WHERE: tuple[Where, ...] = ("embedded", "remote")

Clock = Callable[[], float]

# Requests whose timings nobody took (a speculation never adopted, a response that
# ended without them) are forgotten past this many.
KEEP_REQUESTS = 1024


@dataclass(frozen=True)
class StageTiming:
    stage: Stage
    where: Where
    phase: Phase
    seconds: float
    request_id: str
    # asr: the text came from the recognition begun at a pause before the turn was
    # committed: `seconds` is the wait of whoever asked for it (an early answer, begun
    # with it, waits for all of it; a commit after it finished, for nothing), spent
    # while the user's pause went on.
    speculative: bool = False


@dataclass
class StageTimings:
    """The timings of each request until taken; the first of each stage and phase
    counts (a response that runs the model again, after an MCP tool, keeps its
    first call's). A dataclass, as the stats it is part of (a benchmark reads them)."""

    keep: int = KEEP_REQUESTS
    by_request: OrderedDict[str, list[StageTiming]] = field(default_factory=OrderedDict)

    def add(self, timing: StageTiming) -> None:
        found = self._list(timing.request_id)
        if not any((t.stage, t.phase) == (timing.stage, timing.phase) for t in found):
            found.append(timing)

    def share(self, key: str, with_key: str) -> None:
        """`key`'s timings are `with_key`'s, past and future (a response that
        adopted a speculative one)."""
        self.by_request[key] = self._list(with_key)

    def take(self, key: str) -> list[StageTiming]:
        return list(self.by_request.pop(key, ()))

    def _list(self, key: str) -> list[StageTiming]:
        found = self.by_request.get(key)
        if found is None:
            found = self.by_request[key] = []
            while len(self.by_request) > self.keep:
                self.by_request.popitem(last=False)
        return found


@dataclass
class StageTimer:
    """One stage's times in one request, from `begin` (its creation unless given
    later); each phase is reported the first time it is reached."""

    stage: Stage
    where: Where
    request_id: str
    report: Callable[[StageTiming], None]
    clock: Clock
    started: float | None = None
    _reached: set[Phase] = field(default_factory=set)

    def begin(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def reached(self, phase: Phase) -> None:
        if self.started is None or phase in self._reached:
            return
        self._reached.add(phase)
        seconds = max(0.0, self.clock() - self.started)
        self.report(StageTiming(self.stage, self.where, phase, seconds, self.request_id))
