"""Build a compiled copy of the router for tests and benchmarks: build/compiled/ holds copies of
router/, tests/, bench/ and pyproject.toml, with the modules in mypyc-modules.txt compiled in
place there. Rebuilt only when a source file changed (a hash of router/ is kept).

    python scripts/build_compiled.py      # prints the directory

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
    digest = hashlib.sha256()
    for path in sorted((ROOT / "router").rglob("*.py")) + [ROOT / "mypyc-modules.txt"]:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def modules() -> list[str]:
    lines = (ROOT / "mypyc-modules.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def build() -> Path:
    stamp = OUT / ".source-hash"
    wanted = _source_hash()
    fresh = stamp.exists() and stamp.read_text() == wanted
    for name in ("tests", "bench"):  # tests and benches always follow the checkout
        shutil.rmtree(OUT / name, ignore_errors=True)
    if not fresh:
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)
        shutil.copytree(ROOT / "router", OUT / "router", ignore=shutil.ignore_patterns("__pycache__"))
        mypyc = [sys.executable, "-m", "mypyc", *modules()]
        result = subprocess.run(mypyc, cwd=OUT, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise SystemExit(f"mypyc failed (exit {result.returncode})")
        stamp.write_text(wanted)
    ignore = shutil.ignore_patterns("__pycache__", "build", "results")
    shutil.copytree(ROOT / "tests", OUT / "tests", ignore=ignore)
    shutil.copytree(ROOT / "bench", OUT / "bench", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", OUT / "pyproject.toml")
    return OUT


if __name__ == "__main__":
    print(build())
