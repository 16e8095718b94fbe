"""The connection engine against itself (two sans-IO engines back to back, EnginePair):
transfers, settlement and dispositions (transport §2.6.12-§2.6.14, §2.7.5), session windows
(transport §2.5.6) and serial numbers wrapping at 2**32 (transport §2.8.10).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

import pytest

from router.amqp import errors as E
from router.amqp.events import DispositionReceived, FlowReceived, RemoteBegin, RemoteDetach, RemoteEnd, TransferReceived
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Rejected
from router.amqp.performatives import (
    RCV_FIRST,
    RCV_SECOND,
    RECEIVER,
    SENDER,
    SND_SETTLED,
    SND_UNSETTLED,
    Disposition,
    Error,
    Flow,
    Transfer,
)
from router.amqp.session import Session

from router.testing.enginepair import EnginePair, attach_pair, bodies, connected_pair, of_type, wire_frames

from .support.engine_pairs import CLIENT, SERVER, client_config, sent, server_config


# --- transfers (transport §2.6.12-§2.6.14, §2.7.5) ---------------------------------------------


def test_transfer_fields_reach_the_receiver() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    delivery_id = snd.send_transfer(b"tag-1", b"payload", message_format=7)
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.link is rcv and t.delivery_id == delivery_id == 0
    assert t.delivery_tag == b"tag-1" and t.payload == b"payload" and t.message_format == 7
    assert t.first and not t.more and not t.aborted and not t.settled


def test_delivery_ids_are_per_session() -> None:
    pair, cs, ss = connected_pair()
    a, _ = attach_pair(pair, cs, ss, "a", credit=5)
    b, _ = attach_pair(pair, cs, ss, "b", credit=5)
    ids = [a.send_transfer(b"1", b""), b.send_transfer(b"2", b""), a.send_transfer(b"3", b"")]
    assert ids == [0, 1, 2]
    _, server_events = pair.pump()
    assert [t.delivery_id for t in of_type(server_events, TransferReceived)] == [0, 1, 2]


def test_multi_frame_delivery_with_more() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=2)
    d1 = snd.send_transfer(b"big", b"part1-", more=True)
    d2 = snd.send_transfer(b"ignored", b"part2-", more=True)
    d3 = snd.send_transfer(b"ignored", b"part3")
    assert d1 == d2 == d3 and snd.credit == 1
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert [t.more for t in parts] == [True, True, False]
    assert [t.first for t in parts] == [True, False, False]
    assert {t.delivery_id for t in parts} == {d1} and {t.delivery_tag for t in parts} == {b"big"}
    assert b"".join(t.payload for t in parts) == b"part1-part2-part3"
    assert rcv.credit == 1 and rcv.delivery_count == 1
    snd.send_transfer(b"next", b"x")
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.first and t.delivery_id == d1 + 1


@pytest.mark.parametrize("size", [0, 1, 400, 480, 481, 1000, 3000, 70000])
def test_payload_split_to_the_peers_max_frame_size(size: int) -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(max_frame_size=512))
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    payload = bytes(i % 251 for i in range(size))
    start = len(pair.wire_to_server)
    snd.send_transfer(b"t", payload)
    _, server_events = pair.pump()
    frames = [f for f in wire_frames(b"".join(pair.wire_to_server[start:])) if isinstance(f.body, Transfer)]
    assert all(f.size <= 512 for data in pair.wire_to_server for f in wire_frames(data))
    parts = of_type(server_events, TransferReceived)
    assert len(parts) == len(frames) >= 1
    assert [t.more for t in parts] == [True] * (len(parts) - 1) + [False]
    assert b"".join(t.payload for t in parts) == payload


def test_large_payload_from_the_server_to_a_small_frame_client() -> None:
    pair, cs, ss = connected_pair(client_config(max_frame_size=512), SERVER)
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=1)
    payload = bytes(range(256)) * 10
    snd.send_transfer(b"t", payload)
    client_events, _ = pair.pump()
    parts = of_type(client_events, TransferReceived)
    assert len(parts) > 5 and b"".join(t.payload for t in parts) == payload
    assert all(f.size <= 512 for data in pair.wire_to_client for f in wire_frames(data))


def test_aborted_transfer() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=2)
    snd.send_transfer(b"a", b"first half", more=True)
    snd.abort()
    with pytest.raises(E.LocalUsageError):
        snd.abort()
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert [t.aborted for t in parts] == [False, True]
    assert not parts[-1].more
    assert snd.credit == 1 and rcv.credit == 1  # an aborted delivery still used its credit
    snd.send_transfer(b"b", b"whole")
    _, server_events = pair.pump()
    (t,) = of_type(server_events, TransferReceived)
    assert t.first and t.payload == b"whole" and t.delivery_tag == b"b"


def test_detach_aborts_a_delivery_in_progress() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"a", b"part", more=True)
    snd.detach()
    _, server_events = pair.pump()
    parts = of_type(server_events, TransferReceived)
    assert parts[-1].aborted
    assert of_type(server_events, RemoteDetach)


def test_presettled_transfer() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"t", b"x", settled=True)
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived)[0].settled


def test_settled_on_a_later_frame_settles_the_delivery() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    snd.send_transfer(b"t", b"a", more=True)
    snd.send_transfer(b"t", b"b", settled=True)
    _, server_events = pair.pump()
    assert [t.settled for t in of_type(server_events, TransferReceived)] == [False, True]


def test_snd_settle_mode_settled_forces_presettled() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1, client_attach={"snd_settle_mode": SND_SETTLED})
    snd.send_transfer(b"t", b"x")
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived)[0].settled


def test_snd_settle_mode_unsettled_refuses_presettled() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1, client_attach={"snd_settle_mode": SND_UNSETTLED})
    with pytest.raises(E.LocalUsageError):
        snd.send_transfer(b"t", b"x", settled=True)
    assert snd.credit == 1


def test_unsettled_transfer_and_disposition() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    d = snd.send_transfer(b"t", b"x")
    pair.pump()
    rcv.dispose(d, state=ACCEPTED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert disp.session is cs and disp.role is RECEIVER
    assert disp.first == disp.last == d and disp.settled and isinstance(disp.state, Accepted)


def test_disposition_range() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(5)]
    pair.pump()
    rcv.dispose(ids[0], ids[-1], state=RELEASED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert (disp.first, disp.last) == (0, 4) and disp.state == RELEASED
    (wire,) = sent(pair, Disposition, to_server=False)
    assert wire.first == 0 and wire.last == 4 and wire.role is RECEIVER


def test_dispositions_both_ways_name_the_right_ids_past_the_first_256() -> None:
    """Ids past 255 in dispositions: the peer's (as receiver, from the top bytes the session
    keeps per 256 ids) and the session's own (as sender), interleaved, each stays right."""
    pair, cs, ss = connected_pair()
    out, into = attach_pair(pair, cs, ss, credit=700)  # client -> server
    _, back = attach_pair(pair, cs, ss, "back", client_sends=False, credit=700)  # server -> client
    for i in range(600):
        out.send_transfer(b"a%d" % i, b"x")
        back.send_transfer(b"b%d" % i, b"y")
    pair.pump()
    told_client: list[tuple[int, bool]] = []
    told_server: list[tuple[int, bool]] = []
    for d in range(0, 600, 7):  # one by one, alternating the two directions' ids
        into.dispose(d, state=ACCEPTED)  # the server as receiver: the client's ids
        back.dispose(599 - d, state=RELEASED)  # the server as sender: its own ids
        client_events, server_events = pair.pump()
        told_client += [(e.first, e.role) for e in of_type(client_events, DispositionReceived)]
        told_server += [(e.first, e.role) for e in of_type(server_events, DispositionReceived)]
    assert told_client == [x for d in range(0, 600, 7) for x in ((d, RECEIVER), (599 - d, SENDER))]
    assert told_server == []


