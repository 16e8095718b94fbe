"""`topology address` in a mesh of whole RouterServers on memory streams (router.testing.memrouter,
virtual time), asked through C's management as the command asks: interiors A - B - C, link routes
for `queue` (in and out) configured on A only, its route container connecting to A's `broker`
listener. With the container connected every router passes an attach to `queue.orders` on
towards A; without it, A refuses it and B and C (which learnt no route) attach it as a mobile
address; an address no route matches is shown as before (where it has consumers)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from rich.console import Console

from router.cli.mgmt import to_json
from router.config.models import Connector, LinkRouteConfig, Listener, RouterConfig, RouterSection
from router.net.management_client import ManagementSession, management_session
from router.testing.memrouter import MemNetwork, MemRouter
from topology.cli.main import Failed, address_answer
from topology.cli.network import as_json

ROUTES = (LinkRouteConfig(prefix="queue", direction="in", connection="broker"),
          LinkRouteConfig(prefix="queue", direction="out", connection="broker"))  # fmt: skip


def interior(name: str, *connectors: Connector, link_routes: tuple[LinkRouteConfig, ...] = ()) -> RouterConfig:
    listeners = [Listener(name="amqp", port=0), Listener(name="ir", port=0, role="inter-router")]
    if link_routes:
        listeners.append(Listener(name="broker", port=0, role="route-container"))
    return RouterConfig(router=RouterSection(id=name, mode="interior"), listeners=tuple(listeners),
                        connectors=connectors, link_routes=link_routes)  # fmt: skip


def to(router: MemRouter) -> Connector:
    return Connector(name=f"to-{router.core.mesh.me}", host="127.0.0.1", port=router.port("ir"), role="inter-router")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Until `condition()` holds: mesh state that no event announces (polled in virtual time,
    where the wait costs nothing)."""
    with trio.move_on_after(30):
        while not condition():
            await trio.sleep(0.1)
        return
    raise AssertionError(f"not within 30 s: {what}")


async def line(mem_network: MemNetwork) -> tuple[MemRouter, MemRouter, MemRouter]:
    a = await mem_network.start(interior("A", link_routes=ROUTES))
    b = await mem_network.start(interior("B", to(a)))
    c = await mem_network.start(interior("C", to(b)))
    await until(lambda: "C" in a.core.mesh.routes.next_hops and "A" in c.core.mesh.routes.next_hops, "converged")
    return a, b, c


@asynccontextmanager
async def asking(router: MemRouter) -> AsyncIterator[ManagementSession]:
    async with router.connect() as client, management_session(client) as mgmt:
        yield mgmt


def learnt(router: MemRouter) -> bool:
    return len(router.core.link_routes.remote.routes) == 2  # queue in and out, from A


def text(renderable: object) -> str:
    console = Console(record=True, width=250)
    console.print(renderable)
    return console.export_text()


def rows_of(table_text: str, router: str) -> list[str]:
    return [ln for ln in table_text.splitlines() if ln.startswith(f"│ {router} ")]


