"""Shutting a session's incoming window and opening it again (transport §2.5.6;
router/amqp/sessionout.py shut_window): what a router does to one priority band of a neighbour
(router/core/bandwindow.py). The peer hears a window of 0 and sends nothing more; what it sent
before it heard is still taken (no window violation); opened, it sends the rest. The sender's
side reports the change (events.WindowChanged) for the sessions that watch their window."""

from __future__ import annotations

from router.amqp.events import TransferReceived, WindowChanged
from router.amqp.performatives import Flow
from router.amqp.sessionout import shut_window
from router.testing.enginepair import attach_pair, bodies, connected_pair, of_type


def test_a_shut_window_is_announced_as_zero_and_stops_the_sender_until_it_opens() -> None:
    pair, cs, ss = connected_pair()
    cs.watch_window = True
    snd, rcv = attach_pair(pair, cs, ss, credit=100)
    pair.pump()
    pair.wire_to_server.clear()
    pair.wire_to_client.clear()

    shut_window(ss, True)
    client_events, _ = pair.pump()
    flows = bodies(b"".join(pair.wire_to_client), Flow)
    assert [f.incoming_window for f in flows] == [0]
    assert cs.remote_incoming_window <= 0
    assert [e.session for e in of_type(client_events, WindowChanged)] == [cs]

    for i in range(3):
        snd.send_transfer(b"%d" % i, b"body")
    _, server_events = pair.pump()
    assert of_type(server_events, TransferReceived) == []  # held by the sender for the window
    assert cs.blocked_frames == 3

    shut_window(ss, False)
    client_events, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 3
    assert [e.session for e in of_type(client_events, WindowChanged)] == [cs]
    assert cs.remote_incoming_window > 0 and cs.blocked is None


def test_transfers_sent_before_the_sender_heard_the_window_shut_are_taken() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=100)
    pair.pump()
    for i in range(5):
        snd.send_transfer(b"%d" % i, b"body")
    shut_window(ss, True)  # the five are already on their way
    _, server_events = pair.pump()
    assert len(of_type(server_events, TransferReceived)) == 5
    assert not pair.server.failed and not pair.client.failed


def test_every_flow_of_a_shut_session_announces_zero() -> None:
    """A link's flow carries the session's fields too (transport §2.7.4): a credit top-up on a
    shut session must not open the window by the way."""
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    pair.pump()
    shut_window(ss, True)
    rcv.flow(50)
    pair.pump()
    flows = bodies(b"".join(pair.wire_to_client), Flow)
    assert flows[-1].handle is not None and flows[-1].link_credit == 50
    assert flows[-1].incoming_window == 0
    assert cs.remote_incoming_window <= 0


def test_only_watched_sessions_report_their_window_and_only_when_it_changes() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=10)
    pair.pump()
    shut_window(ss, True)
    client_events, _ = pair.pump()
    assert of_type(client_events, WindowChanged) == []  # not watched: the engine holds for it
    cs.watch_window = True
    rcv.flow(20)  # still shut: nothing changed
    client_events, _ = pair.pump()
    assert of_type(client_events, WindowChanged) == []
    shut_window(ss, True)  # shut again: no new flow
    assert pair.server.data_to_send() == b""
