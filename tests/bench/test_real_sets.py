"""The recorded-speech sets and the eot-bench style figures, on small stand-ins made
here: fake extracted sources in tmp_path in the sources' real formats, no network."""

from __future__ import annotations

import json
import math
import random
import wave
from pathlib import Path

import numpy as np
import pytest

from bench.turns import eot_metrics, real_sets, recorded
from bench.turns.corpus import Item
from bench.turns.eot_metrics import Silence
from bench.turns.report import eot_group
from bench.turns.score import Turn
from models.base import PCM_RATE


def tone_wav(path: Path, parts: list[tuple[int, bool]], rate: int = 16000) -> None:
    """A mono pcm16 wav of (ms, loud) parts: a 220 Hz tone where loud, else silence."""
    chunks = []
    for ms, loud in parts:
        t = np.arange(ms * rate // 1000) / rate
        chunks.append((8000 * np.sin(2 * np.pi * 220 * t)) if loud else np.zeros_like(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.concatenate(chunks).astype(np.int16).tobytes())


def pocketsphinx_json(words: list[tuple[float, float, str]]) -> str:
    return json.dumps(
        {
            "b": 0.0,
            "d": 9.0,
            "t": "",
            "w": [{"b": b, "d": d, "p": 1.0, "t": t} for b, d, t in words],
        }
    )


def test_pocketsphinx_words_drop_silences_and_pronunciation_variants() -> None:
    text = pocketsphinx_json([(0.0, 0.2, "<sil>"), (0.2, 0.17, "and(2)"), (0.37, 0.26, "mister")])
    assert real_sets.parse_pocketsphinx_json(text) == [
        real_sets.Word(200, 370, "and"),
        real_sets.Word(370, 630, "mister"),
    ]


def test_rttm_lines_become_speaker_segments() -> None:
    text = "SPEAKER dev00 1 1.440 11.872 <NA> <NA> MEE009 <NA> <NA>\nnoise\n"
    assert real_sets.parse_rttm(text) == [real_sets.Segment("dev00", "MEE009", 1440, 13312)]


def test_words_join_into_spans_unless_a_long_enough_pause_parts_them() -> None:
    words = [
        real_sets.Word(0, 300, "a"),
        real_sets.Word(400, 700, "b"),
        real_sets.Word(950, 1200, "c"),
    ]
    assert real_sets.spans_of(words, min_pause_ms=200) == [(0, 700), (950, 1200)]


def test_energy_alignment_finds_the_speech_inside_silence() -> None:
    pcm = np.zeros(PCM_RATE, dtype=np.int16)
    pcm[PCM_RATE // 4 : PCM_RATE // 2] = 5000
    assert real_sets.speech_bounds(pcm) == (240, 500)
    assert real_sets.speech_bounds(np.zeros(PCM_RATE, dtype=np.int16)) is None


def test_a_librivox_sentence_gives_a_turn_ending_on_its_last_word_and_a_spliced_hesitation(
    tmp_path: Path,
) -> None:
    d = tmp_path / "test" / "data" / "librivox"
    tone_wav(d / "book-0870.wav", [(200, False), (1800, True), (500, False)])
    words = [
        (0.0, 0.2, "<sil>"),
        (0.2, 0.4, "one"),
        (0.6, 0.4, "two"),
        (1.0, 0.5, "three(2)"),
        (1.5, 0.5, "four"),
    ]
    (d / "book-0870.json").write_text(pocketsphinx_json(words))
    items = list(real_sets.librivox_items(tmp_path, random.Random(1)))
    whole, split = items
    assert (whole.set, whole.segments, whole.text) == (
        "complete",
        [(0, 1800)],
        "one two three four",
    )
    assert len(whole.speech) == 1800 * PCM_RATE // 1000  # 24 kHz, from the first word to the last
    assert split.set == "hesitation" and len(split.segments) == 2
    pause = split.segments[1][0] - split.segments[0][1]
    assert real_sets.SPLICE_PAUSE_MS[0] <= pause <= real_sets.SPLICE_PAUSE_MS[1]
    assert split.segments[0] == (0, 800)  # "one two", then the pause, then "three four"


def test_ami_segments_alone_are_turns_and_one_speakers_gap_is_a_hesitation(tmp_path: Path) -> None:
    d = tmp_path / "tests" / "data"
    tone_wav(d / "m1.wav", [(10_000, True)])
    (d / "m1.rttm").write_text(
        "SPEAKER m1 1 0.500 1.500 <NA> <NA> A <NA> <NA>\n"  # alone: a turn
        "SPEAKER m1 1 2.400 1.000 <NA> <NA> A <NA> <NA>\n"  # 400 ms after A's first: hesitation
        "SPEAKER m1 1 5.000 2.000 <NA> <NA> B <NA> <NA>\n"
        "SPEAKER m1 1 6.500 1.500 <NA> <NA> C <NA> <NA>\n"  # overlaps B: neither alone
    )
    items = list(real_sets.ami_items(tmp_path))
    got = {(it.set, it.voice, tuple(it.segments)) for it in items}
    assert ("complete", "ami:A", ((0, 1500),)) in got
    assert ("hesitation", "ami:A", ((0, 1500), (1900, 2900))) in got
    assert not any(it.voice in ("ami:B", "ami:C") for it in items)


def test_voices_split_into_dev_and_held_parts_seeded_with_noisy_twins() -> None:
    def one(name: str, kind: str, voice: str) -> Item:
        return Item(name, kind, "", voice, 0, np.ones(2400, dtype=np.int16), [(0, 100)])

    made = [one(f"x{i}", "complete" if i % 2 else "hesitation", f"v{i % 3}") for i in range(6)]
    out = real_sets.assemble(made, seed=3)
    assert out == real_sets.assemble(made, seed=3)
    part_of = {it.voice: it.set.rsplit("-", 1)[1] for it in out}
    assert set(part_of.values()) == {"dev", "held"}
    for it in out:  # every item of a voice in that voice's part
        assert it.set.endswith(part_of[it.voice]) and it.set in real_sets.REAL_SETS
    noisy = [it for it in out if "snr10" in it.set]
    assert len(noisy) == sum(it.set == "complete" for it in made)
    assert all(it.snr_db == real_sets.SNR_DB for it in noisy)


def test_a_source_keeps_only_its_named_files_and_the_readme_credits_each() -> None:
    names = ["p-1/test/data/librivox/a.wav", "p-1/test/data/librivox/a.phone.json", "p-1/src/x.c"]
    names.append("p-1/test/data/librivox/a-0870.json")
    assert recorded.kept(names, recorded.BY_NAME["librivox"].members) == [names[0], names[3]]
    text = recorded.readme(recorded.SOURCES)
    for s in recorded.SOURCES:
        assert s.licence in text and f"{s.package} {s.version}" in text


def test_a_fetched_source_is_not_fetched_again(tmp_path: Path) -> None:
    root = tmp_path / "ami"
    root.mkdir()
    (root / ".complete").write_text("pyannote.audio 4.0.7\n")
    assert recorded.fetch(recorded.BY_NAME["ami"], tmp_path) == root  # no download tried


def test_decoding_resamples_to_mono_pcm16_at_the_server_rate(tmp_path: Path) -> None:
    tone_wav(tmp_path / "t.wav", [(500, True)], rate=16000)
    pcm = recorded.decode(tmp_path / "t.wav")
    assert pcm.dtype == np.int16 and abs(len(pcm) - PCM_RATE // 2) <= 64


# --- eot-bench style figures ---


def test_a_policy_acts_after_both_the_detector_and_the_action_delay_or_at_the_timeout() -> None:
    assert eot_metrics.acts_at(0.2, 0.5, math.inf) == 0.5
    assert eot_metrics.acts_at(0.8, 0.5, math.inf) == 0.8
    assert eot_metrics.acts_at(None, 0.5, 2.0) == 2.0
    assert math.isinf(eot_metrics.acts_at(None, 0.5, math.inf))


HESITANT = [
    Silence(False, 0.7, 0.5),  # the detector fires 500 ms into a 700 ms pause
    Silence(False, 0.9, None),  # listens through this one
    Silence(False, 0.1, 0.05),  # too short to count (eot-bench scores holds >= 200 ms)
    Silence(True, 3.0, 0.4),
    Silence(True, 3.0, 0.6),
]


def test_an_operating_point_counts_cut_off_pauses_and_averages_the_dead_air() -> None:
    assert eot_metrics.operating_point(HESITANT, 0.0, math.inf) == (0.5, 0.5)
    # Waiting 700 ms listens through both pauses and costs 700 ms at every turn end.
    assert eot_metrics.operating_point(HESITANT, 0.7, math.inf) == (0.0, 0.7)
    assert eot_metrics.operating_point([Silence(True, 3.0, 0.4)], 0.0, math.inf) is None


def test_the_budgets_pick_the_best_point_of_the_sweep() -> None:
    points = eot_metrics.sweep(HESITANT)
    assert eot_metrics.cutoff_at_latency(points, 0.6) == 0.5
    # Only a 300 ms timeout is that quick, and it cuts off every pause.
    assert eot_metrics.cutoff_at_latency(points, 0.3) == 1.0
    assert eot_metrics.latency_at_cutoff(points, 0.05) == pytest.approx(0.7)
    summary = eot_metrics.summarize(HESITANT)
    assert summary["holds"] == 2 and summary["eots"] == 2
    assert summary["latency_ms_at_cutoff"] == {"5%": 700, "10%": 700}
    # At a fixed 300 ms delay the first pause (fired at 500 ms, 700 ms long) is cut.
    assert summary["cutoff_at_action_delay"] == {"300ms": 0.5, "600ms": 0.5}


def test_a_turn_end_never_detected_has_no_finite_dead_air_without_a_timeout() -> None:
    found = [Silence(False, 0.5, None), Silence(True, 3.0, None)]
    assert eot_metrics.operating_point(found, 0.0, math.inf) == (0.0, math.inf)
    assert eot_metrics.operating_point(found, 0.0, 1.0) == (0.0, 1.0)


def test_silences_read_the_commit_times_on_the_clock_the_chunks_were_sent() -> None:
    sent_t = [i * 0.02 for i in range(300)]  # a 20 ms chunk every 20 ms from t=0
    spans = [(1000, 2000), (2600, 3000)]
    turns = [Turn(1000, 2100, committed_t=2.38), Turn(2600, 3100, committed_t=3.5)]
    got = eot_metrics.silences(spans, 3000, turns, sent_t, 20)
    # The chunk holding the last sample before the pause (1980-2000 ms) went out at 1.98 s.
    assert got[0] == Silence(False, 0.6, pytest.approx(0.4))
    assert got[1] == Silence(True, 3.0, pytest.approx(0.52))
    late = [Turn(1000, 3100, committed_t=3.5)]  # committed only after the whole turn
    assert eot_metrics.silences(spans, 3000, late, sent_t, 20)[0].fired_s is None


def test_each_clean_set_counts_in_its_voices_row_and_noisy_sets_in_none() -> None:
    assert eot_group("hesitation") == "espeak"
    assert eot_group("real-complete-held") == "real-held"
    assert eot_group("real-snr10-dev") is None and eot_group("snr5") is None


def test_a_debian_download_refused_for_want_of_package_lists_updates_them_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], cwd: Path) -> None:
        calls.append(argv)
        if len(calls) == 1:
            raise recorded.FetchFailed("no lists")
        if argv[1] == "download":
            (cwd / "p_1_all.deb").write_bytes(b"")

    monkeypatch.setattr(recorded, "_run", run)
    monkeypatch.setattr(recorded.os, "geteuid", lambda: 0)
    deb = recorded._apt_download(recorded.BY_NAME["asterisk"], tmp_path)
    assert deb.name == "p_1_all.deb"
    pin = "asterisk-core-sounds-en-wav=1.6.1-1"
    assert calls == [
        ["apt-get", "download", pin],
        ["apt-get", "update", "-qq"],
        ["apt-get", "download", pin],
    ]
