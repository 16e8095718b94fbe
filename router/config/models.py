"""The router's configuration schema: pydantic v2 models, the single source of truth for the YAML
file, run-time management and the docs (`router config schema` prints it as JSON Schema).

Owns: the top level (RouterConfig and the rules across its sections) and the router-wide
sections: router, limits, flow records, log levels. The other sections have their own modules
(connections.py, addresses.py, access.py, policy.py), re-exported here. Models are frozen,
reject unknown fields, and name units in their field names (`idle_timeout_s`).
Must not touch: loading files (loader.py), anything at run time.
"""

from __future__ import annotations

import re
import socket
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, model_validator

# Re-exported: importers take every model and constant from here, whichever module defines it.
from .access import FailedLogins as FailedLogins, Management as Management, Principals as Principals, User as User
from .addresses import (
    PRIORITY_LEVELS as PRIORITY_LEVELS, AddressConfig as AddressConfig, AutoLink as AutoLink,
    Distribution as Distribution, LinkRouteConfig as LinkRouteConfig, RouteContainerRef as RouteContainerRef,
)  # fmt: skip
from .base import Model as Model, Name as Name
from .connections import (
    COST_MAX as COST_MAX, UID_FIELDS as UID_FIELDS, ConnectionSettings as ConnectionSettings, Connector as Connector,
    HttpListener as HttpListener, Listener as Listener, Port as Port, SslProfile as SslProfile,
    TlsProtocol as TlsProtocol, is_loopback_host as is_loopback_host,
)  # fmt: skip
from .policy import Policy as Policy, PolicyGroup as PolicyGroup, Vhost as Vhost


def _default_router_id() -> str:
    # Router ids are words in `_topo/0/<id>/...` addresses: keep them free of '/'.
    return re.sub(r"[^A-Za-z0-9._:-]", "-", socket.gethostname()) or "router"


PRIORITY_BANDS_DEFAULT = 4
STREAMING_LINKS_DEFAULT = 4
STREAMING_LINKS_MAX = 32


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
    streaming_links: int = Field(
        default=STREAMING_LINKS_DEFAULT, ge=0, le=STREAMING_LINKS_MAX,
        description="data links this router attaches to each neighbour for large messages, each in a session of its "
        "own (more, up to 32, as streams find them all busy): a message that does not fit its first frame streams on "
        "a free one, so that a consumer that stalls it stops only that link, not its priority band "
        "(docs/mesh.md 'Streaming links'); 0: none, streams go on their band's link",
    )  # fmt: skip

    busy_poll_us: int | None = Field(
        default=None, ge=0, le=10_000,
        description="after its last event the router keeps looking for the next one this many microseconds "
        "before it sleeps: a request/response round trip through the router saves two wake-ups, for up to that "
        "much CPU after every burst of work; for a router with a core of its own (50-100), not one that shares it "
        "or runs under a CPU quota below one CPU (docs/architecture.md 'Busy polling'); 0: off; null (the "
        "default): 50 when the router may run on one CPU only (taskset, a Guaranteed pod under the static CPU "
        "manager) on a host with more, and no CPU quota below one CPU holds it, else off",
    )  # fmt: skip

    @model_validator(mode="after")
    def _id_has_no_slash(self) -> RouterSection:
        if "/" in self.id:
            raise ValueError("router id must not contain '/' (it is a word of _topo/0/<id>/ addresses)")
        if self.dead_interval_s <= self.hello_interval_s:
            raise ValueError("dead_interval_s must be longer than hello_interval_s")
        return self


class Limits(Model):
    max_connections: int = Field(default=65535, ge=1)
    max_message_size: int | None = Field(default=None, ge=1, le=1 << 61, description="bytes; larger deliveries are rejected")
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


# The validation context of a configuration file (parse_config): rules that apply to a whole
# file, not to each step of a change made through management.
FILE_CONTEXT = "file"


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

    @model_validator(mode="after")
    def _fallback_rules(self, info: ValidationInfo) -> RouterConfig:
        """A file (parse_config's context) with a fallback auto-link needs an address rule with
        enable_fallback. Which rule an address gets is the core's matching (most specific wins):
        the router checks that at run time (the auto-link fails, saying so), as it does after
        management or a reload changes the rules (a change applied one entity at a time must
        not be refused half way)."""
        if not (info.context or {}).get(FILE_CONTEXT) or any(rule.enable_fallback for rule in self.addresses):
            return self
        for link in self.auto_links:
            if link.fallback:
                raise ValueError(f"auto-link {link.key!r}: fallback: true needs an address rule with "
                                 f"enable_fallback: true for {link.address!r}")  # fmt: skip
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
