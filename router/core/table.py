"""The address table: which destinations each address has on this router.

Owns: AddressTable (keys, configured semantics, dynamic temporary addresses, removal of unused
entries) and the entries lookup() answers with when an address has none (NOWHERE, UNAVAILABLE).
An entry itself (AddressEntry: what the router holds for one address) is addressentry.py's.

Keys follow the anchors' address classes: "M<address>" for mobile addresses and
"L<address>" for addresses local to this router (`_local/x`, `_topo/0/<this-router>/x`,
dynamic `temp.<id>`). In a mesh (router mode interior) "R<router-id>" holds every
`_topo/0/<other-router>/...` address (its destination is that router, docs/mesh.md) and
"T<x>" is `_topo/0/all/x` (every router's local `x`); a standalone router has no R keys and
treats `_topo/0/all/x` as its own `_local/x`. "M_$phase1/x" and "M_$fallback/x" are a waypoint's
phase 1 and an address's fallback destinations (PHASE1, FALLBACK).
Remote destinations (`AddressEntry.remote`: router ids) are written by router.core.mesh from
the topology's address table and routes.
Must not touch: links' protocol state, message bytes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Final

from ..config.models import AddressConfig, RouterConfig
from .addressentry import AddressEntry
from .addressing import AddressMatcher, Kind, classify

DEFAULT_DISTRIBUTION: Final = "balanced"
# Phase 1 of a waypoint address `x` is the mobile address PHASE1 + x (key "M_$phase1/x"): the
# anchors' "M1x". Phase 0 is the address itself, so addresses without waypoints are unchanged.
PHASE1: Final = "_$phase1/"
# The fallback destinations of an address `x` whose rule says enable_fallback are the consumers
# of the mobile address FALLBACK + x (key "M_$fallback/x": the anchors' phase `F`), advertised
# and reported by edges like any mobile address (router.core.fallback). A receiver asks to be
# one with the source capability FALLBACK_CAPABILITY.
FALLBACK: Final = "_$fallback/"
FALLBACK_CAPABILITY: Final = "qd.fallback"
KEYS_MAX: Final = 4096  # addresses whose table key is remembered (then it starts afresh)

# Where deliveries to an address this router does not know are counted (they are released).
NOWHERE = AddressEntry("-", "<no destination>", DEFAULT_DISTRIBUTION)
# What lookup() answers for an address whose rule says `distribution: unavailable` (and that has
# no entry): no destination, and a client's delivery to it is rejected with amqp:not-found.
UNAVAILABLE = AddressEntry("-unavailable", "<unavailable>", "unavailable")


def _no_remote(_key: str) -> frozenset[str]:
    return frozenset()


KEEP_GONE_MAX: Final = 10_000  # removed entries kept for flow records between two looks


class AddressTable:
    def __init__(self, config: RouterConfig) -> None:
        self.router_id = config.router.id
        self.mesh = config.router.mode == "interior"
        self.entries: dict[str, AddressEntry] = {}
        # key -> routers that are destinations of it now (set by the mesh): fills new entries.
        self.remote_for: Callable[[str], frozenset[str]] = _no_remote
        # Interior: keep entries of mobile addresses other routers advertise (router.address
        # lists them). Edge: `uplink` takes deliveries to addresses with no entry (the uplink in use).
        self.keep_advertised = True
        self.uplink: AddressEntry | None = None
        # The rules themselves are the matcher's values, so that one rule can be removed again.
        self.matcher: AddressMatcher[AddressConfig] = AddressMatcher()
        self._keys: dict[str, tuple[str, str] | None] = {}  # key_of's answers
        # Counts the changes that can change which entry `lookup` gives an address (an entry
        # added or removed, a rule, a subtree): InLink.looked_up holds while it is unchanged.
        self.version = 0
        self.unavailable_rules = 0  # rules with distribution unavailable (none: nothing to look up)
        self.waypoint_rules = 0  # rules with waypoint: true (none: nothing to look up)
        self.priority_rules = 0  # rules with a priority (none: nothing to look up)
        self.fallback_rules = 0  # rules with enable_fallback: true (none: nothing to look up)
        # Keys of in-process endpoints that also serve every address below them (`$management`
        # serves `$management/entities`, WD14 §3.2): such an address has the endpoint's key.
        self.subtrees: set[str] = set()
        # While flow records are on: entries removed since the flow recorder last looked, with
        # traffic (router.flow.recorder reports what they counted since its last interval).
        self.keep_gone: list[AddressEntry] | None = None
        for rule in config.addresses:
            self.add_rule(rule)
        # The flow records' address (docs/flow-records.md) is balanced anycast on every router,
        # flow records on or off, so that the mesh forwards them the same way everywhere (unless
        # a rule of the file already covers it): each batch goes to one collector, whose outcome
        # alone decides whether the router keeps it for another try.
        flow_address = self.flow_address = config.flow.mesh_address
        if flow_address is not None and self.matcher.lookup(flow_address) is None:
            self.add_rule(AddressConfig(prefix=flow_address, distribution="balanced"))

    def add_rule(self, rule: AddressConfig) -> None:
        """Configure address semantics at run time (management). Only addresses looked up from
        now on get them: an existing entry keeps its distribution until it is unused."""
        if rule.prefix is not None:
            self.matcher.add_prefix(rule.prefix, rule)
        elif rule.pattern is not None:
            self.matcher.add_pattern(rule.pattern, rule)
        self.version += 1
        if rule.distribution == "unavailable":
            self.unavailable_rules += 1
        if rule.waypoint:
            self.waypoint_rules += 1
        if rule.priority is not None:
            self.priority_rules += 1
        if rule.enable_fallback:
            self.fallback_rules += 1

    def remove_rule(self, rule: AddressConfig) -> None:
        """Remove `rule` (the very object given to add_rule); existing entries are unchanged."""
        self.matcher.remove(rule)
        self.version += 1
        if rule.distribution == "unavailable":
            self.unavailable_rules -= 1
        if rule.waypoint:
            self.waypoint_rules -= 1
        if rule.priority is not None:
            self.priority_rules -= 1
        if rule.enable_fallback:
            self.fallback_rules -= 1

    def unavailable(self, address: str) -> bool:
        """Whether `address` is refused: its entry's distribution is `unavailable` (an entry
        the mesh made for an address other routers advertise, say), or it has no entry and a
        rule says so (an address in use keeps its distribution until it is unused, as with any
        rule)."""
        if not self.unavailable_rules:
            return False
        key = self.key_of(address)
        if key is None or key[0][0] not in "ML":
            return False
        entry = self.entries.get(key[0])
        if entry is not None:
            return entry.distribution == "unavailable"
        return self.distribution_for(key[1]) == "unavailable"

    def key_of(self, address: str) -> tuple[str, str] | None:
        """(table key, address as configuration matches it), or None when `address` is not
        routable from this router (another router's `_topo` address on a standalone router)."""
        # Deliveries routed by their own address (anonymous producers, other routers) look it
        # up one by one: a key is a function of the address alone, so it is worked out once.
        keys = self._keys
        if address in keys:
            return keys[address]
        if len(keys) >= KEYS_MAX:
            keys.clear()
        key = keys[address] = self._key_of(address)
        return key

    def serve_subtree(self, entry: AddressEntry) -> None:
        """Route every address below `entry`'s (`<address>/...`) to `entry` as well."""
        self.subtrees.add(entry.key)
        self._keys.clear()
        self.version += 1

    def _key_of(self, address: str) -> tuple[str, str] | None:
        key = self._plain_key_of(address)
        if key is not None and self.subtrees:
            slash = key[0].find("/")
            while slash > 0:  # the shortest served prefix wins
                if key[0][:slash] in self.subtrees:
                    return key[0][:slash], key[0][1:slash]
                slash = key[0].find("/", slash + 1)
        return key

    def _plain_key_of(self, address: str) -> tuple[str, str] | None:
        parsed = classify(address, self.router_id)
        if parsed.kind is Kind.MOBILE:
            if parsed.key.startswith(PHASE1):  # phase 1 of a waypoint: configured as the address
                return "M" + parsed.key, parsed.key[len(PHASE1) :]
            if parsed.key.startswith(FALLBACK):  # fallback destinations: likewise
                return "M" + parsed.key, parsed.key[len(FALLBACK) :]
            return "M" + parsed.key, parsed.key
        if parsed.kind is Kind.LOCAL or (parsed.kind is Kind.ALL_ROUTERS and not self.mesh):
            return "L" + parsed.key, parsed.key
        if not self.mesh:
            return None
        if parsed.kind is Kind.ALL_ROUTERS:
            return "T" + parsed.key, parsed.key
        assert parsed.router is not None
        return "R" + parsed.router, parsed.key

    def consumer_key(self, address: str, egress: bool = True) -> tuple[str, str] | None:
        """The key a consumer of `address` subscribes to: `_topo/0/all/x` is this router's own
        `x`, and no one consumes at another router's address (the anchors refuse it too). A
        consumer of a waypoint address consumes its phase 1 (`egress`; the out auto-link that
        consumes phase 0 says egress=False)."""
        key = self.key_of(address)
        if key is None or key[0][0] == "R":
            return None
        if key[0][0] == "T":
            return "L" + key[0][1:], key[1]
        if egress and self.waypoint_rules and key[0][0] == "M" and self.is_waypoint(key[1]) \
                and not key[0].startswith(FALLBACK, 1):  # fmt: skip
            return "M" + PHASE1 + key[1], key[1]
        return key

    def fallback_enabled(self, address: str) -> bool:
        """Whether an address rule gives `address` (as configuration matches it) fallback
        destinations."""
        if not self.fallback_rules:
            return False
        rule = self.matcher.lookup(address)
        return rule is not None and rule.enable_fallback

    def fallback_address(self, address: str) -> str | None:
        """The address whose consumers are `address`'s fallback destinations (None: it has none:
        no rule enables them, or it is no plain mobile address)."""
        key = self.key_of(address)
        if key is None or key[0] != "M" + key[1] or not self.fallback_enabled(key[1]):
            return None
        return FALLBACK + key[1]

    def is_waypoint(self, address: str) -> bool:
        """Whether an address rule makes `address` (as configuration matches it) a waypoint."""
        if not self.waypoint_rules:
            return False
        rule = self.matcher.lookup(address)
        return rule is not None and rule.waypoint

    def egress_address(self, address: str) -> str:
        """Where the in auto-link of `address` produces: phase 1 of a waypoint, else the address."""
        key = self.key_of(address)
        if key is None or key[0][0] != "M" or not self.is_waypoint(key[1]):
            return address
        return PHASE1 + key[1]

    def priority_for(self, address: str) -> int | None:
        """The priority an address rule gives `address`'s messages (None: the header's)."""
        if not self.priority_rules:
            return None
        rule = self.matcher.lookup(address)
        return rule.priority if rule is not None else None

    def distribution_for(self, address: str) -> str:
        rule = self.matcher.lookup(address)
        return rule.distribution if rule is not None else DEFAULT_DISTRIBUTION

    def find(self, address: str) -> AddressEntry | None:
        key = self.key_of(address)
        return self.entries.get(key[0]) if key is not None else None

    def get_or_create(self, address: str, consumer: bool = False, egress: bool = True) -> AddressEntry | None:
        key = self.consumer_key(address, egress) if consumer else self.key_of(address)
        if key is None:
            return None
        entry = self.entries.get(key[0])
        if entry is None:
            kind = key[0][0]
            # R: one destination router (closest); T: a copy for every router (multicast).
            distribution = {"R": "closest", "T": "multicast"}.get(kind) or self.distribution_for(key[1])
            entry = AddressEntry(key[0], address, distribution)
            entry.flow_records = address == self.flow_address
            # (an address's own key: not its phase 1 nor its fallback)
            entry.fallback_enabled = (kind == "M" and self.fallback_rules != 0 and key[0] == "M" + key[1]
                                      and self.fallback_enabled(key[1]))  # fmt: skip
            if kind != "L":
                entry.remote = self.remote_for(key[0])
            self.entries[key[0]] = entry
            self.version += 1
        return entry

    def lookup(self, address: str) -> AddressEntry | None:
        """The entry a delivery to `address` goes to: an existing one, or one created for an
        address that has destinations on other routers only (never for a plain unknown one)."""
        key = self._keys.get(address) or self.key_of(address)  # (the memo first: no call)
        if key is None:
            return None
        if self.unavailable_rules and self.unavailable(address):  # (no such rule: no look)
            return UNAVAILABLE
        entry = self.entries.get(key[0])
        if entry is None and key[0][0] != "L":
            if self.uplink is not None:
                return self.uplink
            if self.remote_for(key[0]):
                entry = self.get_or_create(address)
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
        self.version += 1
        return entry

    def discard_if_unused(self, entry: AddressEntry) -> None:
        """Remove an unused entry; on an interior router a mobile address other routers
        advertise keeps its entry (as the anchors' table: every router lists every one)."""
        if entry.unused and self.entries.get(entry.key) is entry:
            if self.keep_advertised and entry.has_remote and entry.key[0] == "M":
                return
            del self.entries[entry.key]
            self.version += 1
            gone = self.keep_gone
            if gone is not None and entry.deliveries_ingress and len(gone) < KEEP_GONE_MAX:
                gone.append(entry)  # its last counters, for flow records
