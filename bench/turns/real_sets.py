"""Turn sets of recorded human voices (bench/turns/recorded.py fetches the sources).

- LibriVox sentences (pocketsphinx): the true end of speech and the pauses inside a
  sentence from the word timings shipped beside each recording; a sentence with a
  pause of at least MIN_PAUSE_MS is a hesitation, else a complete turn.
- AMI meeting excerpts (pyannote.audio): a speaker's segment that no one else talks
  into is a complete turn, two segments of one speaker with a MIN_PAUSE_MS..
  MAX_PAUSE_MS gap nobody fills are a hesitation (a natural mid-turn pause); the bounds
  are the RTTM annotation's.
- Asterisk prompts (one far-end voice): a prompt is a complete turn, its end found by
  an energy alignment on the clean recording (`speech_bounds`); two prompts spliced
  with a seeded pause stand for a hesitation (spliced, not natural).
- Read speech has no pause that long, so each LibriVox sentence is also split at a word
  boundary near its middle (from the word timings) and spliced with a seeded pause.

Each complete turn also comes at 10 dB SNR under the espeak set's babble and pink noise.
Speakers are split, seeded, into a development and a held-back part: sets are named
"real-<kind>-<part>".
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.turns import recorded
from bench.turns.cache import cached, spec_key
from bench.turns.corpus import Corpus, Item, _load, _save
from bench.turns.noise import Pcm16
from models.base import PCM_RATE

MIN_PAUSE_MS = 200  # eot-bench's shortest mid-turn pause it scores
MAX_PAUSE_MS = 2000
TURN_MS = (800, 9000)  # complete turns kept
SPLICE_PAUSE_MS = (600, 900)  # as the espeak hesitations
ASTERISK_TURNS, ASTERISK_SPLICES = 8, 4
SNR_DB = 10.0
KINDS = ["complete", "hesitation", "snr10"]
PARTS = ["dev", "held"]
REAL_SETS = [f"real-{k}-{p}" for p in PARTS for k in KINDS]
SETS_DIR = recorded.CACHE_DIR / "sets"

Span = tuple[int, int]  # ms


@dataclass(frozen=True)
class Word:
    start_ms: int
    end_ms: int
    text: str


@dataclass(frozen=True)
class Segment:
    uri: str
    speaker: str
    start_ms: int
    end_ms: int


def parse_pocketsphinx_json(text: str) -> list[Word]:
    """The words of a pocketsphinx alignment ({"w": [{"b", "d", "t"}]}), silences and
    fillers ("<sil>", "[NOISE]") left out, alternate pronunciations ("and(2)") named."""
    words = []
    for w in json.loads(text)["w"]:
        t = str(w["t"])
        if t.startswith(("<", "[")):
            continue
        b = round(float(w["b"]) * 1000)
        words.append(Word(b, b + round(float(w["d"]) * 1000), t.split("(")[0]))
    return words


def parse_rttm(text: str) -> list[Segment]:
    """SPEAKER lines of an RTTM file: uri, onset and duration (s), speaker."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "SPEAKER":
            start = round(float(f[3]) * 1000)
            out.append(Segment(f[1], f[7], start, start + round(float(f[4]) * 1000)))
    return out


def spans_of(words: list[Word], min_pause_ms: int = MIN_PAUSE_MS) -> list[Span]:
    """Speech runs: words joined unless a pause of at least `min_pause_ms` parts them."""
    spans: list[Span] = []
    for w in words:
        if spans and w.start_ms - spans[-1][1] < min_pause_ms:
            spans[-1] = (spans[-1][0], max(spans[-1][1], w.end_ms))
        else:
            spans.append((w.start_ms, w.end_ms))
    return spans


