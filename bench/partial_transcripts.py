"""Partial input transcripts while the user speaks (engine/partials.py): how soon the
first partial text arrives after speech onset, and the CPU the partial recognitions
cost a session per second of speech.

Each clip (the espeak fixtures, two longer espeak sentences and LibriVox sentences
read by a person, bench/turns/recorded.py) streams at real time in 20 ms appends
into an in-process session with input transcription on and server_vad, on the
embedded Whisper (tiny.en int8, two threads). The first delta's arrival is timed
from when the clip's first word was "recorded"; the CPU is the process's CPU time
for the clip with partials, less the same clip without (PARLEY_PARTIAL_TRANSCRIPT_MS
0), per second of speech. One session at a time: the figures are one session's cost,
not its share of a loaded recognizer (partials only run on an idle one).

Run from the repository root:  .venv/bin/python -m bench.partial_transcripts
(or `make bench`). Prints a table and writes bench/results/partial_transcripts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.machine import machine
from bench.recognizing import RecognizingExecutor
from bench.results import print_table, write_results
from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from engine.limits import EngineLimits
from engine.partials import PARTIAL_EVERY_MS
from engine.protocol import parse_client_event
from engine.session import Session
from models.listening.vad import WebRtcVadBackend
from models.speech.asr import SpeechRecognizer, WhisperRecognizer

RESULTS = Path(__file__).parent / "results" / "partial_transcripts.json"
CHUNK_MS = 20
LEAD_MS = 300
TAIL_MS = 1200  # the silence that ends the turn (server_vad waits 500 ms)
LONGER = [
    "please turn off the lights in the kitchen and set a timer for ten minutes",
    "could you tell me what the weather will be like in Paris tomorrow afternoon",
]
LIBRIVOX = 5
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


@dataclass(frozen=True)
class Clip:
    name: str
    kind: str  # espeak or recorded
    pcm: npt.NDArray[np.int16]
    onset_ms: int  # the first word, in `pcm`
    speech_ms: int  # from the first word to the last


def clips(librivox: int) -> list[Clip]:
    out = []
    for name in FIXTURES:
        pcm = load_wav(name)
        out.append(_framed(name, "espeak", pcm, 0, len(pcm) * 1000 // PCM_RATE))
    try:
        from bench.turns.synth import speak

        for i, text in enumerate(LONGER):
            pcm = speak(text, "en-us", 160)
            out.append(_framed(f"sentence-{i + 1}", "espeak", pcm, 0, _ms(pcm)))
    except Exception as exc:  # espeak-ng missing: the fixtures still run
        print(f"no longer espeak sentences: {exc}")
    out.extend(_librivox(librivox))
    return out


def _ms(pcm: npt.NDArray[np.int16]) -> int:
    return len(pcm) * 1000 // PCM_RATE


def _framed(name: str, kind: str, pcm: npt.NDArray[Any], onset: int, speech: int) -> Clip:
    framed = np.concatenate([silence(LEAD_MS), pcm, silence(TAIL_MS)]).astype(np.int16)
    return Clip(name, kind, framed, LEAD_MS + onset, speech)


def _librivox(n: int) -> list[Clip]:
    """LibriVox sentences with their word timings (fetched once into the cache)."""
    if n <= 0:
        return []
    try:
        from bench.turns import recorded
        from bench.turns.real_sets import parse_pocketsphinx_json

        root = recorded.fetch(recorded.SOURCES[0])
    except Exception as exc:
        print(f"no recorded speech: {exc}")
        return []
    out = []
    for timing in sorted(root.glob("test/data/librivox/*[0-9].json"))[:n]:
        words = parse_pocketsphinx_json(timing.read_text())
        pcm = recorded.decode(timing.with_suffix(".wav"))
        first, last = words[0].start_ms, words[-1].end_ms
        out.append(_framed(f"librivox-{timing.stem[-4:]}", "recorded", pcm, first, last - first))
    return out


@dataclass(frozen=True)
class Run:
    first_delta_ms: float | None  # after the first word was recorded
    deltas_before_stop: int
    deltas: int
    adds_up: bool  # the deltas concatenate to the completed transcript
    as_final: bool  # the completed transcript is the final recognition's text
    cpu_s: float
    partials: int
    transcript: str
    turns: int


async def stream(clip: Clip, recognizer: SpeechRecognizer, every_ms: int) -> Run:
    """`clip` at real time into one session; what its transcription events were."""
    executor = RecognizingExecutor(recognizer)
    session = Session(
        executor,
        WebRtcVadBackend(),
        model="bench",
        limits=EngineLimits(partial_transcript_ms=every_ms),
    )
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, dict[str, Any]]] = []
    arrived = asyncio.Condition()

    async def collect() -> None:
        while (event := await session.outbox.get()) is not None:
            async with arrived:
                seen.append((loop.time(), json.loads(event.text)))
                arrived.notify_all()

    def count(kind: str) -> int:
        return sum(1 for _, e in seen if e["type"] == kind)

    def transcribed() -> bool:  # every turn committed so far has its transcript
        return count(COMPLETED) >= count("input_audio_buffer.committed") > 0

    async def send(event: dict[str, Any]) -> None:
        await session.submit(parse_client_event(json.dumps(event), 1 << 24))

    tasks = [loop.create_task(session.run()), loop.create_task(collect())]
    detection = {"type": "server_vad", "create_response": False}
    audio_in = {"transcription": {"model": "whisper-1"}, "turn_detection": detection}
    await send({"type": "session.update", "session": {"audio": {"input": audio_in}}})
    step = CHUNK_MS * PCM_RATE // 1000
    cpu = time.process_time()
    t0 = loop.time()
    for k, i in enumerate(range(0, len(clip.pcm), step)):
        await asyncio.sleep(max(0.0, t0 + (k + 1) * CHUNK_MS / 1000 - loop.time()))
        chunk = clip.pcm[i : i + step]
        audio = base64.b64encode(chunk.astype("<i2").tobytes()).decode()
        await send({"type": "input_audio_buffer.append", "audio": audio})
    async with arrived:
        await asyncio.wait_for(arrived.wait_for(transcribed), 60)
    cpu = time.process_time() - cpu
    session.close()
    await asyncio.wait(tasks, timeout=5)
    await executor.aclose()
    types = [e["type"] for _, e in seen]
    stop = (
        types.index("input_audio_buffer.speech_stopped")
        if "input_audio_buffer.speech_stopped" in types
        else len(types)
    )
    deltas = [(i, at, e) for i, (at, e) in enumerate(seen) if e["type"] == DELTA]
    done = [e for _, e in seen if e["type"] == COMPLETED]  # a pause may cut two turns
    onset = t0 + clip.onset_ms / 1000
    first = next(((at - onset) * 1000 for _, at, e in deltas if e["delta"].strip()), None)
    known = executor.transcripts.known
    return Run(
        first_delta_ms=first,
        deltas_before_stop=sum(1 for i, _, _ in deltas if i < stop),
        deltas=len(deltas),
        adds_up=all(
            "".join(x["delta"] for _, _, x in deltas if x["item_id"] == e["item_id"])
            == e["transcript"]
            for e in done
        ),
        as_final=all(known.get(e["item_id"]) == e["transcript"] for e in done),
        cpu_s=cpu,
        partials=executor.transcripts.speculation.partials,
        transcript=" / ".join(e["transcript"] for e in done),
        turns=len(done),
    )


def percentile(values: list[float], q: float) -> float | None:
    return None if not values else round(float(np.percentile(values, q)), 1)


async def measure(
    clips_: list[Clip], recognizer: SpeechRecognizer, every_ms: int
) -> list[dict[str, Any]]:
    rows = []
    for clip in clips_:
        on = await stream(clip, recognizer, every_ms)
        off = await stream(clip, recognizer, 0)
        speech_s = clip.speech_ms / 1000
        rows.append(
            {
                "clip": clip.name,
                "kind": clip.kind,
                "speech_s": round(speech_s, 2),
                "first_partial_ms": None if on.first_delta_ms is None else round(on.first_delta_ms),
                "deltas_before_speech_stopped": on.deltas_before_stop,
                "deltas": on.deltas,
                "turns": on.turns,
                "partial_recognitions": on.partials,
                "adds_up": on.adds_up,
                "completed_is_final_recognition": on.as_final,
                "cpu_s_with": round(on.cpu_s, 3),
                "cpu_s_without": round(off.cpu_s, 3),
                "partial_cpu_s_per_speech_s": round((on.cpu_s - off.cpu_s) / speech_s, 3),
                "transcript": on.transcript,
            }
        )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [r["first_partial_ms"] for r in rows if r["first_partial_ms"] is not None]
    before = [r for r in rows if r["deltas_before_speech_stopped"] > 0]
    with_ = sum(r["cpu_s_with"] for r in rows)
    without = sum(r["cpu_s_without"] for r in rows)
    speech = sum(r["speech_s"] for r in rows)
    return {
        "clips": len(rows),
        "first_partial_ms_p50": percentile(firsts, 50),
        "first_partial_ms_p90": percentile(firsts, 90),
        "clips_with_partials_before_speech_stopped": len(before),
        "all_add_up": all(r["adds_up"] for r in rows),
        "clips_completed_as_final_recognition": sum(
            1 for r in rows if r["completed_is_final_recognition"]
        ),
        "partial_cpu_s_per_speech_s": round((with_ - without) / speech, 3),
        "partial_recognitions_per_speech_s": round(
            sum(r["partial_recognitions"] for r in rows) / speech, 2
        ),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.partial_transcripts", description=__doc__)
    p.add_argument("--every-ms", type=int, default=PARTIAL_EVERY_MS, help="partial cadence")
    p.add_argument("--librivox", type=int, default=LIBRIVOX, help="recorded sentences")
    p.add_argument("--fixtures-only", action="store_true", help="the four espeak fixtures")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    recognizer = WhisperRecognizer("tiny.en")
    chosen = clips(0 if args.fixtures_only else args.librivox)
    if args.fixtures_only:
        chosen = [c for c in chosen if c.name in FIXTURES]
    rows = asyncio.run(measure(chosen, recognizer, args.every_ms))
    total = summary(rows)
    print(f"partial transcripts every {args.every_ms} ms of speech, one session, real time")
    print_table(
        "clip | kind | speech s | turns | first partial ms | deltas before stop"
        " | recognitions | adds up | partial CPU s per speech s",
        (
            [
                r["clip"],
                r["kind"],
                r["speech_s"],
                r["turns"],
                r["first_partial_ms"],
                r["deltas_before_speech_stopped"],
                r["partial_recognitions"],
                r["adds_up"],
                r["partial_cpu_s_per_speech_s"],
            ]
            for r in rows
        ),
    )
    print_table("summary | value", sorted(total.items()))
    figures = {
        "machine": machine(["ctranslate2", "faster-whisper"]),
        "every_ms": args.every_ms,
        "summary": total,
        "rows": rows,
    }
    write_results(args.out, figures, 1)


if __name__ == "__main__":
    main()
