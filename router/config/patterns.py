"""Address words, prefixes and patterns as configured addresses match them (the semantics Qpid
Dispatch users rely on): words split on '.' or '/'; a prefix matches the address itself or the
address followed by a word (`orders` matches `orders`, `orders.eu`, `orders/eu`, not `ordersx`);
in a pattern `*` matches exactly one word, `#` zero or more. When several match, the more specific
wins: more literal words, then a prefix over a pattern (`specificity`).

Owns: those four functions and `strip_scheme` (the node in an AMQP URL), pure, so that every
layer that matches addresses as the routers do uses them: router.core.addressing (address rules,
link routes, policy's token patterns), the `topology` CLI (which may not import the core) and the
`router` CLI's management nodes.
Must not touch: which rule wins among equally specific ones (the configuration's order:
router.core.addressing.AddressMatcher).
"""

from __future__ import annotations

import re

_WORD_SPLIT = re.compile(r"[./]")


def words(address: str) -> list[str]:
    return _WORD_SPLIT.split(address)


def prefix_matches(prefix: str, address: str) -> bool:
    if address == prefix:
        return True
    if not address.startswith(prefix):
        return False
    return prefix[-1] in "./" or address[len(prefix)] in "./"


def pattern_matches(pattern: list[str], address: list[str]) -> bool:
    """`*` matches exactly one word, `#` zero or more."""
    # Iterative matching with backtracking over the last '#', linear in practice.
    p = a = 0
    star_p = star_a = -1
    while a < len(address):
        if p < len(pattern) and pattern[p] == "#":
            star_p, star_a = p, a
            p += 1
        elif p < len(pattern) and (pattern[p] == "*" or pattern[p] == address[a]):
            p += 1
            a += 1
        elif star_p >= 0:
            star_a += 1
            a = star_a
            p = star_p + 1
        else:
            return False
    while p < len(pattern) and pattern[p] == "#":
        p += 1
    return p == len(pattern)


def specificity(prefix: str | None, pattern: str | None) -> tuple[int, int]:
    """How specific a prefix (or else a pattern) is, greater first: its literal words (a
    prefix's non-empty words, a pattern's words other than `*` and `#`), then 1 for a prefix
    over 0 for a pattern."""
    if prefix is not None:
        return len([w for w in words(prefix) if w]), 1
    return len([w for w in words(pattern or "") if w not in ("*", "#")]), 0


def strip_scheme(address: str) -> str:
    """The node's address in an AMQP URL (`amqp://host:port/orders`, `amqp:/orders`, and the
    same with `amqps`: uamqp clients name their TLS peer's nodes so): `orders`; any other
    address as it is."""
    if not address.startswith("amqp"):
        return address
    for scheme in ("amqp://", "amqps://"):
        if address.startswith(scheme):
            rest = address[len(scheme) :]
            slash = rest.find("/")
            return rest[slash + 1 :] if slash >= 0 else ""
    for scheme in ("amqp:/", "amqps:/"):
        if address.startswith(scheme):
            return address[len(scheme) :]
    return address
