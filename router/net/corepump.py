"""The one way into the routing core from the network side: events in, touched connections out,
the core's timer.

    pump = CorePump(core, clock)
    pump.handle(engine, events)      # a driver's batch of events, then after_core()
    pump.after_core()                # after ANY call into the core (management's, reload's too)
    nursery.start_soon(pump.timer)   # ticks the core at its next deadline
    pump.forget(engine, conn_id)     # however a connection ended

Owns: the connections' drivers by engine (`drivers`: the connection registry the server's parts
share), flushing the writers of the engines the core touched, the readers paused by the core's
backpressure (asked again after every call, since only a call can free them), the core's timer
(woken only when a call moves its deadline earlier), the one monotonic clock every `now` given
to the core comes from, asking a driver to call back when its output drains while the core
holds frames for it (router.core.holding), and noticing when the deliveries in flight are gone while a graceful
stop waits for them (`drain_in_flight`).
Must not touch: sockets and streams (the drivers'), what a connection is (router.net.connections),
routing decisions (router.core).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import trio

from ..amqp.connection import Connection
from ..amqp.events import Event, TransferSink
from ..config.models import Connector, Listener
from ..core.router import RouterCore
from .driver import ConnectionDriver

log = logging.getLogger("router.net.server")  # the server's log, as before its parts had modules

TIMER_FAILURE_PAUSE_S = 0.1  # after the core's timer failed, before it is tried again


class Core(Protocol):
    """What the server needs from the routing core (router.core.router.RouterCore). `host` is
    the peer's address (`host:port`) and `tls` its TLS session (router.net.tls.TlsInfo, None
    when plain): management shows them."""

    @property
    def router_id(self) -> str: ...
    def accept(self, engine: Connection, listener: Listener, *, host: str, tls: Any) -> Any: ...
    def connect(self, engine: Connection, connector: Connector, now: float, *, host: str, tls: Any) -> Any: ...
    def handle(self, engine: Connection, events: list[Event], now: float) -> None: ...
    def take_touched(self) -> Iterable[Connection]: ...
    def tick(self, now: float) -> None: ...
    def next_deadline(self) -> float | None: ...
    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None: ...
    def read_paused(self, engine: Connection) -> bool: ...
    def forget(self, engine: Connection, now: float) -> None: ...
    def shutdown(self, now: float) -> None: ...


class PumpedDriver(Protocol):
    """What the pump does with a connection's driver (router.net.driver.ConnectionDriver)."""

    def flush(self) -> None: ...
    def expect_drain(self) -> bool: ...
    def abort(self) -> None: ...
    def resume_reading(self) -> None: ...


