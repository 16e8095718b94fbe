"""Outcomes and settlement, end to end: from the consumer back to the producer.

Owns: relaying a consumer's disposition to the producer (anycast: outcomes, and states the
consumer sets without settling, such as received), settlement both ways (an outcome the consumer
does not settle goes to a producer in rcv-settle-mode first settled, and the consumer's delivery
is settled at once, transport §2.7.5; to a producer that settles first, rcv-settle-mode second or
the router before on a data link, unsettled, and the consumer's delivery waits for its
settlement: the "three-ack" pattern; docs/mesh.md, "Outcomes and settlement"), combining
multicast copies (rejected > accepted > modified > released, settled upstream when every copy is
terminal), producer-side settlement (rcv-settle-mode second, sender settling first), and which
dispositions go out (batched by credit.py's flush). What an outcome counts is outcomes.py's;
the failures reported (never sent: released; sent but unsettled when the consumer went away:
modified with delivery-failed) and aborts are the next layer's (failures.py).
A layer of the forwarder (see forwarding.py); the producers' credit and the flush are credit.py's.
Must not touch: choosing destinations or sending transfers (sending.py, multicast.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from ..amqp.events import DispositionReceived
from ..amqp.messaging import RELEASED, is_terminal
from ..amqp.performatives import RCV_SECOND, RECEIVER, SENDER
from ..amqp.serial import serial_count, serial_ids_in
from .credit import ProducerCredit
from .delivery import Copy, Forward, SessionMaps, forget_inbound
from .links import OutLink, alive
from .outcomes import count_outcome, outcome_rank

if TYPE_CHECKING:
    from .linkrelay import Relay


def _settles_second(fwd: Forward, link_mode: int) -> bool:
    """Whether the producer settles `fwd` first (rcv-settle-mode second, transport §2.8.3): its
    link's mode, unless its transfer asked first (§2.7.5)."""
    return link_mode == RCV_SECOND and not fwd.settles_first


