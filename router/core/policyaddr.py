"""The addresses a policy group may receive from and send to (docs/security.md, "Policy").

    sources_allow(group, address, user) / targets_allow(group, address, user)
    targets_checked(group)      # whether any target is refused (anonymous senders' messages need a look)

Owns: the two forms of a group's address rules and matching an address against them. The plain
lists (`sources`, `targets`): `*` alone is any address, a trailing `*` any rest, `${user}` the
authenticated user. The anchors' token patterns (`source_pattern`, `target_pattern`, used
instead of the plain list when set): tokens split on `.` or `/`, `*` exactly one token, `#` zero
or more, matched by router.core.addressing's pattern matcher (the one address rules use); in
both forms `${user}` is the user name taken literally (a `*` or `#` in a user name matches only
itself) and is never matched by an anonymous connection.
Must not touch: the decisions (policy.py, grant.py), configuration checks (router.config.policy).
"""

from __future__ import annotations

from functools import lru_cache

from ..config.models import PolicyGroup
from .addressing import pattern_matches, words

_USER = "${user}"
_WILD = ("*", "#")


def address_allowed(patterns: tuple[str, ...], address: str, user: str | None) -> bool:
    """Whether `address` matches one of the plain `patterns`: `*` alone is any address, a
    trailing `*` any rest, `${user}` the authenticated user (never matched by an anonymous
    connection)."""
    for pattern in patterns:
        if _USER in pattern:
            if user is None:
                continue
            pattern = pattern.replace(_USER, user)
        if pattern == "*" or pattern == address:
            return True
        if pattern.endswith("*") and address.startswith(pattern[:-1]):
            return True
    return False


def _literal(word: str) -> str:
    """A word that is matched as itself, never as a wildcard: `*`, `#` and words beginning with
    NUL get a NUL in front (one-to-one, and never `*` or `#`)."""
    return "\x00" + word if word in _WILD or word.startswith("\x00") else word


@lru_cache(maxsize=1024)
def _compiled(patterns: tuple[str, ...], user: str | None) -> tuple[tuple[str, ...], ...]:
    """The token patterns with `${user}` put in (patterns naming it left out for an anonymous
    connection), as the words pattern_matches takes."""
    out = []
    for pattern in patterns:
        if _USER in pattern and user is None:
            continue
        compiled: list[str] = []
        for word in words(pattern):
            if word in _WILD:
                compiled.append(word)
            elif _USER in word:
                assert user is not None
                compiled.extend(_literal(w) for w in words(word.replace(_USER, user)))
            else:
                compiled.append(_literal(word))
        out.append(tuple(compiled))
    return tuple(out)


def pattern_allowed(patterns: tuple[str, ...], address: str, user: str | None) -> bool:
    """Whether `address` matches one of the token `patterns` (source_pattern, target_pattern)."""
    compiled = _compiled(patterns, user)
    if not compiled:
        return False
    address_words = [_literal(w) for w in words(address)]
    return any(pattern_matches(list(pattern), address_words) for pattern in compiled)


def sources_allow(group: PolicyGroup, address: str, user: str | None) -> bool:
    if group.source_pattern is not None:
        return pattern_allowed(group.source_pattern, address, user)
    return address_allowed(group.sources, address, user)


def targets_allow(group: PolicyGroup, address: str, user: str | None) -> bool:
    if group.target_pattern is not None:
        return pattern_allowed(group.target_pattern, address, user)
    return address_allowed(group.targets, address, user)


def targets_checked(group: PolicyGroup) -> bool:
    """Whether the group refuses any target (else an anonymous sender's messages need no look
    for their `to`)."""
    return group.target_pattern is not None or group.targets != ("*",)
