"""Scoring one streamed item against the truth of its synthesis: pure decisions.

A committed turn belongs to the utterance when its span (audio_start_ms to
audio_end_ms) overlaps the speech; any other committed turn is an extra turn (noise
taken for speech). The utterance is cut off when two or more committed turns belong to
it (a hesitation split) or one was committed before the true end of speech had been
sent; it is missed when no committed turn belongs to it. Latencies are measured only
for turns neither cut off nor missed, from the last turn that belongs to the utterance.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.load.stats import pct

Span = tuple[int, int]  # ms on the stream's audio clock


@dataclass(frozen=True)
class Turn:
    """One turn as the client saw it: speech_started, speech_stopped, committed."""

    start_ms: int  # audio_start_ms
    end_ms: int | None = None  # audio_end_ms of speech_stopped
    stopped_t: float | None = None  # arrival of speech_stopped (monotonic s)
    committed_t: float | None = None  # arrival of input_audio_buffer.committed


@dataclass(frozen=True)
class Truth:
    spans: list[Span]  # the speech, on the stream's clock
    end_sent_t: float  # when the chunk holding the true end of speech was sent

    @property
    def start_ms(self) -> int:
        return self.spans[0][0]

    @property
    def end_ms(self) -> int:
        return self.spans[-1][1]


@dataclass(frozen=True)
class Outcome:
    turns: int  # committed turns belonging to the utterance
    extra: int  # committed turns belonging to no speech
    cut_off: bool
    missed: bool
    unended: int = 0  # turns started and never committed (a VAD held open by noise)
    audio_end_ms: float | None = None  # audio_end_ms - true end
    stopped_ms: float | None = None  # speech_stopped arrival - true end sent
    committed_ms: float | None = None  # committed arrival - true end sent


def overlaps(turn: Turn, start_ms: int, end_ms: int) -> bool:
    turn_end = turn.end_ms if turn.end_ms is not None else float("inf")
    return turn.start_ms < end_ms and turn_end > start_ms


def classify(turns: list[Turn], truth: Truth) -> Outcome:
    committed = [t for t in turns if t.committed_t is not None]
    own = [t for t in committed if overlaps(t, truth.start_ms, truth.end_ms)]
    extra, unended = len(committed) - len(own), len(turns) - len(committed)
    if not own:
        return Outcome(0, extra, cut_off=False, missed=True, unended=unended)
    early = any(t.committed_t is not None and t.committed_t < truth.end_sent_t for t in own)
    if len(own) >= 2 or early:
        return Outcome(len(own), extra, cut_off=True, missed=False, unended=unended)
    last = own[-1]
    assert last.committed_t is not None

    def since_end(t: float | None) -> float | None:
        return None if t is None else (t - truth.end_sent_t) * 1000

    return Outcome(
        1,
        extra,
        cut_off=False,
        missed=False,
        unended=unended,
        audio_end_ms=None if last.end_ms is None else float(last.end_ms - truth.end_ms),
        stopped_ms=since_end(last.stopped_t),
        committed_ms=since_end(last.committed_t),
    )


def p50_p90(values: list[float]) -> dict[str, float | None]:
    return {"n": len(values), "p50": pct(values, 50), "p90": pct(values, 90)}


def summarize(outcomes: list[Outcome]) -> dict[str, object]:
    """A mode's figures over one set's items."""

    def latency(get: str) -> dict[str, float | None]:
        return p50_p90([v for o in outcomes if (v := getattr(o, get)) is not None])

    return {
        "items": len(outcomes),
        "cut_offs": sum(o.cut_off for o in outcomes),
        "missed": sum(o.missed for o in outcomes),
        "extra_turns": sum(o.extra for o in outcomes),
        "unended_turns": sum(o.unended for o in outcomes),
        "clean": sum(not o.cut_off and not o.missed for o in outcomes),
        "latency_ms": {
            "audio_end": latency("audio_end_ms"),
            "speech_stopped": latency("stopped_ms"),
            "committed": latency("committed_ms"),
        },
    }
