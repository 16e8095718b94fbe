"""The address table: which destinations each address has on this router.

Owns: AddressEntry (an address's distribution, its local consumers and producers, deliveries
waiting for consumer credit, counters) and AddressTable (keys, configured semantics, dynamic
temporary addresses, removal of unused entries).

Keys follow the anchors' address classes: "M<address>" for mobile addresses and
"L<address>" for addresses local to this router (`_local/x`, `_topo/0/<this-router>/x`,
dynamic `temp.<id>`). `_topo/0/<other-router>/x` has no key on a standalone router.
Must not touch: links' protocol state, message bytes.
"""

from __future__ import annotations

import secrets
from collections import deque
from typing import TYPE_CHECKING

from collections.abc import Callable
from typing import Any

from ..config.models import AddressConfig, RouterConfig
from .addressing import AddressMatcher, Kind, classify

if TYPE_CHECKING:
    from .delivery import Forward
    from .links import InLink, OutLink

DEFAULT_DISTRIBUTION = "balanced"

# An in-process endpoint: given a complete encoded message (and the time), it returns the
# outcome for the sender and the replies to route, as (to-address, encoded message) pairs.
LocalEndpoint = Callable[[bytes, float], "tuple[Any, list[tuple[str, bytes]]]"]


class AddressEntry:
    __slots__ = (
        "key", "address", "distribution", "consumers", "producers", "pending", "rr", "dynamic", "local",
        "deliveries_ingress", "deliveries_egress", "released", "dropped", "expired", "rejected",
    )  # fmt: skip

    def __init__(self, key: str, address: str, distribution: str, dynamic: bool = False) -> None:
        self.key = key
        self.address = address
        self.distribution = distribution
        self.consumers: list[OutLink] = []
        self.producers: list[InLink] = []
        # Anycast deliveries that arrived while every consumer was out of credit. Bounded by the
        # producers' credit windows: a producer gets no credit beyond what is in flight.
        self.pending: deque[Forward] = deque()
        self.rr = 0
        self.dynamic = dynamic
        # An in-process endpoint (e.g. the management node) that takes every delivery here.
        self.local: LocalEndpoint | None = None
        self.deliveries_ingress = 0
        self.deliveries_egress = 0
        self.released = 0
        self.dropped = 0
        self.expired = 0
        self.rejected = 0

    @property
    def has_destination(self) -> bool:
        return bool(self.consumers) or self.local is not None

    @property
    def unused(self) -> bool:
        return not self.consumers and not self.producers and not self.pending and self.local is None

    def __repr__(self) -> str:
        return f"AddressEntry({self.key!r}, {self.distribution}, {len(self.consumers)} consumers)"


# Where deliveries to an address this router does not know are counted (they are released).
NOWHERE = AddressEntry("-", "<no destination>", DEFAULT_DISTRIBUTION)


class AddressTable:
    def __init__(self, config: RouterConfig) -> None:
        self.router_id = config.router.id
        self.entries: dict[str, AddressEntry] = {}
        # The rules themselves are the matcher's values, so that one rule can be removed again.
        self.matcher: AddressMatcher[AddressConfig] = AddressMatcher()
        for rule in config.addresses:
            self.add_rule(rule)

    def add_rule(self, rule: AddressConfig) -> None:
        """Configure address semantics at run time (management). Only addresses looked up from
        now on get them: an existing entry keeps its distribution until it is unused."""
        if rule.prefix is not None:
            self.matcher.add_prefix(rule.prefix, rule)
        elif rule.pattern is not None:
            self.matcher.add_pattern(rule.pattern, rule)

    def remove_rule(self, rule: AddressConfig) -> None:
        """Remove `rule` (the very object given to add_rule); existing entries are unchanged."""
        self.matcher.remove(rule)

    def key_of(self, address: str) -> tuple[str, str] | None:
        """(table key, address as configuration matches it), or None when `address` is not
        routable from this router (another router's `_topo` address on a standalone router)."""
        parsed = classify(address, self.router_id)
        if parsed.kind is Kind.MOBILE:
            return "M" + parsed.key, parsed.key
        if parsed.kind in (Kind.LOCAL, Kind.ALL_ROUTERS):
            return "L" + parsed.key, parsed.key
        return None

    def distribution_for(self, address: str) -> str:
        rule = self.matcher.lookup(address)
        return rule.distribution if rule is not None else DEFAULT_DISTRIBUTION

    def find(self, address: str) -> AddressEntry | None:
        key = self.key_of(address)
        return self.entries.get(key[0]) if key is not None else None

    def get_or_create(self, address: str) -> AddressEntry | None:
        key = self.key_of(address)
        if key is None:
            return None
        entry = self.entries.get(key[0])
        if entry is None:
            entry = AddressEntry(key[0], address, self.distribution_for(key[1]))
            self.entries[key[0]] = entry
        return entry

    def new_dynamic(self) -> AddressEntry:
        """A fresh temporary address for a dynamic source: `_topo/0/<router>/temp.<random>`."""
        while True:
            name = "temp." + secrets.token_urlsafe(9)
            key = "L" + name
            if key not in self.entries:
                break
        entry = AddressEntry(key, f"_topo/0/{self.router_id}/{name}", "balanced", dynamic=True)
        self.entries[key] = entry
        return entry

    def discard_if_unused(self, entry: AddressEntry) -> None:
        if entry.unused and self.entries.get(entry.key) is entry:
            del self.entries[entry.key]
