"""Producer and consumer links as the router sees them: the records and the termini it answers with.

Owns: InLink (a client sends to the router: our receiver link), OutLink (the router sends to a
client: our sender link), their counters and the totals of links that are gone, and the termini
the router answers attaches with. Links of inter-router connections are the same classes (an
InLink with `peer`, an OutLink with `neighbour` set). Attaching and tearing links down is
router.core.attach (the Links unit); inter-router attaches are answered by router.core.interrouter.
Must not touch: message bytes, disposition bookkeeping (forwarder/settlement).
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from ..amqp.endpoints import ACTIVE
from ..amqp.errors import RESOURCE_LIMIT_EXCEEDED
from ..amqp.filters import ConsumerFilter
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import Error
from ..amqp.types import Symbol
from ..config.models import Listener
from .addressentry import AddressEntry
from .connections import ConnState
from .delivery import Copy, Forward
from .fifo import Fifo
from .table import FALLBACK_CAPABILITY

log = logging.getLogger("router.core")

if TYPE_CHECKING:
    from collections import deque

    from ..amqp.session import Session
    from .annotparse import Seen
    from .grant import Grant

_ids = itertools.count(1)  # link identities (management), unique in this process

# OutLink.band of a streaming link to another router (router.core.streamlinks): below 0 as for
# any link that is not a band's, apart from -1 for what holding.send_frames must tell.
STREAM_LINK: Final = -2

# An unsettled bound that is never reached (links between routers). Below 2**62: a larger int
# is boxed when compiled, and every comparison with it takes the slow path (~100 instructions,
# two per delivery sent on a data link, one per delivery received on one).
NO_LIMIT: Final = 1 << 61
UNKNOWN: Final = -1  # InLink.size_hint before a first delivery is complete (router.core.bounds)


class LinkCounts:
    """The delivery and outcome counters every producer and consumer link keeps (management).
    One base class, so that code counting on either kind compiles to plain attribute access."""

    __slots__ = (
        "delivered", "accepted", "rejected", "released", "modified", "presettled", "bytes", "residence", "settle",
        "records", "records_bytes",
    )  # fmt: skip

    def __init__(self) -> None:
        # Native ints (i64): compiled, each count per message is one machine add, not a tagged
        # int's checked one; read from Python (management) they are ordinary ints.
        self.delivered: i64 = 0
        self.accepted: i64 = 0
        self.rejected: i64 = 0
        self.released: i64 = 0
        self.modified: i64 = 0
        self.presettled: i64 = 0
        # Counted only while flow records are on (router.flow; forwarder's flow_* methods):
        # message bytes, and log2 histograms (32 buckets, router.flow.hist) of the time from
        # a delivery's arrival to its sending on, and from its sending on to its outcome.
        self.bytes: i64 = 0
        self.residence: list[int] = [0] * 32
        self.settle: list[int] = [0] * 32
        # Of `delivered` and `bytes`: the flow records' own messages (AddressEntry.flow_records).
        self.records: i64 = 0
        self.records_bytes: i64 = 0


class InLink(LinkCounts):
    """A link on which a client sends to the router (the router is the receiver)."""

    __slots__ = (
        "link", "conn", "entry", "capacity", "inflight", "held", "credit_dirty", "streaming",
        "discarding", "gone",
        "dropped", "id", "address", "peer", "zero_credit_since", "seen", "size_hint", "size_watch",
        "policy", "looked_up_to", "looked_up", "looked_up_version", "from_fallback",
    )  # fmt: skip

    def __init__(
        self, link: Link, conn: ConnState, entry: AddressEntry | None, address: str | None = None,
        peer: str | None = None, capacity: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.id = next(_ids)
        self.link = link
        self.conn = conn
        self.entry = entry  # None: an anonymous link, routed per message by properties.to
        self.address = address  # the target address as attached (x-opt-qd.to when forwarded)
        # The neighbour router this inter-router data link comes from: deliveries on it are
        # routed by their router annotations (x-opt-qd.to, ingress, trace).
        self.peer = peer
        # On such a link: the router annotations read lately, by their bytes (annotparse.Seen).
        self.seen: Seen | None = None
        # A client's link whose messages policy looks at (router.core.grant.Grant.check: the
        # user-id, an anonymous link's targets); None, the usual case, costs one test per message.
        self.policy: Grant | None = None
        # An anonymous or inter-router link: the entry its last delivery's address led to, while
        # the table is as it was (AddressTable.version): consecutive deliveries on a link nearly
        # always go to one address, which then is not looked up again (forwarding.py).
        self.looked_up_to = ""
        self.looked_up: AddressEntry | None = None
        self.looked_up_version = -1
        self.capacity: i64 = capacity or conn.listener.link_capacity
        self.inflight: i64 = 0  # deliveries taken from this link without a final outcome yet
        # Of those, the ones that count against the credit window (`capacity`): all but the
        # deliveries already handed to a local consumer (see ProducerCredit._refresh_credit in credit.py).
        self.held: i64 = 0
        self.credit_dirty = False  # waiting in ProducerCredit's list for the next credit refresh
        self.streaming: Forward | None = None  # the multi-frame delivery arriving now
        self.discarding = False  # dropping the remaining frames of a refused delivery
        self.gone = False
        self.dropped = 0
        # When the link's credit last dropped to zero (the core's `now`); None while it has credit.
        self.zero_credit_since: float | None = None
        # Credit by bytes (router.core.bounds): the observed message size when large (0: small
        # messages, the full window; UNKNOWN until a first delivery is complete), and the size
        # above which a delivery is looked at. Not on a data link from another router: its
        # window carries many producers' deliveries, which their own windows bound (at the
        # router where they entered the mesh).
        self.size_hint: i64 = UNKNOWN if peer is None else 0
        self.size_watch: i64 = 0 if peer is None else NO_LIMIT
        # It takes what an address's fallback destination holds (an in auto-link with fallback:
        # true): credit only while the address has a regular destination, and its deliveries
        # never go to a fallback (router.core.fallback).
        self.from_fallback = False

    def __repr__(self) -> str:
        return f"InLink({self.link.name!r}, {self.entry.address if self.entry else '<anonymous>'})"


class OutLink(LinkCounts):
    """A link on which the router sends to a client (the router is the sender)."""

    __slots__ = (
        "link", "conn", "entry", "outstanding", "pending", "streaming", "gone", "tags",
        "capacity", "id", "neighbour", "zero_credit_since", "rewrites",
        "unsettled_limit", "stuck", "stuck_count", "filter", "band", "held", "held_bytes", "held_last", "held_by",
        "held_in", "held_since", "bands", "streams", "stream_band", "window_shut", "max_message_size",
    )  # fmt: skip

    def __init__(self, link: Link, conn: ConnState, entry: AddressEntry, neighbour: str | None = None) -> None:
        super().__init__()
        self.id = next(_ids)
        self.link = link
        self.conn = conn
        # The consumed address; for an inter-router data link a private entry of its own.
        self.entry = entry
        self.neighbour = neighbour  # set on the data link to that neighbour router
        # Whether every delivery's first frame is rewritten for it (Forwarder._egress): router
        # annotations for a neighbour, or for a consumer whose listener keeps them.
        self.rewrites = neighbour is not None or not conn.strip_out
        self.outstanding: i64 = 0  # sent and unsettled: the "balanced" load measure
        # Deliveries waiting for this link's credit: multicast copies, and on an inter-router
        # data link anycast deliveries too.
        self.pending: Fifo[Copy | Forward] | None = None
        self.streaming: Forward | Copy | None = None  # a multi-frame delivery being sent on it
        self.gone = False
        self.tags = 0
        self.capacity = conn.listener.link_capacity
        # When the consumer's credit last dropped to zero (the core's `now`); None while it has credit.
        self.zero_credit_since: float | None = None
        # The unsettled bound (router.core.bounds): a client's consumer link holding this many
        # unsettled deliveries is stuck (sent nothing more) until it settles some. Links to
        # other routers are bounded by the producers' windows instead.
        listener = conn.listener
        self.unsettled_limit: i64 = (
            listener.max_unsettled_per_link if neighbour is None and isinstance(listener, Listener) else NO_LIMIT
        )
        self.stuck = False
        self.stuck_count = 0  # times it reached the bound
        # The source filters in force (router.amqp.filters), None without any.
        self.filter: ConsumerFilter | None = None
        # The consumer's max-message-size (its attach's, transport §2.7.3; 0: none): no delivery
        # larger than it is sent on this link (router.core.sizelimits). Set by Links when it
        # registers a consumer; 0 on links to other routers. (Native: below 2**61.)
        self.max_message_size: i64 = 0
        # Its priority band (0 = lowest) on an inter-router connection with several data links
        # per direction; -1 otherwise. Only band links hold frames (router.core.holding): the
        # frames of the delivery streaming on it not written yet (bytes, in order), their size,
        # whether the last of them ends the delivery, and the connection whose byte bound counts
        # them (the producer's; None for the router's own messages).
        self.band = -1
        # On a neighbour's default data link with several bands: its data links by band, lowest
        # first (the mesh's Paths.bands entry, here where remote.on_band reads it without a
        # lookup); None otherwise.
        self.bands: list[OutLink] | None = None
        # On a neighbour's band links: its streaming links (router.core.streamlinks); None
        # otherwise (a streaming link's band is STREAM_LINK).
        self.streams: list[OutLink] | None = None
        # A streaming link's: the band of the delivery it carries now (holding.release serves
        # its held frames with that band's); -1 otherwise.
        self.stream_band = -1
        self.held: deque[bytes] | None = None
        self.held_bytes = 0
        self.held_last = False
        self.held_by: ConnState | None = None
        # The session those frames came on (router.core.bandwindow counts them per session too).
        self.held_in: Session | None = None
        self.held_since = 0.0  # since when its held frames wait with none written (holding.stalled)
        # A data link to another router whose session the peer shut (router.core.bandwindow):
        # it takes no delivery and holds its streaming frames until the peer opens it again.
        self.window_shut = False

    def can_take(self) -> bool:
        """It can take a delivery now: credit, no delivery of its own still streaming, its
        connection's output not backed up, below its unsettled bound (bounds.py)."""
        return (
            self.link.credit > 0 and self.streaming is None and not self.conn.output_blocked and not self.stuck
            and not self.window_shut
        )  # fmt: skip

    def next_tag(self) -> bytes:
        self.tags = (self.tags + 1) & 0xFFFFFFFF
        return self.tags.to_bytes(4, "big")

    def __repr__(self) -> str:
        return f"OutLink({self.link.name!r}, {self.entry.address})"


