"""The router's configuration schema: pydantic v2 models, the single source of truth for the YAML
file, run-time management and the docs (`router config schema` prints it as JSON Schema).

Owns: field names, defaults, limits and cross-field rules. Models are frozen, reject unknown
fields, and name units in their field names (`idle_timeout_s`).
Must not touch: loading files (loader.py), anything at run time.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Annotated, Literal

from pydantic import Field, model_validator

from ..amqp.scram import StoredCredentials
from .base import Model as Model  # (re-exported: importers take every model from here)
from .policy import Policy as Policy, PolicyGroup as PolicyGroup, Vhost as Vhost

# unavailable: attaches are refused (amqp:not-found) and anonymous sends rejected, as the anchors do
Distribution = Literal["closest", "balanced", "multicast", "unavailable"]
Port = Annotated[int, Field(ge=0, le=65535, description="TCP port; 0 picks a free one")]
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/@-]+$")]



def is_loopback_host(host: str) -> bool:
    """Whether only this machine can reach `host` (a loopback address or `localhost`); a host
    name or a wildcard may be reached by others."""
    bare = host.strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False

def _default_router_id() -> str:
    # Router ids are words in `_topo/0/<id>/...` addresses: keep them free of '/'.
    return re.sub(r"[^A-Za-z0-9._:-]", "-", socket.gethostname()) or "router"


PRIORITY_LEVELS = 10  # message priorities 0-9 (messaging 3.2.1; a header's higher values count as 9)
PRIORITY_BANDS_DEFAULT = 4


class RouterSection(Model):
    id: Name = Field(default_factory=_default_router_id, description="unique in the network; defaults to the host name")
    mode: Literal["standalone", "interior", "edge"] = Field(
        default="standalone",
        description="standalone: no other routers; interior: a router of the mesh; edge: a leaf with an uplink to interiors",
    )
    hello_interval_s: float = Field(default=1.0, gt=0, description="HELLO to each neighbour this often")
    dead_interval_s: float = Field(default=3.0, gt=0, description="a neighbour silent this long is lost")
    priority_bands: int = Field(
        default=PRIORITY_BANDS_DEFAULT, ge=1, le=PRIORITY_LEVELS,
        description="data links this router sends on to each neighbour, one per band of message priorities "
        "(0-9 mapped evenly onto the bands, docs/mesh.md 'Priorities'); 1: one data link for everything",
    )  # fmt: skip

    @model_validator(mode="after")
    def _id_has_no_slash(self) -> RouterSection:
        if "/" in self.id:
            raise ValueError("router id must not contain '/' (it is a word of _topo/0/<id>/ addresses)")
        if self.dead_interval_s <= self.hello_interval_s:
            raise ValueError("dead_interval_s must be longer than hello_interval_s")
        return self


COST_MAX = 2**31 - 1


class ConnectionSettings(Model):
    """What every connection needs, whichever side opened it: listeners and connectors share it."""

    link_capacity: int = Field(default=1000, ge=1, le=1_000_000, description="credit window given to each sender link")
    max_frame_size: int = Field(default=65536, ge=512, le=0xFFFFFFFF)
    idle_timeout_s: float = Field(default=16.0, ge=0, description="close a silent peer after this long; 0 disables")
    handshake_timeout_s: float = Field(
        default=10.0, ge=0,
        description="drop a connection whose peer has not finished the protocol header, SASL and open by then; 0 disables",
    )
    max_sessions_per_connection: int = Field(default=256, ge=1, le=65536)
    max_links_per_connection: int = Field(default=4096, ge=1)
    read_high_water_bytes: int = Field(
        default=16 * 1024 * 1024, ge=65536,
        description="message bytes the router holds for one connection's producers at most (waiting for consumer "
        "credit): their credit is sized to fit (a full window of 250 single-frame messages of 64 KiB by default), "
        "what a first window brings beyond it is released, and a peer past it is no longer read",
    )
    write_high_water_bytes: int = Field(
        default=4 * 1024 * 1024, ge=65536,
        description="send no more deliveries to a connection while this many bytes wait to be written "
        "(on a connection whose socket buffers are bounded, socket_buffer_bytes, at most twice that bound)",
    )
    # Not bounded by default, not even between routers: a bound caps a long link's throughput
    # (512 KiB at 50 ms: 10 MiB/s), which a site-to-site link must not meet by surprise.
    socket_buffer_bytes: int = Field(
        default=0, ge=0,
        description="the socket's kernel send and receive buffers (SO_SNDBUF, SO_RCVBUF); 0: the kernel's "
        "autotuning (the default). Bounded (e.g. 524288 on the inter-router listeners and connectors of a LAN mesh), "
        "fewer bytes lie below the router, where no priority band can overtake them (docs/mesh.md, 'Priorities'), "
        "but a TCP connection moves at most its buffer per round trip: a long link needs its bandwidth x round trip",
    )

    @property
    def write_high_water(self) -> int:
        """The write high-water mark in force: `write_high_water_bytes`, at most twice bounded
        socket buffers (a connection between routers keeps little below the router)."""
        buffer = self.socket_buffer_bytes
        high = self.write_high_water_bytes
        return min(high, max(65536, 2 * buffer)) if buffer else high


class Listener(ConnectionSettings):
    name: Name = "amqp"
    host: str = "127.0.0.1"
    port: Port = 5672
    role: Literal["normal", "inter-router", "edge", "route-container"] = Field(
        default="normal",
        description="normal: clients; inter-router: interior routers of this mesh; edge: edge routers",
    )
    cost: int = Field(default=1, ge=1, le=COST_MAX, description="inter-router link cost (the link's is the max of both ends')")
    sasl_mechanisms: tuple[Literal["ANONYMOUS", "PLAIN", "EXTERNAL", "SCRAM-SHA-256", "SCRAM-SHA-1"], ...] = ("ANONYMOUS",)
    allow_insecure_plain: bool = Field(
        default=False,
        description="offer PLAIN on connections without TLS too (the password then crosses the network in clear); "
        "by default PLAIN is offered only once TLS is up",
    )
    strip_annotations: Literal["in", "out", "both", "no"] = Field(
        default="both",
        description="remove the router's x-opt-qd.* message annotations from what clients send (in), "
        "from what they receive (out), both, or neither (no: router-aware clients pass them on)",
    )
    require_sasl: bool = Field(
        default=False,
        description="refuse clients that skip the SASL layer even though ANONYMOUS is offered "
        "(a listener that does not offer ANONYMOUS always refuses them)",
    )
    max_unsettled_per_link: int = Field(
        default=5000, ge=1,
        description="stop sending to a consumer link holding this many unsettled deliveries (the link is stuck "
        "until it settles some; other consumers of the address get the traffic)",
    )
    max_unsettled_per_connection: int = Field(
        default=20000, ge=1,
        description="the same bound for all consumer links of one connection together",
    )
    ssl_profile: Name | None = Field(default=None, description="the ssl_profiles entry whose certificate this listener presents (TLS)")
    require_ssl: bool = Field(
        default=True,
        description="with an ssl_profile: refuse clients that do not start TLS; false also serves plain AMQP on the port",
    )
    authenticate_peer: bool = Field(
        default=False, description="mutual TLS: refuse clients without a certificate signed by the profile's ca_file"
    )
    websocket: bool = Field(
        default=False,
        description="serve AMQP over WebSocket (subprotocol amqp, binary messages; wss with an ssl_profile) "
        "instead of AMQP over TCP",
    )
    websocket_path: str | None = Field(
        default=None, pattern=r"^/", description="with websocket: the only request path served (404 for others); any when not set"
    )
    websocket_origins: tuple[str, ...] = Field(
        default=(),
        description="with websocket: the Origin values (scheme://host[:port]) a browser's upgrade may carry, "
        "others refused with 403; empty: any. Requests without Origin (not from a browser) are served",
    )
    websocket_max_request_bytes: int = Field(
        default=8192, ge=512, le=1024 * 1024,
        description="with websocket: the longest HTTP upgrade request head taken (431 beyond it)",
    )
    router_identities: tuple[Annotated[str, Field(min_length=1, max_length=255)], ...] = Field(
        default=(),
        description="inter-router or edge listener: the only authenticated users (a certificate's identity "
        "by the profile's uid_format, or a SASL user) that may connect as routers, by name or by a group of "
        "management.groups; anonymous and other peers are refused with amqp:unauthorized-access. "
        "Empty: any peer that passes TLS and SASL (a WARNING at start on a non-loopback address)",
    )
    router_id_is_identity: bool = Field(
        default=False,
        description="with router_identities: the peer's router id (its open's container-id) must be the "
        "user it authenticated as, so that no router can claim another's id",
    )
    allow_any_router: bool = Field(
        default=False,
        description="inter-router or edge listener on a non-loopback address without router_identities: "
        "take any peer that passes TLS and SASL as a router (refused unless set: only for closed networks)",
    )

    @model_validator(mode="after")
    def _mechanisms(self) -> Listener:
        if not self.sasl_mechanisms:
            raise ValueError("sasl_mechanisms must name at least one mechanism")
        if self.authenticate_peer and self.ssl_profile is None:
            raise ValueError("authenticate_peer needs an ssl_profile")
        if "EXTERNAL" in self.sasl_mechanisms and self.ssl_profile is None:
            raise ValueError("EXTERNAL needs an ssl_profile (the identity is the client's certificate)")
        if self.websocket and self.role != "normal":
            raise ValueError("websocket listeners serve clients (role normal): connectors do not speak WebSocket")
        if not self.websocket and (self.websocket_path is not None or self.websocket_origins):
            raise ValueError("websocket_path and websocket_origins need websocket: true")
        if self.role == "normal" and (self.router_identities or self.router_id_is_identity):
            raise ValueError("router_identities and router_id_is_identity are for inter-router and edge listeners")
        if self.router_id_is_identity and not self.router_identities:
            raise ValueError("router_id_is_identity needs router_identities (who may be a router at all)")
        if (self.role in ("inter-router", "edge") and not self.router_identities and not self.allow_any_router
                and not is_loopback_host(self.host)):  # fmt: skip
            raise ValueError(
                f"listener {self.name!r}: role {self.role} on {self.host} would take any peer that reaches it "
                "as a router: set router_identities (the routers' certificate identities or SASL users), or "
                "allow_any_router: true on a closed network"
            )
        return self


class Connector(ConnectionSettings):
    """An outgoing connection to another router, kept up: after a failure it is retried with a
    jittered exponential backoff (reconnect_initial_s doubling up to reconnect_max_s)."""

    name: Name
    host: str
    port: Annotated[int, Field(ge=1, le=65535)]
    role: Literal["inter-router", "edge", "route-container"] = Field(
        default="inter-router", description="inter-router: to another interior router; edge: from an edge router to an interior one"
    )
    cost: int = Field(default=1, ge=1, le=COST_MAX, description="inter-router link cost (the link's is the max of both ends')")
    sasl_username: str | None = Field(
        default=None, description="SASL user (SCRAM-SHA-256, SCRAM-SHA-1 or PLAIN, as the peer offers); ANONYMOUS when not set"
    )
    sasl_password: str | None = None
    reconnect_initial_s: float = Field(default=0.5, gt=0)
    reconnect_max_s: float = Field(default=30.0, gt=0)
    ssl_profile: Name | None = Field(
        default=None, description="connect with TLS, trusting the profile's ca_file and presenting its certificate if it has one"
    )
    verify_hostname: bool = Field(default=True, description="with an ssl_profile: the peer's certificate must name `host`")

    @model_validator(mode="after")
    def _consistent(self) -> Connector:
        if (self.sasl_username is None) != (self.sasl_password is None):
            raise ValueError("give both sasl_username and sasl_password, or neither")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ValueError("reconnect_max_s must be >= reconnect_initial_s")
        return self


TlsProtocol = Literal["TLSv1.2", "TLSv1.3"]
UID_FIELDS = "csloun125"  # country, state, locality, organisation, unit, common name; SHA-1/256/512 fingerprint


class SslProfile(Model):
    """Certificates and TLS settings that listeners and connectors refer to by name. The files
    are read at start and again whenever they change (new handshakes use the new material;
    a file that does not load is refused with a log line and the old material stays)."""

    name: Name
    cert_file: str | None = Field(default=None, min_length=1, description="PEM certificate chain (our certificate first)")
    key_file: str | None = Field(default=None, min_length=1, description="PEM private key (the certificate file's when not set)")
    password_file: str | None = Field(default=None, min_length=1, description="file holding the key's password (first line)")
    ca_file: str | None = Field(
        default=None, min_length=1,
        description="PEM certificates trusted for peers (connectors: the system's when not set; listeners: needed for client certificates)",
    )
    protocols: tuple[TlsProtocol, ...] = Field(default=("TLSv1.2", "TLSv1.3"), min_length=1, description="TLS versions allowed")
    ciphers: str | None = Field(default=None, min_length=1, description="OpenSSL cipher list for TLS 1.2 (the defaults when not set)")
    uid_format: str = Field(
        default="n", min_length=1, max_length=len(UID_FIELDS), pattern=f"^[{UID_FIELDS}]+$",
        description="the SASL EXTERNAL user from the client certificate: c s l o u n (subject fields) "
        "and 1 2 5 (SHA-1/256/512 fingerprints), joined by ';'",
    )

    @model_validator(mode="after")
    def _key_with_cert(self) -> SslProfile:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs a cert_file")
        if self.password_file is not None and self.cert_file is None:
            raise ValueError("password_file needs a cert_file")
        return self


class HttpListener(Model):
    """An HTTP listener: the management resources as JSON, `/metrics` (Prometheus) and
    `/healthz`. With an ssl_profile it serves HTTPS; with authenticate: basic, requests carry
    HTTP basic credentials checked against the users (refused on plain HTTP: the password would
    cross the network in clear). Who may read and write is the `management` section's."""

    name: Name = "http"
    host: str = Field(default="127.0.0.1", description="bind address; loopback unless operators elsewhere must reach it")
    port: Port = 8080
    ssl_profile: Name | None = Field(default=None, description="serve HTTPS with the profile's certificate")
    authenticate: Literal["none", "basic"] = Field(
        default="none", description="basic: HTTP basic credentials checked against the users (needs an ssl_profile)"
    )
    open_health_metrics: bool = Field(
        default=True, description="/healthz and /metrics answer without credentials (for probes and scrapers)"
    )

    @model_validator(mode="after")
    def _basic_over_tls(self) -> HttpListener:
        if self.authenticate == "basic" and self.ssl_profile is None:
            raise ValueError(f"http listener {self.name!r}: authenticate: basic needs an ssl_profile (the password would cross in clear)")
        return self


