"""The evaluation set, made from a seed: complete questions, sentences with a
mid-sentence hesitation, and the questions again at 10 and 5 dB SNR, in several
espeak-ng voices and rates. Synthesized once per seed and cached in the temp dir."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.turns.cache import cached, load_npz, save_npz, spec_key
from bench.turns.noise import Pcm16, mix, noise_bed, speech_rms
from bench.turns.synth import speak, trimmed
from models.base import PCM_RATE

QUESTIONS = [
    "What is the weather like in Paris today?",
    "Can you set a timer for ten minutes?",
    "How far is the moon from the earth?",
    "What time does the pharmacy close tonight?",
    "Could you play some relaxing music?",
    "Who wrote the novel Pride and Prejudice?",
    "How do I get to the nearest train station?",
    "Is it going to rain tomorrow morning?",
    "What is the capital city of Australia?",
    "Can you remind me to call my sister at six?",
]
# Each sentence in two halves, spoken apart and joined by a seeded 600-900 ms pause. The
# first half ends on a comma: a continuing intonation, not a full stop's fall.
HESITATIONS = [
    ("I would like to order", "a large pizza with mushrooms."),
    ("Can you book a table for", "four people at eight tonight?"),
    ("My flight leaves on", "Tuesday morning from gate twelve."),
    ("Please send a message to", "my brother about the party."),
    ("I am looking for a recipe with", "chicken and fresh tomatoes."),
    ("What is the best way to", "get to the airport from here?"),
    ("Turn the volume down in", "the living room, please."),
    ("I need to buy", "milk, eggs and some bread."),
    ("Could you tell me how", "long the drive to Boston takes?"),
    ("Set an alarm for", "seven thirty tomorrow morning."),
]
PAUSE_MS = (600, 900)
# The talkers of the babble: sentences the set never asks.
BABBLE = [
    ("en-gb", 170, "The meeting has been moved to the third floor conference room."),
    ("en-us+f3", 160, "She said the train was late again because of the weather."),
    ("en-029", 180, "We should paint the fence before the summer holidays begin."),
    ("en-us+m3", 150, "Nobody remembered to bring the keys for the storage room."),
    ("en-gb-scotland", 165, "The children were playing football in the park all afternoon."),
]
VOICES = ["en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-029", "en-us+m3", "en-gb-x-rp"]
RATES_WPM = [140, 160, 175, 190]
SNRS_DB = {"snr10": 10.0, "snr5": 5.0}
SETS = ["complete", "hesitation", "snr10", "snr5"]
MAX_TRAIL_MS = 12_000  # the longest trailing silence any mode streams (noise bed length)
CACHE_DIR = Path(tempfile.gettempdir()) / "parley-eval-turns"

Span = tuple[int, int]  # ms


@dataclass(frozen=True)
class Item:
    name: str  # "hesitation-03"
    set: str  # one of SETS
    text: str
    voice: str
    rate_wpm: int
    speech: Pcm16  # from the first audible block to the last, pauses included
    segments: list[Span]  # speech spans within `speech` (two for a hesitation)
    snr_db: float | None = None
    noise_seed: int = 0

    @property
    def speech_ms(self) -> int:
        return len(self.speech) * 1000 // PCM_RATE


@dataclass(frozen=True)
class Corpus:
    seed: int
    items: list[Item]
    babble: list[Pcm16]  # one track per talker

    def stream(self, item: Item, lead_ms: int, trail_ms: int) -> tuple[Pcm16, list[Span]]:
        """What the microphone sends: `lead_ms` before the speech and `trail_ms` after
        it, under the item's noise for its whole length; and the speech spans on that
        clock."""
        lead, trail = _zeros(lead_ms), _zeros(trail_ms)
        pcm = np.concatenate([lead, item.speech, trail])
        spans = [(a + lead_ms, b + lead_ms) for a, b in item.segments]
        if item.snr_db is None:
            return pcm, spans
        # The bed has the same length whatever the mode's trailing silence: the same noise.
        n = (lead_ms + item.speech_ms + MAX_TRAIL_MS) * PCM_RATE // 1000
        bed = noise_bed(self.babble, max(n, len(pcm)), item.noise_seed)
        return mix(pcm, bed, item.snr_db, speech_rms(item.speech)), spans


def _zeros(ms: int) -> Pcm16:
    return np.zeros(ms * PCM_RATE // 1000, dtype=np.int16)


def make_corpus(seed: int, cache_dir: Path | None = CACHE_DIR) -> Corpus:
    """The set for `seed`, from the cache when it was made before."""
    key = spec_key([seed, QUESTIONS, HESITATIONS, PAUSE_MS, BABBLE, VOICES, RATES_WPM, SNRS_DB])
    path = None if cache_dir is None else cache_dir / f"seed-{seed}-{key}.npz"
    return cached(path, lambda: _synthesize(seed), _save, lambda at: _load(seed, at))


def _synthesize(seed: int) -> Corpus:
    rng = random.Random(seed)
    items: list[Item] = []
    for i, text in enumerate(QUESTIONS):
        voice, rate = rng.choice(VOICES), rng.choice(RATES_WPM)
        pcm = trimmed(speak(text, voice, rate))
        items.append(Item(f"complete-{i:02d}", "complete", text, voice, rate, pcm, [(0, _ms(pcm))]))
    for i, (first, second) in enumerate(HESITATIONS):
        voice, rate = rng.choice(VOICES), rng.choice(RATES_WPM)
        a = trimmed(speak(first + ",", voice, rate))
        b = trimmed(speak(second, voice, rate))
        pause = _zeros(rng.randint(*PAUSE_MS))
        pcm = np.concatenate([a, pause, b])
        spans = [(0, _ms(a)), (_ms(a) + _ms(pause), _ms(pcm))]
        text = f"{first}... {second}"
        items.append(Item(f"hesitation-{i:02d}", "hesitation", text, voice, rate, pcm, spans))
    complete = [it for it in items if it.set == "complete"]
    for name, snr in SNRS_DB.items():
        for it in complete:
            items.append(
                Item(
                    it.name.replace("complete", name),
                    name,
                    it.text,
                    it.voice,
                    it.rate_wpm,
                    it.speech,
                    it.segments,
                    snr,
                    rng.randrange(2**31),
                )
            )
    babble = [trimmed(speak(text, voice, rate)) for voice, rate, text in BABBLE]
    return Corpus(seed, items, babble)


def _ms(pcm: Pcm16) -> int:
    return len(pcm) * 1000 // PCM_RATE


def _save(corpus: Corpus, path: Path) -> None:
    meta = [
        {k: getattr(it, k) for k in ("name", "set", "text", "voice", "rate_wpm", "segments")}
        | {"snr_db": it.snr_db, "noise_seed": it.noise_seed}
        for it in corpus.items
    ]
    # Each item's speech, then each babble track.
    save_npz(path, meta, [it.speech for it in corpus.items] + corpus.babble)


def _load(seed: int, path: Path) -> Corpus:
    meta, tracks = load_npz(path)
    items = [
        Item(**m | {"speech": speech, "segments": [(a, b) for a, b in m["segments"]]})
        for m, speech in zip(meta, tracks, strict=False)
    ]
    return Corpus(seed, items, tracks[len(items) :])
