"""The `router.linkRouteReach` entity (MeshHarness, sans-IO): the link routes each router knows and
where an attach goes from it. Interiors A - B, edge E up to B; a route container for `q` on A
(configured there only) and one for `e` on E. A shows `q` local, B learnt it from A, E through
its uplink; B serves `e` for its edge E, A learnt it from B. A container that goes takes its
route's rows away everywhere but where it is configured."""

from __future__ import annotations

from typing import Any

from router.amqp import errors as E
from router.amqp import events as ev
from router.config.models import LinkRouteConfig, Listener
from router.management import ManagementAgent
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client
from topology.cli.network import AddressAt, attach_goes, matching_routes

BROKER = Listener(name="broker", port=5675, role="route-container")
BROKER2 = Listener(name="broker2", port=5676, role="route-container")
SHOWN = ["direction", "prefix", "kind", "servedBy", "route", "containerCount", "nextHop", "cost", "reachable"]


def mesh() -> tuple[MeshHarness, Client, Client]:
    h = MeshHarness()
    h.router("A", listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKER),
             link_routes=(LinkRouteConfig(prefix="q", direction="in", connection="broker"),))  # fmt: skip
    h.router("B")
    h.router("E", mode="edge", listeners=(CLIENTS, BROKER),
             link_routes=(LinkRouteConfig(name="edge-e", prefix="e", direction="out", connection="broker"),))  # fmt: skip
    h.link("A", "B")
    h.uplink("E", "B")
    on_a, on_e = h.client("A", "broker-a", listener=BROKER), h.client("E", "broker-e", listener=BROKER)
    h.converge()
    h.advance(0.5)
    return h, on_a, on_e


def rows(h: MeshHarness, rid: str, **query: Any) -> list[dict[str, Any]]:
    core = h.cores[rid]
    names, values = ManagementAgent(core, core.config).query("router.linkRouteReach", SHOWN, **query)
    return [dict(zip(names, row)) for row in values]


def row(direction: str, prefix: str, kind: str, served_by: str, next_hop: str | None = None, cost: int | None = None,
        reachable: bool = True, route: str | None = None, containers: int | None = None) -> dict[str, Any]:  # fmt: skip
    return {"direction": direction, "prefix": prefix, "kind": kind, "servedBy": served_by, "route": route,
            "containerCount": containers, "nextHop": next_hop, "cost": cost, "reachable": reachable}  # fmt: skip


def test_each_router_shows_where_each_route_is_served() -> None:
    h, _, _ = mesh()
    assert rows(h, "A") == [
        row("out", "e", "interior", "B", next_hop="B", cost=1),  # B serves E's route for the mesh
        row("in", "q", "local", "local", route="in:q", containers=1),
    ]
    assert rows(h, "B") == [
        row("out", "e", "edge", "E", next_hop="E"),
        row("in", "q", "interior", "A", next_hop="A", cost=1),
    ]
    assert rows(h, "E") == [  # its own route is local; the mesh's come through the uplink
        row("out", "e", "local", "local", route="edge-e", containers=1),
        row("in", "q", "uplink", "uplink", next_hop="B", cost=1),
    ]
    entity = ManagementAgent(h.cores["B"], h.cores["B"].config).read("router.linkRouteReach", name="in:prefix:q@A")
    assert entity["identity"] == "linkRouteReach/in:prefix:q@A" and entity["pattern"] is None
    assert rows(h, "B", offset=1, count=5) == rows(h, "B")[1:]  # paged like any listing


def test_a_container_going_takes_its_rows_away() -> None:
    h, on_a, on_e = mesh()
    h.cut(next(w for w in h.wires if w.a_client is on_e))
    h.advance(1.0)
    assert rows(h, "E") == [row("out", "e", "local", "local", route="edge-e", containers=0, reachable=False),
                            row("in", "q", "uplink", "uplink", next_hop="B", cost=1)]  # fmt: skip
    assert [(r["prefix"], r["kind"]) for r in rows(h, "B")] == [("q", "interior")]  # e: gone from B and A
    assert [(r["prefix"], r["kind"]) for r in rows(h, "A")] == [("q", "local")]
    h.cut(next(w for w in h.wires if w.a_client is on_a))
    h.advance(1.0)
    assert rows(h, "A") == [row("in", "q", "local", "local", route="in:q", containers=0, reachable=False)]
    assert rows(h, "B") == []
    assert rows(h, "E") == [row("out", "e", "local", "local", route="edge-e", containers=0, reachable=False)]


def test_an_edge_without_its_uplink_keeps_the_mesh_routes_unreachable() -> None:
    h, _, _ = mesh()
    h.cut(h.wire_between("E", "B"))
    h.advance(1.0)
    assert rows(h, "E")[1] == row("in", "q", "uplink", "uplink", reachable=False)
    assert [r["kind"] for r in rows(h, "B")] == ["interior"]  # E's route went with it


def attaches(client: Client) -> int:
    return sum(1 for e in client.events if isinstance(e, ev.RemoteAttach))


def test_the_topology_cli_reads_the_rows_as_the_router_decides() -> None:
    # `topology address` says what a router does with an attach from its rows
    # (topology.cli.network.attach_goes); the router decides in router.core.linkroute. On A the
    # prefix `queue` (no container) is more specific than the pattern `queue.*` (container
    # connected): A tries only the prefix's containers here, then routers serving it (B).
    h = MeshHarness()
    h.router("A", listeners=(CLIENTS, INTER_ROUTER, BROKER, BROKER2), link_routes=(
        LinkRouteConfig(prefix="queue", direction="in", connection="broker"),
        LinkRouteConfig(pattern="queue.*", direction="in", connection="broker2")))  # fmt: skip
    h.router("B", listeners=(CLIENTS, INTER_ROUTER, BROKER),
             link_routes=(LinkRouteConfig(prefix="queue", direction="in", connection="broker"),))  # fmt: skip
    h.link("A", "B")
    on_a, on_b = h.client("A", "broker2-a", listener=BROKER2), h.client("B", "broker-b", listener=BROKER)
    client = h.client("A", "client")
    h.converge()

    def reading(address: str) -> AddressAt:  # every attribute, as the CLI asks for them
        names, values = ManagementAgent(h.cores["A"], h.cores["A"].config).query("router.linkRouteReach")
        return AddressAt("A", routes=matching_routes([dict(zip(names, row)) for row in values], address))

    at = reading("queue.x")
    assert at.attach("in") == "link-routed" and at.attach("out") == "mobile"
    goes = attach_goes(at.routes, "in")
    assert goes is not None and (goes.kind, goes.served_by, goes.next_hop) == ("interior", "B", "B")
    client.sender("queue.x")
    h.pump()
    assert (attaches(on_a), attaches(on_b)) == (0, 1)  # B's container, not the pattern's on A

    h.cut(next(w for w in h.wires if w.a_client is on_b))  # B's container goes: B's rows go too
    h.advance(1.0)
    assert reading("queue.x").attach("in") == "refused"
    client.sender("queue.y")
    h.pump()
    refusal = [e for e in client.events if isinstance(e, ev.RemoteDetach)][-1]
    assert refusal.error is not None and refusal.error.condition == E.NOT_FOUND and attaches(on_a) == 0

    assert reading("other").attach("in") == "mobile" and not reading("other").routes
