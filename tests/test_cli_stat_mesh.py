"""`router stat` and `router manage` across a mesh of two `router run` processes (B dials A):
`--router B` asked through A (`_topo/0/B/$management`), `--all-routers`, GET-MGMT-NODES, the
`nodes` view, and the inter-router connection as each side shows it.

Needs a network layer that runs connectors (RouterServer.create_connector); skipped otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from router.net.client import connect
from router.net.management_client import management_session
from router.net.server import RouterServer

from .support.management import ProcessRouter, cli, cli_json, router_with_http

pytestmark = pytest.mark.skipif(not hasattr(RouterServer, "create_connector"),
                                reason="the network layer does not run connectors yet")  # fmt: skip

FAST = {"hello_interval_s": 0.2, "dead_interval_s": 0.8}
CONVERGE_S = 15.0


async def _wait_for_nodes(port: int, expected: set[str]) -> None:
    """Ask A's GET-MGMT-NODES until it lists every router expected (the mesh has no event a
    client can await: HELLOs and link states take a few intervals)."""
    with trio.fail_after(CONVERGE_S):
        async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
            while True:
                nodes = {node.split("/")[-2] for node in await mgmt.get_mgmt_nodes()}
                if nodes >= expected:
                    return
                await trio.sleep(0.1)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ProcessRouter, ProcessRouter]]:
    directory: Path = tmp_path_factory.mktemp("mesh")
    a_listeners = [{"name": "amqp", "host": "127.0.0.1", "port": 0},
                   {"name": "inter", "host": "127.0.0.1", "port": 0, "role": "inter-router"}]  # fmt: skip
    with router_with_http(directory, "A", router={"id": "A", "mode": "interior", **FAST}, listeners=a_listeners) as a:
        connector = {"name": "to-a", "host": "127.0.0.1", "port": a.process.ports["inter"], "role": "inter-router"}
        with router_with_http(directory, "B", router={"id": "B", "mode": "interior", **FAST}, connectors=[connector]) as b:
            trio.run(_wait_for_nodes, a.amqp_port, {"A", "B"})
            yield a, b


def test_nodes_view_and_mgmt_nodes(mesh: tuple[ProcessRouter, ProcessRouter]) -> None:
    a, _ = mesh
    nodes = cli_json("stat", "nodes", "--json", "-b", a.bus)
    # The router itself first (as qdstat -n shows it), then the others.
    assert [(n["id"], n["nextHop"], n["cost"]) for n in nodes] == [("A", "(self)", 0), ("B", "B", 1)]
    assert nodes[0]["linkCosts"] == {"B": 1} and nodes[1]["linkCosts"] == {"A": 1}
    table = cli("stat", "nodes", "-b", a.bus)
    assert table.returncode == 0 and "B" in table.stdout and "none" not in table.stdout
    assert sorted(cli_json("manage", "get-mgmt-nodes", "-b", a.bus)) == [
        "amqp:/_topo/0/A/$management", "amqp:/_topo/0/B/$management"
    ]


def test_a_remote_router_through_the_mesh(mesh: tuple[ProcessRouter, ProcessRouter]) -> None:
    a, _ = mesh
    remote = cli_json("stat", "general", "--json", "--router", "B", "-b", a.bus)
    assert (remote["id"], remote["mode"], remote["nodeCount"]) == ("B", "interior", 1)
    nodes = cli_json("manage", "query", "--type", "router.node", "id", "nextHop", "--router", "B", "-b", a.bus)
    assert nodes == [{"id": "B", "nextHop": "(self)"}, {"id": "A", "nextHop": "A"}]
    table = cli("stat", "general", "--router", "B", "-b", a.bus)
    assert table.returncode == 0 and table.stdout.startswith("Router Statistics (router B)")


def test_all_routers(mesh: tuple[ProcessRouter, ProcessRouter]) -> None:
    a, _ = mesh
    everyone: dict[str, Any] = cli_json("stat", "general", "--json", "--all-routers", "-b", a.bus)
    assert sorted(everyone) == ["A", "B"] and {r["id"] for r in everyone.values()} == {"A", "B"}
    tables = cli("stat", "nodes", "--all-routers", "-b", a.bus)
    assert "Routers in the Network (router A)" in tables.stdout and "Routers in the Network (router B)" in tables.stdout


def test_the_inter_router_connection_from_both_sides(mesh: tuple[ProcessRouter, ProcessRouter]) -> None:
    a, b = mesh
    [into_a] = [c for c in cli_json("stat", "connections", "--json", "-b", a.bus) if c["role"] == "inter-router"]
    assert (into_a["dir"], into_a["container"], into_a["listener"]) == ("in", "B", "inter")
    [from_b] = [c for c in cli_json("stat", "connections", "--json", "-b", b.bus) if c["role"] == "inter-router"]
    assert (from_b["dir"], from_b["container"], from_b["connector"]) == ("out", "A", "to-a")
    [connector] = cli_json("manage", "query", "--type", "connector", "-b", b.bus)
    assert connector["name"] == "to-a" and connector["port"] == a.process.ports["inter"]
    assert connector["connectionStatus"] == "SUCCESS" and connector["saslPassword"] is None


async def _wait_until_gone(port: int, router_id: str) -> None:
    """Ask GET-MGMT-NODES until `router_id` is no longer listed (after the dead interval)."""
    with trio.fail_after(CONVERGE_S):
        async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
            while any(node.split("/")[-2] == router_id for node in await mgmt.get_mgmt_nodes()):
                await trio.sleep(0.1)


def test_a_connector_created_by_management_joins_the_mesh(mesh: tuple[ProcessRouter, ProcessRouter],
                                                          tmp_path: Path) -> None:  # fmt: skip
    a, _ = mesh
    with router_with_http(tmp_path, "C", router={"id": "C", "mode": "interior", **FAST}) as c:
        created = cli_json("manage", "create", "--type", "connector", "name=to-a", "host=127.0.0.1",
                           f"port={a.process.ports['inter']}", "-b", c.bus)  # fmt: skip
        assert created["role"] == "inter-router" and created["identity"] == "connector/to-a"
        trio.run(_wait_for_nodes, a.amqp_port, {"A", "B", "C"})
        assert cli_json("stat", "general", "--json", "--router", "C", "-b", a.bus)["id"] == "C"
        deleted = cli("manage", "delete", "--type", "connector", "--name", "to-a", "-b", c.bus)
        assert deleted.returncode == 0, deleted
        # C's only link to the mesh is gone: A has no path to it, so its node is no longer listed
        # (router.node may still know C, without a next hop).
        trio.run(_wait_until_gone, a.amqp_port, "C")
        assert [n for n in cli_json("stat", "nodes", "--json", "-b", a.bus) if n["id"] == "C" and n["nextHop"]] == []
        assert cli_json("manage", "query", "--type", "connector", "-b", c.bus) == []
        assert [x for x in cli_json("stat", "connections", "--json", "-b", c.bus) if x["role"] != "normal"] == []
