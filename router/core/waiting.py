"""Deliveries waiting for consumer credit, in-process endpoints, and links going away.

Owns: the queues of deliveries waiting for a consumer (per address; a consumer takes those
its filters pass and its max-message-size allows) and their expiry (a heap of
deadlines; the header ttl of one that waited is reduced as it leaves its queue to be sent on
or routed again: ttl.py), their bytes in the bounds (bounds.py), consumer credit and drain,
rerouting what waits when an address's destinations change, deliveries to in-process
endpoints (management) and messages from the router itself, and what becomes of deliveries
when a consumer or producer link goes away (released, modified, or unlinked from their
producer).
Collaborators: the address table, the mesh, Bounds, Touched.
A layer of the forwarder (see forwarding.py).
Must not touch: reading frames (forwarding.py, streaming.py), choosing among consumers (sending.py).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.events import FlowReceived
from ..amqp.messaging import Rejected
from ..amqp.peek import peek
from ..amqp.performatives import Error
from . import annotate
from . import filtering, sizelimits
from .addressentry import AddressEntry
from .delivery import Copy, Forward, copies_out, unpin
from .failures import DELIVERY_FAILED
from .fallback import Fallback
from .fifo import Fifo
from .linkrelay import RoutedLink
from .links import STREAM_LINK, InLink, OutLink, alive
from .streamlinks import take_waiting
from .table import AddressTable
from .ttl import reduce_ttl

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched


class Waiting(Fallback):
    """See the module docstring."""

    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, router_id: str) -> None:
        super().__init__(table, bounds, mesh, touched, router_id)
        self._expiring: list[tuple[float, int, Forward]] = []  # (expiry, seq, waiting delivery): a heap
        self._seq = itertools.count()
        self.router_sent = self.router_dropped = 0  # messages from the router itself (management)
        # The connection (ConnState) whose delivery an in-process endpoint is handling, while it
        # does: management reads the authenticated user from it. None for the router's own.
        self.local_sender: Any = None
        self.router_outcomes = {}

    def _aborted(self, fwd: Forward) -> None:
        """The producer aborted `fwd` (streaming.py)."""
        raise NotImplementedError

    # --- in-process endpoints and messages from the router itself -----------------------------

    def _deliver_local(self, fwd: Forward) -> None:
        handler = fwd.entry.local
        frames = fwd.all_frames()
        assert handler is not None and frames is not None
        payload = bytes(frames[0]) if len(frames) == 1 else b"".join(frames)
        fwd.drop_frames()
        try:
            link_address = fwd.in_link.address if fwd.in_link is not None else None
            self.local_sender = fwd.in_link.conn if fwd.in_link is not None else None
            state, replies = handler(payload, self.now, link_address)
        except Exception as exc:  # an endpoint's bug must not take the router down
            state = Rejected(error=Error(condition=E.INTERNAL_ERROR, description=f"{type(exc).__name__}: {exc}"))
            replies = []
        self.local_sender = None
        fwd.entry.deliveries_egress += 1
        if fwd.presettled:
            self._presettled_sent(fwd)
        else:
            self.relay_outcome(fwd, state)
        for to, body in replies:
            self.send_from_router(to, body)

    def send_from_router(self, to: str, payload: bytes, on_outcome: Callable[[Any], None] | None = None) -> bool:
        """Route a message the router itself originates, e.g. a management reply: presettled,
        or unsettled when `on_outcome` is given, which is then called with its final outcome
        (accepted, rejected, released, modified: settlement.relay_outcome), once, from within
        the core's handling of an event (it must not call into the core). False when `to` has
        no destination (the message is dropped and counted; `on_outcome` is not called)."""
        entry = self.table.lookup(to)
        if entry is None or not entry.has_destination:
            self.router_dropped += 1
            return False
        fwd = Forward(None, -1, on_outcome is None, payload, len(payload), True, entry, 0)
        if entry.has_remote:
            try:
                fwd.meta = annotate.for_client_delivery(peek(payload), to, True)
            except DecodeError:
                self.router_dropped += 1  # an in-process endpoint's bug: nothing to route by
                return False
        if on_outcome is not None:
            self.router_outcomes[fwd] = on_outcome
        entry.deliveries_ingress += 1
        self.router_sent += 1
        self._route(fwd)
        return True

    # --- waiting for credit ---------------------------------------------------------------------

    def _wait(self, fwd: Forward) -> None:
        if self.bounds.release_waiting(fwd):  # no room for its bytes
            self.unroutable(fwd)
            return
        unpin(fwd)
        fwd.entry.pending.append(fwd)
        self._wait_bytes(fwd, +1)
        if fwd.expiry is not None:
            heapq.heappush(self._expiring, (fwd.expiry, next(self._seq), fwd))

    def _wait_bytes(self, fwd: Forward, sign: int) -> None:
        if fwd.waiting is (sign > 0):
            return  # counted already, or never counted (see Forward.waiting)
        fwd.waiting = sign > 0
        # By its session, not its link: the link may be gone (or unlinked when the producer
        # settled first) while the delivery still waits, and its bytes still count.
        session = fwd.in_session
        if session is not None:
            conn = session.conn.context
            if conn is not None:
                self.bounds.hold(conn, sign * fwd.size)

    def _send_waiting(self, fwd: Forward, out: OutLink) -> None:
        """Send `fwd`, which waited for credit on inter-router link `out` (or for a streaming link:
        take_waiting), with the ttl it has left (ttl.py)."""
        # (this queue is not on the expiry timer: a delivery is looked at as it leaves it, so
        # that one that outlived its ttl is expired here, not sent on with a ttl of 1)
        if not fwd.done and self._leave_queue(fwd, self.now):
            self._send(fwd, out)

    def _leave_queue(self, fwd: Forward, now: float | None) -> bool:
        """`fwd` leaves the queue it waited in, to be sent: its bytes leave the bounds; True, with
        the ttl it has left (ttl.py), or False when it outlived its ttl there (expired: counted,
        and released or dropped). `now` None: not looked at for expiry."""
        self._wait_bytes(fwd, -1)
        if now is not None and fwd.expiry is not None and fwd.expiry <= now:
            fwd.entry.expired += 1
            self.unroutable(fwd)
            return False
        reduce_ttl(fwd, self.now)
        return True

    def consumer_ready(self, out: OutLink, now: float | None = None) -> None:
        """`out` may take deliveries: give it waiting ones, then answer a drain request."""
        if out.gone or not alive(out.link):
            return
        link = out.link
        pending = out.pending
        while pending and out.can_take():
            item = pending.popleft()
            if type(item) is Forward:  # anycast, waiting for an inter-router link's credit
                self._send_waiting(item, out)
                continue
            copy = item
            assert isinstance(copy, Copy)
            if not copy.done and not copy.forward.done:
                fwd = copy.forward
                expiry = fwd.expiry
                if expiry is not None and expiry <= self.now:
                    # Outlived its ttl waiting for this consumer (a queue not on the expiry
                    # timer, looked at as a copy leaves it, as _send_waiting's): this copy is
                    # expired, released into the combined outcome (dropped if presettled).
                    fwd.entry.expired += 1
                    self._copy_failed(copy)
                else:
                    reduce_ttl(fwd, self.now)  # (the copies still waiting share the first frame)
                    self._send_copy(fwd, out, copy)
                if copies_out(fwd):
                    fwd.drop_frames()
        if out.band == STREAM_LINK:  # large messages waiting for their band's link may take it
            take_waiting(out, self._send_waiting)
        if out.neighbour is not None and out.conn.role == "edge":
            self.mesh.edges.ready(out)  # an edge's link consumes addresses of its own
        queue = out.entry.pending
        if queue and (out.entry.filtered or out.entry.limited):
            nothing_for_it = self._give_matching(out, queue, now)
        else:
            while queue and out.can_take():
                fwd = queue.popleft()
                if fwd.done or not self._leave_queue(fwd, now):
                    continue
                out.entry.rr += 1
                self._send(fwd, out)
            nothing_for_it = not queue
        if link.drain and link.credit > 0 and nothing_for_it and not pending and out.streaming is None:
            link.complete_drain()  # nothing to send: give the credit back (transport §2.6.7)
            self.touched.touch(out.conn.engine)
            if out.zero_credit_since is None:
                out.zero_credit_since = self.now

    def _give_matching(self, out: OutLink, queue: Fifo[Forward], now: float | None) -> bool:
        """consumer_ready for an address with filtered consumers, or consumers with a
        max-message-size: `out` takes the waiting deliveries its filters pass and its limit
        allows, in order; the others keep their places for other consumers. True when nothing
        waiting is left for `out` (a drain can end)."""
        passed_over: list[Forward] = []
        while queue and out.can_take():
            fwd = queue.popleft()
            if fwd.done:
                continue
            if not filtering.eligible(fwd, out) or not sizelimits.fits(fwd, out):
                passed_over.append(fwd)
                continue
            if not self._leave_queue(fwd, now):
                continue
            out.entry.rr += 1
            self._send(fwd, out)
        queue.push_front(passed_over)
        return not queue or len(passed_over) == len(queue)

    def on_flow(self, event: FlowReceived, now: float) -> None:
        out = event.link.context
        if type(out) is OutLink:
            if event.link.credit > 0:
                out.zero_credit_since = None
            elif out.zero_credit_since is None:
                out.zero_credit_since = now
            self.consumer_ready(out, now)
        elif type(out) is RoutedLink:
            self.relay.on_flow(event)
        else:
            self.mesh.on_flow(event)  # a control link between routers

    def expire(self, now: float) -> None:
        heap = self._expiring
        while heap and heap[0][0] <= now:
            _, _, fwd = heapq.heappop(heap)
            if not fwd.done and fwd.out is None:
                self._wait_bytes(fwd, -1)
                fwd.entry.expired += 1
                self.unroutable(fwd)

    def next_deadline(self) -> float | None:
        heap = self._expiring
        while heap and (heap[0][2].done or heap[0][2].out is not None):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # --- links going away -----------------------------------------------------------------------

    def consumer_gone(self, out: OutLink, now: float) -> None:
        entry = out.entry
        if out in entry.consumers:
            entry.consumers.remove(out)
            if out.filter is not None:
                entry.filtered -= 1
            if out.max_message_size:
                entry.limited -= 1
            self.mesh.consumers_changed(entry)
        self.fail_sent(out)  # sent, unsettled: modified (delivery-failed)
        record = out.streaming
        out.streaming = None
        self.drop_held(out)  # (never written: the delivery fails as a whole, below)
        if record is not None:  # the rest of that delivery has nowhere to go
            fwd = record.forward if type(record) is Copy else record
            assert isinstance(fwd, Forward)
            if type(record) is Copy:
                self._copy_failed(record, DELIVERY_FAILED)
            elif not fwd.done:
                self.relay_outcome(fwd, DELIVERY_FAILED)
                fwd.done = True
        for item in out.pending or ():  # never sent: released
            if type(item) is Forward:
                if not item.done:
                    self._wait_bytes(item, -1)
                    self.unroutable(item)
            else:
                assert isinstance(item, Copy)
                if not item.done and not item.forward.done:
                    self._copy_failed(item)
        out.pending = None
        if not entry.consumers and out.neighbour is None:
            if entry.key[0] == "M":
                self.mesh.local_consumers(entry, False)
            self.reroute(entry)  # to other routers, or released when there are none
            for producer in entry.producers:
                self.credit_dirty(producer)  # no destination any more: drain their credit
        elif out.filter is not None or entry.filtered or entry.limited:
            # Some waiting deliveries may match no consumer left (released), or be too large
            # for every one left (rejected: sizelimits.py).
            self.reroute(entry)

    def reroute(self, entry: AddressEntry) -> None:
        """Route again the deliveries waiting at `entry` (its destinations changed): with none
        left, to its fallback destinations (fallback.py), or released."""
        if not entry.pending:
            return
        waiting = list(entry.pending)
        entry.pending.clear()
        for fwd in waiting:
            if fwd.done:
                continue
            self._wait_bytes(fwd, -1)
            if entry.has_destination:
                reduce_ttl(fwd, self.now)  # (it may go at once)
                self._route(fwd)
            elif not (entry.fallback_enabled and self._reroute_to_fallback(fwd)):
                self.unroutable(fwd)

    def producer_gone(self, inl: InLink, now: float) -> None:
        entry = inl.entry
        if entry is not None and inl in entry.producers:
            entry.producers.remove(inl)
        fwd = inl.streaming
        inl.streaming = None
        if fwd is not None and not fwd.done:
            self._aborted(fwd)  # a half-sent message is aborted downstream
        maps = inl.link.session.context
        if maps is not None:  # the producer will not hear outcomes any more
            for delivery_id, record in maps.inbound.items():
                if record.in_link is inl:
                    record.in_link = None
                    maps.inbound.pop(delivery_id)
                    self.producer_unlinked(record)
