"""Builds the loadgen binary from loadgen.c with gcc and pkg-config (Proton C from Debian).

    build(out_dir) -> out_dir/loadgen, recompiled only when loadgen.c is newer than the binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("loadgen.c")
DEFAULT_BUILD_DIR = Path(__file__).with_name("build")  # ignored by git (bench/loadgen/.gitignore)
DEBIAN_PACKAGES = "gcc pkg-config libqpid-proton11-dev"
PKG = "libqpid-proton"  # Debian ships one .pc file for the core and the proactor
CFLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra"]


class LoadgenBuildError(RuntimeError):
    """loadgen.c did not compile (a bug in the source or an unexpected toolchain)."""


class ToolchainMissing(LoadgenBuildError):
    """gcc, pkg-config or the Proton C headers are not installed; the message says what to install."""


def _missing(what: str) -> ToolchainMissing:
    return ToolchainMissing(
        f"cannot build loadgen: {what}; install the Debian packages: "
        f"apt-get install -y {DEBIAN_PACKAGES}"
    )


def proton_flags() -> list[str]:
    """Compiler and linker flags for Proton C, from pkg-config."""
    missing = [tool for tool in ("gcc", "pkg-config") if shutil.which(tool) is None]
    if missing:
        raise _missing(f"{' and '.join(missing)} not found")
    out = subprocess.run(
        ["pkg-config", "--cflags", "--libs", PKG], capture_output=True, text=True, timeout=30
    )
    if out.returncode != 0:
        raise _missing(f"pkg-config knows no {PKG} (Proton C headers missing)")
    return out.stdout.split()


def build(out_dir: Path) -> Path:
    """Compile loadgen.c into `out_dir/loadgen` unless that binary is already newer than the
    source; return the binary's path. The binary is written under a temporary name and renamed,
    so concurrent builds never see a half-written file."""
    target = out_dir / "loadgen"
    if target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    flags = proton_flags()
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".loadgen-", dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        result = subprocess.run(
            ["gcc", *CFLAGS, "-o", str(tmp), str(SOURCE), *flags],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if result.returncode != 0:
            if "proton/" in result.stderr and "No such file" in result.stderr:
                raise _missing("Proton C headers not found")
            raise LoadgenBuildError(f"gcc failed to compile {SOURCE.name}:\n{result.stderr}")
        tmp.chmod(0o755)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
