"""The `router.linkRouteReach` entity (MeshHarness, sans-IO): the link routes each router knows and
where an attach goes from it. Interiors A - B, edge E up to B; a route container for `q` on A
(configured there only) and one for `e` on E. A shows `q` local, B learnt it from A, E through
its uplink; B serves `e` for its edge E, A learnt it from B. A container that goes takes its
route's rows away everywhere but where it is configured."""

from __future__ import annotations

from typing import Any

from router.config.models import LinkRouteConfig, Listener
from router.management import ManagementAgent
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

BROKER = Listener(name="broker", port=5675, role="route-container")
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
