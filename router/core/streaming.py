"""Later frames of a streaming delivery (cut-through), aborts, and refusals.

Owns: every frame of a delivery after its first (forwarding.py routes the first): streamed to
where the first went (the consumer link, each multicast copy's, or held for a band link of a
blocked connection), kept for an in-process endpoint or while the delivery waits for credit,
the size limit checked again as the delivery grows (LOCAL_MESSAGE_LIMIT for in-process
endpoints; each consumer's max-message-size: past it, the delivery or copy to that consumer is
aborted, sizelimits.py), the end of a stream (settled as written, handed over to the producer's window),
a producer's abort carried downstream (transport §2.6.12), and the refusal of a delivery
(rejected with a condition, the rest of its frames discarded) for forwarding.py's checks too.
Collaborators: Bounds (sizes shape credit), Touched.
A layer of the forwarder (see forwarding.py).
Must not touch: a delivery's first frame, its routing and expiry (forwarding.py), choosing
among consumers (sending.py), outcome bookkeeping (settlement.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from ..amqp import errors as E
from ..amqp.events import TransferReceived
from ..amqp.messaging import RELEASED, Rejected
from ..amqp.performatives import RECEIVER, SND_SETTLED, Error
from . import sizelimits
from .delivery import Copy, Forward, Payload, copies_out, forget_inbound
from .failures import DELIVERY_FAILED
from .links import InLink, OutLink, alive
from .table import AddressTable
from .waiting import Waiting

if TYPE_CHECKING:
    from .bounds import Bounds
    from .mesh import Mesh
    from .touched import Touched

LOCAL_MESSAGE_LIMIT: Final = 1 << 20  # an in-process endpoint (management) gets requests up to 1 MiB


class Streaming(Waiting):
    """See the module docstring."""

    def __init__(self, table: AddressTable, bounds: Bounds, mesh: Mesh, touched: Touched, router_id: str,
                 max_message_size: int | None) -> None:  # fmt: skip
        super().__init__(table, bounds, mesh, touched, router_id)
        # The router's own limit on what producers send it (0: none; native: one comparison per frame).
        self.max_message_size: i64 = max_message_size or 0

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
            over: list[Copy] | None = None
            for copy in fwd.copies:
                out = copy.out
                limit = out.max_message_size
                if limit and fwd.arrived > limit and not copy.done:  # past its consumer's max-message-size
                    if over is None:
                        over = []
                    over.append(copy)
                elif out.streaming is copy and alive(out.link):
                    self._stream(out, payload, fwd, copy)
            if over is not None:
                self._copies_over_limit(over)
            if fwd.first is not None:  # kept only while a copy still waits for credit
                fwd.add_frame(payload)
                if copies_out(fwd):
                    fwd.drop_frames()
        elif fwd.out is not None:
            out = fwd.out
            limit = out.max_message_size
            if limit and fwd.arrived > limit:  # past its consumer's max-message-size
                self._over_limit(fwd, out)
            elif alive(out.link):
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
            elif fwd.entry.limited and not self._may_fit(fwd):
                self._wait_bytes(fwd, -1)  # it grew past every consumer's max-message-size
                self.too_large(fwd)

    # --- consumers' max-message-size (sizelimits.py) ------------------------------------------------

    def _over_limit(self, fwd: Forward, out: OutLink) -> None:
        """`fwd`, streaming to consumer `out`, has grown past `out`'s max-message-size: the rest
        is not sent to it, the delivery ends there with an abort (transport §2.6.12; aborted is
        settled, §2.7.5, so the link carries the next delivery), and the producer hears what it
        hears when a consumer is lost mid-stream (waiting.consumer_gone): modified with
        delivery-failed, so that it may send it again, for another consumer. Unless none can
        take it (every consumer of its address here has a smaller limit and no other router
        has consumers): then rejected, as a complete message would be (failures.too_large),
        where modified would have it sent again for ever."""
        self.abort_out(out, fwd.out_id)
        if self._may_fit(fwd):
            self.relay_outcome(fwd, DELIVERY_FAILED)
        else:
            self.too_large(fwd)

    def _copies_over_limit(self, over: list[Copy]) -> None:
        """Multicast copies that grew past their consumers' max-message-size: each ends with an
        abort (a copy still waiting for its consumer's credit is never sent: consumer_ready
        skips it once done) and counts as released, the lowest of outcomes, so that the
        producer hears the other copies' (as a consumer too small for a complete message gets
        no copy)."""
        for copy in over:
            if copy.out.streaming is copy:
                self.abort_out(copy.out, copy.out_id)
            self._copy_failed(copy, RELEASED)

    def _may_fit(self, fwd: Forward) -> bool:
        """Some consumer of `fwd`'s address has no limit, or one `fwd` is not past yet, or
        another router has consumers of it (their limits are known there)."""
        entry = fwd.entry
        if entry.has_remote:
            return True
        for out in entry.consumers:
            if sizelimits.fits(fwd, out):
                return True
        return False

    def _stream(self, out: OutLink, payload: Payload, fwd: Forward, record: Forward | Copy) -> None:
        """The next frame of `record` (`fwd` or a copy of it) on `out`, ending it if the last."""
        if out.conn.output_blocked or out.window_shut:
            # Held until the output drains (holding.py), counted against the producer's byte
            # bound: a consumer that reads slowly, or not at all, never makes the router buffer
            # a large message whole (past the bound the producer's connection is not read). On
            # an inter-router connection higher bands go first, and a band whose session the
            # neighbour shut holds its frames until it opens (bandwindow.py). (Frames a link
            # holds always mean a blocked connection or a shut band.)
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
