"""Operational entity types of the routers: router (this one: its identity and router-wide
counters) and router.node (the mesh's routers, this one first), read from the routing core. The
traffic's types (connection, router.link, router.address) are entities.py's.

Owns: their attribute names (the anchors' camelCase names where the concept is the same, e.g.
`deliveriesIngress`, `acceptedDeliveries`, `nextHop`) and how each maps from the core's read
API: frozen snapshots (router.core.coreread, `core.read`; the mesh's half is `core.mesh`,
router.core.meshread), never the core's hot-path records; the software version and whether the
hot path runs compiled.
Must not touch: the core's state (read only), configuration (config_entities.py).
"""

from __future__ import annotations

import functools
import importlib.machinery
from collections.abc import Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .model import Attribute, EntityType, counters

if TYPE_CHECKING:
    from .agent import ManagementAgent


@functools.cache
def _version() -> str:
    """The installed version, read once (from the package's metadata: ~1 ms a read, and the
    router entity is read at every scrape and `router stat`)."""
    try:
        return metadata.version("amqp-mesh-router")
    except metadata.PackageNotFoundError:
        return "unknown"


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
    ) + counters(
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
        "deliveriesRedirectedToFallback: Deliveries sent to fallback destinations (their address had no consumer anywhere)",
    ) + counters(
        "flowRecordsEmitted: Flow records sent to the flow address or written to files (flow section)",
        "flowRecordsDropped: Flow records dropped because the buffer (flow.buffer_records) or the hop samples were full",
    ) + counters(
        "failedLogins: SASL logins that failed (every listener)",
        "failedLoginsDelayed: Failed logins whose outcome was held back (repeated failures from one host)",
        "failedLoginHosts: Hosts remembered now for their failed logins (bounded)",
    ) + (
        Attribute("busyPollUs", "ulong",
                  "Microseconds the router looks for work before it sleeps, in force (router.busy_poll_us; 0: off; "
                  "by default 50 when the router has a CPU of its own, else 0)"),
    ) + counters(
        "busyPollCaught: Busy polls that found work (a wake-up saved)",
        "busyPollMissed: Busy polls that found none (the router slept after all)",
        "busyPollMicroseconds: Time spent busy polling",
    ) + counters(
        "managementReadsRefused: Management reads refused (403) over AMQP",
        "managementWritesRefused: Management writes refused (403) over AMQP",
        "httpReadsRefused: Management reads refused (401 or 403) over HTTP",
        "httpWritesRefused: Management writes refused (401 or 403) over HTTP",
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        t = agent.core.read.totals(now)
        router = agent.config.router
        # The network layer's poller (a control without one, as in tests, shows none).
        busy_poll = getattr(agent.control, "busy_poll_counters", None)
        polls = busy_poll() if busy_poll is not None else {}
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
            deliveriesRedirectedToFallback=t.redirected_to_fallback,
            managementReadsRefused=agent.authz.refusals["amqp-read"],
            managementWritesRefused=agent.authz.refusals["amqp-write"],
            httpReadsRefused=agent.authz.refusals["http-read"], httpWritesRefused=agent.authz.refusals["http-write"],
            busyPollUs=polls.get("in_force_us"), busyPollCaught=polls.get("caught"),
            busyPollMissed=polls.get("missed"), busyPollMicroseconds=polls.get("us"),
        )  # fmt: skip


class NodeType(EntityType):
    """Routers of the mesh, as this router's routing table knows them; an entity's identity is
    its `id` (as for `router`)."""

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
