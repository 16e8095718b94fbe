"""Operational entity types, read from the routing core: router, connection, link (router.link),
router.address (the live address table) and router.node (the mesh's routers).

Owns: the attribute names (the anchors' camelCase names where the concept is the same, e.g.
`subscriberCount`, `deliveriesIngress`, `acceptedDeliveries`) and how each maps from the core's
read API: frozen snapshots (router.core.coreread, `core.read`; the mesh's half is `core.mesh`,
router.core.meshread), never the core's hot-path records.
Must not touch: the core's state (read only), configuration (config_entities.py), logging
(logs.py).

Address keys are shown as the anchors show them (`M0orders` for the mobile address `orders`,
`Lx` for `_local/x`): their tools derive the address class and text from that form.
"""

from __future__ import annotations

import functools
import importlib.machinery
from collections.abc import Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .model import Attribute, EntityType

if TYPE_CHECKING:
    from ..core.coreread import AddressSnapshot, ConnectionSnapshot, LinkSnapshot
    from .agent import ManagementAgent


def _counters(*specs: str) -> tuple[Attribute, ...]:
    """Read-only counters from "name: description" specs."""
    return tuple(Attribute(n.strip(), "ulong", d.strip()) for n, _, d in (s.partition(":") for s in specs))


def _version() -> str:
    try:
        return metadata.version("amqp-mesh-router")
    except metadata.PackageNotFoundError:
        return "unknown"


def address_key(key: str) -> str:
    """The anchors' key for an address of table key `key`: `M0<address>` (mobile, phase 0) or
    `L<address>`."""
    return "M0" + key[1:] if key.startswith("M") else key


