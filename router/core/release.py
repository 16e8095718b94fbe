"""A connection's end, however it came: everything the core holds of it is released, and a
failure of the core in the middle of the connection's input leaves nothing behind either.

    ending = ConnectionEnd(connections, links, forwarder, table, bounds, mesh, autolinks,
                           link_routes, policy, touched)
    err = ending.links_gone(state, now, reattach=True)  # the steps of a close; the first failure returned
    ending.failed(state)                  # the core raised while handling this connection's input
    ending.release(state, now, reattach=True)  # its last word: never raises (forget, end of stream)
    (`reattach`: auto-links of a route container attach again elsewhere; not while the router stops)

Why a unit of its own. An exception out of RouterCore.handle (a bug a hostile peer can reach)
stops the batch where it is: a link half attached (listed at its address, not yet in its
connection's set), half detached (marked gone, still listed as a consumer), a consumer's
settlement taken out of its session's map but not yet relayed to the producer, the events after
the failing one never handled (a detach or end whose link or session the engine has already
released, so that the engine's sessions no longer list it). The network layer then ends the
connection and asks the core to forget it; the ordinary close would skip what it no longer
finds, and one failing step would skip all those after it.

Owns: the steps of a connection's end (its policy grant; every link it had, as the engine's
sessions list them and as the core's own records do; its auto-links, link routes and peer
router; the outcomes this gives other connections, written at once), each guarded so that one
failure is logged and the rest still run; the connections the core failed on (a set here, not a
field on every connection); and for those, a sweep of what the connection shares with others:
the address table's consumers, producers and waiting deliveries, and the deliveries other
connections have in flight through it, each told its outcome (modified with delivery-failed if
it was sent, as a consumer's loss always is). The sweep walks the whole table and every other
connection's unsettled deliveries: it runs only after a failure, never on an ordinary close.
Must not touch: what a close means for each kind of record (the units' own link_gone,
consumer_gone, producer_gone, peer_gone: this calls them again, they are idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..amqp.events import TransferReceived
from .delivery import Forward, SessionMaps
from .failures import DELIVERY_FAILED
from .links import InLink
from .mend import Mend

if TYPE_CHECKING:
    from ..amqp.connection import Connection
    from .attach import Links
    from .autolinks import AutoLinks
    from .bounds import Bounds
    from .connections import ConnState
    from .forwarding import Forwarder
    from .linkroute import LinkRoutes
    from .mesh import Mesh
    from .policy import PolicyUnit
    from .table import AddressTable
    from .touched import Touched

log = logging.getLogger("router.core")


class ConnectionEnd:
    """See the module docstring. Built by RouterCore with the units a connection's end touches."""

    def __init__(
        self, connections: dict[Connection, ConnState], links: Links, forwarder: Forwarder, table: AddressTable,
        bounds: Bounds, mesh: Mesh, autolinks: AutoLinks, link_routes: LinkRoutes, policy: PolicyUnit,
        touched: Touched,
    ) -> None:  # fmt: skip
        self.connections = connections
        self.links = links
        self.forwarder = forwarder
        self.table = table
        self.bounds = bounds
        self.mesh = mesh
        self.autolinks = autolinks
        self.link_routes = link_routes
        self.policy = policy
        self.touched = touched
        # Connections the core raised on, until released: their release sweeps (see the module
        # docstring).
        self.failed_conns: set[ConnState] = set()
        self.failures = 0  # connections the core failed on, ever (tests read it)
        self.mend = Mend(forwarder, bounds, table, connections, touched)

    # --- the steps ----------------------------------------------------------------------------

    def links_gone(self, state: ConnState, now: float, *, reattach: bool) -> BaseException | None:
        """Every link of the connection is gone (what was in flight on them is reported), and so
        are its grant, auto-links, link routes and peer router. Each step runs even when one
        before it failed; the first failure is returned (and the connection counts as failed)."""
        errors: list[BaseException] = []
        step = _Steps(state, errors)
        if state.policy is not None:
            step("its policy grant", self.policy.closed, state.policy)
        links = self.links
        # The engine's sessions list the links it still knows; the core's own sets list the ones
        # the engine may have released already (both sides detached, the core never told).
        for session in state.engine.sessions:
            for link in session.links:
                step("a link of its sessions", links.link_gone, link, now)
        for out in list(state.out_links):  # consumers first: their deliveries become outcomes
            step("a consumer link", links.link_gone, out.link, now)
        for inl in list(state.in_links):
            step("a producer link", links.link_gone, inl.link, now)
        for routed in list(state._routed or ()):
            step("a link-routed link", links.link_gone, routed.link, now)
        if state.role == "route-container":
            step("its auto-links", self._autolinks_gone, state, now, reattach)
        step("its link routes", self.link_routes.connection_gone, state)
        if state.peer is not None:
            step("its peer router", self.mesh.peer_gone, state, now)
        if errors:
            self.failed(state)
            return errors[0]
        return None

    def failed(self, state: ConnState) -> None:
        """The core raised while handling `state`'s input (or releasing it): its release will
        sweep for what the failure left half done."""
        if state not in self.failed_conns:
            self.failed_conns.add(state)
            self.failures += 1

    def cut_short(self, event: TransferReceived) -> None:
        """The core failed on `event`, a transfer of `state`'s: if it was the last frame of a
        delivery, the failure may have come after the delivery was marked whole (and no longer
        arriving) but before this frame was sent on or kept: forwarded as it is, its consumers
        would get a message with its end missing. Nothing tells it from a whole one, so it is
        aborted as its producer's end of a half-sent message is (transport §2.6.12): downstream
        streams end with an abort, a delivery still waiting is dropped. (The producer's
        connection is ending: it hears no outcome; the delivery is in doubt for it.) A frame
        with more to come leaves the delivery arriving, and the producer's end aborts it."""
        inl = event.link.context
        if type(inl) is not InLink or event.first or event.more or inl.streaming is not None:
            return
        fwd = _arriving(self, inl, event.delivery_id)
        if fwd is not None and not fwd.done:
            self.forwarder._aborted(fwd)

    def release(self, state: ConnState, now: float, *, reattach: bool) -> None:
        """The connection is over and out of the core's table: release what it still holds.
        Never raises (every failure is logged): the network layer's clean-up must finish."""
        errors: list[BaseException] = []
        step = _Steps(state, errors)
        failed = state in self.failed_conns
        if not state.closed or failed:
            state.closed = True
            self.links_gone(state, now, reattach=reattach)  # (logs its own failures)
        if failed or state in self.failed_conns:
            step("a sweep of the address table", self._sweep_table, state, now)
            step("a sweep of the deliveries in flight through it", self._sweep_sent, state)
            step("what the failure left half done for others", self.mend.run, state)
        step("its starved producers", self._forget_starved, state)
        step("the outcomes for other connections", self.forwarder.flush)
        self.touched.discard(state.engine)  # nothing more can be written to it
        self.failed_conns.discard(state)

    def _autolinks_gone(self, state: ConnState, now: float, reattach: bool) -> None:
        self.autolinks.connection_gone(state, now, reattach=reattach)

    def _forget_starved(self, state: ConnState) -> None:
        """Producers waiting for room in the budget (bounds.starved) hold their connection."""
        starved = self.bounds.starved
        if starved:
            for inl in [inl for inl in starved if inl.conn is state]:
                starved.discard(inl)

    # --- after a failure ------------------------------------------------------------------------

    def _sweep_table(self, state: ConnState, now: float) -> None:
        """Every address: consumers and producers of `state` that a half-done attach or detach
        left listed are gone now, and an entry the failure left unused (made for an attach that
        never finished) is dropped, as the ordinary rule drops it."""
        forwarder, table = self.forwarder, self.table
        for entry in list(table.entries.values()):
            for out in [out for out in entry.consumers if out.conn is state]:
                out.gone = True
                state.out_links.discard(out)
                forwarder.consumer_gone(out, now)
                self.bounds.gone(out)
            for inl in [inl for inl in entry.producers if inl.conn is state]:
                inl.gone = True
                state.in_links.discard(inl)
                forwarder.producer_gone(inl, now)
            # A consumer's end cut short may have left what waits here unrouted (no consumer
            # left: released) and its producers' credit as it was: both looked at again.
            if entry.pending:
                forwarder.reroute(entry)
            for inl in entry.producers:
                forwarder.credit_dirty(inl)
            if not entry.has_remote:
                table.discard_if_unused(entry)

    def _sweep_sent(self, state: ConnState) -> None:
        """Deliveries other connections sent us that went to a consumer of `state` and have no
        outcome yet: the consumer's settlement may have been taken from its session's map when
        the core failed, so nothing on `state` leads to them any more. Their producers hear
        modified (delivery-failed: they may resend), as for any consumer lost."""
        forwarder = self.forwarder
        for conn in list(self.connections.values()):
            if conn is state:
                continue
            for session in conn.engine.sessions:
                maps = session.context
                if not isinstance(maps, SessionMaps) or maps.inbound.empty:
                    continue
                for _, fwd in maps.inbound.items():
                    _fail_through(forwarder, fwd, state)


