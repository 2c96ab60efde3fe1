"""Has the user finished their turn, judged from their words so far.

The bundled SmolLM2-135M-Instruct (the cascade's LLM, converted once to CTranslate2
in the cache, models/cascade/llm.py `bundled_ct2`) reads the transcript as the user's
message in its chat format, and the probability it gives to ending the message right
there is the score (as LiveKit's first text turn detector did with a small LM). The
end is `<|im_end|>` or a closing ". ? !" (which the model writes before `<|im_end|>`
when the transcript has none): one forward pass over the prompt, the mass of those
tokens at its last position.

Measured on this host (2 cores, AVX512-VNNI, int8, one thread, `python -m
bench.text_turn`): p50 57 ms, p90 68 ms per decision for 5-25 word transcripts at
load 1.3, 98/150 ms at load 5.7. It runs on its own
thread behind a FairPool (models/listening/fair_pool.py), as Smart Turn does: each
session at most one call running and one waiting, sessions take turns.

`TextTurnModel` implements engine/turn_fusion.py's TextEndOfTurnModel structurally.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models.errors import ModelMissing
from models.listening.fair_pool import FairPool

log = logging.getLogger(__name__)

# SmolLM2's own chat template writes this system message when none is given: the
# model was tuned to see it.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# The tokens that end (or close) the user's message: the chat format's end first.
END_TOKENS = ("<|im_end|>", ".", "?", "!")
# Longer transcripts keep their last words: the end of a turn is decided there, and
# the cost grows with the prompt.
MAX_WORDS = 60
_TRAILING = re.compile(r"[\s.,;:!?\u2026-]+$")


class Forward(Protocol):
    """What the scorer needs of a ctranslate2.Generator (a fake in tests)."""

    def forward_batch(self, tokens: list[list[str]]) -> object:
        """Logits for every position of each sequence: (batch, length, vocabulary)."""
        ...


class Tokenize(Protocol):
    def __call__(self, text: str) -> list[str]: ...


def user_prompt(text: str) -> str:
    """The chat prompt up to the end of the user's words (ChatML, as SmolLM2's).
    Whisper's closing punctuation goes: it guesses it from the intonation, and on a
    phrase cut at a hesitation ("I need to buy.") it would tell the LM the sentence is
    done (the espeak hesitations scored 0.01-0.5 with it, 8 in 10 under 1e-3 without)."""
    words = _TRAILING.sub("", text).split()[-MAX_WORDS:]
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{' '.join(words)}"


def end_probability(logits: npt.NDArray[np.float32], ends: Sequence[int]) -> float:
    """The softmax mass of the `ends` token ids in one position's `logits`."""
    values = logits.astype(np.float64)
    weights = np.exp(values - values.max())
    return float(np.clip(weights[list(ends)].sum() / weights.sum(), 0.0, 1.0))


class TextTurnModel:
    """End-of-turn probability for a transcript, scored off the event loop."""

    def __init__(self, forward: Forward, tokenize: Tokenize, ends: Sequence[int]) -> None:
        self._forward = forward
        self._tokenize = tokenize
        self._ends = list(ends)
        self.pool = FairPool(1, "text-turn")

    def _score(self, text: str) -> float:
        tokens = self._tokenize(user_prompt(text))
        logits = np.asarray(self._forward.forward_batch([tokens]), dtype=np.float32)
        return end_probability(logits[0, -1], self._ends)

    async def probability(self, text: str) -> float | None:
        """Probability in [0, 1] that `text` is a whole turn; None for no words, when
        scoring fails (warned once), or when the same session asked again first."""
        if not text.strip():
            return None
        failing = "text end-of-turn scoring failed (%s); using acoustics only"
        return await self.pool.answer(partial(self._score, text), failing)

    def close(self) -> None:
        self.pool.close()


def open_text_turn(model_dir: Path, compute_type: str) -> TextTurnModel:
    """The scorer on the CTranslate2 model in `model_dir`, on one thread."""
    import ctranslate2
    import tokenizers

    generator = ctranslate2.Generator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=1
    )
    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ends = [tokenizer.token_to_id(token) for token in END_TOKENS]
    if any(end is None for end in ends):
        raise ValueError(f"{model_dir} has no ChatML end token")

    def tokenize(text: str) -> list[str]:
        return list(tokenizer.encode(text, add_special_tokens=False).tokens)

    return TextTurnModel(generator, tokenize, [e for e in ends if e is not None])


def load_text_turn(locate: Callable[[], tuple[Path, str]]) -> TextTurnModel | None:
    """The process's text scorer, or None (with a warning) when the model cannot be
    found or loaded: turns then end on the acoustic score alone. `locate` gives the
    CTranslate2 model directory and compute type (the cascade's SmolLM2:
    models/cascade/llm.py `bundled_ct2`; listening does not import executors)."""
    try:
        return open_text_turn(*locate())
    except ModelMissing as exc:
        log.warning("text end-of-turn unavailable: %s Fix: %s", exc.problem, exc.fix)
    except Exception as exc:  # CTranslate2's load errors are plain Exceptions
        log.warning("text end-of-turn unavailable: cannot load the model (%s)", exc)
    return None
