"""Where the time goes when recorded human voices interrupt, replayed offline.

Run from the repository root:  .venv/bin/python -m bench.turns.barge_trace

The recorded-voice interruption set (bench/turns/real_interruptions.py): each
interrupting sentence, backchannel, laugh, breath and cough is heard as the session
hears held speech (bench/turns/crowd.py's replay: Whisper every HEAR_EVERY_MS from
min_speech_ms, cached on disk) and decided by the engine's own held-speech object. Per
item: each hearing (ms of speech, transcript, sure or not, what it is weighed as, the
voice count at that point by the kurtosis and pitch clarity) and when the item
qualifies. The first word heard (`first_words_ms`: a hearing weighed as words,
whatever the voice count) against when it qualified says how much the recognizer costs
and how much the voice count adds. Each item's session knows its speaker's voice from
an earlier turn (engine/user_voice.py: the first other sentence of the same voice in
the set, if any; `--no-user`: none); the per-hearing voice column is the measures'
alone. Hearing compute time, the VAD's onset delay and the network are not in these
figures (the live run has them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.load.stats import pct
from bench.turns.crowd import HEARING_CACHE, Hearings, Replay, qualified_ms, replay_of
from bench.turns.earlier_turns import own_turn
from bench.turns.real_interruptions import make_real_scenarios
from bench.turns.scenarios import Scenario
from engine.interruption import Heard, InterruptionParams, voices_of, weigh
from engine.user_voice import VoiceProfile, profile_of

ROOT = Path(__file__).resolve().parents[2]


def trace(replay: Replay, params: InterruptionParams) -> list[dict[str, Any]]:
    """Each hearing weighed as the session weighs it, with the voice count there."""
    rows: list[dict[str, Any]] = []
    previous: frozenset[str] = frozenset()
    at = replay.kurtosis_at
    for h in replay.hearings:
        w = weigh(h.text, h.sure, previous, h.ms, params.backchannels)
        ms = h.ms if h.ms in at else max(at)
        k, clarity = at[ms], replay.clarity(ms)
        rows.append(
            {
                "ms": h.ms,
                "text": h.text,
                "sure": h.sure,
                "heard": w.heard.value,
                "kurtosis": round(k, 1),
                "clarity": round(clarity, 2),
                "voices": voices_of(k, params, clarity).value,
            }
        )
        previous = w.words
    return rows


def earlier_turn(item: Scenario, items: list[Scenario]) -> VoiceProfile | None:
    """The voice a session would have learned from an earlier turn of the item's
    speaker: the first other sentence of the same voice in the set (None: the set has
    none; the session then knows no voice)."""
    turn = own_turn(item, items)
    return None if turn is None else profile_of(turn)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--model", default="tiny.en")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "barge_trace.json")
    p.add_argument(
        "--no-user", action="store_true", help="no earlier turn: the session knows no voice"
    )
    args = p.parse_args(argv)
    from models.listening.hearing import WhisperHearing

    recognizer = WhisperHearing(args.model, threads=1, parallel=1)
    hearings = Hearings(recognizer.hear, HEARING_CACHE, args.model)
    params = InterruptionParams()
    out: list[dict[str, Any]] = []
    scenarios = make_real_scenarios(args.seed)
    for s in scenarios:
        replay = replay_of(s.audio, hearings.of(s.audio), hearings.tail)
        user = None if args.no_user else earlier_turn(s, scenarios)
        rows = trace(replay, params)
        first = next((r["ms"] for r in rows if r["heard"] == Heard.WORDS.value), None)
        out.append(
            {
                "name": s.name,
                "kind": s.kind,
                "voice": s.voice,
                "part": s.part,
                "qualified_ms": qualified_ms(replay, params, user),
                "user_voice": None if user is None else [user.level_db, user.kurtosis],
                "first_words_ms": first,
                "hearings": rows,
            }
        )
    hearings.save()
    recognizer.close()
    for kind in dict.fromkeys(r["kind"] for r in out):
        for part in ("dev", "held"):
            rs = [r for r in out if r["kind"] == kind and r["part"] == part]
            if not rs:
                continue
            q = [r["qualified_ms"] for r in rs if r["qualified_ms"] is not None]
            f = [r["first_words_ms"] for r in rs if r["first_words_ms"] is not None]
            print(
                f"{kind} {part}: {len(q)}/{len(rs)} qualified at {_p(q)} ms of speech;"
                f" first words heard at {_p(f)}"
            )
    for r in out:
        heard = " | ".join(_hearing(h) for h in r["hearings"][:8])
        print(r["name"], r["voice"], "q", r["qualified_ms"], "first", r["first_words_ms"], heard)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _p(values: list[float]) -> str:
    """p50/p90, or "-" for none."""
    return f"{pct(values, 50):.0f}/{pct(values, 90):.0f}" if values else "-"


def _hearing(h: dict[str, Any]) -> str:
    unsure = "" if h["sure"] else "?"
    measures = f"{h['kurtosis']}, {h['clarity']}"
    return f"{h['ms']}:{h['text']!r}{unsure}={h['heard']}/{h['voices']}({measures})"


if __name__ == "__main__":
    sys.exit(main())
