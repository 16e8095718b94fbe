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
  waiting.py     deliveries waiting for credit, in-process endpoints, links going away
  forwarding.py  (this module) arriving frames
A lower layer calls what a higher one defines through a stub that raises NotImplementedError.

Owns: reading a delivery's first frame only as deep as routing needs (router.amqp.peek),
refusals (no address: rejected precondition-failed; oversize: rejected message-size-exceeded;
undecodable: rejected decode-error; no destination or expired: released, or dropped when
presettled), the expiry a delivery gets from its ttl or absolute-expiry-time, stripping router
annotations clients must not set, streaming later frames to where the first went (cut-through),
and aborts. Transfers on link-routed links go to the relay (router.core.linkrelay) untouched.
Collaborators (given by RouterCore): the address table, Bounds, the mesh, Touched, the router id,
the wall offset, the message size limit.
Must not touch: outcome bookkeeping (settlement.py), attach handling (attach.py), the topology.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.events import TransferReceived
from ..amqp.messaging import RELEASED, Rejected
from ..amqp.peek import RoutingView, peek_at
from ..amqp.performatives import RECEIVER, SND_SETTLED, Error
from . import annotate, annotparse, remote
from .addressentry import AddressEntry
from .delivery import Copy, Forward, Payload, forget_inbound, maps_of
from .linkrelay import RoutedLink
from .links import InLink, OutLink, alive
from .table import NOWHERE, UNAVAILABLE, AddressTable
from .waiting import Waiting

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched

LOCAL_MESSAGE_LIMIT: Final = 1 << 20  # an in-process endpoint (management) gets requests up to 1 MiB
# A client's delivery to an address that is `distribution: unavailable` (the anchors' answer).
NOT_AVAILABLE: Final = Rejected(
    error=Error(condition=E.NOT_FOUND, description="Deliveries cannot be sent to an unavailable address"))


