"""The Proton C example broker (Debian: libqpid-proton11-dev-examples, broker.c) as a route
container for benchmarks, built with gcc and pkg-config and run on a free 127.0.0.1 port (the
tests have their own, tests/support/brokers.py, which bench/ may not import).

    with running_broker(directory) as port:
        ...
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SOURCE = Path("/usr/share/proton/examples/c/broker.c")
LISTENING = re.compile(r"^listening on (\d+)$")


def build(into: Path) -> Path:
    if not SOURCE.exists():
        raise SystemExit("the Proton C example broker is missing: apt-get install -y gcc pkg-config "
                         "libqpid-proton11-dev libqpid-proton11-dev-examples")  # fmt: skip
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libqpid-proton"], capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    program = into / "broker"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(program), str(SOURCE), *flags], check=True, capture_output=True)
    return program


@contextmanager
def running_broker(directory: Path, timeout_s: float = 10.0) -> Iterator[int]:
    """Build and start the broker; its port. It is killed on leaving (it has no clean stop)."""
    program = build(directory)
    proc = subprocess.Popen([str(program), "127.0.0.1", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=directory)  # fmt: skip
    port: list[int] = []
    found = threading.Event()

    def pump() -> None:  # its output is read to the end (it prints a line per aborted message)
        assert proc.stdout is not None
        for line in proc.stdout:
            match = LISTENING.match(line.strip())
            if match and not port:
                port.append(int(match[1]))
                found.set()
        found.set()

    threading.Thread(target=pump, name="c-broker-output", daemon=True).start()
    try:
        if not found.wait(timeout_s) or not port:
            raise RuntimeError("the C broker did not start")
        yield port[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)
