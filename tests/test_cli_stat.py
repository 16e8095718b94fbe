"""`router stat` against a real `router run` process: every view as a table and as JSON, the
options that pick a router (`-b`, `--router <own id>` through `_topo/0/<id>/$management`,
`--all-routers`), `--limit`, and the errors a user meets (one line on stderr, non-zero exit).

One router serves the whole module (the checks only read); a client in a thread keeps a
sender and a receiver attached where a view must show them.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from router.cli.run import GC_YOUNG_THRESHOLD
from router.management.agent import ManagementAgent
from router.management.router_entities import NodeType

from .support.management import (
    ProcessRouter, cli, cli_json, live_traffic, managed_router, one_line_error, router_with_http,
)  # fmt: skip
from .support.router_process import router_command, router_env

ROUTER_ID = "stat-router"
VIEWS = ("general", "connections", "links", "addresses", "nodes", "memory", "linkroutes")


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessRouter]:
    link_routes = [{"prefix": "broker", "direction": "in", "connection": "broker", "del_external_prefix": "broker/"}]
    with router_with_http(tmp_path_factory.mktemp("stat"), ROUTER_ID, link_routes=link_routes) as proc:
        yield proc


def stat(router: ProcessRouter, *args: str) -> str:
    result = cli("stat", *args, "-b", router.bus)
    assert result.returncode == 0 and result.stderr == "", result
    return result.stdout


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_as_a_table(router: ProcessRouter, view: str) -> None:
    with live_traffic(router.amqp_port, "stat.table", 2):
        out = stat(router, view)
    title = {"general": "Router Statistics", "connections": "Connections", "links": "Router Links",
             "addresses": "Router Addresses", "nodes": "Routers in the Network", "memory": "Memory",
             "linkroutes": "Link Routes"}[view]  # fmt: skip
    assert out.startswith(title)
    if view == "nodes":  # a standalone router: one clear line, not an empty table
        assert out.splitlines() == [f"{title}: none (no other router is known: a standalone router, or not in a mesh yet)"]
    else:
        assert "┃" in out and "(none)" not in out
    if view == "general":
        assert ROUTER_ID in out and "standalone" in out and "Deliveries to Fallback" in out
    if view == "addresses":
        assert "stat.table" in out and "mobile" in out and "┃ fallback ┃" in out
    if view == "linkroutes":  # configured, no container connected; known here, unreachable
        assert "in:broker" in out and "broker/" in out and "inactive" in out
        known = out.split("Link Routes Known to this Router\n", 1)[1]
        assert "│ broker │" in known and "│ no " in known


def test_general_and_memory_as_json(router: ProcessRouter) -> None:
    general = cli_json("stat", "general", "--json", "-b", router.bus)
    assert (general["id"], general["mode"], general["type"]) == (ROUTER_ID, "standalone", "org.apache.qpid.dispatch.router")
    for counter in ("connectionCount", "linkCount", "addrCount", "deliveriesIngress", "acceptedDeliveries", "uptimeSeconds"):
        assert isinstance(general[counter], int) and general[counter] >= 0, counter
    assert general["connectionCount"] >= 1  # the stat command's own connection
    memory = cli_json("stat", "memory", "--json", "-b", router.bus)
    assert memory["residentMemoryBytes"] > 1_000_000 and memory["openFds"] >= 3
    assert len(memory["gcCollections"]) == 3
    # how long collections held it (router.management.gcpauses): hooked from the start, never negative
    pauses, longest = memory["gcPauseSeconds"], memory["gcLongestPauseSeconds"]
    assert len(pauses) == len(longest) == 3 and all(0 <= most <= total for most, total in zip(longest, pauses))
    # `router run` freezes what start-up loaded and collects young objects less often
    assert memory["gcThresholds"][0] == GC_YOUNG_THRESHOLD and memory["gcFrozenObjects"] > 10_000


def test_connections_links_and_addresses_show_live_traffic(router: ProcessRouter) -> None:
    with live_traffic(router.amqp_port, "stat.orders", 3) as container:
        connections = cli_json("stat", "connections", "--json", "-b", router.bus)
        links = cli_json("stat", "links", "--json", "-b", router.bus)
        addresses = cli_json("stat", "addresses", "--json", "-b", router.bus)
        table = stat(router, "connections")
    [ours] = [c for c in connections if c["container"] == container]
    assert (ours["role"], ours["dir"], ours["listener"], ours["linkCount"], ours["operStatus"]) == ("normal", "in", "amqp", 2, "up")
    # The peer's address is shown when the network layer reports it; a column nobody fills is left out.
    header = "\n".join(table.splitlines()[:4])  # title, border, column names
    assert ("host" in header) == any(c["host"] for c in connections)
    assert all(c["host"].startswith("127.0.0.1:") for c in connections)  # the server tells the core
    assert ours["lastDlvSeconds"] is not None and "last dlv" in header  # it carried deliveries
    assert ours["shutWindows"] == 0 and "shut" in header  # (between routers: bands and streams stopped)
    mine = {link["linkDir"]: link for link in links if link["address"] == "stat.orders"}
    assert mine["in"]["deliveryCount"] == 3 and mine["in"]["acceptedCount"] == 3
    assert mine["out"]["deliveryCount"] == 3 and mine["out"]["acceptedCount"] == 3
    assert mine["in"]["connectionId"] == mine["out"]["connectionId"] == int(ours["identity"])
    [orders] = [a for a in addresses if a["address"] == "stat.orders"]
    assert orders["key"] == "M0stat.orders" and orders["subscriberCount"] == 1 and orders["producerCount"] == 1
    assert (orders["deliveriesIngress"], orders["deliveriesEgress"]) == (3, 3)


def test_nodes_json_is_an_empty_list_and_limit_cuts_rows(router: ProcessRouter) -> None:
    assert cli_json("stat", "nodes", "--json", "-b", router.bus) == []
    with live_traffic(router.amqp_port, "stat.limit", 1):
        everything = cli_json("stat", "addresses", "--json", "-b", router.bus)
        limited = cli_json("stat", "addresses", "--json", "--limit", "2", "-b", router.bus)
    # Rows come in key order; each command has its own reply address (Ltemp.<random>).
    keys = [a["key"] for a in everything]
    assert keys == sorted(keys) and "M0stat.limit" in keys and len(keys) > 2
    assert [a["key"][:5] for a in limited] == [k[:5] for k in keys[:2]] == ["L$man", "Ltemp"]


def test_own_router_through_the_mesh_address_and_all_routers(router: ProcessRouter) -> None:
    # --router ID sends to _topo/0/ID/$management: a router answers for its own id.
    remote = cli_json("stat", "general", "--json", "--router", ROUTER_ID, "-b", router.bus)
    assert remote["id"] == ROUTER_ID
    assert stat(router, "general", "--router", ROUTER_ID).startswith(f"Router Statistics (router {ROUTER_ID})")
    # --all-routers: GET-MGMT-NODES, then each router (only this one here), keyed by router id.
    everyone = cli_json("stat", "general", "--json", "--all-routers", "-b", router.bus)
    assert list(everyone) == [ROUTER_ID] and everyone[ROUTER_ID]["id"] == ROUTER_ID
    assert stat(router, "nodes", "--all-routers").startswith(f"Routers in the Network (router {ROUTER_ID}): none")


def test_errors_are_one_line(router: ProcessRouter, tmp_path: Path) -> None:
    unknown = one_line_error(cli("stat", "--router", "nowhere", "-b", router.bus))
    assert unknown == f"error: {router.bus}: no management node at _topo/0/nowhere/$management (is the router id right?)"
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    refused = one_line_error(cli("stat", "-b", f"127.0.0.1:{closed}"))
    assert refused == f"error: cannot connect to 127.0.0.1:{closed}: Connection refused"
    both = one_line_error(cli("stat", "--router", "x", "--all-routers", "-b", router.bus), code=2)
    assert both == "error: give --router or --all-routers, not both"


async def test_all_routers_reports_a_router_that_cannot_answer_and_shows_the_rest() -> None:
    class Nodes(NodeType):  # a router the mesh lists with a path, whose node cannot be reached
        def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
            yield self.entity("ghost", "ghost", id="ghost", nextHop="ghost", cost=1)

    async with managed_router() as router:
        router.server.agent.register(Nodes())
        with trio.fail_after(30):
            result = await trio.run_process(
                router_command("stat", "general", "--all-routers", "--json", "-b", f"127.0.0.1:{router.amqp_port}"),
                capture_stdout=True, capture_stderr=True, check=False, env=router_env(),
            )  # fmt: skip
    assert result.returncode == 1
    assert list(json.loads(result.stdout)) == [router.id]
    assert result.stderr.decode().splitlines() == [
        "error: router ghost: no management node at _topo/0/ghost/$management (is the router id right?)"
    ]
