"""What a failure of the core left half done in the records other connections still hold,
mended once the failed connection is released (router.core.release calls it, after a failure
only).

    Mend(forwarder, bounds, table, connections, touched).run(failed_state)

Why. An exception out of RouterCore.handle stops the core between two steps of one operation,
and the operations of one connection's input reach the records of others: a delivery taken from
a consumer's waiting queue and not yet sent; a multicast delivery whose copies were being made
(the first sent, the rest neither sent nor queued); a transfer written in part on a consumer's
link before the failure, so that the link has a delivery that never ends; an outcome decided
(the delivery marked done) and never written to its producer; a counter moved for a delivery
whose record was not. Releasing the failed connection's own links cannot see these: they belong
to the survivors. Nothing leads to them any more, so nothing would ever answer them.

Owns, after a failure: (1) a survivor's consumer link with a delivery left open by a transfer
written in part is told the delivery is aborted (transport §2.6.12: the receiver discards it,
and an aborted delivery is settled, §2.7.5), so the link carries the next one; (2) every
delivery in flight that no record leads to any more (neither sent, nor waiting in a queue, nor
arriving) gets its outcome: released if it was never sent, modified with delivery-failed if it
was sent in whole or in part (the consumer may have it); one whose outcome was decided but never
written has it written; (3) the counts kept for others are counted again from the records: each
producer link's deliveries in flight and held in its window, each consumer link's and
connection's unsettled deliveries (and its unsettled bound), each connection's bytes waiting.
It walks every queue, every session's deliveries and every link: it runs only after a failure.
Must not touch: the failed connection's own links (release.py), what an outcome means
(settlement.py, failures.py: this calls their relay, copy, abort and release operations, as a
consumer's loss does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp.messaging import RELEASED
from ..amqp.performatives import RECEIVER
from .delivery import Copy, Forward, SessionMaps, forget_inbound
from .failures import DELIVERY_FAILED
from .links import alive

if TYPE_CHECKING:
    from ..amqp.connection import Connection
    from .bounds import Bounds
    from .connections import ConnState
    from .forwarding import Forwarder
    from .links import InLink, OutLink
    from .table import AddressTable
    from .touched import Touched


class Mend:
    """See the module docstring."""

    def __init__(
        self, forwarder: Forwarder, bounds: Bounds, table: AddressTable, connections: dict[Connection, ConnState],
        touched: Touched,
    ) -> None:  # fmt: skip
        self.forwarder = forwarder
        self.bounds = bounds
        self.table = table
        self.connections = connections
        self.touched = touched

    def run(self, failed: ConnState) -> None:
        states = list(self.connections.values())
        self._open_transfers(states)
        self._orphans(states)
        self._recount(states, failed)

    # --- (1) transfers left open --------------------------------------------------------------

    def _open_transfers(self, states: list[ConnState]) -> None:
        """A consumer link whose engine still has a delivery open (more=true written) that
        nothing will finish: no record streams it, or its record's producer will send no more
        of it (done, complete, or no longer arriving: the producer's end was cut short before
        it aborted the delivery downstream). Abort it; the delivery, never whole there, is
        released for its producer (the consumer discards it)."""
        forwarder = self.forwarder
        for state in states:
            for out in list(state.out_links):
                link = out.link
                record = out.streaming
                if link.out_delivery < 0 and record is None:
                    continue
                if record is not None:
                    fwd = _forward(record)
                    inl = fwd.in_link
                    if not fwd.done and not fwd.complete and inl is not None and not inl.gone and inl.streaming is fwd:
                        continue  # the rest is still coming
                forwarder.abort_out(out, link.out_delivery)
                if record is not None:
                    _released(forwarder, record)

    # --- (2) deliveries nothing leads to --------------------------------------------------------

    def _orphans(self, states: list[ConnState]) -> None:
        forwarder = self.forwarder
        queued: set[Forward] = set()
        queued_copies: set[Copy] = set()
        for entry in self.table.entries.values():
            queued.update(entry.pending)
        for state in states:
            for out in state.out_links:
                for item in out.pending or ():
                    if type(item) is Copy:
                        queued_copies.add(item)
                    else:
                        assert isinstance(item, Forward)
                        queued.add(item)
        for state in states:
            for session in state.engine.sessions:
                maps = session.context
                if not isinstance(maps, SessionMaps) or maps.inbound.empty:
                    continue
                for _, fwd in list(maps.inbound.items()):
                    if fwd.done:
                        if not fwd.outcome_sent:  # decided, never written: written now
                            _tell(forwarder, fwd)
                        continue
                    self._orphan(fwd, queued, queued_copies)
        # Presettled deliveries are in no session's map: the queues and streams lead to them.
        for fwd in list(queued) + [c.forward for c in queued_copies] + _streams(states):
            if not fwd.done:
                self._orphan(fwd, queued, queued_copies)

    def _orphan(self, fwd: Forward, queued: set[Forward], queued_copies: set[Copy]) -> None:
        forwarder = self.forwarder
        if fwd.copies is not None:
            for copy in fwd.copies:
                if copy.done or copy in queued_copies or copy.out.streaming is copy or _recorded(copy):
                    continue
                if copy.sent_frames == 0:
                    forwarder._copy_failed(copy)  # never sent: released
                else:
                    forwarder._copy_failed(copy, DELIVERY_FAILED)
            # A copy the failure came before has no record (multicast.py makes them as it goes):
            # never sent, it counts as released (rank 0), and the outcome waits for no more
            # than the copies there are.
            fwd.remaining = sum(1 for copy in fwd.copies if not copy.done)
            if not fwd.done and all(copy.done for copy in fwd.copies):  # combined, never relayed
                if fwd.presettled:
                    forwarder._presettled_sent(fwd)
                else:
                    forwarder.relay_outcome(fwd, fwd.state if fwd.best >= 0 else RELEASED)
            return
        out = fwd.out
        if out is None:
            inl = fwd.in_link
            if fwd in queued or (inl is not None and inl.streaming is fwd and fwd.entry.local is not None):
                return  # waiting, or arriving for an in-process endpoint
            forwarder._wait_bytes(fwd, -1)
            forwarder.unroutable(fwd)  # never sent: released
        elif out.streaming is not fwd and not _recorded(fwd):
            _fail(forwarder, fwd)  # sent, and its record of it lost: in doubt

    # --- (3) the counts ---------------------------------------------------------------------------

    def _recount(self, states: list[ConnState], failed: ConnState) -> None:
        forwarder, bounds = self.forwarder, self.bounds
        live: set[Forward] = set()
        for entry in self.table.entries.values():
            live.update(f for f in entry.pending if not f.done)
        outstanding: dict[OutLink, int] = {}
        for state in states:
            for out in state.out_links:
                outstanding[out] = 0
                live.update(i if type(i) is Forward else i.forward for i in out.pending or ())  # type: ignore[union-attr]
            for session in state.engine.sessions:
                maps = session.context
                if not isinstance(maps, SessionMaps):
                    continue
                live.update(f for _, f in maps.inbound.items() if not f.done)
                for _, record in maps.outbound.items():
                    if record.out in outstanding:
                        outstanding[record.out] += 1
        live.update(_streams(states))
        counts: dict[InLink, list[int]] = {}
        held: dict[ConnState, int] = {failed: 0}
        for fwd in live:
            if fwd.done:
                continue
            inl = fwd.in_link
            if inl is not None and not inl.gone:
                count = counts.setdefault(inl, [0, 0])
                count[0] += 1
                count[1] += fwd.holds_slot
            if fwd.waiting and fwd.in_session is not None:
                conn = fwd.in_session.conn.context
                if conn is not None:
                    held[conn] = held.get(conn, 0) + fwd.size
        for state in states:
            for inl in state.in_links:
                inflight, slots = counts.get(inl, (0, 0))
                if (inl.inflight, inl.held) != (inflight, slots):
                    inl.inflight, inl.held = inflight, slots
                    forwarder.credit_dirty(inl)
            unsettled = 0
            for out in state.out_links:
                out.outstanding = outstanding[out]
                unsettled += out.outstanding
            state.unsettled_out = unsettled
            held.setdefault(state, 0)
            for out in state.out_links:
                if out.stuck or state.stuck:
                    bounds.settled(out)  # below the margin again: it takes deliveries
                elif out.outstanding >= out.unsettled_limit or unsettled >= state.unsettled_limit:
                    bounds.reached(out)
        # Links stuck now: a consumer's end cut short may not have taken its link off the count.
        bounds.stuck_now = sum(1 for state in states for out in state.out_links if out.stuck)
        for conn, nbytes in held.items():
            if conn.buffered_bytes != nbytes:
                bounds.hold(conn, nbytes - conn.buffered_bytes)


def _forward(record: Forward | Copy) -> Forward:
    return record.forward if type(record) is Copy else record  # type: ignore[return-value]


def _streams(states: list[ConnState]) -> list[Forward]:
    """The deliveries arriving now, and those being sent now, on the survivors' links."""
    found: list[Forward] = []
    for state in states:
        for inl in state.in_links:
            if inl.streaming is not None:
                found.append(inl.streaming)
        for out in state.out_links:
            if out.streaming is not None:
                found.append(_forward(out.streaming))
    return found


