"""semantic_vad in a noisy room: consecutive questions over continuous babble, as the
VAD scores it, each end their own turn (as server_vad's do), while in a quiet room an
unsure pause still waits. Fake VAD scores shaped like Silero's on babble and pink noise
at 10 dB SNR (bench/turns/consecutive.py), and an end-of-turn model that is unsure, as
Smart Turn is when fed the noise."""

from __future__ import annotations

from engine.semantic_turns import Eagerness, SemanticTurnDetector, SemanticVadParams
from engine.turns import PauseCandidate, ServerVadParams, SpeechStopped, TurnDetector
from engine.vad import FrameScore

FRAME_MS = 32
SPEECH = 0.9
BABBLE = [0.05, 0.2, 0.1, 0.3, 0.15, 0.08, 0.25, 0.12]  # the VAD on other voices
BLIP_EVERY = 20  # a frame of babble taken for speech every 640 ms
UNSURE = 0.05  # the model's probability that the user has finished
EAGERNESSES: tuple[Eagerness, ...] = ("low", "medium", "high", "auto")


def noise_frames(n: int) -> list[float]:
    return [
        SPEECH if i % BLIP_EVERY == BLIP_EVERY - 1 else BABBLE[i % len(BABBLE)] for i in range(n)
    ]


def room(noisy: bool) -> list[float]:
    """1.3 s of room, then three 2 s questions each followed by 1.9 s of room."""

    def gap(n: int) -> list[float]:
        return noise_frames(n) if noisy else [0.01] * n

    scores = gap(40)
    for _ in range(3):
        scores += [SPEECH] * 62 + gap(60)
    return scores


def turn_ends(detector: TurnDetector, scores: list[float]) -> list[int]:
    """Where each turn ended (audio_end_ms); pauses are scored UNSURE at once."""
    ends = []
    for i, score in enumerate(scores):
        for event in detector.feed([FrameScore(i * FRAME_MS, (i + 1) * FRAME_MS, score)]):
            if isinstance(event, PauseCandidate):
                assert isinstance(detector, SemanticTurnDetector)
                stop = detector.decide(event.pause_id, UNSURE)
                if stop is not None:
                    ends.append(stop.audio_end_ms)
            elif isinstance(event, SpeechStopped):
                ends.append(event.audio_end_ms)
    return ends


def question_ends_ms() -> list[int]:
    return [(40 + 62 * (k + 1) + 60 * k) * FRAME_MS for k in range(3)]


def test_server_vad_ends_each_question_in_babble() -> None:
    ends = turn_ends(TurnDetector(ServerVadParams()), room(noisy=True))
    assert len(ends) == 3


def test_semantic_vad_ends_each_question_in_babble_as_server_vad_does() -> None:
    for eagerness in EAGERNESSES:
        detector = SemanticTurnDetector(SemanticVadParams(eagerness=eagerness))
        ends = turn_ends(detector, room(noisy=True))
        assert len(ends) == 3, eagerness
        for end, question_end in zip(ends, question_ends_ms(), strict=True):
            # Before the next question begins, and no later than server_vad's window
            # plus one blip's restart.
            assert question_end < end <= question_end + 2 * 500 + FRAME_MS * 2, eagerness


def test_in_a_quiet_room_an_unsure_pause_still_waits() -> None:
    detector = SemanticTurnDetector(SemanticVadParams(eagerness="low"))
    # 1.9 s gaps are shorter than the wait an unsure score sets: one turn, as before.
    assert turn_ends(detector, room(noisy=False)) == []  # no pause ended the turn
    # auto waits its unsure wait (1 s), twice server_vad's window, not the noisy cap.
    detector = SemanticTurnDetector(SemanticVadParams(eagerness="auto"))
    ends = turn_ends(detector, room(noisy=False))
    assert [end - q for end, q in zip(ends, question_ends_ms(), strict=True)] == [1024] * 3
