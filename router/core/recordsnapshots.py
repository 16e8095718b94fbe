"""What a snapshot of each of the core's records says: a connection's, a link's and an
address's figures read into the frozen values of snapshots.py, and the sums a reader compares
(activity) or shows (zero-credit seconds).

Owns: reading one record into its snapshot. coreread.py decides which records a reader gets and
when (pages, slices, what moved). Must not touch: the core's state (read only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .connections import NEVER
from .interrouter import Peer
from .links import InLink, OutLink
from .snapshots import AddressSnapshot, ConnectionSnapshot, LinkSnapshot

if TYPE_CHECKING:
    from .addressentry import AddressEntry
    from .connections import ConnState


def zero_credit_seconds(link: InLink | OutLink, now: float) -> int | None:
    """Seconds since the link's credit dropped to zero (0 while it has credit; None for a link
    that has had no credit since it attached and was never timed)."""
    if link.link.credit > 0:
        return 0
    since = link.zero_credit_since
    return None if since is None else max(0, int(now - since))


def address_zero_credit(e: AddressEntry, now: float) -> int | None:
    if not e.consumers:
        return None
    seconds = [zero_credit_seconds(out, now) for out in e.consumers]
    if 0 in seconds:
        return 0
    known = [s for s in seconds if s is not None]
    return min(known) if len(known) == len(seconds) else None


def link_activity(link: InLink | OutLink) -> int:
    """A sum of the link's counters of deliveries and outcomes (each only grows)."""
    dropped = link.dropped if isinstance(link, InLink) else 0
    return link.delivered + link.accepted + link.rejected + link.released + link.modified + dropped


def address_activity(e: AddressEntry) -> int:
    """A sum of the address's counters of deliveries and outcomes (each only grows)."""
    return e.deliveries_ingress + e.dropped + e.accepted + e.rejected + e.released_told + e.modified + e.released


def connection_snapshot(state: ConnState, now: float) -> ConnectionSnapshot:
    engine, remote = state.engine, state.engine.remote_open
    tls = state.tls
    sessions = engine.sessions
    peer = state.peer if isinstance(state.peer, Peer) else None
    return ConnectionSnapshot(
        id=state.id, container_id=remote.container_id if remote is not None else None, host=state.host,
        role=state.role, outgoing=state.outgoing, config_name=state.listener.name,
        sasl_mechanism=state.sasl_mechanism, user=engine.user,
        tls_protocol=tls.protocol if tls is not None else None, tls_cipher=tls.cipher if tls is not None else None,
        encrypted=tls is not None,
        properties={str(k): v for k, v in (remote.properties or {}).items()} if remote is not None else None,
        opened=state.opened, closing=state.closed,
        # Differences of the core's clock: seconds, not timestamps, so they hold whatever the
        # wall clock does.
        uptime_s=max(0, int(now - state.opened_at)) if state.opened_at is not None else 0,
        last_delivery_s=max(0, int(now - state.last_delivery)) if state.last_delivery != NEVER else None,
        link_count=state.link_count, session_count=len(sessions), output_blocked=state.output_blocked,
        buffered_bytes=state.buffered_bytes, held_frame_bytes=state.held_frame_bytes,
        window_held_bytes=engine.output.held_bytes,
        shut_windows=sum(1 for s in sessions if s.window_shut),
        peer_shut_windows=sum(1 for out in state.link_sets()[1] if out.window_shut),
        streaming_links=len(peer.streams) if peer is not None else 0,
        streaming_links_reclaimed=peer.streams_reclaimed if peer is not None else 0,
    )  # fmt: skip


def link_snapshot(link: InLink | OutLink, now: float) -> LinkSnapshot:
    entry = link.entry
    if isinstance(link, InLink):
        between_routers = link.peer is not None
        attached = link.address
        undelivered, unsettled, presettled, dropped = 0, link.inflight, link.presettled, link.dropped
        stuck, stuck_count, peer_router = False, 0, link.peer
        size_hint: int | None = link.size_hint if link.size_hint >= 0 else None
        max_message_size = link.link.max_message_size or 0
    else:
        between_routers = link.neighbour is not None
        attached = None
        undelivered, unsettled, presettled, dropped = len(link.pending or ()), link.outstanding, 0, 0
        stuck, stuck_count, size_hint = link.stuck, link.stuck_count, None
        max_message_size = link.max_message_size
        peer_router = link.neighbour
    mine = entry is not None and not between_routers
    return LinkSnapshot(
        id=link.id, name=link.link.name, incoming=isinstance(link, InLink), between_routers=between_routers,
        table_key=entry.key if mine and entry is not None else None,
        address=attached or (entry.address if mine and entry is not None else None),
        connection_id=link.conn.id, up=not link.gone, capacity=link.capacity, undelivered=undelivered,
        unsettled=unsettled, delivered=link.delivered, presettled=presettled, dropped_presettled=dropped,
        accepted=link.accepted, rejected=link.rejected, released=link.released, modified=link.modified,
        credit=link.link.credit, zero_credit_s=zero_credit_seconds(link, now), stuck=stuck,
        stuck_count=stuck_count, size_hint=size_hint, max_message_size=max_message_size,
        peer_router=peer_router, bytes=link.bytes,
        records=link.records, records_bytes=link.records_bytes,
        residence_hist=tuple(link.residence), settle_hist=tuple(link.settle), activity=link_activity(link),
    )  # fmt: skip


def address_snapshot(e: AddressEntry, now: float) -> AddressSnapshot:
    return AddressSnapshot(
        table_key=e.key, address=e.address, distribution=e.distribution, remote_routers=tuple(sorted(e.remote)),
        in_process=e.local is not None, consumers=len(e.consumers), producers=len(e.producers),
        undelivered=len(e.pending),
        unsettled=sum(out.outstanding for out in e.consumers) + sum(c.n for c in e.remote_out.values()),
        credit=sum(out.link.credit for out in e.consumers), zero_credit_s=address_zero_credit(e, now),
        ingress=e.deliveries_ingress, egress=e.deliveries_egress, transit=e.deliveries_transit,
        released=e.released, dropped=e.dropped, expired=e.expired, rejected=e.rejected, accepted=e.accepted,
        modified=e.modified, presettled=e.presettled, bytes=e.bytes,
        residence_hist=tuple(e.residence), settle_hist=tuple(e.settle), released_told=e.released_told,
        redirected_to_fallback=e.redirected, activity=address_activity(e),
    )  # fmt: skip