class Forwarder(Waiting):
    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, *, router_id: str,
                 wall_offset: float, max_message_size: int | None) -> None:  # fmt: skip
        """`wall_offset`: wall-clock seconds minus `now` (RouterCore's)."""
        super().__init__(table, bounds, mesh, touched, router_id)
        self.wall_offset = wall_offset
        self.max_message_size = max_message_size

    # --- arriving frames ------------------------------------------------------------------------

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        inl = event.link.context
        if type(inl) is not InLink:
            if type(inl) is RoutedLink:  # link-routed: relayed as it is (router.core.linkrelay)
                self.relay.on_transfer(event)
            else:
                self.mesh.on_transfer(event, now)  # a control message between routers
            return
        if event.first:
            self.first_frame(
                inl, event.delivery_id, event.settled, event.more, event.aborted, event.message_format,
                event.payload, event.source, event.offset, now,
            )  # fmt: skip
        elif inl.discarding:
            inl.discarding = event.more
        elif inl.streaming is not None:
            self._next_frame(inl, inl.streaming, event)

    def _refuse(
        self, inl: InLink, delivery_id: int, settled: bool, more: bool, condition: str, description: str
    ) -> None:  # fmt: skip
        inl.rejected += 1
        if inl.entry is not None:
            inl.entry.rejected += 1
        inl.discarding = more
        self.credit_dirty(inl)
        if not settled:
            state = Rejected(error=Error(condition=condition, description=description))
            self.dispose(inl.link.session, RECEIVER, delivery_id, state, True)

    def first_frame(
        self, inl: InLink, delivery_id: int, settled: bool, more: bool, aborted: bool, message_format: int,
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
        if entry is None or not entry.has_destination:
            self.unroutable(fwd, NOT_AVAILABLE if entry is UNAVAILABLE and inl.peer is None else RELEASED)
            return
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
        self._route(fwd)

    def _lookup(self, inl: InLink, to: str) -> AddressEntry | None:
        """The entry of `to` for a delivery on `inl`, an anonymous or inter-router link: the
        last delivery's while the address and the table are the same (an entry only, never an
        edge's fallback or UNAVAILABLE: what leads to those can change without the table's
        version)."""
        table = self.table
        if inl.looked_up_version == table.version and inl.looked_up_to == to:
            return inl.looked_up
        entry = table.lookup(to)
        if entry is not None and entry is not UNAVAILABLE and entry is not table.fallback:
            inl.looked_up_to, inl.looked_up, inl.looked_up_version = to, entry, table.version
        return entry

    def _next_frame(self, inl: InLink, fwd: Forward, event: TransferReceived) -> None:
        fwd.arrived += len(event.payload)  # sizes shape the producer's credit (bounds.py)
        if self.flow_on:
            self.flow_more_bytes(inl, fwd, len(event.payload))
        if not event.more:
            inl.streaming = None
            fwd.complete = True
            if not event.aborted:
                self.bounds.observe(inl, fwd.arrived)
        elif fwd.arrived > inl.size_watch:
            self.bounds.growing(inl, fwd.arrived)
        if fwd.done:
            return  # its destination went away: the rest has nowhere to go
        if event.aborted:
            self._aborted(fwd)
            return
        limit = self.max_message_size
        if limit and fwd.arrived > limit:
            # Too big after all: abort what went downstream, reject it upstream.
            self._aborted(fwd)
            inl.streaming = None
            self._refuse(inl, event.delivery_id, event.settled, event.more, E.MESSAGE_SIZE_EXCEEDED, f"message larger than {limit} bytes")
            return
        payload = event.payload
        if fwd.copies is not None:
            for copy in fwd.copies:
                if copy.out.streaming is copy and alive(copy.out.link):
                    self._stream(copy.out, payload, fwd, copy)
            if fwd.first is not None:  # kept only while a copy still waits for credit
                fwd.add_frame(payload)
                if not any(c.sent_frames == 0 and not c.done for c in fwd.copies):
                    fwd.drop_frames()
        elif fwd.out is not None:
            out = fwd.out
            if alive(out.link):
                self._stream(out, payload, fwd, fwd)
        elif fwd.entry.local is not None and fwd.first is not None:  # for an in-process endpoint
            fwd.add_frame(payload)
            if fwd.arrived > LOCAL_MESSAGE_LIMIT:
                self._aborted(fwd)
                inl.streaming = None
                inl.discarding = event.more
                self._refuse(inl, event.delivery_id, event.settled, event.more, E.MESSAGE_SIZE_EXCEEDED,
                             f"requests to {fwd.entry.address} are limited to {LOCAL_MESSAGE_LIMIT} bytes")  # fmt: skip
            elif fwd.complete:
                self._deliver_local(fwd)
        elif fwd.first is not None and fwd.waiting:  # still waiting for a consumer
            fwd.add_frame(bytes(payload) if type(payload) is memoryview else payload)
            fwd.size += len(payload)
            bounds = self.bounds
            bounds.hold(inl.conn, len(payload))
            if bounds.over(inl.conn, 0):  # it grew past a byte bound while waiting: released
                bounds.released_over_budget += 1
                self._wait_bytes(fwd, -1)  # (it leaves the queue it waits in lazily: done)
                self.unroutable(fwd)

    def _stream(self, out: OutLink, payload: Payload, fwd: Forward, record: Forward | Copy) -> None:
        """The next frame of `record` (`fwd` or a copy of it) on `out`, ending it if the last."""
        if out.conn.output_blocked and out.band >= 0:
            # A band link of a blocked connection: held until the output drains, when higher
            # bands go first (holding.py). (Frames it holds always mean a blocked connection.)
            self.hold(out, payload, fwd, fwd.complete)
            return
        out.link.send_transfer(b"", payload, settled=self._presettled_out(fwd, out),
                               more=not fwd.complete, message_format=fwd.message_format)  # fmt: skip
        self.touched.touch(out.conn.engine)
        if fwd.complete:
            self._stream_done(out, record)

    def _stream_done(self, out: OutLink, record: Forward | Copy) -> None:
        out.streaming = None
        fwd = record.forward if type(record) is Copy else record
        assert isinstance(fwd, Forward)
        if fwd.presettled:
            if type(record) is Copy:
                record.done = True
            self._presettled_sent(fwd)
        elif out.link.snd_settle_mode == SND_SETTLED:
            self._settled_on_send(record)
        elif type(record) is Forward and out.neighbour is None:
            self.handed_over(fwd)
        self.consumer_ready(out)

    def _aborted(self, fwd: Forward) -> None:
        """The producer aborted a streaming delivery: abort it downstream too (transport §2.6.12)."""
        for record in fwd.copies if fwd.copies is not None else [fwd]:
            out = record.out
            if out is not None and out.streaming is record:
                self.abort_out(out, record.out_id)
        if fwd.out is None and fwd.copies is None:
            self._wait_bytes(fwd, -1)  # it was waiting for credit (removed from the queue lazily)
        if fwd.copies is not None:
            for copy in fwd.copies:
                copy.done = True
            fwd.copies.clear()  # no cycle left between the Forward and its copies (settlement.py)
        fwd.done = True
        fwd.drop_frames()
        forget_inbound(fwd)
        self._release_window(fwd)

def _expiry(view: RoutingView, now: float, wall_offset: float) -> float:
    """The `now` (monotonic) at which the message expires (messaging §3.2.1 ttl, §3.2.4
    absolute-expiry-time): it has one of them. The message's times are wall-clock milliseconds:
    `wall_offset` (wall minus monotonic) converts them."""
    expiry = None
    if view.absolute_expiry_ms is not None:
        expiry = view.absolute_expiry_ms / 1000 - wall_offset
    if view.ttl_ms:
        start = view.creation_time_ms / 1000 - wall_offset if view.creation_time_ms else now
        by_ttl = start + view.ttl_ms / 1000
        expiry = by_ttl if expiry is None else min(expiry, by_ttl)
    assert expiry is not None
    return expiry
