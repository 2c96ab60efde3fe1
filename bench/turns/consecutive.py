"""Consecutive questions in a noisy room: the set that checks each question gets a turn
of its own.

Each item is three of the set's complete questions (all of them in order, wrapping
round) one after another, 1.5-3 s apart,
under continuous babble and pink noise (bench/turns/noise.py) at 10 or 5 dB SNR, from
before the first question to the end of the stream. Built from the corpus' own
questions (no synthesis of its own) and scored per question: a question has its own
turn when exactly one committed turn overlaps it and that turn overlaps no other
question; it is merged when its turn also holds another question, split when two or
more turns overlap it, missed when none does. The end of a question's own turn is
measured on the audio clock (audio_end_ms after the question's last sample).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.load.stats import pct
from bench.turns.corpus import Corpus, Item, Span
from bench.turns.score import Turn, overlaps
from models.base import PCM_RATE

SNRS_DB = {"consecutive10": 10.0, "consecutive5": 5.0}
SETS = list(SNRS_DB)
QUESTIONS_PER_ITEM = 3
ITEMS_PER_SET = 4  # 12 questions per SNR
GAP_MS = (1500, 3000)


def with_consecutive(corpus: Corpus) -> Corpus:
    """`corpus` with the consecutive sets appended (seeded by the corpus' seed)."""
    rng = random.Random(f"consecutive-{corpus.seed}")
    complete = [it for it in corpus.items if it.set == "complete"]
    items: list[Item] = []
    # Every question in the set's order, three at a time (wrapping round): each is asked.
    order = [complete[k % len(complete)] for k in range(ITEMS_PER_SET * QUESTIONS_PER_ITEM)]
    for name, snr in SNRS_DB.items():
        for i in range(ITEMS_PER_SET):
            asked = order[i * QUESTIONS_PER_ITEM : (i + 1) * QUESTIONS_PER_ITEM]
            gaps = [rng.randint(*GAP_MS) for _ in asked[1:]]
            items.append(_item(f"{name}-{i:02d}", name, asked, gaps, snr, rng.randrange(2**31)))
    return replace(corpus, items=corpus.items + items)


def _item(
    name: str, set_name: str, asked: list[Item], gaps: list[int], snr: float, seed: int
) -> Item:
    parts, spans, at = [], [], 0
    for k, question in enumerate(asked):
        if k:
            parts.append(np.zeros(gaps[k - 1] * PCM_RATE // 1000, np.int16))
            at += gaps[k - 1]
        parts.append(question.speech)
        spans.append((at, at + question.speech_ms))
        at += question.speech_ms
    text = " / ".join(q.text for q in asked)
    voices = ",".join(q.voice for q in asked)
    return Item(name, set_name, text, voices, 0, np.concatenate(parts), spans, snr, seed)


@dataclass(frozen=True)
class Questions:
    """One item's questions, each judged on the committed turns."""

    own: int
    merged: int
    split: int
    missed: int
    extra: int  # committed turns overlapping no question
    end_ms: list[float]  # per question with its own turn: turn end after the question's


def score_questions(turns: list[Turn], spans: list[Span]) -> Questions:
    committed = [t for t in turns if t.committed_t is not None]
    # Per question, the indices of the committed turns overlapping it.
    holding = [{i for i, t in enumerate(committed) if overlaps(t, a, b)} for a, b in spans]
    own = merged = split = missed = 0
    end_ms: list[float] = []
    for (_, end), held in zip(spans, holding, strict=True):
        if not held:
            missed += 1
        elif len(held) >= 2:
            split += 1
        elif sum(bool(held & other) for other in holding) >= 2:
            merged += 1
        else:
            own += 1
            last = committed[next(iter(held))].end_ms
            if last is not None:
                end_ms.append(float(last - end))
    extra = len(committed) - len(set().union(*holding))
    return Questions(own, merged, split, missed, extra, end_ms)


def summarize(scored: list[Questions]) -> dict[str, Any]:
    ends = [e for q in scored for e in q.end_ms]
    return {
        "questions": sum(q.own + q.merged + q.split + q.missed for q in scored),
        "own_turn": sum(q.own for q in scored),
        "merged": sum(q.merged for q in scored),
        "split": sum(q.split for q in scored),
        "missed": sum(q.missed for q in scored),
        "extra_turns": sum(q.extra for q in scored),
        "end_ms": {"n": len(ends), "p50": pct(ends, 50), "p90": pct(ends, 90)},
    }


def table_lines(report: dict[str, Any]) -> list[str]:
    """The consecutive sets' lines of the report's table (`mode_report`'s "questions")."""
    lines = []
    for mode in report["modes"]:
        for name, s in mode.get("questions", {}).items():
            end = s["end_ms"]
            p50, p90 = (f"{v:.0f}" if v is not None else "-" for v in (end["p50"], end["p90"]))
            lines.append(
                f"{mode['mode']} | {name} | {s['questions']} | {s['own_turn']} | {s['merged']}"
                f" | {s['split']} | {s['missed']} | {s['extra_turns']} | {p50}/{p90}"
            )
    if not lines:
        return []
    head = (
        "consecutive questions in noise: mode | set | questions | own turn | merged | split"
        " | missed | extra turns | turn end after the question p50/p90 (audio ms)"
    )
    return ["", head, *lines]
