"""Voice to voice with every model stage remote, on loopback: what Parley adds around
the stages' own time.

  .venv/bin/python -m bench.remote_stages [--repeats N] [--fixtures a,b]
      [--asr-ms 100] [--llm-first-token-ms 150] [--tokens-per-s 30]
      [--tts-first-byte-ms 80] [--tts-speed 1.0] [--no-embedded]

The stages are the test fakes that speak the real wire formats, paced like real
servers (bench/stage_servers.py), in their own process: speech recognition answers
`asr_ms` after its request; the language model sends its first word
`llm_first_token_ms` after its request, then a word every 1/`tokens_per_s` (a fixed
reply of three sentences); speech synthesis sends its first bytes `tts_first_byte_ms`
after its request, then 24 kHz pcm at `tts_speed` times real time. Parley runs as
`parley serve` builds it (bench/probed_server.py --executor cascade) with
PARLEY_ASR_URL, PARLEY_LLM_URL and PARLEY_TTS_URL on them, in its own process; this
process is the client, over a real WebSocket, saying the speech fixtures at real time
as bench/voice_to_voice_ws.py does. Two sessions (modes):

- push_to_talk: turn detection off; at the end of speech the client commits the turn
  and asks for a response itself, as a talk button's release. Nothing of turn
  detection is on the path: v2v is the stages plus what Parley adds.
- server_vad: the server's default turn detection (500 ms of silence), with its
  speculation (engine/speculation.py: at 120 ms of silence it asks for the
  transcript and begins the answer).

Times are time.monotonic() in every process: the client's (end of speech: the send of
the chunk holding the last audible 10 ms; the first audio delta on arrival) and the
stage servers' stamps. Per turn, the critical path to the first audio delta:

  asr_request → asr_answer → llm_request → first word ... the word after the first
  clause (the clause is complete, and goes to synthesis, when the next word begins)
  → tts_request → tts first bytes → first audio delta at the client

- v2v_ms: end of speech → the first audio delta at the client;
- stages_ms, the stages' own time: (asr_answer - asr_request) + (the word completing
  the first clause - llm_request) + (first bytes - tts_request), as the servers
  stamped them; nominally asr_ms + llm_first_token_ms + words/tokens_per_s +
  tts_first_byte_ms (`nominal_stages_ms`);
- turn_ms, what is subtracted for turn detection: 0 with push_to_talk (the client
  ended the turn); with server_vad, end of speech → the transcription request reaching
  its server (the silence turn detection waited for before starting the stages:
  120 ms of pause by the VAD's reckoning for the speculation, else the commit, plus
  the few ms of Parley's own that it takes to send the request);
- overhead_ms = v2v_ms - stages_ms - turn_ms: Parley's, the sum of the gaps around
  the stages: before_asr_ms (with push_to_talk), asr_to_llm_ms, clause_to_tts_ms and
  tts_to_client_ms (the first bytes of audio to their delta at the client).

`--embedded` (the default) runs the same two sessions against the embedded cascade
(its own process, the models as `parley serve` loads them) as a reference row. Table
on stdout, JSON in bench/results/remote_stages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection

from bench.load.servers import Server, Target
from bench.machine import machine
from bench.results import print_table, write_results
from bench.speech import FIXTURES
from bench.stage_servers import REPLY, Pacing, StageServers
from bench.stage_servers import parser as pacing_parser
from bench.voice_to_voice_ws import (
    CHUNK_MS,
    RESPONSE_TIMEOUT_S,
    SERVER_START_S,
    Seen,
    WsRun,
    append_text,
    cascade_target,
    chunk_of,
    configure,
    fixtures_arg,
    led_in,
    measure_mode,
    quantile,
    take_answer,
)
from models.speech.first_clause import first_clause_end

RESULTS = Path(__file__).parent / "results" / "remote_stages.json"
REPEATS = 3
MODES = ("push_to_talk", "server_vad")
PACKAGES = ["fastapi", "uvicorn", "httpx", "websockets"]
# The figures of a run: name, what it is (the table's header).
FIGURES = {
    "v2v_ms": "v2v",
    "turn_ms": "turn",
    "stages_ms": "stages",
    "overhead_ms": "overhead",
    "before_asr_ms": "commit->asr req",
    "asr_to_llm_ms": "asr answer->llm req",
    "clause_to_tts_ms": "clause->tts req",
    "tts_to_client_ms": "tts first bytes->delta",
}
# The stages' own time, each (stages_ms is their sum).
STAGE_FIGURES = ("asr_stage_ms", "llm_stage_ms", "tts_stage_ms")
Stamp = tuple[str, float, str]


def nominal_stages_ms(pacing: Pacing) -> float:
    """The stages' own time by their settings: the clause is complete when the word
    after its last arrives."""
    reply = REPLY.split(" ")
    words = next(
        (n for n in range(1, len(reply)) if first_clause_end(" ".join(reply[:n])) is not None),
        len(reply) - 1,
    )
    return (
        pacing.asr_ms
        + pacing.llm_first_token_ms
        + words * 1000 / pacing.tokens_per_s
        + pacing.tts_first_byte_ms
    )


def _last(stamps: list[Stamp], step: str, before: float) -> Stamp | None:
    found = [s for s in stamps if s[0] == step and s[1] <= before]
    return found[-1] if found else None


def _after(stamps: list[Stamp], step: str, after: float) -> list[Stamp]:
    return [s for s in stamps if s[0] == step and s[1] >= after]


def critical_path(
    stamps: list[Stamp], t_end: float, t_delta: float, push_to_talk: bool
) -> dict[str, float] | None:
    """A turn's figures from the stage servers' stamps and the client's end of speech
    and first audio delta (ms); None when the stamps do not hold its path."""
    llm = _last(stamps, "llm_request", t_delta)
    if llm is None:
        return None
    asr_answer = _last(stamps, "asr_answer", llm[1])
    tts = next(iter(_after(stamps, "tts_request", llm[1])), None)
    if asr_answer is None or tts is None:
        return None
    asr = _last(stamps, "asr_request", asr_answer[1])
    first_chunk = next(iter(_after(stamps, "tts_chunk", tts[1])), None)
    tokens = [t for t in _after(stamps, "llm_token", llm[1]) if t[1] <= tts[1]]
    if asr is None or first_chunk is None or not tokens:
        return None
    # The clause is complete when the word after it begins (or the reply ends).
    words = len(tts[2].split())
    complete = tokens[min(words, len(tokens) - 1)][1]
    first_bytes = first_chunk[1]
    v2v = t_delta - t_end
    stages = (asr_answer[1] - asr[1]) + (complete - llm[1]) + (first_bytes - tts[1])
    turn = 0.0 if push_to_talk else asr[1] - t_end
    ms = {
        "v2v_ms": v2v,
        "turn_ms": turn,
        "stages_ms": stages,
        "overhead_ms": v2v - stages - turn,
        "asr_stage_ms": asr_answer[1] - asr[1],
        "llm_stage_ms": complete - llm[1],
        "tts_stage_ms": first_bytes - tts[1],
        "before_asr_ms": asr[1] - t_end,
        "asr_to_llm_ms": llm[1] - asr_answer[1],
        "clause_to_tts_ms": tts[1] - complete,
        "tts_to_client_ms": t_delta - first_bytes,
    }
    return {k: round(v * 1000, 1) for k, v in ms.items()}


async def turn_detection_off(ws: ClientConnection, seen: Seen) -> None:
    await configure(ws, seen, None)


async def say_and_commit(ws: ClientConnection, seen: Seen, run: WsRun, wav: np.ndarray) -> None:
    """The utterance at real time up to its end of speech; then the client ends the
    turn itself (commit, response.create) and waits for the answer's response.done."""
    loop = asyncio.get_running_loop()
    pcm, last_speech_chunk = led_in(wav)
    t0 = loop.time()
    for i in range(last_speech_chunk + 1):
        due = t0 + (i + 1) * CHUNK_MS / 1000
        await asyncio.sleep(max(0.0, due - loop.time()))
        run.max_send_lag_ms = max(run.max_send_lag_ms, (loop.time() - due) * 1000)
        await ws.send(append_text(chunk_of(pcm, i)))
    run.t_end = time.monotonic()
    committed_before = len(seen.committed)
    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    await ws.send(json.dumps({"type": "response.create"}))
    deadline = run.t_end + RESPONSE_TIMEOUT_S
    while time.monotonic() < deadline:  # the client's own poll: times are on arrival
        after = [r for t, r in seen.created if t >= run.t_end]
        if after and after[0] in seen.done:
            break
        await asyncio.sleep(0.02)
    if len(seen.committed) > committed_before:
        run.item_id = seen.committed[-1][1]
        run.turns_detected = 1
    take_answer(seen, run, run.t_end)