async def test_a_link_routed_address_names_the_route_and_where_its_container_is(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, b, c = await line(mem_network)
    async with a.connect("broker", container_id="broker-1"):
        await until(lambda: learnt(b) and learnt(c), "the route advertised")
        async with asking(c) as mgmt:
            seen, view = await address_answer(mgmt, "queue.orders")
    shown = text(view)
    assert "'queue.orders' is link-routed" in shown and "not routed by the mobile address table" in shown
    assert "link routes: prefix queue, in (configured on A); prefix queue, out (configured on A)" in shown
    assert "route containers connected: A (route in:queue, 1 container; route out:queue, 1 container)" in shown
    verdicts = text(view).split("Link routes matching")[0]
    assert "passed on to a container here (route in:queue)" in rows_of(verdicts, "A")[0]
    assert "passed on towards A (next hop A, cost 1)" in rows_of(verdicts, "B")[0]
    assert "passed on towards A (next hop B, cost 2)" in rows_of(verdicts, "C")[0]
    data = json.loads(to_json(as_json(seen)))
    assert [(r["router"], r["senders"], r["receivers"], r["address"], r["error"]) for r in data] == [
        ("A", "link-routed", "link-routed", None, None),
        ("B", "link-routed", "link-routed", None, None),
        ("C", "link-routed", "link-routed", None, None),
    ]
    assert data[2]["link_routes"][0] == {
        "direction": "in", "prefix": "queue", "pattern": None, "kind": "interior", "served_by": "A", "route": None,
        "containers": None, "next_hop": "B", "cost": 2, "reachable": True,
    }  # fmt: skip
    assert [(r["kind"], r["route"], r["containers"]) for r in data[0]["link_routes"]] == [
        ("local", "in:queue", 1), ("local", "out:queue", 1)]  # fmt: skip


async def test_a_route_without_its_container_is_refused_where_configured_and_mobile_elsewhere(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, b, c = await line(mem_network)
    async with asking(c) as mgmt:
        seen, view = await address_answer(mgmt, "queue.orders")
    shown = text(view)
    assert "'queue.orders' is link-routed" in shown and "(configured on A)" in shown
    assert "no route container for it is connected" in shown
    verdicts = shown.split("Link routes matching")[0]
    assert "refused: amqp:not-found" in rows_of(verdicts, "A")[0]
    for rid in ("B", "C"):  # the route is advertised only while a container is connected
        assert "attached here (mobile address)" in rows_of(verdicts, rid)[0]
    assert [(at.router, at.attach("in"), at.attach("out")) for at in seen] == [
        ("A", "refused", "refused"), ("B", "mobile", "mobile"), ("C", "mobile", "mobile")]  # fmt: skip
    details = shown.split("Link routes matching")[1]
    assert "local" in rows_of(details, "A")[0] and "no" in rows_of(details, "A")[0].split("│")[-2]


async def test_a_mobile_consumer_of_a_link_routed_address_gets_only_what_the_table_routes(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    # A receiver on C attaches while C knows no route (a mobile consumer); then the container
    # connects at A: new attaches anywhere are link-routed, the consumer stays a mobile one.
    a, b, c = await line(mem_network)
    async with c.connect() as consumer:
        await consumer.open_receiver("queue.orders", credit=10)
        await until(lambda: a.core.table.find("queue.orders") is not None, "the consumer advertised")
        async with a.connect("broker", container_id="broker-1"):
            await until(lambda: learnt(b) and learnt(c), "the route advertised")
            async with asking(b) as mgmt:
                seen, view = await address_answer(mgmt, "queue.orders")
    by_router = {at.router: at for at in seen}
    assert by_router["C"].info is not None and by_router["C"].info.local_consumers == 1
    assert [at.attach("in") for at in seen] == ["link-routed"] * 3
    shown = text(view)
    assert "passed on towards A" in rows_of(shown.split("Link routes matching")[0], "C")[0]
    assert "anonymous link" in shown  # who reaches the mobile consumers


async def test_an_address_no_route_matches_is_shown_as_before(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, _, c = await line(mem_network)
    async with c.connect() as consumer:
        await consumer.open_receiver("orders", credit=10)
        await until(lambda: a.core.table.find("orders") is not None, "the consumer advertised")
        async with asking(a) as mgmt:
            seen, view = await address_answer(mgmt, "orders")
            with pytest.raises(Failed, match="^no router knows the address 'nowhere'$"):
                await address_answer(mgmt, "nowhere")
    shown = text(view)
    assert "Where 'orders' has consumers" in shown and "link-routed" not in shown
    assert rows_of(shown, "C")[0].split("│")[2].strip() == "1"  # local consumers on C
    assert [(at.router, at.routes, at.attach("in")) for at in seen] == [("A", [], "mobile"), ("B", [], "mobile"),
                                                                        ("C", [], "mobile")]  # fmt: skip
