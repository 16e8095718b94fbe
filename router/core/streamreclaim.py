"""Giving back idle streaming links: the links a burst of large messages grew (streamlinks.grow)
are detached once they have carried nothing for IDLE_S (docs/mesh.md, "Streaming links").

A neighbour or edge connection keeps its `router.streaming_links` streaming links for its life;
each grown beyond them (up to STREAMING_LINKS_MAX) costs a link and a session on both routers.
The router that attached a grown link (the sending side) watches it (`IdleStreams.watch`), and
once it is proven idle for IDLE_S gives it back: forgotten as any link that goes away (the core's
Links.link_gone: out of its neighbour's pool, its counters in the totals of links gone), then
detached, closed (`give_back`: transport §2.6.6), and its session ended once the peer answers
(`end_stream_session`). The peer answers the detach, forgets its side and counts one streaming
link less against its limit (`stream_in_gone`), so a later burst grows the pool again, under
the free names (interrouter.add_stream_link).

Proven idle: nothing streaming on it, nothing unsettled, no frames held for it (here or in its
session, for the peer's window), nothing waiting for it, its attach answered, when first looked
at and again at a look IDLE_S later, with no delivery sent on it in between (its `delivered`
count unchanged). Nothing is recorded per delivery: the looks are a timer's (`due`, every
SCAN_S while a grown link is watched: RouterCore's tick and next_deadline), and `delivered` is
counted by Sending._send anyway. The core is synchronous: a link found idle is out of the pool
(streamlinks.instead never offers it) and marked gone before its detach is written, so no
delivery can follow the detach. Never given back: the configured links, nor a grown one while
the pool is no larger than the configured count (the peer detached a configured one).
Owns: the watched links, IDLE_S, and the ends of a streaming link and its session, both sides
(`end_breaks`: the life cycle does not take them for a broken connection).
Collaborators: the OutLinks and their Peer (its `streams` list), RouterCore (tick,
next_deadline), Links.link_gone (attach.py), the life cycle (lifecycle.py).
Must not touch: growing the pool and choosing a link (streamlinks.py), what is sent (sending.py).
"""

from __future__ import annotations

import math
from typing import Final

from ..amqp.endpoints import ACTIVE, CLOSED
from ..amqp.link import Link
from ..amqp.session import Session
from .interrouter import Peer, is_stream_link
from .links import InLink, OutLink, alive

# How long a grown streaming link carries nothing before it is given back. A minute: longer
# than the pauses within a burst of large messages (a producer sending files one after another,
# a consumer taking a while over each), so that a pool sized for a burst is not given back and
# grown again between its messages (each growth costs an attach round trip, during which a
# stream waits on its band's link); short against a connection's life, so that the links of a
# burst are not kept for hours (up to 28 links and sessions a side per connection).
IDLE_S: Final = 60.0
# How often the grown links are looked at: a link is given back between IDLE_S and
# IDLE_S + SCAN_S after it last carried anything; a tick every 15 s only while there are any.
SCAN_S: Final = IDLE_S / 4


class IdleStreams:
    """The grown streaming links of every connection (see the module docstring): since when
    each was first seen idle, and its `delivered` count then."""

    __slots__ = ("since", "delivered", "deadline")

    def __init__(self) -> None:
        # Watched links, by the time they were first seen idle (-1: not idle when last looked at).
        self.since: dict[OutLink, float] = {}
        self.delivered: dict[OutLink, int] = {}  # their `delivered` count then
        self.deadline = math.inf  # when to look next (inf: nothing watched)

    def watch(self, out: OutLink, now: float) -> None:
        """`out` was grown (streamlinks.grow): given back once idle for IDLE_S."""
        self.since[out] = -1.0
        self.delivered[out] = out.delivered
        if self.deadline == math.inf:
            self.deadline = now + SCAN_S

    def forget(self, out: OutLink) -> None:
        """`out` is gone (given back, detached by the peer, its connection lost): out of its
        neighbour's pool, and no longer watched (Links.link_gone)."""
        peer = out.conn.peer
        if isinstance(peer, Peer) and out in peer.streams:
            peer.streams.remove(out)
        self._unwatch(out)

    def _unwatch(self, out: OutLink) -> None:
        if self.since.pop(out, None) is not None:
            del self.delivered[out]
            if not self.since:
                self.deadline = math.inf

    def due(self, now: float) -> list[OutLink]:
        """Look at the watched links: those idle for IDLE_S now, to be given back (the caller
        forgets them as links gone, then `give_back`)."""
        if now < self.deadline:
            return []
        found: list[OutLink] = []
        for out, since in list(self.since.items()):
            peer = out.conn.peer
            if not isinstance(peer, Peer) or len(peer.streams) <= peer.streams_base:
                self._unwatch(out)  # (its connection is going; or it takes a lost configured one's place)
                continue
            if not idle(out):
                self.since[out] = -1.0
            elif since < 0 or out.delivered != self.delivered[out]:
                self.since[out] = now  # idle from here, unless a delivery comes
                self.delivered[out] = out.delivered
            elif now - since >= IDLE_S:
                found.append(out)
                peer.streams.remove(out)  # (no longer offered, even before the caller forgets it)
                self._unwatch(out)
        self.deadline = now + SCAN_S if self.since else math.inf
        return found


def idle(out: OutLink) -> bool:
    """`out` carries nothing now and can be given back: nothing streaming on it, unsettled,
    held (by the router, or by its session for the peer's window), waiting for it; its attach
    answered (an unanswered one may yet be refused: the refusal ends it), its connection up."""
    link = out.link
    return (
        not out.gone and out.streaming is None and out.outstanding == 0 and out.held is None and not out.pending
        and link.queued_deliveries == 0 and link.session.blocked_frames == 0 and link.state.remote is ACTIVE
        and alive(link) and not out.conn.closed
    )  # fmt: skip


def give_back(out: OutLink) -> None:
    """Detach `out`, proven idle and forgotten as a link gone: closed (transport §2.6.6), the
    receiver releases its side; its session ends when the detach is answered."""
    link = out.link
    link.detach(closed=True)
    peer = out.conn.peer
    if isinstance(peer, Peer):
        peer.streams_reclaimed += 1


def stream_in_gone(inl: InLink) -> None:
    """A link the peer attached on `inl`'s connection is gone: if it was one of its streaming
    links, it counts no more against STREAMING_LINKS_MAX (the peer may grow another)."""
    peer = inl.conn.peer
    if isinstance(peer, Peer) and is_stream_link(inl.link):
        peer.streams_in -= 1


def end_stream_session(link: Link) -> None:
    """Our streaming `link` is detached both ways (we gave it back and the peer answered, or the
    peer detached it and we answered): its session, which carries nothing else, ends
    (transport §2.5.4; each streaming link has a session of its own: interrouter.attach_links)."""
    session = link.session
    conn = session.conn
    if (link.is_sender and link.state.local is CLOSED and link.state.remote is CLOSED and is_stream_link(link)
            and session.state.local is ACTIVE and conn.state.local is ACTIVE and not conn.finished):  # fmt: skip
        session.end()


def end_breaks(session: Session) -> bool:
    """Whether the peer ending `session` on an inter-router connection breaks the connection:
    not when it carries only streaming links, or none left (a streaming link's session ends
    once its link is detached both ways: `end_stream_session`)."""
    return any(not is_stream_link(link) for link in session.links)
