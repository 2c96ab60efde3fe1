"""The hearing recognizer: hears held speech for qualified interruption
(engine/interruption.py) with Whisper tiny.en on CTranslate2, called directly rather
than through faster-whisper's `transcribe`, for two reasons measured on 2 cores:

- Speed. `transcribe` pads every input to Whisper's 30 s window; held speech is
  heard in a window just longer than it, at least 5 s (models/speech/whisper_window.py):
  ~50 ms a hearing, so held speech can be heard again every 100 ms as it grows.
- Confidence. A hearing says whether Whisper is sure of its words (mean token
  log-probability and no-speech probability, the two signals faster-whisper itself
  uses to call a window silent). Whisper hears words in a knock or in background
  talk ("Thank you.", "Oh, God."), but is unsure of them.

Two hearings at once (two sessions held together: at four streams on two cores, one
at a time added ~30 ms to a real interruption's p50 on `make eval-turns`), shared
fairly (models/listening/fair_pool.py): a session has at most one hearing running
and one waiting, and sessions take turns for the threads. The model
loads on first use, or on `prepare()`, which the server calls at start since
qualified interruption is on by default (loaded at the first hearing it took ~0.4 s
from that interruption)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import soxr

from models.base import PCM_RATE
from models.listening.fair_pool import FairPool
from models.speech.device import Placement, SpeechDevice, place_whisper
from models.speech.whisper_files import WHISPER_RATE, resolve_whisper
from models.speech.whisper_window import MAX_WINDOW_S, mel_window, window_s

# Whisper is told that what came before was backchannels (its "previous text"
# prompt): it then writes a hum as "Mm-hmm" where it invented words ("them.", "I'm
# sorry.") and hears a short "No." or "Sorry." surely at 200 ms of speech, which it was
# unsure of (make eval-turns' interruptions, replayed offline).
PROMPT = "Mm-hmm. Uh-huh. Yeah. Okay. Right."
MAX_TOKENS = 24  # held speech is a few words; a runaway transcript stops here
# Sure of its words: chosen on the interruption set of `make eval-turns` (replayed
# offline, every 100 ms of each item): the loosest pair with no backchannel, babble
# or noise burst heard as sure words; every interrupting sentence was, by 650 ms
# (p50) of its speech.
MIN_MEAN_LOGPROB = -1.8
MAX_NO_SPEECH = 0.5
# No words at all, as faster-whisper decides it (its defaults): Whisper hears "you"
# in silence and "Thank you." in a cough, and says it is probably not speech.
SILENT_NO_SPEECH = 0.6
SILENT_MEAN_LOGPROB = -1.0


@dataclass(frozen=True)
class Hearing:
    """A transcript of held speech and whether the recognizer is sure of it."""

    text: str
    sure: bool = True


def hearing_of(text: str, mean_logprob: float, no_speech: float) -> Hearing:
    """Whisper's transcript with its two confidences, as a hearing."""
    if no_speech > SILENT_NO_SPEECH and mean_logprob < SILENT_MEAN_LOGPROB:
        return Hearing("")
    return Hearing(text, mean_logprob >= MIN_MEAN_LOGPROB and no_speech <= MAX_NO_SPEECH)


class _Whisper:
    """The loaded model, its tokenizer and feature extractor."""

    def __init__(self, model: str, threads: int, parallel: int, placement: Placement) -> None:
        import ctranslate2  # heavy imports: only when used
        import tokenizers
        from faster_whisper.feature_extractor import FeatureExtractor
        from faster_whisper.tokenizer import Tokenizer

        path = resolve_whisper(model)
        self._ct2 = ctranslate2
        self.model = ctranslate2.models.Whisper(
            str(path),
            device=placement.device,
            compute_type=placement.compute_type,
            intra_threads=threads,
            inter_threads=parallel,
        )
        self.tokenizer = Tokenizer(
            tokenizers.Tokenizer.from_file(str(path / "tokenizer.json")),
            self.model.is_multilingual,
            task="transcribe",
            language="en",
        )
        self.features = FeatureExtractor(feature_size=self.model.n_mels)
        previous = [self.tokenizer.sot_prev, *self.tokenizer.encode(" " + PROMPT)]
        self.prompt = [*previous, *self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]

    def hear(self, audio: npt.NDArray[np.float32]) -> Hearing:
        audio = audio[-MAX_WINDOW_S * WHISPER_RATE :]
        mel = mel_window(self.features, audio, window_s(len(audio)), self.features.hop_length)
        mel = np.ascontiguousarray(mel[None])
        result: Any = self.model.generate(
            self._ct2.StorageView.from_array(mel),
            [self.prompt],
            beam_size=1,
            max_length=MAX_TOKENS,
            no_repeat_ngram_size=3,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < self.tokenizer.eot]
        text = self.tokenizer.decode(tokens).strip()
        return hearing_of(text, result.scores[0], result.no_speech_prob)


class WhisperHearing:
    """The hearing recognizer: `HearingRecognizer` of engine/interruption.py
    (structurally: models do not import engine)."""

    def __init__(
        self,
        model: str = "tiny.en",
        threads: int = 1,
        parallel: int = 2,
        queue_limit: int | None = None,
        device: SpeechDevice = "auto",
    ) -> None:
        if device == "cuda":  # refused at start, not at the first hearing
            place_whisper(device)
        self._device: SpeechDevice = device
        self._model_name = model
        self._threads = threads
        self._parallel = parallel
        self._whisper: _Whisper | None = None
        self._lock = threading.Lock()
        self.pool = FairPool(parallel, "hearing", queue_limit)

    def prepare(self) -> Future[_Whisper]:
        """Load the model on a thread of its own now (~0.4 s), so that the first held
        speech is heard at once; returns at once. A failure shows at the first hearing."""
        loading: Future[_Whisper] = Future()

        def load() -> None:
            try:
                loading.set_result(self._load())
            except Exception as exc:
                loading.set_exception(exc)

        threading.Thread(target=load, name="hearing-load", daemon=True).start()
        return loading

    def _load(self) -> _Whisper:
        with self._lock:
            if self._whisper is None:
                placement = place_whisper(self._device)
                self._whisper = _Whisper(self._model_name, self._threads, self._parallel, placement)
            return self._whisper

    def hear(self, pcm: npt.NDArray[np.int16]) -> Hearing:
        """What held speech says, heard on this thread (`transcribe` is the session's)."""
        whisper = self._load()
        audio = soxr.resample(pcm.astype(np.float32) / 32768.0, PCM_RATE, WHISPER_RATE)
        if len(audio) < WHISPER_RATE // 10:
            return Hearing("")
        return whisper.hear(audio.astype(np.float32))

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> Hearing | None:
        """What held speech says ("" for no words); None when it cannot be heard (the
        session then lets the speech interrupt rather than swallow it). A session asks
        one hearing at a time and cancels it before asking again, so only a caller that
        is no longer waited on is ever superseded: None, which it ignores as stale.
        None too, at once, when too many hearings wait already (`Overloaded`)."""
        failing = "hearing held speech failed (%s); it interrupts unheard"
        return await self.pool.answer(partial(self.hear, pcm), failing)

    def close(self) -> None:
        self.pool.close()
        with self._lock:
            whisper, self._whisper = self._whisper, None
        if whisper is not None:
            # CTranslate2 keeps a model's weights past its object's last reference
            # (a process that made and closed many servers grew ~50 MB for each); a
            # hearing still running keeps what it needs (its docs: "not guaranteed
            # to be unloaded if translations are running concurrently").
            whisper.model.unload_model()