class GoneTotals:
    """The counters of links that are gone, so that router-wide totals (management) only grow."""

    __slots__ = ("delivered", "accepted", "rejected", "released", "modified", "presettled", "dropped")

    def __init__(self) -> None:
        self.delivered = self.accepted = self.rejected = self.released = self.modified = 0
        self.presettled = self.dropped = 0

    def add(self, link: LinkCounts) -> None:
        self.delivered += link.delivered
        self.accepted += link.accepted
        self.rejected += link.rejected
        self.released += link.released
        self.modified += link.modified
        self.presettled += link.presettled
        if isinstance(link, InLink):
            self.dropped += link.dropped


# The terminus the router answers with is the one in force (messaging §3.5.3: "the sending
# endpoint sets the filter actually in place"): it names only what the router honours. The
# router keeps no terminus state past the link (expiry link-detach, timeout 0, durable none),
# promises no distribution mode or default outcome, and lets a consumer choose any of the four
# outcomes. Of the filters asked for it echoes exactly those it applies (router.amqp.filters),
# keyed as received, with the capabilities apache-filters.xml asks a source applying them to
# carry; a receiver whose filter is not echoed finds none in force and can detach, instead of
# trusting a lie.
OUTCOMES_HONOURED = (Symbol("amqp:accepted:list"), Symbol("amqp:rejected:list"),
                     Symbol("amqp:released:list"), Symbol("amqp:modified:list"))  # fmt: skip


