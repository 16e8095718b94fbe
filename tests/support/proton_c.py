"""The Proton C examples from Debian (libqpid-proton11-dev-examples): `send` and `receive`,
built once per test session with pkg-config, used as third-party clients of our router.

    send HOST PORT ADDRESS COUNT       sends COUNT messages, waits for each to be accepted
    receive HOST PORT ADDRESS COUNT    receives COUNT messages, then exits
    send-abort HOST PORT ADDRESS COUNT starts COUNT messages and aborts each (on request)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path("/usr/share/proton/examples/c")
PROGRAMS = ("send", "receive")


def _pkg_config_flags() -> list[str]:
    out = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libqpid-proton"],  # Debian ships one .pc for core+proactor
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


def build_examples(into: Path, programs: tuple[str, ...] = PROGRAMS) -> dict[str, Path]:
    """Compile the examples (`programs`: also e.g. "send-abort") into `into`; skip the calling
    test when the toolchain or the Debian packages are missing (CI installs them: see .ci/run)."""
    missing = [tool for tool in ("gcc", "pkg-config") if shutil.which(tool) is None]
    if missing or not (EXAMPLES / "send.c").exists():
        pytest.skip(
            "Proton C examples unavailable: apt-get install -y gcc pkg-config "
            "libqpid-proton11-dev libqpid-proton11-dev-examples"
        )
    flags = _pkg_config_flags()
    built = {}
    for name in programs:
        target = into / name
        if not target.exists():
            subprocess.run(
                ["gcc", "-O1", "-pthread", "-o", str(target), str(EXAMPLES / f"{name}.c"), *flags],
                check=True, capture_output=True,
            )  # fmt: skip
        built[name] = target
    return built
