"""Operational entity types, read from the routing core: router, connection, link (router.link),
router.address (the live address table) and router.node (the mesh's routers).

Owns: the attribute names (the anchors' camelCase names where the concept is the same, e.g.
`subscriberCount`, `deliveriesIngress`, `acceptedDeliveries`) and how each is computed from the
core's state, including every counter the core keeps per link and per address.
Must not touch: the core's state (read only), configuration (config_entities.py), logging
(logs.py).

Address keys are shown as the anchors show them (`M0orders` for the mobile address `orders`,
`Lx` for `_local/x`): their tools derive the address class and text from that form.
"""

from __future__ import annotations

import functools
import importlib.machinery
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ..core.links import InLink, OutLink
from ..core.table import AddressEntry
from .model import Attribute, EntityType

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
    return key if key[:1] in ("L", "R", "T") else None  # local, router (mesh), topo (mesh)


def zero_credit_seconds(link: InLink | OutLink, now: float) -> int | None:
    """Seconds since the link's credit dropped to zero (0 while it has credit; null for a link
    that has had no credit since it attached and was never timed)."""
    if link.link.credit > 0:
        return 0
    since = link.zero_credit_since
    return None if since is None else max(0, int(now - since))


def _links(agent: ManagementAgent) -> list[InLink | OutLink]:
    out: list[InLink | OutLink] = []
    for state in agent.core.connections.values():
        out.extend(state.in_links)
        out.extend(state.out_links)
    return sorted(out, key=lambda link: link.id)


def _total(attribute: str, gone: Any, links: Iterable[InLink | OutLink]) -> int:
    return int(getattr(gone, attribute)) + sum(int(getattr(link, attribute)) for link in links)