async def measure(
    server: Server, repeats: int, fixtures: list[str], stages: StageServers | None
) -> dict[str, list[WsRun]]:
    """Both modes on `server`; with `stages`, each run's critical path from their stamps."""
    out: dict[str, list[WsRun]] = {}
    for mode in MODES:
        if stages is not None:
            stages.stamps()  # what came before (the server's start) is not this mode's
        if mode == "push_to_talk":
            runs, _ = await measure_mode(
                server, mode, repeats, fixtures, say=say_and_commit, setup=turn_detection_off
            )
        else:
            runs, _ = await measure_mode(server, mode, repeats, fixtures)
        stamps = [] if stages is None else stages.stamps()
        for run in runs:
            path = None
            if stages is not None and run.t_end is not None and run.t_delta is not None:
                path = critical_path(stamps, run.t_end, run.t_delta, mode == "push_to_talk")
            if path is not None:
                run.stages |= path
            elif run.t_end is not None and run.t_delta is not None:
                run.stages["v2v_ms"] = round((run.t_delta - run.t_end) * 1000, 1)
        out[mode] = runs
    return out


def summarize(runs: list[WsRun]) -> dict[str, dict[str, float | None]]:
    """Per figure: p50 and p90 over the runs that completed."""
    good = [r for r in runs if r.error is None]
    out: dict[str, dict[str, float | None]] = {}
    for name in [*FIGURES, *STAGE_FIGURES]:
        values = [v for r in good if (v := r.stages.get(name)) is not None]
        out[name] = {
            "p50": round(quantile(values, 0.5), 1) if values else None,
            "p90": round(quantile(values, 0.9), 1) if values else None,
            "n": len(values),
        }
    return out


