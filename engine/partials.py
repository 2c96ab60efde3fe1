"""Partial transcripts while the user speaks: `conversation.item.input_audio_transcription.delta`
events for the turn in progress, before its commit.

Whisper is not streaming, so a partial is a recognition of the turn so far, begun
every PARTIAL_EVERY_MS of new speech when the shared recognizer is idle (never ahead
of a committed turn or another session's work; skipped under load). A word goes out
once two consecutive recognitions agree on it and on everything before it (the
"local agreement" policy): the unstable tail is held back. Each delta is only the
new words. At the end, the final recognition's words after the ones sent are the
last delta, and the completed transcript is the concatenation of the deltas, as
OpenAI's contract says; when the final recognition revised a word already sent, the
sent word stands (`remainder`).

The decisions are pure functions over immutable values; `Partials` (one per
session, in `InputTranscription`) holds the turn's state and its one recognition in
flight, which reports back through the session's mailbox.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace

from models.base import Executor, Heard, PromptItem, TokenLogprob

# A partial recognition of the turn so far after this much more speech. On the
# development host (2 cores, tiny.en int8, beam 5) one costs ~120-250 ms of CPU, so
# a speaking session spends at most a third of a core on them, and a loaded
# recognizer none (docs/performance.md).
PARTIAL_EVERY_MS = 500


@dataclass(frozen=True)
class Word:
    """A word of a recognition, with its tokens' log-probabilities when known."""

    text: str
    tokens: tuple[TokenLogprob, ...] = ()


def words_of(heard: Heard) -> tuple[Word, ...]:
    """The words of a recognition; each with the tokens that spell it when the
    tokens and the text agree on the words (a token with a leading space starts one)."""
    plain = heard.text.split()
    if heard.logprobs:
        grouped: list[list[TokenLogprob]] = []
        for token in heard.logprobs:
            if not grouped or _spelled(token).startswith(b" "):
                grouped.append([])
            grouped[-1].append(token)
        spelled = ["".join(t.token for t in group).strip() for group in grouped]
        if spelled == plain:
            return tuple(Word(w, tuple(g)) for w, g in zip(plain, grouped, strict=True))
    return tuple(Word(w) for w in plain)


def _spelled(token: TokenLogprob) -> bytes:
    """A token's own bytes: a space first starts a word."""
    return token.raw if token.raw is not None else token.token.encode()


def _key(word: Word) -> str:
    """A word as agreement compares it: "Hey," and "hey" agree."""
    return word.text.strip(".,!?;:\"'").lower()


def _keys(words: tuple[Word, ...]) -> list[str]:
    return [_key(w) for w in words]


@dataclass(frozen=True)
class TurnPartials:
    """What was sent of one turn's partial transcript, and its latest recognition."""

    item_id: str
    sent: tuple[Word, ...] = ()
    latest: tuple[Word, ...] = ()
    heard_ms: int = 0  # the turn's audio when the latest recognition began


def agree(state: TurnPartials, heard: tuple[Word, ...]) -> tuple[TurnPartials, tuple[Word, ...]]:
    """A new recognition of the turn: the words now stable (agreed with the one
    before, past what was sent) and the new state. A recognition that contradicts a
    word already sent adds nothing; later ones that extend the sent words again do."""
    n = 0
    for before, now in zip(_keys(state.latest), _keys(heard), strict=False):
        if before != now:
            break
        n += 1
    sent = len(state.sent)
    new: tuple[Word, ...] = ()
    if n > sent and _keys(heard[:sent]) == _keys(state.sent):
        new = heard[sent:n]
    return replace(state, sent=state.sent + new, latest=heard), new


def remainder(sent: tuple[Word, ...], final: tuple[Word, ...]) -> tuple[Word, ...]:
    """The final recognition's words after those already sent: where the sent words
    end in the final ones, by the longest matches between them (a revised or
    missing word counts as one word either way)."""
    if not sent:
        return final
    a, b = _keys(sent), _keys(final)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    end = 0  # in `final`, where the sent words end
    for block in matcher.get_matching_blocks():
        if block.size:
            end = block.b + block.size + (len(a) - block.a - block.size)
    if end == 0:
        end = len(a)
    return final[min(end, len(b)) :]


def delta_text(words: tuple[Word, ...], *, first: bool) -> str:
    """The words as a delta: after the first, each delta begins with its space."""
    text = " ".join(w.text for w in words)
    return text if first or not text else " " + text


def delta_logprobs(words: tuple[Word, ...]) -> list[TokenLogprob]:
    return [t for w in words for t in w.tokens]


def partial_due(turn_ms: int, heard_ms: int, running: bool, every_ms: int) -> bool:
    """Whether to recognize the turn so far now: `turn_ms` of it, the latest
    recognition began at `heard_ms`, `running`: one is still in flight."""
    return every_ms > 0 and not running and turn_ms - heard_ms >= every_ms


@dataclass(frozen=True)
class PartialHeard:
    """Mailbox message: a partial recognition of `item_id` ended (`heard` None: the
    recognizer was busy, or it failed)."""

    item_id: str
    heard: Heard | None
    heard_ms: int


class Partials:
    """The partial transcript of the turn being spoken (at most one), for a session."""

    def __init__(
        self, executor: Executor, post: Callable[[PartialHeard], None], every_ms: int
    ) -> None:
        self._executor = executor
        self._post = post
        self.every_ms = every_ms
        self.turn: TurnPartials | None = None
        self._task: asyncio.Task[None] | None = None

    def announced(self, item_id: str) -> None:
        """`speech_started` named this turn: its partials may go to the client."""
        self.turn = TurnPartials(item_id)

    def grew(self, turn: Callable[[], PromptItem | None], turn_ms: int) -> None:
        """The turn being spoken grew to `turn_ms`: recognize it again (`turn()`, a
        copy of its audio, made only then) if due."""
        state = self.turn
        running = self._task is not None and not self._task.done()
        if state is None or not partial_due(turn_ms, state.heard_ms, running, self.every_ms):
            return
        item = turn()
        if item is not None and item.id == state.item_id:
            self.turn = replace(state, heard_ms=turn_ms)
            self._task = asyncio.get_running_loop().create_task(self._hear(item, turn_ms))

    async def _hear(self, turn: PromptItem, turn_ms: int) -> None:
        try:
            heard = await self._executor.transcribe_partial(turn)
        except asyncio.CancelledError:
            raise
        except Exception:
            heard = None  # the final recognition reports failures
        self._post(PartialHeard(turn.id, heard, turn_ms))

    def heard(self, message: PartialHeard) -> tuple[Word, ...]:
        """On the session's task: the words to send now for the turn (none when the
        turn was committed or replaced meanwhile)."""
        state = self.turn
        if message.heard is None or state is None or state.item_id != message.item_id:
            return ()
        self.turn, new = agree(state, words_of(message.heard))
        return new

    def take(self, item_id: str) -> tuple[Word, ...]:
        """The turn was committed: the words sent of it, and no more partials."""
        state, self.turn = self.turn, None
        return state.sent if state is not None and state.item_id == item_id else ()

    def idle(self) -> bool:
        return self._task is None or self._task.done()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
