"""The fixed log2 duration histograms of flow records (docs/flow-records.md).

Owns: the bucket of a duration and adding histograms. Bucket 0 counts durations under 1 us,
bucket i (1..31) durations d (us) with 2^(i-1) <= d < 2^i, bucket 31 also everything longer:
the bucket of an integer d is d.bit_length() capped at 31, one builtin call on the hot path.
Must not touch: records, I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

BUCKETS: Final = 32
LAST: Final = BUCKETS - 1


def bucket(us: int) -> int:
    """The bucket of a duration in whole microseconds (negative ones, a clock that stepped back, count as 0)."""
    if us <= 0:
        return 0
    index = us.bit_length()
    return index if index < LAST else LAST


def bucket_of_seconds(seconds: float) -> int:
    return bucket(int(seconds * 1_000_000))


def empty() -> list[int]:
    return [0] * BUCKETS


def add_into(total: list[int], other: Iterable[int]) -> None:
    for i, n in enumerate(other):
        total[i] += n


def difference(now: list[int], before: list[int] | None) -> list[int]:
    """The counts added since `before` (None: since nothing)."""
    if before is None:
        return list(now)
    return [a - b for a, b in zip(now, before)]


def bounds_us(index: int) -> tuple[int, int | None]:
    """The durations (us) bucket `index` counts: [low, high), high None for the last one."""
    if index == 0:
        return 0, 1
    return 1 << (index - 1), (1 << index) if index < LAST else None
