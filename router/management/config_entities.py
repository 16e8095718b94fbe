"""Configuration entity types: listener, connector and sslProfile (address rules:
address_rules.py), and the checks and calls that applying any configuration change goes through.

Owns: validation of created and updated entities by RouterConfig's cross-field rules (unique
names, the roles a router mode allows) on top of their models' (fieldmap.py), and applying
listener, connector and sslProfile changes through the agent's control (listeners re-opened on
update, the old one back if that fails; the control's failures as management errors).
Must not touch: the mapping between model fields and attributes (fieldmap.py), sockets (the
control's), the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from ..config.loader import problems_of
from ..config.models import Connector, Listener, RouterConfig, SslProfile

# Re-exported: the other configuration entity types take the mapping from here too.
from .fieldmap import FieldMap as FieldMap, camel as camel
from .model import Attribute, ConnectorControl, ConnectorStatusSource, EntityType, ManagementError

if TYPE_CHECKING:
    from .agent import ManagementAgent

T = TypeVar("T")


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
