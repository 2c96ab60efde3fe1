"""Judging speech by ear: what the bench/speech fixtures say, and the word error rate
between a reference and what a recognizer heard."""

from __future__ import annotations

import re
from collections.abc import Callable

# What each fixture says.
QUESTIONS = {
    "weather": "what is the weather like today",
    "joke": "tell me a joke",
    "timer": "set a timer for ten minutes",
    "lights": "please turn off the lights in the kitchen",
}


def spoken_words(text: str) -> list[str]:
    """Lowercase words, digits kept ("10" read as "ten", as the fixtures say it)."""
    text = text.lower().replace("10", "ten")
    return re.sub(r"[^a-z0-9' ]+", " ", text).split()


def wer(reference: str, heard: str, words: Callable[[str], list[str]] = spoken_words) -> float:
    """Word error rate: word-level edit distance over the reference length."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (r != h))
    return row[-1] / max(len(ref), 1)
