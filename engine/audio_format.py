"""The protocol's audio formats, and conversion between them and the engine's pcm.

A session picks a format for input and one for output: `audio/pcm` (16-bit
little-endian mono at 24 kHz), `audio/pcmu` (G.711 μ-law) or `audio/pcma`
(G.711 A-law), both at 8 kHz. The engine itself always works on int16 mono at
24 kHz, so the G.711 formats are resampled on the way in and out.

Resampling uses soxr's streaming resampler (HQ) on float32 samples: libsoxr
dithers int16 output, which would make the result depend on how the stream was
chunked; the float path is exactly chunking-invariant. soxr compensates its
filter delay (output sample k is input time k / rate, no offset), but it holds
output back while it fills its processing blocks: between 8 and 24 kHz, with
10-100 ms chunks, 13-73 ms of audio (43 ms on average) is still inside the
resampler at any moment. `flush()` drains it; the total is then exact (3N
output samples for N input samples at 8 -> 24 kHz).

The G.711 codecs are bit-exact with the ITU-T reference implementation (Sun's
g711.c, which CPython's `audioop` also uses), vectorized with numpy tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import soxr

from models.base import PCM_RATE

Pcm16 = npt.NDArray[np.int16]
Kind = Literal["pcm", "pcmu", "pcma"]

G711_RATE = 8_000

_WIRE_TYPES: dict[str, Kind] = {"audio/pcm": "pcm", "audio/pcmu": "pcmu", "audio/pcma": "pcma"}
_RATES: dict[Kind, int] = {"pcm": PCM_RATE, "pcmu": G711_RATE, "pcma": G711_RATE}


@dataclass(frozen=True)
class AudioFormat:
    kind: Kind
    rate: int

    def __post_init__(self) -> None:
        # Refused here, not only in the parsers, so no unsupported format can exist.
        expected = _RATES.get(self.kind)
        if expected is None:
            raise ValueError(f"unsupported audio format {self.kind!r}")
        if self.rate != expected:
            raise ValueError(
                f"audio/{self.kind} is supported only at {expected} Hz, not {self.rate} Hz"
            )

    @classmethod
    def from_wire(cls, type: str, rate: int | None = None) -> AudioFormat:
        """The GA shape: {"type": "audio/pcm", "rate": 24000} or {"type": "audio/pcmu"}."""
        kind = _WIRE_TYPES.get(type)
        if kind is None:
            supported = ", ".join(_WIRE_TYPES)
            raise ValueError(f"unsupported audio format type {type!r} (supported: {supported})")
        # The rate may be left out; G.711 has no rate field, but a correct one is harmless.
        return cls(kind, _RATES[kind] if rate is None else rate)

    def to_wire(self) -> dict[str, str | int]:
        if self.kind == "pcm":
            return {"type": "audio/pcm", "rate": self.rate}
        return {"type": f"audio/{self.kind}"}

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self.kind == "pcm" else 1

    def ms_of(self, nbytes: int) -> float:
        """How much audio `nbytes` of this format holds, in ms."""
        return nbytes / self.bytes_per_sample * 1000 / self.rate


PCM24 = AudioFormat("pcm", PCM_RATE)
PCMU = AudioFormat("pcmu", G711_RATE)
PCMA = AudioFormat("pcma", G711_RATE)


# --- G.711 ---------------------------------------------------------------------------
# Segment end points of the reference encoder: a magnitude's segment is the index of
# the first end point it does not exceed.
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # in the 14-bit domain


def _ulaw_compress(pcm: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    """The reference μ-law encoder on 16-bit values, vectorized."""
    x = pcm >> 2  # the reference works on 14 bits (arithmetic shift: -1 stays negative)
    negative = x < 0
    magnitude = np.minimum(np.abs(x), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, magnitude)
    code = (np.minimum(seg, 7) << 4) | ((magnitude >> (np.minimum(seg, 7) + 1)) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)  # beyond the last segment: the largest code
    # μ-law inverts all bits; the sign bit stays clear for negative values.
    return (code ^ np.where(negative, 0x7F, 0xFF)).astype(np.uint8)


def _alaw_compress(pcm: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    """The reference A-law encoder on 16-bit values, vectorized."""
    x = pcm >> 3  # the reference works on 13 bits
    negative = x < 0
    # One's complement for negatives: -1 and 0 land in mirrored first steps.
    magnitude = np.where(negative, -x - 1, x)
    # 13-bit magnitudes never pass the last segment end, so no clipping is needed.
    seg = np.searchsorted(_ALAW_SEG_END, magnitude)
    code = (seg << 4) | ((magnitude >> np.maximum(seg, 1)) & 0xF)
    # A-law inverts the even bits; the sign bit is set for non-negative values.
    return (code ^ np.where(negative, 0x55, 0xD5)).astype(np.uint8)


def _ulaw_expand(code: npt.NDArray[np.int32]) -> npt.NDArray[np.int16]:
    u = ~code & 0xFF
    t = (((u & 0xF) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def _alaw_expand(code: npt.NDArray[np.int32]) -> npt.NDArray[np.int16]:
    a = code ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0xF) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


# Encoders index by the sample's bit pattern (its uint16 view); decoders by the code.
_ALL_SAMPLES = np.arange(1 << 16, dtype=np.uint16).view(np.int16).astype(np.int32)
_ALL_CODES = np.arange(256, dtype=np.int32)
_ULAW_ENCODE = _ulaw_compress(_ALL_SAMPLES)
_ALAW_ENCODE = _alaw_compress(_ALL_SAMPLES)
_ULAW_DECODE = _ulaw_expand(_ALL_CODES)
_ALAW_DECODE = _alaw_expand(_ALL_CODES)


def _check_pcm16(pcm: Pcm16) -> None:
    if pcm.ndim != 1 or pcm.dtype != np.int16:
        raise ValueError("expected mono int16 samples")


def ulaw_encode(pcm: Pcm16) -> bytes:
    _check_pcm16(pcm)
    return _ULAW_ENCODE[pcm.view(np.uint16)].tobytes()


def alaw_encode(pcm: Pcm16) -> bytes:
    _check_pcm16(pcm)
    return _ALAW_ENCODE[pcm.view(np.uint16)].tobytes()


def ulaw_decode(data: bytes) -> Pcm16:
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> Pcm16:
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


# --- streaming conversion ------------------------------------------------------------


def _new_resampler(in_rate: int, out_rate: int) -> soxr.ResampleStream | None:
    if in_rate == out_rate:
        return None
    # float32: int16 output would be dithered, so not chunking-invariant (see above).
    return soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32")


def _resample(stream: soxr.ResampleStream, pcm: Pcm16, last: bool = False) -> Pcm16:
    out: npt.NDArray[np.float32] = stream.resample_chunk(pcm.astype(np.float32), last=last)
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


_EMPTY = np.zeros(0, dtype=np.int16)


class InputDecoder:
    """A session's input audio: wire bytes in `fmt` -> int16 mono at 24 kHz.

    Streaming: the resampler's state carries over between calls, so chunk
    boundaries leave no trace and the output does not depend on how the input
    was split. For the 8 kHz formats, output lags the input by the audio the
    resampler holds back (13-73 ms, see the module doc) until `flush()`.
    """

    def __init__(self, fmt: AudioFormat) -> None:
        self.fmt = fmt
        self._resampler = _new_resampler(fmt.rate, PCM_RATE)

    def decode(self, data: bytes) -> Pcm16:
        if self.fmt.kind == "pcm":
            if len(data) % 2:
                raise ValueError(f"audio/pcm needs whole 16-bit samples; got {len(data)} bytes")
            return np.frombuffer(data, dtype="<i2").astype(np.int16)
        pcm = ulaw_decode(data) if self.fmt.kind == "pcmu" else alaw_decode(data)
        return pcm if self._resampler is None else _resample(self._resampler, pcm)

    def flush(self) -> Pcm16:
        """What the resampler still holds (e.g. at a commit); the stream then restarts."""
        if self._resampler is None:
            return _EMPTY
        tail = _resample(self._resampler, _EMPTY, last=True)
        self._resampler.clear()  # soxr accepts no input after the last chunk
        return tail

    def reset(self) -> None:
        """Drop the audio held back (after input_audio_buffer.clear)."""
        if self._resampler is not None:
            self._resampler.clear()

    def input_ms(self, nbytes: int) -> float:
        """Duration of `nbytes` of input, for accounting before decoding."""
        return self.fmt.ms_of(nbytes)


class OutputEncoder:
    """A response's audio: int16 mono at `source_rate` -> wire bytes in `fmt`.

    Streaming like `InputDecoder`; call `flush()` at the end of a response so
    the audio the resampler holds back is sent too, or `reset()` when the
    response is cancelled so none of it leaks into the next one.
    """

    def __init__(self, fmt: AudioFormat, source_rate: int = PCM_RATE) -> None:
        self.fmt = fmt
        self.source_rate = source_rate
        self._resampler = _new_resampler(source_rate, fmt.rate)

    def encode(self, pcm: Pcm16) -> bytes:
        _check_pcm16(pcm)
        if self._resampler is not None:
            pcm = _resample(self._resampler, pcm)
        return self._to_wire(pcm)

    def flush(self) -> bytes:
        if self._resampler is None:
            return b""
        tail = _resample(self._resampler, _EMPTY, last=True)
        self._resampler.clear()  # ready for the next response
        return self._to_wire(tail)

    def reset(self) -> None:
        if self._resampler is not None:
            self._resampler.clear()

    def _to_wire(self, pcm: Pcm16) -> bytes:
        if self.fmt.kind == "pcmu":
            return ulaw_encode(pcm)
        if self.fmt.kind == "pcma":
            return alaw_encode(pcm)
        return pcm.astype("<i2").tobytes()
