"""Capacity under a realistic mix (`python -m bench.load.mix`): N sessions against
Parley with its default settings (Silero VAD, server_vad, qualified interruption with
the hearing recognizer, Smart Turn loaded), each a user who asks a question and then
mostly listens while the answer plays at real time, beside the `vad` floor (echo +
resampling + webrtcvad, bench/floors.py) with the same N and the same audio, in the
same run. What each user does while the answer plays, by its index (ROLES):

- listener (6 in 10): silent;
- backchannel (2 in 10): says "mm hmm" or "yeah" (espeak-ng) once;
- noise (1 in 10): a 400 ms burst of pink noise (a knock, a rustle);
- interrupter (1 in 10): asks its next question over the answer.

Per target: the server's CPU per append message (µs), its CPU %, what other processes
took, and for Parley how many turns the sessions got and how many answers were
interrupted, and the model requests refused as overloaded (/metrics). The ratio is
the floor's µs per message over Parley's: 1.0 is the floor's cost (issue 27 asks for
>= 0.7 at 100 sessions). A table on stdout and bench/results/mix.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import resource
import tempfile
import urllib.request
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from websockets.exceptions import ConnectionClosed

from bench.load.client import open_connections
from bench.load.servers import PACED, Server, Target, started, targets
from bench.machine import machine_ticks, tree_cpu_seconds
from bench.results import print_table, write_results
from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from bench.turns.noise import pink
from bench.turns.synth import speak

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROLES = (
    ("listener", "interrupter", "backchannel", "listener", "noise")
    + ("listener",) * 2
    + (
        "backchannel",
        "listener",
        "listener",
    )
)
CHUNK_MS = 20
ANSWER_MS = 4000  # silence after each question while its answer plays
CUE_MS = 1200  # a role's sound starts this long after its question's turn could end
Pcm16 = npt.NDArray[np.int16]


def role_of(index: int) -> str:
    return ROLES[index % len(ROLES)]


def cue(role: str, index: int, backchannels: list[Pcm16]) -> Pcm16 | None:
    """What a user says or makes while the answer plays."""
    if role == "backchannel":
        return backchannels[index % len(backchannels)]
    if role == "noise":
        rng = np.random.default_rng(index)
        return np.clip(pink(PCM_RATE * 2 // 5, rng) * 3000, -32768, 32767).astype(np.int16)
    if role == "interrupter":
        return load_wav(FIXTURES[(index + 1) % len(FIXTURES)])
    return None


def session_audio(index: int, backchannels: list[Pcm16]) -> Pcm16:
    """One cycle of a user's audio: a question, then the answer's time with its cue."""
    question = load_wav(FIXTURES[index % len(FIXTURES)])
    after = silence(ANSWER_MS)
    sound = cue(role_of(index), index, backchannels)
    if sound is not None:
        at = CUE_MS * PCM_RATE // 1000
        after[at : at + len(sound)] = sound[: len(after) - at]
    return np.concatenate([silence(300), question, after])


def appends(pcm: Pcm16) -> list[str]:
    n = PCM_RATE * CHUNK_MS // 1000
    return [
        json.dumps(
            {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(pcm[i : i + n].tobytes()).decode(),
            }
        )
        for i in range(0, len(pcm) - n + 1, n)
    ]


@dataclass
class Tally:
    """What one target's sessions got."""

    sent: int = 0
    turns: list[int] = field(default_factory=list)  # speech_started per session
    responses: int = 0
    cancelled: int = 0
    errors: list[str] = field(default_factory=list)


