"""`router stat` of a router in front of a broker (in process, the command a subprocess): the
link routes it knows under those configured (`linkroutes`), and deliveries redirected to a
fallback destination (`general`'s "Deliveries to Fallback", `addresses`' fallback column).
A route container (a client on the route-container listener) and a fallback receiver (source
capability qd.fallback) stay attached while the command runs."""

from __future__ import annotations

import json
from typing import Any

import trio

from router.amqp.message import Message
from router.amqp.messaging import Source
from router.config.models import AddressConfig, LinkRouteConfig, Listener
from router.net.client import connect

from .support.management import ManagedRouter, management_config, managed_router
from .support.router_process import router_command, router_env

ROUTES = (
    LinkRouteConfig(prefix="queue", direction="in", connection="broker"),
    LinkRouteConfig(name="eu-out", pattern="queue.*.eu", direction="out", connection="broker"),
    LinkRouteConfig(prefix="spare", direction="in", connection="elsewhere"),  # no such connection
)


async def stat(router: ManagedRouter, *args: str) -> str:
    with trio.fail_after(30):
        result = await trio.run_process(
            router_command("stat", *args, "-b", f"127.0.0.1:{router.amqp_port}"),
            capture_stdout=True, capture_stderr=True, check=False, env=router_env(),
        )  # fmt: skip
    assert result.returncode == 0 and not result.stderr, result
    return str(result.stdout.decode())


def table_rows(out: str, title: str) -> list[list[str]]:
    """The cells of the table under `title` (rich's box drawing: one │-separated line a row)."""
    lines = out.split(title, 1)[1].splitlines()
    rows = []
    for line in lines[3:]:  # top border, header, rule
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


async def test_linkroutes_shows_the_routes_known_and_general_and_addresses_the_fallback() -> None:
    broker = Listener(name="broker", host="127.0.0.1", port=0, role="route-container")
    config = management_config("front").model_copy(update={
        "listeners": (*management_config().listeners, broker), "link_routes": ROUTES,
        "addresses": (AddressConfig(prefix="stored", enable_fallback=True),),
    })  # fmt: skip
    async with managed_router(config) as router:
        broker_port = dict((name, port) for name, _, port in router.server.addresses)["broker"]
        async with connect("127.0.0.1", broker_port), connect("127.0.0.1", router.amqp_port) as client:
            fallback = await client.open_receiver("stored", source=Source(address="stored", capabilities=("qd.fallback",)))
            sender = await client.open_sender("stored")
            tracker = await sender.start_send(Message.value("kept"))
            fallback.accept(await fallback.receive())
            await tracker.wait()
            routes = await stat(router, "linkroutes")
            general = await stat(router, "general")
            addresses = await stat(router, "addresses")
            as_json: dict[str, Any] = json.loads(await stat(router, "linkroutes", "--json"))
    configured = table_rows(routes, "Link Routes\n")
    assert [(r[0], r[-2]) for r in configured] == [("in:queue", "active"), ("eu-out", "active"), ("in:spare", "inactive")]
    known = table_rows(routes, "Link Routes Known to this Router\n")
    assert known == [  # prefix, pattern, dir, served by, kind, route, containers, reachable
        ["queue", "-", "in", "local", "local", "in:queue", "1", "yes"],
        ["-", "queue.*.eu", "out", "local", "local", "eu-out", "1", "yes"],
        ["spare", "-", "in", "local", "local", "in:spare", "0", "no"],
    ]  # (next hop and cost: no row has one, the columns are left out)
    assert list(as_json) == ["router.config.linkRoute", "router.linkRouteReach"]
    assert [r["servedBy"] for r in as_json["router.linkRouteReach"]] == ["local"] * 3
    assert dict(table_rows(general, "Router Statistics\n"))["Deliveries to Fallback"] == "1"
    columns = [c.strip() for c in addresses.splitlines()[2].strip("┃").split("┃")]
    [stored] = [dict(zip(columns, row)) for row in table_rows(addresses, "Router Addresses\n") if row[1] == "stored"]
    assert stored["fallback"] == "1" and stored["in"] == "1" and stored["out"] == "0"
