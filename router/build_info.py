"""Which build of the router is running: is the hot path compiled (mypyc) or interpreted?

Owns: the answer, from the modules actually loaded (a compiled module is an extension module,
whatever was intended at build time) and the one-line note a built install carries
(router/_build.txt, written by setup.py: "compiled" or "interpreted: <why>"). `router run` logs
it at start, the management `router` entity and `router stat` show it.
Must not touch: anything else; importing this module loads only the probe module below.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from dataclasses import dataclass
from pathlib import Path

# One module of the compiled hot path (listed in mypyc-modules.txt): the routing core's entry.
PROBE_MODULE = "router.core.router"
NOTE_FILE = Path(__file__).with_name("_build.txt")


@dataclass(frozen=True)
class BuildInfo:
    compiled: bool
    detail: str  # why interpreted, or "compiled"; a human reads it

    def describe(self) -> str:
        return "compiled (mypyc)" if self.compiled else f"interpreted ({self.detail})"


def module_is_compiled(name: str) -> bool:
    """True when the module `name` was loaded from an extension module (mypyc's output)."""
    module = importlib.import_module(name)
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def build_note() -> str | None:
    try:
        return NOTE_FILE.read_text().strip() or None
    except OSError:
        return None  # a source checkout: nothing was built


def build_info() -> BuildInfo:
    compiled = module_is_compiled(PROBE_MODULE)
    note = build_note()
    if compiled:
        return BuildInfo(True, "compiled")
    if note is None:
        return BuildInfo(False, "source checkout or editable install")
    if note == "compiled":  # built compiled, yet the .py module won: a broken install
        return BuildInfo(False, "built compiled but the compiled modules did not load")
    return BuildInfo(False, note.removeprefix("interpreted: "))
