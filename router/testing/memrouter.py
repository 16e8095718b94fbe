"""Whole routers (RouterServer: listeners, connectors, timers, drivers, management) on memory
streams, so that behaviour over time runs in virtual time on trio's autojump clock.

    async def test_idle_peer(mem_network):                  # tests/support/memrouter.py fixture
        router = await mem_network.start(config)           # a RouterServer, no socket
        async with router.connect() as client:             # router.net.client over memory
            ...
        await trio.sleep(3600)                              # an hour passes at once

    # or by hand, inside a test running on trio.testing.MockClock(autojump_threshold=0):
    async with mem_network_running() as network:
        a = await network.start(config_a)                   # listens on virtual ports
        b = await network.start(config_b_with_connector_to_a)   # dials a through the network

Owns: MemNetwork, a virtual network of listening "sockets" (a memory channel of accepted
streams per listener, keyed by host and port; port 0 gets the next free port from 40000) and
the dialler the routers' connectors use in it (connection refused where nothing listens), and
the router servers it runs. The routers are real RouterServers: only `bind` and `dial` differ
(RouterServer's hooks), so the listeners' accept loops, handshake time-outs, connectors'
backoff, idle time-outs, HELLOs and drains are the ones in production.

Why this works on the autojump clock, and what breaks it. trio's MockClock with
autojump_threshold=0 jumps to the next deadline only when every task is blocked on a trio
primitive. Everything here is a trio primitive: memory streams (trio.testing.memory_stream_pair)
and memory channels, and the server's one clock is trio's. What breaks it:
- threads (a Proton client, trio.to_thread, a name lookup of a host name in trio's resolver
  thread): while the thread works, the loop looks idle and the clock jumps, so time-outs fire
  before the thread's answer arrives. Use router.net.client (ours, on trio) over `connect()`;
  give connectors numeric hosts (they never reach a resolver here anyway).
- real sockets, and other processes: their bytes arrive in real time while virtual time
  jumps. Everything here is in memory; a test that needs a socket does not belong here.
- a loop that never blocks (polling with `trio.sleep(0)` or a checkpoint until something
  changes): time never moves and the test hangs. Poll with a real interval (`trio.sleep(0.01)`
  costs nothing in virtual time) or, better, await an event.
- waiting for something that never happens: a router's HELLOs and timers always have a next
  deadline, so the clock keeps jumping and the test never ends. Bound every wait with
  `trio.fail_after` (virtual seconds: cheap), and keep the MemNetwork's `deadline_s` (every
  router's run and the network are inside one fail_after) as the last resort.

What it does not model: memory streams (trio.testing.memory_stream_pair) buffer without bound,
so a writer never blocks and the server's write backpressure (output blocked at the high-water
mark) never engages; tests of backpressure, TLS and WebSocket byte paths, descriptors and
resets stay on sockets. (Lockstep streams would block writers, but a router whose reads are
paused then waits on a peer that waits on it, and under autojump that is a hang, not a
failure.) In this kit's measurements an hour of a two-router mesh's HELLOs takes about 2 s of
real time, so the network's deadline (two hours by default) ends a test that waits for
something that never comes in seconds, well before pytest's time-out.

Layering: test kit; imports router.net and router.config, nothing in router/ imports it.
"""

from __future__ import annotations

import errno
import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from router.config.models import RouterConfig
from router.net.client import Client, connect
from router.net.listeners import ListeningSocket
from router.net.server import RouterServer

FIRST_PORT = 40000
WILDCARD_HOSTS = ("", "0.0.0.0", "::")  # noqa: S104 - a virtual network: nothing is bound


class _BoundAddress:
    """What the listeners read of a bound socket (its address) and how they close it."""

    def __init__(self, host: str, port: int, close: Any) -> None:
        self._address = (host, port)
        self._close = close

    def getsockname(self) -> tuple[str, int]:
        return self._address

    def close(self) -> None:
        self._close()


class MemListener:
    """One listening 'socket' of the network: dialled streams arrive on a memory channel."""

    def __init__(self, network: MemNetwork, host: str, port: int) -> None:
        self.network = network
        self.host, self.port = host, port
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](math.inf)
        self.socket = _BoundAddress(host, port, self.close)
        self.closed = False

    def close(self) -> None:
        """Refuse new connections; an accept() waiting wakes with ClosedResourceError."""
        if not self.closed:
            self.closed = True
            self.network._unbind(self)
            self._receive.close()
            self._send.close()

    async def accept(self) -> trio.abc.Stream:
        return await self._receive.receive()

    def deliver(self, stream: trio.abc.Stream) -> None:
        self._send.send_nowait(stream)


