"""Fifo (router.core.fifo), the queues of deliveries waiting for credit: any sequence of its
operations leaves it as the same operations leave a deque."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.core.fifo import COMPACT_AT, Fifo

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers()),
        st.tuples(st.just("popleft"), st.none()),
        st.tuples(st.just("push_front"), st.lists(st.integers(), max_size=3)),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=60,
)


@given(operations)
def test_a_fifo_behaves_as_a_deque(ops: list[tuple[str, object]]) -> None:
    fifo: Fifo[int] = Fifo()
    model: deque[int] = deque()
    for op, arg in ops:
        if op == "append":
            assert isinstance(arg, int)
            fifo.append(arg)
            model.append(arg)
        elif op == "popleft":
            if model:
                assert fifo.popleft() == model.popleft()
            else:
                with pytest.raises(IndexError):
                    fifo.popleft()
        elif op == "push_front":
            assert isinstance(arg, list)
            fifo.push_front(arg)
            model.extendleft(reversed(arg))
        else:
            fifo.clear()
            model.clear()
        assert list(fifo) == list(model)
        assert len(fifo) == len(model) and bool(fifo) == bool(model)


def test_taken_items_are_not_kept_and_the_front_is_dropped() -> None:
    """A queue that always has some items waiting (never empty, so never cleared) does not grow
    with what passed through it, and keeps no reference to what was taken."""
    fifo: Fifo[object] = Fifo()
    fifo.append(object())
    for _ in range(10 * COMPACT_AT):
        fifo.append(object())
        fifo.popleft()
    assert len(fifo) == 1
    assert len(fifo._items) <= 2 * COMPACT_AT + 2
    assert all(item is None for item in fifo._items[: fifo._head])
