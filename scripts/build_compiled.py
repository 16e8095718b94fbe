"""Build a compiled copy of the router for profiling and quick experiments (`make compiled`;
`make test` and `make bench` use the wheel a user installs instead: see setup.py and the
Makefile's test-compiled and bench targets): build/compiled/ holds copies of
router/, tests/, bench/ and pyproject.toml, with the modules in mypyc-modules.txt compiled in
place there. Rebuilt only when a source file or the interpreter changed (a hash of router/ and
of the interpreter that builds it is kept: compiled modules belong to one interpreter build).

    python scripts/build_compiled.py [--out DIR]   # default build/compiled; prints the directory

Run code from that directory (cwd) so that its `router` package, not the checkout's, is imported.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "compiled"


def _source_hash() -> str:
    digest = hashlib.sha256(f"{sys.executable} {sys.version}".encode())
    for path in sorted((ROOT / "router").rglob("*.py")) + [ROOT / "mypyc-modules.txt"]:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def modules() -> list[str]:
    lines = (ROOT / "mypyc-modules.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def build(out: Path = OUT) -> Path:
    stamp = out / ".source-hash"
    wanted = _source_hash()
    fresh = stamp.exists() and stamp.read_text() == wanted
    for name in ("tests", "bench"):  # tests and benches always follow the checkout
        shutil.rmtree(out / name, ignore_errors=True)
    if not fresh:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        shutil.copytree(ROOT / "router", out / "router", ignore=shutil.ignore_patterns("__pycache__"))
        mypyc = [sys.executable, "-m", "mypyc", *modules()]
        result = subprocess.run(mypyc, cwd=out, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise SystemExit(f"mypyc failed (exit {result.returncode})")
        stamp.write_text(wanted)
    ignore = shutil.ignore_patterns("__pycache__", "build", "results")
    shutil.copytree(ROOT / "tests", out / "tests", ignore=ignore)
    shutil.copytree(ROOT / "bench", out / "bench", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", out / "pyproject.toml")
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--out"] and len(args) == 2:
        print(build(Path(args[1]).resolve()))
    elif not args:
        print(build())
    else:
        raise SystemExit("usage: build_compiled.py [--out DIR]")
