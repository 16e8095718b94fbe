"""Policy: vhosts keyed by the open's hostname, groups of users inside them, and the decisions at
open, begin, attach and transfer for client connections (docs/security.md, "Policy").

    policy = PolicyUnit(config.policy)          # `policy.rules` may be replaced at run time
    grant, error = policy.open(user, host, hostname)
    error = policy.begin(grant, open_sessions)
    error = policy.attach(grant, sending, terminus, senders, receivers)
    policy.closed(grant)

Owns: choosing a connection's vhost (by its hostname or an alias) and group, counting its
connections (in all, per user, per host) and refusing past the limits
(amqp:resource-limit-exceeded) or for who and where the user is (amqp:unauthorized-access: the
hosts a group may connect from); the session, sender and receiver limits, anonymous senders and
dynamic sources, waypoint and fallback links (their terminus's capability), the addresses a
group may attach to; and the counters per vhost (management's vhostStats) those decisions count.
A connection keeps the group it was granted at open: rules changed at run time apply to new
connections (the counts of the old ones still count against the limits). What a grant is, the
per-message rules (`Grant.check`, set on a producer link only when a rule needs it), the
message-size limit and the session window are grant.py's, the address rules policyaddr.py's
(re-exported here).
Inter-router and edge connections are never subject to policy (the anchors' rule).
Collaborators: none but the rules; the core asks and acts on the answers.
Must not touch: engines (the core answers), message routing.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ..amqp import errors as E
from ..amqp.messaging import Source, Target
from ..amqp.performatives import Error
from ..config.models import Policy, PolicyGroup, Vhost
from .grant import Grant, VhostStats, message_properties, message_size_limit, refusal
from .identity import terminus_capabilities
from .policyaddr import address_allowed, pattern_allowed, sources_allow, targets_allow
from .table import FALLBACK_CAPABILITY

__all__ = [
    "DEFAULT_GROUP", "Grant", "PolicyUnit", "VhostStats", "address_allowed", "host_allowed", "message_properties",
    "message_size_limit", "pattern_allowed",
]  # fmt: skip

DEFAULT_GROUP = "$default"
WAYPOINT_CAPABILITY = "qd.waypoint"  # the anchors': qd.waypoint, or qd.waypoint.N naming a phase


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
                if wanted in vhost.names:  # its hostname or an alias
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
            return None, refusal(E.UNAUTHORIZED_ACCESS, f"no vhost for hostname {str(hostname)[:255]!r} on this router")
        stats = self.stats_for(vhost.hostname)
        group_name, group = self._group(vhost, user)
        error = None
        if group is None:
            who = f"user {user!r}" if user is not None else "an anonymous connection"
            error = refusal(E.UNAUTHORIZED_ACCESS, f"{who} is in no group of vhost {vhost.hostname!r}")
        elif not host_allowed(group.remote_hosts, host):
            error = refusal(E.UNAUTHORIZED_ACCESS,
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
            return refusal(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit ({vhost.max_connections}) of {where} reached")
        per_user = group.max_connections_per_user if group.max_connections_per_user is not None else vhost.max_connections_per_user
        if per_user is not None and stats.per_user[user] >= per_user:
            who = f"user {user!r}" if user else "anonymous connections"
            return refusal(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit per user ({per_user}) of {where} reached for {who}")
        per_host = group.max_connections_per_host if group.max_connections_per_host is not None else vhost.max_connections_per_host
        if per_host is not None and stats.per_host[host] >= per_host:
            return refusal(E.RESOURCE_LIMIT_EXCEEDED, f"connection limit per host ({per_host}) of {where} reached for {host}")
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
        return refusal(E.RESOURCE_LIMIT_EXCEEDED, f"session limit ({limit}) of group {grant.group_name!r} "
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
            return refusal(E.RESOURCE_LIMIT_EXCEEDED, f"{kind} limit ({limit}) of group {name!r} of {where} reached")
        if not isinstance(terminus, Target if client_sends else Source):
            return None  # a coordinator, or no terminus: the Links unit answers it
        error = self._capabilities(group, name, where, terminus)
        if error is not None:
            return error
        if client_sends:
            if terminus.dynamic:
                return None
            if not terminus.address:
                if group.allow_anonymous_sender:
                    return None
                return refusal(E.UNAUTHORIZED_ACCESS, f"anonymous senders are not allowed for group {name!r} of {where}")
            if targets_allow(group, terminus.address, grant.user):
                return None
            return refusal(E.UNAUTHORIZED_ACCESS,
                           f"sending to {terminus.address[:200]!r} is not allowed for group {name!r} of {where}")  # fmt: skip
        if terminus.dynamic:
            if group.allow_dynamic_source:
                return None
            return refusal(E.UNAUTHORIZED_ACCESS, f"dynamic sources are not allowed for group {name!r} of {where}")
        if not terminus.address or sources_allow(group, terminus.address, grant.user):
            return None
        return refusal(E.UNAUTHORIZED_ACCESS,
                       f"receiving from {terminus.address[:200]!r} is not allowed for group {name!r} of {where}")  # fmt: skip

    @staticmethod
    def _capabilities(group: PolicyGroup, name: str, where: str, terminus: Source | Target) -> Error | None:
        """Waypoint and fallback links, when the group allows none (the capability of the
        client's terminus: the target of a sender, the source of a receiver)."""
        if group.allow_waypoint_links and group.allow_fallback_links:
            return None
        for capability in sorted(terminus_capabilities(terminus)):
            waypoint = capability == WAYPOINT_CAPABILITY or capability.startswith(WAYPOINT_CAPABILITY + ".")
            if (waypoint and not group.allow_waypoint_links) or (
                capability == FALLBACK_CAPABILITY and not group.allow_fallback_links
            ):
                rule = "allow_waypoint_links" if waypoint else "allow_fallback_links"
                return refusal(E.UNAUTHORIZED_ACCESS, f"links with the capability {capability[:100]!r} are not allowed "
                                                      f"for group {name!r} of {where} ({rule} is false)")  # fmt: skip
        return None
