"""The connection engine against itself (two sans-IO engines back to back, EnginePair): open
and close (transport §2.4) and sessions (transport §2.5).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

import pytest

from router.amqp import errors as E
from router.amqp.events import RemoteBegin, RemoteClose, RemoteEnd, RemoteOpen, TransportClosed
from router.amqp.framing import frame
from router.amqp.messaging import ACCEPTED
from router.amqp.performatives import SENDER, Begin, Close, End, Error, Open
from router.amqp.session import Session

from router.testing.enginepair import EnginePair, attach_pair, begin_pair, connected_pair, of_type

from .support.engine_pairs import CLIENT, SERVER, client_config, sent, server_config


# --- open and close (transport §2.4) ----------------------------------------------------------


def test_open_exchanges_limits() -> None:
    pair = EnginePair(client_config(max_frame_size=4096, channel_max=7), server_config(max_frame_size=1024))
    pair.open(hostname="example.com")
    (server_open,) = of_type(pair.server_events, RemoteOpen)
    assert server_open.open.container_id == "client" and server_open.open.hostname == "example.com"
    assert pair.server.remote_max_frame_size == 4096 and pair.server.remote_channel_max == 7
    assert pair.client.remote_max_frame_size == 1024
    (client_open,) = of_type(pair.client_events, RemoteOpen)
    assert client_open.open.container_id == "server"


def test_open_twice_is_local_misuse() -> None:
    pair = EnginePair()
    pair.open()
    with pytest.raises(E.LocalUsageError):
        pair.client.open()


@pytest.mark.parametrize("first", ["client", "server"])
def test_close_either_side_first(first: str) -> None:
    pair = EnginePair()
    pair.open()
    closer, other = (pair.client, pair.server) if first == "client" else (pair.server, pair.client)
    closer.close()
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_close,) = of_type(other_events, RemoteClose)
    assert remote_close.error is None
    assert not closer.finished and not other.finished
    other.close()
    client_events, server_events = pair.pump()
    closer_events = client_events if first == "client" else server_events
    assert of_type(closer_events, RemoteClose)
    assert pair.client.finished and pair.server.finished
    pair.client.receive_data(b"", 1.0)
    assert pair.client.events() == [TransportClosed(clean=True)]


def test_simultaneous_close() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.server.close(Error(condition=E.CONNECTION_FORCED, description="shutting down"))
    client_events, server_events = pair.pump()
    assert of_type(server_events, RemoteClose)
    (close,) = of_type(client_events, RemoteClose)
    assert close.error is not None and close.error.condition == E.CONNECTION_FORCED
    assert pair.client.finished and pair.server.finished
    assert len(sent(pair, Close)) == 1 and len(sent(pair, Close, to_server=False)) == 1


def test_close_with_an_error() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close(Error(condition=E.NOT_ALLOWED, description="no"))
    _, server_events = pair.pump()
    (close,) = of_type(server_events, RemoteClose)
    assert close.error == Error(condition=E.NOT_ALLOWED, description="no")
    assert pair.server.remote_error == close.error


def test_close_before_open_sends_open_then_close() -> None:
    pair = EnginePair()
    pair.client.close()
    _, server_events = pair.pump()
    kinds = [type(b) for b in sent(pair, object)]
    assert kinds == [Open, Close]
    assert [type(e) for e in server_events] == [RemoteOpen, RemoteClose]


def test_server_refusing_a_connection_opens_then_closes() -> None:
    pair = EnginePair()
    pair.client.open()
    pair.pump()
    pair.server.close(Error(condition=E.UNAUTHORIZED_ACCESS))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteOpen, RemoteClose]
    assert [type(b) for b in sent(pair, object, to_server=False)] == [Open, Close]


def test_close_twice_is_a_no_op() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.client.close()
    pair.pump()
    assert len(sent(pair, Close)) == 1


def test_transport_closed_without_close_is_unclean() -> None:
    pair = EnginePair()
    pair.open()
    pair.server.receive_data(b"", 1.0)
    assert pair.server.events() == [TransportClosed(clean=False)]
    assert pair.server.finished


def test_nothing_is_processed_after_both_closes() -> None:
    pair = EnginePair()
    pair.open()
    pair.client.close()
    pair.pump()
    pair.server.close()
    pair.pump()
    pair.server.receive_data(frame(0, Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1)), 2.0)
    assert pair.server.events() == [] and pair.server.data_to_send() == b""


def test_nothing_is_written_after_our_close() -> None:
    """transport §2.4.3: the close must be the last frame written on a connection."""
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    rcv2, snd2 = attach_pair(pair, cs, ss, "other", client_sends=False, credit=5)
    snd.send_transfer(b"a", b"x", more=True)
    pair.pump()
    pair.client.close()
    before = len(pair.client.data_to_send())
    assert before > 0
    for command in (
        lambda: snd.send_transfer(b"a", b"y"),
        lambda: snd.abort(),
        lambda: snd.set_available(1),
        lambda: snd.detach(),
        lambda: rcv2.flow(3),
        lambda: rcv2.dispose(0, state=ACCEPTED),
        lambda: cs.attach_sender("late"),
        lambda: cs.end(),
        lambda: pair.client.begin_session(),
        lambda: Session(pair.client, None).begin(),
    ):
        with pytest.raises(E.LocalUsageError):
            command()
    assert pair.client.data_to_send() == b""
    assert snd.state.local == 1 and cs.state.local == 1  # refused commands changed nothing


def test_peer_frames_after_our_close_are_discarded_until_its_close() -> None:
    pair, cs, ss = connected_pair()
    rcv, snd = attach_pair(pair, cs, ss, client_sends=False, credit=5)
    pair.client.close()
    close = pair.client.data_to_send()
    # the server did not see the close yet: it keeps sending
    snd.send_transfer(b"late", b"x")
    snd.set_available(4)
    ss.disposition(SENDER, 0, state=ACCEPTED, settled=True)
    ss.end()
    to_client = pair.server.data_to_send()
    pair.client.receive_data(to_client, 0.0)
    assert pair.client.events() == []  # nothing reaches the application ...
    assert pair.client.data_to_send() == b""  # ... and nothing is answered
    pair.server.receive_data(close, 0.0)
    assert of_type(pair.server.events(), RemoteClose)
    pair.server.close()
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteClose]
    assert pair.client.finished


def test_link_commands_after_the_session_ended() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    cs.end()
    pair.client.data_to_send()
    for command in (
        lambda: snd.send_transfer(b"a", b"x"),
        lambda: snd.set_available(2),
        lambda: snd.complete_drain(),
        lambda: snd.detach(),
        lambda: snd.dispose(0, state=ACCEPTED),
    ):
        with pytest.raises(E.LocalUsageError):
            command()
    assert pair.client.data_to_send() == b""


def test_set_available_is_for_attached_senders() -> None:
    pair, cs, ss = connected_pair()
    snd, rcv = attach_pair(pair, cs, ss)
    with pytest.raises(E.LocalUsageError):
        rcv.set_available(1)
    snd.detach()
    with pytest.raises(E.LocalUsageError):
        snd.set_available(1)


def test_begin_before_open_is_local_misuse() -> None:
    pair = EnginePair()
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()


# --- sessions (transport §2.5) ------------------------------------------------------------------


def test_begin_and_answer() -> None:
    pair, cs, ss = connected_pair()
    assert cs.state.local == cs.state.remote == ss.state.local == ss.state.remote == 1
    (server_begin,) = of_type(pair.server_events, RemoteBegin)
    assert server_begin.begin.remote_channel is None  # the client began it
    (client_begin,) = of_type(pair.client_events, RemoteBegin)
    assert client_begin.session is cs  # the answer reaches the session that began
    assert client_begin.begin.remote_channel == cs.channel
    assert cs.remote_channel == ss.channel and ss.remote_channel == cs.channel
    assert pair.client.sessions == [cs] and pair.server.sessions == [ss]


def test_server_begins_a_session() -> None:
    pair = EnginePair()
    pair.open()
    ss = pair.server.begin_session()
    client_events, _ = pair.pump()
    (remote_begin,) = of_type(client_events, RemoteBegin)
    remote_begin.session.begin()
    _, server_events = pair.pump()
    assert of_type(server_events, RemoteBegin)[0].session is ss
    assert ss.state.remote == 1


@pytest.mark.parametrize("first", ["client", "server"])
def test_end_either_side_first(first: str) -> None:
    pair, cs, ss = connected_pair()
    ender, other = (cs, ss) if first == "client" else (ss, cs)
    ender.end()
    client_events, server_events = pair.pump()
    other_events = server_events if first == "client" else client_events
    (remote_end,) = of_type(other_events, RemoteEnd)
    assert remote_end.session is other and remote_end.error is None
    other.end()
    client_events, server_events = pair.pump()
    ender_events = client_events if first == "client" else server_events
    assert of_type(ender_events, RemoteEnd)[0].session is ender
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_end_with_an_error() -> None:
    pair, cs, ss = connected_pair()
    ss.end(Error(condition=E.RESOURCE_LIMIT_EXCEEDED, description="too many"))
    client_events, _ = pair.pump()
    (end,) = of_type(client_events, RemoteEnd)
    assert end.error is not None and end.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert cs.remote_error == end.error


def test_simultaneous_end() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    ss.end()
    client_events, server_events = pair.pump()
    assert of_type(client_events, RemoteEnd) and of_type(server_events, RemoteEnd)
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_refusing_a_session_begins_then_ends() -> None:
    pair = EnginePair()
    pair.open()
    cs = pair.client.begin_session()
    _, server_events = pair.pump()
    ss = of_type(server_events, RemoteBegin)[0].session
    ss.end(Error(condition=E.RESOURCE_LIMIT_EXCEEDED))
    client_events, _ = pair.pump()
    assert [type(e) for e in client_events] == [RemoteBegin, RemoteEnd]
    assert [type(b) for b in sent(pair, object, to_server=False)] == [Open, Begin, End]
    cs.end()
    pair.pump()
    assert pair.client.sessions == [] and pair.server.sessions == []


def test_end_twice_is_local_misuse() -> None:
    pair, cs, ss = connected_pair()
    cs.end()
    with pytest.raises(E.LocalUsageError):
        cs.end()


def test_channel_allocation_reuses_freed_channels() -> None:
    pair = EnginePair()
    pair.open()
    sessions = [begin_pair(pair)[0] for _ in range(3)]
    assert [s.channel for s in sessions] == [0, 1, 2]
    server_channels = {s.channel for s in pair.server.sessions}
    assert server_channels == {0, 1, 2}
    middle = sessions[1]
    middle.end()
    _, server_events = pair.pump()
    of_type(server_events, RemoteEnd)[0].session.end()
    pair.pump()
    again, _ = begin_pair(pair)
    assert again.channel == 1


def test_channel_max_limits_sessions() -> None:
    pair = EnginePair(CLIENT, server_config(channel_max=1))
    pair.open()
    begin_pair(pair)
    begin_pair(pair)
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()
    assert len(pair.client.sessions) == 2


def test_local_channel_max_limits_our_own_sessions() -> None:
    pair = EnginePair(client_config(channel_max=0), SERVER)
    pair.open()
    begin_pair(pair)
    with pytest.raises(E.LocalUsageError):
        pair.client.begin_session()
