"""DeliveryMap: the records of one session's deliveries in one direction, by delivery-id.

Owns: the lookup every disposition and settlement does (SessionMaps.inbound and .outbound).
Delivery-ids are serial numbers (RFC 1982, transport §2.8.5 and §2.7.5) handed out one after
another per session, and most deliveries are settled roughly in the order they were sent: so the
records sit in a ring indexed by `id - base`, which costs no hashing and no boxing of the id (a
dict keyed by delivery-id was a fifth of the router's per-message instructions). Records settle
out of order fine (their slot is emptied). One that lingers while thousands after it come and go
(a consumer that never settles one delivery) moves to a dict of stragglers, so the ring's span
stays bounded whatever traffic passes it: memory follows the deliveries held, not the traffic.
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
COMPACT_AT: Final = 1024  # emptied slots at the front that are dropped at once


class DeliveryMap:
    """A mapping of delivery-id to record (never None) with the dict operations the core uses;
    as a collection of delivery-ids it serves serial_ids_in, which bounds a disposition's walk."""

    __slots__ = ("_slots", "_head", "_base", "_count", "_stragglers", "_span_max")

    def __init__(self, span_max: int = SPAN_MAX) -> None:
        # The ring is _slots[_head:]; _slots[_head + i] holds id (_base + i) & MASK, or None.
        # Offsets and counts are native ints (i64): compiled, the arithmetic of every lookup is
        # plain machine operations, not a Python int's overflow-checked ones.
        self._slots: list[Any] = []
        self._head: i64 = 0
        self._base: i64 = 0
        self._count: i64 = 0  # records held, ring and stragglers
        self._stragglers: dict[int, Any] = {}
        self._span_max = span_max

    def __len__(self) -> int:
        return self._count

    @property
    def empty(self) -> bool:
        return self._count == 0

    def __contains__(self, delivery_id: object) -> bool:
        if not isinstance(delivery_id, int):
            return False
        offset = (delivery_id - self._base) & MASK
        if offset < len(self._slots) - self._head and self._slots[self._head + offset] is not None:
            return True
        return delivery_id in self._stragglers

    def __iter__(self) -> Iterator[int]:
        """The delivery-ids held (a snapshot: the caller may change the map meanwhile)."""
        return iter([delivery_id for delivery_id, _ in self.items()])

    def put(self, delivery_id: int, record: Any) -> None:
        slots = self._slots
        if not slots:  # an empty ring starts at this id
            self._base = delivery_id
        offset: i64 = (delivery_id - self._base) & MASK
        span: i64 = len(slots) - self._head
        if offset < span:
            index = self._head + offset
            if slots[index] is None:
                self._count += 1
            slots[index] = record
            return
        if offset >= BEHIND:  # before the ring: kept aside
            if delivery_id not in self._stragglers:
                self._count += 1
            self._stragglers[delivery_id] = record
            return
        if offset >= self._span_max:  # the ring moves on; what lingers at its front moves aside
            self._shed(delivery_id)
            if not slots:
                self._base = delivery_id
            offset = (delivery_id - self._base) & MASK
            span = len(slots) - self._head
        if offset > span:
            slots.extend([None] * (offset - span))
        slots.append(record)
        self._count += 1

    def get(self, delivery_id: int) -> Any:
        """The record of `delivery_id`, left in place (None if there is none)."""
        offset: i64 = (delivery_id - self._base) & MASK
        slots = self._slots
        if offset < len(slots) - self._head:
            record = slots[self._head + offset]
            if record is not None:
                return record
        stragglers = self._stragglers
        if stragglers and delivery_id in stragglers:
            return stragglers[delivery_id]
        return None

    def pop(self, delivery_id: int) -> Any:
        """Remove the record of `delivery_id` and return it (None if there is none)."""
        offset: i64 = (delivery_id - self._base) & MASK
        slots = self._slots
        head = self._head
        if offset < len(slots) - head:
            index = head + offset
            record = slots[index]
            if record is not None:
                slots[index] = None
                self._count -= 1
                if offset == 0:
                    # Settled in order, the next record is mostly still held: the ring starts
                    # there (no call to walk emptied slots, nothing to compact yet).
                    after = head + 1
                    if after < COMPACT_AT and after < len(slots) and slots[after] is not None:
                        self._head = after
                        self._base = (self._base + 1) & MASK
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
        slots, base, head = self._slots, self._base, self._head
        for index in range(head, len(slots)):
            record = slots[index]
            if record is not None:
                found.append(((base + index - head) & MASK, record))
        return found

    def _advance(self) -> None:
        """Move the ring's start past the emptied slots at its front."""
        slots = self._slots
        head, base = self._head, self._base
        n: i64 = len(slots)
        while head < n and slots[head] is None:
            head += 1
            base += 1
        self._base = base & MASK
        if head == n:
            slots.clear()
            head = 0
        elif head >= COMPACT_AT and head * 2 >= n:
            del slots[:head]
            head = 0
        self._head = head

    def _shed(self, delivery_id: int) -> None:
        """Make room for `delivery_id`: records more than half a span before it become
        stragglers."""
        slots, stragglers = self._slots, self._stragglers
        keep = self._span_max // 2
        head, base, n = self._head, self._base, len(slots)
        while head < n and ((delivery_id - base) & MASK) > keep:
            record = slots[head]
            if record is not None:
                stragglers[base] = record
                slots[head] = None
            head += 1
            base = (base + 1) & MASK
        self._head, self._base = head, base
        self._advance()  # past emptied slots; an emptied ring is cleared
