"""Outgoing connections the router keeps up (connectors), redialled with a jittered backoff.

    connectors = Connectors(run_connection)     # run_connection(stream, connector): one connection
    connectors.serve(nursery)                   # dialling starts for those added before and after
    connectors.add(connector)                   # dial now, and again whenever the connection ends
    connectors.remove("to-r2")                  # stop dialling and drop its connection
    connectors.status("to-r2")                  # ConnectorStatus: state, attempts, last error

Owns: one task per connector that dials, hands the stream to `run_connection` and, when that
returns or the dial fails, waits before the next attempt. The wait doubles from the connector's
`reconnect_initial_s` up to `reconnect_max_s` and is jittered (half fixed, half random: "equal
jitter"), so that the routers of a mesh that lost a peer do not all redial it in the same
instant. A connection that stayed up for STABLE_S counts as a success and resets the backoff;
one the peer refuses at once (a wrong role, bad credentials) keeps backing off rather than
hammering the peer. A connector with an ssl_profile gets TLS from the `secure` hook right after
the dial, within the same time-out; a failed handshake is a failed attempt, its reason shown in
the status. Must not touch: what a connection does (the caller's `run_connection`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from ..config.models import Connector

log = logging.getLogger(__name__)

RunConnection = Callable[[trio.abc.Stream, Connector], Awaitable[None]]
# Opens the stream to (host, port): trio.open_tcp_stream, or a stand-in (router.testing.memrouter).
Dial = Callable[[str, int], Awaitable[trio.abc.Stream]]
# TLS on a dialled stream (the stream to use; router.net.tls.TlsRefused if the handshake fails).
Secure = Callable[[trio.abc.Stream, Connector], Awaitable[trio.abc.Stream]]

CONNECT_TIMEOUT_S = 10.0  # a dial that hangs (a black-holed address) counts as a failure
STABLE_S = 5.0  # a connection up this long resets the backoff


def backoff_delay(connector: Connector, failures: int, rng: random.Random) -> float:
    """The wait before the next dial after `failures` consecutive failures (>= 1)."""
    ceiling = min(connector.reconnect_max_s, connector.reconnect_initial_s * 2.0 ** min(failures - 1, 32))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass
class ConnectorStatus:
    """What management shows of a connector (the anchors' connectionStatus / connectionMsg)."""

    state: str = "CONNECTING"  # CONNECTING, SUCCESS (connected), FAILED (waiting to redial)
    attempts: int = 0
    failures: int = 0  # consecutive, for the backoff
    last_error: str = ""


@dataclass
class _Dialler:
    connector: Connector
    status: ConnectorStatus = field(default_factory=ConnectorStatus)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    started: bool = False
    stopping: bool = False


def _stopping(dialler: _Dialler) -> bool:
    return dialler.stopping


async def _open_tcp_stream(host: str, port: int) -> trio.abc.Stream:
    return await trio.open_tcp_stream(host, port)


class Connectors:
    def __init__(
        self, run_connection: RunConnection, *, rng: random.Random | None = None, secure: Secure | None = None,
        dial: Dial | None = None,
    ) -> None:
        self._run_connection = run_connection
        self._dial: Dial = dial or _open_tcp_stream
        self._secure = secure
        self._rng = rng or random.Random()
        self._diallers: dict[str, _Dialler] = {}
        self._nursery: trio.Nursery | None = None
        self._stopped = False

    def status(self, name: str) -> ConnectorStatus | None:
        dialler = self._diallers.get(name)
        return dialler.status if dialler is not None else None

    def add(self, connector: Connector) -> None:
        """Start keeping `connector` up (ValueError if one by that name exists)."""
        if connector.name in self._diallers:
            raise ValueError(f"connector {connector.name!r} exists")
        dialler = self._diallers[connector.name] = _Dialler(connector)
        if self._nursery is not None and not self._stopped:
            self._start(dialler)

    def remove(self, name: str) -> bool:
        """Stop dialling `name` and drop its connection (the peer sees the socket close and
        reroutes at once); False if there is no such connector."""
        dialler = self._diallers.pop(name, None)
        if dialler is None:
            return False
        dialler.scope.cancel()
        log.info("connector %s removed", name)
        return True

    def stop_dialling(self) -> None:
        """Dial no more (the router is stopping); connections that are up are left to close
        with the others, gracefully."""
        self._stopped = True
        for dialler in self._diallers.values():
            dialler.stopping = True

    def serve(self, nursery: trio.Nursery) -> None:
        """Dial every connector (and those added later) in tasks of `nursery`."""
        self._nursery = nursery
        for dialler in self._diallers.values():
            self._start(dialler)

    def _start(self, dialler: _Dialler) -> None:
        assert self._nursery is not None
        if not dialler.started:
            dialler.started = True
            self._nursery.start_soon(self._keep_up, dialler)

    async def _keep_up(self, dialler: _Dialler) -> None:
        connector, status = dialler.connector, dialler.status
        with dialler.scope:
            while not dialler.stopping:
                status.state = "CONNECTING"
                status.attempts += 1
                error = await self._once(connector, status)
                if _stopping(dialler):  # stopped while connected (a call: mypy keeps the loop's narrowing)
                    return
                if error is None:
                    status.failures = 0
                    log.info("connector %s: connection to %s:%d ended; redialling", connector.name, connector.host, connector.port)
                    continue
                status.failures += 1
                status.state, status.last_error = "FAILED", error
                delay = backoff_delay(connector, status.failures, self._rng)
                log.warning("connector %s: %s; retrying in %.1f s", connector.name, error, delay)
                await trio.sleep(delay)

    async def _once(self, connector: Connector, status: ConnectorStatus) -> str | None:
        """One dial and, if it connects, the connection's whole life. None when the connection
        was up long enough to count as a success, else what went wrong."""
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                stream: trio.abc.Stream = await self._dial(connector.host, connector.port)
        except (OSError, trio.TooSlowError) as exc:
            reason = "timed out" if isinstance(exc, trio.TooSlowError) else (exc.strerror or str(exc))
            return f"cannot connect to {connector.host}:{connector.port} ({reason})"
        if self._secure is not None and connector.ssl_profile is not None:
            from .tls import TlsRefused

            tcp = stream
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):  # a peer that stalls the TLS handshake
                    stream = await self._secure(tcp, connector)
            except (TlsRefused, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(tcp)
                reason = "the handshake timed out" if isinstance(exc, trio.TooSlowError) else str(exc) or type(exc).__name__
                return f"TLS with {connector.host}:{connector.port} failed ({reason})"
        status.state = "SUCCESS"
        log.info("connector %s: connected to %s:%d", connector.name, connector.host, connector.port)
        started = trio.current_time()
        try:
            await self._run_connection(stream, connector)
        except Exception:
            # The connection's own guard should have caught it: it must never end this
            # connector's task (nor the nursery that every connection shares).
            log.exception("connector %s: the connection failed", connector.name)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
        if trio.current_time() - started >= STABLE_S:
            return None
        return f"connection to {connector.host}:{connector.port} ended after {trio.current_time() - started:.1f} s"
