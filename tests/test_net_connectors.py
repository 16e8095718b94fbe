"""Connectors: dialling, redialling with a jittered exponential backoff, removal, status.

The connection itself is a stand-in here (the routing core's side of an outgoing connection is
tested with the mesh); what is checked is the keep-up loop against real loopback sockets.
"""

from __future__ import annotations

import random

import pytest
import trio

from router.config.models import Connector
from router.net.connectors import Connectors, backoff_delay

FAST = {"reconnect_initial_s": 0.01, "reconnect_max_s": 0.05}


def _connector(port: int, **extra: object) -> Connector:
    return Connector(name="to-peer", host="127.0.0.1", port=port, **{**FAST, **extra})  # type: ignore[arg-type]


def test_backoff_doubles_up_to_the_ceiling_with_equal_jitter() -> None:
    connector = Connector(name="c", host="h", port=1, reconnect_initial_s=1.0, reconnect_max_s=8.0)
    rng = random.Random(7)
    for failures, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (500, 8.0)):
        delays = [backoff_delay(connector, failures, rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), failures
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not fixed


def test_connector_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="reconnect_max_s"):
        Connector(name="c", host="h", port=1, reconnect_initial_s=5, reconnect_max_s=1)
    with pytest.raises(ValueError, match="sasl_password"):
        Connector(name="c", host="h", port=1, sasl_username="u")


async def _free_port() -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port: int = listeners[0].socket.getsockname()[1]
    for listener in listeners:
        await listener.aclose()
    return port


async def test_redials_until_the_peer_listens_then_runs_the_connection() -> None:
    port = await _free_port()
    connected = trio.Event()
    seen: list[Connector] = []

    async def run_connection(stream: trio.SocketStream, connector: Connector) -> None:
        seen.append(connector)
        connected.set()
        await stream.aclose()

    connectors = Connectors(run_connection, rng=random.Random(1))
    connector = _connector(port)
    async with trio.open_nursery() as nursery:
        connectors.add(connector)
        connectors.serve(nursery)
        with trio.fail_after(5):
            while (status := connectors.status("to-peer")) is None or status.failures < 3:
                await trio.sleep(0.01)
        assert status.state in ("FAILED", "CONNECTING") and "cannot connect" in status.last_error
        # The peer comes up: the next dial connects and hands the stream over.
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        async with trio.open_nursery() as peer:
            peer.start_soon(trio.serve_listeners, lambda s: s.aclose(), listeners)
            with trio.fail_after(5):
                await connected.wait()
            assert seen[0] is connector
            assert connectors.remove("to-peer") and connectors.status("to-peer") is None
            assert not connectors.remove("to-peer")
            peer.cancel_scope.cancel()


async def test_a_connection_that_ends_at_once_keeps_backing_off() -> None:
    """A peer that accepts and drops at once (e.g. refuses our role) is not hammered."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    dials = 0

    async def run_connection(stream: trio.SocketStream, connector: Connector) -> None:
        nonlocal dials
        dials += 1
        await stream.aclose()

    connectors = Connectors(run_connection)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, lambda s: s.aclose(), listeners)
        connectors.add(_connector(port))
        connectors.serve(nursery)
        with trio.fail_after(5):
            while dials < 4:
                await trio.sleep(0.005)
        status = connectors.status("to-peer")
        assert status is not None and status.failures >= 3 and "ended after" in status.last_error
        nursery.cancel_scope.cancel()


async def test_added_while_serving_and_stop_dialling() -> None:
    port = await _free_port()
    connectors = Connectors(lambda stream, connector: stream.aclose())
    async with trio.open_nursery() as nursery:
        connectors.serve(nursery)
        connectors.add(_connector(port))
        with pytest.raises(ValueError, match="exists"):
            connectors.add(_connector(port))
        with trio.fail_after(5):
            while (status := connectors.status("to-peer")) is None or status.attempts < 2:
                await trio.sleep(0.005)
        connectors.stop_dialling()
        attempts = status.attempts
        # No more dials: the loop ends at its next wake-up.
        await trio.sleep(0.2)
        assert status.attempts <= attempts + 1
        connectors.add(Connector(name="late", host="127.0.0.1", port=port, **FAST))  # type: ignore[arg-type]
        await trio.sleep(0.05)
        late = connectors.status("late")
        assert late is not None and late.attempts == 0  # added after the stop: never dialled
        nursery.cancel_scope.cancel()
