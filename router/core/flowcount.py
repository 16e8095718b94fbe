"""What flow records need from the hot path: bytes, the two duration histograms, hop samples.

Owns: counting, while flow records are on (`flow_on`), message bytes per link and address,
each delivery's residence (first frame arrived -> sent on) and time to settlement (sent on ->
outcome) into its links' log2 histograms (router.flow.hist's buckets: the bit length of whole
microseconds, capped at 31), choosing 1 in `sample_one_in` deliveries for a hop record, and
the finished hop samples (bounded) that router.flow.recorder takes. With flow records off
each hook costs the caller one attribute test. Durations are differences of the core's `now`
(one clock, this router's: docs/flow-records.md).
The lowest layer of the forwarder (see forwarding.py): the layers above call its hooks.
Must not touch: routing, credit, outcomes themselves.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..amqp.messaging import Accepted, Modified, Rejected, Released

if TYPE_CHECKING:
    from .delivery import Forward
    from .links import InLink, LinkCounts, OutLink

LAST_BUCKET: Final = 31
HOPS_MAX: Final = 10_000  # finished hop samples held between two takes (then dropped, counted)

# (trace_id, ingress, address, prev, next, residence_us, settle_us, outcome)
HopSample = tuple[str, str, str, "str | None", "str | None", int, "int | None", "str | None"]

_OUTCOMES: Final[dict[type, str]] = {Accepted: "accepted", Rejected: "rejected", Released: "released", Modified: "modified"}
# A module constant: mypyc keeps it in a C static, where the imported name would be looked up
# in the module's dict on every outcome (as outcomes.py's).
_RELEASED: Final = Released


class RecordCounts(Protocol):
    """What management shows of the records (router.flow.records.Emitter)."""

    emitted: int  # records sent or written
    dropped: int  # records dropped: the buffer was full


def _bucket(seconds: float) -> int:
    """router.flow.hist.bucket(int(seconds * 1e6)) on native floats: compiled, int() and
    bit_length() would box an integer and call a method for every duration."""
    us = seconds * 1_000_000
    if us < 1.0:
        return 0
    index = 1
    limit = 2.0
    while us >= limit and index < LAST_BUCKET:  # (durations of microseconds to milliseconds: 1 to 10 rounds)
        index += 1
        limit *= 2.0
    return index


class FlowCounting:
    def __init__(self) -> None:
        self.flow_on = False
        self.flow_router_id = ""
        self.sample_one_in = 0  # 0: no sampled hops (traced messages still get one)
        self._sample_left = 0
        self.hops: list[HopSample] = []
        self.hops_dropped = 0
        # The records' counts (router.flow's emitter), for management beside hops_dropped.
        self.flow_counts: RecordCounts | None = None
        self._trace_prefix = os.urandom(6).hex()
        self._trace_seq = 0

    def enable_flow(self, sample_one_in: int, router_id: str, counts: RecordCounts) -> None:
        """Start counting for flow records (router.flow turns it on when configured)."""
        self.flow_on = True
        self.flow_counts = counts
        self.flow_router_id = router_id
        self.sample_one_in = sample_one_in
        self._sample_left = sample_one_in

    def take_hops(self) -> list[HopSample]:
        hops, self.hops = self.hops, []
        return hops

    def new_trace_id(self) -> str:
        """Unique in the mesh: this router's random prefix (fresh at each start) and a count."""
        self._trace_seq += 1
        return f"{self._trace_prefix}-{self._trace_seq:x}"

    # --- hooks (called only while flow_on) -------------------------------------------------------

    def flow_arrived(self, inl: InLink, fwd: Forward, size: int, now: float, trace: str | None) -> None:
        """A delivery's first frame arrived (`trace`: a trace id it carries, or None)."""
        fwd.arrived_at = now
        inl.bytes += size
        entry = fwd.entry
        entry.bytes += size
        if entry.flow_records:  # the records' own traffic, counted apart too
            inl.records += 1
            inl.records_bytes += size
        if trace is not None:
            fwd.hop = trace
        elif self.sample_one_in and inl.peer is None:
            # Sampled where it enters the mesh only: its trace id then follows it to every
            # router it crosses, so the hop records form its path.
            self._sample_left -= 1
            if self._sample_left <= 0:
                self._sample_left = self.sample_one_in
                fwd.hop = self.new_trace_id()

    def flow_more_bytes(self, inl: InLink, fwd: Forward, size: int) -> None:
        inl.bytes += size
        fwd.entry.bytes += size
        if fwd.entry.flow_records:
            inl.records_bytes += size

    def flow_sent(self, fwd: Forward, out: OutLink, now: float) -> None:
        """`fwd` went to `out` (anycast)."""
        fwd.sent_at = now
        out.bytes += fwd.arrived
        if fwd.entry.flow_records:
            out.records += 1
            out.records_bytes += fwd.arrived
        if fwd.arrived_at:  # (not a message of the router's own)
            index = _bucket(now - fwd.arrived_at)
            out.residence[index] += 1
            fwd.entry.residence[index] += 1
            inl = fwd.in_link
            if inl is not None:
                inl.residence[index] += 1
        if fwd.hop is not None and fwd.presettled:  # no outcome will follow
            self._hop(fwd, out.neighbour, now, None)

    def flow_copy_sent(self, fwd: Forward, out: OutLink, now: float) -> None:
        """A multicast copy of `fwd` went to `out`; the first copy counts for the producer's link."""
        out.bytes += fwd.arrived
        if fwd.entry.flow_records:
            out.records += 1
            out.records_bytes += fwd.arrived
        if fwd.arrived_at:
            index = _bucket(now - fwd.arrived_at)
            out.residence[index] += 1
            if not fwd.sent_at:
                fwd.entry.residence[index] += 1
                inl = fwd.in_link
                if inl is not None:
                    inl.residence[index] += 1
        if not fwd.sent_at:
            fwd.sent_at = now

    def flow_settled(self, link: LinkCounts, sent_at: float, now: float) -> None:
        """An outcome came for a delivery sent at `sent_at` (0.0: never sent)."""
        if sent_at:
            link.settle[_bucket(now - sent_at)] += 1

    def flow_outcome(self, fwd: Forward, inl: InLink, state: Any, now: float) -> None:
        """The producer's link learns `fwd`'s final outcome."""
        if type(state) is _RELEASED:  # (the address's `released` counts the router's own only)
            fwd.entry.released_told += 1
        sent_at = fwd.sent_at
        if sent_at:
            index = _bucket(now - sent_at)
            inl.settle[index] += 1
            fwd.entry.settle[index] += 1
            if fwd.hop is not None and not fwd.presettled and fwd.copies is None:  # (anycast)
                out = fwd.out
                self._hop(fwd, out.neighbour if out is not None else None, now, state)

    def _hop(self, fwd: Forward, next_router: str | None, now: float, state: Any) -> None:
        hop = fwd.hop
        assert hop is not None
        if len(self.hops) >= HOPS_MAX:
            self.hops_dropped += 1
            return
        meta = fwd.meta
        ingress = meta.ingress if meta is not None and meta.ingress else self.flow_router_id
        prev = meta.came_from if meta is not None else None
        residence = int((fwd.sent_at - fwd.arrived_at) * 1_000_000) if fwd.arrived_at else 0
        settle = int((now - fwd.sent_at) * 1_000_000) if state is not None else None
        outcome = _OUTCOMES.get(type(state)) if state is not None else None
        self.hops.append((hop, ingress, fwd.entry.address, prev, next_router, max(0, residence),
                          None if settle is None else max(0, settle), outcome))  # fmt: skip
