"""Producer credit, and the flush that writes what a batch of events decided.

Owns: each producer link's credit window (a producer may have `capacity` deliveries held by the
router; none while its address has no destination, regular or fallback; sized by bytes through
router.core.bounds), the slot a delivery frees when handed to a local consumer, and the flush at
the end of every batch: consumers below their unsettled bound resumed, dispositions written as
ranges (dispositions.py), producers' credit topped up, and quiescing (a graceful stop's first
step: no producer gets credit again, what it had is taken back).
The lowest layer of the forwarder (see forwarding.py).
Collaborators: Touched (engines with output), Bounds.
Must not touch: choosing destinations, sending transfers, outcomes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..amqp.session import Session
from .delivery import Forward
from .dispositions import Dispositions
from .flowcount import FlowCounting
from .links import InLink, alive

if TYPE_CHECKING:
    from .addressentry import AddressEntry
    from .bounds import Bounds
    from .touched import Touched


class ProducerCredit(FlowCounting):
    def __init__(self, touched: Touched, bounds: Bounds) -> None:
        super().__init__()
        self.touched = touched
        self.bounds = bounds
        self.now = 0.0  # the core's `now` (monotonic) of the batch being handled (set by the core)
        # Producers whose credit to look at in flush(), each once (InLink.credit_dirty marks
        # them: a set add per delivery was a hash and a probe per message)
        self._credit_dirty: list[InLink] = []
        self._dispositions = Dispositions()
        # The router is stopping (quiesce): no producer gets credit again, deliveries in flight
        # still finish (their outcomes flow back as usual).
        self.quiescing = False

    # --- the producers' credit windows ----------------------------------------------------------

    def credit_dirty(self, inl: InLink) -> None:
        if not inl.credit_dirty:
            inl.credit_dirty = True
            self._credit_dirty.append(inl)

    def _refresh_credit(self, inl: InLink) -> None:
        """The window: a producer may have `capacity` deliveries held by the router (waiting for
        consumer credit, on their way to another router, or unsettled there); a delivery handed
        to a local consumer no longer counts, that consumer's own credit bounds it (see
        handed_over). No credit while the address has no destination (nor a fallback one:
        fallback.py). Top up once a quarter of the window is used, so flows go out in batches
        while the producer still has most of its window to send with: the router looks only at
        the end of a batch of events (a read, up to 64 KiB of transfers), and topped up at half,
        a producer at 1,000 credit often ran dry before the flow reached it (bench/README.md,
        "Topping credit up at a quarter": 5 % of scenario 1's rate). A
        producer of large messages gets a window sized by bytes (router.core.bounds.window), and
        credit beyond it is taken back (a lower link-credit, transport §2.6.7: what was in
        flight is still read)."""
        link = inl.link
        if inl.gone or not alive(link):
            return
        if self.quiescing:
            self._take_back_credit(inl)
            return
        entry = inl.entry
        if entry is not None and not entry.has_destination and not (
            entry.fallback_enabled and self._fallback_credit(inl, entry)
        ):
            if link.credit > 0:
                link.flow(0, drain=True)
                self.touched.touch(inl.conn.engine)
                if inl.zero_credit_since is None:
                    inl.zero_credit_since = self.now
            return
        window = inl.capacity
        bounds = self.bounds
        if inl.size_hint or bounds.nearly_full:
            window = bounds.window(inl)
        desired = window - inl.held
        if desired > link.credit:
            if link.credit <= window - window // 4:
                link.flow(desired)
                self.touched.touch(inl.conn.engine)
                inl.zero_credit_since = None
        elif link.credit > desired and (inl.size_hint or bounds.nearly_full):  # more credit than bytes
            link.flow(max(0, desired))
            self.touched.touch(inl.conn.engine)
            if desired <= 0 and inl.zero_credit_since is None:
                inl.zero_credit_since = self.now

    def _fallback_credit(self, inl: InLink, entry: AddressEntry) -> bool:
        """Whether `inl` may have credit for the fallback destinations of `entry` (fallback.py)."""
        raise NotImplementedError

    def quiesce(self, in_links: list[InLink]) -> None:
        """Stop granting credit to producers (and to routers sending to us): from now on
        _refresh_credit only takes credit back. `in_links`: every link we receive on."""
        self.quiescing = True
        for inl in in_links:
            if not inl.gone and alive(inl.link):
                self._take_back_credit(inl)

    def _take_back_credit(self, inl: InLink) -> None:
        """Set the link's credit to 0 with a flow. The receiver may lower link-credit at any
        time (transport §2.6.7); transfers the sender wrote before the flow reached it are still
        taken (the engine accepts them up to the delivery-limit we granted) and routed like any
        other. Not a drain: drain asks the sender to use up its credit (send more, or advance
        delivery-count), and the point here is that it sends nothing more."""
        link = inl.link
        if link.credit > 0:
            link.flow(0)
            self.touched.touch(inl.conn.engine)
            if inl.zero_credit_since is None:
                inl.zero_credit_since = self.now

    def handed_over(self, fwd: Forward) -> None:
        """`fwd` went, whole and unsettled, to a consumer of this router: its slot in the
        producer's window is free again before the outcome comes back. The consumer's credit
        bounds how many such deliveries it holds, so the producer's pace is no longer tied to
        the consumer's acknowledgement round trip (with the anchors' rule, window = unsettled,
        a producer at the default 250 idles while dispositions travel). Deliveries sent to
        another router keep their slot until settled: that is the mesh's end-to-end
        backpressure."""
        inl = fwd.in_link
        if fwd.holds_slot and inl is not None and not inl.gone:
            fwd.holds_slot = False
            inl.held -= 1
            self.credit_dirty(inl)

    def _release_window(self, fwd: Forward) -> None:
        """`fwd` is finished: it is no longer in flight (nor in the window, if still there)."""
        inl = fwd.in_link
        if inl is not None and not inl.gone:
            inl.inflight -= 1
            if fwd.holds_slot:
                inl.held -= 1
            self.credit_dirty(inl)
        fwd.holds_slot = False

    # --- dispositions ---------------------------------------------------------------------------

    def dispose(self, session: Session, role: bool, delivery_id: int, state: Any, settled: bool) -> None:
        self._dispositions.add(session, role, delivery_id, state, settled)

    def flush(self) -> None:
        """Write batched dispositions as ranges, then top up producers' credit."""
        bounds = self.bounds
        if bounds.resumable:  # consumers that fell below their unsettled bound: send to them
            bounds.resume()  # first, so that outcomes this gives are written with the rest
        for batch in self._dispositions.take():
            if batch.write():
                self.touched.touch(batch.session.conn)
        if self._credit_dirty:
            dirty, self._credit_dirty = self._credit_dirty, []
            for inl in dirty:
                inl.credit_dirty = False
                self._refresh_credit(inl)
