"""Outcomes and settlement, end to end: from the consumer back to the producer.

Owns: relaying a consumer's disposition to the producer (anycast: outcomes, and states the
consumer sets without settling, such as received), settlement both ways (a consumer that does not
settle with its outcome keeps its delivery unsettled until the producer settles: the
"three-ack" pattern; docs/mesh.md, "Outcomes and settlement"), combining multicast copies
(rejected > accepted > modified > released, settled upstream when every copy is terminal),
producer-side settlement (rcv-settle-mode second, sender settling first), reporting failures
(never sent: released; sent but unsettled when the consumer went away: modified with
delivery-failed), and which dispositions go out (batched by credit.py's flush).
A layer of the forwarder (see forwarding.py); the producers' credit and the flush are credit.py's.
Must not touch: choosing destinations or sending transfers (sending.py, multicast.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..amqp.events import DispositionReceived
from ..amqp.messaging import RELEASED, Accepted, Modified, Rejected, Released, is_terminal
from ..amqp.performatives import RCV_SECOND, RECEIVER, SENDER
from ..amqp.serial import SERIAL_MASK, serial_count, serial_ids_in
from .addressentry import AddressEntry
from .credit import ProducerCredit
from .delivery import Copy, Forward, SessionMaps, forget_inbound
from .deliverymap import DeliveryMap
from .links import LinkCounts, OutLink, alive

if TYPE_CHECKING:
    from .linkrelay import Relay


DELIVERY_FAILED: Final = Modified(delivery_failed=True)
# A disposition's range walked natively (iterating the range serial_ids_in returns boxes every
# delivery-id, an allocation each above 256).
_MASK: Final = SERIAL_MASK
# The outcome classes as module constants: mypyc keeps them in C statics, where the imported
# names would be looked up in the module's dict on every delivery.
_ACCEPTED: Final = Accepted
_RELEASED: Final = Released
_MODIFIED: Final = Modified
_REJECTED: Final = Rejected


class Settlement(ProducerCredit):
    """Outcome relay (see the module docstring)."""

    # The relay of link-routed pairs (router.core.linkrelay), set by RouterCore: their transfers,
    # flows and dispositions arrive here with everyone else's.
    relay: Relay
    # Unsettled messages of the router's own (Waiting.send_from_router with `on_outcome`, e.g.
    # flow records' batches): who is told each one's final outcome.
    router_outcomes: dict[Forward, Callable[[Any], None]]

    def on_disposition(self, event: DispositionReceived) -> None:
        maps = event.session.context
        if not isinstance(maps, SessionMaps):
            return
        if maps.routed is not None:  # a session with link-routed links (router.core.linkrelay)
            self.relay.on_disposition(event, maps.routed)
        first, last = event.first, event.last
        if event.role is RECEIVER:  # a consumer's outcome or state for deliveries we sent it
            outbound = maps.outbound
            if outbound.empty:
                return
            state = event.state
            count = serial_count(first, last)
            if event.settled:  # the consumer is done with them: so are we
                if count <= 2 * len(outbound) + 64:  # (serial_ids_in's rule) no boxed ids
                    for i in range(count):
                        self._consumer_settled(outbound, (first + i) & _MASK, state)
                else:
                    for delivery_id in serial_ids_in(first, last, outbound):
                        self._consumer_settled(outbound, delivery_id, state)
            else:  # still unsettled there: an outcome the producer settles, or a state update
                for delivery_id in serial_ids_in(first, last, outbound):
                    record = outbound.get(delivery_id)
                    if record is None:
                        continue
                    out = record.out
                    if out is not None and out.streaming is record and is_terminal(state):
                        self.end_stream(out)  # implicitly settled: as if the consumer had
                        outbound.pop(delivery_id)
                        self.consumer_outcome(record, state)
                    else:
                        self.consumer_update(record, delivery_id, state)
        elif event.settled:  # the producer settles deliveries it sent us
            inbound = maps.inbound
            if serial_count(first, last) <= 2 * len(inbound) + 64:  # (serial_ids_in's rule)
                for i in range(serial_count(first, last)):
                    fwd = inbound.pop((first + i) & _MASK)
                    if fwd is not None:
                        self._producer_settled(fwd)
            else:
                for delivery_id in serial_ids_in(first, last, inbound):
                    fwd = inbound.pop(delivery_id)
                    if fwd is not None:
                        self._producer_settled(fwd)

    def _consumer_settled(self, outbound: DeliveryMap, delivery_id: int, state: Any) -> None:
        """The consumer settled `delivery_id` (one of a disposition's range)."""
        record = outbound.pop(delivery_id)
        if record is not None:
            self.consumer_outcome(record, state)

    def consumer_outcome(self, record: Forward | Copy, state: Any) -> None:
        """The consumer settled `record` (with `state`, or with none after an earlier outcome)."""
        out = record.out
        assert out is not None
        if out.streaming is record:
            self.end_stream(out)
        if out.neighbour is None:
            out.outstanding -= 1
            out.conn.unsettled_out -= 1
            if out.stuck:  # at its unsettled bound: it may take deliveries again (bounds.py)
                self.bounds.settled(out)
        else:
            self.unsettled_out(record, out)
        if type(record) is Copy:
            if not record.done:
                _count(out, state)
                if self.flow_on:
                    self.flow_settled(out, record.sent_at, self.now)
                self._copy_outcome(record, state)
            return
        assert isinstance(record, Forward)
        if not record.done:
            _count(out, state)
            if self.flow_on:
                self.flow_settled(out, record.sent_at, self.now)
            self.relay_outcome(record, state)
        elif record.outcome_sent:
            # The outcome went to the producer unsettled, and now the consumer settles: the
            # producer's delivery is settled too (unless it must settle first, rcv-settle-mode
            # second, transport §2.8.3): settlement travels both ways.
            self._settle_producer(record)

    def consumer_update(self, record: Forward | Copy, delivery_id: int, state: Any) -> None:
        """The consumer set `state` on `record` without settling it (transport §2.7.6). An
        outcome goes to the producer unsettled, and the consumer's delivery stays unsettled
        until the producer settles (the consumer then knows it will not be sent again); a
        non-terminal state (received, or any other the consumer sends) is passed on as it is."""
        out = record.out
        assert out is not None
        terminal = is_terminal(state)
        if type(record) is Copy:
            # Multicast combines outcomes: the copy is settled here once terminal (non-terminal
            # states are not combined, as the anchors).
            if terminal and not record.done:
                self._settle_consumer(out, delivery_id, state)
                _count(out, state)
                if self.flow_on:
                    self.flow_settled(out, record.sent_at, self.now)
                self._copy_outcome(record, state)
            return
        assert isinstance(record, Forward)
        if record.done:  # already decided (an outcome is final)
            if not record.outcome_sent:  # and no producer will settle it
                self._settle_consumer(out, delivery_id, record.state)
            return
        if not terminal:
            inl = record.in_link
            if inl is not None and not record.presettled and alive(inl.link) and record.in_session is not None:
                self.dispose(record.in_session, RECEIVER, record.in_id, state, False)
            return
        _count(out, state)
        if self.flow_on:
            self.flow_settled(out, record.sent_at, self.now)
        if not self.relay_outcome(record, state, False):
            self._settle_consumer(out, delivery_id, state)  # no producer will settle it

    def end_stream(self, out: OutLink) -> None:
        """The consumer decided on the delivery `out` is still streaming to it before it was
        all sent: the rest is not sent, and the delivery ends with an abort (an aborted delivery
        is settled, transport §2.7.5), so that the link can carry the next one."""
        self.abort_out(out, -1)

    def abort_out(self, out: OutLink, delivery_id: int) -> None:
        """End the delivery open on `out` with an abort (transport §2.6.12; an aborted delivery
        is settled, §2.7.5) so that the link can carry the next one: nothing it holds may follow
        (holding.py), its record `delivery_id` (-1: none) leaves the session's map, and the link
        may take deliveries again."""
        out.streaming = None
        self.drop_held(out)
        link = out.link
        if alive(link) and link.out_delivery >= 0:
            link.abort()
            self.touched.touch(out.conn.engine)
        if delivery_id >= 0:
            maps = link.session.context
            if isinstance(maps, SessionMaps):
                record = maps.outbound.pop(delivery_id)
                if record is not None:
                    self.unsettled_out(record, out)
        self.consumer_ready(out)

    def consumer_ready(self, out: OutLink, now: float | None = None) -> None:
        """`out` may take deliveries again (forwarding.py sends them)."""
        raise NotImplementedError

    def drop_held(self, out: OutLink) -> None:
        """Forget the frames `out` holds (holding.py)."""
        raise NotImplementedError

    def _settle_consumer(self, out: OutLink, delivery_id: int, state: Any) -> None:
        """Settle the delivery `delivery_id` we sent on `out` (it is unsettled there)."""
        maps = out.link.session.context
        if isinstance(maps, SessionMaps):
            record = maps.outbound.pop(delivery_id)
            if record is not None:
                self.unsettled_out(record, out)
        if alive(out.link):
            self.dispose(out.link.session, SENDER, delivery_id, state, True)

    def _copy_outcome(self, copy: Copy, state: Any) -> None:
        if copy.done:
            return
        copy.done = True
        self.combine_outcome(copy.forward, state)

    def combine_outcome(self, fwd: Forward, state: Any) -> None:
        """One more of `fwd`'s copies has its outcome `state` (a Copy's, or one that left no
        record: multicast.py): the strongest so far is kept; after the last, the producer hears."""
        rank = _rank(state)
        if rank > fwd.best:
            fwd.best = rank
            fwd.state = state
        fwd.remaining -= 1
        if fwd.remaining <= 0:
            self.relay_outcome(fwd, fwd.state if fwd.best >= 0 else RELEASED)
            copies = fwd.copies
            if copies is not None:
                # Every copy has its outcome: the Forward and its copies refer to each other,
                # a cycle only the cyclic collector would free (and its young collections walk
                # every delivery in flight). Emptied, not None: it stays a multicast delivery.
                copies.clear()

    def relay_outcome(self, fwd: Forward, state: Any, settled: bool = True) -> bool:
        """Tell the producer the final outcome, settled if `settled` (the consumer settled, or
        the router decides), else unsettled (the consumer waits for the producer to settle).
        The router never settles first on a link with rcv-settle-mode second (§2.8.3).
        True when the producer was told unsettled: its settlement is awaited."""
        if fwd.done:
            return False
        fwd.done = True
        fwd.drop_frames()
        inl = fwd.in_link
        if inl is None or inl.gone:
            if inl is None and self.router_outcomes:  # a message of the router's own
                told = self.router_outcomes.pop(fwd, None)
                if told is not None:
                    told(state)
            return False
        _count(inl, state, fwd.entry)
        if self.flow_on:
            self.flow_outcome(fwd, inl, state, self.now)
        self._release_window(fwd)
        if fwd.presettled or not alive(inl.link):
            forget_inbound(fwd)
            return False
        fwd.state = state
        assert fwd.in_session is not None
        if not settled or inl.link.rcv_settle_mode == RCV_SECOND:
            fwd.outcome_sent = True  # settled once the producer has
            self.dispose(fwd.in_session, RECEIVER, fwd.in_id, state, False)
            return True
        # Written before it leaves the map: a failure in between leaves it there, done, with no
        # outcome sent, which the release after a failure reads as untold (router.core.mend).
        self.dispose(fwd.in_session, RECEIVER, fwd.in_id, state, True)
        forget_inbound(fwd)
        return False

    def _settle_producer(self, fwd: Forward) -> None:
        """The consumer settled after an outcome the producer was told unsettled."""
        inl = fwd.in_link
        if inl is None or inl.gone or not alive(inl.link) or fwd.in_session is None:
            return
        if inl.link.rcv_settle_mode == RCV_SECOND:
            return  # the producer settles first; nothing is left downstream to settle then
        fwd.outcome_sent = False
        self.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state, True)  # (then forgotten: as above)
        forget_inbound(fwd)

    def _producer_settled(self, fwd: Forward) -> None:
        inl = fwd.in_link
        if fwd.outcome_sent:  # the producer settles after our outcome
            fwd.outcome_sent = False
            if inl is not None and alive(inl.link) and fwd.in_session is not None \
                    and inl.link.rcv_settle_mode == RCV_SECOND:  # fmt: skip
                self.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state, True)  # now we settle too
            self._settle_downstream(fwd, fwd.state)  # the consumer learns the producer is done
            return
        # The producer settled before any outcome: it no longer cares. Unlink, and settle
        # what went downstream (the anchors do the same).
        self._release_window(fwd)
        fwd.in_link = None
        fwd.presettled = True
        self._settle_downstream(fwd, None)

    def producer_unlinked(self, fwd: Forward) -> None:
        """`fwd`'s producer went away: a consumer waiting for its settlement is settled now
        (nobody else would); anything else in flight carries on, its outcome unheard."""
        if fwd.outcome_sent:
            fwd.outcome_sent = False
            self._settle_downstream(fwd, fwd.state)

    def _settle_downstream(self, fwd: Forward, state: Any) -> None:
        """Settle what `fwd` sent downstream, if it is still unsettled there."""
        out = fwd.out
        if out is not None and fwd.out_id >= 0 and alive(out.link):
            maps = out.link.session.context
            if isinstance(maps, SessionMaps) and maps.outbound.pop(fwd.out_id) is not None:
                self.unsettled_out(fwd, out)
                self.dispose(out.link.session, SENDER, fwd.out_id, state, True)

    def unsettled_out(self, record: Forward | Copy, out: OutLink) -> None:
        """`record`, sent on `out`, is no longer unsettled there (the balanced load measures,
        the unsettled bound)."""
        out.outstanding -= 1
        out.conn.unsettled_out -= 1
        if out.stuck:
            self.bounds.settled(out)
        if out.neighbour is not None and type(record) is Forward:
            record.entry.settled_on(out)

    # --- failures -------------------------------------------------------------------------------

    def unroutable(self, fwd: Forward, state: Any = RELEASED) -> None:
        """Nowhere to go (or expired): released for the producer, or dropped if presettled."""
        entry = fwd.entry
        if fwd.presettled:
            entry.dropped += 1
            if fwd.in_link is not None:
                fwd.in_link.dropped += 1
            fwd.done = True
            fwd.drop_frames()
            self._release_window(fwd)
            forget_inbound(fwd)
        else:
            entry.released += 1
            self.relay_outcome(fwd, state)

    def fail_sent(self, out: OutLink) -> None:
        """`out` is gone: everything sent on it and still unsettled is in doubt (modified with
        delivery-failed, so the producer may resend)."""
        maps = out.link.session.context
        if not isinstance(maps, SessionMaps) or maps.outbound.empty:
            return
        for delivery_id, record in maps.outbound.items():
            if record.out is out:
                maps.outbound.pop(delivery_id)
                self.unsettled_out(record, out)
                if type(record) is Copy:
                    self._copy_outcome(record, DELIVERY_FAILED)
                else:
                    self.relay_outcome(record, DELIVERY_FAILED)


def _rank(state: Any) -> int:
    """The strength of a copy's outcome: rejected 3 > accepted 2 > modified 1 > released and
    anything else 0 (identity tests of the type: a dict keyed by type hashes it per copy)."""
    kind = type(state)
    if kind is _ACCEPTED:
        return 2
    if kind is _REJECTED:
        return 3
    if kind is _MODIFIED:
        return 1
    return 0


def _count(link: LinkCounts, state: Any, entry: AddressEntry | None = None) -> None:
    """Count outcome `state` on `link` and, for a producer's outcome, on its address `entry`
    (whose `released` counts the router's own releases, not consumers', so it is not bumped)."""
    kind = type(state)
    if kind is _ACCEPTED:
        link.accepted += 1
        if entry is not None:
            entry.accepted += 1
    elif kind is _RELEASED:
        link.released += 1
    elif kind is _MODIFIED:
        link.modified += 1
        if entry is not None:
            entry.modified += 1
    elif kind is _REJECTED:
        link.rejected += 1
        if entry is not None:
            entry.rejected += 1
