"""Reading the routing core into flow records (docs/flow-records.md).

Owns: when each record is made from the core's read API (router.core.coreread) and its flow
counters (router.core.flowcount): a `router` snapshot at start and whenever its neighbours or
their costs change, a `link` snapshot when a link is first seen open and when it is gone,
`link_interval` and `address_interval` records every `interval_s` for what had activity
(differences of the core's counters since the last interval: the hot path counts nothing
twice; an address whose entry the table removes gets its record at the next poll, from its
last counters), and `hop` records from the core's hop samples. `poll(now)` runs once a second
(router.net.flowtask); a link that goes gets its last interval record from its counters when
it went (the core keeps gone links for it: Links.keep_gone), and one opened and gone between
two polls gets its snapshots and interval record then, when it carried deliveries. Credit
starvation is sampled at each poll: a link with no credit at a poll counts the time since the
previous poll as starved.
What it reads costs the router's loop, so it reads little: a poll reads every link's credit and
only new links whole; an interval reads whole only the links and addresses whose activity (a
sum of their counters, coreread) moved, or that were starved. At 10,000 links and addresses a
poll takes ~5 ms and a quiet interval ~9 ms, where snapshots of everything took 60 and 170 ms.
What it must read whole (new links, what moved) is read in slices of SLICE records (`step`),
which the flush task runs with the loop serving connections between them: an interval in which
10,000 addresses moved made its 20,000 records in one ~0.4 s stall before.
Must not touch: the core's state (read only, besides turning its flow counting on), I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ..config.models import Flow
from .hist import difference
from .records import Emitter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..core.snapshots import AddressSnapshot, ConnectionSnapshot, LinkSnapshot
    from ..core.router import RouterCore

OUTCOMES = ("accepted", "rejected", "released", "modified")
# Records made per step of the work a poll leaves (new links' snapshots, an interval's records):
# ~3-5 ms of the router's loop each (bench/flowscale.py).
SLICE: Final = 250
_DONE: Final = object()


@dataclass
class _LinkSeen:
    record: dict[str, Any]  # the link snapshot's fields (state aside)
    at_interval: LinkSnapshot | None  # its counters at the last interval (None: opened since)
    credit: int  # its credit at the last poll
    starved_s: float = 0.0


def _link_fields(snap: LinkSnapshot, conn: ConnectionSnapshot | None) -> dict[str, Any]:
    """A link snapshot's fields (state aside), from the link and its connection."""
    role = conn.role if conn is not None else "normal"
    peer = snap.peer_router if snap.peer_router is not None else (conn.container_id if conn is not None else None)
    return {
        "link_id": str(snap.id), "connection_id": str(snap.connection_id), "role": role, "peer": peer,
        "direction": "in" if snap.incoming else "out", "address": snap.address, "name": snap.name,
    }  # fmt: skip


@dataclass
class _Totals:
    deliveries: int = 0
    bytes: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    dropped: int = 0


