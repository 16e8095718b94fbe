"""Outcome counts: what a delivery's outcome adds to the counters of its link and its address,
and how strong an outcome is where the copies of a multicast delivery combine theirs.

Owns: `count_outcome` (a consumer's outcome on its link; a producer's on its link and on its
address) and `outcome_rank` (rejected > accepted > modified > released). Plain functions over
the outcome's class, called once per outcome by settlement.py (compiled: native calls).
Must not touch: which outcome a delivery gets or who is told it (settlement.py), what flow
records count (flowcount.py).
"""

from __future__ import annotations

from typing import Any, Final

from ..amqp.messaging import Accepted, Modified, Rejected, Released
from .addressentry import AddressEntry
from .links import LinkCounts

# The outcome classes as module constants: mypyc keeps them in C statics, where the imported
# names would be looked up in the module's dict on every delivery.
_ACCEPTED: Final = Accepted
_RELEASED: Final = Released
_MODIFIED: Final = Modified
_REJECTED: Final = Rejected


def outcome_rank(state: Any) -> int:
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


def count_outcome(link: LinkCounts, state: Any, entry: AddressEntry | None = None) -> None:
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