Principals = tuple[Annotated[str, Field(min_length=1, max_length=255)], ...]


class Management(Model):
    """Who may use management (the AMQP node, WD14 over AMQP and the HTTP listeners).

    `operators` and a list of `readers` name users or groups (of `groups`). Operators may
    read and write (CREATE, UPDATE, DELETE; HTTP POST, PUT, DELETE); readers may read.
    `loopback_anonymous_operator`: a connection that did not log in as a user may write when it
    came through a listener bound only to a loopback address (127.0.0.0/8, ::1, localhost), so
    that a fresh `router run` can be managed from its own host. When not set it is true while no
    operators are configured and false once some are: naming operators turns the check on
    everywhere."""

    operators: Principals = Field(default=(), description="users or groups that may change the router")
    readers: Literal["open", "authenticated"] | Principals = Field(
        default="open", description="open: anyone who reaches management; authenticated: any logged-in user; or users/groups"
    )
    groups: dict[Annotated[str, Field(min_length=1, max_length=255)], Principals] = Field(
        default_factory=dict, description="group name -> its users"
    )
    loopback_anonymous_operator: bool | None = Field(
        default=None,
        description="anonymous writes through a loopback-only listener; when not set: allowed until operators are named",
    )


class AddressConfig(Model):
    """Address semantics by prefix (`orders` matches `orders`, `orders.eu`, `orders/eu`) or by
    pattern (`*` one word, `#` zero or more; words split on '.' or '/')."""

    prefix: str | None = Field(default=None, min_length=1)
    pattern: str | None = Field(default=None, min_length=1)
    distribution: Distribution = "balanced"
    priority: int | None = Field(
        default=None, ge=0, le=PRIORITY_LEVELS - 1,
        description="the priority of every message to the address on links between routers, whatever its header "
        "says (None: the header's, default 4)",
    )  # fmt: skip
    waypoint: bool = Field(
        default=False,
        description="a broker queue sits in the middle (auto-links): producers send on phase 0, which the out "
        "auto-link consumes; receivers consume phase 1, which the in auto-link produces",
    )

    @model_validator(mode="after")
    def _prefix_xor_pattern(self) -> AddressConfig:
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("give exactly one of prefix or pattern")
        return self


