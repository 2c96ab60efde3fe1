"""The interruption set of recorded human voices, from the sources bench/turns/recorded.py
fetches and with bench/turns/real_sets.py's parsers: what a person says while the
assistant talks.

- Interrupting sentences: each LibriVox sentence (one reader), Asterisk prompts (one
  far-end voice) and AMI segments of at least SENTENCE_MS[0] that no other speaker talks
  into (up to AMI_PER_SPEAKER per speaker, many voices), each cut at SENTENCE_MS[1].
- Backchannels over talk ("backchannel-over-talk"): AMI segments of BACKCHANNEL_MS
  (annotation durations: "yeah", "mm", "okay" and the like are this short) lying
  inside another speaker's segment, with MIN_PAUSE_MS of it on either side. The
  excerpts are single-channel mixes, so the other speaker's ongoing speech is in the
  cut too, quieter (the item's text names them), at times as clear words.
- Laughs, breaths, coughs and clean backchannels (a hum alone): recorded sound packs,
  bench/turns/reactions.py.

Speakers are split, seeded, into a development and a held-back part (the turn sets'
split_parts); each item carries its part.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from bench.turns import recorded
from bench.turns.reactions import reaction_scenarios
from bench.turns.real_sets import (
    MIN_PAUSE_MS,
    Segment,
    cut,
    parse_pocketsphinx_json,
    parse_rttm,
    speech_bounds,
    split_parts,
)
from bench.turns.scenarios import OFFSET_MS, Scenario

SENTENCE_MS = (1000, 3000)  # an interrupting sentence: at least, then cut at
BACKCHANNEL_MS = (250, 1000)
AMI_PER_SPEAKER = 2
ASTERISK_SENTENCES = 6
OVER_TALK = "backchannel-over-talk"


def ami_segments(root: Path) -> dict[str, list[Segment]]:
    """Each excerpt's RTTM segments by start, for the excerpts whose audio shipped."""
    by_uri: dict[str, list[Segment]] = {}
    for path in sorted(root.glob("tests/data/*.rttm")):
        for s in parse_rttm(path.read_text()):
            by_uri.setdefault(s.uri, []).append(s)
    wavs = {uri: root / "tests" / "data" / f"{uri}.wav" for uri in by_uri}
    return {u: sorted(s, key=lambda s: s.start_ms) for u, s in by_uri.items() if wavs[u].exists()}


def is_backchannel(s: Segment, segs: list[Segment]) -> Segment | None:
    """The other speaker's segment a short one lies inside (MIN_PAUSE_MS clear each side),
    when `s` is BACKCHANNEL_MS long; else None."""
    if not BACKCHANNEL_MS[0] <= s.end_ms - s.start_ms < BACKCHANNEL_MS[1]:
        return None
    return next(
        (
            o
            for o in segs
            if o.speaker != s.speaker
            and o.start_ms <= s.start_ms - MIN_PAUSE_MS
            and o.end_ms >= s.end_ms + MIN_PAUSE_MS
        ),
        None,
    )


def is_sentence(s: Segment, segs: list[Segment]) -> bool:
    """Long enough, and no one else talks from MIN_PAUSE_MS before it to its cut."""
    if s.end_ms - s.start_ms < SENTENCE_MS[0]:
        return False
    a, b = s.start_ms - MIN_PAUSE_MS, min(s.end_ms, s.start_ms + SENTENCE_MS[1])
    return not any(o.speaker != s.speaker and o.start_ms < b and o.end_ms > a for o in segs)


def ami_scenarios(root: Path) -> Iterator[tuple[str, str, str, Scenario]]:
    """(kind, text, voice, a Scenario without offset) per AMI item."""
    per_speaker: dict[str, int] = {}
    for uri, segs in ami_segments(root).items():
        pcm = recorded.decode(root / "tests" / "data" / f"{uri}.wav")
        for i, s in enumerate(segs):
            voice = f"ami:{s.speaker}"
            over = is_backchannel(s, segs)
            if over is not None:
                text = f"short turn inside {over.speaker}'s speech"
                audio = cut(pcm, s.start_ms, s.end_ms)
                yield OVER_TALK, text, voice, Scenario(f"{uri}-{i:02d}", "", "", "", audio, 0)
            elif is_sentence(s, segs) and per_speaker.get(voice, 0) < AMI_PER_SPEAKER:
                per_speaker[voice] = per_speaker.get(voice, 0) + 1
                end = min(s.end_ms, s.start_ms + SENTENCE_MS[1])
                audio = cut(pcm, s.start_ms, end)
                yield "sentence", "", voice, Scenario(f"{uri}-{i:02d}", "", "", "", audio, 0)


def librivox_sentences(root: Path) -> Iterator[tuple[str, str, str, Scenario]]:
    for timing in sorted(root.glob("test/data/librivox/*[0-9].json")):
        words = parse_pocketsphinx_json(timing.read_text())
        start = words[0].start_ms
        kept = [w for w in words if w.end_ms - start <= SENTENCE_MS[1]] or words[:1]
        audio = cut(recorded.decode(timing.with_suffix(".wav")), start, kept[-1].end_ms)
        text = " ".join(w.text for w in kept)
        name = f"librivox-{timing.stem[-4:]}"
        yield "sentence", text, "librivox:austen-reader", Scenario(name, "", "", "", audio, 0)


def asterisk_sentences(root: Path, rng: random.Random) -> Iterator[tuple[str, str, str, Scenario]]:
    prompts = []
    for wav in sorted(root.glob("*.wav")):
        pcm = recorded.decode(wav)
        bounds = speech_bounds(pcm)
        if bounds and bounds[1] - bounds[0] >= SENTENCE_MS[0]:
            a = bounds[0]
            prompts.append((wav.stem, cut(pcm, a, min(bounds[1], a + SENTENCE_MS[1]))))
    for name, pcm in rng.sample(prompts, min(len(prompts), ASTERISK_SENTENCES)):
        yield "sentence", name, "asterisk:allison", Scenario(f"asterisk-{name}", "", "", "", pcm, 0)


def build(roots: dict[str, Path], seed: int) -> list[Scenario]:
    """Every item, named by kind and part ("real-dev-sentence-03"), offsets seeded."""
    rng = random.Random(seed)
    made = [
        *librivox_sentences(roots["librivox"]),
        *ami_scenarios(roots["ami"]),
        *asterisk_sentences(roots["asterisk"], rng),
        *reaction_scenarios(roots),
    ]
    part = split_parts([voice for _, _, voice, _ in made], seed)
    out: list[Scenario] = []
    for kind, text, voice, s in made:
        n = sum(o.kind == kind and o.part == part[voice] for o in out)
        out.append(
            Scenario(
                name=f"real-{part[voice]}-{kind}-{n:02d}",
                kind=kind,
                text=text or s.name,
                voice=voice,
                audio=s.audio,
                offset_ms=rng.randint(*OFFSET_MS),
                part=part[voice],
            )
        )
    return out


def make_real_scenarios(seed: int) -> list[Scenario]:
    """The set for `seed`, fetching the sources the first time."""
    return build(recorded.fetch_all(), seed)
