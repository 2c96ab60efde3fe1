"""The text end-of-turn scorer's cost on this machine (models/listening/text_turn.py).

Run from the repository root:  .venv/bin/python -m bench.text_turn  (not part of `make bench`)

Scores transcripts of 5 to 25 words, finished and unfinished, the way TextTurnModel
does (one forward pass of the bundled SmolLM2 on one thread) and prints the
milliseconds per decision (p50, p90) with the host's load, and each sentence's score.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from models.cascade.llm import bundled_ct2
from models.listening.text_turn import open_text_turn

SENTENCES = [
    "What is the weather like in Paris today?",
    "I would like to book a table for",
    "Could you please turn off the lights in the kitchen and the living room?",
    "So I was thinking that maybe we could go to the",
    "Tell me about the history of Rome and why the empire fell in the end.",
    "I need a flight from Boston to Denver on Friday morning, and then I want to come",
    "Set a timer for ten minutes.",
    "My name is",
    "Can you remind me tomorrow at nine to call my sister about the birthday party we"
    " are planning for our mother next month?",
    "and then after that I went to the",
]
ROUNDS = 5


def main() -> None:
    model = open_text_turn(*bundled_ct2())
    try:
        for text in SENTENCES:
            score = model._score(text)  # the call the pool's thread makes
            print(f"{score:9.5f}  {len(text.split()):2d} words  {text}")
        times = []
        for _ in range(ROUNDS):
            for text in SENTENCES:
                start = time.perf_counter()
                model._score(text)
                times.append((time.perf_counter() - start) * 1000)
    finally:
        model.close()
    p50 = statistics.median(times)
    p90 = float(np.percentile(times, 90))
    load = os.getloadavg()[0]
    print(f"per decision: p50 {p50:.0f} ms, p90 {p90:.0f} ms ({len(times)} calls, load {load:.2f})")


if __name__ == "__main__":
    main()
