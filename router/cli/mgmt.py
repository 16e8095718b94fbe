"""What `router stat` and `router manage` share: the options that pick a router, opening a
management session on it, JSON output, and one-line usage errors.

Owns: -b/--bus, --router, --timeout, and how a session is opened (connect with the command's
login options (router.cli.login), dynamic reply receiver, anonymous request sender:
router.net.management_client).
Must not touch: the router's internals (router.core, router.management): this is a client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, NoReturn

import typer

from ..config.patterns import strip_scheme  # (GET-MGMT-NODES answers `amqp:/_topo/0/<id>/$management`)
from ..net.client import connect
from ..net.management_client import ManagementSession, management_session, node_address
from .common import stderr
from .login import Login, current

Bus = Annotated[str, typer.Option("-b", "--bus", help="router to connect to, HOST:PORT")]
RouterId = Annotated[
    str | None, typer.Option("-r", "--router", help="ask this router (by id) through the mesh instead")
]
Timeout = Annotated[float, typer.Option("-t", "--timeout", min=0.1, help="seconds to wait for each answer")]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
Indent = Annotated[int, typer.Option("--indent", min=0, help="JSON indentation (0: one line)")]

DEFAULT_BUS = "127.0.0.1:5672"
DEFAULT_TIMEOUT_S = 5.0


def usage_error(message: str) -> NoReturn:
    """A mistake in the command line: one line on stderr, exit 2 (typer's BadParameter would
    draw a multi-line box)."""
    stderr.print(f"error: {message}", markup=False)
    raise typer.Exit(2)


@asynccontextmanager
async def session(host: str, port: int, timeout_s: float, login: Login | None = None) -> AsyncIterator[ManagementSession]:
    """A management session on the router at host:port, logged in as `login` (default: the
    running command's --username/--ssl-* options)."""
    login = login if login is not None else current()
    async with connect(host, port, open_timeout_s=timeout_s, **login.connect_options()) as client:
        async with management_session(client, timeout_s=timeout_s) as mgmt:
            yield mgmt


def target(router_id: str | None) -> str:
    return node_address(router_id)


def router_of(node: str) -> str:
    """The router id in `_topo/0/<id>/$management` (the node itself when it is not one)."""
    parts = strip_scheme(node).split("/")
    return parts[2] if len(parts) >= 4 and parts[0] == "_topo" else node


def to_json(value: Any, indent: int = 2) -> str:
    """JSON for whatever a management reply holds (AMQP binary, symbols, timestamps included)."""

    def fallback(obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            data = bytes(obj)
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                return data.hex()
        if isinstance(obj, (set, frozenset, tuple)):
            return list(obj)
        return str(obj)

    return json.dumps(value, indent=indent or None, default=fallback, sort_keys=False)


def parse_assignments(pairs: list[str], *, allow_unset: bool) -> dict[str, Any]:
    """`ATTR=VALUE` pairs as a map. Values stay strings (the node converts them by its schema)
    unless they look like JSON lists, maps or null; `ATTR` alone (when allowed) resets it to the
    default (null, as in an UPDATE body)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not name:
            usage_error(f"expected ATTR=VALUE, got {pair!r}")
        if not eq:
            if not allow_unset:
                usage_error(f"expected ATTR=VALUE, got {pair!r}")
            out[name] = None
            continue
        if value[:1] in ("[", "{") or value == "null":
            try:
                out[name] = json.loads(value)
                continue
            except json.JSONDecodeError as exc:
                usage_error(f"{name}: invalid JSON value ({exc.msg})")
        out[name] = value
    return out