class RouteContainerRef(Model):
    """Which route-container connection something uses: a listener or connector by name, or the
    container-id the broker or service gives in its open (exactly one)."""

    connection: Name | None = Field(default=None, description="the route-container listener or connector whose connections carry it")
    container_id: str | None = Field(default=None, min_length=1, max_length=255, description="or: the container-id of the peer's open")

    @model_validator(mode="after")
    def _one_container(self) -> RouteContainerRef:
        if (self.connection is None) == (self.container_id is None):
            raise ValueError("give exactly one of connection or container_id")
        return self


class AutoLink(RouteContainerRef):
    """A link the router attaches itself to a queue of a broker (a waypoint) whenever a
    route-container connection matching `connection` or `container_id` is up. out: the router
    sends to the queue, which becomes a consumer of `address` for the whole mesh; in: the router
    receives from the queue, which becomes a producer into `address`."""

    name: Name | None = Field(default=None, description="management name (defaults to autoLink/<address>/<direction>/<connection or container>)")
    address: str = Field(min_length=1, max_length=1000, description="the mesh address the queue serves")
    direction: Literal["in", "out"]
    external_address: str | None = Field(
        default=None, min_length=1, max_length=1000, description="the address at the broker (e.g. /queue/NAME); `address` when not set"
    )
    phase: int | None = Field(
        default=None, ge=0, le=1,
        description="the address phase: out consumes phase 0 and in produces phase 1 (the defaults); on an address "
        "that is not a waypoint both phases are the address itself",
    )
    attach_timeout_s: float = Field(default=30.0, gt=0, description="a broker that has not answered the attach by then has failed it")
    retry_initial_s: float = Field(default=1.0, gt=0, description="wait before attaching again after a detach or failure (doubling)")
    retry_max_s: float = Field(default=30.0, gt=0, description="longest wait between attempts")

    @model_validator(mode="after")
    def _phase_and_retry(self) -> AutoLink:
        if self.phase is not None and self.phase != (0 if self.direction == "out" else 1):
            raise ValueError("two-phase waypoints only: out consumes phase 0, in produces phase 1 (leave phase unset)")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be >= retry_initial_s")
        return self

    @property
    def key(self) -> str:
        """The name management knows it by."""
        return self.name or f"autoLink/{self.address}/{self.direction}/{self.connection or self.container_id}"


