"""Turning a listener's or connector's configuration into a connection engine, and
per-connection router state.

Owns: the engine settings a listener implies (frame size, idle time-out, SASL mechanisms; PLAIN
and SCRAM checked against the users' salted hashes (router.config.users); PLAIN offered only
once TLS is up unless the listener allows it in clear; EXTERNAL with the TLS layer's identity;
PLAIN's password derivations bounded router-wide on the engine's `now`, past the bound refused
with sys-temp; SASL required unless ANONYMOUS is offered; failed logins logged with the peer's
address and slowed down per peer host), the client-side engine of a connector (container-id =
our router id; SCRAM-SHA-256, SCRAM-SHA-1 or PLAIN with the connector's credentials, else
EXTERNAL with a certificate, else ANONYMOUS), and ConnState, the router's view of one
connection (the listener or connector it belongs to, its role and cost, its links, backpressure
flags).
Must not touch: routing decisions, I/O (but the users file, read through the credential store).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from ..amqp.connection import Connection, ConnectionConfig
from ..amqp.login_throttle import LoginThrottle
from ..amqp.sasl import SUPPORTED, PlainCheck, SaslClientConfig, SaslResult, SaslServerConfig
from ..amqp.scram_keys import MECHANISMS as SCRAM_MECHANISMS
from ..config.models import Connector, FailedLogins, Listener, RouterConfig
from ..config.users import CredentialStore, credential_store
from .bandwindow import held_pause_above

if TYPE_CHECKING:
    from .links import InLink, OutLink

_ids = itertools.count(1)
log = logging.getLogger("router.sasl")
_KNOWN = frozenset(SUPPORTED)


def engine_config(
    config: RouterConfig, listener: Listener, external_identity: str | None = None, *, tls: bool | None = None,
    clock: Callable[[], float] | None = None,
) -> ConnectionConfig:
    """The engine settings for a connection accepted on `listener`. `external_identity`: the
    user of the client's verified TLS certificate; SASL EXTERNAL is offered only with one.
    `tls`: whether the connection runs over TLS (None: as the listener requires). `clock`: the
    engine's `now` while it reads, for the router-wide budget of PLAIN password derivations
    (None: no budget)."""
    mechanisms = listener.sasl_mechanisms
    passwords = "PLAIN" in mechanisms or any(m in SCRAM_MECHANISMS for m in mechanisms)
    store = credential_store(config) if passwords else None
    plain = store is not None and _offers_plain(listener, tls)
    return ConnectionConfig(
        container_id=config.router.id,
        server=True,
        max_frame_size=listener.max_frame_size,
        channel_max=listener.max_sessions_per_connection - 1,
        idle_timeout_s=listener.idle_timeout_s or None,
        sasl_server=SaslServerConfig(
            mechanisms=tuple(mechanisms),
            check_plain=_plain_check(store, clock) if plain and store is not None else None,
            scram_credentials=store.scram if store is not None else None,
            # Secure default: without ANONYMOUS, skipping SASL would skip the authentication
            # the listener asks for (security §5.1: the server answers with the SASL header).
            allow_no_sasl=not listener.require_sasl and "ANONYMOUS" in mechanisms,
            external_identity=external_identity if "EXTERNAL" in mechanisms else None,
        ),
    )


def _offers_plain(listener: Listener, tls: bool | None) -> bool:
    """PLAIN sends the password itself: only inside TLS, unless the listener says otherwise."""
    secure = tls if tls is not None else (listener.ssl_profile is not None and listener.require_ssl)
    return "PLAIN" in listener.sasl_mechanisms and (secure or listener.allow_insecure_plain)


# The engine settings of connections that need none of their own (no PLAIN check on the
# engine's clock, no identity from a client certificate): one per listener, shared by its
# connections instead of one per connection (about 0.5 KiB of every idle connection). Keyed by
# the objects' ids; a hit is checked by identity, so a new configuration never gets an old one's.
_shared_configs: dict[tuple[int, int, bool | None], tuple[RouterConfig, Listener, ConnectionConfig]] = {}
SHARED_CONFIGS_MAX = 64  # listeners replaced at run time: start again past this many


def _shared_engine_config(config: RouterConfig, listener: Listener, tls: bool | None) -> ConnectionConfig:
    key = (id(config), id(listener), tls)
    cached = _shared_configs.get(key)
    if cached is None or cached[0] is not config or cached[1] is not listener:
        if len(_shared_configs) >= SHARED_CONFIGS_MAX:
            _shared_configs.clear()
        cached = _shared_configs[key] = (config, listener, engine_config(config, listener, tls=tls))
    return cached[2]


def _plain_check(store: CredentialStore, clock: Callable[[], float] | None) -> PlainCheck:
    if clock is None:
        return store.check_plain
    return lambda authzid, name, password: store.check_plain(authzid, name, password, clock())


def login_throttle(config: FailedLogins) -> LoginThrottle:
    return LoginThrottle(config.initial_delay_s, config.max_delay_s, config.forget_after_s, config.max_hosts)


def peer_host(peer: str) -> str:
    """The host of a peer address `host:port` (`[v6]:port` too): failed logins count per host."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]") or peer


