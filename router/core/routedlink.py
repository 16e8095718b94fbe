"""The records of a link-routed pair (router.core.linkrelay relays them, linkpairs.py pairs them).

Owns: RoutedLink (one link of a pair: its peer, what it holds, its counters), RoutedDelivery
(one unsettled delivery crossing a pair) and RoutedMaps (a session's routed deliveries, both
ways, kept in its SessionMaps).
Must not touch: what is relayed and when (linkrelay.py), the pair's life (linkpairs.py).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

from ..amqp.link import Link
from .delivery import maps_of

if TYPE_CHECKING:
    from .connections import ConnState

_ids = itertools.count(1)


class RoutedDelivery:
    """One unsettled delivery crossing a pair: received on `src` as `src_id`, sent on `dst` as `dst_id`."""

    __slots__ = ("src", "src_id", "dst", "dst_id")

    def __init__(self, src: RoutedLink, src_id: int, dst: RoutedLink, dst_id: int) -> None:
        self.src, self.src_id, self.dst, self.dst_id = src, src_id, dst, dst_id


class RoutedMaps:
    """Per session: routed deliveries received here (by the peer's delivery-id) and sent here (by ours)."""

    __slots__ = ("received", "sent")

    def __init__(self) -> None:
        self.received: dict[int, RoutedDelivery] = {}
        self.sent: dict[int, RoutedDelivery] = {}


def routed_maps(link: Link) -> RoutedMaps:
    maps = maps_of(link.session)
    if maps.routed is None:
        maps.routed = RoutedMaps()
    routed: RoutedMaps = maps.routed
    return routed


class RoutedLink:
    """One link of a routed pair: the client's (`towards_container` False) or the one the router
    attached towards the container, on its connection or to the next router."""

    __slots__ = ("id", "link", "conn", "peer", "route", "address", "towards_container", "held", "streaming",
                 "gone", "delivered", "settled_count", "held_since", "written", "written_seen")  # fmt: skip

    def __init__(self, link: Link, conn: ConnState, route: str, address: str | None, towards_container: bool) -> None:
        self.id = next(_ids)
        self.link = link
        self.conn = conn
        self.peer: RoutedLink | None = None
        self.route = route  # the link route's name; "" on a router on the way to the container's
        self.address = address
        self.towards_container = towards_container
        # Transfers that arrived for this (sending) link while it had no credit (the receiver
        # took back credit it had given, transport §2.6.7 allows it: bounded by the credit the
        # other side was given, which the engine enforces on the sender) or while its
        # connection's output was blocked (bounded by the sender's connection's byte bound).
        self.held: deque[tuple[Any, ...]] = deque()
        # The stall watch (Relay.stalled): since when what is held waits with nothing written,
        # and the held transfers written in all (and as last seen by the watch).
        self.held_since = 0.0
        self.written = self.written_seen = 0
        self.streaming: RoutedDelivery | None = None  # the multi-frame delivery being relayed onto this link
        self.gone = False
        self.delivered = 0  # deliveries relayed onto this link (management)
        self.settled_count = 0

    def __repr__(self) -> str:
        return f"RoutedLink({self.link.name!r}, {self.address!r}, {'out' if self.towards_container else 'client'})"
