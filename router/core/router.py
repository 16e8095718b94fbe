"""The routing core: a synchronous function of engine events (no I/O, no clock of its own).

    core = RouterCore(config)
    state = core.accept(engine, listener)       # a new connection's engine (router.core.connections)
    state = core.connect(engine, connector, now) # an engine from new_outgoing_engine: we open it
                                                 # (both take the peer's `host` and `tls` session too)
    core.handle(engine, engine.events(), now)    # now = monotonic seconds (the server's clock)
    for engine in core.take_touched(): wake its writer
    core.tick(now) at core.next_deadline()
    core.forget(engine, now)                     # the connection is over, however it ended
    core.quiesce(now)                            # a graceful stop begins: no new credit, no new links
    core.in_flight()                             # deliveries still unsettled for their senders
    core.shutdown(now)                           # close everything with amqp:connection:forced
    core.wall_time(now)                          # wall-clock seconds at monotonic `now`

Time: `now` is monotonic (a wall-clock step must neither kill neighbours nor stall timers).
What must be wall time (a message's absolute-expiry-time; its ttl counts from arrival, the mesh instance,
management timestamps) is converted through `wall_offset` (wall clock minus monotonic clock,
captured once at start by the network layer; 0 when `now` is wall time, as in harnesses).

Owns: the surface above, each call handed to the unit that owns it: the per-batch dispatch
(`handle`: transfers, dispositions and flows to the forwarder, every other event to the life
cycles), a failure in the middle of a batch (release.py sweeps after it), timers, output
blocked, in-process endpoints and the router's own messages. Building the units and wiring
them, what management reads straight off the core, the core as the units' ConnectionCloser
(reads paused included): its base, CoreUnits (coreunits.py).
The rest is the units': connection and session life cycles (lifecycle.py), what may come in and
what our open offers (admission.py: connection limit, router identities, policy), the graceful
stop (stop.py), the address table (table.py), Links (attach.py), forwarding and settlement
(forwarding.py and its layers), the bounds, the link routes, auto-links, a connection's release
(release.py) and the mesh (mesh.py). Each is built with only what it uses (ports.py names what
units know of each other); none holds the core.
The core calls engine commands directly; the network layer only flushes the engines it touched
(touched.py).
Must not touch: sockets, tasks, clocks (time comes in as `now`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from mypy_extensions import i64

from ..amqp import errors as E
from ..amqp import events as ev
from ..amqp.connection import Connection
from ..amqp.link import Link
from ..config.models import Connector, Listener
from .addressentry import LocalEndpoint
from .connections import ConnState
from .coreunits import CoreUnits
from .links import InLink, report_stalled
from .streamreclaim import give_back

# The event classes tested on every event (Final: C statics when compiled, where `ev.X` is an
# attribute lookup on the module per event: three per delivery).
_TRANSFER: Final = ev.TransferReceived
_DISPOSITION: Final = ev.DispositionReceived
_FLOW: Final = ev.FlowReceived
_WINDOW: Final = ev.WindowChanged


class RouterCore(CoreUnits):
    """The surface above; the units and their wiring are CoreUnits' (router.core.coreunits)."""

    # --- the surface the network layer uses -----------------------------------------------------

    def accept(self, engine: Connection, listener: Listener, *, host: str = "", tls: Any = None) -> ConnState:
        """Register a freshly accepted connection's engine. `host`: the peer's address, `tls`:
        its TLS session (router.net.tls.TlsInfo; None if plain), both for management."""
        return self.admission.accept(engine, listener, host, tls)

    def connect(self, engine: Connection, connector: Connector, now: float, *, host: str = "", tls: Any = None) -> ConnState:
        """Register the engine of a connection we open to another router (from
        connections.new_outgoing_engine) and send our open; the network layer flushes it.
        `host` and `tls` as for accept()."""
        return self.admission.connect(engine, connector, now, host, tls)

    def handle(self, engine: Connection, events: list[ev.Event], now: float) -> None:
        """Process one batch of events from `engine` (all of one read)."""
        state = self.connections.get(engine)
        if state is None:
            return
        self.touch(engine)
        if engine.finished:
            # The engine closed this connection while reading the batch (a violation after some
            # valid frames): nothing more may be written to it, so no delivery may pick it.
            state.output_blocked = True
        forwarder = self.forwarder
        forwarder.now = now
        mesh = self.mesh
        meshed = self.meshed
        if meshed and mesh.node is None:
            mesh.start(now)
        try:
            for event in events:
                t = type(event)
                if t is _TRANSFER:
                    state.last_delivery = now
                    forwarder.on_transfer(event, now)  # type: ignore[arg-type]
                elif t is _DISPOSITION:
                    forwarder.on_disposition(event)  # type: ignore[arg-type]
                elif t is _FLOW:
                    forwarder.on_flow(event, now)  # type: ignore[arg-type]
                elif t is _WINDOW:
                    forwarder.window_changed(event.session, now)  # type: ignore[union-attr]
                    self.link_routes.relay.window_changed(event.session)  # type: ignore[union-attr]
                else:
                    self.lifecycle.event(state, event, now)
            if meshed and (mesh.dirty or now >= mesh.deadline):
                mesh.service(now)
            forwarder.flush()
        except Exception:
            # A bug (one a hostile peer can reach): the failure is this connection's, and the
            # network layer ends it. Its release will look for what the batch left half done
            # (router.core.release); what others were told before the failure goes out now.
            # (`event`: the one being handled, or the last one if the failure came after them)
            self._failed(state, event if events else None)
            raise

    def first_frame(
        self, link: Link, delivery_id: i64, settled: bool, more: bool, message_format: i64,
        payload: bytes | memoryview, source: bytes, offset: i64, now: float,
    ) -> bool:  # fmt: skip
        """A producer's first frame, straight from the connection's frame loop (events.TransferSink,
        installed by the server's drivers): what handle() does with its TransferReceived. Frames
        of link routes and of the mesh's control links are declined (they stay events)."""
        inl = link.context
        if type(inl) is not InLink:
            return False
        state = inl.conn
        state.last_delivery = now
        forwarder = self.forwarder
        forwarder.now = now
        try:
            forwarder.first_frame(inl, delivery_id, settled, more, False, message_format, payload, source, offset, now)
        except Exception as exc:
            # As handle() on a failure: the release of the connection finds what this left half
            # done. Raised on as the core's failure, never as the peer's (the frame loop takes
            # a protocol or decode error for a bad frame).
            self._failed(state, ev.TransferReceived(
                link, delivery_id, b"", -1, settled, more, False, message_format, None, None, True, payload, source, offset,
            ))  # fmt: skip
            if isinstance(exc, (E.ProtocolError, E.DecodeError)):
                raise RuntimeError(f"the core failed on a transfer: {exc}") from exc
            raise
        return True

    def _failed(self, state: ConnState, event: ev.Event | None = None) -> None:
        self.ending.failed(state)
        if type(event) is ev.TransferReceived:
            try:
                self.ending.cut_short(event)
            except Exception:  # (the release sweeps what it can)
                pass
        try:
            self.forwarder.flush()
        except Exception:  # the release flushes again
            pass

    def wall_time(self, now: float) -> float:
        """The wall-clock time (seconds since the epoch) at monotonic `now`."""
        return now + self.wall_offset

    def forget(self, engine: Connection, now: float) -> None:
        """`engine`'s connection is over (closed, failed, timed out, reset, cancelled): release
        everything it held (links, deliveries reported upstream as released/modified, address
        table entries, the peer router) and drop it. Idempotent; unknown engines are ignored."""
        state = self.connections.pop(engine, None)
        if state is None:
            return
        self.forwarder.now = now
        self.ending.release(state, now, reattach=not self.admission.stopping)  # never raises

    def take_touched(self) -> list[Connection]:
        """The engines that may have output since the last call (the caller wakes their writers)."""
        return self.touched.take()

    def touch(self, engine: Connection) -> None:
        self.touched.touch(engine)

    def tick(self, now: float) -> None:
        self.forwarder.now = now
        self.forwarder.expire(now)
        if self.forwarder.held_links:
            for out in self.forwarder.stalled(now):
                self.links.detach_stalled(out, now)
                self.touched.touch(out.conn.engine)
        relay = self.link_routes.relay
        if relay.held_links:
            for routed in relay.stalled(now):
                self.link_routes.link_pairs.detach_stalled(routed, report_stalled(routed.link, routed.conn))
        if self.idle_streams.deadline <= now:  # grown streaming links idle long enough: given back
            for out in self.idle_streams.due(now):
                self.links.link_gone(out.link, now)
                give_back(out)
                self.touched.touch(out.conn.engine)
        if self.idle_routed.deadline <= now:  # routed sessions no pair used for a minute: ended
            for engine in self.link_routes.link_pairs.end_idle_sessions(now):
                self.touched.touch(engine)
        if self.autolinks.runs and not self.admission.stopping:
            self.autolinks.tick(now)
        if self.meshed:
            self.mesh.start(now)
            self.mesh.service(now)
        self.forwarder.flush()

    def next_deadline(self) -> float | None:
        deadline = self.forwarder.next_deadline()
        # Asked after every call into the core; the mesh (interpreted) has none when it is off.
        mesh = self.mesh.next_deadline() if self.meshed else None
        if mesh is not None and (deadline is None or mesh < deadline):
            deadline = mesh
        if self.forwarder.held_links:  # (only while streams are held for blocked consumers)
            deadline = _earlier(deadline, self.forwarder.stall_deadline())
        if self.link_routes.relay.held_links:  # (link-routed transfers held, likewise)
            deadline = _earlier(deadline, self.link_routes.relay.stall_deadline())
        idle = self.idle_streams.deadline
        if idle != math.inf:  # (only while streaming links grown for a burst are watched)
            deadline = _earlier(deadline, idle)
        idle = self.idle_routed.deadline
        if idle != math.inf:  # (only while there are routed sessions towards other routers)
            deadline = _earlier(deadline, idle)
        if self.autolinks.runs:  # (attaching again, or an attach the broker must answer)
            other = self.autolinks.next_deadline()
            if other is not None and (deadline is None or other < deadline):
                deadline = other
        return deadline

    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None:
        """The network layer says whether `engine`'s socket can take more bytes right now."""
        state = self.connections.get(engine)
        if state is None or state.output_blocked == blocked:
            return
        state.output_blocked = blocked
        if not blocked:
            # Highest band first, what its band links held included (router.core.holding).
            self.forwarder.release(state, now)
            self.forwarder.flush()

    def register_local_endpoint(self, address: str, endpoint: LocalEndpoint, subtree: bool = False) -> None:
        """Serve `address` in-process: every delivery to it goes to `endpoint` (see table.py);
        with `subtree`, deliveries to `<address>/...` too. Producers waiting for a destination
        get credit at once."""
        entry = self.table.get_or_create(address)
        if entry is None:
            raise ValueError(f"{address} is not an address of this router")
        entry.local = endpoint
        if subtree:
            self.table.serve_subtree(entry)
        for producer in entry.producers:
            self.forwarder.credit_dirty(producer)
        self.forwarder.flush()

    def send(self, to: str, payload: bytes, now: float, on_outcome: Callable[[Any], None] | None = None) -> bool:
        """Send a message from the router itself: presettled, or unsettled when `on_outcome` is
        given (called once with its final outcome, from within the core: Waiting.send_from_router);
        False if `to` has no destination."""
        self.forwarder.now = now
        sent = self.forwarder.send_from_router(to, payload, on_outcome)
        self.forwarder.flush()
        return sent

    def quiesce(self, now: float) -> None:
        """The first step of a graceful stop: nothing new comes in (router.core.stop)."""
        self.graceful_stop.quiesce(now)

    def in_flight(self) -> int:
        """Deliveries a graceful stop waits for (router.core.stop)."""
        return self.graceful_stop.in_flight()

    def shutdown(self, now: float) -> None:
        """Graceful stop: release what is in flight and close every connection (forced)."""
        self.graceful_stop.shutdown(now)


def _earlier(deadline: float | None, other: float | None) -> float | None:
    """The earlier of two deadlines (None and inf: none)."""
    if other is None or other == math.inf:
        return deadline
    return other if deadline is None or other < deadline else deadline