# A disposition's range walked natively (iterating the range serial_ids_in returns boxes every
# delivery-id, an allocation each above 256).
_MASK: Final = 0xFFFFFFFF  # serial.SERIAL_MASK, as a literal: compiled, a constant in the code


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
        # Native ints (i64): compiled, each id of a range is plain arithmetic, not a boxed int.
        first: i64 = event.first
        last: i64 = event.last
        if event.role is RECEIVER:  # a consumer's outcome or state for deliveries we sent it
            outbound = maps.outbound
            if outbound.empty:
                return
            state = event.state
            count: i64 = serial_count(first, last)
            if event.settled:  # the consumer is done with them: so are we
                if count <= 2 * len(outbound) + 64:  # (serial_ids_in's rule) no boxed ids
                    for i in range(count):
                        record = outbound.pop((first + i) & _MASK)
                        if record is not None:
                            self.consumer_outcome(record, state)
                else:
                    for delivery_id in serial_ids_in(first, last, outbound):
                        record = outbound.pop(delivery_id)
                        if record is not None:
                            self.consumer_outcome(record, state)
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
            settled_count: i64 = serial_count(first, last)
            if settled_count <= 2 * len(inbound) + 64:  # (serial_ids_in's rule)
                for i in range(settled_count):
                    fwd = inbound.pop((first + i) & _MASK)
                    if fwd is not None:
                        self._producer_settled(fwd)
            else:
                for delivery_id in serial_ids_in(first, last, inbound):
                    fwd = inbound.pop(delivery_id)
                    if fwd is not None:
                        self._producer_settled(fwd)

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
                count_outcome(out, state)
                if self.flow_on:
                    self.flow_settled(out, record.sent_at, self.now)
                self._copy_outcome(record, state)
            return
        assert isinstance(record, Forward)
        if not record.done:
            count_outcome(out, state)
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
        outcome goes to a producer in rcv-settle-mode first settled, and the router then settles
        the consumer's delivery at once: a first-mode receiver must not wait for the sender to
        settle (transport §2.7.5, §2.8.3). To a producer that settles first (rcv-settle-mode
        second, or the router before on a data link: hop by hop, the ingress router decides) it
        goes unsettled, and the consumer's delivery stays unsettled until that producer settles
        (the consumer then knows it will not be sent again). A non-terminal state (received, or
        any other the consumer sends) is passed on as it is, unsettled."""
        out = record.out
        assert out is not None
        terminal = is_terminal(state)
        if type(record) is Copy:
            # Multicast combines outcomes: the copy is settled here once terminal (non-terminal
            # states are not combined, as the anchors).
            if terminal and not record.done:
                self._settle_consumer(out, delivery_id, state)
                count_outcome(out, state)
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
        count_outcome(out, state)
        if self.flow_on:
            self.flow_settled(out, record.sent_at, self.now)
        if not self.relay_outcome(record, state, False):
            # Settled to the producer (rcv-settle-mode first), or no producer will settle it:
            # as when the producer settles (_producer_settled), the consumer's is settled now.
            self._settle_downstream(record, state)

    def end_stream(self, out: OutLink) -> None:
        """End the delivery still streaming on `out` with an abort (failures.py)."""
        raise NotImplementedError

    def _settle_consumer(self, out: OutLink, delivery_id: int, state: Any) -> None:
        """Settle the delivery `delivery_id` we sent on `out`, if it is still unsettled there
        (a Forward's or a multicast Copy's)."""
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
        rank = outcome_rank(state)
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
        """Tell the producer the final outcome. `settled` False: the consumer did not settle;
        the outcome then goes unsettled only to a producer that settles first (rcv-settle-mode
        second, or a data link from another router), else settled, like any other. The router
        never settles first on a link with rcv-settle-mode second (§2.8.3).
        True when the producer was told unsettled: its settlement is awaited (the caller then
        keeps the consumer's delivery unsettled; else it settles it: nobody else will)."""
        if fwd.done:
            return False
        fwd.done = True
        # Once per message: the small steps below are written out here, where each call
        # (drop_frames, _release_window, dispose, forget_inbound) cost more than its body.
        fwd.first = fwd.rest = None  # (drop_frames)
        inl = fwd.in_link
        if inl is None or inl.gone:
            if inl is None and self.router_outcomes:  # a message of the router's own
                told = self.router_outcomes.pop(fwd, None)
                if told is not None:
                    told(state)
            return False
        count_outcome(inl, state, fwd.entry)
        if self.flow_on:
            self.flow_outcome(fwd, inl, state, self.now)
        inl.inflight -= 1  # (_release_window)
        if fwd.holds_slot:
            inl.held -= 1
            fwd.holds_slot = False
        self.credit_dirty(inl)
        link = inl.link
        session = fwd.in_session
        if fwd.presettled or session is None or not alive(link):
            forget_inbound(fwd)
            return False
        fwd.state = state
        # Unsettled to the producer only where it settles first: rcv-settle-mode second, or the
        # data link of the router before (unsettled hop by hop: the ingress router decides for
        # its client). A client in mode first gets it settled: a first-mode receiver settles
        # without waiting for the sender (transport §2.7.5, §2.8.3). Tested in that order: the
        # consumer settled, the usual case, costs what it did.
        if _settles_second(fwd, link.rcv_settle_mode) or (not settled and inl.peer is not None):
            fwd.outcome_sent = True  # settled once the producer has
            self._dispositions.add(session, RECEIVER, fwd.in_id, state, False)
            return True
        # Written before it leaves the map: a failure in between leaves it there, done, with no
        # outcome sent, which the release after a failure reads as untold (router.core.mend).
        self._dispositions.add(session, RECEIVER, fwd.in_id, state, True)
        maps = session.context  # (forget_inbound)
        if isinstance(maps, SessionMaps):
            maps.inbound.pop(fwd.in_id)
        return False

    def _settle_producer(self, fwd: Forward) -> None:
        """The consumer settled after an outcome the producer was told unsettled."""
        inl = fwd.in_link
        if inl is None or inl.gone or not alive(inl.link) or fwd.in_session is None:
            return
        if _settles_second(fwd, inl.link.rcv_settle_mode):
            return  # the producer settles first; nothing is left downstream to settle then
        fwd.outcome_sent = False
        self.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state, True)  # (then forgotten: as above)
        forget_inbound(fwd)

    def asked_first(self, fwd: Forward) -> None:
        """A frame of `fwd` asked rcv-settle-mode first (transport §2.7.5: the receiver settles
        once the delivery has arrived, without waiting for the sender): from now on it settles
        with its outcome; one told unsettled already (its link's mode second) is settled now."""
        fwd.settles_first = True
        if not fwd.outcome_sent:
            return
        fwd.outcome_sent = False
        inl = fwd.in_link
        if inl is not None and alive(inl.link) and fwd.in_session is not None:
            self.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state, True)
        self._settle_downstream(fwd, fwd.state)
        forget_inbound(fwd)

    def _producer_settled(self, fwd: Forward) -> None:
        inl = fwd.in_link
        if fwd.outcome_sent:  # the producer settles after our outcome
            fwd.outcome_sent = False
            if inl is not None and alive(inl.link) and fwd.in_session is not None \
                    and _settles_second(fwd, inl.link.rcv_settle_mode):  # fmt: skip
                self.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state, True)  # now we settle too
            self._settle_downstream(fwd, fwd.state)  # the consumer learns the producer is done
            return
        # The producer settled before any outcome: it no longer cares. Unlink, and settle
        # what went downstream (the anchors do the same).
        self._release_window(fwd)
        fwd.in_link = None
        fwd.presettled = True
        self._settle_downstream(fwd, None)

    def _settle_downstream(self, fwd: Forward, state: Any) -> None:
        """Settle what `fwd` sent downstream, if it is still unsettled there."""
        out = fwd.out
        if out is not None and fwd.out_id >= 0 and alive(out.link):
            self._settle_consumer(out, fwd.out_id, state)

    def unsettled_out(self, record: Forward | Copy, out: OutLink) -> None:
        """`record`, sent on `out`, is no longer unsettled there (the balanced load measures,
        the unsettled bound)."""
        out.outstanding -= 1
        out.conn.unsettled_out -= 1
        if out.stuck:
            self.bounds.settled(out)
        if out.neighbour is not None and type(record) is Forward:
            record.entry.settled_on(out)
