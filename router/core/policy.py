"""Policy: vhosts keyed by the open's hostname, groups of users inside them, and the decisions at
open, begin, attach and transfer for client connections (docs/security.md, "Policy").

    policy = PolicyUnit(config.policy)          # `policy.rules` may be replaced at run time
    grant, error = policy.open(user, host, hostname)
    error = policy.begin(grant, open_sessions)
    error = policy.attach(grant, sending, terminus, senders, receivers)
    policy.closed(grant)

Owns: choosing a connection's vhost and group, counting its connections (in all, per user, per
host) and refusing past the limits (amqp:resource-limit-exceeded) or for who and where the user
is (amqp:unauthorized-access); the session, sender and receiver limits, the address patterns
(`*` and `${user}`), anonymous senders and dynamic sources; the per-message rules (the target of
a message on an anonymous link, the user-id unless proxying is allowed) through `Grant.check`,
which is set on a producer link only when a rule needs it; and the counters per vhost
(management's vhostStats). A connection keeps the group it was granted at open: rules changed at
run time apply to new connections (the counts of the old ones still count against the limits).
Inter-router and edge connections are never subject to policy (the anchors' rule).
Collaborators: none but the rules; the core asks and acts on the answers.
Must not touch: engines (the core answers), message routing.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

from ..amqp import errors as E
from ..amqp.decode import decode_at
from ..amqp.errors import DecodeError
from ..amqp.messaging import Properties, Source, Target
from ..amqp.performatives import Error
from ..amqp.sections import section_descriptor, skip_value
from ..config.models import Policy, PolicyGroup, Vhost

DEFAULT_GROUP = "$default"
_PROPERTIES = 0x73


def _error(condition: str, description: str) -> Error:
    return Error(condition=condition, description=description)


class VhostStats:
    """Counters of one vhost (management's vhostStats, /metrics)."""

    __slots__ = (
        "hostname", "approved", "denied", "current", "per_user", "per_host", "sessions_denied",
        "senders_denied", "receivers_denied", "message_size_denied", "messages_denied",
    )  # fmt: skip

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.approved = self.denied = self.current = 0
        self.per_user: Counter[str] = Counter()  # anonymous connections count under ""
        self.per_host: Counter[str] = Counter()
        self.sessions_denied = self.senders_denied = self.receivers_denied = 0
        self.message_size_denied = 0  # links detached for a message over the group's max_message_size
        self.messages_denied = 0  # messages rejected: user-id not the user's, target not allowed


def address_allowed(patterns: tuple[str, ...], address: str, user: str | None) -> bool:
    """Whether `address` matches one of `patterns`: `*` alone is any address, a trailing `*`
    any rest, `${user}` the authenticated user (never matched by an anonymous connection)."""
    for pattern in patterns:
        if "${user}" in pattern:
            if user is None:
                continue
            pattern = pattern.replace("${user}", user)
        if pattern == "*" or pattern == address:
            return True
        if pattern.endswith("*") and address.startswith(pattern[:-1]):
            return True
    return False


def host_allowed(patterns: tuple[str, ...], host: str) -> bool:
    """Whether the peer's address `host` (an IP address) is one of `patterns`: `*`, an address,
    a network in CIDR notation, or a range `a-b`."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "*" in patterns  # not an IP address (an in-process test): only * lets it in
    for pattern in patterns:
        if pattern == "*":
            return True
        try:
            if "-" in pattern:
                low, high = (ipaddress.ip_address(p.strip()) for p in pattern.split("-", 1))
                if low.version == ip.version and low <= ip <= high:  # type: ignore[operator]
                    return True
            elif ip in ipaddress.ip_network(pattern.strip(), strict=False):
                return True
        except ValueError:
            continue  # checked when configured; a bad pattern admits no one
    return False


def message_properties(payload: bytes) -> Properties | None:
    """The properties section of an encoded message (at least its first frame), None if it has
    none; DecodeError when malformed or cut before the end of the properties."""
    pos, end = 0, len(payload)
    try:
        while pos < end:
            if payload[pos] != 0x00:
                raise DecodeError(f"expected a message section at offset {pos}")
            code, value = section_descriptor(payload, pos + 1, end)
            if code > _PROPERTIES:
                return None
            stop = skip_value(payload, value, end)
            if code == _PROPERTIES:
                properties = decode_at(payload, pos, stop)[0]
                return properties if isinstance(properties, Properties) else None
            pos = stop
    except IndexError:
        raise DecodeError("message cut short before the end of its properties") from None
    return None


class Grant:
    """What policy granted one client connection: its vhost, group and user (on ConnState.policy)."""

    __slots__ = ("vhost", "group_name", "group", "user", "user_key", "host", "stats", "released")

    def __init__(self, vhost: Vhost, group_name: str, group: PolicyGroup, user: str | None, host: str,
                 stats: VhostStats) -> None:  # fmt: skip
        self.vhost = vhost
        self.group_name = group_name
        self.group = group
        self.user = user
        self.user_key = user or ""
        self.host = host
        self.stats = stats
        self.released = False

    @property
    def checks_messages(self) -> bool:
        """Whether messages on an anonymous producer link need a look (their user-id or target)."""
        return not self.group.allow_user_id_proxy or self.group.targets != ("*",)

    def check(self, payload: bytes, anonymous: bool) -> Error | None:
        """The refusal of one message from this connection, or None: its user-id must be the
        authenticated user's (unless proxying is allowed), and on an anonymous link its `to`
        one of the group's targets."""
        group = self.group
        if group.allow_user_id_proxy and not (anonymous and group.targets != ("*",)):
            return None
        try:
            properties = message_properties(payload)
        except DecodeError as exc:
            return _error(E.DECODE_ERROR, f"malformed message: {exc.description}")
        except (ValueError, TypeError, OverflowError) as exc:  # a field of the wrong type
            return _error(E.DECODE_ERROR, f"malformed message properties: {type(exc).__name__}")
        if properties is None:
            return None
        if not group.allow_user_id_proxy and properties.user_id is not None:
            user_id: Any = properties.user_id
            if not isinstance(user_id, (bytes, bytearray, memoryview)):  # (the decoder checks it too)
                self.stats.messages_denied += 1
                return _error(E.DECODE_ERROR, "the message's user-id must be binary (messaging 3.2.4)")
            given = bytes(user_id)
            if self.user is None or given != self.user.encode("utf-8"):
                self.stats.messages_denied += 1
                who = f"user {self.user!r}" if self.user is not None else "an anonymous connection"
                return _error(E.UNAUTHORIZED_ACCESS, f"the message's user-id {given[:64]!r} is not {who} "
                                                     f"(vhost {self.vhost.hostname!r} allows no user-id proxying)")  # fmt: skip
        if anonymous and group.targets != ("*",):
            to = properties.to
            if to is not None and not address_allowed(group.targets, str(to), self.user):
                self.stats.messages_denied += 1
                return _error(E.UNAUTHORIZED_ACCESS, f"sending to {str(to)[:200]!r} is not allowed "
                                                     f"for group {self.group_name!r} of vhost {self.vhost.hostname!r}")  # fmt: skip
        return None


class PolicyUnit:
    """See the module docstring."""

    def __init__(self, rules: Policy) -> None:
        self.rules = rules
        self.stats: dict[str, VhostStats] = {}
        # Router-wide: connections the policy looked at, refused, and links refused.
        self.connections_processed = 0
        self.connections_denied = 0
        self.links_denied = 0

    @property
    def enabled(self) -> bool:
        return self.rules.enabled

    def vhost_for(self, hostname: str | None) -> Vhost | None:
        rules = self.rules
        if hostname:
            wanted = hostname.lower()
            for vhost in rules.vhosts:
                if vhost.hostname.lower() == wanted:
                    return vhost
        if rules.default_vhost is None:
            return None
        return next((v for v in rules.vhosts if v.hostname == rules.default_vhost), None)

    def stats_for(self, hostname: str) -> VhostStats:
        stats = self.stats.get(hostname)
        if stats is None:
            stats = self.stats[hostname] = VhostStats(hostname)
        return stats

    def open(self, user: str | None, host: str, hostname: str | None) -> tuple[Grant | None, Error | None]:
        """A client's open on a connection from `host` (an IP address) by `user` (None:
        anonymous) naming `hostname`: (the grant, None), (None, the refusal), or (None, None)
        when policy is off."""
        if not self.rules.enabled:
            return None, None
        self.connections_processed += 1
        vhost = self.vhost_for(hostname)
        if vhost is None:
            self.connections_denied += 1
            return None, _error(E.UNAUTHORIZED_ACCESS, f"no vhost for hostname {str(hostname)[:255]!r} on this router")
        stats = self.stats_for(vhost.hostname)
        group_name, group = self._group(vhost, user)
        error = None
        if group is None:
            who = f"user {user!r}" if user is not None else "an anonymous connection"
            error = _error(E.UNAUTHORIZED_ACCESS, f"{who} is in no group of vhost {vhost.hostname!r}")
        elif not host_allowed(group.remote_hosts, host):
            error = _error(E.UNAUTHORIZED_ACCESS,
                           f"group {group_name!r} of vhost {vhost.hostname!r} may not connect from {host!r}")  # fmt: skip
        else:
            error = self._limits(vhost, group, stats, user or "", host)
        if error is not None or group is None:
            stats.denied += 1
            self.connections_denied += 1
            return None, error
        stats.approved += 1
        stats.current += 1
        stats.per_user[user or ""] += 1
        stats.per_host[host] += 1
        return Grant(vhost, group_name, group, user, host, stats), None

    @staticmethod
    def _group(vhost: Vhost, user: str | None) -> tuple[str, PolicyGroup | None]:
        if user is not None:
            for name, group in vhost.groups.items():
                if user in group.users:
                    return name, group
        if vhost.allow_unknown_user and DEFAULT_GROUP in vhost.groups:
            return DEFAULT_GROUP, vhost.groups[DEFAULT_GROUP]
        return "", None

    @staticmethod
    def _limits(vhost: Vhost, group: PolicyGroup, stats: VhostStats, user: str, host: str) -> Error | None:
        where = f"vhost {vhost.hostname!r}"
        if vhost.max_connections is not None and stats.current >= vhost.max_connections:
            return _error(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit ({vhost.max_connections}) of {where} reached")
        per_user = group.max_connections_per_user if group.max_connections_per_user is not None else vhost.max_connections_per_user
        if per_user is not None and stats.per_user[user] >= per_user:
            who = f"user {user!r}" if user else "anonymous connections"
            return _error(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit per user ({per_user}) of {where} reached for {who}")
        per_host = group.max_connections_per_host if group.max_connections_per_host is not None else vhost.max_connections_per_host
        if per_host is not None and stats.per_host[host] >= per_host:
            return _error(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit per host ({per_host}) of {where} reached for {host}")
        return None

    def closed(self, grant: Grant) -> None:
        """The granted connection is over: it no longer counts against the limits."""
        if grant.released:
            return
        grant.released = True
        stats = grant.stats
        stats.current -= 1
        for counter, key in ((stats.per_user, grant.user_key), (stats.per_host, grant.host)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def begin(self, grant: Grant, open_sessions: int) -> Error | None:
        """A session beginning on a connection that has `open_sessions` others."""
        limit = grant.group.max_sessions
        if limit is None or open_sessions < limit:
            return None
        grant.stats.sessions_denied += 1
        return _error(E.RESOURCE_LIMIT_EXCEEDED, f"session limit ({limit}) of group {grant.group_name!r} "
                                                 f"of vhost {grant.vhost.hostname!r} reached")  # fmt: skip

    def attach(self, grant: Grant, client_sends: bool, terminus: Any, senders: int, receivers: int) -> Error | None:
        """A client's attach: `client_sends` (it is the sender; `terminus` its target) or it
        receives (`terminus` its source); `senders`/`receivers`: its links now."""
        error = self._attach(grant, client_sends, terminus, senders, receivers)
        if error is not None:
            self.links_denied += 1
            if client_sends:
                grant.stats.senders_denied += 1
            else:
                grant.stats.receivers_denied += 1
        return error

    def _attach(self, grant: Grant, client_sends: bool, terminus: Any, senders: int, receivers: int) -> Error | None:
        group, name, where = grant.group, grant.group_name, f"vhost {grant.vhost.hostname!r}"
        limit, count = (group.max_senders, senders) if client_sends else (group.max_receivers, receivers)
        if limit is not None and count >= limit:
            kind = "sender" if client_sends else "receiver"
            return _error(E.RESOURCE_LIMIT_EXCEEDED, f"{kind} limit ({limit}) of group {name!r} of {where} reached")
        if client_sends:
            if not isinstance(terminus, Target):
                return None  # a coordinator or no target: the Links unit answers it
            if terminus.dynamic:
                return None
            if not terminus.address:
                if group.allow_anonymous_sender:
                    return None
                return _error(E.UNAUTHORIZED_ACCESS, f"anonymous senders are not allowed for group {name!r} of {where}")
            if address_allowed(group.targets, terminus.address, grant.user):
                return None
            return _error(E.UNAUTHORIZED_ACCESS,
                          f"sending to {terminus.address[:200]!r} is not allowed for group {name!r} of {where}")  # fmt: skip
        if not isinstance(terminus, Source):
            return None
        if terminus.dynamic:
            if group.allow_dynamic_source:
                return None
            return _error(E.UNAUTHORIZED_ACCESS, f"dynamic sources are not allowed for group {name!r} of {where}")
        if not terminus.address or address_allowed(group.sources, terminus.address, grant.user):
            return None
        return _error(E.UNAUTHORIZED_ACCESS,
                      f"receiving from {terminus.address[:200]!r} is not allowed for group {name!r} of {where}")  # fmt: skip


def message_size_limit(grant: Grant | None, router_limit: int | None) -> tuple[int | None, bool]:
    """The max-message-size a client's producer link is answered with, and whether a larger
    message detaches the link (the group's limit) rather than being rejected (the router's)."""
    group_limit = grant.group.max_message_size if grant is not None else None
    if group_limit is None or (router_limit is not None and router_limit <= group_limit):
        return router_limit, False
    return group_limit, True
