"""Packaging hook: a built install (`pip install .`, a wheel, an sdist) compiles the hot-path
modules listed in mypyc-modules.txt with mypyc, about 2.5x less CPU per routed message.

- ROUTER_PURE_PYTHON=1 opts out: plain Python everywhere.
- The editable development install (`pip install -e .`) stays interpreted: edits take effect
  without a rebuild.
- Without mypyc or a working C compiler the build falls back to plain Python and prints one loud
  warning in the build log (pip shows it with -v); mypy errors in the listed modules still fail
  the build, since shipping them interpreted would hide the mistake.

Every built install carries router/_build.txt: one line saying how it was built ("compiled" or
"interpreted: <why>"); router/build_info.py reads it beside the modules' own file suffixes.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PURE_PYTHON_ENV = "ROUTER_PURE_PYTHON"
BUILD_NOTE = "router/_build.txt"
# Commands that build (or install) the package; metadata queries (egg_info, dist_info, sdist)
# need no compilation, and pip runs those first in separate passes over this file.
BUILD_COMMANDS = frozenset({"bdist_wheel", "build", "build_ext", "install", "bdist"})
EDITABLE_COMMANDS = frozenset({"editable_wheel", "develop"})


def listed_modules() -> list[str]:
    lines = (HERE / "mypyc-modules.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def compiler_problem() -> str | None:
    """None when the C compiler this build would use can compile against Python.h; otherwise
    why not (no compiler, no Python headers)."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    compiler: Any = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("#include <Python.h>\nint router_probe(void) { return 0; }\n")
        try:
            compiler.compile([str(probe)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]])
        except Exception as exc:  # CompileError, or the compiler executable missing (OSError)
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"no working C compiler ({first_line})"
    return None


def _mypyc_problem() -> str | None:
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc (the mypy package) is not installed in the build environment"
    return None


def compile_plan(
    argv: Iterable[str],
    environ: Mapping[str, str],
    mypyc_problem: Callable[[], str | None] = _mypyc_problem,
    compiler: Callable[[], str | None] = compiler_problem,
) -> tuple[bool, str]:
    """(compile?, the line for router/_build.txt) for one run of this file."""
    commands = set(argv)
    if environ.get(PURE_PYTHON_ENV) == "1":
        return False, f"interpreted: {PURE_PYTHON_ENV}=1"
    if commands & EDITABLE_COMMANDS:
        return False, "interpreted: editable development install"
    if not commands & BUILD_COMMANDS:
        return False, "interpreted: metadata only"
    problem = mypyc_problem() or compiler()
    if problem:
        return False, f"interpreted: {problem}"
    return True, "compiled"


# Interpreted on purpose: no warning.
DELIBERATE = frozenset({
    f"interpreted: {PURE_PYTHON_ENV}=1", "interpreted: editable development install", "interpreted: metadata only",
})


def warn_interpreted(reason: str) -> None:
    bar = "!" * 78
    sys.stderr.write(
        f"\n{bar}\nWARNING: the router is being built WITHOUT its compiled hot path: {reason}.\n"
        "It runs, but uses about 2.5x the CPU per routed message. Install a C compiler and the\n"
        "Python headers (Debian: apt-get install gcc python3-dev) and reinstall to compile it.\n"
        f"{bar}\n\n"
    )
    sys.stderr.flush()


class BuildPyWithNote(build_py):  # type: ignore[misc]
    """Writes router/_build.txt into the build; runs once per build, so it also warns once."""

    def run(self) -> None:
        super().run()
        if NOTE.startswith("interpreted") and NOTE not in DELIBERATE:  # a missing tool, not a choice
            warn_interpreted(NOTE.split(": ", 1)[1])
        write_note(self.build_lib, NOTE)


class BuildExtOrFallBack(build_ext):  # type: ignore[misc]
    """A C compile or link failure falls back to plain Python (loudly) instead of failing."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # distutils' CompileError/LinkError, or OSError
            for ext in self.extensions:  # nothing half-built may shadow the .py modules
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            reason = f"the C build failed ({str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r})"
            warn_interpreted(reason)
            write_note(self.build_lib, f"interpreted: {reason}")


def write_note(build_lib: str, note: str) -> None:
    path = Path(build_lib) / BUILD_NOTE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(note + "\n")


NOTE = "interpreted: not built"

if __name__ == "__main__":  # setuptools runs this file as __main__; tests import compile_plan
    COMPILE, NOTE = compile_plan(sys.argv[1:], os.environ)
    ext_modules = []
    if COMPILE:
        from mypyc.build import mypycify

        ext_modules = mypycify(listed_modules(), opt_level="3")
    setup(ext_modules=ext_modules, cmdclass={"build_py": BuildPyWithNote, "build_ext": BuildExtOrFallBack})
