"""The header ttl of a delivery the router held, reduced by the time it waited (messaging §3.2.1).

A message's header ttl gives it an expiry computed at its arrival here (forwarding._expiry), and
a delivery that waits too long is expired (waiting.py). The spec asks one thing more of an
intermediary: "When a message is transmitted by an intermediary that was received with a ttl,
the transmitted message's header SHOULD contain a ttl that is computed as the difference between
the current time and the formerly computed message expiration time, i.e., the reduced ttl, so
that messages will eventually die if they end up in a delivery loop." Without it, a message
that waited 8 s of its 10 s here would have 10 s again at the next router or at a broker.

Owns: `reduce_ttl(fwd, now)`: the first frame of a delivery that waited (for a consumer's
credit, a route, an inter-router link's credit or a streaming link, a multicast copy for its
consumer) gets, as it is sent on, a header ttl of the milliseconds left to its expiry, rounded
down and at least 1 (one at or past its expiry is expired where the caller checks, as before);
only when that is at least 1 ms less than the ttl it holds. Its callers are only the paths
where a delivery waited (waiting.py, fallback.py): one sent on at once keeps its exact bytes,
and the hot path pays nothing for this. Only the header changes (it is not part of the bare
message, messaging §3.2; the bytes are router/amqp/sections.py's `with_ttl`), and with it what
the delivery keeps about its first frame: its size, its routing view, its router annotations'
offsets and its first frame for other routers. A message whose expiry comes from
absolute-expiry-time alone is not touched (wall-clock time: every hop computes the same
expiry); one with both gets the time left to the earlier, the expiry this router computed.
Must not touch: expiring deliveries (waiting.py); the bounds: the caller calls this only once
the delivery's bytes have left them (or never entered them: a multicast copy's), so that they
leave by the size they entered with, and enter again, if it waits again, by its new one.
"""

from __future__ import annotations

import math
from typing import Final

from ..amqp.errors import DecodeError
from ..amqp.peek import shifted
from ..amqp.sections import header_ttl_at, with_ttl
from .delivery import Forward, Payload

# expiry - now is a difference of floats (the expiry was `now + ttl` at arrival), off by far
# less than this: a delivery that waited no time keeps its ttl as it came.
_TOLERANCE_MS: Final = 1e-6


def _remaining_ms(expiry: float, now: float) -> int:
    """What is left at `now` of a ttl that ends at `expiry`: whole milliseconds, rounded down,
    at least 1 (a ttl of 0 is read as none, here and by most peers)."""
    left: int = math.floor((expiry - now) * 1000.0 + _TOLERANCE_MS)
    return left if left >= 1 else 1


def reduce_ttl(fwd: Forward, now: float) -> None:
    """`fwd` waited and is sent on now (or routed again, which may send it at once): its header's
    ttl becomes what is left of it (see the module docstring). Nothing changes for a delivery
    with no header ttl, or one that waited less than a millisecond."""
    view = fwd.view
    expiry = fwd.expiry
    first = fwd.first
    if view is None or expiry is None or first is None:
        return
    held = view.ttl_ms
    if not held:  # absolute-expiry-time alone (or no expiry at all)
        return
    left = _remaining_ms(expiry, now)
    if left >= held:
        return
    rewritten = _rewritten(first, left)
    if rewritten is None:
        return
    data, header_end, shift = rewritten
    fwd.first = data
    fwd.view = view.with_ttl(left, header_end, shift)
    fwd.fields = None  # (read from the old bytes: a filter asking again reads the new ones)
    rframe = fwd.rframe
    if rframe is not None:  # a multicast delivery's first frame for other routers
        again = _rewritten(rframe, left)
        if again is not None:
            fwd.rframe = again[0]
    if shift:  # a header encoded anew (sections.with_ttl): what lies after it moved
        fwd.size += shift
        meta = fwd.meta
        if meta is not None:
            meta.span, meta.insert_at = shifted(meta.span, meta.insert_at, header_end, shift)


def _rewritten(frame: Payload, ttl_ms: int) -> tuple[bytes, int, int] | None:
    """`frame` (a first frame) with its header's ttl set to `ttl_ms`, where its header ended and
    how much longer it is now (sections.with_ttl may encode the header anew); None when it has
    no header ttl or its header cannot be read (peek read it already, so neither is reached; but
    these are a peer's bytes, and a SHOULD of the spec is no reason to fail a delivery: it goes
    on as it came)."""
    data = frame if type(frame) is bytes else bytes(frame)
    try:
        at = header_ttl_at(data)
        if at is None:
            return None
        rewritten = with_ttl(data, at, ttl_ms)
        return rewritten, at[1], len(rewritten) - len(data)
    except DecodeError:
        return None
