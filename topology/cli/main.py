"""The `topology` command: the router network as any one router sees it, over AMQP management.

    topology routers [-b HOST:PORT] [--json]          routers, reachability, next hop, cost
    topology links                                    links and their costs, and the tree
    topology routes [--router ID | --all]             next hops and costs of a router
    topology path --address orders [--from ID]        where a message would go, by which path, why
                                                      (or that the address is link-routed there)
    topology address orders                           which routers have consumers for an address
                                                      (or which link-route it, and to what)
    topology graph [--png FILE]                       the least-cost tree (and a drawing)
    topology watch [--interval S]                     a live view of routers and links
    topology analyse / report / costs                 the flow-record pipeline (analytics_commands.py)

Every command connects to one router (-b, as `router stat` does) and reaches the others through
the mesh (`_topo/0/<id>/$management`). Failures are one line on stderr with a non-zero exit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import trio
import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live

from router.cli.common import parse_bus, run_async, stderr
from router.cli.login import with_login
from router.cli.mgmt import DEFAULT_BUS, DEFAULT_TIMEOUT_S, AsJson, Bus, Timeout, session, to_json
from router.net.management_client import ManagementSession

from . import analytics_commands, render
from .gather import address_at, address_everywhere, gather, link_routes_at
from .network import AddressAt, Network, as_json, choose, link_routed

app = typer.Typer(
    name="topology",
    help="Show the router network: routers, links, costs, routes and the path a message takes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
stdout = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000)
analytics_commands.register(app, stdout)
From = Annotated[str | None, typer.Option("--from", "-f", help="the router the message enters at (default: the bus router)")]


class Failed(Exception):
    """A question the network cannot answer (unknown router or address): one line, exit 1."""


def _run(bus: str, fn: Any, *args: Any) -> None:
    host, port = parse_bus(bus)
    raise typer.Exit(run_async(f"{host}:{port}", _guarded, fn, host, port, *args))


async def _guarded(fn: Any, *args: Any) -> int:
    try:
        await fn(*args)
    except Failed as exc:
        stderr.print(f"error: {exc}", markup=False)
        return 1
    return 0


def _print(as_json_output: bool, data: Any, *renderables: Any) -> None:
    if as_json_output:
        stdout.print(to_json(as_json(data)), markup=False, highlight=False)
    else:
        for renderable in renderables:
            stdout.print(renderable)


async def _network(host: str, port: int, timeout: float, *, each_router: bool = True) -> Network:
    """The network as the router at host:port sees it (and each router itself, by default)."""
    async with session(host, port, timeout) as mgmt:
        return await gather(mgmt, each_router=each_router)


def _known(network: Network, router: str) -> str:
    if router not in network.routers:
        raise Failed(f"unknown router {router!r}; the network has: {', '.join(sorted(network.routers))}")
    return router


@app.command()
@with_login
def routers(bus: Bus = DEFAULT_BUS, json: AsJson = False, timeout: Timeout = DEFAULT_TIMEOUT_S) -> None:
    """The routers in the network: reachable or not, next hop and cost from the bus router."""

    async def go(host: str, port: int) -> None:
        network = await _network(host, port, timeout, each_router=False)
        _print(json, network.routers, render.routers_table(network))

    _run(bus, go)


@app.command()
@with_login
def links(bus: Bus = DEFAULT_BUS, json: AsJson = False, timeout: Timeout = DEFAULT_TIMEOUT_S) -> None:
    """The inter-router links with their costs, and the least-cost tree from the bus router."""

    async def go(host: str, port: int) -> None:
        network = await _network(host, port, timeout)
        _print(json, network.links(), render.links_table(network), render.tree(network, network.bus))

    _run(bus, go)


@app.command()
@with_login
def routes(
    bus: Bus = DEFAULT_BUS,
    router: Annotated[str | None, typer.Option("--router", "-r", help="whose routes (default: the bus router)")] = None,
    all_routers: Annotated[bool, typer.Option("--all", help="every router's routes")] = False,
    json: AsJson = False,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Next hops and costs of a router (each router answers for itself)."""

    async def go(host: str, port: int) -> None:
        network = await _network(host, port, timeout)
        names = sorted(network.routers) if all_routers else [_known(network, router or network.bus)]
        data = {name: {d: {"next_hop": h, "cost": c} for d, (h, c) in network.routes_of(name).items()} for name in names}
        _print(json, data, *(render.routes_table(network, name) for name in names))

    _run(bus, go)


