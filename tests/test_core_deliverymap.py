"""DeliveryMap behaves as a dict of delivery-id to record, whatever the order of puts and pops,
across the uint32 wrap, with stragglers; and its ring stays bounded by its span, not by traffic."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.serial import SERIAL_MASK, serial_ids_in
from router.core.deliverymap import MASK, RING_EMPTY_KEPT, RING_KEPT, RING_MIN, DeliveryMap

# An operation: ("put", step) puts the next id (`step` ids after the last one put, 0 = the same
# one again), ("pop", back) pops the id `back` before the last one put, ("get", back) looks it up,
# ("range", (back, count)) pops `count` ids from there as a disposition does, through
# serial_ids_in (two billion: a hostile disposition).
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([1, 1, 1, 1, 0, 2, 5, 40])),
        st.tuples(st.sampled_from(["pop", "get"]), st.integers(0, 60)),
        st.tuples(st.just("range"), st.tuples(st.integers(0, 60), st.sampled_from([0, 1, 3, 30, 2**31 - 1]))),
    ),
    max_size=300,
)


@settings(max_examples=300)
@given(start=st.sampled_from([0, 1000, MASK - 30]), span=st.sampled_from([4, 16, 8192]), ops=OPS)
def test_it_agrees_with_a_dict(start: int, span: int, ops: list[tuple[str, Any]]) -> None:
    model: dict[int, object] = {}
    ring = DeliveryMap(span_max=span)
    last = (start - 1) & MASK
    for n, (op, arg) in enumerate(ops):
        if op == "put":
            last = (last + arg) & MASK
            record = ("record", n)
            model[last] = record
            ring.put(last, record)
        elif op == "range":  # `count` ids from `back` before the last one put
            back, count = arg
            first = (last - back) & MASK
            inside = sorted((k for k in model if (k - first) & MASK < count), key=lambda k: (k - first) & MASK)
            popped = [ring.pop(k) for k in serial_ids_in(first, (first + count - 1) & MASK, ring)]
            assert [r for r in popped if r is not None] == [model.pop(k) for k in inside]
        else:
            key = (last - arg) & MASK
            if op == "pop":
                assert ring.pop(key) == model.pop(key, None)
            else:
                assert (key in ring) == (key in model)
                assert dict(ring.items()).get(key) == model.get(key)
        assert len(ring) == len(model)
        assert ring.empty == (not model)
    assert sorted(ring.items()) == sorted(model.items())
    assert sorted(ring) == sorted(model)
    for key in list(model):
        assert key in ring


def test_one_record_never_settled_does_not_grow_the_ring_with_traffic() -> None:
    ring = DeliveryMap(span_max=64)
    ring.put(0, "stuck")
    for delivery_id in range(1, 10_000):
        ring.put(delivery_id, delivery_id)
        assert ring.pop(delivery_id) == delivery_id
    assert dict(ring.items()) == {0: "stuck"} and len(ring) == 1
    assert len(ring._slots) <= 64  # the stuck record went aside; the ring follows the traffic
    assert ring.pop(0) == "stuck" and ring.empty


def test_in_order_settlement_keeps_the_ring_short() -> None:
    ring = DeliveryMap()
    for delivery_id in range(100_000):
        ring.put(delivery_id, delivery_id)
        if delivery_id >= 250:  # a window of 250 unsettled
            assert ring.pop(delivery_id - 250) == delivery_id - 250
    assert len(ring) == 250
    assert len(ring._slots) <= 250 + 1024 * 2
    assert not ring._stragglers


def test_its_mask_is_the_serial_numbers_one() -> None:
    assert MASK == SERIAL_MASK  # (a literal in deliverymap.py, for the compiled code's sake)


def _ring_shape_holds(ring: DeliveryMap) -> None:
    """The ring's own invariants: a power of two slots, its span within them, nothing outside
    the span, and no more than four slots per id of span once above RING_KEPT."""
    slots, span, head = ring._slots, ring._span, ring._head
    assert len(slots) >= RING_MIN and len(slots) & (len(slots) - 1) == 0 and ring._mask == len(slots) - 1
    assert 0 <= span <= len(slots) and 0 <= head < len(slots)
    inside = {(head + offset) & ring._mask for offset in range(span)}
    assert all(slots[i] is None for i in range(len(slots)) if i not in inside)
    assert span == 0 or slots[head] is not None  # the ring starts at a record
    assert len(slots) <= RING_KEPT or span * 4 >= len(slots)
    assert span > 0 or len(slots) <= RING_KEPT  # (above, the span's rule gave them back)


# Batches, so that the ring grows past RING_KEPT, wraps around its slots and shrinks again:
# ("put", n) puts the next n ids, ("oldest", n) pops the n oldest held, ("pop", back) pops the id
# `back` before the last one put (out of order), ("skip", n) leaves n ids unused.
BATCHES = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([1, 3, 17, 200, 1500, 5000])),
        st.tuples(st.just("oldest"), st.sampled_from([1, 5, 100, 1000, 4000])),
        st.tuples(st.just("pop"), st.integers(0, 3000)),
        st.tuples(st.just("skip"), st.sampled_from([1, 7, 700])),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(start=st.sampled_from([0, 5, MASK - 2000]), span=st.sampled_from([64, 2048, 8192]), ops=BATCHES)
def test_the_circular_ring_agrees_with_a_dict_through_growing_and_shrinking(
    start: int, span: int, ops: list[tuple[str, int]]
) -> None:
    model: dict[int, object] = {}
    ring = DeliveryMap(span_max=span)
    last = (start - 1) & MASK
    for op, n in ops:
        if op == "put":
            for _ in range(n):
                last = (last + 1) & MASK
                model[last] = ("record", last)
                ring.put(last, ("record", last))
        elif op == "skip":
            last = (last + n) & MASK
        elif op == "oldest":  # in the order they were put (offsets from the last one, largest first)
            for key in sorted(model, key=lambda k: (last - k) & MASK, reverse=True)[:n]:
                assert ring.pop(key) == model.pop(key)
        else:
            key = (last - n) & MASK
            assert ring.get(key) == model.get(key)
            assert ring.pop(key) == model.pop(key, None)
        _ring_shape_holds(ring)
        assert len(ring) == len(model)
    assert sorted(ring.items()) == sorted(model.items())
    for key in model:
        assert key in ring and ring.get(key) == model[key]


def test_a_ring_gives_its_slots_back_as_it_empties() -> None:
    ring = DeliveryMap()
    for delivery_id in range(5000):
        ring.put(delivery_id, delivery_id)
    assert len(ring._slots) == 8192
    for delivery_id in range(5000):
        assert ring.pop(delivery_id) == delivery_id
        _ring_shape_holds(ring)
    assert ring.empty and len(ring._slots) <= RING_KEPT
    for delivery_id in range(5000, 5004):  # then lone messages: the burst's slots go
        ring.put(delivery_id, delivery_id)
        assert ring.pop(delivery_id) == delivery_id
    assert ring.empty and len(ring._slots) <= RING_EMPTY_KEPT


def test_a_ring_that_empties_between_batches_keeps_its_slots() -> None:
    ring = DeliveryMap()
    for batch in range(3):
        for delivery_id in range(batch * 100, batch * 100 + 100):
            ring.put(delivery_id, delivery_id)
        assert len(ring._slots) == 128
        for delivery_id in range(batch * 100, batch * 100 + 100):
            assert ring.pop(delivery_id) == delivery_id
        # the batch spanned more than a quarter of its 128 slots: they stay for the next one
        assert ring.empty and len(ring._slots) == 128
        _ring_shape_holds(ring)


def test_a_ring_whose_batches_shrink_gives_back_a_quarter_at_each_emptying() -> None:
    ring = DeliveryMap()
    next_id = 0

    def batch(size: int) -> None:
        nonlocal next_id
        ids = range(next_id, next_id + size)
        next_id += size
        for delivery_id in ids:
            ring.put(delivery_id, delivery_id)
        for delivery_id in ids:
            assert ring.pop(delivery_id) == delivery_id
        _ring_shape_holds(ring)

    batch(1000)
    assert ring.empty and len(ring._slots) == 1024
    sizes = []
    for _ in range(4):  # batches of 10 now: a quarter of the slots goes at each emptying
        batch(10)
        sizes.append(len(ring._slots))
    assert sizes == [256, 64, 64, 64]  # (RING_EMPTY_KEPT slots or fewer are kept as they are)
    assert 64 <= RING_EMPTY_KEPT
