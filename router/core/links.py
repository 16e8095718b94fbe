"""Producer and consumer links as the router sees them, and their attach and detach.

Owns: InLink (a client sends to the router: our receiver link), OutLink (the router sends to a
client: our sender link), answering attaches (address lookup, dynamic and anonymous termini,
refusals with the right condition, link limits), and tearing links down on detach, session end
or connection loss, which hands in-flight deliveries to the forwarder for reporting. Links of
inter-router connections are the same classes (an InLink with `peer`, an OutLink with
`neighbour` set); their attaches are answered by router.core.interrouter.
Must not touch: message bytes, disposition bookkeeping (forwarder/settlement).
"""

from __future__ import annotations

import itertools
import secrets
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import Error
from ..amqp.session import Session
from ..amqp.types import Symbol
from ..config.models import Listener
from .bounds import NO_LIMIT, UNKNOWN
from .connections import ConnState
from .delivery import Copy, Forward
from .table import AddressEntry

if TYPE_CHECKING:
    from collections import deque

    from .annotate import Seen
    from .router import RouterCore

_ids = itertools.count(1)  # link identities (management), unique in this process


class LinkCounts:
    """The delivery and outcome counters every producer and consumer link keeps (management).
    One base class, so that code counting on either kind compiles to plain attribute access."""

    __slots__ = ("delivered", "accepted", "rejected", "released", "modified", "presettled")

    def __init__(self) -> None:
        self.delivered = self.accepted = self.rejected = self.released = self.modified = 0
        self.presettled = 0


