"""Soak: N sessions of random client behaviour for M minutes against one server.

Run from the repository root:  .venv/bin/python -m bench.soak  (or `make soak`)

Each session is a user who streams speech at real time (the fixtures of
bench/speech/) and waits for the answer while the microphone streams silence, talks
over answers (barge-in), switches to manual turns (commit + response.create),
clears its input, asks for out-of-band responses, creates, retrieves, deletes and
truncates items, sends session.update, sends bad input, and now and then drops its
TCP connection without a close frame or closes politely, and comes back. Random but
seeded: the same --seed makes the same choices.

By default the server is `parley serve --executor scripted` from this checkout,
started on a free loopback port (answers paced at real time); --url attaches to a
running server instead (--pid names its process for the memory samples).

Prints the server's RSS (all its processes) over time, errors by code, close codes,
latency percentiles (end of speech -> first audio delta; input_audio_buffer.committed
-> response.created; a manual commit sent -> response.created) and a verdict: the
RSS slope over the second half of the run (the first half is warm-up), flat when at
most --tolerance MB/min. Writes JSON to bench/results/soak.json (or --out). Exits 1
when RSS grows, on any internal_error, or on a traceback in the server's log.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench.machine import machine
from bench.soak.report import build, problems, text, write
from bench.soak.run import ROOT, Options, run
from bench.soak.verdict import TOLERANCE_MB_PER_MIN

PACKAGES = ["uvicorn", "websockets", "fastapi", "numpy", "onnxruntime"]


def parser() -> argparse.ArgumentParser:
    assert __doc__
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=50, help="concurrent users (default 50)")
    p.add_argument("--minutes", type=float, default=10.0, help="run time (default 10)")
    p.add_argument(
        "--executor",
        default="scripted",
        choices=["scripted", "cascade", "vllm", "openai_compat"],
        help="executor of the server started here (default scripted)",
    )
    p.add_argument("--url", help="attach to this server, e.g. ws://127.0.0.1:8000/v1/realtime")
    p.add_argument("--pid", type=int, help="with --url: the server's process, for its RSS")
    p.add_argument("--api-key", help="sent as a bearer key")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sample-s", type=float, help="seconds between RSS samples")
    p.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE_MB_PER_MIN,
        help=f"flat RSS: slope at most this many MB/min (default {TOLERANCE_MB_PER_MIN})",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak.json")
    return p


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        sessions=args.sessions,
        minutes=args.minutes,
        executor=args.executor,
        url=args.url,
        pid=args.pid,
        api_key=args.api_key,
        seed=args.seed,
        sample_s=args.sample_s,
        tolerance_mb_per_min=args.tolerance,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = options_from(args)
    outcome = asyncio.run(run(options))
    report = build(options, outcome, machine(PACKAGES))
    print(text(report))
    write(report, args.out)
    print(f"wrote {args.out}")
    return 1 if problems(report) else 0


if __name__ == "__main__":
    sys.exit(main())
