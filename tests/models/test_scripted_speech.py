"""The scripted executor given a recording (PARLEY_SCRIPTED_SPEECH) speaks it whole as
each audio reply, with the reply's words spread over its chunks."""

from __future__ import annotations

import numpy as np

from bench.speech import SPEECH_DIR
from models.base import Prompt
from models.scripted import ScriptedExecutor, read_speech


async def test_an_audio_reply_is_the_whole_recording_with_every_word() -> None:
    speech = read_speech(SPEECH_DIR / "joke.wav")
    executor = ScriptedExecutor(speech=speech)
    prompt = Prompt(request_id="resp_1", instructions="", items=())
    chunks = [c async for c in executor.generate(prompt)]
    audio = [c.audio for c in chunks if c.audio is not None]
    assert len(audio) == len(chunks) == -(-len(speech) // 2400)  # 100 ms chunks
    assert np.array_equal(np.concatenate(audio), speech)
    assert "".join(c.text for c in chunks) == ScriptedExecutor.reply_for(prompt)
    assert chunks[0].text and chunks[-1].text == ""  # spread, not one per chunk


async def test_a_text_reply_and_the_default_tone_keep_one_word_a_chunk() -> None:
    prompt = Prompt(request_id="r", instructions="", items=(), output_modalities=("text",))
    words = ScriptedExecutor.reply_for(prompt).split(" ")
    text_only = [
        c async for c in ScriptedExecutor(speech=np.ones(24_000, np.int16)).generate(prompt)
    ]
    assert [c.text.strip() for c in text_only] == words
    assert all(c.audio is None for c in text_only)
    toned = [c async for c in ScriptedExecutor().generate(Prompt("r2", "", ()))]
    assert len(toned) == len(words) and all(c.audio is not None for c in toned)