def table(summaries: dict[str, dict[str, dict[str, dict[str, float | None]]]]) -> None:
    def cell(d: dict[str, float | None]) -> str:
        return "/".join("-" if d[k] is None else f"{d[k]:.0f}" for k in ("p50", "p90"))

    rows = [
        [f"{config} {mode}", int(figures["v2v_ms"]["n"] or 0)]
        + [cell(figures[name]) for name in FIGURES]
        for config, modes in summaries.items()
        for mode, figures in modes.items()
    ]
    print_table("\nms p50/p90 | runs | " + " | ".join(FIGURES.values()), rows)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def remote_target(stages: StageServers) -> Target:
    argv = [sys.executable, "-m", "bench.probed_server", "parley", "--port", "{port}"]
    return Target(
        "parley-remote", [*argv, "--executor", "cascade"], False, "silero", env=stages.env()
    )


async def run(pacing: Pacing, repeats: int, fixtures: list[str], embedded: bool) -> dict[str, Any]:
    """Measure, print the table; the results."""
    before = machine(PACKAGES)
    stages = StageServers(pacing)
    configs: dict[str, dict[str, list[WsRun]]] = {}
    load: dict[str, dict[str, list[float]]] = {}  # the machine's, as each measured

    async def measured(name: str, target: Target, paced: StageServers | None) -> None:
        """One configuration's sessions against its own server, with the load."""
        server = Server(target)
        try:
            await server.ready(SERVER_START_S)
            load[name] = {"before": loadavg()}
            configs[name] = await measure(server, repeats, fixtures, paced)
            load[name]["after"] = loadavg()
        finally:
            server.stop()

    try:
        await measured("remote", remote_target(stages), stages)
    finally:
        stages.stop()
    if embedded:
        await measured("embedded", cascade_target(), None)
    summaries = {c: {m: summarize(r) for m, r in modes.items()} for c, modes in configs.items()}
    table(summaries)
    print(
        f"nominal stages: {nominal_stages_ms(pacing):.0f} ms; load average (1, 5, 15 min): {load}"
    )
    return {
        "machine": {
            **machine(PACKAGES),
            "loadavg_before": before["loadavg_1_5_15"],
            "loadavg_by_config": load,
        },
        "setup": {
            "pacing": asdict(pacing),
            "reply": REPLY,
            "nominal_stages_ms": round(nominal_stages_ms(pacing), 1),
            "modes": list(MODES),
            "repeats": repeats,
            "fixtures": fixtures,
            "server": "bench.probed_server parley --executor cascade (own process)",
            "stage_servers": "bench.stage_servers (own process)",
        },
        "figures": FIGURES,
        "quantiles_ms": summaries,
        "runs": {
            config: {
                mode: [{k: v for k, v in vars(r).items() if not k.startswith("t_")} for r in runs]
                for mode, runs in modes.items()
            }
            for config, modes in configs.items()
        },
    }


def parser() -> argparse.ArgumentParser:
    p = pacing_parser()
    p.prog = "python -m bench.remote_stages"
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--fixtures", type=fixtures_arg, default=FIXTURES)
    p.add_argument("--no-embedded", dest="embedded", action="store_false")
    p.add_argument("--output", type=Path, default=RESULTS)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    pacing = Pacing(**{k: getattr(args, k) for k in vars(Pacing())})
    results = asyncio.run(run(pacing, args.repeats, args.fixtures, args.embedded))
    write_results(args.output, results, 2)


if __name__ == "__main__":
    main()