def throttle_logins(state: ConnState, throttle: LoginThrottle) -> None:
    """Failed logins on the accepted connection `state` are slowed down per peer host (the host
    is read when a login fails: the network layer sets it after accept)."""
    state.engine.sasl_failure_delay = _FailedLogin(state, throttle)


class _FailedLogin:
    """The engine's hook for a failed login (an object of two slots rather than a closure and
    its cells: one on every connection)."""

    __slots__ = ("state", "throttle")

    def __init__(self, state: ConnState, throttle: LoginThrottle) -> None:
        self.state = state
        self.throttle = throttle

    def __call__(self, now: float, result: SaslResult) -> float:
        state = self.state
        delay = self.throttle.failed(peer_host(state.host), now)
        # What the peer sent is shown quoted and cut short: a log line must not be theirs to forge.
        mechanism = result.mechanism if result.mechanism in _KNOWN else repr((result.mechanism or "-")[:32])
        user = result.user_given[:64] if result.user_given is not None else None
        log.warning(
            "failed login from %s on listener %s: mechanism %s, user %r: %s (outcome in %.2f s)",
            state.host or "?", state.listener.name, mechanism, user, result.description, delay,
        )
        return delay


def new_engine(
    config: RouterConfig, listener: Listener, external_identity: str | None = None, *, tls: bool | None = None
) -> Connection:
    if external_identity is None and not _offers_plain(listener, tls):
        return Connection(_shared_engine_config(config, listener, tls))
    engine: Connection | None = None

    def now() -> float:  # a SASL frame is handled inside receive_data, whose `now` this is
        return engine.last_received if engine is not None else 0.0

    engine = Connection(engine_config(config, listener, external_identity, tls=tls, clock=now))
    return engine


