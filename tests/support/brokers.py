"""The Proton C example broker (libqpid-proton11-dev-examples: broker.c), built once per test
session with pkg-config and run as a process on a free 127.0.0.1 port: a route container for
link-route tests that we did not write.

    broker = build_c_broker(tmp_path)            # skips the test when the packages are missing
    with CBroker.running(broker) as b:           # b.port; b.kill() to lose it mid-stream
        ...

What the broker does (read broker.c): one queue per address, created on first use; it answers
every attach, gives a sender 5 credits at a time, accepts and settles each message, and sends
queued messages unsettled to receivers with credit. It knows no dynamic nodes, filters or
transactions.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .proton_c import EXAMPLES, build_examples

START_TIMEOUT_S = 10.0
LISTENING = re.compile(r"^listening on (\d+)$")


def build_c_broker(into: Path) -> Path:
    """Compile broker.c into `into` (skip the calling test when the toolchain or the Debian
    packages are missing: CI installs them, see .ci/run)."""
    if not (EXAMPLES / "broker.c").exists():
        pytest.skip("Proton C example broker unavailable: apt-get install -y libqpid-proton11-dev-examples")
    return build_examples(into, ("broker",))["broker"]


class CBroker:
    """One running broker process; its output is kept (a thread reads it)."""

    def __init__(self, proc: subprocess.Popen[str], port: int, output: list[str]) -> None:
        self.proc = proc
        self.port = port
        self.output = output

    @classmethod
    @contextmanager
    def running(cls, program: Path) -> Iterator[CBroker]:
        # Port 0: the broker binds a free port and prints it ("listening on N"); no race.
        proc = subprocess.Popen([str(program), "127.0.0.1", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=program.parent)  # fmt: skip
        output: list[str] = []
        found = threading.Event()
        port: list[int] = []

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                output.append(line.rstrip("\n"))
                match = LISTENING.match(line.strip())
                if match and not port:
                    port.append(int(match.group(1)))
                    found.set()
            found.set()

        reader = threading.Thread(target=pump, name="c-broker-output", daemon=True)
        reader.start()
        try:
            if not found.wait(START_TIMEOUT_S) or not port:
                raise RuntimeError(f"the C broker did not start: {output}")
            yield cls(proc, port[0], output)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)  # it has no clean stop but an interrupt
            proc.wait(timeout=10)
            reader.join(timeout=5)

    def kill(self) -> None:
        """Lose the broker at once (SIGKILL): its connections reset."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
