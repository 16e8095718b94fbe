"""`router stat`: a running router's state as tables (like qdstat), or JSON for scripts.

    router stat [general|connections|links|addresses|nodes|memory|vhosts|linkroutes] [-b HOST:PORT]
                [--router ID | --all-routers] [--json] [--limit N]

Owns: the views (which entity type each one queries, which attributes become which columns,
how values read: durations, yes/no, lists; a view may show a second table below its own, as
`linkroutes` shows the routes the router knows under those configured on it), asking one router, a remote one through the mesh
(`_topo/0/<id>/$management`) or all of them (GET-MGMT-NODES, then all at once on the one session,
shown in that order; one that fails is an error line on stderr and exit 1, the others are still
shown), and rendering.
Must not touch: the router's internals; everything goes through the management client.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import trio
import typer
from rich.console import Console
from rich.table import Table

from ..config.patterns import strip_scheme
from ..net.errors import ClientError
from ..net.management_client import ManagementSession
from .common import parse_bus, run_async, stderr
from .login import with_login
from .mgmt import (
    DEFAULT_BUS, DEFAULT_TIMEOUT_S, AsJson, Bus, RouterId, Timeout, router_of, session, target,
    to_json, usage_error,
)  # fmt: skip

# On a terminal tables fit its width; in a pipe rich would assume 80 columns and cut cells
# short, so there they take the width they need.
stdout = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000)


class ViewName(str, Enum):
    general = "general"
    connections = "connections"
    links = "links"
    addresses = "addresses"
    nodes = "nodes"
    memory = "memory"
    vhosts = "vhosts"
    linkroutes = "linkroutes"


@dataclass(frozen=True)
class View:
    type: str
    title: str
    columns: tuple[tuple[str, str], ...]  # (header, attribute)
    single: bool = False  # one entity shown as attribute/value rows
    empty: str = "none"  # what an empty table reads as
    below: View | None = None  # a second table under this one (JSON: a map by entity type)


VIEWS: dict[ViewName, View] = {
    ViewName.general: View("router", "Router Statistics", (
        ("Router Id", "id"), ("Mode", "mode"), ("Version", "version"), ("Compiled", "compiled"),
        ("Uptime", "uptimeSeconds"),
        ("Connections", "connectionCount"), ("Links", "linkCount"), ("Addresses", "addrCount"), ("Nodes", "nodeCount"),
        ("Ingress", "deliveriesIngress"), ("Egress", "deliveriesEgress"), ("Transit", "deliveriesTransit"),
        ("Accepted", "acceptedDeliveries"), ("Rejected", "rejectedDeliveries"), ("Released", "releasedDeliveries"),
        ("Modified", "modifiedDeliveries"), ("Presettled", "presettledDeliveries"),
        ("Dropped Presettled", "droppedPresettledDeliveries"), ("From Router", "deliveriesFromRouter"),
        ("Dropped From Router", "droppedFromRouter"), ("Deliveries to Fallback", "deliveriesRedirectedToFallback"),
        ("Busy Poll (us)", "busyPollUs"), ("Busy Polls Caught", "busyPollCaught"), ("Busy Polls Missed", "busyPollMissed"),
    ), single=True),
    ViewName.connections: View("connection", "Connections", (
        ("id", "identity"), ("host", "host"), ("container", "container"), ("role", "role"), ("proto", "protocol"),
        ("dir", "dir"), ("listener", "listener"), ("sasl", "sasl"), ("user", "user"), ("encrypted", "isEncrypted"),
        ("links", "linkCount"), ("status", "operStatus"), ("blocked", "outputBlocked"), ("shut", "shutWindows"),
        ("last dlv", "lastDlvSeconds"), ("uptime", "uptimeSeconds"),
    )),
    ViewName.links: View("router.link", "Router Links", (
        ("type", "linkType"), ("dir", "linkDir"), ("conn id", "connectionId"), ("id", "identity"),
        ("addr", "address"), ("cap", "capacity"), ("undel", "undeliveredCount"), ("unsett", "unsettledCount"),
        ("deliv", "deliveryCount"), ("presett", "presettledCount"), ("psdrop", "droppedPresettledCount"),
        ("acc", "acceptedCount"), ("rej", "rejectedCount"), ("rel", "releasedCount"), ("mod", "modifiedCount"),
        ("cred", "creditAvailable"), ("oper", "operStatus"),
    )),
    ViewName.addresses: View("router.address", "Router Addresses", (
        ("class", "key"), ("addr", "address"), ("distrib", "distribution"), ("in-proc", "inProcess"),
        ("local", "subscriberCount"), ("remote", "remoteCount"), ("producers", "producerCount"),
        ("undel", "undeliveredCount"), ("in", "deliveriesIngress"), ("out", "deliveriesEgress"),
        ("thru", "deliveriesTransit"), ("fallback", "deliveriesRedirectedToFallback"), ("rel", "released"),
        ("drop", "dropped"), ("rej", "rejected"),
    )),
    ViewName.nodes: View("router.node", "Routers in the Network", (
        ("router-id", "id"), ("next-hop", "nextHop"), ("link", "routerLink"), ("cost", "cost"),
        ("neighbors", "linkState"), ("valid-origins", "validOrigins"),
    ), empty="none (no other router is known: a standalone router, or not in a mesh yet)"),
    ViewName.memory: View("memory", "Memory", (
        ("Resident Memory", "residentMemoryBytes"), ("Virtual Memory", "virtualMemoryBytes"),
        ("Peak Resident Memory", "peakResidentMemoryBytes"),
        ("GC Collections (gen 0/1/2)", "gcCollections"), ("GC Pending (gen 0/1/2)", "gcCounts"),
        ("GC Pauses, s (gen 0/1/2)", "gcPauseSeconds"), ("GC Longest Pause, s (gen 0/1/2)", "gcLongestPauseSeconds"),
        ("Open File Descriptors", "openFds"),
    ), single=True),
    ViewName.vhosts: View("vhostStats", "Vhosts (policy)", (
        ("vhost", "hostname"), ("open", "connectionsCurrent"), ("approved", "connectionsApproved"),
        ("denied", "connectionsDenied"), ("sessions denied", "sessionDenied"), ("senders denied", "senderDenied"),
        ("receivers denied", "receiverDenied"), ("size denied", "maxMessageSizeDenied"),
        ("messages denied", "messagesDenied"), ("per user", "perUserState"), ("per host", "perHostState"),
    ), empty="none (no vhosts: policy is not configured)"),
    ViewName.linkroutes: View("router.config.linkRoute", "Link Routes", (
        ("name", "name"), ("prefix", "prefix"), ("pattern", "pattern"), ("dir", "direction"),
        ("connection", "connection"), ("container", "containerId"), ("add-ext-prefix", "addExternalPrefix"),
        ("del-ext-prefix", "delExternalPrefix"), ("status", "operStatus"), ("links", "routedLinkCount"),
    ), empty="none configured here", below=View("router.linkRouteReach", "Link Routes Known to this Router", (
        ("prefix", "prefix"), ("pattern", "pattern"), ("dir", "direction"), ("served by", "servedBy"),
        ("kind", "kind"), ("route", "route"), ("containers", "containerCount"), ("next hop", "nextHop"),
        ("cost", "cost"), ("reachable", "reachable"),
    ), empty="none (no link route is configured here or served anywhere this router knows of)")),
}  # fmt: skip

# The first character of an address key is its class (the anchors' convention).
ADDRESS_CLASSES = {"L": "local", "M": "mobile", "R": "router", "T": "topo", "A": "area", "C": "link-in", "D": "link-out"}
DURATIONS = {"uptimeSeconds", "lastDlvSeconds"}
SIZES = {"residentMemoryBytes", "virtualMemoryBytes", "peakResidentMemoryBytes"}


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return _text(seconds)
    s = int(seconds)
    days, rest = divmod(s, 86400)
    clock = f"{rest // 3600}:{rest % 3600 // 60:02}:{rest % 60:02}"
    return f"{days}d {clock}" if days else clock


def _size(value: Any) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return _text(value)
    size = float(value)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{value} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(item) for item in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, int):
        return str(int(value))  # AMQP's typed integers (ULong(3)) print as plain numbers
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def cell(attribute: str, value: Any) -> str:
    if attribute in DURATIONS:
        return _duration(value)
    if attribute in SIZES:
        return _size(value)
    if attribute == "key" and isinstance(value, str) and value:
        return ADDRESS_CLASSES.get(value[0], value[0])
    return _text(value)


def _blank(value: Any) -> bool:
    return value is None or value == ""


def render(view: View, data: Any, router_id: str | None, console: Console) -> None:
    title = f"{view.title}" + (f" (router {router_id})" if router_id else "")
    if not data:
        console.print(f"{title}: {view.empty}")  # one line rather than an empty table
        return
    if view.single:
        table = Table("attribute", "value", title=title, title_justify="left")
        shown = set()
        for header, attribute in view.columns:
            if attribute in data:
                table.add_row(header, cell(attribute, data[attribute]))
                shown.add(attribute)
        for attribute, value in data.items():  # whatever else the router reports
            if attribute not in shown and attribute not in ("identity", "name", "type"):
                table.add_row(attribute, cell(attribute, value))
    else:
        # A column no row has a value for says nothing (e.g. the peer's host when the network
        # layer does not report it): left out.
        present = [(h, a) for h, a in view.columns if any(not _blank(row.get(a)) for row in data)]
        table = Table(*(h for h, _ in present), title=title, title_justify="left")
        for row in data:
            table.add_row(*(cell(a, row.get(a)) for _, a in present))
    console.print(table)


async def _fetch(mgmt: ManagementSession, view: View, address: str, limit: int | None) -> Any:
    names, rows = await mgmt.query(view.type, [], count=limit, address=address)
    dicts = [dict(zip(names, row)) for row in rows]
    if view.single:
        return dicts[0] if dicts else {}
    return dicts


async def _fetch_all(mgmt: ManagementSession, view: View, address: str, limit: int | None) -> list[Any]:
    """The view's data and that of each table below it, in that order (asked at once)."""
    tables = _tables(view)
    data: list[Any] = [None] * len(tables)
    failures: list[ClientError] = []

    async def fetch(i: int) -> None:
        try:
            data[i] = await _fetch(mgmt, tables[i], address, limit)
        except ClientError as exc:  # (raised as itself below, not in the nursery's group)
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for i in range(len(tables)):
            nursery.start_soon(fetch, i)
    if failures:
        raise failures[0]
    return data


