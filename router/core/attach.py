"""Attaching and tearing down the links of clients: the Links unit of the routing core.

Owns: answering attaches (address lookup, dynamic and anonymous termini, the source filters in
force (router.core.filtering), a consumer's max-message-size kept on its OutLink
(router.core.sizelimits), receivers asking to be fallback destinations (source capability
qd.fallback, router.core.fallback), refusals with the right condition, link limits), and tearing
links down on detach, session end or connection loss, which hands in-flight deliveries to the
forwarder for reporting and adds the link's counters to the totals of links that are gone
(management). Attaches on connections between routers go to the mesh (router.core.mesh,
router.core.interrouter); attaches a link route matches (from clients, or routed ones from other
routers) to the link routes (router.core.linkroute).
Collaborators (given by RouterCore): the address table, the forwarder, the bounds, the mesh.
Must not touch: message bytes, disposition bookkeeping (forwarder/settlement), the records'
shape (router.core.links).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.filters import ConsumerFilter, FilterError, parse_filter_set
from ..amqp.link import Link
from ..amqp.messaging import Source, Target
from ..amqp.performatives import RCV_MODES, SND_MODES, Error
from ..amqp.session import Session
from ..amqp.types import Symbol
from .addressentry import AddressEntry
from .connections import ConnState
from .filtering import capabilities
from .grant import message_size_limit
from .identity import terminus_capabilities
from .linkrelay import RoutedLink
from .links import STREAM_LINK, GoneTotals, InLink, OutLink, honoured_source, honoured_target, report_stalled
from .sizelimits import consumer_limit
from .streamreclaim import stream_in_gone
from .table import FALLBACK_CAPABILITY, KEEP_GONE_MAX, AddressTable

if TYPE_CHECKING:
    from .bounds import Bounds
    from .forwarding import Forwarder
    from .linkroute import LinkRoutes
    from .mesh import Mesh


def _refuse(link: Link, condition: str, description: str) -> None:
    link.reject(Error(condition=condition, description=description))


def _unknown_settle_mode(link: Link) -> str | None:
    """Why the peer's attach names a settle mode that does not exist (transport §2.8.2, §2.8.3),
    or None: an answer mirrors the modes (Link.answer), and echoing one the router does not
    know would claim to honour it."""
    remote = link.remote_attach
    if remote is None:
        return None
    if remote.snd_settle_mode not in SND_MODES:
        return f"snd-settle-mode {int(remote.snd_settle_mode)} is none of unsettled (0), settled (1), mixed (2)"
    if remote.rcv_settle_mode not in RCV_MODES:
        return f"rcv-settle-mode {int(remote.rcv_settle_mode)} is neither first (0) nor second (1)"
    return None


class Links:
    link_routes: LinkRoutes  # set by RouterCore once built (it is built after this unit)

    def __init__(self, table: AddressTable, forwarder: Forwarder, bounds: Bounds, mesh: Mesh, *,
                 router_id: str, max_message_size: int | None) -> None:  # fmt: skip
        self.table = table
        self.forwarder = forwarder
        self.bounds = bounds
        self.mesh = mesh
        self.router_id = router_id
        self.max_message_size = max_message_size
        # Counters of links that are gone (management's router-wide totals): producers' links
        # and inter-router links we receive on, consumers' links, inter-router links we send on.
        self.gone_in = GoneTotals()
        self.gone_out = GoneTotals()
        self.gone_transit = GoneTotals()
        # The links gone since flow records last looked, with their last counters (None: flow
        # records are off and nothing is kept): a link's deliveries after the last look would
        # otherwise be in no interval record (router.flow.recorder).
        self.keep_gone: list[InLink | OutLink] | None = None

    def attach_link(self, conn: ConnState, link: Link, now: float) -> None:
        """Answer a client's attach: register a producer or a consumer, or refuse it."""
        if conn.closed or link.state.local is not UNINIT or conn.engine.state.local is not ACTIVE:
            return
        if conn.role in ("inter-router", "edge"):  # links between routers (router.self.interrouter)
            if not self.link_routes.attach(conn, link, now):  # (or a routed attach: router.core.linkroute)
                self.mesh.peer_attach(conn, link, now)
            return
        if conn.link_count >= conn.listener.max_links_per_connection:
            _refuse(link, E.RESOURCE_LIMIT_EXCEEDED,
                    f"link limit ({conn.listener.max_links_per_connection}) reached on this connection")  # fmt: skip
            return
        refusal = _unknown_settle_mode(link)
        if refusal is not None:  # never echoed, nor passed on to a link route's container
            _refuse(link, E.INVALID_FIELD, refusal)
            return
        if self.link_routes.attach(conn, link, now):  # link-routed (router.core.linkroute)
            return
        if link.is_sender:
            self._attach_consumer(conn, link, now)
        else:
            self._attach_producer(conn, link, now)

    def _attach_consumer(self, conn: ConnState, link: Link, now: float) -> None:
        source = link.remote_source
        if not isinstance(source, Source):
            _refuse(link, E.INVALID_FIELD, "a receiving link needs a source")
            return
        try:  # the filters it can apply (router.amqp.filters); unknown ones are left out
            wanted, echo = parse_filter_set(source.filter)
        except FilterError as exc:
            _refuse(link, E.INVALID_FIELD, str(exc))
            return
        caps = capabilities(wanted) if wanted is not None else None
        table = self.table
        as_fallback = FALLBACK_CAPABILITY in terminus_capabilities(source)  # a fallback destination
        if source.dynamic:
            if as_fallback:
                _refuse(link, E.PRECONDITION_FAILED, f"{FALLBACK_CAPABILITY}: a fallback destination has an address")
                return
            entry = table.new_dynamic()
            answer = honoured_source(entry.address, dynamic=True, filter_set=echo, capabilities=caps)
        else:
            if not source.address:
                _refuse(link, E.INVALID_FIELD, "a receiving link needs a source address (or dynamic)")
                return
            if table.unavailable(source.address):  # the anchors' wording
                _refuse(link, E.NOT_FOUND, f"Node not found: {source.address} is unavailable")
                return
            consumes = source.address
            if as_fallback:
                fallback = table.fallback_address(source.address)
                if fallback is None:
                    _refuse(link, E.PRECONDITION_FAILED, f"{FALLBACK_CAPABILITY}: {source.address} has no fallback "
                            f"destinations on router {self.router_id} (no address rule with enable_fallback)")  # fmt: skip
                    return
                consumes, caps = fallback, (*(caps or ()), Symbol(FALLBACK_CAPABILITY))  # echoed: honoured
            maybe = table.get_or_create(consumes, consumer=True)
            if maybe is None:
                _refuse(link, E.NOT_FOUND, f"no route to {source.address} from router {self.router_id}")
                return
            entry, answer = maybe, honoured_source(source.address, filter_set=echo, capabilities=caps)
        if not link.answer(source=answer, target=link.remote_target):  # refused: the echo won't fit
            table.discard_if_unused(entry)
            return
        self._add_consumer(conn, link, entry, now, wanted)

    def _add_consumer(
        self, conn: ConnState, link: Link, entry: AddressEntry, now: float, wanted: ConsumerFilter | None = None
    ) -> OutLink:
        out = OutLink(link, conn, entry)
        out.zero_credit_since = now  # no credit until the consumer gives some
        link.context = out
        conn.out_links.add(out)
        if wanted is not None:
            out.filter = wanted
            entry.filtered += 1
        # Its max-message-size (a client's receiver, or a broker queue's answer to an out
        # auto-link): nothing larger is sent to it (router.core.sizelimits).
        limit = consumer_limit(link)
        if limit:
            out.max_message_size = limit
            entry.limited += 1
        first = not entry.consumers
        entry.consumers.append(out)
        self.mesh.consumers_changed(entry)
        if first:  # a destination appeared: its producers may now have credit
            for producer in entry.producers:
                self.forwarder.credit_dirty(producer)
            if entry.key[0] == "M":  # the mesh learns of it (router.self.mesh)
                self.mesh.local_consumers(entry, True)
        return out

    def register_consumer(self, conn: ConnState, link: Link, address: str, now: float) -> OutLink | None:
        """A link the router attached itself and sends on (an auto-link to a broker queue,
        router.core.autolinks) becomes a consumer of `address`; None if the address is not
        one of this router's."""
        entry = self.table.get_or_create(address, consumer=True, egress=False)  # phase 0 of a waypoint
        return None if entry is None else self._add_consumer(conn, link, entry, now)

    def register_producer(self, conn: ConnState, link: Link, address: str, now: float,
                          from_fallback: bool = False) -> InLink | None:  # fmt: skip
        """A link the router attached itself and receives on (an auto-link from a broker queue)
        becomes a producer into `address` (phase 1 of a waypoint address): credit only while it
        has a destination (`from_fallback`: a regular one; router.core.fallback)."""
        address = self.table.egress_address(address)
        entry = self.table.get_or_create(address)
        if entry is None:
            return None
        link.detach_on_oversize = False  # an oversize delivery is rejected, not the link
        inl = self._add_producer(conn, link, entry, address, now)
        inl.from_fallback = from_fallback  # (before the flush that gives it credit)
        return inl

    def _add_producer(self, conn: ConnState, link: Link, entry: AddressEntry | None, address: str | None,
                      now: float) -> InLink:  # fmt: skip
        inl = InLink(link, conn, entry, address)
        inl.zero_credit_since = now  # until the first flush gives it credit (when it has a destination)
        link.context = inl
        conn.in_links.add(inl)
        if entry is not None:
            entry.producers.append(inl)
        self.forwarder.credit_dirty(inl)
        return inl

    def _attach_producer(self, conn: ConnState, link: Link, now: float) -> None:
        target = link.remote_target
        if target is not None and not isinstance(target, Target):
            # e.g. a transaction coordinator: without a link route there is no one to coordinate
            _refuse(link, E.PRECONDITION_FAILED, "this router cannot act as a transaction coordinator")
            return
        entry: AddressEntry | None = None
        answer: Any = target
        address: str | None = target.address if target is not None else None
        # A producer that drains a fallback destination (the anchors' in-link with the target
        # capability qd.fallback, as an in auto-link with `fallback: true`): router.core.fallback.
        from_fallback = target is not None and FALLBACK_CAPABILITY in terminus_capabilities(target)
        if from_fallback and (target is None or not target.address or target.dynamic):
            _refuse(link, E.PRECONDITION_FAILED, f"{FALLBACK_CAPABILITY}: a fallback's producer names its address")
            return
        if target is not None and target.dynamic:
            entry = self.table.get_or_create(f"_$temp.{secrets.token_urlsafe(9)}")
            assert entry is not None
            answer = honoured_target(entry.address, dynamic=True)
            address = entry.address
        elif target is not None and target.address:
            if self.table.unavailable(target.address):
                _refuse(link, E.NOT_FOUND, f"Node not found: {target.address} is unavailable")
                return
            if from_fallback and self.table.fallback_address(target.address) is None:
                _refuse(link, E.PRECONDITION_FAILED, f"{FALLBACK_CAPABILITY}: {target.address} has no fallback "
                        f"destinations on router {self.router_id} (no address rule with enable_fallback)")  # fmt: skip
                return
            entry = self.table.get_or_create(target.address)
            if entry is None:
                _refuse(link, E.NOT_FOUND, f"no route to {target.address} from router {self.router_id}")
                return
            answer = honoured_target(target.address, fallback=from_fallback)
        elif target is not None:  # an anonymous target: the relay, routed per message
            answer = honoured_target(None)
        # The router's limit rejects an oversize delivery (as the anchors do); a policy group's
        # detaches the link with message-size-exceeded (router.core.grant).
        limit, link.detach_on_oversize = message_size_limit(conn.policy, self.max_message_size)
        if not link.answer(source=link.remote_source, target=answer, max_message_size=limit):
            if entry is not None:  # refused: the echo would not fit the peer's max-frame-size
                self.table.discard_if_unused(entry)
            return
        inl = self._add_producer(conn, link, entry, address, now)
        inl.from_fallback = from_fallback  # credit only while the address has a regular destination

    def detaches_ignored(self, conn: ConnState, session: Session) -> Error | None:
        """The error to end `session` with when its peer holds, unanswered, as many links we
        detached (refused, or stolen: transport 2.6.1) as the connection's link limit. Each
        holds its handle and our state of it until the peer's detach answers ours: a peer that
        attaches on without answering (a name again and again, say) would grow them without end.
        A stolen link counts towards the link limit too while it waits: a link cannot be had
        beyond the limit by stealing, only refused, so that this bounds what the peer holds."""
        limit = conn.listener.max_links_per_connection
        held = session.links_by_remote
        if len(held) <= limit:  # (the count only when the peer holds more than it may have)
            return None
        waiting = sum(1 for link in held.values() if link.state.local is CLOSED)
        if waiting < limit:
            return None
        description = (f"{waiting} links the router detached await the peer's detach on this session "
                       f"(the link limit is {limit}): the session is ended")  # fmt: skip
        return Error(condition=E.RESOURCE_LIMIT_EXCEEDED, description=description)

    def detach_link(self, link: Link, closed: bool, error: Error | None, now: float) -> None:
        """The client detached: report what was in flight, then answer with our detach."""
        self.link_gone(link, now)
        conn = link.session.conn
        # A link we never answered gets attach-then-detach (transport §2.6.3): Link.detach does it.
        if link.state.local is not CLOSED and conn.state.local is ACTIVE and link.session.state.local is ACTIVE:
            link.detach(closed=closed)

    def detach_stalled(self, out: OutLink, now: float) -> None:
        """`out`'s consumer took nothing of the message streaming to it for its connection's
        stalled_stream_timeout_s (holding.stalled): what it had in flight is reported as when a
        consumer detaches (the stream's producer hears modified, its held frames are dropped),
        then our detach tells it why."""
        link = out.link
        conn = link.session.conn
        error = report_stalled(link, out.conn)
        self.link_gone(link, now)
        if link.state.local is ACTIVE and conn.state.local is ACTIVE and link.session.state.local is ACTIVE:
            link.detach(closed=True, error=error)

    def link_gone(self, link: Link, now: float) -> None:
        ctx = link.context
        if isinstance(ctx, OutLink) and not ctx.gone:
            ctx.gone = True
            ctx.conn.out_links.discard(ctx)
            if ctx.band == STREAM_LINK:  # out of its neighbour's pool (router.core.streamreclaim)
                self.forwarder.idle_streams.forget(ctx)
            self.forwarder.consumer_gone(ctx, now)
            self.bounds.gone(ctx)
            self.table.discard_if_unused(ctx.entry)
            # Management's router-wide egress counts consumers, transit the links to other routers.
            (self.gone_out if ctx.neighbour is None else self.gone_transit).add(ctx)
            self._keep_gone(ctx)
        elif type(ctx) is RoutedLink:
            self.link_routes.link_gone(link)
        elif isinstance(ctx, InLink) and not ctx.gone:
            ctx.gone = True
            ctx.conn.in_links.discard(ctx)
            if ctx.peer is not None:  # a streaming link the peer gave back counts no more
                stream_in_gone(ctx)
            self.forwarder.producer_gone(ctx, now)
            if ctx.entry is not None:
                self.table.discard_if_unused(ctx.entry)
            self.gone_in.add(ctx)
            self._keep_gone(ctx)

    def _keep_gone(self, ctx: InLink | OutLink) -> None:
        gone = self.keep_gone
        if gone is not None and len(gone) < KEEP_GONE_MAX:
            gone.append(ctx)

    def session_ended(self, session: Session, now: float) -> None:
        """Every link of an ended session (or a lost connection) is gone."""
        for link in session.links:
            self.link_gone(link, now)
