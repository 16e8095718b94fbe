"""An address's entry in the table (router.core.table): what the router holds for one address.

Owns: AddressEntry (the address's distribution, its local consumers and producers, its
in-process endpoint, deliveries waiting for consumer credit, the other routers that are
destinations of it, its unsettled deliveries per inter-router data link, whether it has fallback
destinations, and its counters) and
OutCount (one such count). The hot path reads and writes these fields directly: an entry is a
record, its few methods keep derived fields in step.
Must not touch: keys, rules or which entry an address has (table.py), links' protocol state,
message bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mypy_extensions import i64

from .fifo import Fifo

if TYPE_CHECKING:
    from .delivery import Forward
    from .links import InLink, OutLink
    from .paths import Remembered

# An in-process endpoint: given a complete encoded message, the time and the address of the link
# it came on (None: an anonymous link or another router's), it returns the outcome for the sender
# and the replies to route, as (to-address, encoded message) pairs.
LocalEndpoint = Callable[[bytes, float, "str | None"], "tuple[Any, list[tuple[str, bytes]]]"]


class OutCount:
    """An address's unsettled deliveries on one inter-router data link (AddressEntry.remote_out)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class AddressEntry:
    __slots__ = (
        "key", "address", "distribution", "consumers", "producers", "pending", "rr", "dynamic", "local",
        "deliveries_ingress", "deliveries_egress", "released", "dropped", "expired", "rejected",
        "_remote", "has_remote", "remote_out", "deliveries_transit", "accepted", "modified", "presettled", "filtered", "limited",
        "bytes", "residence", "settle", "released_told", "flow_records", "remembered",
        "out_last", "out_last_count", "fallback_enabled", "redirected",
    )  # fmt: skip

    def __init__(self, key: str, address: str, distribution: str, dynamic: bool = False) -> None:
        self.key = key
        self.address = address
        self.distribution = distribution
        self.consumers: list[OutLink] = []
        self.producers: list[InLink] = []
        # Anycast deliveries that arrived while every consumer was out of credit. Bounded by the
        # producers' credit windows: a producer gets no credit beyond what is in flight.
        self.pending: Fifo[Forward] = Fifo()
        self.rr: i64 = 0  # round robin's next turn (native: _pick's modulo is plain arithmetic)
        self.dynamic = dynamic
        # An in-process endpoint (e.g. the management node) that takes every delivery here.
        self.local: LocalEndpoint | None = None
        self.deliveries_ingress: i64 = 0
        self.deliveries_egress: i64 = 0
        self.released: i64 = 0
        self.dropped: i64 = 0
        self.expired: i64 = 0
        # Outcomes told to the producers of deliveries to this address (as the links count them),
        # and deliveries that arrived settled.
        self.accepted: i64 = 0
        self.rejected: i64 = 0
        self.modified: i64 = 0
        self.presettled: i64 = 0
        # Counted while flow records are on (router.core.flowcount): message bytes received for
        # it, and the log2 histograms of its deliveries' residence and time to settlement.
        self.bytes = 0
        self.residence: list[int] = [0] * 32
        self.settle: list[int] = [0] * 32
        self.released_told = 0  # producers told released, by the router or by a consumer
        # The flow records' own address (config flow.mesh_address): its deliveries are counted
        # apart on every link while flow records are on (they are not the users' traffic).
        self.flow_records = False
        # Other routers with consumers (mobile), the target router (R), every router (T); and
        # whether there are any, kept with them (a frozenset's truth is a generic call: the
        # hot path asks has_remote).
        self._remote: frozenset[str] = frozenset()
        self.has_remote = False
        # Balanced anycast: unsettled deliveries of this address per inter-router link (links
        # with none are not in it), and the link counted last with its count (sent_on).
        self.remote_out: dict[OutLink, OutCount] = {}
        self.out_last: OutLink | None = None
        self.out_last_count: OutCount | None = None
        # The anycast paths of its deliveries that enter the mesh here (remote.anycast; made on
        # first use).
        self.remembered: Remembered | None = None
        self.deliveries_transit: i64 = 0  # sent to another router
        # Consumers with a source filter (router.core.filtering): while 0, no delivery here is
        # looked at for filters (they cost nothing when unused).
        self.filtered = 0
        # Consumers with a max-message-size (router.core.sizelimits): while 0, no delivery here
        # is compared with any (one test per delivery; native, so that the test is one
        # comparison, where an int's reference count is checked before and after it).
        self.limited: i64 = 0
        # Its rule says enable_fallback (set when the entry is made, as its distribution): with
        # no destination, its deliveries go to its fallback destinations (router.core.fallback),
        # `redirected` of them so far.
        self.fallback_enabled = False
        self.redirected = 0

    @property
    def remote(self) -> frozenset[str]:
        return self._remote

    @remote.setter
    def remote(self, routers: frozenset[str]) -> None:
        self._remote = routers
        self.has_remote = len(routers) != 0

    @property
    def has_destination(self) -> bool:
        return len(self.consumers) != 0 or self.local is not None or self.has_remote

    def sent_on(self, out: OutLink) -> None:
        """One more unsettled delivery of this address on data link `out`. Consecutive ones
        nearly always go on one link: its count is kept at hand, where a dict of ints was a
        lookup and a store per delivery (and again at settlement)."""
        count = self.out_last_count
        if self.out_last is not out or count is None:
            count = self.remote_out.get(out)
            if count is None:
                count = self.remote_out[out] = OutCount()
            self.out_last, self.out_last_count = out, count
        count.n += 1

    def settled_on(self, out: OutLink) -> None:
        """One unsettled delivery of this address on `out` less."""
        count = self.out_last_count if self.out_last is out else self.remote_out.get(out)
        if count is None:
            return
        count.n -= 1
        if count.n <= 0:
            if out in self.remote_out:
                del self.remote_out[out]
            if self.out_last is out:
                self.out_last = self.out_last_count = None

    @property
    def unused(self) -> bool:
        """No local consumer, producer, waiting delivery or in-process endpoint needs it."""
        return not self.consumers and not self.producers and not self.pending and self.local is None

    def __repr__(self) -> str:
        return f"AddressEntry({self.key!r}, {self.distribution}, {len(self.consumers)} consumers)"
