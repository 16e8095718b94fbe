"""DeliveryMap: the records of one session's deliveries in one direction, by delivery-id.

Owns: the lookup every disposition and settlement does (SessionMaps.inbound and .outbound).
Delivery-ids are serial numbers (RFC 1982, transport §2.8.5 and §2.7.5) handed out one after
another per session, and most deliveries are settled roughly in the order they were sent: so the
records sit in a ring indexed by `id - base`, which costs no hashing and no boxing of the id (a
dict keyed by delivery-id was a fifth of the router's per-message instructions), a circular list
of a power of two slots: a put or pop is a store into it, where a list appended to and cut at its
front was reallocated as batches came and went. Records settle out of order fine (their slot is
emptied). One that lingers while thousands after it come and go (a consumer that never settles
one delivery) moves to a dict of stragglers, so the ring's span stays bounded whatever traffic
passes it: memory follows the deliveries held, not the traffic (a ring of more than RING_KEPT
slots gives them back as its span falls below a quarter of them, and an emptied ring of more
than RING_EMPTY_KEPT keeps a quarter of its slots).
Must not touch: what the records are (router.core.delivery), settlement rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from mypy_extensions import i64

# Delivery-ids are uint32 serial numbers (serial.SERIAL_MASK). A literal: compiled, a Final
# literal is a constant in the code, one set from another module's is a boxed static loaded and
# tag-checked at every use.
MASK: Final = 0xFFFFFFFF
BEHIND: Final = 0x80000000  # an offset from the ring's base this large is an id before the base
SPAN_MAX: Final = 8192  # the ring's span in ids; older records beyond it become stragglers
RING_MIN: Final = 16  # slots of a new ring (a power of two, as every ring's capacity)
RING_KEPT: Final = 1024  # a ring with more slots gives them back when its span falls below a quarter
# A ring with more slots than this that empties having spanned no more than a quarter of them
# since it last emptied keeps a quarter: a session whose traffic shrank (or stopped after a
# burst) gives back what the burst took, one batch at a time, while one that streams and empties
# between batches of about its size keeps its slots (shrinking at every emptying, such a ring
# regrew twice per batch: ~70 instructions a message).
RING_EMPTY_KEPT: Final = 64


class DeliveryMap:
    """A mapping of delivery-id to record (never None) with the dict operations the core uses;
    as a collection of delivery-ids it serves serial_ids_in, which bounds a disposition's walk."""

    __slots__ = (
        "_slots", "_mask", "_head", "_base", "_span", "_shrink_below", "_count", "_stragglers", "_span_max", "_peak",
    )  # fmt: skip

    def __init__(self, span_max: int = SPAN_MAX) -> None:
        # The ring: a list of a power of two slots, used circularly (no append, no compaction,
        # no regrowth per batch): id (_base + i) & MASK is in slot (_head + i) & _mask for i
        # below _span, or that slot is None; every other slot is None. Offsets and counts are
        # native ints (i64): compiled, the arithmetic of every lookup is plain machine operations,
        # not a Python int's overflow-checked ones.
        self._slots: list[Any] = [None] * RING_MIN
        self._mask: i64 = RING_MIN - 1
        self._head: i64 = 0
        self._base: i64 = 0
        self._span: i64 = 0  # 0: the ring is empty
        self._shrink_below: i64 = 0  # a span below this gives slots back (0 at RING_KEPT or less)
        self._count: i64 = 0  # records held, ring and stragglers
        self._stragglers: dict[int, Any] = {}
        self._span_max = span_max
        self._peak: i64 = 0  # the largest span since the ring last emptied

    def __len__(self) -> int:
        return self._count

    @property
    def empty(self) -> bool:
        return self._count == 0

    def __contains__(self, delivery_id: object) -> bool:
        if not isinstance(delivery_id, int):
            return False
        offset = (delivery_id - self._base) & MASK
        if offset < self._span and self._slots[(self._head + offset) & self._mask] is not None:
            return True
        return delivery_id in self._stragglers

    def __iter__(self) -> Iterator[int]:
        """The delivery-ids held (a snapshot: the caller may change the map meanwhile)."""
        return iter([delivery_id for delivery_id, _ in self.items()])

    def put(self, delivery_id: i64, record: Any) -> None:
        offset: i64 = (delivery_id - self._base) & MASK
        span = self._span
        if offset < span:
            slots = self._slots
            index = (self._head + offset) & self._mask
            if slots[index] is None:
                self._count += 1
            slots[index] = record
            return
        if span == 0:  # an empty ring starts at this id
            self._base = delivery_id
            offset = 0
        elif offset >= BEHIND:  # before the ring: kept aside
            if delivery_id not in self._stragglers:
                self._count += 1
            self._stragglers[delivery_id] = record
            return
        elif offset >= self._span_max:  # the ring moves on; what lingers at its front moves aside
            self._shed(delivery_id)
            if self._span == 0:
                self._base = delivery_id
            offset = (delivery_id - self._base) & MASK
        if offset > self._mask:
            self._resize(offset + 1)
        self._slots[(self._head + offset) & self._mask] = record
        span = offset + 1
        self._span = span
        if span > self._peak:
            self._peak = span
        self._count += 1

    def get(self, delivery_id: i64) -> Any:
        """The record of `delivery_id`, left in place (None if there is none)."""
        offset: i64 = (delivery_id - self._base) & MASK
        if offset < self._span:
            record = self._slots[(self._head + offset) & self._mask]
            if record is not None:
                return record
        stragglers = self._stragglers
        if stragglers and delivery_id in stragglers:
            return stragglers[delivery_id]
        return None

    def pop(self, delivery_id: i64) -> Any:
        """Remove the record of `delivery_id` and return it (None if there is none)."""
        offset: i64 = (delivery_id - self._base) & MASK
        if offset < self._span:
            slots = self._slots
            index = (self._head + offset) & self._mask
            record = slots[index]
            if record is not None:
                slots[index] = None
                self._count -= 1
                if offset == 0:
                    # Settled in order, the next record is mostly still held: the ring starts
                    # there (no call to walk emptied slots).
                    span = self._span - 1
                    after = (index + 1) & self._mask
                    if span != 0 and span >= self._shrink_below and slots[after] is not None:
                        self._head = after
                        self._base = (self._base + 1) & MASK
                        self._span = span
                    else:
                        self._advance()
                return record
        stragglers = self._stragglers
        if stragglers and delivery_id in stragglers:
            record = stragglers[delivery_id]
            del stragglers[delivery_id]
            self._count -= 1
            return record
        return None

    def items(self) -> list[tuple[int, Any]]:
        """Every (delivery-id, record), as a list: the caller may change the map meanwhile."""
        found: list[tuple[int, Any]] = list(self._stragglers.items())
        slots, base, head, mask = self._slots, self._base, self._head, self._mask
        for offset in range(self._span):
            record = slots[(head + offset) & mask]
            if record is not None:
                found.append(((base + offset) & MASK, record))
        return found

    def _advance(self) -> None:
        """Move the ring's start past the emptied slots at its front; a ring whose span fell
        below a quarter of its slots (above RING_KEPT) gives them back; an emptied one of more
        than RING_EMPTY_KEPT slots keeps a quarter of them if it used no more than that since
        it last emptied."""
        slots = self._slots
        head, base, span, mask = self._head, self._base, self._span, self._mask
        while span > 0 and slots[head] is None:
            head = (head + 1) & mask
            base += 1
            span -= 1
        self._head, self._base, self._span = head, base & MASK, span
        if span < self._shrink_below:
            self._resize(span)
        elif span == 0:
            quarter = (self._mask + 1) // 4
            if self._mask >= RING_EMPTY_KEPT and self._peak <= quarter:
                self._resize(quarter)
            self._peak = 0

    def _resize(self, need: i64) -> None:
        """The ring in the fewest slots (a power of two, at least RING_MIN) that hold `need`
        ids from its base, its records moved there in order."""
        capacity: i64 = RING_MIN
        while capacity < need:
            capacity *= 2
        slots, head, span = self._slots, self._head, self._span
        ring: list[Any] = [None] * capacity
        if span != 0:
            # Moved by slices (one copy in C each), not a store per slot: a ring that streams
            # and empties between batches regrows twice per batch (~100 instructions a message).
            end = head + span
            size = self._mask + 1
            if end <= size:
                ring[0:span] = slots[head:end]
            else:  # wrapped around its end
                ring[0 : size - head] = slots[head:size]
                ring[size - head : span] = slots[0 : end - size]
        self._slots, self._head, self._mask = ring, 0, capacity - 1
        self._shrink_below = capacity // 4 if capacity > RING_KEPT else 0

    def _shed(self, delivery_id: i64) -> None:
        """Make room for `delivery_id`: records more than half a span before it become
        stragglers."""
        slots, stragglers = self._slots, self._stragglers
        keep = self._span_max // 2
        head, base, span, mask = self._head, self._base, self._span, self._mask
        while span > 0 and ((delivery_id - base) & MASK) > keep:
            record = slots[head]
            if record is not None:
                stragglers[base] = record
                slots[head] = None
            head = (head + 1) & mask
            base = (base + 1) & MASK
            span -= 1
        self._head, self._base, self._span = head, base, span
        self._advance()  # past emptied slots
