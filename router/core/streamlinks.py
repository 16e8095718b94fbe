"""Streaming links between routers: a large message gets a data link of its own (docs/mesh.md,
"Streaming links"; the anchors' streaming links, DISPATCH-1545).

A delivery whose first frame does not end it (a message larger than a frame, or one its producer
streams) may take a long time to cross, and a consumer that reads it slowly, or not at all,
makes the router serving it hold its frames and stop the session they come on
(router/core/bandwindow.py). On a band link that would stop every delivery of the band behind
it. So each router keeps `router.streaming_links` extra data links to each neighbour and each
edge connection, both ways (interrouter.attach_links: capabilities qd.router-data and
qd.router-stream, each in a session of its own), and such a delivery (`large`), about to go on
a band link, goes on a free streaming link of the same neighbour instead (`instead`): one that can take a delivery now (credit, nothing
streaming on it, its session open), unless deliveries wait for the band's link (`nothing_ahead`:
it would overtake them, and one producer's messages to one consumer keep their order; it waits
behind them, and `take_waiting` may send it on a streaming link once it is at the head). With
none free it goes on its band's link as before, and
when every one carries a stream, one more is attached for the streams to come (`grow`), up to
STREAMING_LINKS_MAX, named with the lowest free index. The configured ones stay for the
connection's life; a grown one is given back once idle for a minute (streamreclaim.py: `grow`
hands it to the watch), and a later burst grows the pool again.
The receiving router treats a streaming link as any data link (credit, routing by the
annotations, bandwindow); it takes at most STREAMING_LINKS_MAX of them per connection at once
(one given back counts no more).
A streaming link's held frames are released with its delivery's band when the output drains
(`OutLink.stream_band`, holding.py), and its deliveries count in "balanced" against the
streaming link, not the band link the choice was made for.
Collaborators: the OutLinks (their `streams` lists, set by attach_links), IdleStreams
(streamreclaim.py).
Must not touch: the choice of the neighbour and band (remote.py), what is written (sending.py),
giving links back (streamreclaim.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..amqp.endpoints import ACTIVE
from ..config.models import STREAMING_LINKS_MAX
from .delivery import Forward
from .interrouter import GIVE_BACK_VERSION, Peer, add_stream_link

if TYPE_CHECKING:
    from .links import OutLink
    from .streamreclaim import IdleStreams
    from .touched import Touched


def large(fwd: Forward) -> bool:
    """A delivery for a streaming link: its first frame did not end it, or it waited in several."""
    return not fwd.complete or fwd.rest is not None


def nothing_ahead(band_link: OutLink) -> bool:
    """No delivery waits for `band_link`, in its queue or in its session for the peer's window:
    a new large message may take a streaming link instead of it without overtaking a message
    of the same producer to the same consumer waiting there (docs/mesh.md: their order is kept)."""
    return not band_link.pending and band_link.link.session.blocked_frames == 0


def instead(streams: list[OutLink]) -> OutLink | None:
    """A streaming link that can take a delivery now (None: none is free)."""
    for out in streams:
        if out.can_take() and not out.gone and out.link.state.remote is ACTIVE:
            return out
    return None


def grow(streams: list[OutLink], band_link: OutLink, router_id: str, touched: Touched, idle: IdleStreams,
         now: float) -> None:  # fmt: skip
    """No streaming link of `band_link`'s neighbour was free: attach one more if every one
    carries a stream (not when one is only waiting for its answer, credit or window: it will
    come free without a new one), up to STREAMING_LINKS_MAX. It is given back once idle
    (`idle`: router.core.streamreclaim)."""
    if len(streams) >= STREAMING_LINKS_MAX:
        return
    for out in streams:
        if out.streaming is None and not out.gone:
            return
    peer = band_link.conn.peer
    if isinstance(peer, Peer) and band_link.conn.engine.state.local is ACTIVE:
        out = add_stream_link(router_id, peer, now)
        if peer.version >= GIVE_BACK_VERSION:  # (an older router would take it for a broken connection)
            idle.watch(out, now)
        touched.touch(band_link.conn.engine)


def take_waiting(out: OutLink, send: Callable[[Forward, OutLink], None]) -> None:
    """Streaming link `out` may take a delivery: large messages at the head of its neighbour's
    band links' queues (waiting for the band's link, busy with another stream, when every
    streaming link was) go now, each on a free streaming link (`send`: as the band link's
    waiting deliveries are sent). Only heads: one behind a smaller message keeps its order."""
    peer = out.conn.peer
    if not isinstance(peer, Peer):
        return
    for band in peer.bands if peer.bands is not None else [peer.data_out]:
        if band is None or band.streams is None:
            continue
        pending = band.pending
        while pending and instead(band.streams) is not None:
            head = pending.popleft()
            if type(head) is not Forward or not large(head):
                pending.push_front([head])
                break
            send(head, band)
