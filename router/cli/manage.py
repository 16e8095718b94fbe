"""`router manage`: generic management operations on a router, JSON in and out (like qdmanage).

    router manage query --type address [ATTR...]
    router manage read --type listener --name amqp
    router manage create --type address prefix=orders distribution=closest   (or --stdin JSON)
    router manage update --type log --name ROUTER enable=debug+
    router manage delete --type address --name orders
    router manage get-types [TYPE] | get-attributes [TYPE] | get-operations [TYPE] | get-mgmt-nodes

Owns: the verbs, their options and their output (JSON on stdout; one error line on stderr and a
non-zero exit when the router is unreachable or answers with a non-2xx status).
Must not touch: the router's internals; everything goes through the management client.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from .common import parse_bus, run_async
from .login import with_login
from .mgmt import (
    DEFAULT_BUS, DEFAULT_TIMEOUT_S, Bus, Indent, RouterId, Timeout, parse_assignments, session, target,
    to_json, usage_error,
)  # fmt: skip

app = typer.Typer(help="Query and change a running router's entities (JSON in and out).", no_args_is_help=True)

Type = Annotated[str, typer.Option("--type", help="entity type (short names such as `address` work)")]
OptionalType = Annotated[str | None, typer.Option("--type", help="entity type")]
Name = Annotated[str | None, typer.Option("--name", help="entity name")]
Identity = Annotated[str | None, typer.Option("--identity", help="entity identity")]
Stdin = Annotated[bool, typer.Option("--stdin", help="read the attributes as JSON (a map, or a list of maps) from stdin")]
Attributes = Annotated[list[str] | None, typer.Argument(help="ATTR=VALUE pairs", show_default=False)]


def _run(bus: str, fn: Any, *args: Any) -> None:
    host, port = parse_bus(bus)
    raise typer.Exit(run_async(f"{host}:{port}", fn, host, port, *args))


def _print(value: Any, indent: int) -> None:
    sys.stdout.write(to_json(value, indent) + "\n")
    sys.stdout.flush()


def _need_one(name: str | None, identity: str | None) -> None:
    if name is None and identity is None:
        usage_error("give --name or --identity")


def _read_stdin() -> list[dict[str, Any]]:
    try:
        data = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        usage_error(f"stdin: invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})")
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(item, dict) for item in items):
        usage_error("stdin: expected a JSON map of attributes, or a list of maps")
    return items


@app.command()
@with_login
def query(
    type: OptionalType = None, attributes: Annotated[list[str] | None, typer.Argument(help="attributes to show (default: all)")] = None,
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S, indent: Indent = 2,
) -> None:  # fmt: skip
    """Print every entity of --type (or of every type) as a list of JSON maps."""

    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            names, rows = await mgmt.query(type, attributes or [], address=target(router))
        _print([dict(zip(names, row)) for row in rows], indent)
        return 0

    _run(bus, go)


@app.command()
@with_login
def read(
    type: Type, name: Name = None, identity: Identity = None,
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S, indent: Indent = 2,
) -> None:  # fmt: skip
    """Print one entity."""
    _need_one(name, identity)

    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            entity = await mgmt.read(type, name=name, identity=identity, address=target(router))
        _print(entity, indent)
        return 0

    _run(bus, go)


@app.command()
@with_login
def create(
    type: OptionalType = None, attributes: Attributes = None, name: Name = None, stdin: Stdin = False,
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S, indent: Indent = 2,
) -> None:  # fmt: skip
    """Create entities from ATTR=VALUE pairs (or --stdin); print what was created."""
    if stdin and attributes:
        usage_error("give ATTR=VALUE pairs or --stdin, not both")
    items = _read_stdin() if stdin else [parse_assignments(attributes or [], allow_unset=False)]
    for item in items:
        if (type or item.get("type")) is None:
            usage_error("give --type (or a `type` attribute)")

    async def go(host: str, port: int) -> int:
        created = []
        async with session(host, port, timeout) as mgmt:
            for item in items:
                entity_type = type or str(item.get("type"))
                created.append(await mgmt.create(entity_type, item, name=name, address=target(router)))
        _print(created if stdin and len(created) != 1 else created[0], indent)
        return 0

    _run(bus, go)


@app.command()
@with_login
def update(
    type: Type, attributes: Attributes = None, name: Name = None, identity: Identity = None, stdin: Stdin = False,
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S, indent: Indent = 2,
) -> None:  # fmt: skip
    """Change attributes of one entity (`ATTR` alone resets it to its default); print the result."""
    _need_one(name, identity)
    if stdin and attributes:
        usage_error("give ATTR=VALUE pairs or --stdin, not both")
    changes = _read_stdin() if stdin else [parse_assignments(attributes or [], allow_unset=True)]
    if len(changes) != 1:
        usage_error("update takes one map of attributes")

    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            entity = await mgmt.update(type, changes[0], name=name, identity=identity, address=target(router))
        _print(entity, indent)
        return 0

    _run(bus, go)


@app.command()
@with_login
def delete(
    type: Type, name: Name = None, identity: Identity = None,
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:  # fmt: skip
    """Delete one entity."""
    _need_one(name, identity)

    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            await mgmt.delete(type, name=name, identity=identity, address=target(router))
        return 0

    _run(bus, go)


def _describe_types(operation: str, type: str | None, bus: str, router: str | None, timeout: float, indent: int) -> None:
    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            call = {"types": mgmt.get_types, "attributes": mgmt.get_attributes, "operations": mgmt.get_operations}
            _print(await call[operation](type, address=target(router)), indent)
        return 0

    _run(bus, go)


TypeArgument = Annotated[str | None, typer.Argument(help="only this type")]


@app.command("get-types")
@with_login
def get_types(
    type: TypeArgument = None, bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S,
    indent: Indent = 2,
) -> None:  # fmt: skip
    """Print the entity types the router manages (each with its base types)."""
    _describe_types("types", type, bus, router, timeout, indent)


@app.command("get-attributes")
@with_login
def get_attributes(
    type: TypeArgument = None, bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S,
    indent: Indent = 2,
) -> None:  # fmt: skip
    """Print the attribute names of every entity type (or of TYPE)."""
    _describe_types("attributes", type, bus, router, timeout, indent)


@app.command("get-operations")
@with_login
def get_operations(
    type: TypeArgument = None, bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S,
    indent: Indent = 2,
) -> None:  # fmt: skip
    """Print the operations every entity type (or TYPE) allows."""
    _describe_types("operations", type, bus, router, timeout, indent)


@app.command("get-mgmt-nodes")
@with_login
def get_mgmt_nodes(
    bus: Bus = DEFAULT_BUS, router: RouterId = None, timeout: Timeout = DEFAULT_TIMEOUT_S, indent: Indent = 2,
) -> None:  # fmt: skip
    """Print the management node address of every router in the network."""

    async def go(host: str, port: int) -> int:
        async with session(host, port, timeout) as mgmt:
            _print(await mgmt.get_mgmt_nodes(address=target(router)), indent)
        return 0

    _run(bus, go)