def speech_bounds(pcm: Pcm16, frame_ms: int = 20, floor_db: float = -35.0) -> Span | None:
    """First and last 20 ms frame within `floor_db` of the loudest one (an energy
    alignment on a clean recording), in ms; None for silence."""
    n = frame_ms * PCM_RATE // 1000
    frames = len(pcm) // n
    if frames == 0:
        return None
    x = pcm[: frames * n].astype(np.float64).reshape(frames, n)
    rms = np.sqrt((x**2).mean(axis=1)) + 1e-9
    loud = np.flatnonzero(20 * np.log10(rms / rms.max()) > floor_db)
    if rms.max() < 30 or len(loud) == 0:
        return None
    return int(loud[0]) * frame_ms, (int(loud[-1]) + 1) * frame_ms


def cut(pcm: Pcm16, start_ms: int, end_ms: int) -> Pcm16:
    return pcm[start_ms * PCM_RATE // 1000 : end_ms * PCM_RATE // 1000]


def item(name: str, kind: str, text: str, voice: str, pcm: Pcm16, spans: list[Span]) -> Item:
    """An item whose speech starts at its first span (spans shifted to match)."""
    a, b = spans[0][0], spans[-1][1]
    shifted = [(s - a, e - a) for s, e in spans]
    return Item(name, kind, text, voice, 0, cut(pcm, a, b), shifted)


def librivox_items(root: Path, rng: random.Random) -> Iterator[Item]:
    for timing in sorted(root.glob("test/data/librivox/*[0-9].json")):
        words = parse_pocketsphinx_json(timing.read_text())
        spans = spans_of(words)
        kind = "hesitation" if len(spans) > 1 else "complete"
        pcm = recorded.decode(timing.with_suffix(".wav"))
        text = " ".join(w.text for w in words)
        name = f"librivox-{timing.stem[-4:]}"
        yield item(name, kind, text, "librivox:austen-reader", pcm, spans)
        if len(words) >= 4:  # read speech has no long pause: split it at a word boundary
            yield spliced(f"{name}s", text, "librivox:austen-reader", pcm, words, rng)


def spliced(
    name: str, text: str, voice: str, pcm: Pcm16, words: list[Word], rng: random.Random
) -> Item:
    """A sentence's two halves (at the word boundary nearest its middle) joined by a
    seeded SPLICE_PAUSE_MS pause: a hesitation made from a real sentence."""
    mid = len(words) // 2
    a = cut(pcm, words[0].start_ms, words[mid - 1].end_ms)
    b = cut(pcm, words[mid].start_ms, words[-1].end_ms)
    pause = np.zeros(rng.randint(*SPLICE_PAUSE_MS) * PCM_RATE // 1000, dtype=np.int16)
    joined = np.concatenate([a, pause, b])
    spans = [(0, _ms(a)), (_ms(a) + _ms(pause), _ms(joined))]
    return Item(name, "hesitation", text, voice, 0, joined, spans)


def ami_items(root: Path) -> Iterator[Item]:
    segments = [
        s for p in sorted(root.glob("tests/data/*.rttm")) for s in parse_rttm(p.read_text())
    ]
    by_uri: dict[str, list[Segment]] = {}
    for s in segments:
        by_uri.setdefault(s.uri, []).append(s)
    for uri, segs in sorted(by_uri.items()):
        wav = root / "tests" / "data" / f"{uri}.wav"
        if not wav.exists():
            continue
        pcm = recorded.decode(wav)
        segs.sort(key=lambda s: s.start_ms)

        def alone(a: int, b: int, speaker: str, segs: list[Segment] = segs) -> bool:
            return not any(o.speaker != speaker and o.start_ms < b and o.end_ms > a for o in segs)

        for i, s in enumerate(segs):
            voice = f"ami:{s.speaker}"
            if TURN_MS[0] <= s.end_ms - s.start_ms <= TURN_MS[1] and alone(
                s.start_ms - MIN_PAUSE_MS, s.end_ms + MIN_PAUSE_MS, s.speaker
            ):
                spans = [(s.start_ms, s.end_ms)]
                yield item(f"ami-{uri}-{i:02d}", "complete", "", voice, pcm, spans)
            nxt = next((o for o in segs[i + 1 :] if o.speaker == s.speaker), None)
            if nxt is None or not MIN_PAUSE_MS <= nxt.start_ms - s.end_ms <= MAX_PAUSE_MS:
                continue
            if (
                alone(s.start_ms, nxt.end_ms, s.speaker)
                and nxt.end_ms - s.start_ms <= 2 * TURN_MS[1]
            ):
                spans = [(s.start_ms, s.end_ms), (nxt.start_ms, nxt.end_ms)]
                yield item(f"ami-{uri}-{i:02d}h", "hesitation", "", voice, pcm, spans)


def asterisk_items(root: Path, rng: random.Random) -> Iterator[Item]:
    prompts: list[tuple[str, Pcm16]] = []
    for wav in sorted(root.glob("*.wav")):
        pcm = recorded.decode(wav)
        bounds = speech_bounds(pcm)
        if bounds and TURN_MS[0] <= bounds[1] - bounds[0] <= TURN_MS[1] // 2:
            prompts.append((wav.stem, cut(pcm, *bounds)))
    voice = "asterisk:allison"
    picked = rng.sample(prompts, min(len(prompts), ASTERISK_TURNS + 2 * ASTERISK_SPLICES))
    for name, pcm in picked[:ASTERISK_TURNS]:
        yield Item(f"asterisk-{name}", "complete", name, voice, 0, pcm, [(0, _ms(pcm))])
    rest = picked[ASTERISK_TURNS:]
    for (n1, a), (n2, b) in zip(rest[::2], rest[1::2], strict=False):
        pause = np.zeros(rng.randint(*SPLICE_PAUSE_MS) * PCM_RATE // 1000, dtype=np.int16)
        spans = [(0, _ms(a)), (_ms(a) + _ms(pause), _ms(a) + _ms(pause) + _ms(b))]
        pcm = np.concatenate([a, pause, b])
        yield Item(f"asterisk-{n1}+{n2}", "hesitation", f"{n1} ... {n2}", voice, 0, pcm, spans)


def _ms(pcm: Pcm16) -> int:
    return len(pcm) * 1000 // PCM_RATE


def split_parts(voices: list[str], seed: int) -> dict[str, str]:
    """Each voice to "dev" or "held", half each (dev takes the odd one), seeded."""
    order = sorted(set(voices))
    random.Random(seed).shuffle(order)
    cut_at = (len(order) + 1) // 2
    return {v: "dev" if i < cut_at else "held" for i, v in enumerate(order)}


def assemble(items: list[Item], seed: int) -> list[Item]:
    """The items renamed into their sets (kind and part), with noisy complete turns."""
    part = split_parts([it.voice for it in items], seed)
    rng = random.Random(seed)
    out = [replace(it, set=f"real-{it.set}-{part[it.voice]}") for it in items]
    for it in [i for i in out if i.set.startswith("real-complete-")]:
        noisy = it.set.replace("complete", "snr10")
        out.append(
            replace(
                it,
                name=f"{it.name}-snr10",
                set=noisy,
                snr_db=SNR_DB,
                noise_seed=rng.randrange(2**31),
            )
        )
    return out


def build(roots: dict[str, Path], seed: int) -> list[Item]:
    rng = random.Random(seed)
    made = [
        *librivox_items(roots["librivox"], rng),
        *ami_items(roots["ami"]),
        *asterisk_items(roots["asterisk"], rng),
    ]
    return assemble(made, seed)


def make_real_corpus(seed: int, babble: list[Pcm16], cache_dir: Path | None = SETS_DIR) -> Corpus:
    """The real-voice sets for `seed` (fetching the sources the first time), with the
    espeak set's babble talkers for the noisy variants."""
    pins = [[s.package, s.version] for s in recorded.SOURCES]
    key = spec_key([seed, pins, MIN_PAUSE_MS, MAX_PAUSE_MS, TURN_MS, SPLICE_PAUSE_MS, SNR_DB])
    path = None if cache_dir is None else cache_dir / f"seed-{seed}-{key}.npz"

    def make() -> Corpus:
        return Corpus(seed, build(recorded.fetch_all(), seed), [])

    made = cached(path, make, _save, lambda at: _load(seed, at))
    return Corpus(seed, made.items, babble)