class InLink(LinkCounts):
    """A link on which a client sends to the router (the router is the receiver)."""

    __slots__ = (
        "link", "conn", "entry", "capacity", "inflight", "held", "credit_dirty", "streaming",
        "discarding", "gone",
        "dropped", "id", "address", "peer", "zero_credit_since", "seen", "size_hint", "size_watch",
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
        # On such a link: the router annotations read lately, by their bytes (annotate.Seen).
        self.seen: Seen | None = None
        self.capacity = capacity or conn.listener.link_capacity
        self.inflight = 0  # deliveries taken from this link without a final outcome yet
        # Of those, the ones that count against the credit window (`capacity`): all but the
        # deliveries already handed to a local consumer (see Settlement._refresh_credit).
        self.held = 0
        self.credit_dirty = False  # waiting in Settlement's list for the next credit refresh
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
        self.size_hint = UNKNOWN if peer is None else 0
        self.size_watch = 0 if peer is None else NO_LIMIT

    def __repr__(self) -> str:
        return f"InLink({self.link.name!r}, {self.entry.address if self.entry else '<anonymous>'})"


class OutLink(LinkCounts):
    """A link on which the router sends to a client (the router is the sender)."""

    __slots__ = (
        "link", "conn", "entry", "outstanding", "pending", "streaming", "gone", "tags",
        "capacity", "id", "neighbour", "zero_credit_since", "rewrites",
        "unsettled_limit", "stuck", "stuck_count",
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
        self.outstanding = 0  # sent and unsettled: the "balanced" load measure
        # Deliveries waiting for this link's credit: multicast copies, and on an inter-router
        # data link anycast deliveries too.
        self.pending: deque[Copy | Forward] | None = None
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
        self.unsettled_limit = (
            listener.max_unsettled_per_link if neighbour is None and isinstance(listener, Listener) else NO_LIMIT
        )
        self.stuck = False
        self.stuck_count = 0  # times it reached the bound

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
# applies no filter, promises no distribution mode, default outcome or capability, and lets a
# consumer choose any of the four outcomes. A receiver that asked for a filter (a JMS selector)
# finds none in force and detaches if it needs one, instead of trusting a lie.
OUTCOMES_HONOURED = (Symbol("amqp:accepted:list"), Symbol("amqp:rejected:list"),
                     Symbol("amqp:released:list"), Symbol("amqp:modified:list"))  # fmt: skip


def honoured_source(address: str | None, dynamic: bool = False) -> Source:
    return Source(address=address, expiry_policy="link-detach", dynamic=dynamic, outcomes=OUTCOMES_HONOURED)


def honoured_target(address: str | None, dynamic: bool = False) -> Target:
    return Target(address=address, expiry_policy="link-detach", dynamic=dynamic)


def _refuse(link: Link, condition: str, description: str) -> None:
    link.reject(Error(condition=condition, description=description))


def attach_link(core: RouterCore, conn: ConnState, link: Link, now: float) -> None:
    """Answer a client's attach: register a producer or a consumer, or refuse it."""
    if conn.closed or link.state.local is not UNINIT or conn.engine.state.local is not ACTIVE:
        return
    if conn.role != "normal":  # links between routers (router.core.interrouter)
        core.mesh.peer_attach(conn, link)
        return
    if conn.link_count >= conn.listener.max_links_per_connection:
        _refuse(link, E.RESOURCE_LIMIT_EXCEEDED,
                f"link limit ({conn.listener.max_links_per_connection}) reached on this connection")  # fmt: skip
        return
    if link.is_sender:
        _attach_consumer(core, conn, link, now)
    else:
        _attach_producer(core, conn, link, now)


def _attach_consumer(core: RouterCore, conn: ConnState, link: Link, now: float) -> None:
    source = link.remote_source
    if not isinstance(source, Source):
        _refuse(link, E.INVALID_FIELD, "a receiving link needs a source")
        return
    table = core.table
    if source.dynamic:
        entry = table.new_dynamic()
        answer = honoured_source(entry.address, dynamic=True)
    else:
        if not source.address:
            _refuse(link, E.INVALID_FIELD, "a receiving link needs a source address (or dynamic)")
            return
        if table.unavailable(source.address):  # the anchors' wording
            _refuse(link, E.NOT_FOUND, f"Node not found: {source.address} is unavailable")
            return
        maybe = table.get_or_create(source.address, consumer=True)
        if maybe is None:
            _refuse(link, E.NOT_FOUND, f"no route to {source.address} from router {core.router_id}")
            return
        entry, answer = maybe, honoured_source(source.address)
    if not link.answer(source=answer, target=link.remote_target):  # refused: the echo won't fit
        table.discard_if_unused(entry)
        return
    out = OutLink(link, conn, entry)
    out.zero_credit_since = now  # no credit until the consumer gives some
    link.context = out
    conn.out_links.add(out)
    first = not entry.consumers
    entry.consumers.append(out)
    core.mesh.consumers_changed(entry)
    if first:  # a destination appeared: its producers may now have credit
        for producer in entry.producers:
            core.forwarder.credit_dirty(producer)
        if entry.key[0] == "M":  # the mesh learns of it (router.core.mesh)
            core.mesh.local_consumers(entry, True)


def _attach_producer(core: RouterCore, conn: ConnState, link: Link, now: float) -> None:
    target = link.remote_target
    if target is not None and not isinstance(target, Target):
        # e.g. a transaction coordinator: without a link route there is no one to coordinate
        _refuse(link, E.PRECONDITION_FAILED, "this router cannot act as a transaction coordinator")
        return
    entry: AddressEntry | None = None
    answer: Any = target
    address: str | None = target.address if target is not None else None
    if target is not None and target.dynamic:
        entry = core.table.get_or_create(f"_$temp.{secrets.token_urlsafe(9)}")
        assert entry is not None
        answer = honoured_target(entry.address, dynamic=True)
        address = entry.address
    elif target is not None and target.address:
        if core.table.unavailable(target.address):
            _refuse(link, E.NOT_FOUND, f"Node not found: {target.address} is unavailable")
            return
        entry = core.table.get_or_create(target.address)
        if entry is None:
            _refuse(link, E.NOT_FOUND, f"no route to {target.address} from router {core.router_id}")
            return
        answer = honoured_target(target.address)
    elif target is not None:  # an anonymous target: the relay, routed per message
        answer = honoured_target(None)
    limit = core.config.limits.max_message_size
    link.detach_on_oversize = False  # we reject oversize deliveries instead (as the anchors do)
    if not link.answer(source=link.remote_source, target=answer, max_message_size=limit):
        if entry is not None:  # refused: the echo would not fit the peer's max-frame-size
            core.table.discard_if_unused(entry)
        return
    inl = InLink(link, conn, entry, address)
    inl.zero_credit_since = now  # until the first flush gives it credit (when it has a destination)
    link.context = inl
    conn.in_links.add(inl)
    if entry is not None:
        entry.producers.append(inl)
    core.forwarder.credit_dirty(inl)


def detach_link(core: RouterCore, link: Link, closed: bool, error: Error | None, now: float) -> None:
    """The client detached: report what was in flight, then answer with our detach."""
    link_gone(core, link, now)
    conn = link.session.conn
    # A link we never answered gets attach-then-detach (transport §2.6.3): Link.detach does it.
    if link.state.local is not CLOSED and conn.state.local is ACTIVE and link.session.state.local is ACTIVE:
        link.detach(closed=closed)


def link_gone(core: RouterCore, link: Link, now: float) -> None:
    ctx = link.context
    if isinstance(ctx, OutLink) and not ctx.gone:
        ctx.gone = True
        ctx.conn.out_links.discard(ctx)
        core.forwarder.consumer_gone(ctx, now)
        core.bounds.gone(ctx)
        core.table.discard_if_unused(ctx.entry)
        # Management's router-wide egress counts consumers, transit the links to other routers.
        (core.gone_out if ctx.neighbour is None else core.gone_transit).add(ctx)
    elif isinstance(ctx, InLink) and not ctx.gone:
        ctx.gone = True
        ctx.conn.in_links.discard(ctx)
        core.forwarder.producer_gone(ctx, now)
        if ctx.entry is not None:
            core.table.discard_if_unused(ctx.entry)
        core.gone_in.add(ctx)


def session_ended(core: RouterCore, session: Session, now: float) -> None:
    """Every link of an ended session (or a lost connection) is gone."""
    for link in session.links:
        link_gone(core, link, now)


def alive(link: Link) -> bool:
    """Whether frames can still be written for `link`."""
    return (
        link.state.local is ACTIVE
        and link.session.state.local is ACTIVE
        and link.session.conn.state.local is ACTIVE
        and not link.session.conn.finished
    )


