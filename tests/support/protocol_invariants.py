"""What must hold of any stream of server events, whatever the client did.

`EventLedger` is fed a session's server events in wire order and raises
`AssertionError` the moment one breaks a rule of the protocol:

- one `response.done` per `response.created`, never for an unknown response;
- nothing of a response (an event naming its `response_id`) after its `response.done`;
- at most one in-band response (one in the conversation) between created and done;
- no `internal_error`, and every `error` carries the OpenAI fields;
- every server_vad commit made while `create_response` is on gets a `response.created`,
  unless the protocol drops that request: a barge-in (`speech_started` with
  `interrupt_response`), or the client cancelling the conversation's response with
  `response.cancel` or `output_audio_buffer.clear` (a truncation cancels it too but
  keeps the deferred answer). Until then it may wait only behind an in-band response
  in progress (the deferred request).

The turn detection settings the commit rule needs are read from the stream itself
(`session.created`, `session.updated`), so the ledger needs nothing but the events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Events that name a response but may legitimately follow its response.done.
_AFTER_DONE_OK = {"output_audio_buffer.cleared"}
ERROR_FIELDS = {"type", "code", "message", "param", "event_id"}


@dataclass(frozen=True)
class VadSettings:
    create_response: bool
    interrupt_response: bool


def vad_settings(session: dict[str, Any]) -> VadSettings | None:
    """The server_vad settings of a session object on the wire (None: manual turns)."""
    detection = session.get("audio", {}).get("input", {}).get("turn_detection")
    if detection is None:
        return None
    return VadSettings(
        bool(detection.get("create_response", True)),
        bool(detection.get("interrupt_response", True)),
    )


@dataclass
class EventLedger:
    created: dict[str, bool] = field(default_factory=dict)  # response id -> in band
    outputs: dict[str, list[str]] = field(default_factory=dict)  # response id -> item ids
    done: set[str] = field(default_factory=set)
    vad: VadSettings | None = None
    stopped: set[str] = field(default_factory=set)  # items a speech_stopped ended
    unanswered: list[str] = field(default_factory=list)  # VAD commits awaiting a response
    # Conversation items announced and not deleted, in order (a dict keeps it).
    items: dict[str, None] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    count: int = 0
    # An in-band response.done the client caused: `response.cancel` and
    # `output_audio_buffer.clear` drop a deferred answer, a truncation (whose
    # `conversation.item.truncated` follows at once) does not. Settled by the next event.
    client_cancel: bool = False
    broken: bool = False  # a rule was broken (and reported)

    @property
    def open(self) -> list[str]:
        """Responses created and not yet done, oldest first."""
        return [r for r in self.created if r not in self.done]

    @property
    def in_band_open(self) -> list[str]:
        return [r for r in self.open if self.created[r]]

    @property
    def out_of_band_open(self) -> list[str]:
        return [r for r in self.open if not self.created[r]]

    @property
    def open_items(self) -> set[str]:
        """Output items of the responses in progress."""
        return {i for r in self.open for i in self.outputs.get(r, [])}

    def feed(self, event: dict[str, Any]) -> None:
        try:
            self._feed(event)
        except AssertionError:
            self.broken = True
            raise

    def _feed(self, event: dict[str, Any]) -> None:
        self.count += 1
        kind = event["type"]
        if self.client_cancel:
            self.client_cancel = False
            if kind != "conversation.item.truncated":
                self.unanswered.clear()
        where = f"event #{self.count} ({kind})"
        response_id = event.get("response_id")
        if response_id is None and kind.startswith("response."):
            response_id = event.get("response", {}).get("id")
        if response_id is not None and kind not in _AFTER_DONE_OK:
            assert response_id not in self.done, f"{where}: {response_id} is already done"
            if kind != "response.created":
                assert response_id in self.created, f"{where}: unknown response {response_id}"
        match kind:
            case "session.created" | "session.updated":
                self.vad = vad_settings(event["session"])
            case "response.created":
                assert response_id is not None
                assert response_id not in self.created, f"{where}: {response_id} created twice"
                in_band = event["response"].get("conversation_id") is not None
                self.created[response_id] = in_band
                if in_band:
                    assert len(self.in_band_open) <= 1, (
                        f"{where}: in-band responses open at once: {self.in_band_open}"
                    )
                    self.unanswered.clear()  # one response answers every turn before it
            case "response.done":
                assert response_id is not None
                self.done.add(response_id)
                reason = (event["response"].get("status_details") or {}).get("reason")
                self.client_cancel = self.created[response_id] and reason == "client_cancelled"
            case "response.output_item.added":
                assert response_id is not None
                self.outputs.setdefault(response_id, []).append(event["item"]["id"])
            case "input_audio_buffer.speech_started":
                if self.vad is not None and self.vad.interrupt_response:
                    self.unanswered.clear()  # a barge-in drops a deferred answer
            case "input_audio_buffer.speech_stopped":
                self.stopped.add(event["item_id"])
            case "input_audio_buffer.committed":
                item_id = event["item_id"]
                if item_id in self.stopped and self.vad is not None and self.vad.create_response:
                    self.unanswered.append(item_id)
            case "conversation.item.added" | "conversation.item.created":
                self.items[event["item"]["id"]] = None
            case "conversation.item.deleted":
                self.items.pop(event["item_id"], None)
            case "error":
                error = event["error"]
                lacks = ERROR_FIELDS - set(error)
                assert not lacks, f"{where}: error lacks {lacks}"
                assert error["code"] != "internal_error", f"{where}: {error}"
                self.errors.append(error)

    def check_settled(self) -> None:
        """At rest, a VAD turn waits for its answer only behind an in-band response."""
        if self.client_cancel:  # the stream ends with a client's cancel
            self.client_cancel = False
            self.unanswered.clear()
        assert not self.unanswered or self.in_band_open, (
            f"VAD turns {self.unanswered} were committed with create_response and never answered"
        )
