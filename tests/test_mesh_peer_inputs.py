"""What a buggy or compromised peer router sent that broke the router receiving it (found by
bench/fuzz.py --peer, MeshHarness, sans-IO): each input exact; the connection ends with its
AMQP condition, or the message is dropped, and the router keeps nothing of it."""

from __future__ import annotations

import time

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.endpoints import CLOSED
from router.amqp.framing import frame
from router.amqp.performatives import Begin
from router.core.edgemsg import encode_addresses
from router.core.interrouter import ControlIn
from router.core.meshcontrol import CONTROL_MESSAGE_MAX
from router.testing.meshharness import MeshHarness
from router.testing.wire import split_stream


def test_an_uplinks_open_read_with_a_violation_after_it_ends_the_connection_only() -> None:
    # Our open went first (we connected); the interior's open came in one read with a begin
    # answering a session we never began: the engine closed the connection (not-allowed), then
    # the core set up the uplink on it and raised (no session can begin on a closed connection).
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("E", mode="edge")
    wire = h.uplink("E", "A", pump=False)
    edge, interior = h.cores["E"], h.cores["A"]
    while True:  # SASL, then the interior's open: held back
        wire.b.receive_data(wire.a.data_to_send(), h.now)
        interior.handle(wire.b, wire.b.events(), h.now)
        answer = wire.b.data_to_send()
        if any(piece[8:11] == b"\x00\x53\x10" for piece in split_stream(answer)):  # an open
            break
        wire.a.receive_data(answer, h.now)
        edge.handle(wire.a, wire.a.events(), h.now)
    begin = frame(0, Begin(remote_channel=9, next_outgoing_id=0, incoming_window=10, outgoing_window=10))
    wire.a.receive_data(answer + begin, h.now)
    events = wire.a.events()
    assert [e for e in events if isinstance(e, ev.ProtocolViolation) and e.condition == E.NOT_ALLOWED]
    edge.handle(wire.a, events, h.now)  # raised LocalUsageError
    assert wire.a.finished and not edge.mesh.edges.uplinks and edge.mesh.edges.active is None
    wire.a.receive_data(b"", h.now)
    edge.handle(wire.a, wire.a.events(), h.now)
    assert wire.a not in edge.connections


def test_an_edge_claiming_consumers_of_addresses_that_are_not_mobile_leaves_no_entry() -> None:
    # EDGE-ADDRESSES with _local and _topo addresses: the interior made a table entry for each
    # (of this router's own, or another router's) and kept it after skipping it, for ever:
    # an edge could fill the table with entries no one uses.
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("E", mode="edge")
    wire = h.uplink("E", "A")
    interior = h.cores["A"]
    keys = set(interior.table.entries)
    edges = interior.mesh.edges
    claimed = ["_local/x", "_topo/0/A/y", "_topo/0/B/z", "kept"]
    edges.on_control(edges.edges["E"], encode_addresses("E", 7, claimed), h.now)
    h.pump()
    assert set(interior.table.entries) - keys == {"Mkept"}
    h.cut(wire)
    h.advance(1.0)
    assert set(interior.table.entries) == keys


class _Frame:
    """What ControlChannel.receive reads of a TransferReceived."""

    def __init__(self, link: object, payload: bytes, more: bool) -> None:
        self.link, self.payload, self.more = link, payload, more
        self.aborted, self.settled, self.delivery_id = False, True, 0


def test_a_control_message_in_many_small_frames_costs_their_number_not_its_square() -> None:
    # Each frame summed the sizes of all before it: a control message of 16 MiB in frames of
    # 500 bytes took 15 s of the router's time (every client waited), again and again.
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B")
    a = h.cores["A"]
    peer = a.mesh.peers["B"]
    (control,) = [link for s in peer.conn.engine.sessions for link in s.links if type(link.context) is ControlIn]
    chunk = b"x" * 500
    frames = CONTROL_MESSAGE_MAX // len(chunk) + 1
    start = time.perf_counter()
    for _ in range(frames):
        assert a.mesh.control.receive(peer, _Frame(control, chunk, True), h.now) is None  # type: ignore[arg-type]
    took = time.perf_counter() - start
    assert took < 3.0, f"{frames} frames took {took:.1f} s"  # (0.03 s; 15 s before)
    assert peer.conn.engine.state.local is CLOSED  # resource-limit-exceeded, past the limit
    assert peer.partial == [] and peer.partial_size == 0  # what came is dropped at once
