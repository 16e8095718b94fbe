"""A connection's transfer sink (events.TransferSink): which frames it is offered, and that
whatever it declines, or may not be offered, arrives as events in the order it came.

The sink takes a first frame only while no event of the same read waits before it (the one who
handles the events must see everything in order), never an aborted frame or a continuation,
and a frame it declines becomes a TransferReceived as without a sink. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.events import RemoteAttach, TransferReceived, TransferSink
from router.amqp.link import Link
from router.amqp.messaging import Target
from router.build_info import module_is_compiled
from router.testing.enginepair import attach_pair, connected_pair, of_type

# The recording sink subclasses TransferSink, which an interpreted class cannot do once
# router.amqp.events is compiled: these run on the development install only.
pytestmark = pytest.mark.skipif(
    module_is_compiled("router.amqp.events"), reason="a test sink cannot subclass the compiled TransferSink"
)


class Recording(TransferSink):
    """Takes the first frames of the links in `takes`; records every frame offered."""

    def __init__(self, takes: set[str]) -> None:
        self.takes = takes
        self.offered: list[tuple[str, int, bytes, bool, bytes]] = []

    def first_frame(
        self, link: Link, delivery_id: int, settled: bool, more: bool, message_format: int,
        payload: bytes | memoryview, source: bytes, offset: int, now: float,
    ) -> bool:  # fmt: skip
        # the payload is the frame's, at `offset` in `source`, as TransferReceived has them
        assert bytes(source[offset : offset + len(payload)]) == bytes(payload)
        self.offered.append((link.name, delivery_id, bytes(payload), more, bytes(source)))
        return link.name in self.takes


def _pair(takes: set[str], names: tuple[str, ...] = ("a",), credit: int = 100) -> tuple[Any, dict[str, Link], Recording]:
    pair, cs, ss = connected_pair()
    senders = {name: attach_pair(pair, cs, ss, name, credit=credit)[0] for name in names}
    sink = Recording(takes)
    pair.server.transfer_sink = sink
    return pair, senders, sink


def test_first_frames_go_to_the_sink_and_say_so_until_the_events_are_taken() -> None:
    pair, senders, sink = _pair({"a"})
    ids = [senders["a"].send_transfer(b"t%d" % i, b"body-%d" % i) for i in range(3)]
    pair.server.receive_data(pair.client.data_to_send(), pair.now)
    assert [(o[0], o[1], o[2]) for o in sink.offered] == [("a", i, b"body-%d" % i) for i in ids]
    assert pair.server.sunk
    assert of_type(pair.server.events(), TransferReceived) == []
    assert not pair.server.sunk  # events() ends the batch


def test_a_declined_frame_is_an_event_as_without_a_sink() -> None:
    pair, senders, sink = _pair(set())
    senders["a"].send_transfer(b"tag-1", b"payload", message_format=7)
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert len(sink.offered) == 1 and not pair.server.sunk
    assert t.delivery_tag == b"tag-1" and t.payload == b"payload" and t.message_format == 7 and t.first


def test_continuations_and_aborted_frames_are_events() -> None:
    pair, senders, sink = _pair({"a"}, credit=10)
    snd = senders["a"]
    snd.send_transfer(b"big", b"part1-", more=True)
    snd.send_transfer(b"big", b"part2-", more=True)
    snd.send_transfer(b"big", b"part3")
    _, server_events = pair.pump()
    assert [(o[2], o[3]) for o in sink.offered] == [(b"part1-", True)]
    parts = of_type(server_events, TransferReceived)
    assert [(bytes(t.payload), t.more, t.first) for t in parts] == [(b"part2-", True, False), (b"part3", False, False)]
    assert {t.delivery_tag for t in parts} == {b"big"}  # the first frame's, though the sink took it


def test_after_an_event_in_the_same_read_the_frames_wait_behind_it() -> None:
    # One read: a's transfer (sunk), b's attach (an event), then a's next transfer, which must
    # not overtake the attach: it is an event too.
    pair, senders, sink = _pair({"a"})
    a = senders["a"]
    a.send_transfer(b"1", b"first")
    session = a.session
    b = session.attach_sender("late", target=Target(address="late"))
    a.send_transfer(b"2", b"second")
    pair.server.receive_data(pair.client.data_to_send(), pair.now)
    events = pair.server.events()
    assert [o[2] for o in sink.offered] == [b"first"]
    assert [type(e) for e in events] == [RemoteAttach, TransferReceived]
    assert events[1].payload == b"second" and events[0].link.name == b.name


@settings(max_examples=50, deadline=None)
@given(
    plan=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 3)), min_size=1, max_size=12),
    takes=st.sets(st.sampled_from(["a", "b"])),
)
def test_every_delivery_reaches_the_sink_or_the_events_whole_and_in_order(
    plan: list[tuple[str, int]], takes: set[str]
) -> None:
    """Deliveries of one to three frames on two links, whatever the sink takes: per link, the
    deliveries' bodies come out whole and in order, from the sink and the events together."""
    pair, senders, sink = _pair(takes, ("a", "b"))
    sent: dict[str, list[bytes]] = {"a": [], "b": []}
    for n, (name, frames) in enumerate(plan):
        parts = [b"%d.%d|" % (n, i) for i in range(frames)]
        for i, part in enumerate(parts):
            senders[name].send_transfer(b"t%d" % n, part, more=i < frames - 1)
        sent[name].append(b"".join(parts))
    _, server_events = pair.pump()
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    taken = [o for o in sink.offered if o[0] in takes]
    transfers = of_type(server_events, TransferReceived)
    # Replayed in the order sent: each delivery's first frame was taken (only on a link the sink
    # takes) or is the next event (after an event of the same read, even on such a link); the
    # rest of its frames are the events that follow.
    for n, (name, frames) in enumerate(plan):
        mark = b"%d.0|" % n
        if taken and taken[0][2] == mark:
            assert name in takes
            body = taken.pop(0)[2]
        else:
            first = transfers.pop(0)
            assert first.first and first.link.name == name and bytes(first.payload) == mark
            body = mark
        for _ in range(frames - 1):
            t = transfers.pop(0)
            assert not t.first and t.link.name == name
            body += bytes(t.payload)
        got[name].append(body)
    assert got == sent
    assert transfers == [] and taken == []
