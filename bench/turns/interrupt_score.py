"""Scoring what a client saw while the assistant talked and something was heard: pure
decisions over the item's events, then per mode and scenario kind.

For a backchannel, a burst, echo, a laugh, a breath or a cough any cancel of the
assistant's response is a false interruption, and any
`input_audio_buffer.speech_started` a false start (counted apart: a server that holds
speech_started back until speech qualifies changes the second, one that only defers
the cancel changes the first). For an interrupting sentence a response not cancelled
is a missed interruption; for one said over the assistant's echo ("talkover"), a
cancel before the sentence began is the echo's, a false one, counted apart. Reaction
time runs from the send of the chunk holding the injected sound's first sample to the
arrival of `response.done` with status cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.turns.score import p50_p90

# Nothing there should interrupt (the recorded set's own: bench/turns/real_interruptions.py).
FALSE_KINDS = ("backchannel", "burst", "echo", "backchannel-over-talk", "laugh", "breath", "cough")
# Laughter with words ("laugh-words") interrupts by its words.
TRUE_KINDS = ("sentence", "talkover", "laugh-words")


@dataclass(frozen=True)
class Heard:
    """One item's stream as the client saw it (monotonic seconds)."""

    first_delta_t: float | None  # the asked-for response's first audio delta
    onset_sent_t: float | None  # the chunk holding the injected sound's first sample
    speech_started_t: list[float] = field(default_factory=list)
    committed: int = 0  # input_audio_buffer.committed over the whole stream
    status: str | None = None  # the asked-for response's end; None: still talking
    done_t: float | None = None  # its response.done's arrival


@dataclass(frozen=True)
class Reaction:
    spoke: bool  # the assistant's audio arrived, so something could be injected
    cancelled: bool
    speech_started: int
    committed: int
    reaction_ms: float | None  # onset sent -> response.done cancelled, when after it
    talked_ms: float | None = None  # first audio delta -> response.done cancelled
    early: bool = False  # cancelled before the injected sound began


def react(heard: Heard) -> Reaction:
    cancelled = heard.status == "cancelled"
    reaction = None
    early = False
    if cancelled and heard.onset_sent_t is not None and heard.done_t is not None:
        if heard.done_t >= heard.onset_sent_t:
            reaction = (heard.done_t - heard.onset_sent_t) * 1000
        else:
            early = True
    return Reaction(
        spoke=heard.first_delta_t is not None,
        cancelled=cancelled,
        speech_started=len(heard.speech_started_t),
        committed=heard.committed,
        reaction_ms=reaction,
        talked_ms=(
            (heard.done_t - heard.first_delta_t) * 1000
            if cancelled and heard.done_t is not None and heard.first_delta_t is not None
            else None
        ),
        early=early,
    )


def summarize_kind(kind: str, reactions: list[Reaction]) -> dict[str, object]:
    """A mode's figures over one scenario kind; items where the assistant never spoke
    are counted apart and left out of the rest."""
    spoke = [r for r in reactions if r.spoke]
    cancelled = sum(r.cancelled for r in spoke)
    out: dict[str, object] = {
        "items": len(reactions),
        "no_assistant_audio": len(reactions) - len(spoke),
        "cancelled": cancelled,
        "speech_started_items": sum(r.speech_started > 0 for r in spoke),
        "speech_started_events": sum(r.speech_started for r in spoke),
        "turns_committed": sum(r.committed for r in spoke),
        "reaction_ms": p50_p90([r.reaction_ms for r in spoke if r.reaction_ms is not None]),
        "cancelled_after_audio_ms": p50_p90(
            [r.talked_ms for r in spoke if r.talked_ms is not None]
        ),
    }
    if kind in TRUE_KINDS:
        early = sum(r.early for r in spoke)
        out["missed"] = len(spoke) - cancelled
        out["cancelled_before_onset"] = early
    else:
        out["false_cancels"], out["false_speech_started"] = cancelled, out["speech_started_items"]
    return out


def _ms(value: object) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(report: dict[str, object]) -> str:
    """Per mode and scenario kind: cancels, starts, misses, reaction, commits."""
    lines = [
        "while the assistant speaks: cancelled = response.done cancelled (false for"
        " backchannel/burst/echo/laugh/breath/cough); started = items with"
        " input_audio_buffer.speech_started;"
        " reaction = injected sound's first chunk sent -> response.done cancelled, ms",
        "mode | scenario | items | cancelled | started | missed | reaction p50/p90"
        " | turns committed",
    ]
    modes = report["modes"]
    assert isinstance(modes, list)
    for mode in modes:
        if not mode["supported"]:
            lines.append(f"{mode['mode']} | {mode['note']}")
            continue
        for kind, s in mode["kinds"].items():
            spoke = s["items"] - s["no_assistant_audio"]
            missed = f"{s['missed']}/{spoke}" if "missed" in s else "-"
            if s.get("cancelled_before_onset"):
                missed += f" ({s['cancelled_before_onset']} cancelled before it began)"
            silent = f" ({s['no_assistant_audio']} without assistant audio)" * bool(
                s["no_assistant_audio"]
            )
            lat = s["reaction_ms"]
            lines.append(
                f"{mode['mode']} | {kind} | {s['items']}{silent} | {s['cancelled']}/{spoke}"
                f" | {s['speech_started_items']}/{spoke} | {missed}"
                f" | {_ms(lat['p50'])}/{_ms(lat['p90'])} | {s['turns_committed']}"
            )
    return "\n".join(lines)