class FlowRecorder:
    def __init__(self, core: RouterCore, flow: Flow, *, version: str, compiled: bool, boot: str | None = None) -> None:
        self.core = core
        self.flow = flow
        self.version = version
        self.compiled = compiled
        self.emitter = Emitter(core.router_id, flow.buffer_records, boot)
        core.forwarder.enable_flow(flow.sample_one_in, core.router_id, self.emitter)
        core.table.keep_gone = []
        core.links.keep_gone = []
        self._router_said: tuple[Any, ...] | None = None
        self._links: dict[int, _LinkSeen] = {}
        self._flow_links: set[int] = set()  # the collectors' links (never reported)
        self._addresses: dict[str, AddressSnapshot] = {}
        self._interval_at: float | None = None
        self._polled_at: float | None = None
        self._work: deque[Iterator[None]] = deque()  # each yields once per record it made

    def _emit(self, kind: str, now: float, fields: dict[str, Any]) -> None:
        self.emitter.emit(kind, self.core.wall_time(now), fields)

    # --- once a second ---------------------------------------------------------------------------

    def poll(self, now: float) -> None:
        """Snapshots of what changed, hop samples; the interval records when one is due."""
        self.begin_poll(now)
        self.finish()

    def begin_poll(self, now: float) -> None:
        """As poll, leaving the snapshots of new links and the interval records to `step` (or
        `finish`). It first finishes what the last poll left."""
        self.finish()
        if self._interval_at is None:
            self._interval_at = now
        self._router(now)
        self._link_changes(now)
        for snap in self.core.read.gone_addresses(now):  # what they counted since the last interval
            self._address_interval(snap, self._interval_s(now), now)
            self._addresses.pop(snap.table_key, None)  # a new entry under its key starts from 0
        for hop in self.core.forwarder.take_hops():
            trace_id, ingress, address, prev, nxt, residence, settle, outcome = hop
            self._emit("hop", now, {
                "trace_id": trace_id, "ingress": ingress, "address": address, "prev": prev, "next": nxt,
                "residence_us": residence, "settle_us": settle, "outcome": outcome,
            })  # fmt: skip
        if now - self._interval_at >= self.flow.interval_s:
            self._start_interval(now)

    def step(self, limit: int | None = None) -> bool:
        """Make up to `limit` (SLICE) of the records a poll left; whether work remains."""
        work, made = self._work, 0
        limit = SLICE if limit is None else limit
        while work and made < limit:
            if next(work[0], _DONE) is _DONE:
                work.popleft()
            else:
                made += 1
        return bool(work)

    @property
    def pending(self) -> bool:
        """Whether a poll left work for `step`."""
        return bool(self._work)

    def finish(self) -> None:
        """Make every record a poll left."""
        while self.step():
            pass

    def take(self, limit: int) -> list[dict[str, Any]]:
        return self.emitter.take(limit)

    def put_back(self, records: list[dict[str, Any]]) -> None:
        self.emitter.put_back(records)

    def _router(self, now: float) -> None:
        config = self.core.config.router
        neighbours = tuple((rid, info["cost"]) for rid, info in sorted(self.core.mesh.neighbours().items()))
        state = (config.mode, neighbours)
        if state != self._router_said:
            self._router_said = state
            self._emit("router", now, {
                "mode": config.mode, "version": self.version, "compiled": self.compiled,
                "neighbours": [{"router": rid, "cost": cost} for rid, cost in neighbours],
            })  # fmt: skip

    def _link_changes(self, now: float) -> None:
        elapsed = now - self._polled_at if self._polled_at is not None else 0.0
        self._polled_at = now
        read = self.core.read
        # Links gone since the last poll, with their counters when they went: the deliveries of
        # their last moments (or of their whole life, opened and gone between two polls) are
        # counted in their last interval record, so that counting ingress links counts them all.
        gone = {snap.id: (snap, conn) for snap, conn in read.gone_links(now) if not self._is_flow_link(snap)}
        # Every link's credit (cheap), a snapshot only of the links not seen before: at 10,000
        # links a snapshot of each every second took ~60 ms of the router's loop.
        current: set[int] = set()
        new: set[int] = set()
        flow_links: set[int] = set()  # the collectors' links up now
        for link_id, credit in read.link_credits():
            if link_id in self._flow_links:
                flow_links.add(link_id)
                continue
            seen = self._links.get(link_id)
            if seen is None:
                new.add(link_id)
                continue
            current.add(link_id)
            if seen.credit <= 0 and credit <= 0:
                seen.starved_s += elapsed
            seen.credit = credit
        self._flow_links = flow_links
        if new:
            self._work.append(self._open_links(read.new_links_of(new, now), now))
        for link_id in [i for i in self._links if i not in current]:
            seen = self._links.pop(link_id)
            last = gone.pop(link_id, None)
            if last is not None:  # (not kept past KEEP_GONE_MAX links gone between two polls:
                # its last counts are then on its address's record only)
                self._link_interval(seen, last[0], self._interval_s(now), now)
            self._emit("link", now, {**seen.record, "state": "closed"})
        for snap, conn in gone.values():  # opened and gone between two polls: reported when it carried something
            if snap.delivered > 0:
                seen = _LinkSeen(_link_fields(snap, conn), None, snap.credit)
                self._emit("link", now, {**seen.record, "state": "open"})
                self._link_interval(seen, snap, self._interval_s(now), now)
                self._emit("link", now, {**seen.record, "state": "closed"})

    def _open_links(self, links: Iterator[tuple[LinkSnapshot, ConnectionSnapshot]], now: float) -> Iterator[None]:
        """A `link` snapshot of each new link (a link gone before its turn is reported by the
        next poll as opened and gone)."""
        for snap, conn in links:
            if self._is_flow_link(snap):
                self._flow_links.add(snap.id)
                continue
            seen = self._links[snap.id] = _LinkSeen(_link_fields(snap, conn), None, snap.credit)
            self._emit("link", now, {**seen.record, "state": "open"})
            yield None

    def _is_flow_link(self, snap: LinkSnapshot) -> bool:
        """The collectors' links: reporting them would never let the records go quiet."""
        return snap.address is not None and snap.address == self.flow.mesh_address

    # --- every interval_s ------------------------------------------------------------------------

    def interval(self, now: float) -> None:
        """Every interval record due now, at once (the last flush when the router stops)."""
        self.finish()
        self._start_interval(now)
        self.finish()

    def _start_interval(self, now: float) -> None:
        """An interval record for each link and address with activity since the last one, made
        by `step`. Only those are read whole: a snapshot of each of 10,000 links and addresses
        took ~150 ms. The records say the interval's time; their counters are read when their
        slice runs, and the next interval counts from there, so nothing is counted twice or lost."""
        read, links, addresses = self.core.read, self._links, self._addresses
        # (a link with no interval yet is counted from 0, as _link_interval does)
        moved = {link_id for link_id, activity in read.link_activity().items()
                 if (seen := links.get(link_id)) is not None
                 and (activity != (seen.at_interval.activity if seen.at_interval else 0)
                      or seen.starved_s)}  # fmt: skip
        baseline = {key: snap.activity for key, snap in addresses.items()}  # (none yet: counted from 0)
        changed = [key for key, activity in read.address_activity().items() if activity != baseline.get(key, 0)]
        interval_s = self._interval_s(now)
        self._interval_at = now
        if moved:
            self._work.append(self._link_intervals(read.links_of(moved, now), interval_s, now))
        if changed:
            self._work.append(self._address_intervals(read.addresses_of(changed, now), interval_s, now))

    def _link_intervals(self, snaps: Iterator[LinkSnapshot], interval_s: float, now: float) -> Iterator[None]:
        for snap in snaps:  # (each was in _links when the interval started; only a poll removes one, after the slices)
            self._link_interval(self._links[snap.id], snap, interval_s, now)
            yield None

    def _address_intervals(self, snaps: Iterator[AddressSnapshot], interval_s: float, now: float) -> Iterator[None]:
        for snap in snaps:
            self._address_interval(snap, interval_s, now)
            yield None

    def _interval_s(self, now: float) -> float:
        return round(now - self._interval_at, 6) if self._interval_at is not None else 0.0

    def _link_interval(self, seen: _LinkSeen, snap: LinkSnapshot, interval_s: float, now: float) -> None:
        before = seen.at_interval
        seen.at_interval = snap
        deliveries = snap.delivered - (before.delivered if before is not None else 0)
        counts = {name: getattr(snap, name) - (getattr(before, name) if before is not None else 0) for name in OUTCOMES}
        dropped = snap.dropped_presettled - (before.dropped_presettled if before is not None else 0)
        if deliveries <= 0 and not seen.starved_s and not dropped and not any(counts.values()):
            # No activity. (Outcomes count as activity: a delivery counted in one interval
            # may learn its outcome in the next, and its link may close before a third.)
            return
        starved, seen.starved_s = seen.starved_s, 0.0
        r = seen.record
        self._emit("link_interval", now, {
            "link_id": r["link_id"], "peer": r["peer"], "role": r["role"], "direction": r["direction"],
            "address": r["address"], "interval_s": interval_s, "deliveries": deliveries,
            "bytes": snap.bytes - (before.bytes if before is not None else 0), **counts, "dropped": dropped,
            "records_deliveries": snap.records - (before.records if before is not None else 0),
            "records_bytes": snap.records_bytes - (before.records_bytes if before is not None else 0),
            "credit_starved_s": round(starved, 6),
            "residence_hist": difference(list(snap.residence_hist), list(before.residence_hist) if before is not None else None),
            "settle_hist": difference(list(snap.settle_hist), list(before.settle_hist) if before is not None else None),
        })  # fmt: skip

    def _address_interval(self, snap: AddressSnapshot, interval_s: float, now: float) -> None:
        if snap.address == self.flow.mesh_address:
            return  # the records themselves: reporting them would never let the records go quiet
        before = self._addresses.get(snap.table_key)
        self._addresses[snap.table_key] = snap
        if before is not None and snap.ingress < before.ingress:
            before = None  # the entry was dropped and made again since: its counters restarted
        deliveries = snap.ingress - (before.ingress if before is not None else 0)
        dropped = snap.dropped - (before.dropped if before is not None else 0)
        counts = {name: getattr(snap, name) - (getattr(before, name) if before is not None else 0) for name in OUTCOMES}
        counts["released"] = snap.released_told - (before.released_told if before is not None else 0)
        if deliveries <= 0 and dropped <= 0 and not any(counts.values()):
            # No activity. Outcomes count as activity (as a link's): a delivery counted in one
            # interval may learn its outcome in the next, which would otherwise count it nowhere.
            return
        self._emit("address_interval", now, {
            "address": snap.address, "interval_s": interval_s, "deliveries": deliveries,
            "bytes": snap.bytes - (before.bytes if before is not None else 0), **counts, "dropped": dropped,
            "residence_hist": difference(list(snap.residence_hist), list(before.residence_hist) if before is not None else None),
            "settle_hist": difference(list(snap.settle_hist), list(before.settle_hist) if before is not None else None),
        })  # fmt: skip
