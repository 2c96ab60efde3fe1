"""The consecutive-questions set: built from the corpus' questions, scored per question."""

from __future__ import annotations

import numpy as np

from bench.turns.consecutive import (
    GAP_MS,
    ITEMS_PER_SET,
    QUESTIONS_PER_ITEM,
    SETS,
    score_questions,
    summarize,
    with_consecutive,
)
from bench.turns.corpus import Corpus, Item
from bench.turns.score import Turn
from models.base import PCM_RATE

SPANS = [(1000, 3000), (5000, 7000), (9000, 11000)]


def done(start_ms: int, end_ms: int) -> Turn:
    return Turn(start_ms, end_ms, stopped_t=1.0, committed_t=1.0)


def test_one_turn_per_question_is_each_its_own() -> None:
    q = score_questions([done(700, 3500), done(4700, 7400), done(8700, 11600)], SPANS)
    assert (q.own, q.merged, q.split, q.missed, q.extra) == (3, 0, 0, 0, 0)
    assert q.end_ms == [500.0, 400.0, 600.0]


def test_a_turn_over_two_questions_merges_both() -> None:
    q = score_questions([done(700, 7400), done(8700, 11600)], SPANS)
    assert (q.own, q.merged) == (1, 2)


def test_split_missed_and_extra_turns_are_counted() -> None:
    turns = [done(700, 2000), done(2000, 3500), done(3600, 4200), done(8700, 11600)]
    q = score_questions(turns, SPANS)
    assert (q.own, q.merged, q.split, q.missed, q.extra) == (1, 0, 1, 1, 1)


def test_a_turn_never_committed_holds_no_question() -> None:
    q = score_questions([Turn(700), done(4700, 7400), done(8700, 11600)], SPANS)
    assert (q.own, q.missed) == (2, 1)
    assert summarize([q])["questions"] == 3


def test_items_join_the_corpus_questions_with_gaps_under_noise() -> None:
    question = np.full(PCM_RATE, 1000, np.int16)  # 1 s
    complete = [
        Item(f"complete-{i:02d}", "complete", f"q{i}", "en-us", 160, question, [(0, 1000)])
        for i in range(5)
    ]
    corpus = with_consecutive(Corpus(15, complete, []))
    made = [it for it in corpus.items if it.set in SETS]
    assert len(made) == len(SETS) * ITEMS_PER_SET
    for item in made:
        assert item.snr_db is not None
        assert len(item.segments) == QUESTIONS_PER_ITEM
        gaps = [b[0] - a[1] for a, b in zip(item.segments, item.segments[1:], strict=False)]
        assert all(GAP_MS[0] <= g <= GAP_MS[1] for g in gaps)
        assert item.speech_ms == item.segments[-1][1]
    again = with_consecutive(Corpus(15, complete, [])).items  # seeded: the same set
    assert [(it.name, it.segments, it.noise_seed) for it in again] == [
        (it.name, it.segments, it.noise_seed) for it in corpus.items
    ]
