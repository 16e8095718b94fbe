"""The connection engine against itself (two sans-IO engines back to back, EnginePair): the
idle time-out and heartbeats (transport §2.4.5).

Nothing here does I/O or sleeps: bytes move by `pump()`, time is the `now` argument.
"""

from __future__ import annotations

import pytest

from router.amqp import errors as E
from router.amqp.events import ProtocolViolation, RemoteClose, RemoteOpen
from router.amqp.framing import EMPTY_FRAME
from router.amqp.performatives import Close

from router.testing.enginepair import EnginePair, attach_pair, bodies, connected_pair, of_type, wire_frames

from .support.engine_pairs import CLIENT, client_config, server_config


# --- idle time-out (transport §2.4.5) ----------------------------------------------------------


def idle_pair(client_idle: float | None = None, server_idle: float | None = None) -> EnginePair:
    pair = EnginePair(client_config(idle_timeout_s=client_idle), server_config(idle_timeout_s=server_idle))
    pair.open()
    return pair


def advance(pair: EnginePair, now: float) -> None:
    pair.now = now
    pair.client.tick(now)
    pair.server.tick(now)
    pair.pump()


def test_no_timers_without_idle_timeouts() -> None:
    pair = idle_pair()
    assert pair.client.next_deadline() is None and pair.server.next_deadline() is None
    advance(pair, 1e9)
    assert pair.client.data_to_send() == b"" and pair.server.data_to_send() == b""
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)
    assert not pair.wire_to_server[3:] and not pair.wire_to_client[3:]


def test_open_advertises_half_the_local_idle_timeout() -> None:
    pair = idle_pair(server_idle=10.0)
    (open_,) = of_type(pair.client_events, RemoteOpen)
    assert open_.open.idle_time_out == 5000
    assert pair.client.remote_idle_timeout_s == 5.0


def test_heartbeat_sent_when_half_the_peers_timeout_passes_idle() -> None:
    pair = idle_pair(server_idle=10.0)
    # the client must send something every 5 s / 2 after it last sent
    assert pair.client.next_deadline() == pytest.approx(2.5)
    assert pair.server.next_deadline() == pytest.approx(10.0)  # its own threshold
    pair.client.tick(2.4)
    assert pair.client.data_to_send() == b""
    pair.client.tick(2.5)
    assert pair.client.data_to_send() == EMPTY_FRAME
    assert pair.client.next_deadline() == pytest.approx(5.0)
    pair.server.receive_data(EMPTY_FRAME, 2.5)
    assert pair.server.events() == []  # an empty frame means nothing but "alive"
    assert pair.server.next_deadline() == pytest.approx(12.5)


def test_no_heartbeat_when_other_frames_were_sent() -> None:
    pair, cs, ss = connected_pair(CLIENT, server_config(idle_timeout_s=10.0))
    snd, rcv = attach_pair(pair, cs, ss, credit=5)
    pair.now = 2.0
    pair.client.tick(2.0)
    snd.send_transfer(b"t", b"x")
    pair.pump()
    assert pair.client.next_deadline() == pytest.approx(4.5)
    pair.client.tick(4.0)
    assert pair.client.data_to_send() == b""


def test_heartbeats_keep_the_connection_alive() -> None:
    pair = idle_pair(client_idle=3.0, server_idle=4.0)
    now = 0.0
    while now < 60.0:
        deadline = min(d for d in (pair.client.next_deadline(), pair.server.next_deadline()) if d is not None)
        assert deadline > now
        now = deadline
        advance(pair, now)
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)
    assert not of_type(pair.client_events + pair.server_events, RemoteClose)
    heartbeats = [f for data in pair.wire_to_server for f in wire_frames(data) if f.body is None]
    assert len(heartbeats) >= 60 / 1.0 - 1  # every 2 s / 2


def test_local_idle_timeout_closes_with_resource_limit_exceeded() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.tick(9.99)
    assert pair.server.data_to_send() == b""
    pair.server.tick(10.0)
    (violation,) = of_type(pair.server.events(), ProtocolViolation)
    assert violation.condition == E.RESOURCE_LIMIT_EXCEEDED and violation.scope == "connection"
    (close,) = bodies(pair.server.data_to_send(), Close)
    assert close.error is not None and close.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert pair.server.next_deadline() is None
    pair.server.tick(100.0)
    assert pair.server.data_to_send() == b""


def test_idle_timeout_is_measured_from_the_last_frame_received() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.receive_data(EMPTY_FRAME, 8.0)
    pair.server.tick(17.9)
    assert pair.server.data_to_send() == b""
    assert pair.server.next_deadline() == pytest.approx(18.0)
    pair.server.tick(18.0)
    assert bodies(pair.server.data_to_send(), Close)


def test_no_heartbeat_after_close() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.client.close()
    pair.client.data_to_send()
    assert pair.client.next_deadline() is None
    pair.client.tick(100.0)
    assert pair.client.data_to_send() == b""


def test_client_closed_by_the_idle_server_sees_the_condition() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.now = 10.0
    pair.server.tick(10.0)
    client_events, _ = pair.pump()
    (close,) = of_type(client_events, RemoteClose)
    assert close.error is not None and close.error.condition == E.RESOURCE_LIMIT_EXCEEDED


def test_no_timers_after_both_closes() -> None:
    pair = idle_pair(client_idle=4.0, server_idle=10.0)
    pair.client.close()
    pair.pump()
    pair.server.close()
    pair.pump()
    assert pair.client.finished and pair.server.finished
    assert pair.client.next_deadline() is None and pair.server.next_deadline() is None
    advance(pair, 1000.0)
    assert not of_type(pair.client_events + pair.server_events, ProtocolViolation)


def test_idle_timeout_while_waiting_for_the_peers_close() -> None:
    pair = idle_pair(server_idle=10.0)
    pair.server.close()
    (close,) = bodies(pair.server.data_to_send(), Close)  # the client never answers
    assert close.error is None
    assert pair.server.next_deadline() == pytest.approx(10.0)
    pair.server.tick(10.0)
    (violation,) = of_type(pair.server.events(), ProtocolViolation)
    assert violation.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert pair.server.finished  # give up: the transport may be closed
    assert pair.server.data_to_send() == b""  # our close was the last frame