def new_outgoing_engine(config: RouterConfig, connector: Connector) -> Connection:
    """The client-side engine of a connection `connector` opens to another router. Its open is
    sent by `RouterCore.connect`, which also registers it."""
    if connector.sasl_username is not None:
        # SCRAM first: the password never crosses the wire and the peer proves it knows it too.
        # PLAIN only inside TLS (the peer's listener offers it only there by default anyway).
        mechanisms = (*SCRAM_MECHANISMS, "PLAIN") if connector.ssl_profile else SCRAM_MECHANISMS
        sasl = SaslClientConfig(mechanisms=mechanisms, username=connector.sasl_username,
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


# ConnState.last_delivery before any transfer.
NEVER: Final = float("-inf")


class ConnState:
    """The router's state for one connection (hung on `engine.context`)."""

    __slots__ = (
        "engine", "listener", "id", "_in_links", "_out_links", "output_blocked", "buffered_bytes", "held_frame_bytes",
        "opened", "closed", "opened_at", "host", "sasl_mechanism", "role", "outgoing", "peer",
        "strip_in", "strip_out", "last_delivery", "touch_round",
        "unsettled_out", "unsettled_limit", "stuck",
        "tls", "policy", "_routed", "read_high_water", "producer_window", "held_pause_above",
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
        # Its links, made at the first one: two empty sets were ~0.4 KiB of every idle connection.
        self._in_links: set[InLink] | None = None
        self._out_links: set[OutLink] | None = None
        # Link-routed links (router.core.linkrelay.RoutedLink): they count against the link limit too.
        self._routed: set[Any] | None = None
        # Set by the network layer while this connection's socket cannot take more bytes: the
        # core then sends nothing more to it and holds deliveries (bounded by credit) instead.
        self.output_blocked = False
        # Bytes of deliveries from this connection that the core holds (waiting for credit):
        # bounded by the listener's read_high_water_bytes and shared in the router's budget
        # (router.core.bounds changes it and tells the network layer when to stop reading).
        self.buffered_bytes = 0
        # Bytes of frames of its deliveries streaming to a blocked output, held by the core
        # (kept by router.core.holding and, for link routes, linkrelay): they pause reading it
        # past read_high_water too (bounds.read_paused), but take no room from its waiting
        # deliveries (a delivery is released at the bound, a frame never).
        self.held_frame_bytes = 0
        # The listener's (or connector's) bound on those bytes, copied from the frozen settings:
        # a native int where the settings model's attribute is a generic lookup (~150
        # instructions) on the path of every delivery that waits.
        self.read_high_water: int = listener.read_high_water_bytes
        # What one of its producer links of large messages may have in flight (bounds.window).
        self.producer_window: int = listener.producer_window_bytes
        # Waiting and held bytes past which it is not read (bounds.read_paused): the same bound,
        # but between routers, whose bands shut first, far enough above it for what a neighbour
        # sent before it heard (router.core.bandwindow).
        self.held_pause_above: int = held_pause_above(
            listener.read_high_water_bytes, listener.write_high_water, listener.between_routers
        )
        # Unsettled deliveries sent on this connection's consumer links, and their bound
        # (router.core.bounds): at the bound every consumer link of the connection is stuck.
        self.unsettled_out: i64 = 0
        # Connections between routers: the producers' windows bound them (links.NO_LIMIT: an
        # int below 2**62, unboxed when compiled).
        self.unsettled_limit: i64 = 1 << 61
        if isinstance(listener, Listener) and listener.role == "normal":
            self.unsettled_limit = listener.max_unsettled_per_connection
        self.stuck = False
        self.opened = False
        self.closed = False
        # For management: when the peer's open arrived (the core's `now`), the peer's address (given by
        # the network layer to accept/connect) and the SASL mechanism it authenticated with.
        self.opened_at: float | None = None
        self.host = ""
        self.sasl_mechanism: str | None = None
        # When a transfer last came in or went out on it (the core's `now`; NEVER: none yet), for
        # management's lastDlvSeconds. A plain float: set on every transfer, an optional one was
        # a float object allocated each time.
        self.last_delivery = NEVER
        # The round of Touched (router.core.touched) in which its engine was last marked.
        self.touch_round = 0
        # The listener's strip_annotations: whether the x-opt-qd.* annotations are removed from
        # what this client sends (in) and from what it receives (out). Between routers the
        # annotations always travel (those links are the mesh's).
        strip = listener.strip_annotations if isinstance(listener, Listener) else "both"
        self.strip_in = strip in ("in", "both")
        self.strip_out = strip in ("out", "both")
        # The TLS session (protocol, cipher: router.net.tls.TlsInfo), given by the network layer; None if plain.
        self.tls: Any = None
        # What policy granted this client connection at its open (router.core.grant.Grant);
        # None when policy is off, and on connections between routers.
        self.policy: Any = None

    @property
    def cost(self) -> int:
        """This end's configured cost for an inter-router connection."""
        return self.listener.cost

    @property
    def in_links(self) -> set[InLink]:
        """The links on which this connection's peer sends to us."""
        links = self._in_links
        if links is None:
            links = self._in_links = set()
        return links

    @property
    def out_links(self) -> set[OutLink]:
        """The links on which we send to this connection's peer."""
        links = self._out_links
        if links is None:
            links = self._out_links = set()
        return links

    def link_sets(self) -> tuple[Collection[InLink], Collection[OutLink]]:
        """Its links in and out, read without making the sets of a connection that has none
        (management reads every connection's at every scrape)."""
        return self._in_links or (), self._out_links or ()

    @property
    def routed(self) -> set[Any]:
        """Its link-routed links (router.core.linkrelay.RoutedLink)."""
        links = self._routed
        if links is None:
            links = self._routed = set()
        return links

    @property
    def routed_if_any(self) -> set[Any] | None:
        """Its link-routed links, None while it has had none (no set made to answer)."""
        return self._routed

    @property
    def link_count(self) -> int:
        return len(self._in_links or ()) + len(self._out_links or ()) + len(self._routed or ())

    def __repr__(self) -> str:
        return f"ConnState(#{self.id}, {self.listener.name})"
