"""Turn-taking evaluation: when each turn-detection mode ends the user's turn.

Run from the repository root:  .venv/bin/python -m bench.turns  (or `make eval-turns`)

A seeded set made at run time by espeak-ng (cached in the temp dir per seed): complete
questions, sentences with a 600-900 ms mid-sentence hesitation, and the questions at
10 and 5 dB SNR under babble and pink noise, and three questions in a row under
continuous noise (bench/turns/consecutive.py, scored per question). Each item is
streamed at real time in 20 ms appends (microphone silence or noise before and after
the speech) through
`parley serve --executor scripted` started here, several streams at once, per mode:
server_vad with Silero and with webrtcvad, semantic_vad at each eagerness (reported as
not supported when the server refuses it). Prints per mode and set the cut-offs, missed
and extra turns and the end-of-turn latency after the true end of speech; writes JSON
to bench/results/turns.json (or --out). Beside it the same turns of recorded human
speech (--voices; fetched once from PyPI and Debian packages into the temp dir,
bench/turns/recorded.py), in a development and a held-back part, and eot-bench style
figures per mode (bench/turns/eot_metrics.py).

`--scenarios interruptions` measures instead what the server does with sound heard
while the assistant talks (bench/turns/interruptions.py): backchannels, non-speech
bursts, interrupting sentences and the assistant's own echo, by default with
server_vad (Silero, webrtcvad) and semantic_vad at auto; JSON to
bench/results/interruptions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from bench.turns import consecutive, interruptions
from bench.turns.corpus import SETS, Corpus, make_corpus
from bench.turns.earlier_turns import earlier_turns
from bench.turns.interrupt_score import table as interruption_table
from bench.turns.real_interruptions import make_real_scenarios
from bench.turns.real_sets import REAL_SETS, make_real_corpus
from bench.turns.recorded import FetchFailed
from bench.turns.report import build, table, write
from bench.turns.run import MODES, TURN_MODES, run
from bench.turns.scenarios import make_scenarios
from bench.turns.synth import EspeakMissing

ROOT = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    assert __doc__
    p = argparse.ArgumentParser(prog="python -m bench.turns", description=__doc__.split("\n")[0])
    p.add_argument(
        "--scenarios",
        choices=["turns", "interruptions"],
        default="turns",
        help="turns: when each mode ends the user's turn (default); interruptions: what it"
        " does with sound heard while the assistant talks",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        choices=list(MODES),
        help="default: every mode without a '+' for turns; server_vad/silero,"
        " server_vad/webrtc, semantic_vad/auto and server_vad/silero+instant, +aec and"
        " +aec3 for interruptions",
    )
    p.add_argument(
        "--voices",
        choices=["espeak", "real", "both"],
        help="espeak-ng sets, recorded human speech fetched from packages"
        " (bench/turns/real_sets.py, bench/turns/real_interruptions.py), or both side by"
        " side (default: both for turns, espeak for interruptions)",
    )
    p.add_argument(
        "--sets", nargs="+", choices=SETS + consecutive.SETS + REAL_SETS, help="default: every set"
    )
    p.add_argument("--limit", type=int, help="at most this many items per set (or kind)")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="stream this many times faster than real time (turns only)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="streams at once (default 4)")
    p.add_argument(
        "--earlier-turn",
        action="store_true",
        help="interruptions: each session first hears a turn of its user's, said while the"
        " assistant is silent (bench/turns/earlier_turns.py)",
    )
    p.add_argument("--out", type=Path, help="default bench/results/<scenarios>.json")
    return p


def main_interruptions(args: argparse.Namespace) -> int:
    which = args.voices or "espeak"
    try:
        made = make_scenarios(args.seed).items if which != "real" else []
        if which != "espeak":
            made += make_real_scenarios(args.seed)
    except (EspeakMissing, FetchFailed) as missing:
        print(missing, file=sys.stderr)
        return 2
    groups = dict.fromkeys((i.kind, i.part) for i in made)  # --limit per kind and part
    kinds = [[i for i in made if (i.kind, i.part) == g][: args.limit] for g in groups]
    modes = [MODES[name] for name in args.modes or interruptions.DEFAULT_MODES]
    t0 = time.monotonic()
    earlier = earlier_turns(made) if args.earlier_turn else None
    items = [i for k in kinds for i in k]
    results = asyncio.run(interruptions.run(modes, items, args.concurrency, earlier))
    report = interruptions.build(results, args.seed, args.concurrency, time.monotonic() - t0)
    print(interruption_table(report))
    out = args.out or ROOT / "bench" / "results" / "interruptions.json"
    write(report, out)
    print(f"{report['run_s']:.0f} s; wrote {out}")
    return 0


def voices(which: str, espeak: Corpus) -> Corpus:
    """The espeak set, the real-voice sets (noise from the espeak babble), or both."""
    if which == "espeak":
        return espeak
    real = make_real_corpus(espeak.seed, espeak.babble)
    items = real.items if which == "real" else espeak.items + real.items
    return Corpus(espeak.seed, items, espeak.babble)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.scenarios == "interruptions":
        return main_interruptions(args)
    try:
        corpus = voices(args.voices or "both", consecutive.with_consecutive(make_corpus(args.seed)))
    except (EspeakMissing, FetchFailed) as missing:
        print(missing, file=sys.stderr)
        return 2
    sets = args.sets or dict.fromkeys(i.set for i in corpus.items)
    items = [it for s in sets for it in [i for i in corpus.items if i.set == s][: args.limit]]
    modes = [MODES[name] for name in args.modes or TURN_MODES]
    t0 = time.monotonic()
    results = asyncio.run(run(modes, corpus, items, args.speed, args.concurrency))
    report = build(results, args.seed, args.speed, args.concurrency, time.monotonic() - t0)
    print(table(report))
    out = args.out or ROOT / "bench" / "results" / "turns.json"
    write(report, out)
    print(f"{report['run_s']:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
