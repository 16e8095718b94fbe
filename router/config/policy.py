"""The policy section of the configuration (docs/security.md, "Policy"): vhosts keyed by the
open's hostname, groups of users inside, their limits and address patterns. Re-exported by
router/config/models.py, whose RouterConfig holds it.

Owns: the policy's fields, defaults and cross-field rules. Must not touch: applying them
(router/core/policy.py).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import Field, model_validator

from .base import Model

PolicyLimit = Annotated[int, Field(ge=0)]
AddressPatterns = tuple[Annotated[str, Field(min_length=1, max_length=1000)], ...]
Hostname = Annotated[str, Field(min_length=1, max_length=255)]
_OPEN = ("*",)  # the default of sources and targets: any address


def _check_tokens(field: str, patterns: AddressPatterns | None) -> None:
    """`*` and `#` of a token pattern are whole tokens (`orders.*`, not `orders*`)."""
    for pattern in patterns or ():
        for token in re.split(r"[./]", pattern.replace("${user}", "u")):
            if token not in ("*", "#") and ("*" in token or "#" in token):
                raise ValueError(f"{field}: {pattern!r}: * and # match whole tokens, separated by . or / "
                                 "(orders.* or orders/#, not orders*)")  # fmt: skip


class PolicyGroup(Model):
    """What the users of one group of a vhost may do (docs/security.md, "Policy"). A limit that
    is not set (None) is the vhost's, or none; 0 forbids."""

    users: tuple[Annotated[str, Field(min_length=1, max_length=255)], ...] = Field(
        default=(), description="the authenticated users in the group (the vhost's $default group takes the others)"
    )
    remote_hosts: tuple[Annotated[str, Field(min_length=1, max_length=100)], ...] = Field(
        default=("*",), description="addresses the users may connect from: IP addresses, networks (10.0.0.0/8) or *"
    )
    max_connections_per_user: PolicyLimit | None = Field(default=None, description="connections of one user of the group")
    max_connections_per_host: PolicyLimit | None = Field(default=None, description="connections from one host")
    max_sessions: PolicyLimit | None = Field(default=None, description="sessions per connection")
    max_senders: PolicyLimit | None = Field(default=None, description="links on which a connection sends, at once")
    max_receivers: PolicyLimit | None = Field(default=None, description="links on which a connection receives, at once")
    max_frame_size: int | None = Field(
        default=None, ge=512, le=0xFFFFFFFF, description="bytes; caps the frame size the router's open offers"
    )
    max_message_size: int | None = Field(
        default=None, ge=1,
        description="bytes (else the vhost's); a larger message detaches its link with amqp:link:message-size-exceeded",
    )
    max_session_window: int | None = Field(
        default=None, ge=1, le=0xFFFFFFFF,
        description="bytes; caps the incoming window of a client's session (in frames: this / max frame size, at least 1)",
    )
    sources: AddressPatterns = Field(
        default=_OPEN, description="addresses the users may receive from: exact, or with * (any rest) and ${user}"
    )
    targets: AddressPatterns = Field(
        default=_OPEN, description="addresses the users may send to (anonymous senders: each message's to)"
    )
    source_pattern: AddressPatterns | None = Field(
        default=None,
        description="instead of sources: token patterns (tokens split on . or /; * one token, # zero or more; ${user})",
    )
    target_pattern: AddressPatterns | None = Field(
        default=None, description="instead of targets: token patterns, as source_pattern (anonymous senders: each to)"
    )
    allow_anonymous_sender: bool = Field(default=True, description="links with no target address (the anonymous relay)")
    allow_dynamic_source: bool = Field(default=True, description="receivers of a dynamic source (temporary reply addresses)")
    allow_user_id_proxy: bool = Field(
        default=False, description="a message's user-id may name another user (else it must be the authenticated user)"
    )
    allow_waypoint_links: bool = Field(
        default=True, description="links whose source or target has a qd.waypoint capability (else refused)"
    )
    allow_fallback_links: bool = Field(
        default=True, description="links whose source or target has the capability qd.fallback (else refused)"
    )

    @model_validator(mode="after")
    def _patterns(self) -> PolicyGroup:
        for plain, tokens in (("sources", "source_pattern"), ("targets", "target_pattern")):
            if getattr(self, tokens) is not None and getattr(self, plain) != _OPEN:
                raise ValueError(f"give {plain} or {tokens}, not both: {tokens} is used instead of {plain}")
            _check_tokens(tokens, getattr(self, tokens))
        return self

    @model_validator(mode="after")
    def _hosts(self) -> PolicyGroup:
        for pattern in self.remote_hosts:
            if pattern == "*":
                continue
            try:
                if "-" in pattern:
                    low, high = (ipaddress.ip_address(p.strip()) for p in pattern.split("-", 1))
                    if low.version != high.version or low > high:  # type: ignore[operator]
                        raise ValueError
                else:
                    ipaddress.ip_network(pattern, strict=False)
            except ValueError:
                raise ValueError(f"remote_hosts: {pattern!r} is not *, an IP address, a network (10.0.0.0/8) "
                                 "or a range (a-b)") from None
        return self


