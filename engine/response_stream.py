"""One response's output stream, owned by its response task.

The task waits for the response gate, runs the model, and turns each chunk into
output events: the assistant message announced with its first output, text or
transcript deltas, audio deltas in the session's format, function calls whole. The
stream keeps what was generated (audio, transcript, marks, calls); the Responder
(engine/responder.py) reads that only once the response is fenced or its task has
ended, and then closes the message here (`close_message`).

A call of a tool an MCP server listed is run inside the response task
(engine/mcp/calls.py), so a barge-in cancels it with the response; the model then
runs again with the result, its answer going on in the same message.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from engine.audio_format import OutputEncoder
from engine.conversation import Conversation, Item, TranscriptMark, transcript_at
from engine.emitter import Emitter
from engine.gates import GateSnapshot, response_gate_open
from engine.mcp.calls import MAX_MCP_ROUNDS, McpCalls
from engine.prepare_chain import Preparation, PrepareChain
from models.base import Executor, FunctionCall, OutputChunk, Prompt


@dataclass(frozen=True)
class ResponseGate:
    """The preparations a response waits for: every response-bound one submitted
    before it was announced (`up_to_seq`); `inputs` were tracked then."""

    prepares: PrepareChain
    up_to_seq: int
    inputs: tuple[Preparation, ...]

    async def wait(self) -> None:
        """Wait until the gate opens, reading liveness from the tasks themselves;
        raises if one of the response's inputs could not be prepared."""
        while True:
            snapshot = GateSnapshot(False, self.prepares.snapshot(up_to_seq=self.up_to_seq))
            if response_gate_open(snapshot):
                break
            running = [
                r.task
                for r in self.prepares.tracked()
                if r.seq <= self.up_to_seq and r.response_bound and not r.task.done()
            ]
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for record in self.inputs:
            task = record.task
            if not task.cancelled() and task.exception() is not None:
                raise RuntimeError(f"input item {record.label} could not be prepared")


def kept_samples(status: str, generated: int, sent: int) -> int:
    """The audio an ended message keeps: all of it, or after a cancel only what
    reached the writer (the rest was dropped, never heard)."""
    return min(generated, sent) if status == "cancelled" else generated


