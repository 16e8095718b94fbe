"""The import direction is one way: amqp <- topology <- core <- management <- net (and the CLIs
on top). Sans-IO layers never import I/O, clocks or task libraries. Checked by walking imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> packages it may import from this project
ALLOWED: dict[str, set[str]] = {
    "router.amqp": {"router.amqp"},
    "topology": {"router.amqp", "topology"},
    "router.config": {"router.config", "router.amqp"},
    "router.core": {"router.amqp", "topology", "router.config", "router.core"},
    "router.management": {"router.amqp", "topology", "router.config", "router.core", "router.management"},
    # The `topology` CLI is a management client, like router/cli: it sits on top, beside net,
    # and must not reach into the routing core or the management implementation.
    "topology.cli": {"router.amqp", "router.config", "router.net", "router.cli", "topology"},
}
SANS_IO = ("router.amqp", "topology", "router.core")
NOT_SANS_IO = ("topology.cli",)
FORBIDDEN_IN_SANS_IO = {"trio", "asyncio", "socket", "selectors", "threading", "time", "ssl"}


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
                found.append(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.append(node.module)
    return found


def _layer(module: str) -> str | None:
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


SOURCES = sorted(p for d in ("router", "topology") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path: Path) -> None:
    layer = _layer(_module_name(path))
    if layer is None:
        return
    for imported in _imports(path):
        target = _layer(imported) or (imported if imported.split(".")[0] in ("router", "topology") else None)
        if target is None:
            continue
        assert any(target == ok or target.startswith(ok + ".") for ok in ALLOWED[layer]), (
            f"{_module_name(path)} ({layer}) must not import {imported}"
        )


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if _layer(_module_name(p)) in SANS_IO and _layer(_module_name(p)) not in NOT_SANS_IO], ids=lambda p: str(p.relative_to(ROOT))
)
def test_sans_io_layers_do_no_io(path: Path) -> None:
    for imported in _imports(path):
        assert imported.split(".")[0] not in FORBIDDEN_IN_SANS_IO, (
            f"{_module_name(path)} is sans-IO and must not import {imported}"
        )