def _tables(view: View) -> list[View]:
    return [view] + (_tables(view.below) if view.below is not None else [])


def _as_json(view: View, data: list[Any]) -> Any:
    """A view's data for --json: as it is, or with tables below it a map by entity type."""
    return data[0] if view.below is None else {v.type: d for v, d in zip(_tables(view), data)}


async def _targets(mgmt: ManagementSession, router: str | None, all_routers: bool) -> list[tuple[str | None, str]]:
    """(router id to show, or None for the one we are connected to; node address)."""
    if not all_routers:
        return [(router, target(router))]
    local = (await mgmt.query_dicts("router", ["id"]))[:1]
    local_id = str(local[0].get("id")) if local else None
    found: list[tuple[str | None, str]] = [(local_id, target(None))]
    for node in await mgmt.get_mgmt_nodes():
        rid = router_of(node)
        if rid != local_id and all(rid != seen for seen, _ in found):
            found.append((rid, strip_scheme(node)))
    return found


async def _stat(host: str, port: int, name: ViewName, router: str | None, all_routers: bool,
                as_json: bool, limit: int | None, timeout: float) -> int:  # fmt: skip
    view = VIEWS[name]
    results: list[tuple[str | None, list[Any]]] = []
    failed = False
    async with session(host, port, timeout) as mgmt:
        targets = await _targets(mgmt, router, all_routers)
        fetched: list[list[Any] | ClientError] = [[] for _ in targets]

        async def fetch(i: int, address: str) -> None:
            try:
                fetched[i] = await _fetch_all(mgmt, view, address, limit)
            except ClientError as exc:
                fetched[i] = exc

        async with trio.open_nursery() as nursery:  # every router at once, on the one session
            for i, (_, address) in enumerate(targets):
                nursery.start_soon(fetch, i, address)
        for (rid, _), got in zip(targets, fetched):
            if isinstance(got, ClientError):
                if not all_routers:
                    raise got
                # One router that cannot answer (gone since it was listed) must not hide the others.
                stderr.print(f"error: router {rid}: {got}", markup=False)
                failed = True
            else:
                results.append((rid, got))
    if as_json:
        value = {str(rid): _as_json(view, data) for rid, data in results} if all_routers else _as_json(view, results[0][1])
        sys.stdout.write(to_json(value) + "\n")
        sys.stdout.flush()
    else:
        for rid, data in results:
            for table, rows in zip(_tables(view), data):
                render(table, rows, rid if (all_routers or router) else None, stdout)
    return 1 if failed else 0


@with_login
def stat(
    view: Annotated[ViewName, typer.Argument(help="what to show", case_sensitive=False)] = ViewName.general,
    bus: Bus = DEFAULT_BUS,
    router: RouterId = None,
    all_routers: Annotated[bool, typer.Option("--all-routers", help="show every router in the network")] = False,
    as_json: AsJson = False,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="show at most this many rows")] = None,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Show a router's general statistics, connections, links, addresses, nodes, memory, vhosts (policy) or
    link routes (those configured on it, and those it knows with where an attach goes)."""
    if router is not None and all_routers:
        usage_error("give --router or --all-routers, not both")
    host, port = parse_bus(bus)
    raise typer.Exit(run_async(f"{host}:{port}", _stat, host, port, view, router, all_routers, as_json, limit, timeout))