def test_disposition_with_other_outcomes() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=1)
    d = snd.send_transfer(b"t", b"x")
    pair.pump()
    rejected = Rejected(error=Error(condition=E.DECODE_ERROR, description="bad message"))
    rcv.dispose(d, state=rejected)
    client_events, _ = pair.pump()
    assert of_type(client_events, DispositionReceived)[0].state == rejected


def test_rcv_settle_mode_second() -> None:
    pair, cs, ss = connected_pair()
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=1, client_attach={"rcv_settle_mode": RCV_SECOND})
    assert snd.rcv_settle_mode == RCV_SECOND
    d = snd.send_transfer(b"t", b"x")
    client_events, _ = pair.pump()
    assert of_type(client_events, TransferReceived)
    rcv.dispose(d, state=ACCEPTED, settled=False)  # the receiver settles second
    _, server_events = pair.pump()
    (first,) = of_type(server_events, DispositionReceived)
    assert not first.settled and first.role is RECEIVER
    snd.dispose(d, state=ACCEPTED, settled=True)  # the sender settles first...
    client_events, _ = pair.pump()
    (second,) = of_type(client_events, DispositionReceived)
    assert second.settled and second.role is SENDER
    rcv.dispose(d, state=ACCEPTED, settled=True)  # ... and the receiver settles last
    _, server_events = pair.pump()
    assert of_type(server_events, DispositionReceived)[0].settled


