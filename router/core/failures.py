"""Failures: what the producer and the consumer hear when a delivery cannot go on as it was.

Owns: a delivery with nowhere to go (released for the producer, or dropped when presettled:
`unroutable`), one too large for every consumer of its address (rejected with
message-size-exceeded: `too_large`), the deliveries still unsettled on a consumer link that went away (modified with
delivery-failed, so that the producer may resend: `fail_sent`), a consumer left waiting for the
settlement of a producer that went away (`producer_unlinked`), and ending a delivery on a
consumer link before all of it was sent, with an abort (`abort_out`, `end_stream`: an aborted
delivery is settled, transport §2.7.5). None of it runs per message while deliveries go where
they are sent; the outcomes are relayed by settlement.py.
A layer of the forwarder (see forwarding.py): settlement.py < failures.py < sending.py.
Must not touch: which outcome a consumer's disposition means (settlement.py), choosing
destinations or sending transfers (sending.py, multicast.py).
"""

from __future__ import annotations

from typing import Any, Final

from ..amqp.messaging import RELEASED, Modified
from . import sizelimits
from .delivery import Copy, Forward, SessionMaps, forget_inbound
from .links import OutLink, alive
from .settlement import Settlement

DELIVERY_FAILED: Final = Modified(delivery_failed=True)


class Failures(Settlement):
    """Failure reports and aborts (see the module docstring)."""

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

    def producer_unlinked(self, fwd: Forward) -> None:
        """`fwd`'s producer went away: a consumer waiting for its settlement is settled now
        (nobody else would); anything else in flight carries on, its outcome unheard."""
        if fwd.outcome_sent:
            fwd.outcome_sent = False
            self._settle_downstream(fwd, fwd.state)

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

    def too_large(self, fwd: Forward) -> None:
        """No consumer of `fwd`'s address can take it: every one's max-message-size is below
        its size (sizelimits.py). Rejected with amqp:link:message-size-exceeded, naming its size
        and address (a presettled one is dropped and counted, as any it cannot deliver). Not
        released: a producer told released may send it again, to the same consumers, for ever;
        rejected tells it the truth, in transport §2.7.3's own condition."""
        if fwd.presettled:
            self.unroutable(fwd)
        else:
            self.relay_outcome(fwd, sizelimits.refusal(fwd))

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