class MemNetwork:
    """Listeners by (host, port), the dial that reaches them, and the routers started on it."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._listening: dict[tuple[str, int], MemListener] = {}
        self._ports = itertools.count(FIRST_PORT)
        self.routers: list[MemRouter] = []
        self.dials = 0  # connections attempted through the network (refused ones included)

    # --- what RouterServer's `bind` and `dial` hooks call ----------------------------------------

    def bind(self, host: str, port: int) -> list[ListeningSocket]:
        if port == 0:
            port = next(port for port in self._ports if (host, port) not in self._listening)
        if (host, port) in self._listening:
            raise OSError(errno.EADDRINUSE, f"address in use: {host}:{port}")
        listener = self._listening[(host, port)] = MemListener(self, host, port)
        return [listener]

    async def dial(self, host: str, port: int) -> trio.abc.Stream:
        """A stream to whatever listens on (host, port), or on a wildcard host with that port;
        ConnectionRefusedError where nothing does."""
        await trio.lowlevel.checkpoint()
        self.dials += 1
        listener = self._listening.get((host, port))
        if listener is None:
            listener = next((self._listening.get((wild, port)) for wild in WILDCARD_HOSTS if (wild, port) in self._listening), None)
        if listener is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"nothing listens on {host}:{port}")
        ours, theirs = trio.testing.memory_stream_pair()
        listener.deliver(theirs)
        return ours

    def _unbind(self, listener: MemListener) -> None:
        if self._listening.get((listener.host, listener.port)) is listener:
            del self._listening[(listener.host, listener.port)]

    # --- routers ---------------------------------------------------------------------------------

    async def start(self, config: RouterConfig, **server_args: Any) -> MemRouter:
        """A RouterServer for `config` running on this network (stopped with the network, or
        by `stop()`); `server_args` go to RouterServer (wall_clock, drain_s, core, agent)."""
        server = RouterServer(config, bind=self.bind, dial=self.dial, **server_args)
        await self._nursery.start(server.run)
        router = MemRouter(server, self)
        self.routers.append(router)
        return router

    async def stop_all(self) -> None:
        for router in self.routers:
            await router.stop()


class MemRouter:
    """A RouterServer on a MemNetwork, and clients for it."""

    def __init__(self, server: RouterServer, network: MemNetwork) -> None:
        self.server = server
        self.network = network

    @property
    def core(self) -> Any:
        return self.server.core

    @property
    def agent(self) -> Any:
        return self.server.agent

    def port(self, listener: str | None = None) -> int:
        """The virtual port of `listener` (by default the first one configured)."""
        ports = self.server.listener_ports()
        return ports[listener or self.server.config.listeners[0].name]

    async def open_stream(self, listener: str | None = None) -> trio.abc.Stream:
        """A raw connection to `listener` (bytes by hand: handshake and hostile-peer tests)."""
        return await self.network.dial("127.0.0.1", self.port(listener))

    @asynccontextmanager
    async def connect(self, listener: str | None = None, **client_args: Any) -> AsyncIterator[Client]:
        """router.net.client.connect() over a memory stream to `listener`; `client_args` as
        connect()'s (container_id, username, password, idle_timeout_s, ...)."""
        stream = await self.open_stream(listener)
        async with connect("127.0.0.1", self.port(listener), stream=stream, **client_args) as client:
            yield client

    async def stop(self) -> None:
        """Stop gracefully (as on SIGTERM) and wait until the server has stopped."""
        self.server.shutdown()
        await self.server.wait_stopped()


@asynccontextmanager
async def mem_network_running(deadline_s: float = 7200.0) -> AsyncIterator[MemNetwork]:
    """A MemNetwork whose routers run in a nursery of their own, all stopped on exit; the whole
    block fails with trio.TooSlowError after `deadline_s` (virtual seconds on the mock clock)."""
    with trio.fail_after(deadline_s):
        async with trio.open_nursery() as nursery:
            network = MemNetwork(nursery)
            try:
                yield network
            finally:
                with trio.CancelScope(shield=True):
                    with trio.move_on_after(60):
                        await network.stop_all()
                nursery.cancel_scope.cancel()