def test_rcv_settle_mode_first_by_default() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    assert snd.rcv_settle_mode == rcv.rcv_settle_mode == RCV_FIRST


# --- session windows (transport §2.5.6) ---------------------------------------------------------


def test_small_incoming_window_queues_transfers_until_the_window_reopens() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    assert cs.remote_incoming_window == 2
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(5)]
    assert cs.blocked_frames == 3  # two fit the peer's window
    assert snd.credit == 5  # credit is spent when the application sends, queued or not
    first_batch = pair.client.data_to_send()
    assert [t.delivery_id for t in bodies(first_batch, Transfer)] == ids[:2]
    pair.server.receive_data(first_batch, 0.0)
    assert [t.delivery_id for t in of_type(pair.server.events(), TransferReceived)] == ids[:2]
    # the receiver reopened its window (each time it fell to half): session flows, which
    # release the queue
    reply = pair.server.data_to_send()
    flow = bodies(reply, Flow)[-1]
    assert flow.handle is None and flow.next_incoming_id == 2 and flow.incoming_window == 2
    pair.client.receive_data(reply, 0.0)
    assert cs.blocked_frames == 1
    assert [t.delivery_id for t in bodies(pair.client.data_to_send(), Transfer)] == ids[2:4]


def test_window_resumes_in_order() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"m%d" % i) for i in range(7)]
    assert cs.blocked_frames == 5
    _, server_events = pair.pump()
    transfers = of_type(server_events, TransferReceived)
    assert [t.delivery_id for t in transfers] == ids
    assert [t.payload for t in transfers] == [b"m%d" % i for i in range(7)]
    assert cs.blocked_frames == 0
    # the receiver replenished its window with session flows
    session_flows = [f for f in sent(pair, Flow, to_server=False) if f.handle is None]
    assert session_flows and all(f.incoming_window == 2 for f in session_flows)


def test_window_counts_frames_not_deliveries() -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(max_frame_size=512), server_begin={"incoming_window": 4})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    snd.send_transfer(b"t", bytes(2000))  # five frames of at most 512 bytes
    assert cs.blocked_frames == 1
    _, server_events = pair.pump()
    assert b"".join(t.payload for t in of_type(server_events, TransferReceived)) == bytes(2000)
    assert cs.blocked_frames == 0


def test_link_flow_of_a_blocked_sender_counts_only_sent_deliveries() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(5):
        snd.send_transfer(b"%d" % i, b"x")
    snd.set_available(3)  # queued behind the transfers
    assert cs.blocked_frames == 4
    pair.pump()
    link_flows = [f for f in sent(pair, Flow) if f.handle is not None]
    assert link_flows[-1].delivery_count == 5 and link_flows[-1].available == 3
    assert rcv.delivery_count == 5 and rcv.available == 3 and rcv.credit == 5


