"""The interruption set, made from a seed like the turn set and cached beside it: what
the microphone hears while the assistant talks. Backchannels and interrupting sentences
from espeak-ng in several voices, non-speech bursts made in numpy (bench/turns/bursts.py)
at the sentences' loudness, and echo items with no user sound at all (the assistant's
own output fed back at a level and delay). Also what the assistant says: the speech
fixtures of bench/speech, one after another, twice (about 16 s)."""

from __future__ import annotations

import hashlib
import random
import statistics
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.speech import FIXTURES, load_wav, silence
from bench.turns.bursts import BURSTS, make_burst
from bench.turns.cache import cached, load_npz, save_npz, spec_key
from bench.turns.corpus import BABBLE, CACHE_DIR, RATES_WPM, VOICES
from bench.turns.noise import Pcm16, speech_rms
from bench.turns.synth import speak, trimmed
from models.base import PCM_RATE

KINDS = ["backchannel", "burst", "sentence", "echo", "talkover"]
# (what is said, what espeak-ng is given: "mm-hm" as written it spells out the letters)
BACKCHANNELS = [
    ("mm-hm", "[[,m-'hm-]]"),
    ("uh-huh", "uh-huh"),
    ("yeah", "yeah"),
    ("okay", "okay"),
    ("right", "right"),
]
SENTENCES = [
    "Wait, stop.",
    "Actually I meant tomorrow.",
    "No, that's wrong.",
    "Hold on a second.",
    "Sorry, can you say that again?",
    "Stop, I changed my mind.",
    "No, I asked about the other one.",
    "Excuse me, that is not what I said.",
    "Wait, what about Friday?",
    "Can we go back to the first option?",
]
ECHO_DB = [-10.0, -20.0]  # echo level against what the assistant sent
ECHO_DELAY_MS = (50, 200)
ECHO_WINDOW_MS = 3000  # an echo item is watched this long past its offset (no user sound)
# Interrupting sentences said over the assistant's echo (a client without echo
# cancellation, which is what the echo guard is for): this many, at this level.
TALKOVER = 5
TALKOVER_DB = -10.0
OFFSET_MS = (500, 1500)  # after the first audio delta, before the scenario's audio
ASSISTANT_GAP_MS = 300


@dataclass(frozen=True)
class Scenario:
    name: str  # "backchannel-03"
    kind: str  # one of KINDS
    text: str  # what is said, the burst's kind, or the echo's level and delay
    voice: str  # the espeak-ng voice; "" for bursts and echo
    audio: Pcm16  # what is injected, from its first audible sample; silence for echo
    offset_ms: int  # from the first audio delta's arrival to the audio's first sample
    echo_db: float | None = None
    echo_delay_ms: int = 0
    part: str = ""  # recorded voices: "dev" or "held" (bench/turns/real_interruptions.py)

    @property
    def audio_ms(self) -> int:
        return len(self.audio) * 1000 // PCM_RATE

    @property
    def has_onset(self) -> bool:
        """Whether the audio starts a sound (reaction is timed from it); not echo."""
        return self.kind != "echo"


@dataclass(frozen=True)
class ScenarioSet:
    seed: int
    items: list[Scenario]


def assistant_speech() -> Pcm16:
    """What the scripted assistant says (PARLEY_SCRIPTED_SPEECH): every fixture in
    turn with a short gap, twice: longer than any item is watched."""
    gap = silence(ASSISTANT_GAP_MS)
    once = [part for name in FIXTURES for part in (load_wav(name), gap)]
    return np.concatenate(once * 2)


def write_wav(pcm: Pcm16, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(PCM_RATE)
        wav.writeframes(pcm.astype("<i2").tobytes())
    return path


def make_scenarios(seed: int, cache_dir: Path | None = CACHE_DIR) -> ScenarioSet:
    """The set for `seed`, from the cache when it was made before."""
    spec: list[object] = [seed, BACKCHANNELS, SENTENCES, BURSTS, ECHO_DB, ECHO_DELAY_MS]
    spec += [OFFSET_MS, ECHO_WINDOW_MS, BABBLE, VOICES, RATES_WPM, KINDS, TALKOVER, TALKOVER_DB]
    name = f"interruptions-{seed}-{spec_key(spec)}.npz"
    path = None if cache_dir is None else cache_dir / name
    return cached(path, lambda: _synthesize(seed), _save, lambda at: _load(seed, at))


def _synthesize(seed: int) -> ScenarioSet:
    rng = random.Random(seed)
    items: list[Scenario] = []
    for said, given in BACKCHANNELS:  # each in two voices
        for voice in rng.sample(VOICES, 2):
            pcm = trimmed(speak(given, voice, rng.choice(RATES_WPM)))
            name = f"backchannel-{len(items):02d}"
            items.append(Scenario(name, "backchannel", said, voice, pcm, _offset(rng)))
    sentences = []
    for i, text in enumerate(SENTENCES):
        voice, rate = rng.choice(VOICES), rng.choice(RATES_WPM)
        pcm = trimmed(speak(text, voice, rate))
        sentences.append(Scenario(f"sentence-{i:02d}", "sentence", text, voice, pcm, _offset(rng)))
    # Bursts as loud as the sentences (RMS over audible blocks).
    level = statistics.median(speech_rms(s.audio) for s in sentences)
    voices = [trimmed(speak(text, voice, rate)) for voice, rate, text in BABBLE]
    for i, kind in enumerate(k for k in BURSTS for _ in range(2)):
        sound = make_burst(kind, voices, rng.randrange(2**31))
        pcm = np.clip(np.rint(sound * 32767), -32768, 32767).astype(np.int16)
        scale = level / (speech_rms(pcm) or 1.0)
        pcm = trimmed(np.clip(np.rint(pcm * scale), -32768, 32767).astype(np.int16))
        items.append(Scenario(f"burst-{i:02d}", "burst", kind, "", pcm, _offset(rng)))
    items += sentences
    window = silence(ECHO_WINDOW_MS)
    for i in range(10):
        db, delay = ECHO_DB[i // 5], rng.randint(*ECHO_DELAY_MS)
        text = f"echo {db:.0f} dB, {delay} ms"
        items.append(Scenario(f"echo-{i:02d}", "echo", text, "", window, _offset(rng), db, delay))
    for i, spoken in enumerate(sentences[:TALKOVER]):
        delay = rng.randint(*ECHO_DELAY_MS)
        items.append(
            Scenario(
                f"talkover-{i:02d}",
                "talkover",
                spoken.text,
                spoken.voice,
                spoken.audio,
                _offset(rng),
                TALKOVER_DB,
                delay,
            )
        )
    return ScenarioSet(seed, items)


def _offset(rng: random.Random) -> int:
    return rng.randint(*OFFSET_MS)


_FIELDS = ("name", "kind", "text", "voice", "offset_ms", "echo_db", "echo_delay_ms", "part")


def _save(made: ScenarioSet, path: Path) -> None:
    meta = [{k: getattr(it, k) for k in _FIELDS} for it in made.items]
    save_npz(path, meta, [it.audio for it in made.items])


def _load(seed: int, path: Path) -> ScenarioSet:
    meta, tracks = load_npz(path)
    return ScenarioSet(seed, [Scenario(**m, audio=a) for m, a in zip(meta, tracks, strict=True)])


def assistant_wav(cache_dir: Path = CACHE_DIR) -> Path:
    """The assistant's speech as a WAV for the server, written once per content."""
    pcm = assistant_speech()
    key = hashlib.sha256(pcm.tobytes()).hexdigest()[:16]
    path = cache_dir / f"assistant-{key}.wav"
    return path if path.exists() else write_wav(pcm, path)
