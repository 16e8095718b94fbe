"""A new connection's way in, up to the guard that runs it: TLS and the WebSocket upgrade on an
accepted stream, TLS on a dialled one, then its engine made and registered with the core.

    intake = ConnectionIntake(config, core, clock, tls_profiles, counters, guard)
    await intake.serve_stream(stream, listener)      # the listeners' handler
    await intake.serve_outgoing(stream, connector)   # the connectors' handler
    secured = await intake.secure_outgoing(stream, connector)

Owns: the handshake time-out before AMQP (TLS and the upgrade within it; it goes on to cover the
protocol header, SASL and open in the driver), refusing a connection before AMQP (counted,
logged, lingering so that an HTTP refusal reaches the peer), never serving plain AMQP on a TLS
listener, the engine of a connection (router.core.connections' new_engine, new_outgoing_engine,
with the configuration of the moment: `config()`) and the peer's address and TLS session the
core is told.
Must not touch: the connection once registered (router.net.guard), listening and dialling
(router.net.listeners, connectors), TLS and WebSocket themselves (tls.py, wsstream.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from ..amqp.connection import Connection
from ..config.models import Connector, Listener, RouterConfig
from ..core.connections import new_engine, new_outgoing_engine
from .corepump import Core
from .guard import ConnectionGuard
from .listeners import ListenerCounters
from .tls import TlsProfiles, TlsRefused, session_of, transport_of
from .tls import accept as tls_accept
from .tls import connect as tls_connect
from .wsstream import WebSocketRefused, WebSocketStream, linger_after_refusal
from .wsstream import accept as websocket_accept

log = logging.getLogger("router.net.server")  # the server's log, as before its parts had modules

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class ConnectionIntake:
    def __init__(
        self,
        config: Callable[[], RouterConfig],
        core: Core,
        clock: Callable[[], float],
        tls: TlsProfiles,
        counters: Callable[[str], ListenerCounters],
        guard: ConnectionGuard,
    ) -> None:
        """`config()`: the configuration new connections get (a reload changes its users);
        `counters(name)`: listener `name`'s refusal counters."""
        self.config = config
        self.core = core
        self.clock = clock
        self.tls = tls
        self.counters = counters
        self.guard = guard

    async def serve_stream(self, stream: trio.abc.Stream, listener: Listener) -> None:
        """Run one connection (accepted on `listener`) over `stream` until it is over. Never
        raises (but for cancellation): whatever the connection does costs it alone.

        On a listener with an ssl_profile the TLS handshake comes first, in this connection's
        task and within its handshake time-out (which goes on to cover the protocol header,
        SASL and open)."""
        counters = self.counters(listener.name)
        timeout_s = listener.handshake_timeout_s
        deadline = trio.current_time() + timeout_s if timeout_s else math.inf
        label = f"from {peer_name(stream)} on listener {listener.name}"
        initial, tls = b"", None
        profile = self.tls.get(listener.ssl_profile)
        if listener.ssl_profile is not None and profile is None:  # never plain on a TLS listener
            log.error("connection %s refused: ssl profile %r is not loaded", label, listener.ssl_profile)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            return
        if profile is not None:
            refusal = "no TLS within the handshake time-out"
            with trio.move_on_at(deadline) as scope:
                try:
                    stream, initial, tls = await tls_accept(stream, profile, listener)
                    refusal = ""
                except TlsRefused as exc:
                    refusal = str(exc)
                except _STREAM_ERRORS as exc:
                    refusal = f"the connection failed before TLS was up ({exc or type(exc).__name__})"
            if refusal:
                await _refuse(stream, label, refusal, counters, timed_out=scope.cancelled_caught)
                return
        if listener.websocket:
            # The HTTP upgrade, over TLS when the listener has a profile (wss), within the same
            # handshake time-out: a peer stalled mid-request is dropped like one stalled mid-TLS.
            refusal, answered = "no WebSocket upgrade within the handshake time-out", False
            with trio.move_on_at(deadline) as scope:
                try:
                    stream, initial = await websocket_accept(stream, listener, initial)
                    refusal = ""
                except WebSocketRefused as exc:
                    refusal, answered = str(exc), exc.answered
                    counters.upgrades_refused += answered
                except _STREAM_ERRORS as exc:
                    refusal = f"the connection failed during the WebSocket upgrade ({exc or type(exc).__name__})"
            if refusal:
                await _refuse(stream, label, refusal, counters, timed_out=scope.cancelled_caught, answered=answered)
                return

        if tls is not None and tls.user is None and listener.authenticate_peer and "EXTERNAL" in listener.sasl_mechanisms:
            # Otherwise the peer only sees a mechanism list without EXTERNAL (or an empty one).
            uid_format = profile.config.uid_format if profile is not None else "?"
            log.warning("connection %s: its certificate has none of the fields uid_format %r names: "
                        "SASL EXTERNAL is not offered to it", label, uid_format)  # fmt: skip

        def register() -> Connection:
            engine = new_engine(self.config(), listener, tls.user if tls is not None else None, tls=tls is not None)
            self.core.accept(engine, listener, host=peer_name(stream), tls=tls)
            return engine

        await self.guard.run(stream, register, listener, label, counters, initial=initial, deadline=deadline)

    async def secure_outgoing(self, stream: trio.abc.Stream, connector: Connector) -> trio.abc.Stream:
        """TLS on a connector's dialled stream (the Connectors call it when the connector has a profile)."""
        profile = self.tls.get(connector.ssl_profile)
        if profile is None:
            raise TlsRefused(f"no ssl profile named {connector.ssl_profile!r}")
        secured, _ = await tls_connect(stream, profile, connector)
        return secured

    async def serve_outgoing(self, stream: trio.abc.Stream, connector: Connector) -> None:
        """Run the connection a connector dialled over `stream` until it is over (never raises
        but for cancellation, as serve_stream)."""

        def register() -> Connection:
            engine = new_outgoing_engine(self.config(), connector)
            self.core.connect(engine, connector, self.clock(), host=peer_name(stream), tls=session_of(stream))
            return engine

        await self.guard.run(stream, register, connector, f"to {peer_name(stream)} by connector {connector.name}", None)


async def _refuse(
    stream: trio.abc.Stream, label: str, refusal: str, counters: ListenerCounters, *, timed_out: bool, answered: bool = False
) -> None:
    """A connection refused before AMQP (TLS or the WebSocket upgrade failed or timed out):
    counted, logged, closed (after the refusal's answer has had a moment to reach the peer)."""
    if timed_out:
        counters.handshake_timeouts += 1
    log.info("connection %s refused: %s", label, refusal)
    with trio.CancelScope(shield=True):
        if answered:
            await linger_after_refusal(stream)
        await trio.aclose_forcefully(stream)


def peer_name(stream: trio.abc.Stream) -> str:
    """The peer's `host:port` (under TLS and WebSocket too); the stream's type name when it has
    no socket (a memory stream)."""
    if isinstance(stream, WebSocketStream):
        stream = stream.transport_stream
    stream = transport_of(stream)
    if isinstance(stream, trio.SocketStream):
        try:
            host, port = stream.socket.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            pass
    return type(stream).__name__
