"""What addresses do and which of them reach brokers and services, as configured: address rules
(distribution, priority, waypoints, fallback destinations), auto-links to broker queues and link
routes. Re-exported by
router/config/models.py, whose RouterConfig holds them.

Owns: these models' fields, defaults and the rules within one entry; the number of message
priorities (the router section's priority_bands is bounded by it too).
Must not touch: rules across sections (models.py), matching and routing at run time
(router/core/addressing.py, autolinks.py, linkroute.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Model, Name, require_one_of

# unavailable: attaches are refused (amqp:not-found) and anonymous sends rejected, as the anchors do
Distribution = Literal["closest", "balanced", "multicast", "unavailable"]

PRIORITY_LEVELS = 10  # message priorities 0-9 (messaging 3.2.1; a header's higher values count as 9)


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
    enable_fallback: bool = Field(
        default=False,
        description="the address may have fallback destinations (auto-links with fallback: true, receivers with the "
        "source capability qd.fallback): deliveries go there while the address has no consumer anywhere, instead of "
        "being released",
    )

    @model_validator(mode="after")
    def _prefix_xor_pattern(self) -> AddressConfig:
        require_one_of(self, "prefix", "pattern")
        if self.enable_fallback and self.distribution not in ("closest", "balanced"):
            raise ValueError(f"enable_fallback: anycast addresses only (distribution closest or balanced), not {self.distribution}")
        if self.enable_fallback and self.waypoint:
            raise ValueError("enable_fallback: not on a waypoint (its queue already takes every message)")
        return self


class RouteContainerRef(Model):
    """Which route-container connection something uses: a listener or connector by name, or the
    container-id the broker or service gives in its open (exactly one)."""

    connection: Name | None = Field(default=None, description="the route-container listener or connector whose connections carry it")
    container_id: str | None = Field(default=None, min_length=1, max_length=255, description="or: the container-id of the peer's open")

    @model_validator(mode="after")
    def _one_container(self) -> RouteContainerRef:
        require_one_of(self, "connection", "container_id")
        return self


class AutoLink(RouteContainerRef):
    """A link the router attaches itself to a queue of a broker (a waypoint) whenever a
    route-container connection matching `connection` or `container_id` is up. out: the router
    sends to the queue, which becomes a consumer of `address` for the whole mesh; in: the router
    receives from the queue, which becomes a producer into `address`. With `fallback`, the
    queue is the address's fallback destination instead (an address rule enable_fallback)."""

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
    fallback: bool = Field(
        default=False,
        description="the queue is a fallback destination of `address` (its rule needs enable_fallback): out, it takes "
        "the address's deliveries while the address has no consumer anywhere; in, what it holds goes to the address's "
        "consumers while there are any (never back to a fallback)",
    )

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
        if self.name:
            return self.name
        return f"autoLink/{self.address}/{self.direction}/{self.connection or self.container_id}" + ("/fallback" if self.fallback else "")


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
        require_one_of(self, "prefix", "pattern")
        return self

    @property
    def route_name(self) -> str:
        return self.name or f"{self.direction}:{self.prefix if self.prefix is not None else self.pattern}"
