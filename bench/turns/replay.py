"""One item of the turn-taking set replayed offline through the engine's own turn
detection, as a session would run it, at full CPU speed: no server, no pacing.

The microphone stream is cut into the live client's 20 ms appends and each append
scored by a `VadStream` (so frames arrive as they would, late by the resampler's
hold-back). The detector sees them append by append. For semantic_vad a
`PauseCandidate` is scored on the audio the session would score at that moment (from
the turn's `audio_start_ms` to the end of the audio received, at most the last 8 s,
engine/user_turns.py `_score_pause`) and the probability reaches `decide` once
`score_delay_ms` more audio has been received: the model's latency, during which the
detector keeps being fed. Times of events are on the audio clock (an append is
"received" when its last sample has been captured, as the live client sends it);
`delivery_ms` is added for the client's view, so latencies compare with
`make eval-turns`' "committed at client".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.turns.cache import load_json, save_json
from bench.turns.corpus import Corpus, Item, Span
from bench.turns.noise import Pcm16
from bench.turns.run import LEAD_MS, truth_of
from bench.turns.score import Outcome, Turn, classify
from bench.turns.stream import CHUNK_MS
from engine.end_of_turn import END_OF_TURN_WINDOW_S
from engine.semantic_turns import SemanticTurnDetector, turn_audio
from engine.turns import PauseCandidate, SpeechStarted, SpeechStopped, TurnDetector, TurnEvent
from engine.vad import FrameScore, VadBackend, VadStream
from models.base import PCM_RATE

CHUNK = PCM_RATE * CHUNK_MS // 1000  # samples per append
WINDOW = int(END_OF_TURN_WINDOW_S * PCM_RATE)  # what the session hands the model, at most

# From the end of the append that ends a turn to the client seeing it: the median over
# the clean items of `make eval-turns`' server_vad run (bench/results/turns.json),
# whose audio_end_ms this replay reproduces exactly. (The ~40 ms from audio_end_ms to
# the client quoted there also holds the VAD's hold-back, which the replay's audio
# clock already counts.)
DELIVERY_MS = 4

# The end-of-turn model on a turn's audio (16 kHz int16, at most 8 s): a probability,
# or None when it cannot score.
Model = Callable[[Pcm16], float | None]


@dataclass(frozen=True)
class Replayable:
    """An item's microphone stream and what the VAD made of each of its appends
    (computed once: the frames do not depend on the turn detector)."""

    item: Item
    pcm: Pcm16  # whole appends, the last one padded with zeros
    spans: list[Span]  # the true speech, on the stream's clock
    frames: list[list[FrameScore]]  # per append, the frames it completed

    def chunks_for(self, trail_ms: int) -> int:
        """Appends a mode streams: the lead, the speech and `trail_ms` after it."""
        ms = LEAD_MS + self.item.speech_ms + trail_ms
        return min(len(self.frames), -(-ms // CHUNK_MS))


def prepare(corpus: Corpus, item: Item, trail_ms: int, backend: VadBackend) -> Replayable:
    """`item` streamed with `trail_ms` after the speech (the longest any replayed mode
    needs: a shorter trail is a prefix, the noise being the same whatever the trail)."""
    pcm, spans = corpus.stream(item, LEAD_MS, trail_ms)
    pcm = np.concatenate([pcm, np.zeros(-len(pcm) % CHUNK, np.int16)])
    vad = VadStream(backend, input_rate=PCM_RATE)
    frames = [vad.process(pcm[i : i + CHUNK]) for i in range(0, len(pcm), CHUNK)]
    return Replayable(item, pcm, spans, frames)


class ScoreCache:
    """The model's probabilities by the audio scored: the same candidate instant in
    the same item is the same audio, so a grid of curves asks the model once per
    instant. Keyed by the samples' digest; kept in `path` (JSON) across runs."""

    def __init__(self, model: Model, path: Path | None = None) -> None:
        self._model = model
        self._path = path
        self._scores: dict[str, float | None] = load_json(path)
        self.calls = 0  # model calls made (cache misses)

    def probability(self, pcm: Pcm16) -> float | None:
        """The model's probability for a turn's 24 kHz audio (cut and resampled as
        the session does)."""
        key = hashlib.sha1(pcm.tobytes()).hexdigest()
        if key not in self._scores:
            self.calls += 1
            self._scores[key] = self._model(turn_audio(pcm, PCM_RATE))
        return self._scores[key]

    def save(self) -> None:
        save_json(self._path, self._scores)


@dataclass(frozen=True)
class Scored:
    """A score on its way to `decide`."""

    pause_id: int
    probability: float | None
    due_ms: int  # when it reaches the session, on the audio clock


def replay(
    r: Replayable,
    detector: TurnDetector,
    trail_ms: int,
    scores: ScoreCache | None = None,
    score_delay_ms: int = 100,
    delivery_ms: int = DELIVERY_MS,
) -> list[Turn]:
    """The turns a client would see for `r` streamed with `trail_ms` after the speech,
    with `detector` (a `SemanticTurnDetector` has its pauses scored by `scores`)."""
    turns: list[Turn] = []
    turn_start = 0  # sample where the open turn's audio begins
    pending: Scored | None = None
    semantic = detector if isinstance(detector, SemanticTurnDetector) else None

    def on(event: TurnEvent, at_ms: int, received: int) -> None:
        nonlocal turn_start, pending
        if isinstance(event, SpeechStarted):
            turns.append(Turn(event.audio_start_ms))
            turn_start = event.audio_start_ms * PCM_RATE // 1000
        elif isinstance(event, SpeechStopped):
            seen_t = (at_ms + delivery_ms) / 1000
            turns[-1] = replace(
                turns[-1], end_ms=event.audio_end_ms, stopped_t=seen_t, committed_t=seen_t
            )
        elif isinstance(event, PauseCandidate) and scores is not None:
            audio = r.pcm[max(turn_start, received - WINDOW) : received]
            pending = Scored(event.pause_id, scores.probability(audio), at_ms + score_delay_ms)

    def deliver(at_ms: int) -> None:
        """Hand the pending score to the detector if it is due before `at_ms`."""
        nonlocal pending
        if semantic is None or pending is None or pending.due_ms >= at_ms:
            return
        done, pending = pending, None
        stop = semantic.decide(done.pause_id, done.probability)
        if stop is not None:
            on(stop, done.due_ms, 0)

    n = r.chunks_for(trail_ms)
    for k in range(n):
        received = (k + 1) * CHUNK
        now_ms = received * 1000 // PCM_RATE
        # A score due before this append arrives is handled first; one due with it
        # comes just after (it was asked for just after an append was handled).
        deliver(now_ms)
        for event in detector.feed(r.frames[k]):
            on(event, now_ms, received)
        if semantic is not None and pending is not None:
            if semantic.pending_pause != pending.pause_id:
                pending = None  # the session cancels a score nobody waits for
    deliver(n * CHUNK_MS + 1)  # one due as the stream ends still counts
    return turns


def outcome(r: Replayable, turns: list[Turn], trail_ms: int) -> Outcome:
    """`turns` scored against the truth, each append sent when its last sample was
    captured (the audio clock as the wall clock)."""
    sent_t = [(k + 1) * CHUNK_MS / 1000 for k in range(r.chunks_for(trail_ms))]
    return classify(turns, truth_of(r.spans, sent_t))
