"""The routing core's read API: frozen snapshots of its connections, links, addresses and totals.

    read = core.read                      # built by RouterCore
    read.totals(now)                      # RouterTotals: router-wide counters
    read.connections(now)                 # ConnectionSnapshots by connection id, made as taken
    read.links(now)                       # LinkSnapshots by link id, made as taken
    read.link_credits()                   # [(link id, credit)] of the links up, by link id (cheap)
    read.links_of(ids, now)               # LinkSnapshots of those links only, made as taken
    read.new_links_of(ids, now)           # (LinkSnapshot, ConnectionSnapshot) of those, as taken
    read.link_activity()                  # {link id: LinkSnapshot.activity}, without snapshots
    read.address_activity()               # {table key: AddressSnapshot.activity}
    read.addresses_of(keys, now)          # AddressSnapshots of those addresses only, made as taken
    read.address_keys()                   # every table key, in the table's order (cheap)
    read.address_counts(keys)             # AddressCounts of those addresses still in the table
    read.gone_links(now)                  # [(LinkSnapshot, ConnectionSnapshot)] gone since the last call
    read.addresses(now)                   # AddressSnapshots by table key, made as taken
    read.address(key, now, by)            # one AddressSnapshot (a table key or, unless by identity, an address)

Readers (management) get values, never the hot-path records (InLink, OutLink, AddressEntry,
ConnState): what a counter means and how it is summed (links up now plus the totals of links
that are gone) is decided here, beside the records, so a renamed or added counter cannot be
missed by a reader that sums attributes by name. Times are seconds at the core's `now`; the
mesh's half is router.core.meshread (core.mesh).
Owns: reading the snapshots (their types are snapshots.py's). Must not touch: the core's state
(read only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .connections import NEVER
from .interrouter import Peer
from .links import InLink, OutLink
from .snapshots import AddressCounts, AddressSnapshot, ConnectionSnapshot, LinkSnapshot, RouterTotals

if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Iterator

    from ..amqp.connection import Connection
    from ..amqp.login_throttle import LoginThrottle
    from .addressentry import AddressEntry
    from .attach import Links
    from .bounds import Bounds
    from .connections import ConnState
    from .forwarding import Forwarder
    from .table import AddressTable


def zero_credit_seconds(link: InLink | OutLink, now: float) -> int | None:
    """Seconds since the link's credit dropped to zero (0 while it has credit; None for a link
    that has had no credit since it attached and was never timed)."""
    if link.link.credit > 0:
        return 0
    since = link.zero_credit_since
    return None if since is None else max(0, int(now - since))


def _address_zero_credit(e: AddressEntry, now: float) -> int | None:
    if not e.consumers:
        return None
    seconds = [zero_credit_seconds(out, now) for out in e.consumers]
    if 0 in seconds:
        return 0
    known = [s for s in seconds if s is not None]
    return min(known) if len(known) == len(seconds) else None


def _link_activity(link: InLink | OutLink) -> int:
    """A sum of the link's counters of deliveries and outcomes (each only grows)."""
    dropped = link.dropped if isinstance(link, InLink) else 0
    return link.delivered + link.accepted + link.rejected + link.released + link.modified + dropped


def _address_activity(e: AddressEntry) -> int:
    """A sum of the address's counters of deliveries and outcomes (each only grows)."""
    return e.deliveries_ingress + e.dropped + e.accepted + e.rejected + e.released_told + e.modified + e.released


def _by_id(record: ConnState | InLink | OutLink) -> int:
    return record.id


