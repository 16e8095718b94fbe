"""How the `topology` CLI draws the network: rich tables and trees, and an optional PNG.

Owns: columns, labels and drawings. Must not touch: asking routers (gather.py), deciding
paths (network.py).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from .network import (
    LINK_ROUTED,
    MOBILE,
    AddressAt,
    AddressInfo,
    Choice,
    Network,
    RouteReach,
    attach_goes,
    route_containers,
)


def _cost(value: int | None) -> str:
    return "?" if value is None else str(value)


def routers_table(network: Network) -> Table:
    table = Table(title=f"Routers in the network (seen from {network.bus})")
    for column in ("router", "reachable", "next hop", "cost", "neighbours", "instance"):
        table.add_column(column)
    for rid, info in sorted(network.routers.items()):
        hop = "(self)" if rid == network.bus else (info.next_hop or "-")
        table.add_row(
            rid, "yes" if info.reachable else "NO", hop, _cost(info.cost),
            ", ".join(sorted(info.link_costs)) or "-", "-" if info.instance is None else str(info.instance),
        )  # fmt: skip
    return table


def links_table(network: Network) -> Table:
    table = Table(title="Inter-router links (cost = the larger of both ends')")
    for column in ("router", "router", "cost", "ends' costs", "state"):
        table.add_column(column)
    for link in network.links():
        state = "up" if link.two_way else "one-way (not used)"
        table.add_row(link.a, link.b, _cost(link.cost), f"{_cost(link.cost_a)} / {_cost(link.cost_b)}", state)
    return table


def tree(network: Network, root: str) -> Tree:
    """The least-cost tree from `root`: each router under the one before it on its path."""
    top = Tree(Text(f"{root} (cost 0)", style="bold"))
    nodes = {root: top}
    routes = network.routes_of(root)
    for dest in sorted(routes, key=lambda d: (routes[d][1], d)):
        try:
            path = network.path(root, dest)
        except LookupError as exc:
            top.add(Text(f"{dest}: {exc}", style="red"))
            continue
        for before, router in zip(path, path[1:]):
            if router not in nodes:
                cost = routes.get(router, ("", None))[1]
                nodes[router] = nodes[before].add(f"{router} (cost {_cost(cost)})")
    unreachable = sorted(set(network.routers) - set(nodes))
    for rid in unreachable:
        top.add(Text(f"{rid}: unreachable", style="red"))
    return top


def routes_table(network: Network, router: str) -> Table:
    info = network.routers.get(router)
    source = "its own answer" if info is not None and info.routes is not None else "computed from link states"
    table = Table(title=f"Routes of {router} ({source})")
    for column in ("destination", "next hop", "cost", "path"):
        table.add_column(column)
    routes = network.routes_of(router)
    for dest in sorted(routes):
        hop, cost = routes[dest]
        try:
            path = " -> ".join(network.path(router, dest))
        except LookupError as exc:
            path = str(exc)
        table.add_row(dest, hop, str(cost), path)
    if info is not None and info.error:
        table.caption = f"{router} did not answer ({info.error}); routes computed from link states"
    return table


def choice_view(choice: Choice) -> RenderableType:
    where = Table(title=f"Routers with consumers for {choice.address!r} (from {choice.source})")
    for column in ("router", "cost", "chosen"):
        where.add_column(column)
    for rid, cost in sorted(choice.candidates.items(), key=lambda item: (item[1], item[0])):
        where.add_row(rid + (" (local)" if rid == choice.source else ""), str(cost), "yes" if rid in choice.chosen else "")
    paths = Tree(Text(f"{choice.source}: {choice.reason}", style="bold"))
    for rid in choice.chosen:
        paths.add(" -> ".join(choice.paths[rid]) + (" (delivered locally)" if rid == choice.source else ""))
    if choice.link_routed is None:
        return Group(where, paths)
    note = Text(f"{choice.address!r} is also link-routed at {choice.source} (link route {choice.link_routed}): a sender "
                f"attached to it there is passed on to a route container; the paths below are those of "
                f"messages sent on an anonymous link with to={choice.address!r}.", style="yellow")  # fmt: skip
    return Group(note, where, paths)


def address_table(address: str, seen: list[tuple[str, AddressInfo | None, str | None]]) -> Table:
    table = Table(title=f"Where {address!r} has consumers")
    for column in ("router", "local consumers", "distribution", "routers with consumers (its view)"):
        table.add_column(column)
    for rid, info, error in seen:
        if error is not None:
            table.add_row(rid, "?", "?", Text(f"no answer: {error}", style="red"))
        elif info is None:
            table.add_row(rid, "0", "-", "-")
        else:
            table.add_row(rid, str(info.local_consumers), info.distribution, ", ".join(sorted(info.remote_routers)) or "-")
    return table


_ATTACHES = {"in": "a sender's", "out": "a receiver's"}
_WHOSE = {("in",): "a sender's attach to it", ("out",): "a receiver's attach to it",
          ("in", "out"): "an attach to it (a sender's or a receiver's)"}  # fmt: skip


def address_view(address: str, seen: list[AddressAt]) -> RenderableType:
    """`topology address`: where the address has consumers (the table as before when no link
    route matches it anywhere) or, when some router link-routes it, what each router does with
    an attach to it, where its route containers are, and the matching routes as each knows them."""
    if not any(at.routes for at in seen):
        return address_table(address, [(at.router, at.info, at.error) for at in seen])
    directions = [d for d in _ATTACHES if any(r.direction == d for at in seen for r in at.routes)]
    routes: dict[tuple[str, str], list[str]] = {}
    for at in seen:
        for r in at.routes:
            configured = routes.setdefault((r.match, r.direction), [])
            if r.kind == "local" and at.router not in configured:
                configured.append(at.router)
    lines = [
        Text(f"{address!r} is link-routed: {_WHOSE[tuple(directions)]} is passed on to a route container by a "
             "router that knows the route, not attached there, and the messages on such a link are not routed by "
             "the mobile address table", style="bold"),
        Text("link route" + ("s" if len(routes) > 1 else "") + ": " + "; ".join(
            f"{match}, {d}" + (f" (configured on {', '.join(on)})" if on else "") for (match, d), on in routes.items())),
    ]  # fmt: skip
    served = route_containers(seen)
    lines.append(Text("route containers connected: " + "; ".join(served)) if served else
                 Text("no route container for it is connected (as the routers that answered see it): a router that "
                      "knows the route refuses an attach to it with amqp:not-found", style="red"))
    shown: list[RenderableType] = [*lines, attach_table(address, seen)]
    if any(at.info is not None for at in seen):
        shown.append(Text(f"The consumers above are the mobile address's: they get only what the address table routes, "
                          f"the messages of senders attached where {address!r} is not link-routed and those sent on an "
                          f"anonymous link with `to` {address!r}"))  # fmt: skip
    return Group(*shown, link_routes_table(address, seen))


def _attach_cell(at: AddressAt, direction: str) -> Text:
    verdict = at.attach(direction)
    if verdict is None:
        return Text(f"no answer: {at.error}", style="red")
    if verdict == MOBILE:
        return Text("attached here (mobile address)")
    row = attach_goes(at.routes, direction)
    if verdict != LINK_ROUTED or row is None:
        return Text("refused: amqp:not-found (no route container reachable)", style="red")
    return Text("passed on " + _towards(row))


def _towards(row: RouteReach) -> str:
    if row.kind == "local":
        return f"to a container here (route {row.route})"
    if row.kind == "edge":
        return f"to edge router {row.served_by}"
    if row.kind == "uplink":
        return f"up the uplink (next hop {row.next_hop}, cost {_cost(row.cost)})"
    return f"towards {row.served_by} (next hop {row.next_hop}, cost {_cost(row.cost)})"


def attach_table(address: str, seen: list[AddressAt]) -> Table:
    table = Table(title=f"What each router does with an attach to {address!r}")
    for column in ("router", "a sender's attach", "a receiver's attach", "local consumers", "routers with consumers (its view)"):
        table.add_column(column)
    for at in seen:
        if at.error is not None:
            table.add_row(at.router, _attach_cell(at, "in"), "?", "?", "?")
        elif at.info is None:
            table.add_row(at.router, _attach_cell(at, "in"), _attach_cell(at, "out"), "0", "-")
        else:
            table.add_row(at.router, _attach_cell(at, "in"), _attach_cell(at, "out"), str(at.info.local_consumers),
                          ", ".join(sorted(at.info.remote_routers)) or "-")  # fmt: skip
    return table


def link_routes_table(address: str, seen: list[AddressAt]) -> Table:
    table = Table(title=f"Link routes matching {address!r}, as each router knows them (router.linkRouteReach)")
    for column in ("router", "route", "dir", "kind", "served by", "containers", "next hop", "cost", "reachable"):
        table.add_column(column)
    for at in seen:
        for r in at.routes:
            containers = "-" if r.containers is None else str(r.containers)
            table.add_row(at.router, r.match, r.direction, r.kind, r.served_by, containers, r.next_hop or "-",
                          "-" if r.cost is None else str(r.cost), "yes" if r.reachable else Text("no", style="red"))  # fmt: skip
        if at.error is None and not at.routes:
            table.add_row(at.router, "-", "-", "-", "none matching here", "-", "-", "-", "-")
    return table


def write_png(network: Network, path: Path) -> None:
    """The router graph as a PNG (networkx + matplotlib; ImportError when matplotlib is missing)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    import networkx as nx

    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(sorted(network.routers))
    for link in network.links():
        if link.two_way:
            graph.add_edge(link.a, link.b, cost=link.cost)
    layout = nx.spring_layout(graph, seed=1)  # fixed seed: the same network draws the same
    figure = plt.figure(figsize=(8, 6))
    colours = ["tab:orange" if n == network.bus else "tab:blue" for n in graph.nodes]
    nx.draw_networkx(graph, layout, node_color=colours, font_color="white", node_size=900)
    nx.draw_networkx_edge_labels(graph, layout, edge_labels=nx.get_edge_attributes(graph, "cost"))
    plt.axis("off")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