async def drive(server: Server, texts: list[list[str]], warmup_s: float, window_s: float) -> Any:
    """Every session streams its cycle at real time; the server's CPU over the window."""
    loop = asyncio.get_running_loop()
    conns = await open_connections(f"ws://127.0.0.1:{server.port}/v1/realtime", len(texts))
    tally, chunk_s = Tally(turns=[0] * len(conns)), CHUNK_MS / 1000
    t0 = loop.time() + 0.5
    window = (t0 + warmup_s, t0 + warmup_s + window_s)
    n_send = int((warmup_s + window_s) / chunk_s)

    async def send(i: int) -> None:
        start = t0 + chunk_s * i / len(conns)
        for k in range(n_send):
            await asyncio.sleep(max(0.0, start + k * chunk_s - loop.time()))
            tally.sent += window[0] <= loop.time() < window[1]
            await conns[i].send(texts[i][k % len(texts[i])])

    async def receive(i: int) -> None:
        with contextlib.suppress(ConnectionClosed):
            await read(i)

    async def read(i: int) -> None:
        async for message in conns[i]:
            if not isinstance(message, str) or message.endswith(('delta"}', '"ack"}')):
                continue  # audio deltas and the floor's acknowledgements: nothing to count
            kind = json.loads(message).get("type")
            if kind == "input_audio_buffer.speech_started":
                tally.turns[i] += 1
            elif kind == "response.done":
                tally.responses += 1
                tally.cancelled += '"status":"cancelled"' in message
            elif kind == "error":
                tally.errors.append(message[:200])

    receivers = [loop.create_task(receive(i)) for i in range(len(conns))]
    senders = [loop.create_task(send(i)) for i in range(len(conns))]
    await asyncio.sleep(max(0.0, window[0] - loop.time()))
    cpu0, ticks0, own0 = tree_cpu_seconds(server.proc.pid), machine_ticks(), own_cpu()
    await asyncio.sleep(max(0.0, window[1] - loop.time()))
    cpu1, ticks1, own1 = tree_cpu_seconds(server.proc.pid), machine_ticks(), own_cpu()
    await asyncio.gather(*senders, return_exceptions=True)
    await asyncio.sleep(1.0)  # the last turns' events
    await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    await asyncio.gather(*receivers, return_exceptions=True)
    wall, cpu = window_s, cpu1 - cpu0
    # CPU seconds of the whole machine, all cores, less the server and this generator.
    others = ticks1[0] - ticks0[0] - cpu - (own1 - own0)
    return {
        "target": server.target.name,
        "sessions": len(conns),
        "cpu_pct": round(100 * cpu / wall, 1),
        "cpu_us_per_msg": round(1e6 * cpu / tally.sent, 1) if tally.sent else None,
        "generator_cpu_pct": round(100 * (own1 - own0) / wall, 1),
        "others_pct": round(100 * max(0.0, others) / wall, 1),
        **asdict(tally),
    }


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def overloaded(port: int) -> float:
    """parley_model_requests_dropped_total{reason="overloaded"}, over both models."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = r'^parley_model_requests_dropped_total\{[^}]*reason="overloaded"[^}]*\} (\S+)'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def answer_wav(directory: Path) -> Path:
    """What every answer says: two fixtures, about 4 s, played at real time."""
    pcm = np.concatenate([load_wav("joke"), load_wav("timer")])
    path = directory / "answer.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(PCM_RATE)
        w.writeframes(pcm.tobytes())
    return path


def row_of(r: dict[str, Any]) -> list[object]:
    return [
        *(r["target"], r["sessions"], r["cpu_pct"], r["cpu_us_per_msg"], r["others_pct"]),
        *(sum(r["turns"]), r["responses"], r["cancelled"], r.get("overloaded", "-")),
    ]


async def run(n: int, warmup_s: float, window_s: float, out: Path | None) -> dict[str, Any]:
    backchannels = [speak(t, "en-us", 175) for t in ("mm hmm", "yeah")]
    texts = [appends(session_audio(i, backchannels)) for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="parley-mix-") as tmp:
        base = targets("silero")
        parley = Target(
            "parley-mix",
            [*base["parley"].argv, *PACED],
            False,
            "silero",
            env={**base["parley"].env, "PARLEY_SCRIPTED_SPEECH": str(answer_wav(Path(tmp)))},
        )
        async with started(parley, base["vad"]) as (p, floor):
            rows = [await drive(p, texts, warmup_s, window_s)]
            rows[0]["overloaded"] = await asyncio.to_thread(overloaded, p.port)
            rows.append(await drive(floor, texts, warmup_s, window_s))
    mine, base_us = rows[0]["cpu_us_per_msg"], rows[1]["cpu_us_per_msg"]
    result = {
        "sessions": n,
        "roles": {r: sum(role_of(i) == r for i in range(n)) for r in sorted(set(ROLES))},
        "window_s": window_s,
        "targets": rows,
        "ratio_to_floor": round(base_us / mine, 2) if mine and base_us else None,
    }
    print_table(
        "target | N | CPU % | CPU µs/msg | others % | turns | answers | interrupted | overloaded",
        [row_of(r) for r in rows],
    )
    print(f"ratio to the floor per message: {result['ratio_to_floor']}")
    if out is not None:
        write_results(out, result, 1)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load.mix", description=__doc__)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--window", type=float, default=15.0, help="seconds measured")
    parser.add_argument("--out", type=Path, default=RESULTS / "mix.json")
    args = parser.parse_args(argv)
    asyncio.run(run(args.sessions, args.warmup, args.window, args.out))


if __name__ == "__main__":
    main()
