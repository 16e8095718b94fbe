"""Operational entity types, read from the routing core: router, connection, link (router.link),
router.address (the live address table), router.node (the mesh's routers) and log.

Owns: the attribute names (the anchors' camelCase names where the concept is the same, e.g.
`subscriberCount`, `deliveriesIngress`, `acceptedDeliveries`), how each is computed from the
core's state, and the log levels of Python loggers (the one run-time change these types allow).
Must not touch: the core's state (read only), configuration (config_entities.py).

Address keys are shown as the anchors show them (`M0orders` for the mobile address `orders`,
`Lx` for `_local/x`): their tools derive the address class and text from that form.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ..core.links import InLink, OutLink
from ..core.table import AddressEntry
from .model import Attribute, EntityType, ManagementError

if TYPE_CHECKING:
    from ..core.connections import ConnState
    from .agent import ManagementAgent


def _counters(*specs: str) -> tuple[Attribute, ...]:
    """Read-only counters from "name: description" specs."""
    return tuple(Attribute(n.strip(), "ulong", d.strip()) for n, _, d in (s.partition(":") for s in specs))


def _version() -> str:
    try:
        return metadata.version("amqp-mesh-router")
    except metadata.PackageNotFoundError:
        return "unknown"


def address_key(entry: AddressEntry) -> str:
    """The anchors' key for an address: `M0<address>` (mobile, phase 0) or `L<address>`."""
    return "M0" + entry.key[1:] if entry.key.startswith("M") else entry.key


def table_key(key: str) -> str | None:
    """Our table's key for one in the anchors' form (None if it cannot be one)."""
    if key.startswith("M0"):
        return "M" + key[2:]
    return key if key.startswith("L") else None


def _links(agent: ManagementAgent) -> list[InLink | OutLink]:
    out: list[InLink | OutLink] = []
    for state in agent.core.connections.values():
        out.extend(state.in_links)
        out.extend(state.out_links)
    return sorted(out, key=lambda link: link.id)


def _total(attribute: str, gone: Any, links: Iterable[InLink | OutLink]) -> int:
    return int(getattr(gone, attribute)) + sum(int(getattr(link, attribute)) for link in links)


