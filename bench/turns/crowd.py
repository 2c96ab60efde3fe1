"""Qualified interruption's voice count, replayed offline over many seeds.

Run from the repository root:  .venv/bin/python -m bench.turns.crowd

Held speech qualifies as an interruption on words the recognizer hears, counted by how
many voices it sounds like (engine/interruption.py: `voices_of` on the kurtosis and
pitch clarity of models/listening/crowd.py, then `counted`). Three thresholds set
that: below `crowd_kurtosis` it is background talk, whose words never count; below
`one_voice_kurtosis` a single sure hearing is not enough; from `one_voice_clarity` of
pitch clarity it is one voice whatever the kurtosis. This tool chooses them on more
than the two babble bursts one seed of `make eval-turns` has: per seed (default
15-24), the interruption set's two babble bursts (five espeak-ng talkers over each
other, as loud as the user) and ten interrupting sentences, plus those sentences at
10 and 5 dB SNR under the turn set's noise bed (babble and pink noise: a user in a
noisy room); and the recorded interruption set (bench/turns/real_interruptions.py,
`--voices`): its sentences, backchannels (alone and over talk), laughs, breaths and
coughs by part, each session knowing no earlier turn.

Each item is heard as the session hears held speech: Whisper (models/listening/hearing.py)
on its speech so far, with 300 ms of silence before it (the prefix padding), from
200 ms of speech on, every 100 ms, and once more whole at its end. Hearings are cached
on disk (`crowd-hearings.json` in the set's cache dir). Then every threshold pair of
the grid is replayed with the engine's decisions, the kurtosis (and, where it could
decide, the pitch clarity) measured at each 20 ms append from the onset, a hearing
counted from the append it was asked at (its ~50 ms are not added). Reported per kind:
how many items qualified (babble, backchannels, laughs, breaths, coughs: false
interruptions) and how much
speech it took (p50/p90 ms). JSON to
bench/results/crowd.json (or --out).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.load.stats import pct
from bench.turns.cache import load_json, save_json
from bench.turns.corpus import CACHE_DIR, make_corpus
from bench.turns.noise import Pcm16, mix, noise_bed, speech_rms
from bench.turns.scenarios import make_scenarios
from bench.turns.stream import CHUNK_MS
from bench.turns.synth import EspeakMissing
from engine.held_speech import HearingDone, HeldSpeech, Interrupt
from engine.input_buffer import InputBuffer
from engine.interruption import HEAR_EVERY_MS, InterruptionParams
from engine.turns import SpeechStopped
from engine.user_voice import VoiceProfile, profile_of
from models.base import PCM_RATE
from models.listening.crowd import kurtosis, pitch_clarity
from models.listening.hearing import PROMPT, Hearing

ROOT = Path(__file__).resolve().parents[2]
HEARING_CACHE = CACHE_DIR / "crowd-hearings.json"
KINDS = ["babble", "sentence", "snr10", "snr5"]
# The recorded interruption set (bench/turns/real_interruptions.py), by kind and part.
REAL_SET_KINDS = (
    "sentence",
    "laugh-words",
    "backchannel",
    "backchannel-over-talk",
    "laugh",
    "breath",
    "cough",
)
REAL_KINDS = [f"real-{k}-{part}" for k in REAL_SET_KINDS for part in ("dev", "held")]
SNRS_DB = {"snr10": 10.0, "snr5": 5.0}
PADDING_MS = 300  # the default prefix_padding_ms: silence before the speech, heard too
FIRST_MS = 200  # the default min_speech_ms: the first hearing
LONGEST_MS = 2500  # a sentence is followed this far (the default max_backchannel_ms is 2 s)
CROWD = (0.0, 5.5, 6.0, 6.5, 7.0)
ONE_VOICE = (0.0, 7.0, 8.0, 9.0, 10.0)
CLARITY = (0.0, 0.75, 0.8, 0.85)


@dataclass(frozen=True)
class Item:
    kind: str
    seed: int
    text: str
    pcm: Pcm16


@dataclass(frozen=True)
class HeardAt:
    """A hearing of the item's first `ms` of speech."""

    ms: int
    text: str
    sure: bool