class LinkRouteConfig(RouteContainerRef):
    """A link route: an attach whose address matches (the target of a sending client, the source
    of a receiving one) is not attached at the router but passed on, hop by hop, to the route
    container's connection, and everything on the link is relayed end to end."""

    name: Name | None = Field(default=None, description="for management; defaults to the direction and prefix or pattern")
    prefix: str | None = Field(default=None, min_length=1, max_length=1000, description="addresses `prefix`, `prefix.x`, `prefix/x`")
    pattern: str | None = Field(default=None, min_length=1, max_length=1000, description="`*` one word, `#` zero or more")
    direction: Literal["in", "out"] = Field(description="in: clients send to the container; out: clients receive from it")
    add_external_prefix: str | None = Field(default=None, min_length=1, max_length=1000,
                                            description="put in front of the address on the way to the container")
    del_external_prefix: str | None = Field(default=None, min_length=1, max_length=1000,
                                            description="taken from the front of the address on the way to the container")

    @model_validator(mode="after")
    def _one_address(self) -> LinkRouteConfig:
        if (self.prefix is None) == (self.pattern is None):
            raise ValueError("give exactly one of prefix or pattern")
        return self

    @property
    def route_name(self) -> str:
        return self.name or f"{self.direction}:{self.prefix if self.prefix is not None else self.pattern}"


