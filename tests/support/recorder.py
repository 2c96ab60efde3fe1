"""An engine observer that records every report, for tests (engine/observer.py)."""

from __future__ import annotations

from typing import Any

from engine.observer import Observer, ResponseStatus


class Recorder(Observer):
    """Every hook, as (name, arguments without the session id)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.session_ids: set[str] = set()

    def _add(self, name: str, session_id: str, *args: Any) -> None:
        self.session_ids.add(session_id)
        self.calls.append((name, *args))

    def session_opened(self, session_id: str) -> None:
        self._add("session_opened", session_id)

    def session_closed(self, session_id: str) -> None:
        self._add("session_closed", session_id)

    def frame_parsed(self, session_id: str, event_type: str) -> None:
        self._add("frame_parsed", session_id, event_type)

    def error_sent(self, session_id: str, code: str) -> None:
        self._add("error_sent", session_id, code)

    def speech_started(self, session_id: str, item_id: str, audio_start_ms: int) -> None:
        self._add("speech_started", session_id, item_id, audio_start_ms)

    def speech_stopped(
        self, session_id: str, item_id: str, audio_end_ms: int, frame_received: float | None
    ) -> None:
        self._add("speech_stopped", session_id, item_id, audio_end_ms, frame_received)

    def committed(self, session_id: str, item_id: str) -> None:
        self._add("committed", session_id, item_id)

    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        self._add("response_created", session_id, response_id, item_id)

    def first_model_chunk(self, session_id: str, response_id: str) -> None:
        self._add("first_model_chunk", session_id, response_id)

    def first_audio_sent(self, session_id: str, item_id: str) -> None:
        self._add("first_audio_sent", session_id, item_id)

    def barge_in(self, session_id: str, response_id: str) -> None:
        self._add("barge_in", session_id, response_id)

    def response_done(self, session_id: str, response_id: str, status: ResponseStatus) -> None:
        self._add("response_done", session_id, response_id, status)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]
