"""The response lifecycle of one session: request, gate, cancel, finalize.

The Responder is created and owned by the Session and runs on the session's task;
it is the only writer of the epoch, the active and the deferred response, the
out-of-band responses with their lane epochs, and the last response id. Each
response's output is written by its own task through a ResponseStream
(engine/response_stream.py).

Cancellation is an epoch fence: bump the epoch first, then abort the model request,
then emit exactly one `response.done`. Output of an older epoch is dropped before
the wire (engine/emitter.py). What an ended response changes outside it (the
idle-timeout clock, the voice lock) goes back to the session as a ResponseEnded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openai.types.realtime import (
    RateLimitsUpdatedEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
)
from openai.types.realtime.realtime_server_event import OutputAudioBufferCleared

from engine import protocol
from engine.audio_format import OutputEncoder
from engine.conversation import Conversation, Item
from engine.emitter import Emitter, Ids, Outbox
from engine.gates import (
    BargeIn,
    RequestSnapshot,
    ResponseRequestAction,
    SpeechStartSnapshot,
    decide_barge_in,
    decide_response_request,
)
from engine.limits import EngineLimits
from engine.mcp.calls import McpCalls, cut_off
from engine.mcp.tools import McpTools
from engine.observer import Observer, ResponseStatus
from engine.playback import Playback
from engine.prepare_chain import PrepareChain
from engine.response import (
    CONVERSATION,
    ActiveResponse,
    CancelReason,
    ResponseFinished,
    ResponseRequest,
    ending_of,
    function_tools,
    prompt_for,
    response_wire,
    speculative_prompt,
)
from engine.response_stream import ResponseGate, ResponseStream
from engine.session_config import SessionConfig
from engine.truncation import ContextCut, ContextTooLong
from models.base import Executor, Prompt, PromptItem

log = logging.getLogger("engine.session")


@dataclass(frozen=True)
class ResponseEnded:
    """What an ended response changes in the session."""

    # An in-band audio answer's kept audio: idle_timeout_ms counts from the end of
    # its playback. None for any other response.
    audio_ms: int | None
    spoke: bool  # the assistant was heard: the voice is fixed from now on
    response_id: str | None = None
    # An uninterruptible answer that ended by itself: speech waits while it plays.
    protects: bool = False


class Responder:
    def __init__(
        self,
        *,
        executor: Executor,
        config: Callable[[], SessionConfig],
        conversation: Conversation,
        prepares: PrepareChain,
        emit: Emitter,
        outbox: Outbox,
        playback: Playback,
        ids: Ids,
        limits: EngineLimits,
        session_id: str,
        post: Callable[[ResponseFinished], None],
        on_ended: Callable[[ResponseEnded], None],
        observer: Observer | None = None,
        mcp: McpTools | None = None,
    ) -> None:
        self._executor = executor
        self._config = config  # the session's current configuration
        self._conversation = conversation
        self._prepares = prepares
        self._emit = emit
        self._outbox = outbox
        self._playback = playback  # what the client was sent of each answer
        self._ids = ids
        self._limits = limits
        self._session_id = session_id
        self._post = post  # into the session's mailbox
        self._on_ended = on_ended
        self._observer = observer
        self._mcp = mcp  # the session's MCP servers: their tools, and calls of them
        self.epoch = 0
        self.active: ActiveResponse | None = None
        # A server_vad turn committed during a response waits here for it to end.
        self.deferred: ResponseRequest | None = None
        self._oob: dict[str, ActiveResponse] = {}  # out-of-band responses, by id
        self._oob_epochs: dict[str, int] = {}
        # Ended out-of-band responses (id → message id) whose lane epoch and sent
        # ledger entry wait for their queued output to leave the outbox.
        self._oob_ended: dict[str, str] = {}
        self._last_response_id: str | None = None
        self._closed = False
        self._context = ContextCut()  # the session's truncation: where its model starts reading

    # --- what the session asks -------------------------------------------------------

    def lane_epoch(self, lane: str) -> int:
        """The current epoch of an output lane; output of any other is stale. An
        out-of-band response has a lane of its own, removed when it is cancelled."""
        return self.epoch if lane == CONVERSATION else self._oob_epochs.get(lane, -1)

    def answer_early(self, turn: PromptItem) -> None:
        """Begin the answer a commit of `turn` would ask for (see
        models/speculative_responses.py): the prompt its response will have, cut as
        that one's will be, the session's cut staying where it is; none when it would
        fail (truncation disabled)."""
        config = self._config()
        names = {t.name for t in config.tools}
        prompt = speculative_prompt(
            self._ids.new("resp"),
            self._conversation.items,
            turn,
            config,
            self._session_id,
            () if self._mcp is None else self._mcp.offered_tools(names),
        )
        try:
            fitted = self._context.apply(prompt, self._executor, config.truncation, keep=False)
        except ContextTooLong:
            return
        self._executor.answer_early(fitted)

    def holds_item(self, item_id: str) -> bool:
        """Whether `item_id` belongs to the response in progress."""
        active = self.active
        return active is not None and item_id in (active.item_id, *active.stream.outputs)

    def in_flight(self) -> int:
        """Responses between `response.created` and `response.done`, out-of-band ones too."""
        return len(self._oob) + (self.active is not None)

    def items_in_use(self) -> set[str]:
        """Items a running response still needs: its own output, and its explicit
        input (the prompt, built when the response starts, reads their audio)."""
        running = [*self._oob.values(), *([self.active] if self.active is not None else [])]
        ids: set[str] = set()
        for resp in running:
            ids.add(resp.item_id)
            ids.update(resp.stream.outputs)
            ids.update(item.id for item in resp.request.input or ())
        return ids

    def request(self, request: ResponseRequest) -> None:
        if self._config().type == "transcription":
            return  # turn detection's own requests: a transcription session never answers
        if request.out_of_band:
            limit = self._limits.max_out_of_band_responses
            if len(self._oob) >= limit:
                raise protocol.ProtocolError(
                    "too_many_active_responses",
                    f"This session already has {limit} out-of-band responses in progress "
                    "(the most it may run at once); wait for one to finish or cancel it.",
                    "response.conversation",
                    request.event_id,
                )
            self._start(request)  # beside the conversation: never gated
            return
        action = decide_response_request(
            RequestSnapshot(self.active is not None, request.from_client)
        )
        if action is ResponseRequestAction.REJECT:
            raise protocol.ProtocolError(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress.",
                event_id=request.event_id,
            )
        if action is ResponseRequestAction.START:
            self._start(request)
        elif self.deferred is None:
            self.deferred = request

    def start_deferred(self) -> None:
        if self.deferred is not None and self.active is None and not self._closed:
            request, self.deferred = self.deferred, None
            self._start(request)

    async def barge_in(self, interrupt_response: bool) -> None:
        """The user started speaking."""
        action = decide_barge_in(
            SpeechStartSnapshot(
                interrupt_response, self.active is not None, self.deferred is not None
            )
        )
        if action is not BargeIn.NONE:
            # The user talks again: a deferred answer to an earlier turn is moot.
            self.deferred = None
        if action is BargeIn.CANCEL_ACTIVE:
            assert self.active is not None
            if self._observer is not None:
                self._observer.barge_in(self._session_id, self.active.id)
            await self.cancel_active("turn_detected")

    def finished(self, message: ResponseFinished) -> None:
        """A response task's stream ended by itself."""
        resp = message.response
        if resp.finalized:
            return  # already ended by a cancel
        self._finalize(resp, *ending_of(message.error, resp.stream.finish))

    async def cancel_active(self, reason: CancelReason) -> None:
        assert self.active is not None
        await self._cancel(self.active, reason)

    async def cancel(self, event: protocol.ResponseCancel) -> None:
        """`response.cancel`: the active response, or an out-of-band one by id."""
        wanted = event.response_id
        if self.active is not None and wanted in (None, self.active.id):
            self.deferred = None
            await self.cancel_active("client_cancelled")
        elif wanted is not None and wanted in self._oob:
            await self._cancel(self._oob[wanted], "client_cancelled")
        else:
            what = f"response '{wanted}'" if wanted else "a response"
            raise protocol.ProtocolError(
                "response_cancel_not_active",
                f"Cancellation failed: there is no active {what} to cancel.",
                "response_id" if wanted else None,
                event.event_id,
            )

    async def clear_output(self, event: protocol.OutputAudioBufferClear) -> None:
        """Stop all assistant audio now: the active response is cancelled, and
        audio still queued from finished ones is dropped."""
        last = self.active.id if self.active is not None else self._last_response_id
        if last is None:
            raise protocol.ProtocolError(
                "invalid_request_error",
                "There is no assistant audio to clear.",
                event_id=event.event_id,
            )
        if self.active is not None:
            self.deferred = None
            await self.cancel_active("client_cancelled")
        else:
            self.epoch += 1
            self._outbox.drop_stale()
        self._emit.control(OutputAudioBufferCleared, response_id=last)

    @property
    def responding(self) -> bool:
        """A response is active, waits (deferred) or runs out of band."""
        return self.active is not None or self.deferred is not None or bool(self._oob)

    async def cancel_all(self) -> None:
        """The server is going away: every response, the conversation's and the
        out-of-band ones, is cancelled as `response.cancel` would (fenced, aborted,
        closed with its one `response.done`), without a reason: none of the
        protocol's fits. The aborts run together."""
        self.deferred = None
        ending = [*self._oob.values()]
        if self.active is not None:
            ending.append(self.active)
        await asyncio.gather(*(self._cancel(resp, None) for resp in ending))

    async def shutdown(self) -> None:
        """The connection is gone: stop every response's model request and task, the
        conversation's and the out-of-band ones alike (nobody is left to hear them),
        each fenced first; the aborts run together, each bounded, then one bounded wait."""
        self._closed = True
        self.deferred = None
        ending = [*self._oob.values()]
        if self.active is not None:
            ending.append(self.active)
            self.active = None
        self.epoch += 1
        self._oob.clear()
        self._oob_epochs.clear()
        self._oob_ended.clear()
        await asyncio.gather(*(self._abort(resp) for resp in ending))
        tasks = [resp.task for resp in ending if resp.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self._limits.abort_timeout_s)

    # --- a response's life -----------------------------------------------------------

    def _start(self, request: ResponseRequest) -> None:
        """Announce a response; its task starts the model once the gate opens."""
        config = self._config()
        modalities = request.modalities or config.output_modalities
        message = Item(id=self._ids.new("item"), role="assistant", status="in_progress")
        if "audio" not in modalities:
            message.text = ""
        response_id = self._ids.new("resp")
        stream = ResponseStream(
            response_id=response_id,
            epoch=0 if request.out_of_band else self.epoch,
            lane=response_id if request.out_of_band else CONVERSATION,
            message=message,
            audio_out="audio" in modalities,
            in_conversation=not request.out_of_band,
            encoder=OutputEncoder(config.output_format),
            gate=None
            if request.out_of_band
            else ResponseGate(
                self._prepares, self._prepares.last_seq, tuple(self._prepares.tracked())
            ),
            emit=self._emit,
            conversation=self._conversation,
            new_id=self._ids.new,
            current_epoch=self.lane_epoch,
            mcp=self._mcp_calls(request, response_id),
        )
        resp = ActiveResponse(
            request=request,
            modalities=modalities,
            max_output_tokens=request.max_output_tokens or config.max_output_tokens,
            stream=stream,
        )
        self._last_response_id = resp.id
        if request.out_of_band:
            self._forget_ended_lanes()
            self._oob[resp.id] = resp
            self._oob_epochs[resp.id] = stream.epoch
        else:
            # Placed now, after the turn it answers; announced with its first output.
            self._conversation.append(message)
            self.active = resp
        self._emit.control(ResponseCreatedEvent, response=self._wire(resp, "in_progress"))
        if self._observer is not None:
            self._observer.response_created(self._session_id, resp.id, resp.item_id)
        if not request.out_of_band:
            # One response at a time per conversation: that is Parley's rate limit.
            self._emit.control(
                RateLimitsUpdatedEvent,
                rate_limits=[{"name": "requests", "limit": 1, "remaining": 0, "reset_seconds": 0}],
            )
        resp.task = asyncio.get_running_loop().create_task(
            self._run(resp), name=f"response:{resp.id}"
        )

    def _mcp_calls(self, request: ResponseRequest, response_id: str) -> McpCalls | None:
        """The response's MCP calls; a function tool's name stays the function's."""
        if self._mcp is None:
            return None
        return McpCalls(
            tools=self._mcp,
            response_id=response_id,
            functions=lambda: function_tools(request, self._config()),
            emit=self._emit,
            conversation=self._conversation,
            new_id=self._ids.new,
        )

    async def _run(self, resp: ActiveResponse) -> None:
        """The response task: its stream, then word to the session's mailbox unless
        a cancel owns the ending."""

        def prompt(ran: tuple[Item, ...]) -> Prompt:
            # Built when the gate opens, from the conversation then.
            config = self._config()
            names = {t.name for t in function_tools(resp.request, config)}
            mcp = () if self._mcp is None else self._mcp.offered_tools(names)
            built = prompt_for(
                resp, self._conversation.items, config, self._session_id, mcp_tools=mcp, ran=ran
            )
            return self._context.apply(
                built,
                self._executor,
                config.truncation,
                conversation=resp.request.input is None,
                keep=not resp.request.out_of_band,
            )

        observer = self._observer
        first_chunk = None
        if observer is not None:

            def first_chunk() -> None:
                observer.first_model_chunk(self._session_id, resp.id)

        error: BaseException | None = None
        try:
            await resp.stream.run(self._executor, prompt, first_chunk)
        except asyncio.CancelledError:
            raise
        except ContextTooLong as exc:
            error = exc  # the client's to act on: no traceback
        except Exception as exc:
            log.exception("session %s: response %s failed", self._session_id, resp.id)
            error = exc
        if not resp.stream.fenced():
            self._post(ResponseFinished(resp, error))

    def _wire(
        self,
        resp: ActiveResponse,
        status: str,
        details: dict[str, Any] | None = None,
        output: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        config = self._config()
        return response_wire(
            resp,
            status,
            conversation_id=self._conversation.id,
            voice=config.voice,
            audio_format=config.output_format.to_wire(),
            details=details,
            output=output,
        )

    async def _cancel(self, resp: ActiveResponse, reason: CancelReason | None) -> None:
        # 1. fence: nothing of the old epoch reaches the wire now
        if resp.request.out_of_band:
            self._oob_epochs.pop(resp.id, None)
        else:
            self.epoch += 1
        self._outbox.drop_stale()
        await self._abort(resp)  # 2. stop the model
        if resp.task is not None:
            resp.task.cancel()
        # 3. exactly one terminal event
        details = (
            {"type": "cancelled"} if reason is None else {"type": "cancelled", "reason": reason}
        )
        self._finalize(resp, "cancelled", details)

    async def _abort(self, resp: ActiveResponse) -> None:
        try:
            await asyncio.wait_for(self._executor.abort(resp.id), self._limits.abort_timeout_s)
        except TimeoutError:
            log.warning("session %s: abort of %s timed out", self._session_id, resp.id)
        except Exception:
            log.exception("session %s: abort of %s failed", self._session_id, resp.id)

    def _finalize(
        self, resp: ActiveResponse, status: ResponseStatus, details: dict[str, Any] | None
    ) -> None:
        """End a response: settle its items to what the client received, then emit
        the closing events and the one `response.done`."""
        resp.finalized = True
        stream = resp.stream
        in_band = not resp.request.out_of_band
        if in_band:
            self.active = None
        else:
            self._oob.pop(resp.id, None)
            self._oob_ended[resp.id] = stream.message.id
        item = stream.message
        cut_off(stream.calls)  # an MCP call still running never answers now
        kept = 0
        if stream.message_open:
            kept = stream.close_message(status, self._playback.sent_samples(item.id))
        if in_band:
            # The output takes the message's place, in output order (an MCP call
            # made before the answer stands before it); an unannounced message leaves.
            previous = self._conversation.previous_id(item.id)
            self._conversation.remove(item.id)
            by_id = {call.id: call for call in stream.calls}
            by_id[item.id] = item
            for output_id in stream.outputs:
                self._conversation.insert_after(by_id[output_id], previous)
                previous = output_id
        audio_answer = in_band and stream.message_open and stream.audio_out
        protects = audio_answer and not resp.request.interruptible and status != "cancelled"
        self._on_ended(
            ResponseEnded(item.audio_ms if audio_answer else None, kept > 0, resp.id, protects)
        )
        by_id = {call.id: call for call in stream.calls}
        by_id[item.id] = item
        output = [by_id[i].wire() for i in stream.outputs]
        self._emit.control(ResponseDoneEvent, response=self._wire(resp, status, details, output))
        timings = self._executor.stage_timings(resp.id)  # taken even unobserved: they are held
        if self._observer is not None:
            for timing in timings:
                self._observer.stage_timed(self._session_id, resp.id, timing)
            self._observer.response_done(self._session_id, resp.id, status)
        self._forget_ended_lanes()

    def _forget_ended_lanes(self) -> None:
        """An ended out-of-band response's lane and ledger entry are kept only while
        its output is queued (dropping the lane earlier would drop that output), so
        they do not pile up over a long session."""
        for lane, item_id in list(self._oob_ended.items()):
            if not self._outbox.holds_output_of(lane):
                del self._oob_ended[lane]
                self._oob_epochs.pop(lane, None)
                self._playback.forget(item_id)