@app.command()
@with_login
def path(
    address: Annotated[str, typer.Option("--address", "-a", help="the address the message is sent to")],
    source: From = None,
    bus: Bus = DEFAULT_BUS,
    json: AsJson = False,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Where a message to ADDRESS entering at a router would go, by which path, and why."""

    async def go(host: str, port: int) -> None:
        async with session(host, port, timeout) as mgmt:
            network = await gather(mgmt)
            start = _known(network, source or network.bus)
            info = await address_at(mgmt, start, address, bus=network.bus)
            # (asked even when the address has consumers: a sender's attach takes the route)
            routed = link_routed(await link_routes_at(mgmt, start, bus=network.bus), address)
        if routed is not None and info is None:
            raise Failed(f"{address!r} is link-routed at {start}: a sender's attach to it is passed on to a route "
                         f"container, no message is routed by address (link route {routed})")  # fmt: skip
        if info is None:
            raise Failed(f"{start} knows no address {address!r} (no consumers for it anywhere in the network)")
        try:
            choice = choose(network, start, info)
        except LookupError as exc:
            raise Failed(str(exc)) from None
        choice.link_routed = routed
        _print(json, choice, render.choice_view(choice))

    _run(bus, go)


async def address_answer(mgmt: ManagementSession, name: str) -> tuple[list[AddressAt], RenderableType]:
    """What `topology address NAME` shows, asked through `mgmt`: each router's view of the
    address (its data for --json) and the view drawn. Failed when no router has consumers for it
    and no link route matches it anywhere."""
    network = await gather(mgmt, each_router=False)
    seen = await address_everywhere(mgmt, network, name)
    if all(at.info is None and at.error is None and not at.routes for at in seen):
        raise Failed(f"no router knows the address {name!r}")
    return seen, render.address_view(name, seen)


@app.command()
@with_login
def address(
    name: Annotated[str, typer.Argument(help="the address")],
    bus: Bus = DEFAULT_BUS,
    json: AsJson = False,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Which routers have consumers for an address, as each router sees it; or, when a link
    route matches it, what each router does with an attach to it and where its route containers are."""

    async def go(host: str, port: int) -> None:
        async with session(host, port, timeout) as mgmt:
            data, view = await address_answer(mgmt, name)
        _print(json, data, view)

    _run(bus, go)


@app.command()
@with_login
def graph(
    bus: Bus = DEFAULT_BUS,
    source: From = None,
    png: Annotated[Path | None, typer.Option("--png", help="also draw the graph into this PNG file")] = None,
    json: AsJson = False,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """The least-cost tree from a router, and optionally a PNG drawing of the whole graph."""

    async def go(host: str, port: int) -> None:
        network = await _network(host, port, timeout)
        root = _known(network, source or network.bus)
        if png is not None:
            try:
                render.write_png(network, png)
            except ImportError:
                raise Failed("drawing a PNG needs matplotlib: pip install matplotlib") from None
        data = {"root": root, "links": network.links(), "paths": {d: network.path(root, d) for d in network.routes_of(root)}}
        _print(json, data, render.tree(network, root), *([f"wrote {png}"] if png is not None else []))

    _run(bus, go)


@app.command()
@with_login
def watch(
    bus: Bus = DEFAULT_BUS,
    interval: Annotated[float, typer.Option("--interval", "-i", min=0.2, help="seconds between refreshes")] = 2.0,
    count: Annotated[int | None, typer.Option("--count", "-n", min=1, help="stop after this many refreshes")] = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """A live view of the routers and links, refreshed until Ctrl-C."""

    async def go(host: str, port: int) -> None:
        async with session(host, port, timeout) as mgmt:
            with Live(console=stdout, auto_refresh=False) as live:
                done = 0
                while count is None or done < count:
                    network = await gather(mgmt)
                    view = Group(render.routers_table(network), render.links_table(network), render.tree(network, network.bus))
                    live.update(view, refresh=True)
                    done += 1
                    if count is None or done < count:
                        await trio.sleep(interval)

    try:
        _run(bus, go)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        raise typer.Exit(0) from None


if __name__ == "__main__":
    app()
