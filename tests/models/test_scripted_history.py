"""The scripted executor's test records are bounded, so a long-running
`parley serve --executor scripted` (bench/load.py) does not keep every prompt."""

from __future__ import annotations

import numpy as np

from models.base import Prompt, PromptItem
from models.scripted import ScriptedExecutor


async def test_records_keep_only_the_latest_history() -> None:
    executor = ScriptedExecutor(history=3)
    for i in range(5):
        item = PromptItem(f"item_{i}", "user", audio=np.zeros(240, np.int16), rate=24_000)
        await executor.prepare(item)
        prompt = Prompt(request_id=f"resp_{i}", instructions="", items=(item,))
        chunks = [c async for c in executor.generate(prompt)]
        assert chunks
        await executor.abort(prompt.request_id)
    assert [p.request_id for p in executor.prompts] == ["resp_2", "resp_3", "resp_4"]
    assert executor.prepared == ["item_2", "item_3", "item_4"]
    assert executor.aborted == executor.abort_requests == ["resp_2", "resp_3", "resp_4"]