@functools.cache
def _compiled() -> bool:
    """The hot path runs compiled when the routing core was loaded from an extension module
    (mypyc's output); fixed for the process's life. router/build_info.py gives the same answer
    with the reason, but sits above this layer (tests/test_layering.py)."""
    from ..core import router as core_router

    return (core_router.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class RouterType(EntityType):
    short_name = "router"
    description = "This router: its identity and router-wide counters (deliveries counted where they entered)"
    attributes = (
        Attribute("id", "string", "Router id, unique in the network"),
        Attribute("mode", "string", "standalone, interior or edge"),
        Attribute("version", "string", "Software version"),
        Attribute("compiled", "boolean", "True when the hot path runs compiled (mypyc), false when interpreted"),
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
        "deliveriesIngress: Deliveries received (from clients, and in a mesh from other routers)",
        "deliveriesEgress: Deliveries sent to clients",
        "deliveriesTransit: Deliveries sent to other routers (on the inter-router links up now)",
        "deliveriesFromRouter: Messages the router itself sent (e.g. management replies)",
        "droppedFromRouter: Messages the router itself sent that had no destination",
        "uptimeSeconds: Seconds since the router started",
        "stuckLinkCount: Consumer links stuck now at their unsettled bound (max_unsettled_per_link or _per_connection)",
        "unsettledBoundReached: Times a consumer link or connection reached its unsettled bound",
        "bufferedBytes: Message bytes held for producers (deliveries waiting for consumer credit)",
        "bufferedBudgetBytes: The router-wide budget of those bytes (limits.buffered_budget_bytes)",
        "pausedConnectionCount: Connections not read now because the router holds too much from them",
        "releasedOverBudget: Deliveries released because holding them would pass a byte bound",
    ) + _counters(
        "failedLogins: SASL logins that failed (every listener)",
        "failedLoginsDelayed: Failed logins whose outcome was held back (repeated failures from one host)",
        "failedLoginHosts: Hosts remembered now for their failed logins (bounded)",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        core = agent.core
        states = list(core.connections.values())
        ins = [link for s in states for link in s.in_links]
        outs = [link for s in states for link in s.out_links if link.neighbour is None]
        transit = core.gone_transit.delivered + sum(
            link.delivered for s in states for link in s.out_links if link.neighbour is not None)
        router = agent.config.router
        # Identity = the router id: WD14's `id` (the identity, §4.3.3) and the anchors' `id`
        # attribute then agree.
        yield self.entity(
            router.id, router.id, id=router.id, mode=router.mode, version=_version(), compiled=_compiled(),
            defaultDistribution="balanced", addrCount=len(core.table.entries), linkCount=len(_links(agent)),
            nodeCount=sum(1 for n in agent.entity_type("router.node").entities(agent, now) if n.get("nextHop") != "(self)"),
            connectionCount=sum(1 for s in states if s.opened and not s.closed),
            presettledDeliveries=_total("presettled", core.gone_in, ins),
            droppedPresettledDeliveries=_total("dropped", core.gone_in, ins),
            acceptedDeliveries=_total("accepted", core.gone_in, ins),
            rejectedDeliveries=_total("rejected", core.gone_in, ins),
            releasedDeliveries=_total("released", core.gone_in, ins),
            modifiedDeliveries=_total("modified", core.gone_in, ins),
            deliveriesIngress=_total("delivered", core.gone_in, ins),
            deliveriesEgress=_total("delivered", core.gone_out, outs), deliveriesTransit=transit,
            deliveriesFromRouter=core.forwarder.router_sent, droppedFromRouter=core.forwarder.router_dropped,
            uptimeSeconds=max(0, int(now - agent.started_at)),
            failedLogins=core.logins.failures, failedLoginsDelayed=core.logins.delayed,
            failedLoginHosts=core.logins.hosts,
            stuckLinkCount=core.bounds.stuck_now, unsettledBoundReached=core.bounds.stuck_total,
            bufferedBytes=core.bounds.buffered_total, bufferedBudgetBytes=core.bounds.budget,
            pausedConnectionCount=core.bounds.paused_count(), releasedOverBudget=core.bounds.released_over_budget,
        )  # fmt: skip


class ConnectionType(EntityType):
    short_name = "connection"
    description = "A connection of this router: one a client or router opened (dir in), or a connector's (dir out)"
    attributes = (
        Attribute("container", "string", "The peer's container id"),
        Attribute("host", "string", "The peer's address (host:port)"),
        Attribute("role", "string", "normal, inter-router or edge (the listener's or connector's role)"),
        Attribute("dir", "string", "in: the peer connected to us; out: a connector of ours connected to it"),
        Attribute("protocol", "string", "amqp"),
        Attribute("listener", "string", "Name of the listener that accepted it (dir in)"),
        Attribute("connector", "string", "Name of the connector that opened it (dir out)"),
        Attribute("sasl", "string", "SASL mechanism used (none when SASL was skipped)"),
        Attribute("isAuthenticated", "boolean", "The peer authenticated (a SASL mechanism other than ANONYMOUS)"),
        Attribute("user", "string", "Authenticated user"),
        Attribute("isEncrypted", "boolean", "TLS is in use"),
        Attribute("sslProto", "string", "TLS version (TLSv1.2, TLSv1.3); none without TLS"),
        Attribute("sslCipher", "string", "TLS cipher suite; none without TLS"),
        Attribute("properties", "map", "The peer's connection properties"),
        Attribute("opened", "boolean", "The open handshake completed"),
        Attribute("operStatus", "string", "up or closing"),
        Attribute("adminStatus", "string", "enabled"),
    ) + _counters(
        "uptimeSeconds: Seconds since the peer's open",
        "lastDlvSeconds: Seconds since a transfer last came in or went out on it (null: none yet)",
        "linkCount: Attached links",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for state in sorted(agent.core.connections.values(), key=lambda s: s.id):
            yield self._entity(state, now)

    def _entity(self, state: ConnState, now: float) -> dict[str, Any]:
        engine, remote = state.engine, state.engine.remote_open
        mechanism = state.sasl_mechanism
        properties = {str(k): v for k, v in (remote.properties or {}).items()} if remote is not None else None
        return self.entity(
            str(state.id), f"connection/{state.id}", container=remote.container_id if remote is not None else None,
            host=state.host or None, role=state.role, dir="out" if state.outgoing else "in", protocol="amqp",
            listener=None if state.outgoing else state.listener.name, connector=state.listener.name if state.outgoing else None,
            sasl=mechanism, isAuthenticated=mechanism not in (None, "ANONYMOUS"), user=engine.user,
            isEncrypted=state.tls is not None, sslProto=state.tls.protocol if state.tls is not None else None,
            sslCipher=state.tls.cipher if state.tls is not None else None, properties=properties, opened=state.opened,
            operStatus="closing" if state.closed else "up", adminStatus="enabled",
            # Both are differences of the core's clock (`now` is that clock too): seconds, not
            # timestamps, so they hold whatever the wall clock does.
            uptimeSeconds=max(0, int(now - state.opened_at)) if state.opened_at is not None else 0,
            lastDlvSeconds=max(0, int(now - state.last_delivery)) if state.last_delivery is not None else None,
            linkCount=state.link_count,
        )  # fmt: skip


class LinkType(EntityType):
    short_name = "router.link"
    description = ("A link attached to this router. dir in: a producer sends to the router; out: the router "
                   "sends to a consumer (out-links count no presettled or dropped deliveries)")  # fmt: skip
    attributes = (
        Attribute("linkType", "string", "endpoint (a client's link) or inter-router (a data link between routers)"),
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
        "zeroCreditSeconds: Seconds since its credit dropped to zero (0 while it has credit)",
        "stuckCount: Out: times it reached its unsettled bound",
        "messageSizeHint: In: the message size its credit window is sized by (0: small messages, the full window; none before a first delivery)",
    ) + (Attribute("stuck", "boolean", "Out: at its unsettled bound, sent nothing until it settles some"),)  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for link in _links(agent):
            yield self._entity(link, now)

    def _entity(self, link: InLink | OutLink, now: float) -> dict[str, Any]:
        incoming = isinstance(link, InLink)
        entry = link.entry
        between_routers = (link.peer if isinstance(link, InLink) else link.neighbour) is not None
        attached = link.address if isinstance(link, InLink) else None
        return self.entity(
            str(link.id), link.link.name, linkDir="in" if incoming else "out",
            linkType="inter-router" if between_routers else "endpoint",
            owningAddr=address_key(entry) if entry is not None and not between_routers else None,
            address=attached or (entry.address if entry is not None and not between_routers else None),
            connectionId=link.conn.id,
            operStatus="down" if link.gone else "up", adminStatus="enabled", capacity=link.capacity,
            undeliveredCount=0 if isinstance(link, InLink) else len(link.pending or ()),
            unsettledCount=link.inflight if isinstance(link, InLink) else link.outstanding,
            deliveryCount=link.delivered,
            presettledCount=link.presettled if isinstance(link, InLink) else 0,
            droppedPresettledCount=link.dropped if isinstance(link, InLink) else 0,
            acceptedCount=link.accepted, rejectedCount=link.rejected, releasedCount=link.released,
            modifiedCount=link.modified, creditAvailable=link.link.credit,
            zeroCreditSeconds=zero_credit_seconds(link, now),
            stuck=link.stuck if isinstance(link, OutLink) else False,
            stuckCount=link.stuck_count if isinstance(link, OutLink) else 0,
            messageSizeHint=(link.size_hint if link.size_hint >= 0 else None) if isinstance(link, InLink) else None,
        )  # fmt: skip


class RouterAddressType(EntityType):
    short_name = "router.address"
    description = "An address in this router's address table (live: consumers, producers, counters)"
    attributes = (
        Attribute("key", "string", "Its key: M0<address> mobile, L<address> local, R<router> a router (mesh), T<x> topo"),
        Attribute("address", "string", "The address"),
        Attribute("distribution", "string", "closest, balanced, multicast or unavailable"),
        Attribute("remoteHostRouters", "list", "Routers with consumers of the address"),
    ) + _counters(
        "inProcess: In-process destinations (e.g. the management node)",
        "subscriberCount: Local consumers", "remoteCount: Other routers with consumers",
        "containerCount: Route containers", "producerCount: Local producers (links to the address)",
        "undeliveredCount: Deliveries waiting for consumer credit",
        "unsettledCount: Deliveries sent to its consumers (or towards other routers) without a final outcome yet",
        "creditAvailable: Credit its local consumers give now (summed)",
        "zeroCreditSeconds: Seconds since its last local consumer with credit ran out (0 while one has credit)",
        "deliveriesIngress: Deliveries that arrived for the address",
        "deliveriesEgress: Deliveries sent to local destinations",
        "deliveriesTransit: Deliveries forwarded to other routers",
        "deliveriesToContainer: Deliveries to route containers", "deliveriesFromContainer: From route containers",
        "released: Deliveries released (no destination)", "dropped: Presettled deliveries dropped",
        "expired: Deliveries that expired waiting", "rejected: Deliveries rejected",
        "accepted: Deliveries accepted", "modified: Deliveries modified", "presettled: Deliveries that arrived settled",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        entries = agent.core.table.entries
        for key in sorted(entries):
            yield self._entity(entries[key], now)

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        table = agent.core.table
        ours = table_key(key)
        entry = table.entries.get(ours) if ours is not None else None
        if entry is None and by != "identity":
            entry = table.find(key)  # a plain address as the name
        return self._entity(entry, now) if entry is not None else None

    def _entity(self, e: AddressEntry, now: float) -> dict[str, Any]:
        key = address_key(e)
        return self.entity(
            key, key, key=key, address=e.address, distribution=e.distribution, remoteHostRouters=sorted(e.remote),
            inProcess=int(e.local is not None), subscriberCount=len(e.consumers), remoteCount=len(e.remote),
            containerCount=0, producerCount=len(e.producers), undeliveredCount=len(e.pending),
            unsettledCount=sum(out.outstanding for out in e.consumers) + sum(e.remote_out.values()),
            creditAvailable=sum(out.link.credit for out in e.consumers),
            zeroCreditSeconds=_zero_credit(e, now), deliveriesIngress=e.deliveries_ingress,
            deliveriesEgress=e.deliveries_egress, deliveriesTransit=e.deliveries_transit, deliveriesToContainer=0,
            deliveriesFromContainer=0, released=e.released, dropped=e.dropped, expired=e.expired, rejected=e.rejected,
            accepted=e.accepted, modified=e.modified, presettled=e.presettled,
        )  # fmt: skip


def _zero_credit(e: AddressEntry, now: float) -> int | None:
    """For how long no local consumer of the address has had credit (None without consumers,
    or when the core does not say since when)."""
    if not e.consumers:
        return None
    seconds = [zero_credit_seconds(out, now) for out in e.consumers]
    if 0 in seconds:
        return 0
    known = [s for s in seconds if s is not None]
    return min(known) if len(known) == len(seconds) else None


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
        Attribute("linkCosts", "map", "Its link state with costs: neighbour id -> the cost it configures for that link"),
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        """One entity per other router this router knows (the core's mesh read API)."""
        mesh = agent.core.mesh
        changed = int(agent.core.wall_time(mesh.last_change)) if mesh.last_change is not None else None  # wall clock
        if mesh.node is None:
            return  # standalone: no mesh, no nodes
        states = mesh.link_states()
        # This router first, as the anchors' qdstat -n shows it: next hop "(self)", cost 0,
        # its own link state (so that a client sees every link with both ends' costs).
        me = mesh.me
        yield self.entity(
            me, me, id=me, protocolVersion=1, instance=mesh.node.instance, linkState=sorted(states.get(me, {})),
            nextHop="(self)", validOrigins=[], address=f"_topo/0/{me}/", routerLink=None, cost=0,
            lastTopoChange=changed, index=0, linkCosts=states.get(me, {}),
        )  # fmt: skip
        for index, info in enumerate(mesh.routers(), start=1):
            rid = info["id"]
            yield self.entity(
                rid, rid, id=rid, protocolVersion=1, instance=info["instance"], linkState=info["neighbours"],
                nextHop=info["next_hop"], validOrigins=info["valid_origins"], address=f"_topo/0/{rid}/",
                routerLink=str(info["link"]) if info["link"] is not None else None, cost=info["cost"],
                lastTopoChange=changed, index=index, linkCosts=states.get(rid, {}),
            )  # fmt: skip
