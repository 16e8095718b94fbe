"""RFC 1982 serial-number arithmetic on 32 bits (transport §2.8.10 sequence-no).

delivery-id, transfer-id (next-incoming-id/next-outgoing-id) and delivery-count wrap at 2**32;
comparing or subtracting them with plain ints breaks after about four billion transfers.
Must not touch: anything else.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

SERIAL_MOD: Final = 1 << 32
SERIAL_MASK: Final = SERIAL_MOD - 1
_MASK: Final = SERIAL_MASK
_HALF: Final = 1 << 31


def serial_add(a: int, n: int) -> int:
    """a + n modulo 2**32."""
    return (a + n) & _MASK


def serial_diff(a: int, b: int) -> int:
    """The signed distance a - b, in (-2**31, 2**31]."""
    d = (a - b) & _MASK
    return d - SERIAL_MOD if d > _HALF else d


def serial_lt(a: int, b: int) -> bool:
    """a precedes b in serial order."""
    return serial_diff(a, b) < 0


def serial_le(a: int, b: int) -> bool:
    return serial_diff(a, b) <= 0


def serial_count(first: int, last: int) -> int:
    """How many serial numbers first..last inclusive holds (0 when last is before first)."""
    count = serial_diff(last, first) + 1
    return count if count > 0 else 0


def serial_range(first: int, last: int) -> range | list[int]:
    """The serial numbers first..last inclusive (wrapping), as a range when it does not wrap."""
    count = serial_count(first, last)
    if first + count <= SERIAL_MOD:
        return range(first, first + count)
    return [(first + i) & _MASK for i in range(count)]


def serial_ids_in(first: int, last: int, held: Collection[int]) -> Iterable[int]:
    """The ids first..last worth looking up in `held`: the range itself when it is no wider than
    what is held, else the members of `held` inside it, in order. A peer may name 2**31 ids in
    one disposition; the work stays bounded by what we hold."""
    count = serial_count(first, last)
    if count <= 2 * len(held) + 64:
        return serial_range(first, last)
    return sorted((k for k in held if (k - first) & _MASK < count), key=lambda k: (k - first) & _MASK)
