"""The handshake time-out: a peer that has not finished the protocol header, SASL and its open
within the listener's `handshake_timeout_s` is dropped and counted (management's listener
`handshakeTimeouts`); one that finished is not. Whole routers on memory streams and trio's
autojump clock (router.testing.memrouter), with the default 10 s time-out in virtual time;
management and metrics over real sockets with a short one."""

from __future__ import annotations

import struct

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
import trio.testing

from router.amqp.message import Message
from router.config.models import Listener, RouterConfig, RouterSection
from router.net.server import RouterServer
from router.testing.memrouter import MemNetwork, MemRouter

from .rawamqp import HEADER, OPEN, frame, read_until_closed
from .support.management import managed_router, management_config

TIMEOUT_S = 0.2  # over real sockets
MEM_TIMEOUT_S = 10.0  # in virtual time: the default
SASL_HEADER = b"AMQP\x03\x01\x00\x00"  # transport §5.2.1 / security §5.3.1
# sasl-init (security §5.3.3.2) with mechanism ANONYMOUS, in a SASL frame (type 1)
_SASL_INIT_BODY = b"\x00\x53\x41\xc0\x0c\x01\xa3\x09ANONYMOUS"
SASL_INIT = struct.pack(">IBBH", 8 + len(_SASL_INIT_BODY), 2, 1, 0) + _SASL_INIT_BODY


@pytest.fixture
async def router(mem_network: MemNetwork) -> MemRouter:
    config = RouterConfig(
        router=RouterSection(id="hs"),
        listeners=(Listener(host="127.0.0.1", port=0, handshake_timeout_s=MEM_TIMEOUT_S),),
    )
    return await mem_network.start(config)


def timeouts(router: MemRouter) -> int:
    (entity,) = router.agent.entities("listener")
    count: int = entity["handshakeTimeouts"]
    return count


STALLS = {
    "silent": b"",
    "header only": HEADER,
    "sasl header only": SASL_HEADER,
    "sasl done, no amqp header": SASL_HEADER + SASL_INIT,
    "half an open": HEADER + frame(OPEN)[:7],
}


@pytest.mark.parametrize("stall", list(STALLS), ids=list(STALLS))
async def test_a_peer_that_stalls_in_the_handshake_is_dropped_and_counted(
    autojump_clock: trio.testing.MockClock, router: MemRouter, stall: str
) -> None:
    stream = await router.open_stream()
    started = trio.current_time()
    if STALLS[stall]:
        await stream.send_all(STALLS[stall])
    await read_until_closed(stream, timeout_s=MEM_TIMEOUT_S * 2)  # the router hangs up ...
    assert MEM_TIMEOUT_S <= trio.current_time() - started < MEM_TIMEOUT_S + 1  # ... at the time-out
    await stream.aclose()
    assert timeouts(router) == 1
    with trio.fail_after(5):
        while router.server.stats()["connections"]:
            await trio.sleep(0.01)
    assert router.agent.entities("connection") == []


async def test_a_peer_that_finished_the_handshake_is_kept(autojump_clock: trio.testing.MockClock, router: MemRouter) -> None:
    async with router.connect() as client:
        receiver = await client.open_receiver("kept", credit=1)
        await trio.sleep(MEM_TIMEOUT_S * 2)  # past the handshake time-out: nothing to wait for
        sender = await client.open_sender("kept")
        with trio.fail_after(5):
            tracker = await sender.start_send(Message.value("still open"))
            receiver.accept(await receiver.receive())
            assert type(await tracker.wait()).__name__ == "Accepted"
    assert timeouts(router) == 0


async def test_many_stalled_peers_are_all_dropped_on_the_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    """Under trio's mock clock (autojump) the time-out is the configured 10 s, and the router
    holds no stalled connection after it (memory streams: no real time passes)."""
    server = RouterServer(RouterConfig(router=RouterSection(id="mock"), listeners=(Listener(port=0),)))
    listener = server.config.listeners[0]
    assert listener.handshake_timeout_s == 10.0  # the default
    peers = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        for _ in range(20):
            ours, theirs = trio.testing.memory_stream_pair()
            peers.append(ours)
            nursery.start_soon(server.serve_stream, theirs, listener)
        await peers[0].send_all(HEADER)  # one sends its header, the others nothing
        await trio.sleep(9.9)
        assert server.stats()["connections"] == 20
        await trio.sleep(0.2)
        assert server.stats()["connections"] == 0
        assert server.listener_counters(listener.name)["handshake_timeouts"] == 20
        server.shutdown()


async def test_handshake_timeouts_show_in_management_and_metrics() -> None:
    config = management_config()
    config = config.model_copy(update={"listeners": (Listener(name="amqp", host="127.0.0.1", port=0, handshake_timeout_s=TIMEOUT_S),)})
    async with managed_router(config) as router:
        stream = await trio.open_tcp_stream("127.0.0.1", router.amqp_port)
        await stream.send_all(HEADER)
        await read_until_closed(stream)
        await stream.aclose()
        listener = (await router.http("GET", "/management/listener/amqp")).json
        assert listener["handshakeTimeouts"] == 1 and listener["acceptFailures"] == 0
        assert listener["initialHandshakeTimeoutSeconds"] == TIMEOUT_S
        metrics = (await router.http("GET", "/metrics")).body.decode()
        samples = {(s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
        assert samples[("amqp_router_listener_handshake_timeouts_total", (("listener", "amqp"),))] == 1
        assert samples[("amqp_router_listener_accept_failures_total", (("listener", "amqp"),))] == 0
