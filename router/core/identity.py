"""Who may be a router: the identities an inter-router or edge listener accepts, and the client
links and termini that belong to the mesh alone.

Owns: the check of an accepted router connection's authenticated identity against its listener's
`router_identities` (users, or groups of `management.groups`) and, with
`router_id_is_identity`, that the router id the peer claims is the identity it proved (a
certificate or a SASL user cannot claim another router's id); the refusals of both
(`amqp:unauthorized-access`, described, logged with the peer's address); the start-up warning for
an inter-router or edge listener reachable from other hosts that lets any peer be a router; and
recognising a client's attach of the mesh's own control or data links (router.core.interrouter's
capabilities), which a client may never attach.
Must not touch: how the identity was authenticated (SASL, TLS: router.core.connections and the
network layer), the open's other checks (router.core.interrouter.check_open).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..amqp import errors as E
from ..amqp.performatives import Error
from ..config.models import Listener, RouterConfig, is_loopback_host
from .interrouter import CONTROL_CAPABILITY, DATA_CAPABILITY

log = logging.getLogger("router.security")

MESH_CAPABILITIES = frozenset((CONTROL_CAPABILITY, DATA_CAPABILITY))


def warn_open_router_listeners(config: RouterConfig) -> list[str]:
    """Log a WARNING for each inter-router or edge listener that other hosts can reach and that
    lets any peer be a router (no `router_identities`: only with allow_any_router); returns their
    names."""
    names = []
    for listener in config.listeners:
        if listener.role not in ("inter-router", "edge") or listener.router_identities or is_loopback_host(listener.host):
            continue
        names.append(listener.name)
        log.warning(
            "listener %s (role %s on %s) accepts any peer that reaches it as a router: set router_identities "
            "(with mutual TLS or SASL) so that only this network's routers can join",
            listener.name, listener.role, listener.host,
        )  # fmt: skip
    return names


def is_router_identity(user: str | None, listener: Listener, groups: Mapping[str, tuple[str, ...]]) -> bool:
    if user is None:
        return False
    return any(user == name or user in groups.get(name, ()) for name in listener.router_identities)


def check_router_identity(
    listener: Listener, user: str | None, mechanism: str | None, peer_id: Any, peer_host: str,
    groups: Mapping[str, tuple[str, ...]],
) -> Error | None:  # fmt: skip
    """The refusal for a peer that opened an accepted inter-router or edge connection on
    `listener` as `user` (None: anonymous) claiming router id `peer_id`, or None when it may be a
    router. Only listeners with `router_identities` check anything."""
    if not listener.router_identities:
        return None
    anonymous = user is None or mechanism in (None, "ANONYMOUS")
    if anonymous:
        why = (f"listener {listener.name!r} accepts only routers that authenticate (mutual TLS with SASL "
               "EXTERNAL, or a SASL user); this peer is anonymous")  # fmt: skip
    elif not is_router_identity(user, listener, groups):
        why = f"listener {listener.name!r}: {user!r} is not one of the router identities it accepts"
    elif listener.router_id_is_identity and peer_id != user:
        why = (f"listener {listener.name!r}: {user!r} may connect only as router {user!r}, "
               f"not as {str(peer_id)[:255]!r}")  # fmt: skip
    else:
        return None
    log.warning("router connection from %s refused: %s", peer_host or "?", why)
    return Error(condition=E.UNAUTHORIZED_ACCESS, description=why)


def terminus_capabilities(terminus: Any) -> frozenset[str]:
    """The capabilities of a source or target, as strings (none: empty)."""
    caps = getattr(terminus, "capabilities", None)
    if caps is None:
        return frozenset()
    if isinstance(caps, (str, bytes)):
        return frozenset((caps.decode("utf-8", "replace") if isinstance(caps, bytes) else caps,))
    try:
        return frozenset(c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in caps)
    except TypeError:
        return frozenset()


def mesh_link_refusal(source: Any, target: Any) -> Error | None:
    """A client's attach whose source or target carries a capability of the mesh's control or
    data links (router.core.interrouter) is refused: those links exist only between routers,
    and a client holding one would speak for a router."""
    caps = (terminus_capabilities(source) | terminus_capabilities(target)) & MESH_CAPABILITIES
    if not caps:
        return None
    return Error(
        condition=E.UNAUTHORIZED_ACCESS,
        description=f"the capability {sorted(caps)[0]} belongs to the links between routers: a client may not attach it",
    )