def honoured_source(address: str | None, dynamic: bool = False, filter_set: dict[Any, Any] | None = None,
                    capabilities: tuple[Symbol, ...] | None = None) -> Source:  # fmt: skip
    return Source(address=address, expiry_policy="link-detach", dynamic=dynamic, outcomes=OUTCOMES_HONOURED,
                  filter=filter_set, capabilities=capabilities)  # fmt: skip


def honoured_target(address: str | None, dynamic: bool = False, fallback: bool = False) -> Target:
    """Our answer's target: what the router does with the link's messages (`fallback`: it drains
    a fallback destination, router.core.fallback; its capability echoed, as it is honoured)."""
    capabilities = (Symbol(FALLBACK_CAPABILITY),) if fallback else None
    return Target(address=address, expiry_policy="link-detach", dynamic=dynamic, capabilities=capabilities)


def alive(link: Link) -> bool:
    """Whether frames can still be written for `link`."""
    return (
        link.state.local is ACTIVE
        and link.session.state.local is ACTIVE
        and link.session.conn.state.local is ACTIVE
        and not link.session.conn.finished
    )


def stall_limit(held_since: float, conn: ConnState) -> float:
    """When frames held for a link of `conn` since `held_since`, none written, count as
    stalled: its listener's stalled_stream_timeout_s later; never (inf) when that is 0 or the
    connection is to another router (holding.py, linkrelay.py)."""
    settings = conn.listener
    timeout = settings.stalled_stream_timeout_s
    if timeout <= 0 or settings.between_routers:
        return math.inf
    return held_since + timeout


def report_stalled(link: Link, conn: ConnState) -> Error:
    """Log that `link` of `conn` took nothing of what the router held for it for its
    stalled_stream_timeout_s; the error its detach carries."""
    timeout = conn.listener.stalled_stream_timeout_s
    log.warning("connection %d: link %r took nothing of a streaming message for %g s: detaching it",
                conn.id, link.name, timeout)  # fmt: skip
    return Error(condition=RESOURCE_LIMIT_EXCEEDED,
                 description=f"took nothing of a streaming message for {timeout:g} s (stalled_stream_timeout_s)")  # fmt: skip
