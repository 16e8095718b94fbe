"""Turning a listener's or connector's configuration into a connection engine, and
per-connection router state.

Owns: the engine settings a listener implies (frame size, idle time-out, SASL mechanisms and the
PLAIN credential check from the configured users, EXTERNAL with the TLS layer's identity), the client-side engine of a connector
(container-id = our router id, SASL PLAIN with the connector's credentials, else ANONYMOUS), and
ConnState, the router's view of one connection (the listener or connector it belongs to, its
role and cost, its links, backpressure flags).
Must not touch: routing decisions, I/O.
"""

from __future__ import annotations

import hmac
import itertools
from typing import TYPE_CHECKING, Any

from ..amqp.connection import Connection, ConnectionConfig
from ..amqp.sasl import SaslClientConfig, SaslServerConfig
from ..config.models import Connector, Listener, RouterConfig

if TYPE_CHECKING:
    from .links import InLink, OutLink

_ids = itertools.count(1)


def plain_checker(config: RouterConfig) -> Any:
    users = {user.username: user.password for user in config.users}

    def check(_authzid: str, username: str, password: str) -> bool:
        expected = users.get(username)
        # constant-time comparison: the answer's timing must not leak the password
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    return check


def engine_config(config: RouterConfig, listener: Listener, external_identity: str | None = None) -> ConnectionConfig:
    """The engine settings for a connection accepted on `listener`. `external_identity`: the
    user of the client's verified TLS certificate; SASL EXTERNAL is offered only with one."""
    return ConnectionConfig(
        container_id=config.router.id,
        server=True,
        max_frame_size=listener.max_frame_size,
        channel_max=listener.max_sessions_per_connection - 1,
        idle_timeout_s=listener.idle_timeout_s or None,
        sasl_server=SaslServerConfig(
            mechanisms=tuple(listener.sasl_mechanisms),
            check_plain=plain_checker(config) if "PLAIN" in listener.sasl_mechanisms else None,
            allow_no_sasl=not listener.require_sasl,
            external_identity=external_identity if "EXTERNAL" in listener.sasl_mechanisms else None,
        ),
    )


def new_engine(config: RouterConfig, listener: Listener, external_identity: str | None = None) -> Connection:
    return Connection(engine_config(config, listener, external_identity))


def new_outgoing_engine(config: RouterConfig, connector: Connector) -> Connection:
    """The client-side engine of a connection `connector` opens to another router. Its open is
    sent by `RouterCore.connect`, which also registers it."""
    if connector.sasl_username is not None:
        sasl = SaslClientConfig(mechanisms=("PLAIN",), username=connector.sasl_username,
                                password=connector.sasl_password, hostname=connector.host)  # fmt: skip
    elif _presents_certificate(config, connector):
        # The peer may know us by our certificate (mutual TLS between routers): EXTERNAL first.
        sasl = SaslClientConfig(mechanisms=("EXTERNAL", "ANONYMOUS"), hostname=connector.host)
    else:
        sasl = SaslClientConfig(mechanisms=("ANONYMOUS",), hostname=connector.host)
    return Connection(
        ConnectionConfig(
            container_id=config.router.id,
            server=False,
            max_frame_size=connector.max_frame_size,
            channel_max=connector.max_sessions_per_connection - 1,
            idle_timeout_s=connector.idle_timeout_s or None,
            sasl_client=sasl,
        )
    )


def _presents_certificate(config: RouterConfig, connector: Connector) -> bool:
    return any(p.name == connector.ssl_profile and p.cert_file for p in config.ssl_profiles)


class ConnState:
    """The router's state for one connection (hung on `engine.context`)."""

    __slots__ = (
        "engine", "listener", "id", "in_links", "out_links", "output_blocked", "buffered_bytes",
        "opened", "closed", "opened_at", "host", "sasl_mechanism", "role", "outgoing", "peer",
        "tls",
    )  # fmt: skip

    def __init__(self, engine: Connection, listener: Listener | Connector) -> None:
        self.engine = engine
        # The listener that accepted it, or the connector that opened it (both carry the
        # connection settings: link capacity, high-water marks, limits).
        self.listener = listener
        self.outgoing = isinstance(listener, Connector)
        # normal (clients), inter-router or edge: what the listener or connector is for.
        self.role: str = listener.role
        # The peer router (router.core.interrouter.Peer) once an inter-router or edge
        # connection is recognised; None for clients.
        self.peer: Any = None
        self.id = next(_ids)
        self.in_links: set[InLink] = set()
        self.out_links: set[OutLink] = set()
        # Set by the network layer while this connection's socket cannot take more bytes: the
        # core then sends nothing more to it and holds deliveries (bounded by credit) instead.
        self.output_blocked = False
        # Bytes of deliveries from this connection that the core holds; the network layer
        # stops reading the socket while it is over the listener's high-water mark.
        self.buffered_bytes = 0
        self.opened = False
        self.closed = False
        # For management: when the peer's open arrived (the core's `now`), the peer's address (set by
        # the network layer after accept) and the SASL mechanism it authenticated with.
        self.opened_at: float | None = None
        self.host = ""
        self.sasl_mechanism: str | None = None
        # The TLS session (protocol, cipher: router.net.tls.TlsInfo), set by the network layer; None if plain.
        self.tls: Any = None

    @property
    def cost(self) -> int:
        """This end's configured cost for an inter-router connection."""
        return self.listener.cost

    @property
    def link_count(self) -> int:
        return len(self.in_links) + len(self.out_links)

    def __repr__(self) -> str:
        return f"ConnState(#{self.id}, {self.listener.name})"
