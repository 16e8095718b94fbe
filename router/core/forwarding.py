"""Forwarding: every delivery that arrives goes to a destination, waits (bounded) for consumer
credit, or is refused at once. Cut-through: frames go out as they arrive.

Owns: reading a delivery's first frame only as deep as routing needs (router.amqp.peek),
refusals (no address: rejected precondition-failed; oversize: rejected message-size-exceeded;
undecodable: rejected decode-error; no destination or expired: released, or dropped when
presettled), stripping router annotations clients must not set, the distributions (closest:
round robin; balanced: least outstanding; multicast: a copy per consumer), streaming later frames
and aborts, deliveries waiting for credit (and their expiry), and consumer credit and drain.
In a mesh it also sends to other routers over the inter-router data links: the paths are chosen
by remote.py, the router annotations written by annotate.py (only on deliveries that cross
routers: a router's local traffic never pays for them).
Must not touch: outcome bookkeeping (settlement.py), attach handling (links.py), the topology.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.events import FlowReceived, TransferReceived
from ..amqp.messaging import ACCEPTED, RELEASED, Rejected
from ..amqp.peek import RoutingView, peek
from ..amqp.performatives import RECEIVER, SND_SETTLED, SND_UNSETTLED, Error
from . import annotate, remote
from .delivery import Copy, Forward, Payload, forget_inbound, maps_of
from .links import InLink, OutLink, alive
from .settlement import DELIVERY_FAILED, Settlement
from .table import NOWHERE, UNAVAILABLE, AddressEntry, AddressTable

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched

LOCAL_MESSAGE_LIMIT: Final = 1 << 20  # an in-process endpoint (management) gets requests up to 1 MiB
# A client's delivery to an address that is `distribution: unavailable` (the anchors' answer).
NOT_AVAILABLE: Final = Rejected(
    error=Error(condition=E.NOT_FOUND, description="Deliveries cannot be sent to an unavailable address"))


class Forwarder(Settlement):
    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, *, router_id: str,
                 wall_offset: float, max_message_size: int | None) -> None:  # fmt: skip
        """`wall_offset`: wall-clock seconds minus `now` (RouterCore's)."""
        super().__init__(touched, bounds)
        self.table = table
        self.mesh = mesh
        self.router_id = router_id
        self.wall_offset = wall_offset
        self.max_message_size = max_message_size
        self._expiring: list[tuple[float, int, Forward]] = []
        self._seq = itertools.count()
        self.router_sent = self.router_dropped = 0

    # --- arriving frames ------------------------------------------------------------------------

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        inl = event.link.context
        if type(inl) is not InLink:
            self.mesh.on_transfer(event, now)  # a control message between routers
            return
        if event.first:
            self._first_frame(inl, event, now)
        elif inl.discarding:
            inl.discarding = event.more
        elif inl.streaming is not None:
            self._next_frame(inl, inl.streaming, event)

    def _refuse(self, inl: InLink, event: TransferReceived, condition: str, description: str) -> None:
        inl.rejected += 1
        if inl.entry is not None:
            inl.entry.rejected += 1
        inl.discarding = event.more
        self.credit_dirty(inl)
        if not event.settled:
            state = Rejected(error=Error(condition=condition, description=description))
            self.dispose(event.link.session, RECEIVER, event.delivery_id, state, True)

    def _first_frame(self, inl: InLink, event: TransferReceived, now: float) -> None:
        inl.delivered += 1
        if inl.link.credit == 0 and inl.zero_credit_since is None:
            inl.zero_credit_since = now  # the producer used its last credit (in this batch)
        if event.aborted:
            return
        payload = event.payload
        limit = self.max_message_size
        # Sizes come from the events: the engine has already read the whole batch, so its link
        # counters may describe a later delivery.
        if limit and len(payload) > limit:
            self._refuse(inl, event, E.MESSAGE_SIZE_EXCEEDED, f"message larger than {limit} bytes")
            return
        entry = inl.entry
        try:
            view: RoutingView | None = peek(payload, need_to=entry is None)
        except DecodeError as exc:  # malformed, or a first frame cut before the end of its properties
            if entry is None or not event.more:
                self._refuse(inl, event, E.DECODE_ERROR, f"malformed message: {exc.description}")
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
                    meta = annotate.parse(payload, view, inl.peer, inl.seen)
                except DecodeError as exc:
                    self._refuse(inl, event, E.DECODE_ERROR, f"malformed router annotations: {exc.description}")
                    return
                to = meta.to
            if not to:
                self._refuse(inl, event, E.PRECONDITION_FAILED,
                             "routing failure: no address (properties.to) on an anonymous link")  # fmt: skip
                return
            entry = self.table.lookup(to)
        settled = event.settled
        fwd = Forward(inl, event.delivery_id, settled, [payload], not event.more,
                      entry if entry is not None else NOWHERE, event.message_format)  # fmt: skip
        if fwd.size > inl.size_watch and not event.more:  # a large message: credit by bytes (bounds.py)
            self.bounds.observe(inl, fwd.size)
        inl.inflight += 1
        inl.held += 1
        fwd.holds_slot = True
        if not settled:
            maps_of(event.link.session).inbound.put(event.delivery_id, fwd)
        else:
            inl.presettled += 1
            fwd.entry.presettled += 1
        if event.more:
            inl.streaming = fwd
        if meta is not None:
            fwd.meta = meta
            if remote.looped(self.mesh, meta):
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
                if not inl.conn.strip_in:  # a router-aware client's annotations are the router's
                    address = inl.address
                    meta = fwd.meta = annotate.kept_from_client(payload, view, address or view.to, address is not None)
                if meta is None:
                    stripped, view = annotate.strip_client(payload, view)
                    fwd.frames = [stripped]
            fwd.view = view
            if meta is None and entry.remote:  # it may leave this router: the address travels
                address = inl.address
                fwd.meta = annotate.for_client_delivery(view, address or view.to, address is not None)
        self._route(fwd)

    def _next_frame(self, inl: InLink, fwd: Forward, event: TransferReceived) -> None:
        fwd.arrived += len(event.payload)  # sizes shape the producer's credit (bounds.py)
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
            self._refuse(inl, event, E.MESSAGE_SIZE_EXCEEDED, f"message larger than {limit} bytes")
            return
        payload = event.payload
        if fwd.copies is not None:
            for copy in fwd.copies:
                if copy.out.streaming is copy and alive(copy.out.link):
                    self._stream(copy.out, payload, fwd)
                    if fwd.complete:
                        self._stream_done(copy.out, copy)
            if fwd.frames is not None:  # kept only while a copy still waits for credit
                fwd.frames.append(payload)
                if not any(c.sent_frames == 0 and not c.done for c in fwd.copies):
                    fwd.frames = None
        elif fwd.out is not None:
            out = fwd.out
            if alive(out.link):
                self._stream(out, payload, fwd)
                if fwd.complete:
                    self._stream_done(out, fwd)
        elif fwd.entry.local is not None and fwd.frames is not None:  # for an in-process endpoint
            fwd.frames.append(payload)
            if fwd.arrived > LOCAL_MESSAGE_LIMIT:
                self._aborted(fwd)
                inl.streaming = None
                inl.discarding = event.more
                self._refuse(inl, event, E.MESSAGE_SIZE_EXCEEDED,
                             f"requests to {fwd.entry.address} are limited to {LOCAL_MESSAGE_LIMIT} bytes")  # fmt: skip
            elif fwd.complete:
                self._deliver_local(fwd)
        elif fwd.frames is not None:  # still waiting for a consumer
            fwd.frames.append(bytes(payload) if type(payload) is memoryview else payload)
            fwd.size += len(payload)
            bounds = self.bounds
            bounds.hold(inl.conn, len(payload))
            if bounds.over(inl.conn, 0):  # it grew past a byte bound while waiting: released
                bounds.released_over_budget += 1
                self._wait_bytes(fwd, -1)  # (it leaves the queue it waits in lazily: done)
                self.unroutable(fwd)

    def _stream(self, out: OutLink, payload: Payload, fwd: Forward) -> None:
        out.link.send_transfer(b"", payload, settled=self._presettled_out(fwd, out),
                               more=not fwd.complete, message_format=fwd.message_format)  # fmt: skip
        self.touched.touch(out.conn.engine)

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
                out.streaming = None
                if alive(out.link):
                    out.link.abort()
                    self.touched.touch(out.conn.engine)
                maps = out.link.session.context
                if maps is not None and maps.outbound.pop(record.out_id) is not None:
                    self.unsettled_out(record, out)
                self.consumer_ready(out)
        if fwd.out is None and fwd.copies is None:
            self._wait_bytes(fwd, -1)  # it was waiting for credit (removed from the queue lazily)
        for copy in fwd.copies or ():
            copy.done = True
        fwd.done = True
        fwd.frames = None
        forget_inbound(fwd)
        self._release_window(fwd)

    # --- choosing and sending -------------------------------------------------------------------

    def _route(self, fwd: Forward) -> None:
        entry = fwd.entry
        if entry.local is not None:  # an in-process endpoint takes it once it is complete
            if fwd.complete:
                self._deliver_local(fwd)
            return
        if entry.distribution == "multicast":
            self._multicast(fwd)
            return
        if entry.remote and (fwd.meta is not None or fwd.view is not None):
            self._anycast_mesh(fwd)
            return
        if entry.remote and not entry.consumers:  # only other routers, but its first frame
            self.unroutable(fwd)  # says too little to route it by (or to annotate)
            return
        out = self._pick(entry.consumers, entry.rr, entry.distribution == "balanced")
        if out is None:
            self._wait(fwd)
        elif entry.pending:
            # Earlier deliveries wait for credit, which the engine may already show from a flow
            # later in this batch: this one goes behind them, in the order it came.
            self._wait(fwd)
            self.consumer_ready(out)
        else:
            entry.rr += 1
            self._send(fwd, out)
            # Sent to a local consumer: it will not be routed again, so the routing view need
            # not stay alive until settlement (one object less per delivery in flight, which
            # the garbage collector would otherwise walk again and again).
            fwd.view = None

    def _anycast_mesh(self, fwd: Forward) -> None:
        """Anycast where other routers have consumers too: local consumers cost 0 (closest
        always takes them when there are any); otherwise remote.anycast chooses."""
        entry = fwd.entry
        balanced = entry.distribution == "balanced"
        local = None
        if entry.consumers:
            local = self._pick(entry.consumers, entry.rr, balanced)
            if local is not None and entry.pending:  # behind the earlier ones (see _route)
                self._wait(fwd)
                self.consumer_ready(local)
                return
            if not balanced:
                if local is None:
                    self._wait(fwd)
                else:
                    entry.rr += 1
                    self._send(fwd, local)
                return
        choice = remote.anycast(self.mesh, fwd, balanced)
        if local is not None and (choice is None or not choice[2] or local.outstanding <= choice[1]):
            entry.rr += 1
            self._send(fwd, local)
        elif choice is None:
            if fwd.meta is not None and fwd.meta.ingress is not None and not entry.consumers:
                self.unroutable(fwd)  # no way on from here: the previous router hears released
            else:
                self._wait(fwd)  # a path may come back (routes changing): routed again then
        elif choice[2]:
            self._send(fwd, choice[0])
        elif entry.consumers:
            self._wait(fwd)
        else:
            self._queue_on(choice[0], fwd)

    def _queue_on(self, out: OutLink, fwd: Forward) -> None:
        """Wait for credit on an inter-router data link."""
        if self.bounds.release_waiting(fwd):  # no room for its bytes
            self.unroutable(fwd)
            return
        if fwd.frames is not None:
            fwd.frames = [f if type(f) is bytes else bytes(f) for f in fwd.frames]
        if out.pending is None:
            out.pending = deque()
        out.pending.append(fwd)
        self._wait_bytes(fwd, +1)

    def _egress(self, fwd: Forward, out: OutLink, frames: list[Payload]) -> list[Payload]:
        """The frames as `out` must get them: with router annotations for another router,
        without them for a consumer."""
        meta = fwd.meta
        if out.neighbour is not None:
            if meta is None:  # it had no remote destination when it arrived
                view = fwd.view
                assert view is not None  # without one a delivery is never routed to a router
                inl = fwd.in_link
                to = inl.address if inl is not None and inl.address else view.to or fwd.entry.address
                meta = fwd.meta = annotate.for_client_delivery(view, to, True)
            first = fwd.rframe
            if first is None:
                first = annotate.for_router(frames[0], meta, self.router_id)
                if fwd.copies is not None:
                    fwd.rframe = first
            return [first, *frames[1:]]
        if not out.conn.strip_out:  # a router-aware consumer gets them (its listener's strip_annotations)
            return self._annotated_for_client(fwd, frames)
        if meta is not None and meta.raw:
            frames[0] = annotate.strip(frames[0], meta)
        return frames

    def _annotated_for_client(self, fwd: Forward, frames: list[Payload]) -> list[Payload]:
        """The frames with the router annotations as the next router would get them (ingress,
        the trace with this router last): a new list, the delivery's own frames untouched."""
        meta = fwd.meta
        if meta is None:  # from a client of this router: it entered the mesh here
            view = fwd.view
            if view is None:  # its first frame said too little to annotate it: as it came
                return frames
            meta = annotate.for_client_delivery(view, None, False)  # (for this consumer only)
        return [annotate.for_router(frames[0], meta, self.router_id), *frames[1:]]

    @staticmethod
    def _pick(consumers: list[OutLink], rr: int, balanced: bool) -> OutLink | None:
        """A consumer that can take a delivery now: round robin (closest, all local consumers
        cost the same) or, balanced, the one with the least outstanding work."""
        n = len(consumers)
        best: OutLink | None = None
        for i in range(n):
            out = consumers[(rr + i) % n]
            if out.link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.stuck:
                if not balanced:
                    return out
                if best is None or out.outstanding < best.outstanding:
                    best = out
                    if out.outstanding == 0:
                        break
        return best

    def _presettled_out(self, fwd: Forward, out: OutLink) -> bool:
        mode = out.link.snd_settle_mode
        return mode == SND_SETTLED or (fwd.presettled and mode != SND_UNSETTLED)

    def _send(self, fwd: Forward, out: OutLink) -> None:
        frames = fwd.frames
        assert frames is not None
        if fwd.meta is not None or out.rewrites:
            frames = self._egress(fwd, out, frames)
        link = out.link
        settled = self._presettled_out(fwd, out)
        tag = out.next_tag()
        last = len(frames) - 1
        out_id = -1
        for i, frame in enumerate(frames):
            out_id = link.send_transfer(tag, frame, settled=settled, more=i < last or not fwd.complete,
                                        message_format=fwd.message_format)  # fmt: skip
        fwd.out, fwd.out_id = out, out_id
        fwd.frames = None
        out.delivered += 1
        if link.credit == 0 and out.zero_credit_since is None:
            out.zero_credit_since = self.now
        conn = out.conn
        conn.last_delivery = self.now
        self.touched.touch(conn.engine)
        if out.neighbour is None:
            fwd.entry.deliveries_egress += 1
        else:
            fwd.entry.deliveries_transit += 1
            if not settled:
                counts = fwd.entry.remote_out
                counts[out] = counts.get(out, 0) + 1
        if not settled:
            maps_of(link.session).outbound.put(out_id, fwd)
            out.outstanding += 1
            conn = out.conn
            conn.unsettled_out += 1
            if out.outstanding >= out.unsettled_limit or conn.unsettled_out >= conn.unsettled_limit:
                self.bounds.reached(out)  # stuck: nothing more goes to it for now
        else:
            out.presettled += 1
        if not fwd.complete:
            out.streaming = fwd
        elif fwd.presettled:
            self._presettled_sent(fwd)
        elif settled:
            self._settled_on_send(fwd)
        elif out.neighbour is None:
            self.handed_over(fwd)

    def _settled_on_send(self, record: Forward | Copy) -> None:
        """The consumer asked for presettled deliveries (snd-settle-mode settled): it will send no
        outcome, so the delivery counts as accepted once it is out."""
        if type(record) is Copy:
            self._copy_outcome(record, ACCEPTED)
        else:
            assert isinstance(record, Forward)
            self.relay_outcome(record, ACCEPTED)

    def _presettled_sent(self, fwd: Forward) -> None:
        if fwd.copies is not None and any(not c.done for c in fwd.copies):
            return
        fwd.done = True
        fwd.frames = None
        self._release_window(fwd)

    def _multicast(self, fwd: Forward) -> None:
        entry = fwd.entry
        targets: list[OutLink] = []
        mesh = self.mesh
        meta = fwd.meta
        if meta is None or remote.local_ok(mesh, meta):
            if meta is not None and meta.came_from is not None:  # never back where it came from
                targets.extend(out for out in entry.consumers if out.neighbour != meta.came_from)
            else:
                targets.extend(entry.consumers)
            if entry.key[0] == "T":  # _topo/0/all/x: this router's consumers of x too
                alias = self.table.entries.get("L" + entry.key[1:])
                if alias is not None:
                    targets.extend(alias.consumers)
        elif not entry.remote:
            mesh.dropped_invalid_origin += 1
        if entry.remote and (meta is not None or fwd.view is not None):
            targets.extend(remote.multicast(mesh, fwd))
        if not targets:
            self.unroutable(fwd)
            return
        fwd.copies = [Copy(fwd, out) for out in targets]
        fwd.remaining = len(fwd.copies)
        for copy in fwd.copies:
            out = copy.out
            if out.link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.stuck:
                self._send_copy(copy)
            else:
                if out.pending is None:
                    out.pending = deque()
                if len(out.pending) >= out.capacity:  # this consumer is too far behind
                    self._copy_failed(copy)
                else:
                    out.pending.append(copy)
        if not any(c.sent_frames == 0 and not c.done for c in fwd.copies):
            fwd.frames = None  # every copy is out (or failed): the bytes are not needed again

    def _send_copy(self, copy: Copy) -> None:
        fwd, out = copy.forward, copy.out
        frames = fwd.frames or []
        if frames and (fwd.meta is not None or out.rewrites):
            frames = self._egress(fwd, out, frames)
        link = out.link
        settled = self._presettled_out(fwd, out)
        tag = out.next_tag()
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            copy.out_id = link.send_transfer(tag, frame, settled=settled, more=i < last or not fwd.complete,
                                             message_format=fwd.message_format)  # fmt: skip
        copy.sent_frames = len(frames)
        if out.neighbour is None:
            fwd.entry.deliveries_egress += 1
        else:
            fwd.entry.deliveries_transit += 1
        out.delivered += 1
        if link.credit == 0 and out.zero_credit_since is None:
            out.zero_credit_since = self.now
        conn = out.conn
        conn.last_delivery = self.now
        self.touched.touch(conn.engine)
        if not settled:
            maps_of(link.session).outbound.put(copy.out_id, copy)
            out.outstanding += 1
            conn = out.conn
            conn.unsettled_out += 1
            if out.outstanding >= out.unsettled_limit or conn.unsettled_out >= conn.unsettled_limit:
                self.bounds.reached(out)
        else:
            out.presettled += 1
        if not fwd.complete:
            out.streaming = copy
        elif fwd.presettled:
            copy.done = True
            self._presettled_sent(fwd)
        elif settled:
            self._settled_on_send(copy)

    def _copy_failed(self, copy: Copy, state: Any = None) -> None:
        if copy.forward.presettled:
            copy.done = True
            copy.forward.entry.dropped += 1
            self._presettled_sent(copy.forward)
        else:
            self._copy_outcome(copy, state if state is not None else RELEASED)

    # --- in-process endpoints and messages from the router itself -----------------------------

    def _deliver_local(self, fwd: Forward) -> None:
        handler = fwd.entry.local
        assert handler is not None and fwd.frames is not None
        payload = bytes(fwd.frames[0]) if len(fwd.frames) == 1 else b"".join(fwd.frames)
        fwd.frames = None
        try:
            link_address = fwd.in_link.address if fwd.in_link is not None else None
            state, replies = handler(payload, self.now, link_address)
        except Exception as exc:  # an endpoint's bug must not take the router down
            state = Rejected(error=Error(condition=E.INTERNAL_ERROR, description=f"{type(exc).__name__}: {exc}"))
            replies = []
        fwd.entry.deliveries_egress += 1
        if fwd.presettled:
            self._presettled_sent(fwd)
        else:
            self.relay_outcome(fwd, state)
        for to, body in replies:
            self.send_from_router(to, body)

    def send_from_router(self, to: str, payload: bytes) -> bool:
        """Route a message the router itself originates (presettled), e.g. a management reply.
        False when `to` has no destination (the message is dropped and counted)."""
        entry = self.table.lookup(to)
        if entry is None or not entry.has_destination:
            self.router_dropped += 1
            return False
        fwd = Forward(None, -1, True, [payload], True, entry, 0)
        if entry.remote:
            try:
                fwd.meta = annotate.for_client_delivery(peek(payload), to, True)
            except DecodeError:
                self.router_dropped += 1  # an in-process endpoint's bug: nothing to route by
                return False
        entry.deliveries_ingress += 1
        self.router_sent += 1
        self._route(fwd)
        return True

    # --- waiting for credit ---------------------------------------------------------------------

    def _wait(self, fwd: Forward) -> None:
        if self.bounds.release_waiting(fwd):  # no room for its bytes
            self.unroutable(fwd)
            return
        if fwd.frames is not None:  # a waiting delivery must not pin the reads it came in
            fwd.frames = [f if type(f) is bytes else bytes(f) for f in fwd.frames]
        fwd.entry.pending.append(fwd)
        self._wait_bytes(fwd, +1)
        if fwd.expiry is not None:
            heapq.heappush(self._expiring, (fwd.expiry, next(self._seq), fwd))

    def _wait_bytes(self, fwd: Forward, sign: int) -> None:
        # By its session, not its link: the link may be gone (or unlinked when the producer
        # settled first) while the delivery still waits, and its bytes still count.
        session = fwd.in_session
        if session is not None:
            conn = session.conn.context
            if conn is not None:
                self.bounds.hold(conn, sign * fwd.size)

    def consumer_ready(self, out: OutLink, now: float | None = None) -> None:
        """`out` may take deliveries: give it waiting ones, then answer a drain request."""
        if out.gone or not alive(out.link):
            return
        link = out.link
        pending = out.pending
        while pending and link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.stuck:
            item = pending.popleft()
            if type(item) is Forward:  # anycast, waiting for an inter-router link's credit
                if not item.done:
                    self._wait_bytes(item, -1)
                    self._send(item, out)
                continue
            copy = item
            assert isinstance(copy, Copy)
            if not copy.done and not copy.forward.done:
                self._send_copy(copy)
                fwd = copy.forward
                if not any(c.sent_frames == 0 and not c.done for c in fwd.copies or ()):
                    fwd.frames = None
        if out.neighbour is not None and out.conn.role == "edge":
            self.mesh.edges.ready(out)  # an edge's link consumes addresses of its own
        queue = out.entry.pending
        while queue and link.credit > 0 and out.streaming is None and not out.conn.output_blocked and not out.stuck:
            fwd = queue.popleft()
            if fwd.done:
                continue
            self._wait_bytes(fwd, -1)
            if now is not None and fwd.expiry is not None and fwd.expiry <= now:
                fwd.entry.expired += 1
                self.unroutable(fwd)
                continue
            out.entry.rr += 1
            self._send(fwd, out)
        if link.drain and link.credit > 0 and not queue and not pending and out.streaming is None:
            link.complete_drain()  # nothing to send: give the credit back (transport §2.6.7)
            self.touched.touch(out.conn.engine)
            if out.zero_credit_since is None:
                out.zero_credit_since = self.now

    def on_flow(self, event: FlowReceived, now: float) -> None:
        out = event.link.context
        if type(out) is OutLink:
            if event.link.credit > 0:
                out.zero_credit_since = None
            elif out.zero_credit_since is None:
                out.zero_credit_since = now
            self.consumer_ready(out, now)
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
            self.mesh.consumers_changed(entry)
        self.fail_sent(out)  # sent, unsettled: modified (delivery-failed)
        record = out.streaming
        out.streaming = None
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

    def reroute(self, entry: AddressEntry) -> None:
        """Route again the deliveries waiting at `entry` (its destinations changed)."""
        if not entry.pending:
            return
        waiting = list(entry.pending)
        entry.pending.clear()
        for fwd in waiting:
            if fwd.done:
                continue
            self._wait_bytes(fwd, -1)
            if entry.has_destination:
                self._route(fwd)
            else:
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
