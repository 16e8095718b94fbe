"""Choosing destinations and sending: what happens to a delivery once its first frame is read.

Owns: the anycast distributions (closest: round robin, local consumers first; balanced: least
outstanding; multicast is multicast.py's) among the consumers a delivery fits (their
max-message-size: sizelimits.py; a stream preferably to one without a limit), paths to other routers (chosen by remote.py), the
router annotations a delivery gets on its way out (annotate.py: only on deliveries that cross
routers, stripped for clients), sending a delivery or copy on a consumer link (the unsettled
bound: bounds.py), presettled and settled-on-send records.
A layer of the forwarder: credit.py < settlement.py < failures.py < sending.py < holding.py <
multicast.py < fallback.py < waiting.py < streaming.py < forwarding.py, each class deriving from
the one before (one object, native calls when compiled).
Collaborators: the address table, the mesh (paths, loop counters), Bounds, Touched.
Must not touch: reading frames (forwarding.py, streaming.py), waiting deliveries (waiting.py),
outcomes (settlement.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import i64

from ..amqp.messaging import ACCEPTED
from ..amqp.performatives import SND_SETTLED, SND_UNSETTLED
from . import annotate, filtering, remote, sizelimits
from .delivery import Copy, Forward, Payload, maps_of, unpin
from .failures import Failures
from .fifo import Fifo
from .links import OutLink
from .streamlinks import grow, instead, large
from .streamreclaim import IdleStreams

if TYPE_CHECKING:
    from ..amqp.link import Link
    from .bounds import Bounds
    from .mesh import Mesh
    from .paths import Paths
    from .table import AddressTable
    from .touched import Touched



class Sending(Failures):
    """See the module docstring."""

    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, router_id: str) -> None:
        super().__init__(touched, bounds)
        self.table = table
        self.mesh = mesh
        # The mesh's path choices (one object for the mesh's life), held here: the mesh is
        # interpreted, so reading it from there per delivery is a lookup by name.
        self.paths: Paths = mesh.paths
        self.router_id = router_id
        # The streaming links grown for bursts of large messages, given back once idle (the
        # core's timer: router.core.streamreclaim).
        self.idle_streams = IdleStreams()

    # --- defined by the layers above: waiting for credit, in-process endpoints (waiting.py) -------

    def _wait(self, fwd: Forward) -> None:
        raise NotImplementedError

    def _wait_bytes(self, fwd: Forward, sign: int) -> None:
        raise NotImplementedError

    def _deliver_local(self, fwd: Forward) -> None:
        raise NotImplementedError

    def _multicast(self, fwd: Forward) -> None:
        raise NotImplementedError

    def send_frames(self, out: OutLink, fwd: Forward, frames: list[Payload], settled: bool) -> int:
        """Several frames on a band link: some may be held (holding.py)."""
        raise NotImplementedError

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
        consumers = entry.consumers
        if entry.filtered:  # only the consumers whose filters pass it (filtering.py)
            consumers = filtering.matching(fwd, consumers)
            if not consumers and not entry.has_remote:
                self.unroutable(fwd)  # released: no consumer here wants it
                return
        if entry.limited:  # only the consumers it fits (their max-message-size: sizelimits.py)
            fitting = sizelimits.within(fwd, consumers)
            if not fitting and consumers:  # too large for every one of them
                if entry.has_remote and (fwd.meta is not None or fwd.view is not None):
                    self._anycast_mesh(fwd, fitting, True)  # another router's consumers may take it
                else:
                    self.too_large(fwd)  # rejected, never parked: none here ever will
                return
            consumers = fitting if fwd.complete else self._for_stream(fwd, fitting)
        if entry.has_remote:
            if fwd.meta is not None or fwd.view is not None:
                self._anycast_mesh(fwd, consumers)
                return
            if not consumers:  # only other routers, but its first frame
                self.unroutable(fwd)  # says too little to route it by (or to annotate)
                return
        out = self._pick(consumers, entry.rr, entry.distribution == "balanced")
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

    def _anycast_mesh(self, fwd: Forward, consumers: list[OutLink], oversize: bool = False) -> None:
        """Anycast where other routers have consumers too: local consumers (`consumers`, those
        whose filters pass it and whose max-message-size it fits) cost 0 (closest always takes
        them when there are any); otherwise remote.anycast chooses (a router there decides for
        its own consumers). `oversize`: there are local consumers, but it is too large for every
        one of them."""
        entry = fwd.entry
        balanced = entry.distribution == "balanced"
        local = None
        if consumers:
            local = self._pick(consumers, entry.rr, balanced)
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
        choice = remote.anycast(self.mesh, fwd, balanced, self.paths)
        if local is not None and (choice is None or not choice[2] or local.outstanding <= choice[1]):
            entry.rr += 1
            self._send(fwd, local)
        elif choice is None:
            if fwd.meta is not None and fwd.meta.ingress is not None and not consumers:
                # No way on from here: the previous router hears released; or, when this
                # router's consumers are all too small for it, the producer hears so
                # (rejected: this is where their limits are known).
                if oversize:
                    self.too_large(fwd)
                else:
                    self.unroutable(fwd)
            else:
                self._wait(fwd)  # a path may come back (routes changing): routed again then
        elif choice[2]:
            self._send(fwd, choice[0])
        elif consumers:
            self._wait(fwd)
        else:
            self._queue_on(choice[0], fwd)

    def _for_stream(self, fwd: Forward, consumers: list[OutLink]) -> list[OutLink]:
        """The consumers to choose among for a delivery still streaming in (`consumers`: those
        it fits so far): its size is not known yet, and it may grow past a consumer's limit
        (streaming.py aborts it there). When a consumer without a limit can take it now, only
        those; otherwise all of them (a limited consumer's limit may well be enough)."""
        free = sizelimits.unlimited(consumers)
        if not free or len(free) == len(consumers):
            return consumers
        entry = fwd.entry
        if self._pick(free, entry.rr, entry.distribution == "balanced") is None:
            return consumers
        return free

    def _queue_on(self, out: OutLink, fwd: Forward) -> None:
        """Wait for credit on an inter-router data link (a large message: more streaming links
        for those to come, if every one carries a stream: streamlinks.grow)."""
        if self.bounds.release_waiting(fwd):  # no room for its bytes
            self.unroutable(fwd)
            return
        streams = out.streams
        if streams is not None and large(fwd):
            grow(streams, out, self.router_id, self.touched, self.idle_streams, self.now)
        unpin(fwd)
        if out.pending is None:
            out.pending = Fifo()
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
            if fwd.hop is not None:  # its hop records share this trace id on every router
                meta.flow_trace = fwd.hop
            first = fwd.rframe
            if first is None:
                first = annotate.for_router(frames[0], meta, self.router_id)
                if fwd.copies is not None:
                    fwd.rframe = first
            if len(frames) == 1:  # (most deliveries: no slice of the list, no unpacking)
                return [first]
            return [first, *frames[1:]]
        if not out.conn.strip_out:  # a router-aware consumer gets them (its listener's strip_annotations)
            return self._annotated_for_client(fwd, frames)
        if meta is not None and meta.raw:  # stripped once, for every copy to come (meta says so)
            fwd.first = frames[0] = annotate.strip(frames[0], meta)
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
    def _pick(consumers: list[OutLink], rr: i64, balanced: bool) -> OutLink | None:
        """A consumer that can take a delivery now: round robin (closest, all local consumers
        cost the same) or, balanced, the one with the least outstanding work."""
        n: i64 = len(consumers)
        if n == 1:  # (most addresses: nothing to choose between)
            only = consumers[0]
            return only if only.can_take() else None
        best: OutLink | None = None
        for i in range(n):
            out = consumers[(rr + i) % n]
            if out.can_take():
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
        first = fwd.first
        assert first is not None
        streams = out.streams
        if streams is not None and large(fwd):  # a large message to a router
            stream = instead(streams)  # (on a link of its own: streamlinks.py)
            if stream is not None:
                stream.stream_band = out.band
                out = stream
            else:
                grow(streams, out, self.router_id, self.touched, self.idle_streams, self.now)
        link = out.link
        settled = self._presettled_out(fwd, out)
        if fwd.rest is None and fwd.meta is None and not out.rewrites:  # one frame, as it came
            out_id = link.send_transfer(None, first, settled=settled, more=not fwd.complete,
                                        message_format=fwd.message_format)  # fmt: skip
        else:
            out_id = self._send_all(fwd, out, settled)
        fwd.out, fwd.out_id = out, out_id
        fwd.first = fwd.rest = None  # (drop_frames: written out, once per message)
        fwd.fields = None
        out.delivered += 1
        if self.flow_on:
            self.flow_sent(fwd, out, self.now)
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
                fwd.entry.sent_on(out)
        if not settled:
            maps_of(link.session).outbound.put(out_id, fwd)
            out.outstanding += 1
            conn = out.conn
            conn.unsettled_out += 1
            if out.outstanding >= out.unsettled_limit or conn.unsettled_out >= conn.unsettled_limit:
                self.bounds.reached(out)  # stuck: nothing more goes to it for now
        else:
            out.presettled += 1
        if not fwd.complete or out.held is not None:  # (held: it ends once they are written)
            out.streaming = fwd
        elif fwd.presettled:
            self._presettled_sent(fwd)
        elif settled:
            self._settled_on_send(fwd)
        elif out.neighbour is None:
            self.handed_over(fwd)

    def _send_all(self, fwd: Forward, out: OutLink, settled: bool) -> int:
        """_send's frames when there are several, or they change on their way (annotations);
        the delivery-id."""
        frames = fwd.all_frames()
        assert frames is not None
        if fwd.meta is not None or out.rewrites:
            frames = self._egress(fwd, out, frames)
        if len(frames) > 1 and out.band != -1:  # (a message that waited) on a band or streaming link: not all at once
            return self.send_frames(out, fwd, frames, settled)
        return write_frames(fwd, out.link, frames, settled)

    def _settled_on_send(self, record: Forward | Copy) -> None:
        """The consumer asked for presettled deliveries (snd-settle-mode settled): it will send no
        outcome, so the delivery counts as accepted once it is out."""
        if type(record) is Copy:
            self._copy_outcome(record, ACCEPTED)
        else:
            assert isinstance(record, Forward)
            self.relay_outcome(record, ACCEPTED)

    def _presettled_sent(self, fwd: Forward) -> None:
        """A presettled delivery's copy (or the delivery) is out: it is finished once every copy
        is. Once only: whatever finished it before released its window (its producer's
        in-flight count must not drop twice)."""
        if fwd.done:
            return
        copies = fwd.copies
        if copies is not None:
            if any(not c.done for c in copies):
                return
            copies.clear()  # no cycle left between the Forward and its copies (settlement.py)
        fwd.done = True
        fwd.drop_frames()
        self._release_window(fwd)


def write_frames(fwd: Forward, link: Link, frames: list[Payload], settled: bool) -> int:
    """`frames` of `fwd` (as they are, or as a consumer or router gets them) as one delivery on
    `link`: more on all but the last, and on the last while the rest is still arriving. Its
    delivery-id (-1: no frame)."""
    last = len(frames) - 1
    out_id = -1
    for i, frame in enumerate(frames):
        out_id = link.send_transfer(None, frame, settled=settled, more=i < last or not fwd.complete,
                                    message_format=fwd.message_format)  # fmt: skip
    return out_id
