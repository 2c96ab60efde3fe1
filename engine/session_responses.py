"""The response half of a Session: announcing, running, fencing and ending
responses. A mixin only to keep each file readable in one sitting: it is the same
object and the same single task as `engine/session.py`, and it owns no state of its
own (the attributes below are the Session's)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Any

import numpy as np
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    RateLimitsUpdatedEvent,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.realtime.realtime_server_event import (
    OutputAudioBufferCleared,
)

from engine import protocol as p
from engine.appends import AppendChain
from engine.audio_format import OutputEncoder
from engine.conversation import Conversation, Item, TranscriptMark, transcript_at
from engine.emitter import Emitter, Ids, Outbox
from engine.gates import (
    GateSnapshot,
    RequestSnapshot,
    ResponseRequestAction,
    decide_response_request,
    response_gate_open,
)
from engine.input_buffer import InputBuffer
from engine.items import item_from_wire, prompt_item
from engine.limits import EngineLimits
from engine.responses import (
    CONVERSATION,
    ActiveResponse,
    CancelReason,
    ResponseFinished,
    ResponseRequest,
    response_wire,
)
from engine.session_config import (
    SessionConfig,
    tool_choice_name,
    tools_from_wire,
)
from models.base import Executor, FunctionCall, OutputChunk, Prompt

log = logging.getLogger("engine.session")


class ResponsesMixin:
    # The Session's state this half reads and writes (set in Session.__init__).
    config: SessionConfig
    limits: EngineLimits
    executor: Executor
    ids: Ids
    session_id: str
    emit: Emitter
    outbox: Outbox
    conversation: Conversation
    buffer: InputBuffer
    appends: AppendChain
    epoch: int
    active: ActiveResponse | None
    deferred: ResponseRequest | None
    closed: bool
    _oob: dict[str, ActiveResponse]
    _oob_epochs: dict[str, int]
    _last_response_id: str | None
    _idle_deadline_ms: int | None
    _assistant_spoke: bool

    def _post(self, message: ResponseFinished) -> None:  # the Session's mailbox
        raise NotImplementedError

    # --- responses ------------------------------------------------------------------------

    def _lane_epoch(self, lane: str) -> int:
        """The current epoch of an output lane; output of any other is stale. An
        out-of-band response has a lane of its own, removed when it is cancelled."""
        return self.epoch if lane == CONVERSATION else self._oob_epochs.get(lane, -1)

    def _fenced(self, resp: ActiveResponse) -> bool:
        return resp.epoch != self._lane_epoch(resp.lane)

    def _request_response(self, request: ResponseRequest) -> None:
        if request.out_of_band:
            self._start_response(request)  # beside the conversation: never gated
            return
        action = decide_response_request(
            RequestSnapshot(self.active is not None, request.from_client)
        )
        if action is ResponseRequestAction.REJECT:
            raise p.ProtocolError(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress.",
                event_id=request.event_id,
            )
        if action is ResponseRequestAction.START:
            self._start_response(request)
        elif self.deferred is None:
            self.deferred = request

    def _on_response_create(self, event: p.ResponseCreate) -> None:
        r = event.response or p.ResponseIn()
        if r.conversation not in (None, "auto", "none"):
            raise p.ProtocolError(
                "invalid_value",
                "conversation must be 'auto' or 'none'.",
                "response.conversation",
                event.event_id,
            )
        modalities = r.output_modalities
        if modalities is not None and len(modalities) != 1:
            raise p.ProtocolError(
                "invalid_value",
                "output_modalities must be exactly one of ['audio'] or ['text'].",
                "response.output_modalities",
                event.event_id,
            )
        inputs = None
        if r.input is not None:
            inputs = tuple(
                self._input_item(item, f"response.input[{i}]", event.event_id)
                for i, item in enumerate(r.input)
            )
        self._request_response(
            ResponseRequest(
                from_client=True,
                event_id=event.event_id,
                instructions=r.instructions,
                modalities=tuple(modalities) if modalities else None,
                metadata=r.metadata,
                max_output_tokens=r.max_output_tokens,
                tools=None if r.tools is None else tools_from_wire(r.tools),
                tool_choice=None if r.tool_choice is None else tool_choice_name(r.tool_choice),
                input=inputs,
                out_of_band=r.conversation == "none",
            )
        )

    def _input_item(self, wire: p.ItemIn, param: str, event_id: str | None) -> Item:
        """An item of `response.create` input: a reference to the conversation, or
        a new item that is used for this response only."""
        if wire.type == "item_reference":
            found = self.conversation.get(wire.id or "")
            if found is None:
                raise p.ProtocolError(
                    "item_not_found", f"Item '{wire.id}' does not exist.", f"{param}.id", event_id
                )
            return found
        return item_from_wire(wire, self.ids.new, param=param, event_id=event_id)

    def _start_deferred(self) -> None:
        if self.deferred is not None and self.active is None and not self.closed:
            request, self.deferred = self.deferred, None
            self._start_response(request)

    def _prompt(self, resp: ActiveResponse) -> Prompt:
        """The explicit input if the request had one; otherwise the conversation as
        it stood when `resp` was announced: every item before its own (turns
        committed during it belong to a later response)."""
        request = resp.request
        if request.input is not None:
            source: list[Item] = list(request.input)
        else:
            source = []
            for i in self.conversation.items:
                if i.id == resp.item_id:
                    break
                source.append(i)
        items = tuple(prompt_item(i) for i in source)
        limit = resp.max_output_tokens
        tools = request.tools if request.tools is not None else self.config.tools
        return Prompt(
            request_id=resp.id,
            session_id=self.session_id,
            instructions=request.instructions
            if request.instructions is not None
            else self.config.instructions,
            items=items,
            output_modalities=resp.modalities,
            max_output_tokens=None if limit == "inf" else int(limit),
            tools=tools,
            tool_choice=request.tool_choice or self.config.tool_choice,
        )

    def _wire(
        self,
        resp: ActiveResponse,
        status: str,
        details: dict[str, Any] | None = None,
        output: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return response_wire(
            resp,
            status,
            conversation_id=self.conversation.id,
            voice=self.config.voice,
            audio_format=self.config.output_format.to_wire(),
            details=details,
            output=output,
        )

    def _start_response(self, request: ResponseRequest) -> None:
        """Announce a response; its task starts the model once the gate opens."""
        modalities = request.modalities or self.config.output_modalities
        message = Item(id=self.ids.new("item"), role="assistant", status="in_progress")
        if "audio" not in modalities:
            message.text = ""
        resp = ActiveResponse(
            id=self.ids.new("resp"),
            epoch=0 if request.out_of_band else self.epoch,
            modalities=modalities,
            request=request,
            max_output_tokens=request.max_output_tokens or self.config.max_output_tokens,
            message=message,
            encoder=OutputEncoder(self.config.output_format),
            after_append=self.appends.last_seq,
            inputs=tuple(self.appends.tracked()),
        )
        self._last_response_id = resp.id
        if request.out_of_band:
            self._oob[resp.id] = resp
            self._oob_epochs[resp.id] = resp.epoch
        else:
            # Placed now, after the turn it answers; announced with its first output.
            self.conversation.append(message)
            self.active = resp
        self.emit.control(ResponseCreatedEvent, response=self._wire(resp, "in_progress"))
        if not request.out_of_band:
            # One response at a time per conversation: that is Parley's rate limit.
            self.emit.control(
                RateLimitsUpdatedEvent,
                rate_limits=[{"name": "requests", "limit": 1, "remaining": 0, "reset_seconds": 0}],
            )
        resp.task = asyncio.get_running_loop().create_task(
            self._run_response(resp), name=f"response:{resp.id}"
        )

    async def _await_gate(self, resp: ActiveResponse) -> None:
        """Wait until every response-bound append submitted before `resp` was
        announced has finished, reading liveness from the tasks themselves."""
        while True:
            snapshot = GateSnapshot(False, self.appends.snapshot(up_to_seq=resp.after_append))
            if response_gate_open(snapshot):
                break
            running = [
                r.task
                for r in self.appends.tracked()
                if r.seq <= resp.after_append and r.response_bound and not r.task.done()
            ]
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for record in resp.inputs:
            task = record.task
            if not task.cancelled() and task.exception() is not None:
                raise RuntimeError(f"input item {record.label} could not be prepared")

    async def _run_response(self, resp: ActiveResponse) -> None:
        error: BaseException | None = None
        try:
            if not resp.request.out_of_band:
                await self._await_gate(resp)
            if self._fenced(resp):
                return
            prompt = self._prompt(resp)
            # Closed explicitly however this ends (a cancel lands outside the
            # generator), so the executor's cleanup runs now, not at garbage collection.
            async with contextlib.aclosing(self.executor.generate(prompt)) as stream:
                async for chunk in stream:
                    if self._fenced(resp):
                        return  # a cancel owns the ending now
                    await self._emit_chunk(resp, chunk)
            if resp.message_open and resp.audio_out and not self._fenced(resp):
                tail = resp.encoder.flush()  # the encoder's last held-back samples
                await self._emit_audio(resp, tail, resp.output_index(resp.item_id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("session %s: response %s failed", self.session_id, resp.id)
            error = exc
        if not self._fenced(resp):
            self._post(ResponseFinished(resp, error))

    def _open_message(self, resp: ActiveResponse) -> None:
        """Announce the assistant message with its first output."""
        resp.message_open = True
        resp.outputs.append(resp.item_id)
        wire = resp.message.wire()
        index = resp.output_index(resp.item_id)
        self.emit.control(
            ResponseOutputItemAddedEvent, response_id=resp.id, output_index=index, item=wire
        )
        if not resp.request.out_of_band:
            previous = self.conversation.previous_id(resp.item_id)
            self.emit.control(ConversationItemAdded, item=wire, previous_item_id=previous)
        part = (
            {"type": "audio", "transcript": ""} if resp.audio_out else {"type": "text", "text": ""}
        )
        self.emit.control(
            ResponseContentPartAddedEvent,
            response_id=resp.id,
            item_id=resp.item_id,
            output_index=index,
            content_index=0,
            part=part,
        )

    def _emit_call(self, resp: ActiveResponse, call: FunctionCall) -> None:
        """A function call arrives whole: its item is announced and completed at once
        (it joins the conversation when the response ends)."""
        item = Item(
            self.ids.new("item"),
            "assistant",
            kind="function_call",
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
        )
        previous = resp.calls[-1].id if resp.calls else None
        if previous is None and not resp.request.out_of_band:
            previous = (
                resp.item_id if resp.message_open else self.conversation.previous_id(resp.item_id)
            )
        resp.calls.append(item)
        resp.outputs.append(item.id)
        index = resp.output_index(item.id)
        ids = {"response_id": resp.id, "item_id": item.id, "output_index": index}
        self.emit.control(
            ResponseOutputItemAddedEvent,
            response_id=resp.id,
            output_index=index,
            item={**item.wire(), "status": "in_progress", "arguments": ""},
        )
        if not resp.request.out_of_band:
            self.emit.control(
                ConversationItemAdded,
                item={**item.wire(), "status": "in_progress", "arguments": ""},
                previous_item_id=previous,
            )
        self.emit.control(
            ResponseFunctionCallArgumentsDeltaEvent,
            call_id=call.call_id,
            delta=call.arguments,
            **ids,
        )
        self.emit.control(
            ResponseFunctionCallArgumentsDoneEvent,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            **ids,
        )
        self.emit.control(
            ResponseOutputItemDoneEvent, response_id=resp.id, output_index=index, item=item.wire()
        )
        if not resp.request.out_of_band:
            self.emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)

    async def _emit_chunk(self, resp: ActiveResponse, chunk: OutputChunk) -> None:
        if chunk.finish is not None:
            resp.finish = chunk.finish
        if chunk.function_call is not None:
            self._emit_call(resp, chunk.function_call)
        has_audio = chunk.audio is not None and len(chunk.audio) > 0 and resp.audio_out
        if (chunk.text or has_audio) and not resp.message_open:
            self._open_message(resp)
        index = resp.output_index(resp.item_id) if resp.message_open else 0
        if chunk.text:
            resp.transcript += chunk.text
            delta = ResponseAudioTranscriptDeltaEvent if resp.audio_out else ResponseTextDeltaEvent
            await self.emit.output(
                delta,
                resp.epoch,
                lane=resp.lane,
                response_id=resp.id,
                item_id=resp.item_id,
                output_index=index,
                content_index=0,
                delta=chunk.text,
            )
        if not has_audio or self._fenced(resp):
            return
        assert chunk.audio is not None
        pcm = chunk.audio.astype(np.int16, copy=False)
        resp.audio.append(pcm)
        resp.samples += len(pcm)
        resp.marks.append(TranscriptMark(resp.samples, len(resp.transcript)))
        resp.unsent_samples += len(pcm)
        await self._emit_audio(resp, resp.encoder.encode(pcm), index)

    async def _emit_audio(self, resp: ActiveResponse, data: bytes, index: int) -> None:
        """One audio delta in the session's output format. A resampling encoder may
        hold samples back; they are counted with the delta that carries them."""
        if not data:
            return
        samples, resp.unsent_samples = resp.unsent_samples, 0
        await self.emit.output(
            ResponseAudioDeltaEvent,
            resp.epoch,
            lane=resp.lane,
            counts_for=resp.item_id,
            samples=samples,
            response_id=resp.id,
            item_id=resp.item_id,
            output_index=index,
            content_index=0,
            delta=base64.b64encode(data).decode("ascii"),
        )

    def _on_response_finished(self, message: ResponseFinished) -> None:
        resp = message.response
        if resp.finalized:
            return  # already ended by a cancel
        if message.error is not None:
            details = {
                "type": "failed",
                "error": {
                    "type": "server_error",
                    "code": "model_error",
                    "message": str(message.error),
                },
            }
            self._finalize(resp, "failed", details)
        elif resp.finish == "length":
            self._finalize(
                resp, "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}
            )
        else:
            self._finalize(resp, "completed", None)

    async def _cancel(self, resp: ActiveResponse, reason: CancelReason) -> None:
        # 1. fence: nothing of the old epoch reaches the wire now
        if resp.request.out_of_band:
            self._oob_epochs.pop(resp.id, None)
        else:
            self.epoch += 1
        self.outbox.drop_stale()
        await self._abort(resp)  # 2. stop the model
        if resp.task is not None:
            resp.task.cancel()
        # 3. exactly one terminal event
        self._finalize(resp, "cancelled", {"type": "cancelled", "reason": reason})

    async def _cancel_active(self, reason: CancelReason) -> None:
        assert self.active is not None
        await self._cancel(self.active, reason)

    async def _abort(self, resp: ActiveResponse) -> None:
        try:
            await asyncio.wait_for(self.executor.abort(resp.id), self.limits.abort_timeout_s)
        except TimeoutError:
            log.warning("session %s: abort of %s timed out", self.session_id, resp.id)
        except Exception:
            log.exception("session %s: abort of %s failed", self.session_id, resp.id)

    def _finalize(self, resp: ActiveResponse, status: str, details: dict[str, Any] | None) -> None:
        """End a response: settle its items to what the client received, then emit
        the closing events and the one `response.done`."""
        resp.finalized = True
        in_band = not resp.request.out_of_band
        if in_band:
            self.active = None
        else:
            self._oob.pop(resp.id, None)
        item = resp.message
        if resp.message_open:
            self._close_message(resp, status)
        if in_band:
            # The calls go right after the message's place, in order; an
            # unannounced message then leaves, so they stand where it stood.
            previous = item.id
            for call in resp.calls:
                self.conversation.insert_after(call, previous)
                previous = call.id
            if not resp.message_open:
                self.conversation.remove(item.id)
            elif resp.audio_out:
                # idle_timeout_ms counts from the end of playback of this answer.
                self._idle_deadline_ms = self.buffer.pos_to_ms(self.buffer.end) + item.audio_ms
        by_id = {call.id: call for call in resp.calls}
        by_id[item.id] = item
        output = [by_id[i].wire() for i in resp.outputs]
        self.emit.control(ResponseDoneEvent, response=self._wire(resp, status, details, output))

    def _close_message(self, resp: ActiveResponse, status: str) -> None:
        item = resp.message
        if status == "cancelled":
            # Only audio that reached the writer was heard; the rest was dropped.
            kept = min(resp.samples, self.outbox.sent_samples.get(resp.item_id, 0))
        else:
            kept = resp.samples
        if resp.audio_out:
            item.audio = np.concatenate(resp.audio)[:kept] if resp.audio else np.zeros(0, np.int16)
            item.transcript = (
                transcript_at(resp.transcript, resp.marks, kept)
                if status == "cancelled"
                else resp.transcript
            )
            item.marks = [m for m in resp.marks if m.samples <= kept]
            self._assistant_spoke = self._assistant_spoke or kept > 0
        else:
            item.text = resp.transcript
        item.status = "completed" if status == "completed" else "incomplete"
        index = resp.output_index(item.id)
        ids = {
            "response_id": resp.id,
            "item_id": item.id,
            "output_index": index,
            "content_index": 0,
        }
        if resp.audio_out:
            self.emit.control(ResponseAudioDoneEvent, **ids)
            self.emit.control(ResponseAudioTranscriptDoneEvent, transcript=item.transcript, **ids)
            part = {"type": "audio", "transcript": item.transcript}
        else:
            self.emit.control(ResponseTextDoneEvent, text=item.text or "", **ids)
            part = {"type": "text", "text": item.text or ""}
        self.emit.control(ResponseContentPartDoneEvent, part=part, **ids)
        wire = item.wire()
        self.emit.control(
            ResponseOutputItemDoneEvent, response_id=resp.id, output_index=index, item=wire
        )
        if not resp.request.out_of_band:
            self.emit.control(
                ConversationItemDone,
                item=wire,
                previous_item_id=self.conversation.previous_id(item.id),
            )

    async def _on_response_cancel(self, event: p.ResponseCancel) -> None:
        wanted = event.response_id
        if self.active is not None and wanted in (None, self.active.id):
            self.deferred = None
            await self._cancel_active("client_cancelled")
        elif wanted is not None and wanted in self._oob:
            await self._cancel(self._oob[wanted], "client_cancelled")
        else:
            what = f"response '{wanted}'" if wanted else "a response"
            raise p.ProtocolError(
                "response_cancel_not_active",
                f"Cancellation failed: there is no active {what} to cancel.",
                "response_id" if wanted else None,
                event.event_id,
            )

    async def _on_output_audio_buffer_clear(self, event: p.OutputAudioBufferClear) -> None:
        """Stop all assistant audio now: the active response is cancelled, and
        audio still queued from finished ones is dropped."""
        last = self.active.id if self.active is not None else self._last_response_id
        if last is None:
            raise p.ProtocolError(
                "invalid_request_error",
                "There is no assistant audio to clear.",
                event_id=event.event_id,
            )
        if self.active is not None:
            self.deferred = None
            await self._cancel_active("client_cancelled")
        else:
            self.epoch += 1
            self.outbox.drop_stale()
        self.emit.control(OutputAudioBufferCleared, response_id=last)