class CoreReadApi:
    def __init__(self, connections: dict[Connection, ConnState], table: AddressTable, links: Links,
                 forwarder: Forwarder, bounds: Bounds, logins: LoginThrottle) -> None:  # fmt: skip
        self._connections = connections
        self._table = table
        self._links = links
        self._forwarder = forwarder
        self._bounds = bounds
        self._logins = logins

    def _live_links(self) -> list[InLink | OutLink]:
        out: list[InLink | OutLink] = []
        for state in self._connections.values():
            ins, outs = state.link_sets()
            out.extend(ins)
            out.extend(outs)
        return sorted(out, key=_by_id)

    def totals(self, now: float) -> RouterTotals:
        # One pass over the links, nothing made per link: read at every scrape and `router
        # stat`, with every connection waiting (10,000 connections: a few ms, where building
        # and sorting lists of every link took 12-19).
        gone_in, gone_out, gone_transit = self._links.gone_in, self._links.gone_out, self._links.gone_transit
        presettled, dropped, delivered = gone_in.presettled, gone_in.dropped, gone_in.delivered
        accepted, rejected, released, modified = gone_in.accepted, gone_in.rejected, gone_in.released, gone_in.modified
        egress, transit = gone_out.delivered, gone_transit.delivered
        links = connections = 0
        for state in self._connections.values():
            if state.opened and not state.closed:
                connections += 1
            ins, outs = state.link_sets()
            links += len(ins) + len(outs)
            for i in ins:
                presettled += i.presettled
                dropped += i.dropped
                delivered += i.delivered
                accepted += i.accepted
                rejected += i.rejected
                released += i.released
                modified += i.modified
            for o in outs:
                if o.neighbour is None:
                    egress += o.delivered
                else:
                    transit += o.delivered
        bounds, logins = self._bounds, self._logins
        flow = self._forwarder.flow_counts
        return RouterTotals(
            addresses=len(self._table.entries), links=links, connections=connections,
            presettled=presettled, dropped_presettled=dropped, accepted=accepted, rejected=rejected,
            released=released, modified=modified, ingress=delivered, egress=egress, transit=transit,
            from_router=self._forwarder.router_sent, dropped_from_router=self._forwarder.router_dropped,
            failed_logins=logins.failures, failed_logins_delayed=logins.delayed, failed_login_hosts=logins.hosts,
            stuck_links=bounds.stuck_now, unsettled_bound_reached=bounds.stuck_total,
            buffered_bytes=bounds.buffered_total, buffered_budget_bytes=bounds.budget,
            paused_connections=bounds.paused_count(), released_over_budget=bounds.released_over_budget,
            flow_records_emitted=flow.emitted if flow is not None else 0,
            flow_records_dropped=(flow.dropped if flow is not None else 0) + self._forwarder.hops_dropped,
            redirected_to_fallback=self._forwarder.redirected_to_fallback,
        )  # fmt: skip

    def connections(self, now: float) -> Iterator[ConnectionSnapshot]:
        """By id, each snapshot made as it is taken: a page of 50 of 10,000 connections costs a
        sort and 50 snapshots (the reader takes what it wants before the loop runs again).
        Generators written out, here and below: compiled, a generator expression is a list
        made whole."""
        for state in sorted(self._connections.values(), key=_by_id):
            yield self._connection(state, now)

    @staticmethod
    def _connection(state: ConnState, now: float) -> ConnectionSnapshot:
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
            peer_shut_windows=sum(1 for out in state.out_links if out.window_shut),
            streaming_links=len(peer.streams) if peer is not None else 0,
            streaming_links_reclaimed=peer.streams_reclaimed if peer is not None else 0,
        )  # fmt: skip

    def links(self, now: float) -> Iterator[LinkSnapshot]:
        """By id, each snapshot made as it is taken (as connections())."""
        for link in self._live_links():
            yield self._link(link, now)

    def link_credits(self) -> list[tuple[int, int]]:
        """(id, credit) of every link up, by id: what a reader polling often needs (the flow
        recorder, every second), without a snapshot of every link."""
        return [(link.id, link.link.credit) for link in self._live_links() if not link.gone]

    def link_activity(self) -> dict[int, int]:
        """Every live link's `LinkSnapshot.activity` by id, without the snapshots: a reader
        takes snapshots only of the links whose activity moved."""
        return {link.id: _link_activity(link) for link in self._live_links()}

    def address_activity(self) -> dict[str, int]:
        """Every address's `AddressSnapshot.activity` by table key, without the snapshots."""
        return {key: _address_activity(e) for key, e in self._table.entries.items()}

    def address_keys(self) -> list[str]:
        """Every table key, in the table's order (no sorting: a reader taking a few addresses at
        a time with the loop running between starts from this list)."""
        return list(self._table.entries)

    def address_counts(self, keys: Iterable[str]) -> list[AddressCounts]:
        """The per-address figures /metrics shows, for those of `keys` still in the table."""
        entries = self._table.entries
        out = []
        for key in keys:
            e = entries.get(key)
            if e is not None:
                out.append(AddressCounts(key, e.address, e.deliveries_ingress, e.deliveries_egress,
                                         e.deliveries_transit, len(e.consumers), len(e.remote)))  # fmt: skip
        return out

    def addresses_of(self, keys: Iterable[str], now: float) -> Iterator[AddressSnapshot]:
        """Snapshots of the addresses with these table keys that are in the table, by key, each
        made when it is taken, as links_of (an entry removed before its turn is skipped, and so
        is one made again under its key since: gone_addresses has the one removed)."""
        entries = self._table.entries
        for key, entry in [(key, entries[key]) for key in sorted(keys) if key in entries]:
            if entries.get(key) is entry:
                yield self._address(entry, now)

    def _up_of(self, ids: Container[int]) -> Iterator[InLink | OutLink]:
        """The links with these ids, by id, each looked at when it is taken: a reader may take
        them a few at a time with the loop running between (a link gone before its turn is
        skipped: gone_links has it)."""
        for link in [link for link in self._live_links() if link.id in ids]:
            if not link.gone:
                yield link

    def links_of(self, ids: Container[int], now: float) -> Iterator[LinkSnapshot]:
        """Snapshots of the links with these ids that are up, by id, each made when it is taken."""
        for link in self._up_of(ids):  # (written out: compiled, a generator expression is a list)
            yield self._link(link, now)

    def new_links_of(self, ids: Container[int], now: float) -> Iterator[tuple[LinkSnapshot, ConnectionSnapshot]]:
        """As links_of, each with its connection (one snapshot per connection)."""
        connections: dict[int, ConnectionSnapshot] = {}
        for link in self._up_of(ids):
            conn = connections.get(link.conn.id)
            if conn is None:
                conn = connections[link.conn.id] = self._connection(link.conn, now)
            yield self._link(link, now), conn

    @staticmethod
    def _link(link: InLink | OutLink, now: float) -> LinkSnapshot:
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
            residence_hist=tuple(link.residence), settle_hist=tuple(link.settle), activity=_link_activity(link),
        )  # fmt: skip

    def gone_links(self, now: float) -> list[tuple[LinkSnapshot, ConnectionSnapshot]]:
        """The links gone since the last call, as they were when they went, each with its
        connection (kept only while flow records are on: Links.keep_gone)."""
        gone = self._links.keep_gone
        if not gone:
            return []
        self._links.keep_gone = []
        return [(self._link(link, now), self._connection(link.conn, now)) for link in gone]

    def addresses(self, now: float) -> Iterator[AddressSnapshot]:
        """By table key, each snapshot made as it is taken (as connections())."""
        entries = self._table.entries
        for key in sorted(entries):
            yield self._address(entries[key], now)

    def gone_addresses(self, now: float) -> list[AddressSnapshot]:
        """The addresses removed since the last call, as they were (kept only while flow
        records are on: AddressTable.keep_gone)."""
        gone = self._table.keep_gone
        if not gone:
            return []
        self._table.keep_gone = []
        return [self._address(e, now) for e in gone]

    def address(self, key: str | None, address: str | None, now: float) -> AddressSnapshot | None:
        """The entry with table key `key`, else (when `address` is given) the one `address` maps to."""
        entry = self._table.entries.get(key) if key is not None else None
        if entry is None and address is not None:
            entry = self._table.find(address)
        return self._address(entry, now) if entry is not None else None

    @staticmethod
    def _address(e: AddressEntry, now: float) -> AddressSnapshot:
        return AddressSnapshot(
            table_key=e.key, address=e.address, distribution=e.distribution, remote_routers=tuple(sorted(e.remote)),
            in_process=e.local is not None, consumers=len(e.consumers), producers=len(e.producers),
            undelivered=len(e.pending),
            unsettled=sum(out.outstanding for out in e.consumers) + sum(c.n for c in e.remote_out.values()),
            credit=sum(out.link.credit for out in e.consumers), zero_credit_s=_address_zero_credit(e, now),
            ingress=e.deliveries_ingress, egress=e.deliveries_egress, transit=e.deliveries_transit,
            released=e.released, dropped=e.dropped, expired=e.expired, rejected=e.rejected, accepted=e.accepted,
            modified=e.modified, presettled=e.presettled, bytes=e.bytes,
            residence_hist=tuple(e.residence), settle_hist=tuple(e.settle), released_told=e.released_told,
            redirected_to_fallback=e.redirected, activity=_address_activity(e),
        )  # fmt: skip
