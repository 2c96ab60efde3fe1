"""bench/turns/sweep.py: semantic_vad's curve replayed offline. A real hesitation
(espeak-ng, Silero) through the engine's detector with a fake end-of-turn model: a
confident score on the mid-sentence pause cuts the sentence, an unsure one does not,
a score that arrives after the speech resumed is ignored; and the choice of a curve
from the figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.turns.corpus import Corpus, Item
from bench.turns.replay import CHUNK, Replayable, ScoreCache, outcome, prepare, replay
from bench.turns.run import SEMANTIC_MARGIN_MS, SEMANTIC_MAX_WAIT_MS
from bench.turns.sweep import Row, curve_of, grid, main, pareto, preference, targets
from bench.turns.synth import speak, trimmed
from engine.semantic_turns import SemanticTurnDetector, SemanticVadParams, TurnCurve
from engine.turns import ServerVadParams, TurnDetector
from models.base import PCM_RATE
from models.listening.vad import SileroOnnxBackend
from tests.support.espeak import require_espeak

TRAIL_MS = SEMANTIC_MAX_WAIT_MS["auto"] + SEMANTIC_MARGIN_MS
PAUSE_MS = 800


@pytest.fixture(scope="module")
def hesitation() -> Replayable:
    require_espeak()
    a = trimmed(speak("I would like to order,", "en-us", 160))
    b = trimmed(speak("a large pizza with mushrooms.", "en-us", 160))
    pause = np.zeros(PAUSE_MS * PCM_RATE // 1000, np.int16)
    pcm = np.concatenate([a, pause, b])
    ms = [len(x) * 1000 // PCM_RATE for x in (a, pause, b)]
    spans = [(0, ms[0]), (ms[0] + ms[1], sum(ms))]
    item = Item("hesitation-00", "hesitation", "I would like to order... a large pizza", "en-us",
                160, pcm, spans)  # fmt: skip
    return prepare(Corpus(0, [item], []), item, TRAIL_MS, SileroOnnxBackend())


class Fake:
    """An end-of-turn model that always answers `p`, and keeps what it was given."""

    def __init__(self, p: float) -> None:
        self.p = p
        self.seen: list[int] = []  # samples at 16 kHz

    def __call__(self, pcm: np.ndarray) -> float:
        self.seen.append(len(pcm))
        return self.p


# Fixed here, not the engine's defaults (which the sweep is there to change).
CURVE = curve_of(200, 0.5, 250, None)


def semantic(curve: TurnCurve = CURVE) -> SemanticTurnDetector:
    return SemanticTurnDetector(SemanticVadParams(eagerness="auto"), scoring=True, curve=curve)


def test_a_confident_score_on_the_mid_pause_cuts_the_sentence(hesitation: Replayable) -> None:
    model = Fake(0.95)
    turns = replay(hesitation, semantic(), TRAIL_MS, ScoreCache(model))
    result = outcome(hesitation, turns, TRAIL_MS)
    assert result.cut_off and result.turns == 2
    # The first turn ended in the pause: before the second half began.
    assert turns[0].end_ms is not None and turns[0].end_ms < hesitation.spans[1][0]
    # Each scored window is the turn so far: more than the first half, at most 8 s.
    first_half = (hesitation.spans[0][1] - hesitation.spans[0][0]) * 16
    assert model.seen and all(first_half < n <= 8 * 16_000 for n in model.seen)


def test_an_unsure_score_keeps_the_sentence_whole(hesitation: Replayable) -> None:
    model = Fake(0.05)
    turns = replay(hesitation, semantic(), TRAIL_MS, ScoreCache(model))
    result = outcome(hesitation, turns, TRAIL_MS)
    assert (result.cut_off, result.missed, result.turns, result.extra) == (False, False, 1, 0)
    # Scored at the mid pause and at the end; the end waited for the long silence.
    assert len(model.seen) == 2
    assert result.audio_end_ms is not None and result.audio_end_ms > 2000
    # server_vad splits it: the pause is longer than its 500 ms window.
    plain = replay(hesitation, TurnDetector(ServerVadParams()), TRAIL_MS)
    assert outcome(hesitation, plain, TRAIL_MS).cut_off


def test_a_score_that_arrives_after_the_speech_resumed_is_ignored(
    hesitation: Replayable,
) -> None:
    late = replay(hesitation, semantic(), TRAIL_MS, ScoreCache(Fake(0.95)), score_delay_ms=2000)
    assert not outcome(hesitation, late, TRAIL_MS).cut_off


def test_the_same_candidate_instant_is_scored_once(hesitation: Replayable, tmp_path: Path) -> None:
    model = Fake(0.05)
    cache = ScoreCache(model, tmp_path / "scores.json")
    replay(hesitation, semantic(curve_of(200, 0.5, 250, None)), TRAIL_MS, cache)
    calls = cache.calls
    # Another curve with the same candidate pause asks about the same audio.
    replay(hesitation, semantic(curve_of(200, 0.9, 150, None)), TRAIL_MS, cache)
    assert cache.calls == calls == len(model.seen)
    cache.save()
    again = ScoreCache(Fake(0.99), tmp_path / "scores.json")
    replay(hesitation, semantic(curve_of(200, 0.5, 250, None)), TRAIL_MS, again)
    assert again.calls == 0
    # Rescoring asks again as the silence grows.
    replay(hesitation, semantic(curve_of(200, 0.5, 250, 200)), TRAIL_MS, cache)
    assert cache.calls > calls
    assert len(hesitation.pcm) % CHUNK == 0


def row(cut_offs: int, p50: float, noisy_missed: int = 0) -> Row:
    sets = {
        "hesitation": {"cut_offs": cut_offs},
        "complete": {"latency_ms": {"committed": {"p50": p50, "p90": p50 + 100}}},
        "snr5": {"missed": noisy_missed, "extra_turns": 0},
    }
    return Row(f"{cut_offs}/{p50}", "auto", curve_of(200, 0.5, 250, None), sets)


def test_the_front_and_the_choice_follow_the_targets() -> None:
    reference = Row("server_vad/silero", None, None, {"snr5": {"missed": 1, "extra_turns": 0}})
    rows = [row(0, 900), row(2, 500), row(2, 600), row(3, 300), row(5, 350), row(1, 450, 3)]
    front = pareto(rows, reference)
    assert [(r.cut_offs, r.p50) for r in front] == [(0, 900), (1, 450), (3, 300)]
    # None meets every target: at most 2 cut-offs and no worse under noise first.
    best = min(rows, key=lambda r: preference(r, reference))
    assert (best.cut_offs, best.p50) == (2, 500)
    met = targets(row(1, 450, 3), reference)
    assert met == {"cut_offs": True, "latency": False, "noisy": False}
    # None within the cut-offs target: the fewest cut-offs, then the lowest p50.
    over = [row(6, 350), row(5, 380), row(5, 420)]
    assert min(over, key=lambda r: preference(r, reference)).p50 == 380
    rows.append(row(2, 390))
    assert min(rows, key=lambda r: preference(r, reference)).p50 == 390
    assert len(grid()) == 3 * 4 * 4 * 3 * 2


def test_the_sweep_writes_its_report(tmp_path: Path) -> None:
    require_espeak()
    out = tmp_path / "turn_curve.json"
    argv = ["--limit", "1", "--sets", "complete", "hesitation", "--no-cache", "--out", str(out)]
    argv += ["--candidate-pause-ms", "200", "--confident-probability", "0.5"]
    argv += ["--confident-silence-ms", "250", "--rescore-ms", "none", "400"]
    argv += ["--unsure-wait-ms", "none"]
    assert main(argv, model=Fake(0.05)) == 0
    report = json.loads(out.read_text())
    assert report["reference"]["name"] == "server_vad/silero"
    assert [c["name"] for c in report["curves"]] == [
        "semantic_vad/auto 200/0.5/250/-",
        "semantic_vad/auto 200/0.5/250/400",
    ]
    for c in report["curves"]:
        assert set(c["sets"]) == {"complete", "hesitation"}
        assert c["sets"]["hesitation"]["cut_offs"] == 0  # never confident: never cut
    assert report["recommended"]["name"] in report["front"]["auto"]
