"""Who may do what through management: reads and writes, per requester, and the refusals.

    requester = Requester(user="alice", loopback=False, face="amqp")
    agent.authz.check(requester, write=True)     # raises ManagementError(403) and counts

Every face (the operation dialect, WD14 over AMQP, HTTP) says who asks and whether the request
reads or writes (CREATE, UPDATE, DELETE; PUT, POST, DELETE) before it touches an entity, so a
refused request changes nothing and learns nothing about what exists. The rules are the
configuration's `management` section (router.config.models.Management), read at every check so
that a configuration replaced at run time applies to the next request:

- operators (users, or groups of `groups`) may read and write;
- readers: `open` (anyone who reaches management), `authenticated` (any logged-in user), or a
  list of users and groups; operators always may read;
- a requester that did not log in as a user writes only through a listener bound to loopback,
  while `loopback_anonymous_operator` allows it (when not set: until operators are named);
- a request that reached this router from another router of the mesh carries no user the
  router can trust (the peer authenticated itself, not the client behind it): it reads when
  reads are open, and never writes.

Owns: that decision and the refusal counters (per face and kind: `amqp-write`, `http-read`...).
Must not touch: how a user was authenticated (SASL, TLS, HTTP basic: the faces and the
network layer say who it is).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..config.models import Management
from .model import ManagementError

FACES = ("amqp", "http")
KINDS = tuple(f"{face}-{kind}" for face in FACES for kind in ("read", "write"))


def is_loopback(host: str) -> bool:
    """Whether a bind address reaches only this host (127.0.0.0/8, ::1, localhost)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


@dataclass(frozen=True)
class Requester:
    """Who sent a management request. `user`: the logged-in user (None when anonymous);
    `loopback`: it came through a listener bound only to loopback; `face`: amqp or http;
    `from_router`: it arrived over a connection from another router of the mesh."""

    user: str | None
    loopback: bool = False
    face: str = "amqp"
    from_router: bool = False

    def describe(self) -> str:
        if self.from_router:
            return "a request from another router"
        return f"user {self.user!r}" if self.user is not None else "an anonymous requester"


# A requester nobody vouched for: what a face uses when it cannot tell who asks (fail closed).
UNKNOWN = Requester(None)


class Authorizer:
    """`config()`: the live management section (the agent's configuration's)."""

    def __init__(self, config: Callable[[], Management]) -> None:
        self.config = config
        self.refusals: Counter[str] = Counter({kind: 0 for kind in KINDS})

    def _member(self, user: str | None, names: tuple[str, ...], rules: Management) -> bool:
        if user is None:
            return False
        return any(user == name or user in rules.groups.get(name, ()) for name in names)

    def may_write(self, requester: Requester) -> bool:
        rules = self.config()
        if requester.from_router:
            return False
        if self._member(requester.user, rules.operators, rules):
            return True
        loopback_ok = rules.loopback_anonymous_operator
        if loopback_ok is None:
            loopback_ok = not rules.operators
        return requester.user is None and requester.loopback and loopback_ok

    def may_read(self, requester: Requester) -> bool:
        rules = self.config()
        if rules.readers == "open":
            return True
        if requester.from_router:
            return False
        if rules.readers == "authenticated":
            return requester.user is not None or self.may_write(requester)
        return self._member(requester.user, rules.readers, rules) or self.may_write(requester)

    def check(self, requester: Requester, *, write: bool) -> None:
        """Raise ManagementError(403) (and count it) unless `requester` may read or write."""
        allowed = self.may_write(requester) if write else self.may_read(requester)
        if allowed:
            return
        kind = "write" if write else "read"
        self.refusals[f"{requester.face}-{kind}"] += 1
        if write and requester.from_router:
            why = "management writes that arrive from another router are refused (the client behind it is unknown)"
        elif write:
            why = f"{requester.describe()} may not change the router: management writes need an operator"
        else:
            why = f"{requester.describe()} may not read management: reads are restricted"
        raise ManagementError(403, why)
