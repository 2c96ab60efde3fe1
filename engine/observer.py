"""What the engine reports as it runs: one interface for benchmarks, metrics and tests.

A session is given one `Observer` (or none). Every hook is a no-op here, so an
observer overrides only what it wants; a session without one calls nothing at all
(each call site is guarded by `if observer is not None`), so an unused observer
costs one attribute test per event.

Hooks run on the event loop inside the session's task (or the connection's writer,
for what reaches the wire). They must return quickly and never raise: an observer
that fails breaks the session it watches.

Times are `time.monotonic()` seconds where a hook takes one; the others happen
"now", and an observer that wants a time reads the clock itself.
"""

from __future__ import annotations

from typing import Literal

from models.stage_timing import StageTiming

ResponseStatus = Literal["completed", "cancelled", "incomplete", "failed"]
DetachEnd = Literal["resumed", "expired", "closed"]


class Observer:
    def session_opened(self, session_id: str) -> None:
        """A session started (its `session.created` is queued)."""

    def session_closed(self, session_id: str) -> None:
        """A session ended; nothing more is reported for it."""

    def tracing_set(self, session_id: str, label: str | None) -> None:
        """The session's `tracing` became `label` (engine/tracing.py: safe for a log
        line, unbounded in its values: never a metric label), or None (off)."""

    def connection_closed(self, session_id: str | None, code: int) -> None:
        """The transport ended the connection with WebSocket close `code`: the code
        it sent, or the client's when the client closed first. `session_id` is None
        for a connection refused before its session began (1013, at capacity)."""

    def session_detached(self, session_id: str) -> None:
        """A resumable session's connection dropped: it waits for its client."""

    def detach_ended(self, session_id: str, how: DetachEnd) -> None:
        """A detached session was taken back (`resumed`), not taken back within its
        window (`expired`), or closed meanwhile by the server (`closed`)."""

    def resume_refused(self, code: str) -> None:
        """A connection presenting a resume token was refused with `code`."""

    def frame_parsed(self, session_id: str, event_type: str) -> None:
        """The transport parsed a client frame of `event_type` (a refused frame is
        reported by `error_sent` instead)."""

    def error_sent(self, session_id: str, code: str) -> None:
        """An `error` event with `code` was queued for the client."""

    def audio_paced(self, session_id: str, seconds: float) -> None:
        """Audio faster than the session's budget waits `seconds` before the VAD
        scores it (engine/ingest_pace.py)."""

    def speech_started(self, session_id: str, item_id: str, audio_start_ms: int) -> None:
        """Turn detection heard speech begin."""

    def speech_stopped(
        self, session_id: str, item_id: str, audio_end_ms: int, frame_received: float | None
    ) -> None:
        """Turn detection ended a turn, and the turn is committed and its response
        requested; the append that ended it reached the server at `frame_received`
        (None when the frame was not stamped)."""

    def committed(self, session_id: str, item_id: str) -> None:
        """A user turn was committed to the conversation."""

    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        """A response was announced; `item_id` is its assistant message."""

    def first_model_chunk(self, session_id: str, response_id: str) -> None:
        """The executor yielded the response's first chunk."""

    def first_audio_sent(self, session_id: str, item_id: str) -> None:
        """The first audio delta of assistant item `item_id` left the outbox for
        the wire."""

    def barge_in(self, session_id: str, response_id: str) -> None:
        """The user's speech cancelled response `response_id`."""

    def stage_timed(self, session_id: str, response_id: str, timing: StageTiming) -> None:
        """How long one model stage took on the way to response `response_id`'s user
        (models/stage_timing.py): reported as the response ends, once per stage and
        phase it reached, just before `response_done`."""

    def response_done(self, session_id: str, response_id: str, status: ResponseStatus) -> None:
        """A response ended with its one `response.done`."""
