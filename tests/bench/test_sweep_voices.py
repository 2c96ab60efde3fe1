"""bench/turns/sweep.py over the recorded voices' sets, without the network: a small
stand-in for them (espeak-ng speech named into the real sets' names) goes through the
same path as the fetched sets, with a fake end-of-turn model; the figures per voice
set, eot-bench's among them, and the targets they are judged by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.turns.corpus import Corpus, Item
from bench.turns.noise import Pcm16
from bench.turns.sweep import main
from bench.turns.sweep_voices import set_name, shortfall, voice_targets
from bench.turns.synth import speak, trimmed
from models.base import PCM_RATE
from tests.support.espeak import require_espeak

PAUSE_MS = 800


def _ms(pcm: Pcm16) -> int:
    return len(pcm) * 1000 // PCM_RATE


def stand_in(seed: int, babble: list[Pcm16]) -> Corpus:
    """One complete turn and one hesitation (an 800 ms pause) in the development part."""
    whole = trimmed(speak("Could you book me a table for two tonight?", "en-us", 160))
    a = trimmed(speak("I would like to order,", "en-us", 160))
    b = trimmed(speak("a large pizza with mushrooms.", "en-us", 160))
    pause = np.zeros(PAUSE_MS * PCM_RATE // 1000, np.int16)
    joined = np.concatenate([a, pause, b])
    spans = [(0, _ms(a)), (_ms(a) + PAUSE_MS, _ms(joined))]
    items = [
        Item("stand-in-c", "real-complete-dev", "", "stand-in", 160, whole, [(0, _ms(whole))]),
        Item("stand-in-h", "real-hesitation-dev", "", "stand-in", 160, joined, spans),
    ]
    return Corpus(seed, items, babble)


class Fake:
    def __init__(self, p: float) -> None:
        self.p = p

    def __call__(self, pcm: Pcm16) -> float:
        return self.p


def sweep(tmp_path: Path, p: float, *grid: str) -> dict[str, Any]:
    require_espeak()
    out = tmp_path / "turn_curve.json"
    argv = ["--sets", "complete", "real-complete-dev", "real-hesitation-dev", "--limit", "1"]
    argv += ["--no-cache", "--out", str(out), "--candidate-pause-ms", "120"]
    argv += ["--confident-probability", "0.7", "--confident-silence-ms", "150"]
    argv += ["--rescore-ms", "none", *grid]
    assert main(argv, model=Fake(p), real_corpus=stand_in) == 0
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def test_an_unsure_model_keeps_the_pause_and_the_unsure_wait_bounds_the_end(
    tmp_path: Path,
) -> None:
    report = sweep(tmp_path, 0.05, "--unsure-wait-ms", "none", "1000")
    full, capped = report["curves"]
    assert [full["name"], capped["name"]] == [
        "semantic_vad/auto 120/0.7/150/-",
        "semantic_vad/auto 120/0.7/150/-/w1000",
    ]
    for c in (full, capped):
        assert set(c["sets"]) == {"complete", "real-complete-dev", "real-hesitation-dev"}
        assert set(c["eot_bench"]) == {"espeak", "real-dev"}
        real = c["eot_bench"]["real-dev"]
        assert (real["holds"], real["eots"]) == (1, 2)
        assert real["cutoff_at_action_delay"]["300ms"] == 0.0  # the pause held
        assert c["sets"]["real-hesitation-dev"]["cut_offs"] == 0

    # 0.05 against a 0.7 line: about 3.7 s of silence at the full wait, under 1 s capped.
    def p50(c: dict[str, Any]) -> float:
        return float(c["sets"]["real-complete-dev"]["latency_ms"]["committed"]["p50"])

    assert p50(full) > 3000
    assert PAUSE_MS < p50(capped) < 1200
    # server_vad cuts the 800 ms pause: every pause, at any action delay.
    reference = report["reference"]["eot_bench"]["real-dev"]
    assert reference["cutoff_at_action_delay"]["300ms"] == 1.0


def test_a_confident_model_cuts_the_pause_and_misses_the_hold_target(tmp_path: Path) -> None:
    report = sweep(tmp_path, 0.95, "--unsure-wait-ms", "none")
    (curve,) = report["curves"]
    assert curve["sets"]["real-hesitation-dev"]["cut_offs"] == 1
    assert curve["eot_bench"]["real-dev"]["cutoff_at_action_delay"]["300ms"] == 1.0
    assert curve["targets"]["real"] is False


def figures(cut: float | None, p50: float, p90: float) -> tuple[dict[str, Any], dict[str, Any]]:
    sets = {"real-complete-dev": {"latency_ms": {"committed": {"p50": p50, "p90": p90}}}}
    eot = {"real-dev": {"cutoff_at_action_delay": {"300ms": cut}}}
    return sets, eot


def test_the_recorded_voice_targets() -> None:
    assert set_name("espeak", "hesitation") == "hesitation"
    assert set_name("real-held", "snr10") == "real-snr10-held"
    assert voice_targets(*figures(0.15, 350, 1200), "real-dev") == dict.fromkeys(
        ("hold_cut_offs", "p50", "p90"), True
    )
    assert shortfall(*figures(0.15, 350, 1200)) == 0
    assert voice_targets(*figures(0.2, 351, 1200), "real-dev") == {
        "hold_cut_offs": False,
        "p50": False,
        "p90": True,
    }
    assert voice_targets(*figures(0.0, 300, 900), "real-held") == dict.fromkeys(
        ("hold_cut_offs", "p50", "p90"), False
    )  # no figures for that part: not met
    # The further past a limit, the further from the targets.
    assert 0 < shortfall(*figures(0.0, 300, 1300)) < shortfall(*figures(0.0, 300, 2600))
    assert shortfall(*figures(None, 300, 900)) == 1.0
    assert shortfall({}, {}) == 0.0  # no recorded voices swept


@pytest.mark.parametrize("wait", [600, 9000])
def test_the_unsure_wait_never_passes_openais(wait: int) -> None:
    from engine.semantic_turns import TurnCurve, max_wait_ms, silence_needed_ms

    curve = TurnCurve(120, 0.7, 150, unsure_wait_ms=wait)
    assert silence_needed_ms("auto", 0.0, curve) == min(wait, max_wait_ms("auto"))
    assert silence_needed_ms("high", 0.0, curve) == min(wait, max_wait_ms("high"))
    assert silence_needed_ms("auto", 0.9, curve) == 150
    # Below the line, the same linear scale as without the cap, up to the cap.
    uncapped = TurnCurve(120, 0.7, 150)
    assert silence_needed_ms("auto", 0.68, curve) == silence_needed_ms("auto", 0.68, uncapped)
    assert silence_needed_ms("auto", 0.68, curve) < silence_needed_ms("auto", 0.3, curve)
