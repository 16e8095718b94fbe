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
Owns: which records a reader gets and when (pages, slices, what moved), and the totals; one
record's snapshot is recordsnapshots.py's, the snapshot types snapshots.py's. Must not touch:
the core's state (read only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .links import InLink, OutLink
from .recordsnapshots import (
    address_activity, address_snapshot, connection_snapshot, link_activity, link_snapshot,
)
from .snapshots import AddressCounts, AddressSnapshot, ConnectionSnapshot, LinkSnapshot, RouterTotals

if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Iterator

    from ..amqp.connection import Connection
    from ..amqp.login_throttle import LoginThrottle
    from .attach import Links
    from .bounds import Bounds
    from .connections import ConnState
    from .forwarding import Forwarder
    from .table import AddressTable


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
            yield connection_snapshot(state, now)

    def links(self, now: float) -> Iterator[LinkSnapshot]:
        """By id, each snapshot made as it is taken (as connections())."""
        for link in self._live_links():
            yield link_snapshot(link, now)

    def link_credits(self) -> list[tuple[int, int]]:
        """(id, credit) of every link up, by id: what a reader polling often needs (the flow
        recorder, every second), without a snapshot of every link."""
        return [(link.id, link.link.credit) for link in self._live_links() if not link.gone]

    def link_activity(self) -> dict[int, int]:
        """Every live link's `LinkSnapshot.activity` by id, without the snapshots: a reader
        takes snapshots only of the links whose activity moved."""
        return {link.id: link_activity(link) for link in self._live_links()}

    def address_activity(self) -> dict[str, int]:
        """Every address's `AddressSnapshot.activity` by table key, without the snapshots."""
        return {key: address_activity(e) for key, e in self._table.entries.items()}

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
                yield address_snapshot(entry, now)

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
            yield link_snapshot(link, now)

    def new_links_of(self, ids: Container[int], now: float) -> Iterator[tuple[LinkSnapshot, ConnectionSnapshot]]:
        """As links_of, each with its connection (one snapshot per connection)."""
        connections: dict[int, ConnectionSnapshot] = {}
        for link in self._up_of(ids):
            conn = connections.get(link.conn.id)
            if conn is None:
                conn = connections[link.conn.id] = connection_snapshot(link.conn, now)
            yield link_snapshot(link, now), conn

    def gone_links(self, now: float) -> list[tuple[LinkSnapshot, ConnectionSnapshot]]:
        """The links gone since the last call, as they were when they went, each with its
        connection (kept only while flow records are on: Links.keep_gone)."""
        gone = self._links.keep_gone
        if not gone:
            return []
        self._links.keep_gone = []
        return [(link_snapshot(link, now), connection_snapshot(link.conn, now)) for link in gone]

    def addresses(self, now: float) -> Iterator[AddressSnapshot]:
        """By table key, each snapshot made as it is taken (addresses_of every key)."""
        return self.addresses_of(self._table.entries, now)

    def gone_addresses(self, now: float) -> list[AddressSnapshot]:
        """The addresses removed since the last call, as they were (kept only while flow
        records are on: AddressTable.keep_gone)."""
        gone = self._table.keep_gone
        if not gone:
            return []
        self._table.keep_gone = []
        return [address_snapshot(e, now) for e in gone]

    def address(self, key: str | None, address: str | None, now: float) -> AddressSnapshot | None:
        """The entry with table key `key`, else (when `address` is given) the one `address` maps to."""
        entry = self._table.entries.get(key) if key is not None else None
        if entry is None and address is not None:
            entry = self._table.find(address)
        return address_snapshot(entry, now) if entry is not None else None
