"""Dispositions batched into ranges (router.core.dispositions): whatever order outcomes arrive
in, the ranges written cover exactly the deliveries given, each with its own state, in order,
without overlaps, and consecutive deliveries with equal states share one range."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.messaging import ACCEPTED, RELEASED, Modified, Rejected
from router.amqp.performatives import RECEIVER, SENDER, Error
from router.core.dispositions import DispositionBatch, Dispositions

STATES = [ACCEPTED, RELEASED, Modified(delivery_failed=True), Rejected(error=Error(condition="amqp:x"))]


def _session() -> Any:
    conn = Connection(ConnectionConfig(container_id="test"))
    conn.open()
    return conn.begin_session()


outcomes = st.lists(st.tuples(st.integers(0, 60), st.sampled_from(STATES)), unique_by=lambda o: o[0])


@given(outcomes=outcomes, shuffle=st.randoms(use_true_random=False), in_order=st.booleans())
def test_ranges_cover_exactly_the_outcomes_given(outcomes: list[tuple[int, Any]], shuffle: Any, in_order: bool) -> None:
    if in_order:
        outcomes.sort(key=lambda o: o[0])
    else:
        shuffle.shuffle(outcomes)
    batch = DispositionBatch(_session(), RECEIVER, True)
    for delivery_id, state in outcomes:
        batch.add(delivery_id, state)
    if not outcomes:
        return
    ranges = batch.ranges()
    covered = {i: state for first, last, state in ranges for i in range(first, last + 1)}
    assert covered == dict(outcomes)
    assert sum(last - first + 1 for first, last, _ in ranges) == len(outcomes)  # no overlaps
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))  # in order
    for a, b in zip(ranges, ranges[1:]):  # merged as far as states allow
        assert not (a[1] + 1 == b[0] and a[2] == b[2])


def test_a_consumer_accepting_in_order_costs_one_range() -> None:
    batch = DispositionBatch(_session(), RECEIVER, True)
    for delivery_id in range(1000, 1250):
        batch.add(delivery_id, ACCEPTED)
    assert batch.ranges() == [(1000, 1249, ACCEPTED)]


def test_batches_are_kept_per_session_role_and_settled_flag() -> None:
    one, two = _session(), _session()
    pending = Dispositions()
    pending.add(one, RECEIVER, 1, ACCEPTED, True)
    pending.add(two, RECEIVER, 1, ACCEPTED, True)
    pending.add(one, SENDER, 2, None, True)
    pending.add(one, RECEIVER, 2, ACCEPTED, True)
    pending.add(one, RECEIVER, 3, ACCEPTED, False)
    batches = {(b.session is one, b.role, b.settled): b.ranges() for b in pending.take()}
    assert batches == {
        (True, RECEIVER, True): [(1, 2, ACCEPTED)],
        (False, RECEIVER, True): [(1, 1, ACCEPTED)],
        (True, SENDER, True): [(2, 2, None)],
        (True, RECEIVER, False): [(3, 3, ACCEPTED)],
    }
    assert pending.take() == []


def test_a_written_batch_starts_empty_and_an_unwritten_one_keeps_its_outcomes() -> None:
    session = _session()
    pending = Dispositions()
    pending.add(session, RECEIVER, 7, ACCEPTED, True)
    (first,) = pending.take()
    assert first.write()
    pending.add(session, RECEIVER, 8, RELEASED, True)
    (again,) = pending.take()
    assert again is first  # the session's batch, reused
    assert again.ranges() == [(8, 8, RELEASED)]  # nothing of the batch written before
    # Taken but not written (a flush cut short): its outcomes go with the next take.
    pending.add(session, RECEIVER, 9, RELEASED, True)
    (later,) = pending.take()
    assert later.ranges() == [(8, 9, RELEASED)]
    assert pending.take() == []