class User(Model):
    """A user for SASL PLAIN and SCRAM: `hashes` as `router users hash` prints them (salted,
    iterated; never the password). A plain-text `password` is still read, with a warning at
    start: the router hashes it in memory, but the file holds a secret it should not."""

    username: str = Field(min_length=1, max_length=255)
    hashes: tuple[str, ...] = Field(
        default=(), description="SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY (and/or SCRAM-SHA-1$...), base64"
    )
    password: str | None = Field(default=None, min_length=1, description="deprecated: plain text; use hashes or users_file")

    @model_validator(mode="after")
    def _one_secret(self) -> User:
        if (self.password is None) == (not self.hashes):
            raise ValueError(f"user {self.username!r}: give hashes (or, deprecated, password), not both")
        for text in self.hashes:
            StoredCredentials.decode(text)  # raises ValueError naming what is wrong
        return self


class FailedLogins(Model):
    """Slowing down repeated failed SASL logins from one host: the first failure is answered at
    once, each further one within `forget_after_s` waits twice as long (from `initial_delay_s`
    up to `max_delay_s`) before the outcome; a success forgets the host. Only the failing
    connection waits."""

    initial_delay_s: float = Field(default=0.25, gt=0, description="delay of the second failure in a row")
    max_delay_s: float = Field(default=4.0, gt=0, le=60, description="longest delay before a failed login's outcome")
    forget_after_s: float = Field(default=60.0, gt=0, description="a host that has not failed for this long starts afresh")
    max_hosts: int = Field(default=4096, ge=1, le=1_000_000, description="hosts remembered (the oldest go first)")
    # A SASL PLAIN check derives PBKDF2 from the offered password (about a millisecond of the
    # event loop each): router-wide, at most this many per second; past it a login is refused at
    # once with sys-temp (the client tries again). A password verified before is not derived again.
    max_password_checks_per_s: float = Field(
        default=50.0, gt=0, le=100_000, description="PLAIN password derivations per second, router-wide"
    )
    password_checks_burst: int = Field(
        default=50, ge=1, le=100_000, description="derivations allowed at once before the per-second rate applies"
    )

    @model_validator(mode="after")
    def _ordered(self) -> FailedLogins:
        if self.max_delay_s < self.initial_delay_s:
            raise ValueError("max_delay_s must be >= initial_delay_s")
        return self


