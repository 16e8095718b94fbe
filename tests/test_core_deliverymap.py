"""DeliveryMap behaves as a dict of delivery-id to record, whatever the order of puts and pops,
across the uint32 wrap, with stragglers; and its ring stays bounded by its span, not by traffic."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.serial import SERIAL_MASK, serial_ids_in
from router.core.deliverymap import MASK, DeliveryMap

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
