"""A connection's driver in the server: a ConnectionDriver (driver.py) whose callbacks go to the
core pump (corepump.py): the core's events, its backpressure on reading, output blocked, and the
handshake time-out counted and logged.

Owns: nothing beyond those callbacks. Compiled with the hot path (mypyc-modules.txt): it is
called on every read; the guard (guard.py) that makes it is not (mypyc cannot compile its
except*).
Must not touch: the stream, the core's state.
"""

from __future__ import annotations

import logging

import trio

from ..amqp.connection import Connection
from ..amqp.events import Event
from ..config.models import ConnectionSettings
from .corepump import CorePump
from .driver import ConnectionDriver
from .listeners import ListenerCounters
from .poller import Poller

log = logging.getLogger("router.net.server")  # the server's log, as before its parts had modules


class ServerDriver(ConnectionDriver):
    """A connection's driver in the server. Its callbacks are its own methods: a closure or a
    partial per callback cost ~1 KiB of every idle connection (bench/idlemem.py)."""

    __slots__ = ("pump", "conn_id", "counters", "timeout_s")

    def __init__(
        self, pump: CorePump, stream: trio.abc.Stream, engine: Connection, settings: ConnectionSettings,
        conn_id: int, counters: ListenerCounters | None, initial: bytes, open_deadline: float,
        poller: Poller | None = None,
    ) -> None:  # fmt: skip
        self.pump = pump
        # The core takes first frames as they are parsed (events.TransferSink): this driver
        # hands on every read's events, none but sunk frames included (_dispatch).
        engine.transfer_sink = pump.sink
        self.conn_id = conn_id
        self.counters = counters
        self.timeout_s = settings.handshake_timeout_s
        super().__init__(
            stream,
            engine,
            None,  # events and the pause predicate: the overridden hooks below
            write_high_water=settings.write_high_water,
            on_output_blocked=self._core_output_blocked,
            initial=initial,
            open_deadline=open_deadline,
            on_open_timeout=self._handshake_timed_out,
            poller=poller,
        )
        self.read_pause_unsent = settings.read_pause_unsent

    # The driver's hooks, overridden: called natively on every read (callbacks would be calls
    # through Python, and bound methods held by every connection).
    def _deliver(self, events: list[Event]) -> None:
        self.pump.handle(self.engine, events)

    def _owner_pauses(self) -> bool:
        return self.pump.pauses_reading(self.engine, self)

    def _core_output_blocked(self, blocked: bool) -> None:
        self.pump.set_output_blocked(self.engine, blocked)

    def _handshake_timed_out(self) -> None:
        """The driver drops the connection now (it closes the socket; the guard releases the rest)."""
        if self.counters is not None:
            self.counters.handshake_timeouts += 1
        log.info("connection %d: no open within the handshake time-out (%g s); dropping it", self.conn_id, self.timeout_s)