class Limits(Model):
    max_connections: int = Field(default=65535, ge=1)
    max_message_size: int | None = Field(default=None, ge=1, description="bytes; larger deliveries are rejected")
    buffered_budget_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1024 * 1024,
        description="router-wide budget of message bytes held for producers (waiting for consumer credit): "
        "producers' credit shrinks to share it, past it reads from the producers holding the most pause and "
        "deliveries that would have to wait are released",
    )


class Flow(Model):
    """Flow records (docs/flow-records.md): snapshots, interval counters and sampled hops the
    router emits for analytics. Off by default."""

    enabled: bool = Field(default=False, description="emit flow records")
    interval_s: float = Field(default=10.0, ge=1, le=3600, description="period of the per-link and per-address interval records")
    sample_one_in: int = Field(
        default=1000, ge=0, le=1_000_000_000,
        description="a hop record for 1 in this many deliveries (0: none; traced messages always get one)",
    )
    file_dir: str | None = Field(
        default=None, min_length=1, description="also append the records to gzip JSON lines files in this directory (rotated)",
    )
    file_rotate_bytes: int = Field(default=64 * 1024 * 1024, ge=4096, description="start a new file past this many uncompressed bytes")
    mesh_address: str | None = Field(
        default="_flow/records", min_length=1,
        description="send the records (batched, each kept until a collector accepts it) to this address, balanced "
        "anycast unless a rule says otherwise; null: files only",
    )
    buffer_records: int = Field(
        default=100_000, ge=10, le=10_000_000,
        description="records held before they are sent or written; past it hop and interval records are dropped "
        "first, snapshots last (counted: flowRecordsDropped)",
    )
    batch_records: int = Field(default=1000, ge=1, le=100_000, description="records per message at most")


_LEVEL = r"(trace|debug|info|notice|warning|error|critical)\+?"
# A logger of the router (`DEFAULT`: its root logger `router`) and its level in the anchors' `enable`
# syntax, as the management `log` entity takes it (docs/management.md).
LogModule = Annotated[str, Field(pattern=r"^(DEFAULT|router(\.[A-Za-z0-9_]+)+)$")]
LogEnable = Annotated[str, Field(pattern=rf"^(none|default|{_LEVEL}(\s*,\s*{_LEVEL})*)$")]


