"""What a session holds while the peer's incoming window is closed (transport §2.5.6;
router/amqp/sessionheld.py): the bytes it counts for the driver (`FrameOutput.held_bytes`, which
the network layer adds to its unsent bytes), one held flow per link however many the peer asks
for, and the count always equal to what the queue holds (a hypothesis state machine)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from router.amqp.endpoints import ACTIVE
from router.amqp.events import TransferReceived
from router.amqp.messaging import ACCEPTED
from router.amqp.performatives import Flow, Transfer
from router.amqp.session import Session
from router.amqp.sessionheld import LINK_FLOW, held_size
from router.testing.enginepair import attach_pair, bodies, connected_pair, of_type


def held_in_queue(session: Session) -> int:
    return sum(held_size(item) for item in session.blocked or ())


def test_frames_held_for_a_closed_window_count_their_bytes_until_they_go() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(4):
        snd.send_transfer(b"%d" % i, bytes(1000))
    # the first went out (a window of one), three wait: their frames, header and all
    assert cs.blocked_frames == 3
    assert pair.client.output.held_bytes == held_in_queue(cs) > 3 * 1000
    _, server_events = pair.pump()  # the receiver opens its window again as they come
    assert len(of_type(server_events, TransferReceived)) == 4
    assert len(bodies(b"".join(pair.wire_to_server), Transfer)) == 4
    assert pair.client.output.held_bytes == 0 and cs.blocked is None


def test_a_link_detach_and_a_session_end_drop_what_they_held_from_the_count() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    one, _ = attach_pair(pair, cs, ss, "one", credit=10)
    two, _ = attach_pair(pair, cs, ss, "two", credit=10)
    for link in (one, two, one, two):
        link.send_transfer(b"t", bytes(500))
    held_before = pair.client.output.held_bytes
    one.detach()
    assert 0 < pair.client.output.held_bytes < held_before
    assert pair.client.output.held_bytes == held_in_queue(cs)
    cs.end()
    assert pair.client.output.held_bytes == 0


def test_an_echo_flood_while_the_window_is_closed_holds_one_flow_per_link() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    pair.client.data_to_send()  # (the first transfer, which the window let through)
    for _ in range(500):
        rcv.flow(10, echo=True)  # the receiver asks for our link state again and again
    pair.client.receive_data(pair.server.data_to_send(), 0.0)
    flows_held = [item for item in cs.blocked or () if item[0] == LINK_FLOW]
    assert len(flows_held) == 1
    assert pair.client.output.held_bytes == held_in_queue(cs)


def test_a_held_flow_goes_out_once_after_the_transfers_it_waited_for() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(3)]
    snd.set_available(7)
    snd.set_available(9)  # a second flow of the link: it joins the first
    snd.dispose(ids[0], ids[-1], state=ACCEPTED, settled=True)
    pair.pump()
    link_flows = [flow for flow in bodies(b"".join(pair.wire_to_server), Flow) if flow.handle is not None]
    assert len(link_flows) == 1
    # made when it went out: the counts of then, all three deliveries seen by the receiver
    assert link_flows[0].available == 9 and link_flows[0].delivery_count == 3
    assert pair.client.output.held_bytes == 0


@pytest.mark.parametrize("b_first", [False, True])
def test_a_detach_while_its_transfers_wait_keeps_the_session_delivery_id_sequence(b_first: bool) -> None:
    """Delivery-ids are the session's sequence (transport §2.7.5): a link detached while its
    transfers wait for the window must not leave a gap before another link's (the peer ended
    the session: "delivery-id 3 out of sequence"). When nothing of another link follows, its
    held ids are taken back (the next delivery gets the first of them) and the detach goes at
    once; when another link's delivery waits after them (`b_first`), they go as aborted,
    settled transfers without payload, and the detach after them."""
    from router.amqp.events import ProtocolViolation, RemoteDetach

    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    (a, _), (b, _) = (attach_pair(pair, cs, ss, name, credit=1000) for name in ("a", "b"))
    for _ in range(3):
        a.send_transfer(b"t", b"x")  # the window lets the first go; two wait
    if b_first:
        b.send_transfer(b"u", b"for b")
    a.detach()
    if not b_first:
        b.send_transfer(b"u", b"for b")
    _, server_events = pair.pump()
    assert of_type(server_events, ProtocolViolation) == []
    assert ss.state.local is ACTIVE and cs.state.remote is ACTIVE
    received = [(e.link.name, e.delivery_id, e.aborted) for e in of_type(server_events, TransferReceived)]
    if b_first:
        assert received == [("a", 0, False), ("a", 1, True), ("a", 2, True), ("b", 3, False)]
    else:
        assert received == [("a", 0, False), ("b", 1, False)]
    assert [e.link.name for e in of_type(server_events, RemoteDetach)] == ["a"]
    assert pair.client.output.held_bytes == 0 and cs.blocked is None


def test_two_links_detached_with_their_transfers_interleaved_keep_the_sequence() -> None:
    """a, a, b, a, b with a window of two: b's held deliveries wait around a's stub (the aborted
    transfer left for a's third delivery when a was detached): they too keep their places as
    stubs; their ids may not be taken back (the peer ended the session: "delivery-id 3 out of
    sequence (expected 2)")."""
    from router.amqp.events import ProtocolViolation, TransferReceived

    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    (a, _), (b, _) = (attach_pair(pair, cs, ss, name, credit=1000) for name in ("a", "b"))
    for link in (a, a, b, a, b):
        link.send_transfer(b"t", b"x")
    a.detach()
    b.detach()
    _, server_events = pair.pump()
    assert of_type(server_events, ProtocolViolation) == []
    assert ss.state.local is ACTIVE and cs.state.remote is ACTIVE
    received = [(e.link.name, e.delivery_id, e.aborted) for e in of_type(server_events, TransferReceived)]
    assert received == [("a", 0, False), ("a", 1, False), ("b", 2, True), ("a", 3, True), ("b", 4, True)]
    assert pair.client.output.held_bytes == 0 and cs.blocked is None


class HeldFrames(RuleBasedStateMachine):
    """Any mix of sends, flows, dispositions, windows opening, detaches: the count the driver
    reads is always what the queue holds, never more than one flow of a link waits, and the
    peer keeps the session (the delivery-ids it sees stay in sequence)."""

    def __init__(self) -> None:
        super().__init__()
        self.pair, self.cs, self.ss = connected_pair(server_begin={"incoming_window": 2})
        self.links = [attach_pair(self.pair, self.cs, self.ss, name, credit=1000) for name in ("a", "b")]
        self.ids: list[int] = []

    @rule(index=st.integers(0, 1), size=st.integers(0, 3000))
    def send(self, index: int, size: int) -> None:
        snd, _ = self.links[index]
        if snd.state.local is ACTIVE and snd.credit > 0:
            self.ids.append(snd.send_transfer(b"t%d" % len(self.ids), bytes(size)))

    @rule(index=st.integers(0, 1), echo=st.booleans())
    def peer_flow(self, index: int, echo: bool) -> None:
        _, rcv = self.links[index]
        if rcv.state.local is ACTIVE and rcv.state.remote is ACTIVE:
            rcv.flow(1000, echo=echo)
            self.pair.client.receive_data(self.pair.server.data_to_send(), 0.0)

    @rule(index=st.integers(0, 1), available=st.integers(0, 50))
    def available(self, index: int, available: int) -> None:
        snd, _ = self.links[index]
        if snd.state.local is ACTIVE:
            snd.set_available(available)

    @rule()
    def settle(self) -> None:
        snd, _ = self.links[0]
        if self.ids and snd.state.local is ACTIVE:
            snd.dispose(self.ids[0], self.ids[-1], state=ACCEPTED, settled=True)

    @rule()
    def window_opens(self) -> None:
        self.pair.pump()

    @rule(index=st.integers(0, 1))
    def detach(self, index: int) -> None:
        snd, _ = self.links[index]
        if snd.state.local is ACTIVE:
            snd.detach()

    @invariant()
    def count_is_the_queue(self) -> None:
        assert self.pair.client.output.held_bytes == held_in_queue(self.cs) >= 0
        flows = [item[2] for item in self.cs.blocked or () if item[0] == LINK_FLOW]
        assert len(flows) == len(set(map(id, flows)))
        # the peer never found a delivery-id out of sequence (a detach with transfers held)
        assert self.ss.state.local is ACTIVE and self.cs.state.remote is ACTIVE


TestHeldFrames = HeldFrames.TestCase
TestHeldFrames.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