def test_sender_disposition_waits_behind_blocked_transfers() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 2})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"x") for i in range(4)]
    snd.dispose(ids[0], ids[-1], state=ACCEPTED, settled=True)
    assert cs.blocked_frames == 3
    _, server_events = pair.pump()
    kinds = [type(e) for e in server_events if isinstance(e, (TransferReceived, DispositionReceived))]
    assert kinds == [TransferReceived] * 4 + [DispositionReceived]


def test_end_drops_blocked_frames() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 1})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(3):
        snd.send_transfer(b"%d" % i, b"x")
    assert cs.blocked_frames == 2
    cs.end()
    assert cs.blocked_frames == 0
    _, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 1
    assert of_type(server_events, RemoteEnd)


def test_session_flow_fields_follow_the_transfer_ids() -> None:
    pair, cs, ss = connected_pair(server_begin={"incoming_window": 4})
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    for i in range(6):
        snd.send_transfer(b"%d" % i, b"x")
    pair.pump()
    assert ss.next_incoming_id == cs.next_outgoing_id == 6
    flows = [f for f in sent(pair, Flow, to_server=False) if f.handle is None]
    # transport §2.5.6: each flow moves the window's right edge (next-incoming-id +
    # incoming-window) forward, never back
    edges = [f.next_incoming_id + f.incoming_window for f in flows]
    assert edges == sorted(edges) and len(set(edges)) == len(edges)
    assert all(f.incoming_window == 4 for f in flows)
    assert cs.remote_incoming_window == edges[-1] - 6


# --- serial numbers wrap at 2**32 (transport §2.8.10) ------------------------------------------


def test_delivery_count_wraps_around() -> None:
    start = 2**32 - 3
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": start})
    assert rcv.delivery_count == start
    rcv.flow(4)
    pair.pump()
    assert snd.credit == 4
    for i in range(4):
        snd.send_transfer(b"%d" % i, b"x")
    pair.pump()
    assert snd.delivery_count == rcv.delivery_count == 1 and rcv.credit == 0
    rcv.flow(5)
    pair.pump()
    assert snd.credit == 5  # (1 + 5) - 1 across the wrap
    rcv.flow(2, drain=True)
    pair.pump()
    snd.complete_drain()
    _, server_events = pair.pump()
    assert of_type(server_events, FlowReceived)[-1].drained
    assert rcv.delivery_count == snd.delivery_count == 3


def test_credit_granted_just_before_the_wrap() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, client_attach={"initial_delivery_count": 2**32 - 1})
    rcv.flow(3)
    pair.pump()
    assert snd.credit == 3
    snd.send_transfer(b"a", b"x")
    snd.send_transfer(b"b", b"x")
    # a grant from the receiver that saw none of them yet: (2**32-1 + 10) - 1 mod 2**32 = 8
    rcv.flow(10)
    pair.client.receive_data(pair.server.data_to_send(), 0.0)
    assert snd.credit == 8


def test_delivery_ids_and_transfer_ids_wrap_around() -> None:
    pair = EnginePair()
    pair.open()
    cs = Session(pair.client, None)
    cs.next_outgoing_id = 2**32 - 2  # the first transfer-id is ours to choose (begin)
    cs._next_delivery_id = 2**32 - 2  # so is the first delivery-id
    cs.begin()
    _, server_events = pair.pump()
    ss = of_type(server_events, RemoteBegin)[0].session
    ss.begin(incoming_window=2)
    pair.pump()
    assert ss.next_incoming_id == 2**32 - 2
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    ids = [snd.send_transfer(b"%d" % i, b"m%d" % i) for i in range(5)]
    assert ids == [2**32 - 2, 2**32 - 1, 0, 1, 2]
    _, server_events = pair.pump()
    transfers = of_type(server_events, TransferReceived)
    assert [t.delivery_id for t in transfers] == ids
    assert ss.next_incoming_id == cs.next_outgoing_id == 3
    assert cs.blocked_frames == 0
    rcv.dispose(ids[0], ids[-1], state=ACCEPTED)
    client_events, _ = pair.pump()
    (disp,) = of_type(client_events, DispositionReceived)
    assert (disp.first, disp.last) == (2**32 - 2, 2)
