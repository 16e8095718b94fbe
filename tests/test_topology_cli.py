"""The `topology` CLI: the pure answers (links, paths, choices) from canned management entities,
the drawings, and the command against a real router process (errors are one line, exit 1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from topology.cli import render
from topology.cli.network import AddressAt, AddressInfo, Network, RouterInfo, as_json, attach_goes, choose, link_routed
from topology.cli.network import matching_routes, route_containers

from .support.router_process import RouterProcess, router_env

# A ring  A -1- B -1- C -1- D -5- A  (D's end of D-A says 5, A's says 1: the link costs 5).
RING = {
    "A": {"B": 1, "D": 1},
    "B": {"A": 1, "C": 1},
    "C": {"B": 1, "D": 1},
    "D": {"C": 1, "A": 5},
}


def ring(bus: str = "A") -> Network:
    routers = {rid: RouterInfo(rid, link_costs=dict(peers)) for rid, peers in RING.items()}  # type: ignore[arg-type]
    return Network(bus=bus, routers=routers)


def text(renderable: object) -> str:
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


def test_links_cost_the_larger_end_and_one_way_claims_show() -> None:
    network = ring()
    network.routers["C"].link_costs["X"] = 2  # X never lists C
    network.routers["X"] = RouterInfo("X")
    links = {(link.a, link.b): link for link in network.links()}
    assert links[("A", "D")].cost == 5 and links[("A", "D")].two_way
    assert links[("A", "B")].cost == 1
    assert not links[("C", "X")].two_way and links[("C", "X")].cost == 2
    assert "one-way" in text(render.links_table(network))


def test_paths_follow_each_routers_next_hop() -> None:
    network = ring()
    # Computed from link states (no router answered): A reaches D through B and C (cost 3 < 5).
    assert network.routes_of("A")["D"] == ("B", 3)
    assert network.path("A", "D") == ["A", "B", "C", "D"]
    # A router's own answer wins over the computation.
    network.routers["B"].routes = {"D": ("A", 9), "A": ("A", 1), "C": ("C", 1)}
    with pytest.raises(LookupError, match="routing loop"):
        network.path("A", "D")


def test_closest_picks_the_least_cost_and_explains() -> None:
    network = ring()
    info = AddressInfo("orders", "closest", local_consumers=0, remote_routers=["C", "D"])
    choice = choose(network, "A", info)
    assert choice.candidates == {"C": 2, "D": 3} and choice.chosen == ["C"]
    assert choice.paths["C"] == ["A", "B", "C"] and "least cost 2" in choice.reason
    local = choose(network, "A", AddressInfo("orders", "closest", 1, ["C"]))
    assert local.chosen == ["A"] and local.paths["A"] == ["A"]
    assert "delivered locally" in text(render.choice_view(local))
    assert "link-routed" not in text(render.choice_view(local))
    local.link_routed = "orders: served by C (interior, next hop B, reachable)"
    shown = " ".join(text(render.choice_view(local)).split())
    assert "'orders' is also link-routed at A (link route orders: served by C" in shown
    assert as_json(local)["link_routed"] == local.link_routed


def test_equal_costs_round_robin_and_multicast_takes_all() -> None:
    network = ring("B")
    tie = choose(network, "B", AddressInfo("q", "closest", 0, ["A", "C"]))
    assert tie.chosen == ["A", "C"] and "round robin among 2" in tie.reason
    fan = choose(network, "A", AddressInfo("q", "multicast", 1, ["C", "D"]))
    assert fan.chosen == ["A", "C", "D"]
    balanced = choose(network, "A", AddressInfo("q", "balanced", 0, ["B", "D"]))
    assert balanced.chosen == ["B"] and "outstanding" in balanced.reason


def test_no_consumers_reachable_is_a_lookup_error() -> None:
    network = ring()
    with pytest.raises(LookupError, match="no consumers"):
        choose(network, "A", AddressInfo("q", "closest", 0, ["Z"]))


def test_a_link_routed_address_is_told_with_where_its_attach_goes() -> None:
    rows = [
        {"direction": "in", "prefix": "queue", "servedBy": "C", "kind": "interior", "nextHop": "B", "reachable": True},
        {"direction": "in", "pattern": "*.eu.#", "servedBy": "E", "kind": "edge", "nextHop": "E", "reachable": False},
        {"direction": "out", "prefix": "orders", "servedBy": "local", "kind": "local", "reachable": True},
    ]
    assert link_routed(rows, "queue/x") == "queue: served by C (interior, next hop B, reachable)"
    assert link_routed(rows, "sales.eu") == "*.eu.#: served by E (edge, next hop E, not reachable now)"
    assert link_routed(rows, "queue.eu.1") is not None and ";" in (link_routed(rows, "queue.eu.1") or "")
    for address in ("queues", "orders", "eu", "x.y.eu"):  # no in route: a message address
        assert link_routed(rows, address) is None, address


def test_what_a_router_does_with_an_attach_is_read_from_its_rows() -> None:
    rows = [
        {"direction": "in", "prefix": "queue", "kind": "local", "servedBy": "local", "route": "in:queue",
         "containerCount": 0, "reachable": False},
        {"direction": "in", "prefix": "queue", "kind": "interior", "servedBy": "C", "nextHop": "B", "cost": 2,
         "reachable": True},
        {"direction": "in", "prefix": "queue", "kind": "interior", "servedBy": "D", "nextHop": "B", "cost": 3,
         "reachable": True},
        {"direction": "out", "pattern": "queue.*", "kind": "edge", "servedBy": "E", "nextHop": "E", "reachable": False},
    ]  # fmt: skip
    at = AddressAt("A", routes=matching_routes(rows, "queue.x"))
    assert [(r.direction, r.kind, r.served_by) for r in at.routes] == [
        ("in", "local", "local"), ("in", "interior", "C"), ("in", "interior", "D"), ("out", "edge", "E")]  # fmt: skip
    # No container here: the first reachable router serving it, in the router's order (by cost).
    goes = attach_goes(at.routes, "in")
    assert goes is not None and (goes.served_by, goes.next_hop, goes.cost) == ("C", "B", 2)
    assert (at.attach("in"), at.attach("out")) == ("link-routed", "refused")
    assert AddressAt("A", routes=matching_routes(rows, "queue")).attach("out") == "mobile"  # `*`: one word
    assert AddressAt("A", error="no reply").attach("in") is None
    assert route_containers([at]) == ["edge router E (through A, out)"]
    shown = text(render.address_view("queue.x", [at, AddressAt("B", info=AddressInfo("queue.x", "balanced", 1, []))]))
    assert "passed on towards C (next hop B, cost 2)" in shown and "refused: amqp:not-found" in shown
    assert "attached here (mobile address)" in shown and "anonymous link" in shown
    data = as_json([at])
    assert data[0]["senders"] == "link-routed" and data[0]["link_routes"][1]["served_by"] == "C"
    json.dumps(data)


def test_tree_table_and_json() -> None:
    network = ring()
    network.routers["Z"] = RouterInfo("Z", reachable=False)
    drawing = text(render.tree(network, "A"))
    assert "D (cost 3)" in drawing and "Z: unreachable" in drawing
    assert drawing.index("B (cost 1)") < drawing.index("C (cost 2)") < drawing.index("D (cost 3)")
    table = text(render.routes_table(network, "A"))
    assert "A -> B -> C -> D" in table and "computed from link states" in table
    data = as_json(network.links())
    assert {"a": "A", "b": "D", "cost_a": 1, "cost_b": 5, "cost": 5, "two_way": True} in data
    json.dumps(as_json(network.routers))  # plain JSON all the way down


def test_png_drawing(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "net.png"
    render.write_png(ring(), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _topology(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "topology.cli.main", *args], capture_output=True, text=True, env=router_env(), timeout=60
    )


@pytest.mark.process
def test_against_a_standalone_router(tmp_path: Path) -> None:
    config = {"router": {"id": "solo"}, "listeners": [{"name": "amqp", "port": 0}],
              "link_routes": [{"prefix": "queue", "direction": "in", "connection": "broker"}]}  # fmt: skip
    with RouterProcess.running(tmp_path, config) as router:
        bus = f"127.0.0.1:{router.ports['amqp']}"
        listed = _topology("routers", "-b", bus, "--json")
        assert listed.returncode == 0, listed.stderr
        assert list(json.loads(listed.stdout)) == ["solo"]
        drawn = _topology("links", "-b", bus)
        assert drawn.returncode == 0 and "solo (cost 0)" in drawn.stdout
        missing = _topology("path", "--address", "nowhere", "-b", bus)
        assert missing.returncode == 1 and missing.stdout == ""
        assert missing.stderr.strip().splitlines() == ["error: solo knows no address 'nowhere' (no consumers for it anywhere in the network)"]
        routed = _topology("path", "--address", "queue.x", "-b", bus)
        assert routed.returncode == 1 and routed.stdout == ""
        assert routed.stderr.strip().splitlines() == [
            "error: 'queue.x' is link-routed at solo: a sender's attach to it is passed on to a route container, no "
            "message is routed by address (link route queue: served by local (local, not reachable now))"
        ]
        # A consumer of queue.x (a receiver: no `out` route) makes it a mobile address too: the
        # path is shown, for messages sent on an anonymous link, with the sender's route told.
        from proton.utils import BlockingConnection

        consumer = BlockingConnection(f"amqp://{bus}", timeout=10)
        try:
            consumer.create_receiver("queue.x")
            both = _topology("path", "--address", "queue.x", "-b", bus)
            assert both.returncode == 0, both.stderr
            flat = " ".join(both.stdout.split())
            assert "'queue.x' is also link-routed at solo (link route queue: served by local" in flat
            assert "messages sent on an anonymous link with to='queue.x'" in flat and "delivered locally" in flat
            as_data = json.loads(_topology("path", "--address", "queue.x", "-b", bus, "--json").stdout)
            assert as_data["chosen"] == ["solo"] and as_data["link_routed"].startswith("queue: served by local")
        finally:
            consumer.close()
        # `topology address`: the route is configured here, its container is not connected.
        shown = _topology("address", "queue.x", "-b", bus)
        assert shown.returncode == 0, shown.stderr
        assert "'queue.x' is link-routed" in shown.stdout and "prefix queue, in (configured on solo)" in shown.stdout
        assert "no route container for it is connected" in shown.stdout
        (solo_row,) = [ln for ln in shown.stdout.splitlines() if "refused" in ln]
        assert "solo" in solo_row and "amqp:not-found" in solo_row
        listed = _topology("address", "queue.x", "-b", bus, "--json")
        (view,) = json.loads(listed.stdout)
        assert (view["router"], view["senders"], view["receivers"], view["address"]) == ("solo", "refused", "mobile", None)
        assert [(r["route"], r["kind"], r["containers"], r["reachable"]) for r in view["link_routes"]] == [
            ("in:queue", "local", 0, False)]  # fmt: skip
        nobody = _topology("address", "nowhere", "-b", bus)
        assert nobody.returncode == 1 and nobody.stdout == ""
        assert nobody.stderr.strip().splitlines() == ["error: no router knows the address 'nowhere'"]
        unknown = _topology("routes", "--router", "nosuch", "-b", bus)
        assert unknown.returncode == 1 and "unknown router 'nosuch'" in unknown.stderr
        assert "Traceback" not in unknown.stderr


def test_unreachable_router_is_one_line() -> None:
    result = _topology("routers", "-b", "127.0.0.1:1", "--timeout", "2")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "127.0.0.1:1" in result.stderr