def items_of(seed: int) -> list[Item]:
    """One seed's babble bursts and sentences, and the sentences in noise."""
    made = make_scenarios(seed)
    babble = [it for it in made.items if it.kind == "burst" and it.text == "babble"]
    sentences = [it for it in made.items if it.kind == "sentence"]
    out = [Item("babble", seed, it.name, it.audio) for it in babble]
    out += [Item("sentence", seed, it.text, it.audio) for it in sentences]
    voices = make_corpus(seed).babble
    for i, it in enumerate(sentences):
        bed = noise_bed(voices, len(it.audio), seed * 100 + i)
        for kind, snr in SNRS_DB.items():
            noisy = mix(it.audio, bed, snr, speech_rms(it.audio))
            out.append(Item(kind, seed, it.text, noisy))
    return out


def real_items(seed: int) -> list[Item]:
    """The recorded interruption set's items, by kind and part."""
    from bench.turns.real_interruptions import make_real_scenarios

    return [
        Item(f"real-{s.kind}-{s.part}", seed, s.text, s.audio) for s in make_real_scenarios(seed)
    ]


def hearing_points(pcm: Pcm16) -> list[int]:
    """Where an item is heard: ms of speech from FIRST_MS, every HEAR_EVERY_MS, and whole."""
    total = min(len(pcm) * 1000 // PCM_RATE, LONGEST_MS)
    points = list(range(FIRST_MS, total + 1, HEAR_EVERY_MS))
    return [*points, total] if total >= FIRST_MS and points[-1] != total else points


def _key(pcm: Pcm16, model: str) -> str:
    return hashlib.sha256(pcm.tobytes() + f"{model}|{PROMPT}".encode()).hexdigest()[:24]


class Hearings:
    """Whisper's hearings of items as they grow, cached by audio."""

    def __init__(self, hear: Callable[[Pcm16], Hearing], path: Path | None, model: str) -> None:
        self._hear, self._path, self._model = hear, path, model
        self._cache: dict[str, list[list[Any]]] = load_json(path)
        self.made = 0

    def of(self, pcm: Pcm16) -> list[HeardAt]:
        key = _key(pcm, self._model)
        if key not in self._cache:
            padding = np.zeros(PADDING_MS * PCM_RATE // 1000, np.int16)
            heard = []
            for ms in hearing_points(pcm):
                h = self._hear(np.concatenate([padding, pcm[: ms * PCM_RATE // 1000]]))
                heard.append([ms, h.text, h.sure])
                self.made += 1
            self._cache[key] = heard
        return [HeardAt(int(ms), str(text), bool(sure)) for ms, text, sure in self._cache[key]]

    def tail(self, pcm: Pcm16) -> Hearing:
        """A hearing of held speech from after its onset (after a laugh: the engine's
        AFTER_LAUGH_MS), as asked."""
        key = "tail:" + _key(pcm, self._model)
        if key not in self._cache:
            h = self._hear(pcm)
            self._cache[key] = [[0, h.text, h.sure]]
            self.made += 1
        _, text, sure = self._cache[key][0]
        return Hearing(str(text), bool(sure))

    def save(self) -> None:
        save_json(self._path, self._cache)


@dataclass(frozen=True)
class Replay:
    """An item as the replay reads it, whatever the thresholds: its hearings, and its
    kurtosis from the onset at each append (measured once, not once per grid point),
    its pitch clarity measured there when first asked for."""

    pcm: Pcm16
    hearings: tuple[HeardAt, ...]
    kurtosis_at: dict[int, float]  # ms of speech -> the kurtosis of that much
    total_ms: int
    clarity_at: dict[int, float] = field(default_factory=dict)
    # Hears what the engine asks for after a laugh (`Hearings.tail`); None: the
    # hearing of the speech from its onset to the same point stands in.
    tail: Callable[[Pcm16], Hearing] | None = None

    def clarity(self, ms: int) -> float:
        if ms not in self.clarity_at:
            self.clarity_at[ms] = pitch_clarity(self.pcm[: ms * PCM_RATE // 1000], PCM_RATE)
        return self.clarity_at[ms]


def replay_of(
    pcm: Pcm16, hearings: Sequence[HeardAt], tail: Callable[[Pcm16], Hearing] | None = None
) -> Replay:
    total = min(len(pcm) * 1000 // PCM_RATE, LONGEST_MS)
    steps = [min(ms, total) for ms in range(FIRST_MS, total + CHUNK_MS, CHUNK_MS)]
    at = {ms: kurtosis(pcm[: ms * PCM_RATE // 1000]) for ms in steps}
    return Replay(pcm, tuple(hearings), at, total, tail=tail)


class _ReplayedInput:
    """The input as held speech reads it in the replay: the item after its padding,
    with no echo guard."""

    guards_echo = False

    def __init__(self) -> None:
        self.buffer = InputBuffer(PCM_RATE)

    def own_voice(self, start: int, end: int) -> bool:
        return False


class _CachedEars:
    """Ears answered from an item's cached hearings, as soon as they are asked."""

    def __init__(self) -> None:
        self.asked: tuple[int, Pcm16] | None = None

    def ask(self, request: int, pcm: Pcm16) -> None:
        self.asked = (request, pcm)

    def cancel(self) -> None:
        self.asked = None


def qualified_ms(
    item: Replay, params: InterruptionParams, user: VoiceProfile | None = None
) -> int | None:
    """When held speech qualifies as an interruption, in ms of speech from its onset;
    None if it never does (it ends, or LONGEST_MS). The session's own held-speech
    object decides, appended to every CHUNK_MS after PADDING_MS of silence, each
    hearing answered before the next append (its ~50 ms are not added). `user`: the
    voice the session learned from the user's earlier turns (engine/user_voice.py)."""
    by_ms = {h.ms: h for h in item.hearings}
    ears, audio = _CachedEars(), _ReplayedInput()
    held = HeldSpeech(
        ears,
        measure=lambda pcm: item.kurtosis_at[len(pcm) * 1000 // PCM_RATE],
        clarity=lambda pcm: item.clarity(len(pcm) * 1000 // PCM_RATE),
    )
    held.user = user

    def step() -> bool:
        """One step, and one more after each hearing it asks for; whether it interrupts."""
        decision = held.step(params, audio, PADDING_MS)
        while ears.asked is not None:
            (request, pcm), ears.asked = ears.asked, None
            now = held.held
            if now is not None and now.hear_from_ms and item.tail is not None:
                hearing = item.tail(pcm)  # after a laugh: only its speech from there
            else:
                h = by_ms[now.asked_ms if now is not None else 0]
                hearing = Hearing(h.text, h.sure)
            held.heard(HearingDone(request, hearing), params)
            decision = held.step(params, audio, PADDING_MS)
        return isinstance(decision, Interrupt)

    audio.buffer.append(np.zeros(PADDING_MS * PCM_RATE // 1000, np.int16))
    held.hold("held", 0, 0, PADDING_MS)
    appended = 0
    for ms in sorted(item.kurtosis_at):
        audio.buffer.append(item.pcm[appended * PCM_RATE // 1000 : ms * PCM_RATE // 1000])
        appended = ms
        held.grew(PADDING_MS + ms)
        if step():
            return ms
    end_ms = PADDING_MS + item.total_ms
    held.stopped(SpeechStopped(audio_end_ms=end_ms, speech_end_ms=end_ms), None)
    return item.total_ms if step() else None


def user_voices(items: Sequence[Item]) -> list[VoiceProfile | None]:
    """The voice each item's session learned from an earlier turn (`--user-voice`): the
    next interrupting sentence of the same seed (the user there; as loud as its
    babble), a sentence's clean self left out."""
    out: list[VoiceProfile | None] = []
    for it in items:
        if it.kind not in KINDS:
            out.append(None)  # a recorded voice: the harder case, no earlier turn
            continue
        sentences = [o for o in items if o.seed == it.seed and o.kind == "sentence"]
        others = [o for o in sentences if o.text != it.text] or sentences
        out.append(profile_of(others[len(out) % len(others)].pcm) if others else None)
    return out


def summarize(
    items: Sequence[Item],
    replays: Sequence[Replay],
    params: InterruptionParams,
    users: Sequence[VoiceProfile | None] | None = None,
) -> dict[str, Any]:
    known = users or [None] * len(items)
    out: dict[str, Any] = {}
    for kind in kinds_of(items):
        at = [
            qualified_ms(r, params, u)
            for it, r, u in zip(items, replays, known, strict=True)
            if it.kind == kind
        ]
        got: list[float] = [ms for ms in at if ms is not None]
        out[kind] = {
            "items": len(at),
            "qualified": len(got),
            "p50_ms": pct(got, 50),
            "p90_ms": pct(got, 90),
            "mean_ms": statistics.fmean(got) if got else None,
        }
    return out


def kinds_of(items: Sequence[Item]) -> list[str]:
    """The kinds the items have, in report order."""
    return [k for k in (*KINDS, *REAL_KINDS) if any(it.kind == k for it in items)]


def _row(crowd: float, one: float, clarity: float, s: dict[str, Any]) -> str:
    cells = [f"{crowd:g}", f"{one:g}", f"{clarity:g}"]
    for kind in s:
        k = s[kind]
        timing = "" if k["p50_ms"] is None else f" ({k['p50_ms']:.0f}/{k['p90_ms']:.0f})"
        cells.append(f"{k['qualified']}/{k['items']}{timing}")
    return " | ".join(cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(15, 25)))
    p.add_argument("--crowd", type=float, nargs="+", default=list(CROWD))
    p.add_argument("--one-voice", type=float, nargs="+", default=list(ONE_VOICE))
    p.add_argument("--clarity", type=float, nargs="+", default=list(CLARITY))
    p.add_argument(
        "--voices",
        choices=["espeak", "real", "both"],
        default="both",
        help="the espeak set over --seeds, the recorded set (first seed), or both",
    )
    p.add_argument("--limit", type=int, help="at most this many items per kind and seed")
    p.add_argument("--model", default="tiny.en", help="the hearing model (PARLEY_HEARING_MODEL)")
    p.add_argument("--no-cache", action="store_true", help="hear everything again")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "crowd.json")
    p.add_argument("--user-voice", action="store_true", help="each session knows its user's voice")
    args = p.parse_args(argv)
    started = time.perf_counter()
    items: list[Item] = []
    try:
        if args.voices != "real":
            items = [it for seed in args.seeds for it in _limited(items_of(seed), args.limit)]
    except EspeakMissing as missing:
        print(missing, file=sys.stderr)
        return 1
    if args.voices != "espeak":
        items += _limited(real_items(args.seeds[0]), args.limit)
    from models.listening.hearing import WhisperHearing

    recognizer = WhisperHearing(args.model, threads=2, parallel=1)
    hearings = Hearings(recognizer.hear, None if args.no_cache else HEARING_CACHE, args.model)
    replays = [replay_of(it.pcm, hearings.of(it.pcm), hearings.tail) for it in items]
    base = InterruptionParams()
    grid = []
    header = " | ".join(f"{k} qualified (p50/p90 ms)" for k in kinds_of(items))
    print("crowd | one voice | clarity | " + header)
    users = user_voices(items) if args.user_voice else None
    for crowd, one, clear in itertools.product(args.crowd, args.one_voice, args.clarity):
        if one and one < crowd:
            continue
        params = replace(
            base, crowd_kurtosis=crowd, one_voice_kurtosis=one, one_voice_clarity=clear
        )
        s = summarize(items, replays, params, users)
        grid.append(
            {"crowd_kurtosis": crowd, "one_voice_kurtosis": one, "one_voice_clarity": clear, **s}
        )
        default = (crowd, one, clear) == (
            base.crowd_kurtosis,
            base.one_voice_kurtosis,
            base.one_voice_clarity,
        )
        print(_row(crowd, one, clear, s) + ("  <- Parley's default" if default else ""))
    hearings.save()  # with the hearings after laughs the grid asked for
    recognizer.close()
    report = {
        "seeds": args.seeds,
        "model": args.model,
        "hearings_made": hearings.made,
        "run_s": round(time.perf_counter() - started, 1),
        "grid": grid,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['run_s']:.0f} s ({hearings.made} hearings made); wrote {args.out}")
    return 0


def _limited(items: list[Item], limit: int | None) -> list[Item]:
    if limit is None:
        return items
    out: list[Item] = []
    for kind in kinds_of(items):
        out += [it for it in items if it.kind == kind][:limit]
    return out


if __name__ == "__main__":
    sys.exit(main())