class Vhost(Model):
    """The policy of the connections whose open names `hostname` (docs/security.md, "Policy")."""

    hostname: Hostname
    aliases: tuple[Hostname, ...] = Field(
        default=(), description="other hostnames that select this vhost (case does not matter)"
    )
    max_connections: PolicyLimit | None = Field(default=None, description="connections to the vhost, in all")
    max_connections_per_user: PolicyLimit | None = Field(default=None, description="connections of one user")
    max_connections_per_host: PolicyLimit | None = Field(default=None, description="connections from one host")
    max_message_size: int | None = Field(
        default=None, ge=1, description="bytes; the max_message_size of its groups that set none"
    )
    allow_unknown_user: bool = Field(
        default=False,
        description="users in no group (and anonymous connections) get the $default group; otherwise they are refused",
    )
    groups: dict[Annotated[str, Field(min_length=1, max_length=255)], PolicyGroup] = Field(
        default_factory=dict, description="group name -> what its users may do"
    )

    @property
    def names(self) -> tuple[str, ...]:
        """The hostname and the aliases, in lower case: the opens' hostnames that select the vhost."""
        return (self.hostname.lower(), *(a.lower() for a in self.aliases))

    @model_validator(mode="after")
    def _aliases(self) -> Vhost:
        names = self.names
        for alias in self.aliases:
            if names.count(alias.lower()) > 1:
                raise ValueError(f"vhost {self.hostname!r}: aliases: {alias!r} is its hostname or another of its aliases")
        return self

    @model_validator(mode="after")
    def _one_group_per_user(self) -> Vhost:
        seen: dict[str, str] = {}
        for name, group in self.groups.items():
            for user in group.users:
                if user in seen:
                    raise ValueError(f"vhost {self.hostname!r}: user {user!r} is in groups {seen[user]!r} and {name!r}")
                seen[user] = name
        return self


class Policy(Model):
    """Vhosts keyed by the open's hostname, with groups of users inside (docs/security.md,
    "Policy"). Applies to client connections (role normal), never to those between routers."""

    enabled: bool = Field(default=False, description="apply the vhosts to client connections")
    default_vhost: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        default="$default",
        description="the vhost of opens whose hostname names none (and of opens without one); None: those are refused",
    )
    vhosts: tuple[Vhost, ...] = Field(default=(), description="one per hostname")

    @model_validator(mode="after")
    def _unique(self) -> Policy:
        names = [v.hostname.lower() for v in self.vhosts]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"vhost hostnames must be unique: {', '.join(duplicates)}")
        owner = {name: v.hostname for v in self.vhosts for name in v.names[:1]}
        for vhost in self.vhosts:
            for alias in vhost.aliases:
                other = owner.setdefault(alias.lower(), vhost.hostname)
                if other != vhost.hostname:
                    raise ValueError(f"vhost {vhost.hostname!r}: aliases: {alias!r} already selects vhost {other!r} "
                                     "(its hostname or alias)")  # fmt: skip
        return self
