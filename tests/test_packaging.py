"""The build a user installs: setup.py compiles the hot path by default, opts out on
ROUTER_PURE_PYTHON=1, falls back to plain Python (loudly) without a C compiler; the running
router says which build it is (the `router run` log line, the management `router` entity's
`compiled`, `router stat general`).

`make test-compiled` runs this module on the installed wheel with ROUTER_WHEEL naming it: there
the wheel and the installed router must be compiled (a wheel built without a C compiler skips
those checks; CI sets ROUTER_REQUIRE_COMPILED=1 to fail instead). In a checkout the router must say it is
interpreted; the setup.py tests need the checkout (they skip on the installed wheel).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

import router
from router.build_info import PROBE_MODULE, build_info

from .support.management import cli_json, router_with_http
from .support.router_process import ROOT

WHEEL = os.environ.get("ROUTER_WHEEL")  # set by `make test-compiled`: the wheel under test
SETUP_PY = ROOT / "setup.py"
in_checkout = pytest.mark.skipif(not SETUP_PY.exists(), reason="needs the source checkout (setup.py)")
on_wheel = pytest.mark.skipif(WHEEL is None, reason="ROUTER_WHEEL not set: not running on the installed wheel")


def listed_modules() -> list[str]:
    """mypyc-modules.txt, from the checkout or (on the installed wheel) its copy beside tests/."""
    for root in (ROOT, Path(__file__).resolve().parent.parent):
        path = root / "mypyc-modules.txt"
        if path.exists():
            lines = path.read_text().splitlines()
            return [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    pytest.skip("mypyc-modules.txt not found")


def load_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("router_setup", SETUP_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines, does not call setup()
    return module


# --- setup.py: when it compiles --------------------------------------------------------------


@in_checkout
def test_a_build_compiles_by_default_and_says_why_when_it_does_not() -> None:
    setup = load_setup()
    ok = lambda: None  # noqa: E731
    plan = setup.compile_plan
    assert plan(["bdist_wheel"], {}, ok, ok) == (True, "compiled")
    assert plan(["build"], {}, ok, ok) == (True, "compiled")
    assert plan(["bdist_wheel"], {"ROUTER_PURE_PYTHON": "1"}, ok, ok) == (False, "interpreted: ROUTER_PURE_PYTHON=1")
    assert plan(["editable_wheel"], {}, ok, ok) == (False, "interpreted: editable development install")
    assert plan(["dist_info"], {}, ok, ok)[0] is False  # metadata passes compile nothing
    no_mypyc = lambda: "mypyc is missing"  # noqa: E731
    no_cc = lambda: "no working C compiler (x)"  # noqa: E731
    assert plan(["bdist_wheel"], {}, no_mypyc, ok) == (False, "interpreted: mypyc is missing")
    assert plan(["bdist_wheel"], {}, ok, no_cc) == (False, "interpreted: no working C compiler (x)")


@in_checkout
def test_the_compiler_probe_reports_a_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = load_setup()
    monkeypatch.setenv("CC", "/nonexistent/cc")
    problem = setup.compiler_problem()
    assert problem is not None and problem.startswith("no working C compiler")


@in_checkout
def test_a_build_without_a_c_compiler_falls_back_loudly_once(tmp_path: Path) -> None:
    """The real setup.py `build` command with a compiler that does not exist: it succeeds,
    warns once, and the built package carries the note saying why it is interpreted."""
    env = {**os.environ, "CC": "/nonexistent/cc"}
    env.pop("ROUTER_PURE_PYTHON", None)
    result = subprocess.run(
        [sys.executable, str(SETUP_PY), "-q", "build", "--build-base", str(tmp_path / "b")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("WITHOUT its compiled hot path") == 1, result.stderr
    notes = list((tmp_path / "b").rglob("router/_build.txt"))
    assert len(notes) == 1 and notes[0].read_text().startswith("interpreted: no working C compiler")
    assert not list((tmp_path / "b").rglob("*.so"))


@in_checkout
def test_the_sdist_carries_what_the_compiled_build_reads() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    assert "mypyc-modules.txt" in manifest
    requires = (ROOT / "pyproject.toml").read_text()
    assert '"mypy>=' in requires.split("[project]")[0]  # mypyc is a build requirement


@in_checkout
def test_opting_out_builds_interpreted_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "ROUTER_PURE_PYTHON": "1"}
    result = subprocess.run(
        [sys.executable, str(SETUP_PY), "-q", "build", "--build-base", str(tmp_path / "b")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "WITHOUT its compiled hot path" not in result.stderr
    (note,) = (tmp_path / "b").rglob("router/_build.txt")
    assert note.read_text().strip() == "interpreted: ROUTER_PURE_PYTHON=1"


# --- the running router says which build it is -------------------------------------------------


def test_build_info_matches_the_loaded_modules() -> None:
    info = build_info()
    origin = sys.modules[PROBE_MODULE].__file__ or ""
    assert info.compiled == (not origin.endswith(".py"))
    if (Path(router.__file__).parent.parent / "setup.py").exists():  # a checkout is interpreted
        assert info.compiled is False and "source checkout" in info.detail


def test_router_run_logs_and_management_shows_whether_compiled(tmp_path: Path) -> None:
    expected = build_info()
    with router_with_http(tmp_path, "build-info-router") as proc:
        general = cli_json("stat", "general", "--json", "-b", proc.bus)
        log = "\n".join(proc.process.stderr)
    assert general["compiled"] is expected.compiled
    assert f"hot path {expected.describe()}" in log, log


def test_the_packages_declare_their_type_hints() -> None:
    """PEP 561: py.typed beside router/ and topology/, and in the package data that carries it."""
    import tomllib

    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "pyproject.toml").exists() or not (checkout / "router").is_dir():
        pytest.skip("needs the checkout (the installed wheel's copy of tests/ has no sources beside it)")
    package_data = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for package in ("router", "topology"):
        assert (checkout / package / "py.typed").exists(), package
        assert "py.typed" in package_data[package], package


# --- the installed wheel (make test-compiled) --------------------------------------------------


def wheel_note() -> str:
    """The wheel's own note; a wheel built interpreted (no C compiler, ROUTER_PURE_PYTHON=1)
    skips the compiled checks, unless ROUTER_REQUIRE_COMPILED=1 (CI) makes that a failure."""
    assert WHEEL is not None
    with zipfile.ZipFile(WHEEL) as wheel:
        note = wheel.read("router/_build.txt").decode().strip()
    if note != "compiled" and os.environ.get("ROUTER_REQUIRE_COMPILED") != "1":
        pytest.skip(f"the wheel was built {note}")
    return note


@on_wheel
def test_the_wheel_holds_every_listed_module_compiled() -> None:
    assert wheel_note() == "compiled"
    assert WHEEL is not None
    with zipfile.ZipFile(WHEEL) as wheel:
        names = wheel.namelist()
    for module in listed_modules():
        stem = module.removesuffix(".py")
        assert any(n.startswith(stem + ".") and n.endswith(".so") for n in names), module


@on_wheel
def test_the_wheel_carries_the_type_hint_markers() -> None:
    assert WHEEL is not None
    with zipfile.ZipFile(WHEEL) as wheel:
        names = set(wheel.namelist())
    assert {"router/py.typed", "topology/py.typed"} <= names


@on_wheel
def test_the_installed_router_runs_compiled() -> None:
    assert not (Path(router.__file__).parent.parent / "setup.py").exists(), "the checkout's router was imported"
    assert wheel_note() == "compiled"
    info = build_info()
    assert info.compiled, info
    for module in listed_modules():
        name = module.removesuffix(".py").replace("/", ".")
        assert (importlib.import_module(name).__file__ or "").endswith(".so"), name

