"""Forwarding: every delivery that arrives goes to a destination, waits (bounded) for consumer
credit, or is refused at once. Cut-through: frames go out as they arrive.

The Forwarder is one object built in layers, each class deriving from the one before and each
module owning one responsibility:
  credit.py      producer credit windows; the flush at the end of a batch
  settlement.py  outcome relay and settlement both ways
  failures.py    failures reported to the producer (released, delivery-failed), aborts
  sending.py     anycast choices, paths to other routers, sending on a consumer link
  holding.py     band links' frames held while an inter-router connection's output is blocked
  multicast.py   copies of a multicast delivery
  fallback.py    deliveries with no destination diverted to their address's fallback destinations
  waiting.py     deliveries waiting for credit, in-process endpoints, links going away
  streaming.py   later frames of a delivery (cut-through), aborts, refusals
  forwarding.py  (this module) arriving frames: a delivery's first
A lower layer calls what a higher one defines through a stub that raises NotImplementedError.

Owns: reading a delivery's first frame only as deep as routing needs (router.amqp.peek), the
reasons to refuse it (no address: rejected precondition-failed; oversize: rejected
message-size-exceeded; undecodable: rejected decode-error; no destination or expired: released,
or dropped when presettled, unless the address has fallback destinations (fallback.py); the
refusal itself is streaming.py's), the expiry a delivery gets from its ttl or
absolute-expiry-time, stripping router annotations clients must not set, and handing later
frames to streaming.py. Transfers on link-routed links go to the relay
(router.core.linkrelay) untouched.
Collaborators (given by RouterCore): the address table, Bounds, the mesh, Touched, the router id,
the wall offset, the message size limit.
Must not touch: outcome bookkeeping (settlement.py), attach handling (attach.py), the topology,\nlater frames once handed on (streaming.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.events import TransferReceived
from ..amqp.messaging import RELEASED, Rejected
from ..amqp.peek import RoutingView, peek_at
from ..amqp.performatives import Error
from . import annotate, annotparse, remote
from .addressentry import AddressEntry
from .delivery import Forward, Payload, maps_of
from .linkrelay import RoutedLink, own_settle_mode
from .links import InLink
from .streaming import Streaming
from .table import NOWHERE, UNAVAILABLE, AddressTable

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched

# A client's delivery to an address that is `distribution: unavailable` (the anchors' answer).
NOT_AVAILABLE: Final = Rejected(
    error=Error(condition=E.NOT_FOUND, description="Deliveries cannot be sent to an unavailable address"))


class Forwarder(Streaming):
    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, *, router_id: str,
                 wall_offset: float, max_message_size: int | None) -> None:  # fmt: skip
        """`wall_offset`: wall-clock seconds minus `now` (RouterCore's)."""
        super().__init__(table, bounds, mesh, touched, router_id, max_message_size)
        self.wall_offset = wall_offset

    # --- arriving frames ------------------------------------------------------------------------

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        inl = event.link.context
        if type(inl) is not InLink:
            if type(inl) is RoutedLink:  # link-routed: relayed as it is (router.core.linkrelay)
                self.relay.on_transfer(event, now)
            else:
                self.mesh.on_transfer(event, now)  # a control message between routers
            return
        # A transfer's own rcv-settle-mode first settles its delivery with its outcome where the
        # link says second (transport §2.7.5; the engine refused any other difference). Such a
        # transfer never takes RouterCore.first_frame's straight path.
        settles_first = own_settle_mode(event) is not None
        if event.first:
            self.first_frame(
                inl, event.delivery_id, event.settled, event.more, event.aborted, event.message_format,
                event.payload, event.source, event.offset, now,
            )  # fmt: skip
            if settles_first:  # (a delivery the router holds unsettled: an outcome told already is settled)
                fwd = maps_of(inl.link.session).inbound.get(event.delivery_id)
                if fwd is not None:
                    self.asked_first(fwd)
        elif inl.discarding:
            inl.discarding = event.more
        elif inl.streaming is not None:
            if settles_first:
                self.asked_first(inl.streaming)
            self._next_frame(inl, inl.streaming, event)

    def first_frame(
        self, inl: InLink, delivery_id: i64, settled: bool, more: bool, aborted: bool, message_format: i64,
        payload: Payload, source: bytes, offset: i64, now: float,
    ) -> None:  # fmt: skip
        """A delivery's first frame on producer link `inl` (TransferReceived's fields: from
        on_transfer, or straight from the connection through RouterCore.first_frame)."""
        inl.delivered += 1
        if inl.link.credit == 0 and inl.zero_credit_since is None:
            inl.zero_credit_since = now  # the producer used its last credit (in this batch)
        if aborted:
            return
        size: i64 = len(payload)
        limit = self.max_message_size
        # Sizes come from the frame: the engine may have read the whole batch already, so its
        # link counters may describe a later delivery.
        if limit and size > limit:
            self._refuse(inl, delivery_id, settled, more, E.MESSAGE_SIZE_EXCEEDED, f"message larger than {limit} bytes")
            return
        entry = inl.entry
        if inl.policy is not None:  # a client's link under policy (router.core.grant)
            refusal = inl.policy.check(bytes(payload), entry is None)
            if refusal is not None:
                self._refuse(inl, delivery_id, settled, more, refusal.condition, refusal.description or "")
                return
        try:
            view: RoutingView | None = peek_at(source, offset, offset + size, entry is None)
        except DecodeError as exc:  # malformed, or a first frame cut before the end of its properties
            if entry is None or not more:
                self._refuse(inl, delivery_id, settled, more, E.DECODE_ERROR, f"malformed message: {exc.description}")
                return
            view = None  # a first frame cut inside the properties: route by the link alone
        meta = None
        if entry is None:
            assert view is not None
            to = view.to
            if inl.peer is not None:  # from another router: routed by its annotations
                try:
                    # (from an edge router, `seen` drops ingress and trace: the delivery enters
                    # the mesh here; `came_from` still stops an echo)
                    meta = annotparse.parse(payload, view, inl.peer, inl.seen)
                except DecodeError as exc:
                    self._refuse(inl, delivery_id, settled, more, E.DECODE_ERROR, f"malformed router annotations: {exc.description}")
                    return
                to = meta.to
            if not to:
                self._refuse(inl, delivery_id, settled, more, E.PRECONDITION_FAILED,
                             "routing failure: no address (properties.to) on an anonymous link")  # fmt: skip
                return
            entry = self._lookup(inl, to)
        fwd = Forward(inl, delivery_id, settled, payload, size, not more,
                      entry if entry is not None else NOWHERE, message_format)  # fmt: skip
        if self.flow_on:
            self.flow_arrived(inl, fwd, size, now, meta.flow_trace if meta is not None else None)
        if fwd.size > inl.size_watch and not more:  # a large message: credit by bytes (bounds.py)
            self.bounds.observe(inl, fwd.size)
        inl.inflight += 1
        inl.held += 1
        fwd.holds_slot = True
        if not settled:
            maps_of(inl.link.session).inbound.put(delivery_id, fwd)
        else:
            inl.presettled += 1
            fwd.entry.presettled += 1
        if more:
            inl.streaming = fwd
        if meta is not None:
            fwd.meta = meta
            if remote.looped(self.mesh, meta, self.paths):
                self.mesh.dropped_loop += 1
                self.unroutable(fwd)
                return
        diverted = False
        if entry is None or not entry.has_destination:
            # To its fallback destinations instead, if its rule gives it some (fallback.py): a
            # local flag, so that deliveries with a destination pay for no lookup.
            readdressable = view is not None or meta is not None
            if entry is None or not entry.fallback_enabled or not self._divert(fwd, readdressable):
                self.unroutable(fwd, NOT_AVAILABLE if entry is UNAVAILABLE and inl.peer is None else RELEASED)
                return
            entry.deliveries_ingress += 1  # (the address's; the fallback's below)
            entry, diverted = fwd.entry, True
        entry.deliveries_ingress += 1
        if view is not None:
            if view.absolute_expiry_ms is not None or view.ttl_ms:  # most messages have neither
                expiry = _expiry(view, now, self.wall_offset)
                if expiry <= now:
                    entry.expired += 1
                    self.unroutable(fwd)
                    return
                fwd.expiry = expiry
            if view.annotations_span is not None and inl.peer is None:
                try:  # peek checked the section's bounds; its entries are read only here
                    if self.flow_on and fwd.hop is None:  # a client may ask for hop records (x-opt-router-trace)
                        fwd.hop = annotparse.client_trace(payload, view, self.new_trace_id)
                    if not inl.conn.strip_in:  # a router-aware client's annotations are the router's
                        address = inl.address
                        meta = fwd.meta = annotparse.kept_from_client(payload, view, address or view.to, address is not None)
                    if meta is None:
                        stripped, view = annotate.strip_client(payload, view)
                        fwd.first = stripped
                except DecodeError as exc:  # a malformed entry: the delivery is rejected, nothing else
                    inl.rejected += 1
                    self.unroutable(fwd, Rejected(error=Error(
                        condition=E.DECODE_ERROR, description=f"malformed message annotations: {exc.description}")))
                    return
            fwd.view = view
            if meta is None and entry.has_remote:  # it may leave this router: the address travels
                address = inl.address
                fwd.meta = annotate.for_client_delivery(view, address or view.to, address is not None)
        if diverted:
            self._readdress(fwd)  # it travels as a delivery to the fallback address
        self._route(fwd)

    def _lookup(self, inl: InLink, to: str) -> AddressEntry | None:
        """The entry of `to` for a delivery on `inl`, an anonymous or inter-router link: the
        last delivery's while the address and the table are the same (an entry only, never an
        edge's uplink entry or UNAVAILABLE: what leads to those can change without the table's
        version)."""
        table = self.table
        if inl.looked_up_version == table.version and inl.looked_up_to == to:
            return inl.looked_up
        entry = table.lookup(to)
        if entry is not None and entry is not UNAVAILABLE and entry is not table.uplink:
            inl.looked_up_to, inl.looked_up, inl.looked_up_version = to, entry, table.version
        return entry


def _expiry(view: RoutingView, now: float, wall_offset: float) -> float:
    """The `now` (monotonic) at which the message expires (messaging §3.2.1 ttl, §3.2.4
    absolute-expiry-time): it has one of them. absolute-expiry-time is wall-clock milliseconds:
    `wall_offset` (wall minus monotonic) converts it. The ttl counts from the message's arrival
    here, `now`: messaging §3.2.1, "a message expiration time will be computed based on the time
    of arrival at an intermediary". Never from the producer's creation-time (§3.2.4 gives it no
    part in expiry): a producer whose clock is behind this router's by more than the ttl would
    have every message expire on arrival (found with Azure's AMQP stack, which sends both)."""
    expiry = None
    if view.absolute_expiry_ms is not None:
        expiry = view.absolute_expiry_ms / 1000 - wall_offset
    if view.ttl_ms:
        by_ttl = now + view.ttl_ms / 1000
        expiry = by_ttl if expiry is None else min(expiry, by_ttl)
    assert expiry is not None
    return expiry