def _arriving(end: ConnectionEnd, inl: InLink, delivery_id: int) -> Forward | None:
    """The delivery `delivery_id` that `inl` brought, wherever it is now: in its session's map
    (unsettled), or (presettled too) waiting at an address or for a consumer's credit, or
    being sent to one."""
    maps = inl.link.session.context
    if isinstance(maps, SessionMaps):
        fwd = maps.inbound.get(delivery_id)
        if isinstance(fwd, Forward) and fwd.in_link is inl:
            return fwd
    found: list[Forward] = []
    for entry in end.table.entries.values():
        found.extend(entry.pending)
    for state in end.connections.values():
        for out in state.out_links:
            found.extend(i if isinstance(i, Forward) else i.forward for i in out.pending or ())
            if out.streaming is not None:
                record = out.streaming
                found.append(record if isinstance(record, Forward) else record.forward)
    for fwd in found:
        if fwd.in_link is inl and fwd.in_id == delivery_id:
            return fwd
    return None


def _fail_through(forwarder: Forwarder, fwd: Forward, state: ConnState) -> None:
    """`fwd`'s copy or delivery on a link of `state` gets its outcome, if it has none yet."""
    if fwd.done:
        return
    if fwd.copies is not None:
        for copy in fwd.copies:
            if not copy.done and copy.out.conn is state:  # sent: in doubt; never sent: released
                forwarder._copy_failed(copy, DELIVERY_FAILED if copy.out_id >= 0 else None)
    elif fwd.out is not None and fwd.out.conn is state:
        forwarder.relay_outcome(fwd, DELIVERY_FAILED)


class _Steps:
    """Run one step of a connection's end, logging (and keeping) its failure instead of raising."""

    __slots__ = ("state", "errors")

    def __init__(self, state: ConnState, errors: list[BaseException]) -> None:
        self.state = state
        self.errors = errors

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # a bug: logged, and the other steps still run
            log.exception("%r: releasing %s failed", self.state, what)
            self.errors.append(exc)

