"""The connections the router accepts and opens, as configured: AMQP listeners, connectors to
other routers, the settings both share, the TLS profiles they name and the HTTP listeners.
Re-exported by router/config/models.py, whose RouterConfig holds them and checks what spans
them (unique names, roles that fit the router's mode, profiles that exist).

Owns: these models' fields, defaults and the rules within one listener, connector or profile;
which hosts only this machine can reach (is_loopback_host: a router-role listener bound elsewhere
needs router_identities or allow_any_router; router/core/identity.py asks it too).
Must not touch: rules across sections (models.py), sockets and TLS contexts (router/net/).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import Model, Name

Port = Annotated[int, Field(ge=0, le=65535, description="TCP port; 0 picks a free one")]

COST_MAX = 2**31 - 1
# A peer's connection is not read while more than this many times its write high-water mark
# waits to be written to it (ConnectionSettings.read_pause_unsent).
READ_PAUSE_UNSENT_FACTOR = 4


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
        "what a first window brings beyond it is released, and a peer past it is no longer read (between routers, "
        "frames held for blocked consumers first stop the priority band they came on: docs/mesh.md)",
    )
    producer_window_bytes: int = Field(
        default=2 * 1024 * 1024, ge=65536,
        description="bytes of large messages a client's producer link may have in flight: once its messages are "
        "known to be larger than read_high_water_bytes / (4 x link_capacity) (4 KiB by default), its credit window is "
        "this many bytes' worth (at most link_capacity; two messages' worth at least, within read_high_water_bytes). "
        "More only fills queues (on a fast network 2 MiB keeps the path busy); a producer far away may need its "
        "bandwidth x round trip. Links between routers keep their window",
    )
    write_high_water_bytes: int = Field(
        default=4 * 1024 * 1024, ge=65536,
        description="send no more deliveries to a connection while this many bytes wait to be written "
        "(on a connection whose socket buffers are bounded, socket_buffer_bytes, at most twice that bound); "
        "a client's connection is not read while four times this waits",
    )
    stalled_stream_timeout_s: float = Field(
        default=60.0, ge=0,
        description="detach a consumer's link (amqp:resource-limit-exceeded) that takes nothing of a message "
        "streaming to it for this long while the router holds that message's frames for it (its output blocked: "
        "it reads nothing, or keeps its session window closed), so that the message's producer (a client's "
        "connection, or another router's priority band) is read again; its producer hears modified. "
        "0 disables; not between routers",
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

    @property
    def read_pause_unsent(self) -> int:
        """Stop reading a peer while more than this waits to be written to it (router.net.
        driverlife): deliveries stop at the write high-water mark, what passes this bound is
        what the peer asks for without reading the answers. 0 between routers (interior and
        edge): each end bounds what its core writes, and two routers that stopped reading each
        other could wait for ever."""
        if self.between_routers:
            return 0
        return READ_PAUSE_UNSENT_FACTOR * self.write_high_water

    @property
    def between_routers(self) -> bool:
        """A connection to another router of the mesh (interior or edge)."""
        return getattr(self, "role", "normal") in ("inter-router", "edge")


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
        default=5000, ge=1, le=1 << 61,
        description="stop sending to a consumer link holding this many unsettled deliveries (the link is stuck "
        "until it settles some; other consumers of the address get the traffic)",
    )
    max_unsettled_per_connection: int = Field(
        default=20000, ge=1, le=1 << 61,
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
