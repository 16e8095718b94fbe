"""Operational entity types of the traffic, read from the routing core: connection, link
(router.link) and router.address (the live address table). The router itself and the mesh's
routers (router, router.node) are router_entities.py's.

Owns: the attribute names (the anchors' camelCase names where the concept is the same, e.g.
`subscriberCount`, `deliveriesIngress`, `acceptedCount`), how each maps from the core's read
API: frozen snapshots (router.core.coreread, `core.read`), never the core's hot-path records;
and the anchors' form of address keys.
Must not touch: the core's state (read only), configuration (config_entities.py), logging
(logs.py).

Address keys are shown as the anchors show them (`M0orders` for the mobile address `orders`,
`Lx` for `_local/x`): their tools derive the address class and text from that form.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .model import Attribute, EntityType, counters

if TYPE_CHECKING:
    from ..core.snapshots import AddressSnapshot, ConnectionSnapshot, LinkSnapshot
    from .agent import ManagementAgent


def address_key(key: str) -> str:
    """The anchors' key for an address of table key `key`: `M0<address>` (mobile, phase 0) or
    `L<address>`."""
    return "M0" + key[1:] if key.startswith("M") else key


def table_key(key: str) -> str | None:
    """Our table's key for one in the anchors' form (None if it cannot be one)."""
    if key.startswith("M0"):
        return "M" + key[2:]
    return key if key[:1] in ("L", "R", "T") else None  # local, router (mesh), topo (mesh)


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
        Attribute("outputBlocked", "boolean",
                  "The router sends it no more deliveries for now: what it was sent has not drained "
                  "(it reads slowly, or keeps its session window closed)"),
    ) + counters(
        "uptimeSeconds: Seconds since the peer's open",
        "lastDlvSeconds: Seconds since a transfer last came in or went out on it (null: none yet)",
        "linkCount: Attached links",
        "sessionCount: Sessions on it (either side's, begun and not yet ended both ways); between routers: the "
        "control link's, one per priority band and streaming link, and those of link-routed pairs",
        "bufferedBytes: Bytes of its deliveries the router holds, waiting for consumer credit",
        "heldFrameBytes: Bytes of later frames of its deliveries held while their consumers' output is blocked",
        "windowHeldBytes: Bytes waiting for it to open its session incoming window",
        "shutWindows: Between routers: its priority bands, streaming links or routed links (each a session) "
        "this router has stopped (session window shut) while it holds too much of them for blocked consumers",
        "peerShutWindows: Between routers: this router's priority bands the peer has stopped",
        "streamingLinks: Between routers: this router's streaming links to the peer (one large message at a time "
        "each), the configured ones and those grown for a burst",
        "streamingLinksReclaimed: Between routers: streaming links grown for a burst of large messages and given "
        "back once idle",
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
            uptimeSeconds=c.uptime_s, lastDlvSeconds=c.last_delivery_s, linkCount=c.link_count, sessionCount=c.session_count,
            outputBlocked=c.output_blocked, bufferedBytes=c.buffered_bytes, heldFrameBytes=c.held_frame_bytes,
            windowHeldBytes=c.window_held_bytes, shutWindows=c.shut_windows, peerShutWindows=c.peer_shut_windows,
            streamingLinks=c.streaming_links, streamingLinksReclaimed=c.streaming_links_reclaimed,
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
    ) + counters(
        "capacity: Credit window", "undeliveredCount: Deliveries waiting for this link's credit",
        "unsettledCount: Deliveries in flight without a final outcome", "deliveryCount: Deliveries transferred",
        "presettledCount: Presettled deliveries", "droppedPresettledCount: Presettled deliveries dropped",
        "acceptedCount: Accepted", "rejectedCount: Rejected", "releasedCount: Released", "modifiedCount: Modified",
        "creditAvailable: Credit the link has now",
        "zeroCreditSeconds: Seconds since its credit dropped to zero (0 while it has credit)",
        "stuckCount: Out: times it reached its unsettled bound",
        "messageSizeHint: In: the message size its credit window is sized by (0: small messages, the full window; none before a first delivery)",
        "maxMessageSize: The max-message-size in force on it (0: none): out, the consumer's (the router sends it no larger message); in, the router's (a larger delivery is refused)",
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
            maxMessageSize=link.max_message_size,
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
    ) + counters(
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
        "deliveriesRedirectedToFallback: Deliveries sent to its fallback destinations (it had no consumer anywhere)",
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
            deliveriesRedirectedToFallback=e.redirected_to_fallback,
        )  # fmt: skip