def _recorded(record: Forward | Copy) -> bool:
    """Whether `record` is listed as sent and unsettled on its consumer's session."""
    out = record.out
    if out is None or record.out_id < 0:
        return False
    maps = out.link.session.context
    return isinstance(maps, SessionMaps) and maps.outbound.get(record.out_id) is record


def _fail(forwarder: Forwarder, record: Forward | Copy) -> None:
    """A delivery sent (in whole or in part) whose fate is unknown."""
    if type(record) is Copy:
        forwarder._copy_failed(record, DELIVERY_FAILED)
        return
    assert isinstance(record, Forward)
    if record.presettled:
        forwarder._presettled_sent(record)
    else:
        forwarder.relay_outcome(record, DELIVERY_FAILED)


def _released(forwarder: Forwarder, record: Forward | Copy) -> None:
    """A delivery aborted on its way out: it never reached the consumer whole."""
    if type(record) is Copy:
        if not record.done:
            forwarder._copy_failed(record)
        return
    assert isinstance(record, Forward)
    if not record.done:
        forwarder._wait_bytes(record, -1)
        forwarder.unroutable(record)


def _tell(forwarder: Forwarder, fwd: Forward) -> None:
    """`fwd`'s outcome was decided and the failure came before it was written."""
    inl = fwd.in_link
    forget_inbound(fwd)
    if inl is not None and not inl.gone and alive(inl.link) and fwd.in_session is not None:
        forwarder.dispose(fwd.in_session, RECEIVER, fwd.in_id, fwd.state or DELIVERY_FAILED, True)