def table_key(key: str) -> str | None:
    """Our table's key for one in the anchors' form (None if it cannot be one)."""
    if key.startswith("M0"):
        return "M" + key[2:]
    return key if key[:1] in ("L", "R", "T") else None  # local, router (mesh), topo (mesh)


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
        "flowRecordsEmitted: Flow records sent to the flow address or written to files (flow section)",
        "flowRecordsDropped: Flow records dropped because the buffer (flow.buffer_records) or the hop samples were full",
    ) + _counters(
        "failedLogins: SASL logins that failed (every listener)",
        "failedLoginsDelayed: Failed logins whose outcome was held back (repeated failures from one host)",
        "failedLoginHosts: Hosts remembered now for their failed logins (bounded)",
    ) + _counters(
        "managementReadsRefused: Management reads refused (403) over AMQP",
        "managementWritesRefused: Management writes refused (403) over AMQP",
        "httpReadsRefused: Management reads refused (401 or 403) over HTTP",
        "httpWritesRefused: Management writes refused (401 or 403) over HTTP",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        t = agent.core.read.totals(now)
        router = agent.config.router
        # Identity = the router id: WD14's `id` (the identity, §4.3.3) and the anchors' `id`
        # attribute then agree.
        yield self.entity(
            router.id, router.id, id=router.id, mode=router.mode, version=_version(), compiled=_compiled(),
            defaultDistribution="balanced", addrCount=t.addresses, linkCount=t.links,
            nodeCount=sum(1 for n in agent.entity_type("router.node").entities(agent, now) if n.get("nextHop") != "(self)"),
            connectionCount=t.connections, presettledDeliveries=t.presettled,
            droppedPresettledDeliveries=t.dropped_presettled, acceptedDeliveries=t.accepted,
            rejectedDeliveries=t.rejected, releasedDeliveries=t.released, modifiedDeliveries=t.modified,
            deliveriesIngress=t.ingress, deliveriesEgress=t.egress, deliveriesTransit=t.transit,
            deliveriesFromRouter=t.from_router, droppedFromRouter=t.dropped_from_router,
            uptimeSeconds=max(0, int(now - agent.started_at)),
            failedLogins=t.failed_logins, failedLoginsDelayed=t.failed_logins_delayed,
            failedLoginHosts=t.failed_login_hosts,
            stuckLinkCount=t.stuck_links, unsettledBoundReached=t.unsettled_bound_reached,
            bufferedBytes=t.buffered_bytes, bufferedBudgetBytes=t.buffered_budget_bytes,
            pausedConnectionCount=t.paused_connections, releasedOverBudget=t.released_over_budget,
            flowRecordsEmitted=t.flow_records_emitted, flowRecordsDropped=t.flow_records_dropped,
            managementReadsRefused=agent.authz.refusals["amqp-read"],
            managementWritesRefused=agent.authz.refusals["amqp-write"],
            httpReadsRefused=agent.authz.refusals["http-read"], httpWritesRefused=agent.authz.refusals["http-write"],
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
        for snapshot in agent.core.read.connections(now):
            yield self._entity(snapshot)

    def _entity(self, c: ConnectionSnapshot) -> dict[str, Any]:
        mechanism = c.sasl_mechanism
        return self.entity(
            str(c.id), f"connection/{c.id}", container=c.container_id, host=c.host or None, role=c.role,
            dir="out" if c.outgoing else "in", protocol="amqp", listener=None if c.outgoing else c.config_name,
            connector=c.config_name if c.outgoing else None, sasl=mechanism,
            isAuthenticated=mechanism not in (None, "ANONYMOUS"), user=c.user, isEncrypted=c.encrypted,
            sslProto=c.tls_protocol, sslCipher=c.tls_cipher, properties=c.properties, opened=c.opened,
            operStatus="closing" if c.closing else "up", adminStatus="enabled",
            uptimeSeconds=c.uptime_s, lastDlvSeconds=c.last_delivery_s, linkCount=c.link_count,
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
        for snapshot in agent.core.read.links(now):
            yield self._entity(snapshot)

    def _entity(self, link: LinkSnapshot) -> dict[str, Any]:
        return self.entity(
            str(link.id), link.name, linkDir="in" if link.incoming else "out",
            linkType="inter-router" if link.between_routers else "endpoint",
            owningAddr=address_key(link.table_key) if link.table_key is not None else None,
            address=link.address, connectionId=link.connection_id,
            operStatus="up" if link.up else "down", adminStatus="enabled", capacity=link.capacity,
            undeliveredCount=link.undelivered, unsettledCount=link.unsettled, deliveryCount=link.delivered,
            presettledCount=link.presettled, droppedPresettledCount=link.dropped_presettled,
            acceptedCount=link.accepted, rejectedCount=link.rejected, releasedCount=link.released,
            modifiedCount=link.modified, creditAvailable=link.credit, zeroCreditSeconds=link.zero_credit_s,
            stuck=link.stuck, stuckCount=link.stuck_count, messageSizeHint=link.size_hint,
        )  # fmt: skip


class RouterAddressType(EntityType):
    short_name = "router.address"
    description = "An address in this router's address table (live: consumers, producers, counters)"
    attributes = (
        Attribute("key", "string", "Its key: M0<address> mobile, L<address> local, R<router> a router (mesh), T<x> topo"),
        Attribute("address", "string", "The address"),
        Attribute("distribution", "string", "closest, balanced, multicast or unavailable"),
        Attribute("priority", "integer", "The priority an address rule gives its messages on links between routers "
                  "(0-9); -1: each message's header priority, default 4 (as the anchors)"),
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
        for snapshot in agent.core.read.addresses(now):
            yield self._entity(snapshot, agent)

    def find(self, agent: ManagementAgent, key: str, now: float, by: str = "any") -> dict[str, Any] | None:
        # A plain address as the name too, unless asked by identity.
        snapshot = agent.core.read.address(table_key(key), None if by == "identity" else key, now)
        return self._entity(snapshot, agent) if snapshot is not None else None

    def _entity(self, e: AddressSnapshot, agent: ManagementAgent) -> dict[str, Any]:
        key = address_key(e.table_key)
        priority = agent.core.table.priority_for(e.address) if e.table_key[0] == "M" else None
        return self.entity(
            key, key, key=key, address=e.address, distribution=e.distribution,
            priority=priority if priority is not None else -1, remoteHostRouters=list(e.remote_routers),
            inProcess=int(e.in_process), subscriberCount=e.consumers, remoteCount=len(e.remote_routers),
            containerCount=0, producerCount=e.producers, undeliveredCount=e.undelivered,
            unsettledCount=e.unsettled, creditAvailable=e.credit, zeroCreditSeconds=e.zero_credit_s,
            deliveriesIngress=e.ingress, deliveriesEgress=e.egress, deliveriesTransit=e.transit,
            deliveriesToContainer=0, deliveriesFromContainer=0, released=e.released, dropped=e.dropped,
            expired=e.expired, rejected=e.rejected, accepted=e.accepted, modified=e.modified, presettled=e.presettled,
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
