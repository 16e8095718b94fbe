"""The policy entity types: `policy` (the singleton: on or off, the default vhost, router-wide
counters), `vhost` (created, changed and deleted at run time) and `vhostStats` (counters per
vhost), as the anchors name them (docs/management.md; docs/security.md, "Policy").

Owns: rendering the configuration's policy section as entities (a vhost's groups as a map of
group name to its settings, camelCase or snake_case accepted on writes), validating changes with
the configuration's models, and handing the new rules to the core's PolicyUnit (new connections
and links follow them; connections already open keep the group they were granted).
Must not touch: the decisions (router.core.policy).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..config.models import Policy, PolicyGroup, Vhost
from ..config.loader import problems_of
from .config_entities import with_config
from .fieldmap import camel
from .model import Attribute, EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

_VHOST_FIELDS = {camel(f): f for f in Vhost.model_fields}
_GROUP_FIELDS = {camel(f): f for f in PolicyGroup.model_fields}


def _snake(attributes: Mapping[str, Any], fields: dict[str, str], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        field = fields.get(key) or (key if key in fields.values() else None)
        if field is None:
            raise ManagementError(400, f"unknown {what} attribute {key!r} (known: {', '.join(fields)})")
        out[field] = value
    return out


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _render_group(group: PolicyGroup) -> dict[str, Any]:
    return {camel(k): _listed(v) for k, v in group.model_dump().items()}


def _render_vhost(vhost: Vhost) -> dict[str, Any]:
    out = {camel(k): _listed(getattr(vhost, k)) for k in Vhost.model_fields if k != "groups"}
    out["groups"] = {name: _render_group(group) for name, group in vhost.groups.items()}
    return out


def _build_vhost(fields: dict[str, Any]) -> Vhost:
    groups = fields.get("groups")
    if groups is not None:
        if not isinstance(groups, Mapping):
            raise ManagementError(400, "groups: a map of group name to its settings")
        fields["groups"] = {
            name: (g if isinstance(g, PolicyGroup) else _snake(g if isinstance(g, Mapping) else {}, _GROUP_FIELDS, "group"))
            for name, g in groups.items()
        }
    try:
        return Vhost.model_validate(fields)
    except ValidationError as exc:
        raise ManagementError(400, "; ".join(problems_of(exc, "vhost"))) from None


def _commit(agent: ManagementAgent, policy: Policy) -> None:
    try:
        policy = Policy.model_validate(policy.model_dump())
    except ValidationError as exc:
        raise ManagementError(400, "; ".join(problems_of(exc, "policy"))) from None
    agent.config = with_config(agent, policy=policy)
    agent.core.policy.rules = policy


class PolicyType(EntityType):
    short_name = "policy"
    description = ("Policy for client connections: vhosts by the open's hostname, with groups of users "
                   "(docs/security.md, \"Policy\"); the singleton policy/policy")  # fmt: skip
    attributes = (
        Attribute("enabled", "boolean", "Apply the vhosts to client connections", writable=True, default=False),
        Attribute("defaultVhost", "string", "The vhost of opens whose hostname names none; empty: those are refused",
                  writable=True, default="$default"),
        Attribute("connectionsProcessed", "long", "Client connections policy looked at"),
        Attribute("connectionsDenied", "long", "Client connections refused by policy"),
        Attribute("connectionsCurrent", "long", "Client connections open under policy now"),
        Attribute("linksDenied", "long", "Attaches refused by policy"),
        Attribute("maxMessageSizeDenied", "long", "Links detached for a message over their group's maxMessageSize"),
        Attribute("totalDenials", "long", "Connections, sessions, links and messages refused by policy"),
    )
    operations = ("READ", "UPDATE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        unit = agent.core.policy
        rules = agent.config.policy
        stats = list(unit.stats.values())
        size = sum(s.message_size_denied for s in stats)
        others = sum(s.sessions_denied + s.messages_denied for s in stats)
        yield self.entity(
            "policy/policy", "policy", enabled=rules.enabled, defaultVhost=rules.default_vhost or "",
            connectionsProcessed=unit.connections_processed, connectionsDenied=unit.connections_denied,
            connectionsCurrent=sum(s.current for s in stats), linksDenied=unit.links_denied,
            maxMessageSizeDenied=size, totalDenials=unit.connections_denied + unit.links_denied + size + others,
        )  # fmt: skip

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        for key, value in attributes.items():
            if key == "enabled":
                changes["enabled"] = False if value is None else value
            elif key in ("defaultVhost", "default_vhost"):
                changes["default_vhost"] = value or None
            elif key in (a.name for a in self.attributes):
                continue  # a counter sent back as read
            else:
                raise ManagementError(400, f"unknown policy attribute {key!r}")
        _commit(agent, agent.config.policy.model_copy(update=changes))
        return next(self.entities(agent, now))


class VhostType(EntityType):
    short_name = "vhost"
    description = ("The policy of the client connections whose open names this hostname. Changes apply to new "
                   "connections and links; open connections keep the group they were granted")  # fmt: skip
    attributes = (
        Attribute("hostname", "string", "The open's hostname this vhost applies to ($default: the default vhost)",
                  writable=True, required=True),
        Attribute("aliases", "list", "Other hostnames that select this vhost (case does not matter)", writable=True),
        Attribute("maxConnections", "long", "Connections to the vhost, in all", writable=True),
        Attribute("maxConnectionsPerUser", "long", "Connections of one user", writable=True),
        Attribute("maxConnectionsPerHost", "long", "Connections from one host", writable=True),
        Attribute("maxMessageSize", "long", "Bytes: the maxMessageSize of its groups that set none", writable=True),
        Attribute("allowUnknownUser", "boolean", "Users in no group (and anonymous connections) get the $default group",
                  writable=True, default=False),
        Attribute("groups", "map", "Group name -> its settings: users, remoteHosts, maxConnectionsPerUser, "
                  "maxConnectionsPerHost, maxSessions, maxSenders, maxReceivers, maxFrameSize, maxMessageSize, "
                  "maxSessionWindow, sources, targets, sourcePattern, targetPattern, allowAnonymousSender, "
                  "allowDynamicSource, allowUserIdProxy, allowWaypointLinks, allowFallbackLinks", writable=True),
    )
    operations = ("CREATE", "READ", "UPDATE", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for vhost in agent.config.policy.vhosts:
            yield self.entity(f"vhost/{vhost.hostname}", vhost.hostname, **_render_vhost(vhost))

    def _replace(self, agent: ManagementAgent, vhosts: tuple[Vhost, ...]) -> None:
        _commit(agent, agent.config.policy.model_copy(update={"vhosts": vhosts}))

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        name = attributes.pop("name", None)
        fields = _snake(attributes, _VHOST_FIELDS, "vhost")
        fields.setdefault("hostname", name)
        if name is not None and name != fields["hostname"]:
            raise ManagementError(400, "a vhost's name is its hostname")
        vhost = _build_vhost(fields)
        if any(v.hostname.lower() == vhost.hostname.lower() for v in agent.config.policy.vhosts):
            raise ManagementError(409, f"there is a vhost for {vhost.hostname!r} already")
        self._replace(agent, (*agent.config.policy.vhosts, vhost))
        return self.entity(f"vhost/{vhost.hostname}", vhost.hostname, **_render_vhost(vhost))

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        old = next(v for v in agent.config.policy.vhosts if v.hostname == entity["name"])
        changes = _snake(attributes, _VHOST_FIELDS, "vhost")
        if changes.get("hostname", old.hostname) != old.hostname:
            raise ManagementError(400, "the hostname of a vhost cannot be changed: create another")
        fields = {f: getattr(old, f) for f in Vhost.model_fields}
        for field, value in changes.items():
            if value is None:
                fields.pop(field, None)
            else:
                fields[field] = value
        new = _build_vhost(fields)
        self._replace(agent, tuple(new if v is old else v for v in agent.config.policy.vhosts))
        return self.entity(f"vhost/{new.hostname}", new.hostname, **_render_vhost(new))

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        self._replace(agent, tuple(v for v in agent.config.policy.vhosts if v.hostname != entity["name"]))


class VhostStatsType(EntityType):
    short_name = "vhostStats"
    description = "Counters of a vhost: connections approved, denied and open, and what policy refused"
    attributes = (
        Attribute("hostname", "string", "The vhost"),
        Attribute("connectionsApproved", "long", "Connections granted"),
        Attribute("connectionsDenied", "long", "Connections refused (who, where from, or a connection limit)"),
        Attribute("connectionsCurrent", "long", "Connections open now"),
        Attribute("perUserState", "map", "User -> connections open now (anonymous connections under \"\")"),
        Attribute("perHostState", "map", "Host -> connections open now"),
        Attribute("sessionDenied", "long", "Sessions ended at their group's maxSessions"),
        Attribute("senderDenied", "long", "Sending links refused (a limit, a target, an anonymous sender)"),
        Attribute("receiverDenied", "long", "Receiving links refused (a limit, a source, a dynamic source)"),
        Attribute("maxMessageSizeDenied", "long", "Links detached for a message over the group's maxMessageSize"),
        Attribute("messagesDenied", "long", "Messages rejected: a user-id not the user's, a target not allowed"),
    )

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        unit = agent.core.policy
        names = [v.hostname for v in agent.config.policy.vhosts]
        names += [name for name, s in unit.stats.items() if name not in names and s.current]  # deleted, still in use
        for name in names:
            s = unit.stats_for(name)
            yield self.entity(
                f"vhostStats/{name}", name, hostname=name, connectionsApproved=s.approved, connectionsDenied=s.denied,
                connectionsCurrent=s.current, perUserState=dict(s.per_user), perHostState=dict(s.per_host),
                sessionDenied=s.sessions_denied, senderDenied=s.senders_denied, receiverDenied=s.receivers_denied,
                maxMessageSizeDenied=s.message_size_denied, messagesDenied=s.messages_denied,
            )  # fmt: skip
