"""Configuration entity types: listener and connector (address rules: address_rules.py), and
the mapping between configuration models and management attributes that all three use.

Owns: the mapping between the configuration models' snake_case fields and the management
attributes (camelCase, the anchors' names where the concept is the same: `idle_timeout_s` is
`idleTimeoutSeconds`, `max_sessions_per_connection` is `maxSessions`, `sasl_username` is
`saslUsername`), validation of created and updated entities by those same models and by
RouterConfig's cross-field rules (unique names, the roles a router mode allows), hiding secrets
(a connector's `saslPassword` reads as a mask), and applying listener and connector changes
through the agent's control (listeners re-opened on update; the old one back if that fails).
Must not touch: sockets (the control's), the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..config.loader import problems_of
from ..config.models import Connector, Listener, RouterConfig, SslProfile
from .model import Attribute, ConnectorControl, ConnectorStatusSource, EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

T = TypeVar("T")


# Descriptions for model fields that carry none.
_DESCRIPTIONS = {
    "name": "Name, unique among entities of the type", "host": "Host name or IP address",
    "role": "Role of the connections (normal, inter-router, edge)", "max_frame_size": "Largest frame, bytes",
    "sasl_mechanisms": "SASL mechanisms, space separated", "max_sessions_per_connection": "Sessions per connection",
    "max_links_per_connection": "Links per connection", "sasl_username": "User name for SASL PLAIN",
    "prefix": "Address prefix (matches the address and its '.' or '/' sub-addresses)",
    "pattern": "Address pattern ('*' one word, '#' zero or more; words split on '.' or '/')",
    "distribution": "closest, balanced, multicast or unavailable (attaches refused, anonymous sends rejected)", "port": "TCP port",
    "sasl_password": "Password for SASL PLAIN (write-only: reads as ********)",
    "reconnect_initial_s": "Delay before the first retry after a failure (doubles, with jitter, up to reconnectMaxSeconds)",
    "reconnect_max_s": "Longest delay between retries",
}  # fmt: skip
MASK = "********"  # what a secret reads as (the anchors' tools print passwords the same way)
_RENAMED = {  # the anchors' names for the concept
    "max_sessions_per_connection": "maxSessions", "handshake_timeout_s": "initialHandshakeTimeoutSeconds",
    "key_file": "privateKeyFile", "ca_file": "caCertFile",
}  # fmt: skip


def camel(field: str) -> str:
    """`link_capacity` -> `linkCapacity`, `idle_timeout_s` -> `idleTimeoutSeconds`."""
    if field in _RENAMED:
        return _RENAMED[field]
    if field.endswith("_s"):
        field = field[:-2] + "_seconds"
    head, *rest = field.split("_")
    return head + "".join(word.capitalize() for word in rest)


def amqp_type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Union or type(annotation).__name__ == "UnionType":
        return amqp_type(next(a for a in args if a is not type(None)))
    if origin in (tuple, list):
        return "string"  # rendered as the anchors do: words separated by spaces
    return {bool: "boolean", int: "long", float: "double"}.get(annotation, "string")


class FieldMap:
    """Management attributes <-> the fields of a configuration model."""

    def __init__(self, model: type[BaseModel], writable: bool = True, secrets: tuple[str, ...] = ()) -> None:
        self.model = model
        self.fields: dict[str, str] = {}  # attribute -> field
        self.lists: set[str] = set()  # fields rendered as space-separated words
        self.secrets = set(secrets)  # fields never shown (MASK when set)
        attributes = []
        for field, info in model.model_fields.items():
            name = camel(field)
            self.fields[name] = field
            if get_origin(info.annotation) in (tuple, list):
                self.lists.add(field)
            default = None if info.is_required() or info.default_factory is not None else self._render(field, info.default)
            attributes.append(Attribute(name, amqp_type(info.annotation), info.description or _DESCRIPTIONS.get(field, ""),
                                        writable=writable, required=info.is_required(), default=default))  # fmt: skip
        self.attributes = tuple(attributes)

    def without_name(self) -> tuple[Attribute, ...]:
        """The attributes less `name` (every entity has one: model.BASE_ATTRIBUTES)."""
        return tuple(a for a in self.attributes if a.name != "name")

    def _render(self, field: str, value: Any) -> Any:
        if field in self.secrets:
            return None if value is None else MASK
        return " ".join(str(v) for v in value) if field in self.lists else value

    def render(self, obj: BaseModel) -> dict[str, Any]:
        return {name: self._render(field, getattr(obj, field)) for name, field in self.fields.items()}

    def parse(self, attributes: Mapping[str, Any], read_only: tuple[str, ...] = ()) -> dict[str, Any]:
        """Model fields from attributes (camelCase, or the configuration file's snake_case).
        Read-only attributes, and secrets given as the mask they read as, are ignored: a client
        may send back what it read (WD14 §5.6.2)."""
        out: dict[str, Any] = {}
        for key, value in attributes.items():
            if key in read_only:
                continue
            field = self.fields.get(key) or (key if key in self.model.model_fields else None)
            if field is None:
                raise ManagementError(400, f"unknown attribute {key!r} (known: {', '.join(self.fields)})")
            if field in self.secrets and value == MASK:
                continue
            if field in self.lists and isinstance(value, str):
                value = tuple(value.replace(",", " ").split())
            out[field] = value
        return out

    def merge(self, old: BaseModel, changes: dict[str, Any]) -> dict[str, Any]:
        """The old fields with `changes`; a None change restores the default (WD14 §5.6.2)."""
        fields = {f: getattr(old, f) for f in self.model.model_fields}
        for field, value in changes.items():
            if value is None:
                fields.pop(field, None)
            else:
                fields[field] = value
        return fields

    def build(self, fields: dict[str, Any], what: str) -> Any:
        try:
            return self.model.model_validate(fields)
        except ValidationError as exc:
            raise ManagementError(400, "; ".join(problems_of(exc, what))) from None


def with_config(agent: ManagementAgent, **changes: Any) -> RouterConfig:
    """The live configuration with `changes`, checked by RouterConfig's rules (unique names,
    users for PLAIN). The models given are kept as they are (the address table holds the very
    rule objects)."""
    candidate = agent.config.model_copy(update=changes)
    try:
        RouterConfig.model_validate(candidate.model_dump())
    except ValidationError as exc:
        raise ManagementError(400, "; ".join(problems_of(exc, "configuration"))) from None
    return candidate


def act(what: str, call: Callable[[], T]) -> T:
    """Call the network layer; its failures become management errors."""
    try:
        return call()
    except ManagementError:
        raise
    except OSError as exc:  # e.g. the port is taken
        raise ManagementError(409, f"cannot {what}: {exc.strerror or exc}") from None
    except Exception as exc:
        raise ManagementError(500, f"cannot {what}: {type(exc).__name__}: {exc}") from None


LISTENER = FieldMap(Listener)
CONNECTOR = FieldMap(Connector, secrets=("sasl_password",))


class ListenerType(EntityType):
    short_name = "listener"
    description = "An AMQP listener: accepts connections on a host and port"
    attributes = LISTENER.without_name() + (
        Attribute("boundPort", "long", "The port actually bound (port 0 picks one)"),
        Attribute("acceptFailures", "long", "Accepts that failed (out of file descriptors or memory); the listener backs off"),
        Attribute("handshakeTimeouts", "long", "Connections dropped for not finishing header, SASL and open in time"),
        Attribute("connectionsRefused", "long", "Connections refused at the router's connection limit"),
        Attribute("routersRefused", "long",
                  "Peers refused on this inter-router or edge listener for who they are (not a router identity, anonymous, another router's id)"),
        Attribute("websocketUpgradesRefused", "long",
                  "WebSocket upgrade requests refused with an HTTP error (not a request, wrong subprotocol, path or origin, too long)"),
    )
    read_only = ("boundPort", "acceptFailures", "handshakeTimeouts", "connectionsRefused", "websocketUpgradesRefused",
                 "routersRefused")
    operations = ("CREATE", "READ", "UPDATE", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        ports = dict(agent.control.listener_ports()) if agent.control is not None else agent.bound_ports
        refused = getattr(agent.core, "refused_connections", {})
        refused_routers = getattr(agent.core, "refused_routers", {})
        for listener in agent.config.listeners:
            attrs = LISTENER.render(listener)
            del attrs["name"]
            # The network layer's counters (a control without them, as in tests, shows none).
            counters = getattr(agent.control, "listener_counters", None)
            counted = counters(listener.name) if counters is not None else {}
            yield self.entity(f"listener/{listener.name}", listener.name, **attrs, boundPort=ports.get(listener.name),
                              acceptFailures=counted.get("accept_failures"),
                              handshakeTimeouts=counted.get("handshake_timeouts"),
                              connectionsRefused=refused.get(listener.name, 0),
                              routersRefused=refused_routers.get(listener.name, 0),
                              websocketUpgradesRefused=counted.get("upgrades_refused"))  # fmt: skip

    def _open(self, agent: ManagementAgent, listener: Listener) -> None:
        if agent.control is not None:
            control = agent.control
            port = act(f"open listener {listener.name}", lambda: control.create_listener(listener))
            if port is not None:
                agent.bound_ports[listener.name] = port

    def _close(self, agent: ManagementAgent, name: str) -> None:
        agent.bound_ports.pop(name, None)
        if agent.control is not None:
            control = agent.control
            act(f"close listener {name}", lambda: control.delete_listener(name))

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        listener: Listener = LISTENER.build(LISTENER.parse(attributes, self.read_only), "listener")
        if any(existing.name == listener.name for existing in agent.config.listeners):
            raise ManagementError(409, f"there is a listener named {listener.name!r} already")
        candidate = with_config(agent, listeners=(*agent.config.listeners, listener))
        self._open(agent, listener)
        agent.config = candidate
        return self._get(agent, listener.name, now)

    def _get(self, agent: ManagementAgent, name: str, now: float) -> dict[str, Any]:
        entity = self.find(agent, f"listener/{name}", now, "identity")
        assert entity is not None
        return entity

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        old = next(x for x in agent.config.listeners if x.name == entity["name"])
        new: Listener = LISTENER.build(LISTENER.merge(old, LISTENER.parse(attributes, self.read_only)), "listener")
        if new == old:
            return entity
        candidate = with_config(agent, listeners=tuple(new if x is old else x for x in agent.config.listeners))
        # Re-opened with the new settings; the connections it accepted carry on as they were.
        self._close(agent, old.name)
        try:
            self._open(agent, new)
        except ManagementError:
            act(f"re-open listener {old.name}", lambda: self._open(agent, old))
            raise
        agent.config = candidate
        return self._get(agent, new.name, now)

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        remaining = tuple(x for x in agent.config.listeners if x.name != entity["name"])
        candidate = with_config(agent, listeners=remaining)
        self._close(agent, entity["name"])
        agent.config = candidate


class ConnectorType(EntityType):
    short_name = "connector"
    description = ("A connection this router opens to another router and keeps up (retried with backoff); "
                   "interior routers connect inter-router, edge routers edge")  # fmt: skip
    attributes = CONNECTOR.without_name() + (
        Attribute("connectionStatus", "string", "CONNECTING, SUCCESS (connected) or FAILED (waiting to retry)"),
        Attribute("connectionMsg", "string", "Why the last attempt failed"),
    )
    operations = ("CREATE", "READ", "UPDATE", "DELETE")
    configuration = True
    status_attributes = ("connectionStatus", "connectionMsg")

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for connector in agent.config.connectors:
            yield self._entity(agent, connector)

    def _entity(self, agent: ManagementAgent, connector: Connector) -> dict[str, Any]:
        source = agent.control if isinstance(agent.control, ConnectorStatusSource) else None
        status = source.connector_status(connector.name) if source is not None else None
        return self.entity(
            f"connector/{connector.name}", connector.name, **_without_name(CONNECTOR.render(connector)),
            connectionStatus=status[0] if status is not None else None,
            connectionMsg=status[1] if status is not None else None,
        )  # fmt: skip

    @staticmethod
    def _control(agent: ManagementAgent) -> ConnectorControl | None:
        # Without one (a network layer that does not run connectors) connectors are only stored.
        return agent.control if isinstance(agent.control, ConnectorControl) else None

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        connector: Connector = CONNECTOR.build(CONNECTOR.parse(attributes, self.status_attributes), "connector")
        if any(existing.name == connector.name for existing in agent.config.connectors):
            raise ManagementError(409, f"there is a connector named {connector.name!r} already")
        # Checked before the control acts: a role the router's mode does not allow is a 400.
        candidate = with_config(agent, connectors=(*agent.config.connectors, connector))
        if (control := self._control(agent)) is not None:
            act(f"start connector {connector.name}", lambda: control.create_connector(connector))
        agent.config = candidate
        return self._entity(agent, connector)

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        old = next(x for x in agent.config.connectors if x.name == entity["name"])
        new: Connector = CONNECTOR.build(CONNECTOR.merge(old, CONNECTOR.parse(attributes, self.status_attributes)), "connector")
        if new == old:
            return entity
        candidate = with_config(agent, connectors=tuple(new if x is old else x for x in agent.config.connectors))
        # Restarted with the new settings (the old connection closes, a new one is opened).
        if (control := self._control(agent)) is not None:
            act(f"stop connector {old.name}", lambda: control.delete_connector(old.name))
            act(f"start connector {new.name}", lambda: control.create_connector(new))
        agent.config = candidate
        return self._entity(agent, new)

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        candidate = with_config(agent, connectors=tuple(x for x in agent.config.connectors if x.name != entity["name"]))
        if (control := self._control(agent)) is not None:
            act(f"stop connector {entity['name']}", lambda: control.delete_connector(entity["name"]))
        agent.config = candidate


SSL_PROFILE = FieldMap(SslProfile)


class SslProfileType(EntityType):
    """TLS certificates and settings (the anchors' sslProfile). An UPDATE loads the files again
    (also with no attribute changed: rotation on demand); new handshakes use the new material,
    connections already up keep theirs; material that does not load is refused (400) and the old
    stays in force. The network layer also reloads the files by itself when they change."""

    short_name = "sslProfile"
    description = ("TLS certificates and settings that listeners and connectors name; an UPDATE reloads the files "
                   "(new handshakes use them, open connections keep theirs)")  # fmt: skip
    attributes = SSL_PROFILE.without_name() + (
        Attribute("ordinal", "long", "How many times the profile's files were loaded (1 at start, one more per rotation)"),
    )
    read_only = ("ordinal",)
    operations = ("CREATE", "READ", "UPDATE", "DELETE")
    configuration = True

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for profile in agent.config.ssl_profiles:
            yield self._entity(agent, profile)

    def _entity(self, agent: ManagementAgent, profile: SslProfile) -> dict[str, Any]:
        loads = getattr(agent.control, "ssl_profile_loads", None)
        return self.entity(f"sslProfile/{profile.name}", profile.name, **_without_name(SSL_PROFILE.render(profile)),
                           ordinal=loads(profile.name) if loads is not None else None)  # fmt: skip

    @staticmethod
    def _load(agent: ManagementAgent, profile: SslProfile) -> None:
        load = getattr(agent.control, "update_ssl_profile", None)
        if load is not None:
            try:
                load(profile)
            except ValueError as exc:  # router.net.tls.TlsError: the files do not load
                raise ManagementError(400, str(exc)) from None

    def create(self, agent: ManagementAgent, attributes: dict[str, Any], now: float) -> dict[str, Any]:
        profile: SslProfile = SSL_PROFILE.build(SSL_PROFILE.parse(attributes, self.read_only), "sslProfile")
        if any(existing.name == profile.name for existing in agent.config.ssl_profiles):
            raise ManagementError(409, f"there is an sslProfile named {profile.name!r} already")
        candidate = with_config(agent, ssl_profiles=(*agent.config.ssl_profiles, profile))
        self._load(agent, profile)
        agent.config = candidate
        return self._entity(agent, profile)

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        old = next(x for x in agent.config.ssl_profiles if x.name == entity["name"])
        new: SslProfile = SSL_PROFILE.build(SSL_PROFILE.merge(old, SSL_PROFILE.parse(attributes, self.read_only)), "sslProfile")
        candidate = with_config(agent, ssl_profiles=tuple(new if x is old else x for x in agent.config.ssl_profiles))
        self._load(agent, new)
        agent.config = candidate
        return self._entity(agent, new)

    def delete(self, agent: ManagementAgent, entity: dict[str, Any]) -> None:
        # RouterConfig's rules refuse it while a listener or connector names it.
        candidate = with_config(agent, ssl_profiles=tuple(x for x in agent.config.ssl_profiles if x.name != entity["name"]))
        remove = getattr(agent.control, "remove_ssl_profile", None)
        if remove is not None:
            remove(entity["name"])
        agent.config = candidate


def _without_name(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k != "name"}
