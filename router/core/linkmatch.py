"""Link routes: what a route is and how an attach is matched against one.

Owns: the reserved forms (the advertised address `\\0lr/<in|out>/<p|t>/<prefix or pattern>`,
the attach property marking a routed attach between routers, the anchors' dynamic-node-property
naming a dynamic terminus's route), Route (a configured route, the route-container connections
serving it, address rewriting both ways), RemoteRoute (a route other routers advertise) and
Adverts (such routes by key, matched by address), and reading an attach's routing address and
passing its termini and properties on.
Must not touch: pairs and their life cycle (router.core.linkpairs), the relay (linkrelay.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, NamedTuple

from ..amqp.link import Link
from ..amqp.messaging import Coordinator, Source, Target
from ..amqp.types import Symbol
from ..config.models import LinkRouteConfig
from .addressing import AddressMatcher
from .connections import ConnState

MARK: Final = "\x00lr/"  # advertised link routes; no client may attach to such an address
ROUTED_PROPERTY: Final = "mesh.link-route"  # on a routed attach between routers
DYNAMIC_ADDRESS: Final = "x-opt-qd.address"  # the anchors' dynamic-node-property naming the route
COORDINATOR: Final = "$coordinator"


def advert_key(direction: str, prefix: str | None, pattern: str | None) -> str:
    if prefix is not None:
        return f"{MARK}{direction}/p/{prefix}"
    return f"{MARK}{direction}/t/{pattern}"


class Route:
    """One configured link route and the route-container connections serving it now."""

    __slots__ = ("config", "name", "containers", "key")

    def __init__(self, config: LinkRouteConfig) -> None:
        self.config = config
        self.name = config.route_name
        self.containers: list[ConnState] = []
        self.key = advert_key(config.direction, config.prefix, config.pattern)

    def serves(self, conn: ConnState) -> bool:
        config = self.config
        if config.connection is not None:
            return conn.listener.name == config.connection
        remote = conn.engine.remote_open
        return remote is not None and remote.container_id == config.container_id

    def outward(self, address: str | None) -> str | None:
        """The address as the container knows it."""
        config = self.config
        if address is None:
            return None
        if config.del_external_prefix and address.startswith(config.del_external_prefix):
            address = address[len(config.del_external_prefix):]
        if config.add_external_prefix:
            address = config.add_external_prefix + address
        return address

    def inward(self, address: str | None) -> str | None:
        """The container's address as the client knows it (outward undone: for the address a
        container makes up for a dynamic node; other answers echo the client's own)."""
        config = self.config
        if address is None:
            return None
        if config.add_external_prefix:
            if not address.startswith(config.add_external_prefix):
                return address  # not one the rewriting made
            address = address[len(config.add_external_prefix):]
        if config.del_external_prefix:
            address = config.del_external_prefix + address
        return address


class AdvertKey(NamedTuple):
    direction: str  # in | out
    kind: str  # p (prefix) | t (pattern)
    value: str


def parse_key(key: str) -> AdvertKey | None:
    """What an advertised key says, or None for a key that is not one of ours."""
    if not key.startswith(MARK):
        return None
    parts = key[len(MARK):].split("/", 2)
    if len(parts) != 3 or parts[0] not in ("in", "out") or parts[1] not in ("p", "t") or not parts[2]:
        return None
    return AdvertKey(*parts)


class RemoteRoute:
    """A route that `routers` (router ids, or on an interior the ids of its edge routers) have a
    container for."""

    __slots__ = ("key", "routers")

    def __init__(self, key: str, routers: frozenset[str]) -> None:
        self.key = key
        self.routers = routers


class Adverts:
    """Routes others serve, by advertised key, and matched by address per direction."""

    def __init__(self) -> None:
        self.routes: dict[str, RemoteRoute] = {}
        self._match: dict[str, AddressMatcher[RemoteRoute]] = {"in": AddressMatcher(), "out": AddressMatcher()}

    def set(self, key: str, routers: frozenset[str]) -> bool:
        """`routers` serve route `key` from now on (none: forgotten). False for a key that is
        not one of ours (ignored)."""
        parsed = parse_key(key)
        if parsed is None:
            return False
        matcher = self._match[parsed.direction]
        old = self.routes.pop(key, None)
        if old is not None:
            matcher.remove(old)
        if routers:
            remote = self.routes[key] = RemoteRoute(key, routers)
            (matcher.add_prefix if parsed.kind == "p" else matcher.add_pattern)(parsed.value, remote)
        return True

    def lookup(self, address: str, direction: str) -> RemoteRoute | None:
        return self._match[direction].lookup(address)


class NoPath:
    """A route matched, but no container is reachable now."""

    __slots__ = ("description",)

    def __init__(self, description: str) -> None:
        self.description = description


def routing_address(link: Link) -> tuple[str | None, Any]:
    """The address an attach is routed by, and the terminus it is in."""
    terminus = link.remote_source if link.is_sender else link.remote_target
    if isinstance(terminus, Coordinator):
        return COORDINATOR, terminus
    if not isinstance(terminus, (Source, Target)):
        return None, terminus
    if terminus.dynamic:
        props = terminus.dynamic_node_properties or {}
        hint = props.get(DYNAMIC_ADDRESS, props.get(Symbol(DYNAMIC_ADDRESS)))
        return (hint if isinstance(hint, str) else None), terminus
    return terminus.address, terminus


def rewrite(terminus: Any, rewrite: Any) -> Any:
    if isinstance(terminus, (Source, Target)) and terminus.address is not None:
        return dataclasses.replace(terminus, address=rewrite(terminus.address))
    return terminus


def passed_properties(properties: Any, routed: bool) -> Any:
    """Attach properties passed on: ours marks a routed attach between routers, and only there."""
    props = {k: v for k, v in (properties or {}).items() if str(k) != ROUTED_PROPERTY}
    if routed:
        props[Symbol(ROUTED_PROPERTY)] = True
    return props or None
