"""A resumable WebRTC call (Parley's resume extension, `?resume=true`): its session
outlives each peer connection, as a resumable WebSocket session outlives each socket
(server/resume.py).

call level (one for the call's life): the session and its task, the outbox's writer
    or, detached, its pump, the replay journal (`Resumable`); the call id, playout
    and sidebands (`Call`), and the call's maximum length
peer level (one per peer connection, `Peer`): the peer connection, its tracks and
    its data channel; a resume brings a new one to the same call

Each outbox event is routed once (`Call.route`), attached or not: audio to the
playout, every other event to the sidebands and the journal, and, attached, on the
data channel. When the peer connection fails or closes, or its data channel closes,
the call is detached: the sidebands stay and go on getting its events, and the
playout holds what is left of the answer in flight. Nothing is played while no track
takes it, so the session's playback stays true (the item is played, or truncated on
a barge-in, as far as the user heard it), and a resumed call goes on playing the
answer from where the user lost it; a client that would rather not hear the rest
sends `output_audio_buffer.clear` (with `response.cancel`) when it is back.

The call ends on hang-up (DELETE, `/hangup`, the drain), when its session ends,
when the client floods its data channel, at its maximum length, or when it is not
resumed within the window; never because a peer connection is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from engine.replay_journal import Journaled
from server.resume import Resumable, ResumeRegistry, unchanged
from server.webrtc import Call, CallEnded, Peer

log = logging.getLogger(__name__)


class ResumableCall:
    """A call whose session outlives its peer connections."""

    def __init__(
        self,
        call: Call,
        owner: str,
        registry: ResumeRegistry,
        release: Callable[[], None],
        draining: Callable[[], bool],
    ) -> None:
        self.call = call
        self._release = release
        self._draining = draining
        self.released = asyncio.Event()  # the session ended and its seat is free
        self._serving: set[asyncio.Task[None]] = set()
        self.link = Resumable(call.session, owner, registry, self._finished, take=call.route)
        registry.add(self.link)

    @property
    def session_id(self) -> str:
        return self.link.session_id

    def attach(self, peer: Peer, missed: tuple[Journaled, ...] | None) -> None:
        """Serve the call over `peer` (`missed`: what to replay first; None: a new
        call). A peer that still held it is cut off."""
        task = asyncio.create_task(self._serve(peer, missed), name=f"peer:{self.call.call_id}")
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def run(self) -> str:
        """The call's life, whatever peer serves it: until it is hung up, reaches its
        maximum length, or its session ends; why it ended."""
        call = self.call
        expiry = asyncio.create_task(call.expire(), name=f"expire:{call.call_id}")
        ended = asyncio.create_task(call.ended.wait())
        try:
            await asyncio.wait({expiry, ended}, return_when=asyncio.FIRST_COMPLETED)
            if expiry.done() and isinstance(expiry.exception(), CallEnded):
                call.hang_up(str(expiry.exception()))
            await self.link.finish()
        finally:
            expiry.cancel()
            ended.cancel()
            if self._serving:  # each closes its peer connection (bounded)
                await asyncio.wait(set(self._serving))
        return call.end_reason or "hung up"

    def _finished(self) -> None:
        """The session ended (hung up, its window passed, its events lost, the
        server): the call is over everywhere."""
        self.call.hang_up("the session ended")
        self.call.close_sidebands()
        self.released.set()
        self._release()

    async def _serve(self, peer: Peer, missed: tuple[Journaled, ...] | None) -> None:
        link, call = self.link, self.call
        call.peer = peer
        attachment = link.attach(peer.send, unchanged, peer.cut_off, missed)
        attachment.opened.set()  # the peer connection was answered before
        watched = {
            asyncio.create_task(peer.read_events(), name=f"reader:{call.call_id}"),
            asyncio.create_task(peer.connected_in_time()),
            asyncio.create_task(peer.lost.wait()),
            asyncio.create_task(call.ended.wait()),
            asyncio.create_task(attachment.superseded.wait()),
        }
        writer = attachment.writer
        try:
            done, _ = await asyncio.wait(
                {link.runner, writer, *watched}, return_when=asyncio.FIRST_COMPLETED
            )
            if attachment.superseded.is_set():
                return  # a newer peer connection has the call
            failures = [
                t.exception()
                for t in done
                if not t.cancelled() and t.exception() is not None and t is not link.runner
            ]
            for error in failures:
                if not isinstance(error, CallEnded):
                    log.error("call %s: failed", call.call_id, exc_info=error)
                    call.hang_up("internal error")
            session_ending = link.runner.done() or (
                writer in done
                and not writer.cancelled()
                and writer.exception() is None
                and writer.result()
            )
            if call.ended.is_set() or session_ending or self._draining():
                # Ended for good: its last events go out on this data channel first.
                if link.runner.done() and not writer.done():
                    await asyncio.wait({writer}, timeout=call.settings.write_timeout_s)
                await link.finish()
                return
            reason = peer.lost_reason or next((str(e) for e in failures), "") or "the peer is gone"
            log.info("call %s: %s; detached", call.call_id, reason)
            link.detach(attachment)
        finally:
            for task in watched:
                task.cancel()
            with contextlib.suppress(Exception):
                await peer.close()