class CorePump:
    def __init__(self, core: Core, clock: Callable[[], float]) -> None:
        """`clock`: the monotonic clock every `now` given to the core comes from (trio's by
        default, so that tests may run on trio's mock clock)."""
        self.core = core
        # The router's core as its own (compiled) class: the calls every message makes go to it
        # natively, not by name as through the protocol (~300 instructions a call). Stand-in
        # cores of tests take the protocol's way.
        self._router: RouterCore | None = core if isinstance(core, RouterCore) else None
        # What the server's connections hand first frames to (a stand-in core of tests: none)
        self.sink: TransferSink | None = self._router
        self.clock = clock
        self.drivers: dict[Connection, Any] = {}  # a driver (PumpedDriver) per registered engine
        self.paused: set[PumpedDriver] = set()  # readers the core paused: asked again after each call
        # The timer sleeps until _timer_at (the clock's time) or until _timer_wake is set.
        self._timer_at = math.inf
        self._timer_wake = trio.Event()
        # While a graceful stop waits for the deliveries in flight: the core's count of them,
        # and the event that ends the wait (none left, or the wait was given up).
        self._in_flight: Callable[[], int] | None = None
        self.drained = trio.Event()
        # The engines whose frames the core holds (router.core.holding) until their output
        # drains: filled by the core, emptied here after each call (a stand-in core has none).
        self._held = self._router.held_output if self._router is not None else None
        self._releasing = False

    def handle(self, engine: Connection, events: list[Event]) -> None:
        """A driver's batch of events (all of one read) into the core, and what follows. If the
        core fails on them, the failure is this connection's (it propagates to its driver), but
        what the core queued for the others before it failed still goes out now."""
        try:
            router = self._router
            if router is not None:
                router.handle(engine, events, self.clock())
            else:
                self.core.handle(engine, events, self.clock())
        finally:
            self.after_core()

    def set_output_blocked(self, engine: Connection, blocked: bool) -> None:
        self.core.set_output_blocked(engine, blocked, self.clock())
        self.after_core()

    def pauses_reading(self, engine: Connection, driver: PumpedDriver) -> bool:
        """The core's backpressure: True if `engine`'s reader must wait (after_core asks it again).
        Asked before every read: the router core is called natively when it is one."""
        router = self._router
        if router.read_paused(engine) if router is not None else self.core.read_paused(engine):
            self.paused.add(driver)
            return True
        return False

    def after_core(self) -> None:
        """After any call into the core: flush what it queued, let paused readers look again,
        and move the timer if the core now needs it earlier."""
        drivers = self.drivers
        router = self._router
        # (the router core's list iterated natively; a stand-in's iterable by the protocol)
        touched = router.take_touched() if router is not None else list(self.core.take_touched())
        for engine in touched:
            driver = drivers.get(engine)
            if driver is not None:
                try:
                    # Written now when the socket takes it: no writer wake-up. (A driver of the
                    # server's, compiled, is called natively; stand-ins of tests by name.)
                    if isinstance(driver, ConnectionDriver):
                        driver.flush()
                    else:
                        driver.flush()
                except Exception:
                    # Its failure (the engine's output, or the core's output-blocked call) is
                    # that connection's, not the one whose call got here: end that one.
                    log.exception("a connection failed while flushing its output")
                    driver.abort()
        if self._held and not self._releasing:
            self._release_held()
        # The core's buffered bytes change only inside its calls, and every call ends here:
        # a paused reader is therefore always asked again after the change that may free it.
        if self.paused:
            paused, self.paused = self.paused, set()
            for driver in paused:
                driver.resume_reading()
        deadline = router.next_deadline() if router is not None else self.core.next_deadline()
        if deadline is not None and deadline < self._timer_at:
            self._timer_wake.set()
        if self._in_flight is not None and not self.drained.is_set() and not self._in_flight():
            self.drained.set()

    def _release_held(self) -> None:
        """The core holds frames for these engines until their output drains: each driver with
        bytes on their way calls back when they drain (set_output_blocked(False)); one that has
        written everything already gets the next frames now. One loop, not recursion: the core
        may hold frames again after each release."""
        held = self._held
        assert held is not None
        self._releasing = True
        try:
            while held:
                engine = held.pop()
                driver = self.drivers.get(engine)
                if driver is None or driver.expect_drain():
                    continue  # (gone: the core drops what it held when it forgets the connection)
                self.core.set_output_blocked(engine, False, self.clock())
                self.after_core()
        finally:
            self._releasing = False

    def unregister(self, engine: Connection) -> None:
        driver = self.drivers.pop(engine)
        self.paused.discard(driver)

    def forget(self, engine: Connection, conn_id: int) -> None:
        """However the connection ended, the core forgets it and releases what it held. Each
        step is guarded on its own: a failure in one must not skip the others or escape."""
        now = self.clock()
        try:
            # Normally the driver already fed the end of stream (the core saw TransportClosed);
            # after a cancellation or a failure it did not.
            engine.receive_data(b"", trio.current_time())
            events = engine.events()
            if events:
                self.core.handle(engine, events, now)
        except Exception:
            log.exception("connection %d: the core failed on its last events", conn_id)
        try:
            self.core.forget(engine, now)
        except Exception:
            log.exception("connection %d: the core failed to forget it", conn_id)
        try:
            self.after_core()
        except Exception:
            log.exception("connection %d: flushing after it closed failed", conn_id)
        try:
            # Its sessions, links and the core's records on them let go of each other: freed
            # by reference counting now, not left for the cyclic collector.
            engine.dismantle()
        except Exception:
            log.exception("connection %d: dismantling its engine failed", conn_id)

    async def drain_in_flight(self, until: float) -> None:
        """Quiesce the core (no new credit, no new links: RouterCore.quiesce) and wait until no
        delivery is in flight, so that consumers settle what they hold and its outcome reaches
        the sender, or until `until` (trio's clock): what is left is then released/modified by
        the closes as before. after_core sets `drained` when none is left (and run() sets it
        when cancelled: the wait ends at once)."""
        # A stand-in core (tests) may not drain: it is closed at once.
        quiesce = getattr(self.core, "quiesce", None)
        in_flight = getattr(self.core, "in_flight", None)
        if quiesce is None or in_flight is None:
            return
        try:
            quiesce(self.clock())
            self._in_flight = in_flight
            self.after_core()
            left = in_flight()
        except Exception:  # the closes follow all the same
            log.exception("the core failed to quiesce")
            return
        if not left:
            return
        log.info("shutting down: waiting for %d deliveries in flight", left)
        with trio.move_on_at(until):
            await self.drained.wait()
        if not self.drained.is_set():
            log.info("shutting down: %d deliveries still in flight at the drain deadline", in_flight())

    async def timer(self) -> None:
        """Tick the core at its next deadline.

        Woken by an event only when a call moved the deadline earlier than the one we sleep
        until (a later one costs a single early wake-up, after which we re-read it). Polling
        every 100 ms instead would wake an idle router ten times a second forever and make
        timers up to 100 ms late; an event per call would cost a task switch per batch.
        The deadline is in the pump's clock; the sleep is in trio's (the same by default).
        """
        while True:
            deadline = self.core.next_deadline()
            self._timer_at = math.inf if deadline is None else deadline
            self._timer_wake = trio.Event()
            with trio.move_on_after(max(0.0, self._timer_at - self.clock())) as sleep:
                await self._timer_wake.wait()
            if not sleep.cancelled_caught:
                continue  # woken: re-read the deadline
            try:
                self.core.tick(self.clock())
                self.after_core()
            except Exception:
                # A core bug must not stop the router's timers (nor end the router): log it,
                # and do not spin if the same deadline fails again at once.
                log.exception("the core's timer failed")
                await trio.sleep(TIMER_FAILURE_PAUSE_S)