class ResponseStream:
    def __init__(
        self,
        *,
        response_id: str,
        epoch: int,
        lane: str,
        message: Item,
        audio_out: bool,
        in_conversation: bool,
        encoder: OutputEncoder,
        gate: ResponseGate | None,
        emit: Emitter,
        conversation: Conversation,
        new_id: Callable[[str], str],
        current_epoch: Callable[[str], int],
        mcp: McpCalls | None = None,
    ) -> None:
        self.response_id = response_id
        self.epoch = epoch
        self.lane = lane  # whose epoch fences this output (see Responder.lane_epoch)
        self.message = message
        self.audio_out = audio_out
        self.in_conversation = in_conversation  # False: out of band
        self.encoder = encoder  # to the session's output format, state carried per response
        self._gate = gate  # None: out of band, never gated
        self._emit = emit
        self._conversation = conversation
        self._new_id = new_id
        self._current_epoch = current_epoch
        self._mcp = mcp
        # What was generated: written here only, read by the Responder after the end.
        self.message_open = False
        self.audio: list[np.ndarray] = []
        self.samples = 0
        # Generated but held back by the encoder: counted, and played on the echo
        # guard's far end, with the delta that carries them.
        self.unsent_pcm: list[np.ndarray] = []
        self.transcript = ""
        self.marks: list[TranscriptMark] = []
        self.calls: list[Item] = []
        self.outputs: list[str] = []  # item ids by output_index
        self.finish: Literal["length"] | None = None

    @property
    def item_id(self) -> str:
        return self.message.id

    def output_index(self, item_id: str) -> int:
        return self.outputs.index(item_id)

    def fenced(self) -> bool:
        """A cancel moved this response's lane on: it owns the ending now."""
        return self.epoch != self._current_epoch(self.lane)

    async def run(
        self,
        executor: Executor,
        prompt: Callable[[tuple[Item, ...]], Prompt],
        on_first_chunk: Callable[[], None] | None = None,
    ) -> None:
        """Stream the model's answer to the outbox; returns early once fenced.
        `prompt` is built only after the gate opened, from the conversation then and
        the MCP calls this response ran; `on_first_chunk` is called when the model's
        first chunk arrives."""
        if self._gate is not None:
            await self._gate.wait()
        if self.fenced():
            return
        ran: list[Item] = []  # the MCP calls run so far, for the prompt
        if self._mcp is not None and self.in_conversation:
            ran = await self._mcp.run_approved(self)  # the ones the client approved
        for _ in range(MAX_MCP_ROUNDS + 1):
            if self.fenced():
                return
            before = len(ran)
            # Closed explicitly however this ends (a cancel lands outside the
            # generator), so the executor's cleanup runs now, not at garbage collection.
            async with contextlib.aclosing(executor.generate(prompt(tuple(ran)))) as chunks:
                async for chunk in chunks:
                    if self.fenced():
                        return
                    if on_first_chunk is not None:
                        on_first_chunk()
                        on_first_chunk = None
                    call = chunk.function_call
                    if call is not None and self._mcp is not None and self._mcp.routes(call.name):
                        if (done := await self._mcp.call(call, self)) is not None:
                            ran.append(done)
                        continue
                    await self._emit_chunk(chunk)
            if len(ran) == before:
                break  # no MCP call this round: the model has answered
        if self.message_open and self.audio_out and not self.fenced():
            tail = self.encoder.flush()  # the encoder's last held-back samples
            await self._emit_audio(tail, self.output_index(self.item_id))

    def announce(
        self, item: Item, in_progress: dict[str, Any] | None = None
    ) -> tuple[int, str | None]:
        """Add an output item to the response (and to the conversation's events):
        its output index, and the item before it in the conversation. For the
        response's function and MCP calls (`engine.mcp.calls.Outputs`)."""
        previous = self.calls[-1].id if self.calls else None
        if previous is None and self.in_conversation:
            previous = (
                self.item_id if self.message_open else self._conversation.previous_id(self.item_id)
            )
        self.calls.append(item)
        self.outputs.append(item.id)
        index = self.output_index(item.id)
        self._added(in_progress if in_progress is not None else item.wire(), index, previous)
        return index, previous

    def _added(self, wire: dict[str, Any], index: int, previous: str | None) -> None:
        """An output item's first events: in the response, and in the conversation."""
        self._emit.control(
            ResponseOutputItemAddedEvent,
            response_id=self.response_id,
            output_index=index,
            item=wire,
        )
        if self.in_conversation:
            self._emit.control(ConversationItemAdded, item=wire, previous_item_id=previous)

    def settle(self, item: Item, index: int, previous: str | None) -> None:
        """An announced output item is complete."""
        self._emit.control(
            ResponseOutputItemDoneEvent,
            response_id=self.response_id,
            output_index=index,
            item=item.wire(),
        )
        if self.in_conversation:
            self._emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)

    def _open_message(self) -> None:
        """Announce the assistant message with its first output."""
        self.message_open = True
        self.outputs.append(self.item_id)
        index = self.output_index(self.item_id)
        previous = self._conversation.previous_id(self.item_id) if self.in_conversation else None
        self._added(self.message.wire(), index, previous)
        part = (
            {"type": "audio", "transcript": ""} if self.audio_out else {"type": "text", "text": ""}
        )
        self._emit.control(
            ResponseContentPartAddedEvent,
            response_id=self.response_id,
            item_id=self.item_id,
            output_index=index,
            content_index=0,
            part=part,
        )

    def _emit_call(self, call: FunctionCall) -> None:
        """A function call arrives whole: its item is announced and completed at once
        (it joins the conversation when the response ends)."""
        item = Item(
            self._new_id("item"),
            "assistant",
            kind="function_call",
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
        )
        in_progress = {**item.wire(), "status": "in_progress", "arguments": ""}
        index, previous = self.announce(item, in_progress)
        ids = {"response_id": self.response_id, "item_id": item.id, "output_index": index}
        self._emit.control(
            ResponseFunctionCallArgumentsDeltaEvent,
            call_id=call.call_id,
            delta=call.arguments,
            **ids,
        )
        self._emit.control(
            ResponseFunctionCallArgumentsDoneEvent,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            **ids,
        )
        self.settle(item, index, previous)

    async def _emit_chunk(self, chunk: OutputChunk) -> None:
        if chunk.finish is not None:
            self.finish = chunk.finish
        if chunk.function_call is not None:
            self._emit_call(chunk.function_call)
        has_audio = chunk.audio is not None and len(chunk.audio) > 0 and self.audio_out
        if (chunk.text or has_audio) and not self.message_open:
            self._open_message()
        index = self.output_index(self.item_id) if self.message_open else 0
        if chunk.text:
            self.transcript += chunk.text
            delta = ResponseAudioTranscriptDeltaEvent if self.audio_out else ResponseTextDeltaEvent
            await self._emit.output(
                delta,
                self.epoch,
                lane=self.lane,
                response_id=self.response_id,
                item_id=self.item_id,
                output_index=index,
                content_index=0,
                delta=chunk.text,
            )
        if not has_audio or self.fenced():
            return
        assert chunk.audio is not None
        pcm = chunk.audio.astype(np.int16, copy=False)
        self.audio.append(pcm)
        self.samples += len(pcm)
        self.marks.append(TranscriptMark(self.samples, len(self.transcript)))
        self.unsent_pcm.append(pcm)
        await self._emit_audio(self.encoder.encode(pcm), index)

    async def _emit_audio(self, data: bytes, index: int) -> None:
        """One audio delta in the session's output format. A resampling encoder may
        hold samples back; they are counted with the delta that carries them."""
        if not data:
            return
        pcm, self.unsent_pcm = self.unsent_pcm, []
        await self._emit.output(
            ResponseAudioDeltaEvent,
            self.epoch,
            lane=self.lane,
            counts_for=self.item_id,
            samples=sum(len(p) for p in pcm),
            pcm=np.concatenate(pcm) if len(pcm) > 1 else (pcm[0] if pcm else None),
            response_id=self.response_id,
            item_id=self.item_id,
            output_index=index,
            content_index=0,
            delta=base64.b64encode(data).decode("ascii"),
        )

    def close_message(self, status: str, sent_samples: int) -> int:
        """Settle the announced message to what the client received and emit its
        closing events. Called by the Responder once the stream is fenced or ended;
        returns the audio samples the message keeps."""
        item = self.message
        kept = kept_samples(status, self.samples, sent_samples)
        if self.audio_out:
            item.audio = np.concatenate(self.audio)[:kept] if self.audio else np.zeros(0, np.int16)
            item.transcript = (
                transcript_at(self.transcript, self.marks, kept)
                if status == "cancelled"
                else self.transcript
            )
            item.marks = [m for m in self.marks if m.samples <= kept]
        else:
            item.text = self.transcript
        item.status = "completed" if status == "completed" else "incomplete"
        index = self.output_index(item.id)
        ids = {
            "response_id": self.response_id,
            "item_id": item.id,
            "output_index": index,
            "content_index": 0,
        }
        if self.audio_out:
            self._emit.control(ResponseAudioDoneEvent, **ids)
            self._emit.control(ResponseAudioTranscriptDoneEvent, transcript=item.transcript, **ids)
            part = {"type": "audio", "transcript": item.transcript}
        else:
            self._emit.control(ResponseTextDoneEvent, text=item.text or "", **ids)
            part = {"type": "text", "text": item.text or ""}
        self._emit.control(ResponseContentPartDoneEvent, part=part, **ids)
        wire = item.wire()
        self._emit.control(
            ResponseOutputItemDoneEvent, response_id=self.response_id, output_index=index, item=wire
        )
        if self.in_conversation:
            self._emit.control(
                ConversationItemDone,
                item=wire,
                previous_item_id=self._conversation.previous_id(item.id),
            )
        return kept if self.audio_out else 0