class RouterType(EntityType):
    short_name = "router"
    description = "This router: its identity and router-wide counters (deliveries counted where they entered)"
    attributes = (
        Attribute("id", "string", "Router id, unique in the network"),
        Attribute("mode", "string", "standalone, interior or edge"),
        Attribute("version", "string", "Software version"),
        Attribute("defaultDistribution", "string", "Distribution of addresses no rule matches"),
    ) + _counters(
        "addrCount: Addresses in the address table", "linkCount: Attached links",
        "nodeCount: Other routers known", "connectionCount: Open connections",
        "presettledDeliveries: Deliveries that arrived settled",
        "droppedPresettledDeliveries: Presettled deliveries dropped (no destination or expired)",
        "acceptedDeliveries: Deliveries whose producer was told accepted",
        "rejectedDeliveries: Deliveries whose producer was told rejected",
        "releasedDeliveries: Deliveries whose producer was told released",
        "modifiedDeliveries: Deliveries whose producer was told modified",
        "deliveriesIngress: Deliveries received from clients", "deliveriesEgress: Deliveries sent to clients",
        "deliveriesTransit: Deliveries forwarded between routers",
        "deliveriesFromRouter: Messages the router itself sent (e.g. management replies)",
        "droppedFromRouter: Messages the router itself sent that had no destination",
        "uptimeSeconds: Seconds since the router started",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        core = agent.core
        states = list(core.connections.values())
        ins = [link for s in states for link in s.in_links]
        outs = [link for s in states for link in s.out_links]
        router = agent.config.router
        # Identity = the router id: WD14's `id` (the identity, §4.3.3) and the anchors' `id`
        # attribute then agree.
        yield self.entity(
            router.id, router.id, id=router.id, mode=router.mode, version=_version(),
            defaultDistribution="balanced", addrCount=len(core.table.entries), linkCount=len(ins) + len(outs),
            nodeCount=sum(1 for _ in agent.entity_type("router.node").entities(agent, now)),
            connectionCount=sum(1 for s in states if s.opened and not s.closed),
            presettledDeliveries=_total("presettled", core.gone_in, ins),
            droppedPresettledDeliveries=_total("dropped", core.gone_in, ins),
            acceptedDeliveries=_total("accepted", core.gone_in, ins),
            rejectedDeliveries=_total("rejected", core.gone_in, ins),
            releasedDeliveries=_total("released", core.gone_in, ins),
            modifiedDeliveries=_total("modified", core.gone_in, ins),
            deliveriesIngress=_total("delivered", core.gone_in, ins),
            deliveriesEgress=_total("delivered", core.gone_out, outs), deliveriesTransit=0,
            deliveriesFromRouter=core.forwarder.router_sent, droppedFromRouter=core.forwarder.router_dropped,
            uptimeSeconds=max(0, int(now - agent.started_at)),
        )  # fmt: skip


class ConnectionType(EntityType):
    short_name = "connection"
    description = "A connection a client or router opened to this router"
    attributes = (
        Attribute("container", "string", "The peer's container id"),
        Attribute("host", "string", "The peer's address (host:port)"),
        Attribute("role", "string", "normal, inter-router or edge (the listener's role)"),
        Attribute("dir", "string", "in: the peer connected to us"),
        Attribute("protocol", "string", "amqp"),
        Attribute("listener", "string", "Name of the listener that accepted it"),
        Attribute("sasl", "string", "SASL mechanism used (none when SASL was skipped)"),
        Attribute("isAuthenticated", "boolean", "The peer authenticated (a SASL mechanism other than ANONYMOUS)"),
        Attribute("user", "string", "Authenticated user"),
        Attribute("isEncrypted", "boolean", "TLS is in use"),
        Attribute("properties", "map", "The peer's connection properties"),
        Attribute("opened", "boolean", "The open handshake completed"),
        Attribute("operStatus", "string", "up or closing"),
        Attribute("adminStatus", "string", "enabled"),
    ) + _counters("uptimeSeconds: Seconds since the peer's open", "linkCount: Attached links")  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for state in sorted(agent.core.connections.values(), key=lambda s: s.id):
            yield self._entity(state, now)

    def _entity(self, state: ConnState, now: float) -> dict[str, Any]:
        engine, remote = state.engine, state.engine.remote_open
        mechanism = state.sasl_mechanism
        properties = {str(k): v for k, v in (remote.properties or {}).items()} if remote is not None else None
        return self.entity(
            str(state.id), f"connection/{state.id}", container=remote.container_id if remote is not None else None,
            host=state.host or None, role=state.listener.role, dir="in", protocol="amqp", listener=state.listener.name,
            sasl=mechanism, isAuthenticated=mechanism not in (None, "ANONYMOUS"), user=engine.user,
            isEncrypted=False, properties=properties, opened=state.opened,
            operStatus="closing" if state.closed else "up", adminStatus="enabled",
            uptimeSeconds=max(0, int(now - state.opened_at)) if state.opened_at is not None else 0,
            linkCount=state.link_count,
        )  # fmt: skip


class LinkType(EntityType):
    short_name = "router.link"
    description = ("A link attached to this router. dir in: a producer sends to the router; out: the router "
                   "sends to a consumer (out-links count no presettled or dropped deliveries)")  # fmt: skip
    attributes = (
        Attribute("linkType", "string", "endpoint (a client's link) or inter-router"),
        Attribute("linkDir", "string", "in (to the router) or out (from the router)"),
        Attribute("owningAddr", "string", "Key of its address (M0<address>, L<address>); none when anonymous"),
        Attribute("address", "string", "Its address as attached"),
        Attribute("connectionId", "ulong", "Identity of its connection"),
        Attribute("operStatus", "string", "up or down"),
        Attribute("adminStatus", "string", "enabled"),
    ) + _counters(
        "capacity: Credit window", "undeliveredCount: Deliveries waiting for this link's credit",
        "unsettledCount: Deliveries in flight without a final outcome", "deliveryCount: Deliveries transferred",
        "presettledCount: Presettled deliveries", "droppedPresettledCount: Presettled deliveries dropped",
        "acceptedCount: Accepted", "rejectedCount: Rejected", "releasedCount: Released", "modifiedCount: Modified",
        "creditAvailable: Credit the link has now",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for link in _links(agent):
            yield self._entity(link)

    def _entity(self, link: InLink | OutLink) -> dict[str, Any]:
        incoming = isinstance(link, InLink)
        entry = link.entry
        return self.entity(
            str(link.id), link.link.name, linkDir="in" if incoming else "out",
            linkType="inter-router" if link.conn.listener.role == "inter-router" else "endpoint",
            owningAddr=address_key(entry) if entry is not None else None,
            address=entry.address if entry is not None else None, connectionId=link.conn.id,
            operStatus="down" if link.gone else "up", adminStatus="enabled", capacity=link.capacity,
            undeliveredCount=0 if isinstance(link, InLink) else len(link.pending or ()),
            unsettledCount=link.inflight if isinstance(link, InLink) else link.outstanding,
            deliveryCount=link.delivered,
            presettledCount=link.presettled if isinstance(link, InLink) else 0,
            droppedPresettledCount=link.dropped if isinstance(link, InLink) else 0,
            acceptedCount=link.accepted, rejectedCount=link.rejected, releasedCount=link.released,
            modifiedCount=link.modified, creditAvailable=link.link.credit,
        )  # fmt: skip


class RouterAddressType(EntityType):
    short_name = "router.address"
    description = "An address in this router's address table (live: consumers, producers, counters)"
    attributes = (
        Attribute("key", "string", "The address's key (M0<address> mobile, L<address> local)"),
        Attribute("address", "string", "The address"),
        Attribute("distribution", "string", "closest, balanced or multicast"),
        Attribute("remoteHostRouters", "list", "Routers with consumers of the address"),
    ) + _counters(
        "inProcess: In-process destinations (e.g. the management node)",
        "subscriberCount: Local consumers", "remoteCount: Other routers with consumers",
        "containerCount: Route containers", "producerCount: Local producers (links to the address)",
        "undeliveredCount: Deliveries waiting for consumer credit",
        "deliveriesIngress: Deliveries that arrived for the address",
        "deliveriesEgress: Deliveries sent to local destinations",
        "deliveriesTransit: Deliveries forwarded to other routers",
        "deliveriesToContainer: Deliveries to route containers", "deliveriesFromContainer: From route containers",
        "released: Deliveries released (no destination)", "dropped: Presettled deliveries dropped",
        "expired: Deliveries that expired waiting", "rejected: Deliveries rejected",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        entries = agent.core.table.entries
        for key in sorted(entries):
            yield self._entity(entries[key])

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        table = agent.core.table
        ours = table_key(key)
        entry = table.entries.get(ours) if ours is not None else None
        if entry is None and by != "identity":
            entry = table.find(key)  # a plain address as the name
        return self._entity(entry) if entry is not None else None

    def _entity(self, e: AddressEntry) -> dict[str, Any]:
        key = address_key(e)
        return self.entity(
            key, key, key=key, address=e.address, distribution=e.distribution, remoteHostRouters=[],
            inProcess=int(e.local is not None), subscriberCount=len(e.consumers), remoteCount=0, containerCount=0,
            producerCount=len(e.producers), undeliveredCount=len(e.pending),
            deliveriesIngress=e.deliveries_ingress, deliveriesEgress=e.deliveries_egress, deliveriesTransit=0,
            deliveriesToContainer=0, deliveriesFromContainer=0, released=e.released, dropped=e.dropped,
            expired=e.expired, rejected=e.rejected,
        )  # fmt: skip


class NodeType(EntityType):
    """Routers of the mesh. The mesh issue registers its own type with this short name; its
    entities' identity should be their `id` (as for `router`)."""

    short_name = "router.node"
    description = "Another router in the mesh (none on a standalone router)"
    attributes = (
        Attribute("id", "string", "Router id"), Attribute("protocolVersion", "ulong", "Inter-router protocol version"),
        Attribute("instance", "ulong", "Boot time of the router (changes when it restarts)"),
        Attribute("linkState", "list", "Ids of its neighbours"), Attribute("nextHop", "string", "Next hop towards it"),
        Attribute("validOrigins", "list", "Routers whose deliveries it may forward"),
        Attribute("address", "string", "Its router address"), Attribute("routerLink", "string", "Link towards it"),
        Attribute("cost", "ulong", "Path cost to it"), Attribute("lastTopoChange", "ulong", "Last topology change"),
        Attribute("index", "ulong", "Its index"),
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        """One entity per other router this router knows (the core's mesh read API)."""
        mesh = agent.core.mesh
        changed = int(mesh.last_change) if mesh.last_change is not None else None
        for index, info in enumerate(mesh.routers(), start=1):
            rid = info["id"]
            yield self.entity(
                rid, rid, id=rid, protocolVersion=1, instance=info["instance"], linkState=info["neighbours"],
                nextHop=info["next_hop"], validOrigins=info["valid_origins"], address=f"_topo/0/{rid}/",
                routerLink=str(info["link"]) if info["link"] is not None else None, cost=info["cost"],
                lastTopoChange=changed, index=index,
            )  # fmt: skip


# Python logging levels by the anchors' level names (which have trace and notice too).
LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
          "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}  # fmt: skip
OFF = logging.CRITICAL + 10
ROOT_LOGGER = "router"  # module DEFAULT


def parse_enable(text: Any) -> int:
    """A logging level from the anchors' `enable` syntax: `info+`, `debug`, `trace,warning+`,
    `none`; `default` inherits from the parent logger. Python loggers have one threshold, so a
    list enables from its lowest level up."""
    if not isinstance(text, str):
        raise ManagementError(400, "enable is a string such as 'info+', 'debug+' or 'none'")
    words = [w.strip().lower().rstrip("+") for w in text.split(",") if w.strip()]
    if words in ([], ["none"]):
        return OFF
    if words == ["default"]:
        return logging.NOTSET
    unknown = [w for w in words if w not in LEVELS]
    if unknown:
        raise ManagementError(400, f"unknown log level(s) {unknown}: use {', '.join(LEVELS)} or none")
    return min(LEVELS[w] for w in words)


class LogType(EntityType):
    short_name = "log"
    description = "A logging module (a Python logger of the router); enable sets its level at run time"
    attributes = (
        Attribute("module", "string", "DEFAULT (the router's root logger) or a logger name"),
        Attribute("enable", "string", "Lowest level logged, e.g. info+, debug+, none; default inherits", writable=True),
    )
    operations = ("READ", "UPDATE")

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        names = [n for n, logger in logging.root.manager.loggerDict.items()
                 if isinstance(logger, logging.Logger) and n.startswith(ROOT_LOGGER + ".")]  # fmt: skip
        yield self._entity("DEFAULT")
        for name in sorted(names):
            yield self._entity(name)

    def _entity(self, module: str) -> dict[str, Any]:
        logger = logging.getLogger(ROOT_LOGGER if module == "DEFAULT" else module)
        level = logger.getEffectiveLevel()
        enable = "none" if level > logging.CRITICAL else logging.getLevelName(level).lower() + "+"
        return self.entity(f"log/{module}", f"log/{module}", module=module, enable=enable)

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        module = key.removeprefix("log/")
        logger = logging.root.manager.loggerDict.get(module)
        known = module == "DEFAULT" or (module.startswith(ROOT_LOGGER + ".") and isinstance(logger, logging.Logger))
        return self._entity(module) if known else None

    def update(self, agent: ManagementAgent, entity: dict[str, Any], attributes: dict[str, Any], now: float) -> dict[str, Any]:
        unknown = [k for k in attributes if k not in ("enable", "module")]
        if unknown:
            raise ManagementError(400, f"only enable can be changed on a log module (got {unknown})")
        if attributes.get("module", entity["module"]) != entity["module"]:
            raise ManagementError(400, "the module of a log entity cannot be changed")
        if "enable" in attributes:
            level = logging.NOTSET if attributes["enable"] is None else parse_enable(attributes["enable"])
            module = entity["module"]
            logging.getLogger(ROOT_LOGGER if module == "DEFAULT" else module).setLevel(level)
        return self._entity(entity["module"])
