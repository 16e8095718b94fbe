"""Address forms and address configuration matching (the semantics Qpid Dispatch users rely on).

Owns:
- `classify(address, router_id)`: what kind of address this is for routing: a mobile address
  (`orders`), a local one (`_local/x`, `_topo/0/<this-router>/x`), one for another router
  (`_topo/0/<id>/x`) or for all routers (`_topo/0/all/x`). An `amqp:/` or `amqp://host/` scheme
  prefix is ignored, as the anchors do.
- `AddressMatcher`: configured semantics by prefix (`orders` matches `orders`, `orders.eu`,
  `orders/eu`, not `ordersx`) or by pattern (`*` exactly one word, `#` zero or more, words split
  on '.' or '/'). The most specific match wins: more literal words first, then a prefix over a
  pattern, then the order of the configuration.
Must not touch: routing state, I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Final, Generic, TypeVar

from ..config.patterns import pattern_matches, prefix_matches, specificity, strip_scheme, words

__all__ = ["AddressMatcher", "Kind", "Parsed", "classify", "pattern_matches", "prefix_matches", "strip_scheme", "words"]

T = TypeVar("T")


class Kind(Enum):
    MOBILE = "mobile"
    LOCAL = "local"  # delivered only on this router
    ROUTER = "router"  # _topo/0/<other-router>/...: goes to that router
    ALL_ROUTERS = "all"  # _topo/0/all/...: every router


@dataclass(frozen=True, slots=True)
class Parsed:
    kind: Kind
    key: str  # what the address table is keyed by on this router
    router: str | None = None  # the target router of a ROUTER address


def classify(address: str, router_id: str) -> Parsed:
    """How `address` is routed from the router `router_id`."""
    address = strip_scheme(address)
    if address.startswith("_local/"):
        return Parsed(Kind.LOCAL, address[len("_local/") :])
    if address.startswith("_topo/"):
        parts = address.split("/", 3)
        if len(parts) == 4 and parts[1] == "0":
            target, rest = parts[2], parts[3]
            if target == router_id:
                return Parsed(Kind.LOCAL, rest)
            if target == "all":
                return Parsed(Kind.ALL_ROUTERS, rest)
            return Parsed(Kind.ROUTER, rest, target)
    return Parsed(Kind.MOBILE, address)


@dataclass(frozen=True, slots=True)
class _Rule(Generic[T]):
    prefix: str | None
    pattern: tuple[str, ...] | None
    value: T
    literal_words: int
    order: int


# Lookups a matcher remembers (the most recent): the addresses a router serves at once. Not
# more: each costs ~85 bytes and keeps its address alive, and a router that keeps seeing new
# addresses (one per request, per client) would hold every matcher's full cache for good (with
# 65,536 a matcher, ~6 MiB each and the addresses, and an attach asks up to four matchers: tens
# of MiB, most of an idle router's size again). As the address table's own key cache
# (table.KEYS_MAX).
LOOKUPS_CACHED: Final = 4096


class AddressMatcher(Generic[T]):
    """Configured values (e.g. distributions) looked up by address, most specific first."""

    def __init__(self) -> None:
        self._rules: list[_Rule[T]] = []
        self._lookup = lru_cache(maxsize=LOOKUPS_CACHED)(self._find)

    def add_prefix(self, prefix: str, value: T) -> None:
        literal, _ = specificity(prefix, None)
        self._rules.append(_Rule(prefix, None, value, literal, len(self._rules)))
        self._lookup.cache_clear()

    def add_pattern(self, pattern: str, value: T) -> None:
        parts = tuple(words(pattern))
        literal, _ = specificity(None, pattern)
        self._rules.append(_Rule(None, parts, value, literal, len(self._rules)))
        self._lookup.cache_clear()

    def remove(self, value: T) -> None:
        self._rules = [rule for rule in self._rules if rule.value is not value]
        self._lookup.cache_clear()

    def lookup(self, address: str) -> T | None:
        if not self._rules:  # (most matchers of most routers: nothing to look up, nothing cached)
            return None
        return self._lookup(address)

    def _find(self, address: str) -> T | None:
        best: _Rule[T] | None = None
        address_words: list[str] | None = None
        for rule in self._rules:
            if rule.prefix is not None:
                matched = prefix_matches(rule.prefix, address)
            else:
                assert rule.pattern is not None
                if address_words is None:
                    address_words = words(address)
                matched = pattern_matches(list(rule.pattern), address_words)
            if matched and (best is None or _more_specific(rule, best)):
                best = rule
        return best.value if best is not None else None


def _more_specific(a: _Rule[T], b: _Rule[T]) -> bool:
    if a.literal_words != b.literal_words:
        return a.literal_words > b.literal_words
    if (a.prefix is None) != (b.prefix is None):
        return a.prefix is not None
    return a.order < b.order