class RouterConfig(Model):
    router: RouterSection = Field(default_factory=RouterSection)
    listeners: tuple[Listener, ...] = (Listener(),)
    connectors: tuple[Connector, ...] = Field(default=(), description="outgoing connections to other routers")
    http: tuple[HttpListener, ...] = Field(default=(), description="HTTP listeners (management as JSON, metrics, health)")
    addresses: tuple[AddressConfig, ...] = ()
    auto_links: tuple[AutoLink, ...] = Field(default=(), description="links the router attaches to broker queues itself (waypoints)")
    link_routes: tuple[LinkRouteConfig, ...] = Field(default=(), description="attaches passed on to brokers and services")
    ssl_profiles: tuple[SslProfile, ...] = Field(default=(), description="TLS certificates and settings, by name")
    users: tuple[User, ...] = ()
    users_file: str | None = Field(
        default=None, min_length=1,
        description="file of users and their salted, iterated password hashes, written by `router users add`; "
        "read again when it changes",
    )
    failed_logins: FailedLogins = Field(default_factory=FailedLogins, description="slowing down repeated failed logins")
    management: Management = Field(default_factory=Management, description="who may read and change the router through management")
    limits: Limits = Field(default_factory=Limits)
    policy: Policy = Field(default_factory=Policy, description="vhosts: what client connections may do, by user group")
    flow: Flow = Field(default_factory=Flow, description="flow records for analytics (docs/flow-records.md)")
    log_levels: dict[LogModule, LogEnable] = Field(
        default_factory=dict,
        description="log level by module (DEFAULT or a router.* logger), e.g. {DEFAULT: info+, router.core: debug+}; "
        "applied at start and when the file is applied again at run time (over --log-level)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> RouterConfig:
        for what, names in (
            ("listener", [listener.name for listener in self.listeners]),
            ("http listener", [http.name for http in self.http]),
            ("connector", [connector.name for connector in self.connectors]),
            ("ssl profile", [profile.name for profile in self.ssl_profiles]),
            ("auto-link", [link.key for link in self.auto_links]),
            ("link route", [route.route_name for route in self.link_routes]),
        ):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{what} names must be unique: {', '.join(duplicates)}")
        self._roles_fit_mode()
        self._profiles_exist()
        password: list[str] = [m for listener in self.listeners for m in listener.sasl_mechanisms if m == "PLAIN" or m.startswith("SCRAM")]
        password += ["HTTP basic" for http in self.http if http.authenticate == "basic"]
        if password and not self.users and self.users_file is None:
            raise ValueError(f"a listener offers {password[0]} but no users are configured (users or users_file)")
        for listener in self.listeners:
            if "PLAIN" in listener.sasl_mechanisms and listener.ssl_profile is None and not listener.allow_insecure_plain:
                raise ValueError(
                    f"listener {listener.name!r} offers PLAIN without TLS: the password would cross the network in "
                    "clear; give it an ssl_profile, offer SCRAM-SHA-256 instead, or set allow_insecure_plain: true"
                )
        return self

    def _roles_fit_mode(self) -> None:
        """Which connection roles each router mode may use (the anchors' rules: interior routers
        link to each other and accept edges; an edge router only has uplinks to interiors)."""
        mode = self.router.mode
        allowed = {
            "standalone": ({"normal", "route-container"}, {"route-container"}),
            "interior": ({"normal", "inter-router", "edge", "route-container"}, {"inter-router", "route-container"}),
            "edge": ({"normal", "route-container"}, {"edge", "route-container"}),
        }[mode]
        for listener in self.listeners:
            if listener.role not in allowed[0]:
                raise ValueError(f"listener {listener.name!r}: role {listener.role} needs router mode interior (mode is {mode})")
        for connector in self.connectors:
            if connector.role not in allowed[1]:
                need = "interior" if connector.role == "inter-router" else "edge"
                raise ValueError(f"connector {connector.name!r}: role {connector.role} needs router mode {need} (mode is {mode})")

    def _profiles_exist(self) -> None:
        profiles = {profile.name: profile for profile in self.ssl_profiles}
        for listener in self.listeners:
            if listener.ssl_profile is None:
                continue
            profile = profiles.get(listener.ssl_profile)
            if profile is None:
                raise ValueError(f"listener {listener.name!r}: no ssl profile named {listener.ssl_profile!r}")
            if profile.cert_file is None:
                raise ValueError(f"listener {listener.name!r}: ssl profile {profile.name!r} has no cert_file to present")
            if listener.authenticate_peer and profile.ca_file is None:
                raise ValueError(f"listener {listener.name!r}: authenticate_peer needs a ca_file in ssl profile {profile.name!r}")
        for http in self.http:
            if http.ssl_profile is None:
                continue
            profile = profiles.get(http.ssl_profile)
            if profile is None or profile.cert_file is None:
                raise ValueError(f"http listener {http.name!r}: no ssl profile named {http.ssl_profile!r} with a cert_file")
        for connector in self.connectors:
            if connector.ssl_profile is not None and connector.ssl_profile not in profiles:
                raise ValueError(f"connector {connector.name!r}: no ssl profile named {connector.ssl_profile!r}")
