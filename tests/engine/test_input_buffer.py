"""The input audio buffer takes exactly the samples asked for."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.input_buffer import InputBuffer


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=20), st.data())
def test_input_buffer_take_is_exact(chunks: list[int], data: st.DataObject) -> None:
    buffer = InputBuffer()
    total = 0
    for n in chunks:
        buffer.append(np.arange(total, total + n, dtype=np.int64).astype(np.int16))
        total += n
    begin = data.draw(st.integers(0, total))
    end = data.draw(st.integers(begin, total))
    out = buffer.take(begin, end)
    assert np.array_equal(out, np.arange(begin, end, dtype=np.int64).astype(np.int16))
    assert buffer.start == end and len(buffer) == total - end


@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "discard", "take"]), st.integers(0, 3000)),
        max_size=40,
    )
)
def test_input_buffer_matches_a_flat_reference(ops: list[tuple[str, int]]) -> None:
    # The buffer keeps chunks and trims them lazily; a flat array is the reference.
    buffer, flat, start, total = InputBuffer(), np.zeros(0, np.int16), 0, 0
    for op, n in ops:
        if op == "append":
            buffer.append(np.arange(total, total + n, dtype=np.int64).astype(np.int16))
            flat = np.concatenate([flat, np.arange(total, total + n).astype(np.int16)])
            total += n
        elif op == "discard":
            pos = min(max(start + n, start), total)
            buffer.discard_before(start + n)
            flat, start = flat[pos - start :], pos
        else:
            begin, end = start + n // 3, start + n
            want_begin, want_end = min(begin, total), min(end, total)
            got = buffer.take(begin, end)
            assert np.array_equal(got, flat[want_begin - start : want_end - start])
            flat, start = flat[want_end - start :], want_end
        assert (buffer.start, buffer.end, len(buffer)) == (start, total, total - start)
    assert np.array_equal(buffer.take(start, total), flat)
