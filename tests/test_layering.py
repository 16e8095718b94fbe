"""The import direction is one way, for every package of the project:

    router.amqp <- topology <- router.core <- router.management <- router.net <- router.cli
    (router.config beside router.amqp; router.demo and topology.cli on top, beside router.cli)

router.testing (the shipped test kit) sits on top of router.net and below the CLIs; nothing
in router/ or topology/ imports it. bench/ and tests/ may import any package of the router, tests
may import bench, and nothing imports tests (nor, from router/ and topology/, bench or scripts).
Sans-IO layers never import I/O, clocks or task libraries; the management layer runs inside
the core's turn and imports no task or socket library (it reads a wall clock for timestamps).
A new package under router/ or topology/ fails here until it is given its place.
Checked by walking the imports of every source file, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("router", "topology", "tests", "bench", "scripts", "pipeline")

_CORE = {"router.amqp", "topology", "router.config", "router.core"}
_BELOW_CLI = _CORE | {"router.management", "router.net", "router.build_info", "router.flow"}
_ROUTER_AND_TOPOLOGY = _BELOW_CLI | {"router.testing", "router.cli", "router.demo", "topology.cli", "router"}

# package -> packages of this project it may import (its own included)
ALLOWED: dict[str, set[str]] = {
    "router.amqp": {"router.amqp"},
    "topology": {"router.amqp", "topology"},
    "router.config": {"router.config", "router.amqp"},
    "router.build_info": {"router.build_info"},
    "router.core": _CORE,
    # Flow records (sans-IO): read the routing core's snapshots; management shows their counts.
    "router.flow": _CORE | {"router.flow"},
    "router.management": _CORE | {"router.management"},
    "router.net": _CORE | {"router.management", "router.net", "router.flow"},
    # The shipped test kit drives the router from outside: engines, cores, the server over
    # memory streams. It is a client of the router, never part of it.
    "router.testing": _CORE | {"router.management", "router.net", "router.testing", "router.flow"},
    "router.cli": _BELOW_CLI | {"router.cli", "router.demo"},
    "router.demo": _BELOW_CLI | {"router.demo", "topology.cli"},
    # The `topology` CLI is a management client, like router/cli: it sits on top, beside net,
    # and must not reach into the routing core or the management implementation.
    "topology.cli": {"router.amqp", "router.config", "router.net", "router.cli", "topology", "topology.cli"},
    # Anything under router/ not placed above lands here and may import nothing of the project.
    "router": set(),
    # The flow-record pipeline (PySpark) stands alone: it reads files, not the router.
    "pipeline": {"pipeline"},
    "bench": _ROUTER_AND_TOPOLOGY | {"bench", "pipeline"},
    "scripts": _ROUTER_AND_TOPOLOGY | {"scripts"},
    "tests": _ROUTER_AND_TOPOLOGY | {"bench", "tests", "pipeline"},
}
SANS_IO = ("router.amqp", "topology", "router.core", "router.flow")
FORBIDDEN_IN_SANS_IO = {"trio", "asyncio", "socket", "selectors", "threading", "time", "ssl"}
NO_TASKS_OR_SOCKETS = ("router.management",)
FORBIDDEN_WITHOUT_TASKS = FORBIDDEN_IN_SANS_IO - {"time"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                source = node.module
            else:
                continue
            found.append(source)
            # `from .. import demo` imports a module too; a dunder is just a name
            found += [f"{source}.{alias.name}" for alias in node.names if not alias.name.startswith("__")]
    return found


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


SOURCES = sorted(p for d in PROJECT for p in (ROOT / d).rglob("*.py") if "node_modules" not in p.parts)
ROUTER_SOURCES = [p for p in SOURCES if p.relative_to(ROOT).parts[0] in ("router", "topology")]


def _target(imported: str) -> str | None:
    """The layer an imported name belongs to, or None when it is not part of this project."""
    if imported.split(".")[0] not in PROJECT or imported == "router":
        return None  # the root package holds only `__version__`: anyone may read it
    return _layer(imported) or imported


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path: Path) -> None:
    layer = _layer(_module_name(path))
    assert layer is not None, f"{_module_name(path)} belongs to no layer"
    for imported in _imports(path):
        target = _target(imported)
        if target is None:
            continue
        assert target in ALLOWED[layer], f"{_module_name(path)} ({layer}) must not import {imported}"


@pytest.mark.parametrize("path", ROUTER_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_router_module_has_a_layer(path: Path) -> None:
    # The bare "router" layer is the catch-all for packages nobody placed yet.
    module = _module_name(path)
    assert module == "router" or _layer(module) != "router", f"{module}: add its package to ALLOWED"


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if _layer(_module_name(p)) in SANS_IO], ids=lambda p: str(p.relative_to(ROOT))
)
def test_sans_io_layers_do_no_io(path: Path) -> None:
    for imported in _imports(path):
        assert imported.split(".")[0] not in FORBIDDEN_IN_SANS_IO, (
            f"{_module_name(path)} is sans-IO and must not import {imported}"
        )


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if _layer(_module_name(p)) in NO_TASKS_OR_SOCKETS], ids=lambda p: str(p.relative_to(ROOT))
)
def test_management_runs_no_tasks_or_sockets(path: Path) -> None:
    for imported in _imports(path):
        assert imported.split(".")[0] not in FORBIDDEN_WITHOUT_TASKS, (
            f"{_module_name(path)} runs inside the core's turn and must not import {imported}"
        )


def test_the_rules_catch_a_wrong_import(tmp_path: Path) -> None:
    # The checker itself: a core module importing the server, and the router importing the
    # kit or the tests, are each refused; a test importing the kit is fine.
    assert _target("router.net.server") not in ALLOWED["router.core"]
    assert _target("router.testing.routerharness") not in ALLOWED["router.net"]
    assert _target("tests.conftest") not in ALLOWED["bench"]
    assert _target("bench.relay") not in ALLOWED["router.testing"]
    assert _target("router.testing.enginepair") in ALLOWED["tests"]
    assert _target("router.newthing") == "router" and "router" not in ALLOWED["router.core"]
