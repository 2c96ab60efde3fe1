"""Bounds a session keeps to: nothing it holds grows without one."""

from __future__ import annotations

from dataclasses import dataclass

from models.base import PCM_RATE


@dataclass(frozen=True)
class EngineLimits:
    max_buffer_ms: int = 15 * 60 * 1000  # uncommitted input audio
    min_commit_ms: int = 100  # as OpenAI: a manual commit needs this much audio
    abort_timeout_s: float = 0.5  # bounded wait for the model to acknowledge an abort
    vad_offload_samples: int = PCM_RATE  # appends longer than this run VAD in a thread
    mailbox_slots: int = 64  # client events queued before the reader waits
    # Server events queued for the writer: output waits at the limit, control events
    # may use the reserve above it, past which the client is not reading (1008).
    # Counted in events and in JSON characters (an output event can carry a sentence
    # of audio, ~1 MB; a control event can echo the largest client message).
    outbox_limit: int = 256
    outbox_reserve: int = 64
    outbox_limit_chars: int = 8 << 20
    outbox_reserve_chars: int = 24 << 20
    # `conversation: "none"` responses running at once; one more is refused
    # (each holds a model request, and the model is shared by every session).
    max_out_of_band_responses: int = 4
    # Audio (user and assistant) kept in conversation items for history; past it the
    # oldest items' audio is released, their transcripts kept (engine/history.py).
    max_history_audio_ms: int = 2 * 60 * 1000
    # Items and their text kept at all; past either the oldest items are dropped
    # (told as `conversation.item.deleted`).
    max_history_items: int = 1000
    max_history_text_chars: int = 1_000_000
    # A user message's images, for an executor that sees (engine/images.py): the
    # bytes of one, how many one item shows and how many the conversation holds; an
    # item past any is refused whole. 4 MiB takes a camera photo as JPEG or a
    # full-HD screenshot as PNG, more than a vision model reads (it scales images
    # to about a megapixel); kept as base64, 8 of them are ~45 MB a session at
    # most, as much as a full input audio buffer.
    max_image_bytes: int = 4 << 20
    max_images_per_item: int = 4
    max_history_images: int = 8
    # Audio reaches the VAD, which every session shares, at most this many times real
    # time once a burst of `ingest_burst_s` of audio is spent (engine/ingest_pace.py);
    # 0: as fast as it comes.
    ingest_speed: float = 10.0
    ingest_burst_s: float = 60.0
    # With input transcription on, the turn being spoken is recognized again after
    # this much more speech for partial transcripts (engine/partials.py); 0: none.
    partial_transcript_ms: int = 500
