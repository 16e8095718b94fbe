"""`router run` as a subprocess, for tests and benchmarks that need real router processes.

    with RouterProcess.running(tmp_path, {"listeners": [{"name": "amqp", "port": 0}]}) as router:
        port = router.ports["amqp"]
    # leaving the block sends SIGTERM and asserts exit code 0 (a hung router is killed)

The router runs from the same installation as the caller (`python -m router.cli.main`, with the
directory holding this `router` package first on PYTHONPATH, so that a checkout tests itself).
Its standard output and error are read by threads (the router never blocks on a full pipe) and
kept for assertions; `start()` waits for its `listening` lines and returns the bound ports.

Owns: starting, signalling, stopping and reading router processes. Must not touch: pytest
(tests/support/router_process.py adds the fixtures).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml

import router

ROOT = Path(router.__file__).resolve().parent.parent  # the checkout under test
# `router run` prints one line per listener, its AMQP ones first, then its HTTP ones.
LISTENING = re.compile(r"^listening (\S+) (?:amqp|http)://\[?([^\]]+)\]?:(\d+)$")
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


def router_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "router.cli.main", *args]


def router_env() -> dict[str, str]:
    """The environment for `router` subprocesses: this checkout first on the path, and a wide
    terminal so that rich does not wrap log lines."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "200"
    return env


def _pump(stream: IO[str], lines: list[str], notify: queue.Queue[str | None] | None) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
        if notify is not None:
            notify.put(line.rstrip("\n"))
    if notify is not None:
        notify.put(None)  # end of output: the process is exiting


class RouterProcess:
    """One `router run -c CONFIG` subprocess; stdout and stderr are read by threads (so the
    router never blocks on a full pipe) and kept for assertions."""

    def __init__(self, config_path: Path, *, listeners: int, log_level: str = "info", prefix: tuple[str, ...] = (),
                 run_args: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.config_path = config_path
        self.prefix = prefix  # e.g. ("ip", "netns", "exec", NAME): the router runs inside a namespace
        self.run_args = run_args  # more `router run` options, e.g. ("--grace-period-s", "3")
        self.listeners = listeners
        self.log_level = log_level
        self.ports: dict[str, int] = {}
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []

    def start(self, timeout: float = START_TIMEOUT_S) -> dict[str, int]:
        """Start the router and wait for its `listening` lines; return {listener: port}."""
        self.proc = subprocess.Popen(
            [*self.prefix, *router_command("run", "-c", str(self.config_path), "--log-level", self.log_level, *self.run_args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=router_env(),
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stderr is not None
        lines: queue.Queue[str | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=_pump, args=(self.proc.stdout, self.stdout, lines), daemon=True),
            threading.Thread(target=_pump, args=(self.proc.stderr, self.stderr, None), daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + timeout
        while len(self.ports) < self.listeners:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"router did not listen within {timeout} s:\n{self.output}") from None
            if line is None:
                self.wait(STOP_TIMEOUT_S)
                raise AssertionError(f"router exited with {self.proc.returncode} before listening:\n{self.output}")
            match = LISTENING.match(line)
            if match:
                self.ports[match[1]] = int(match[3])
        return self.ports

    @property
    def output(self) -> str:
        return "\n".join(["--- stdout", *self.stdout, "--- stderr", *self.stderr])

    def send_signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        for thread in self._threads:
            thread.join(timeout)
        return code

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Signal the router and wait for it; a router that does not stop is killed."""
        self.send_signal(signum)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"router did not stop within {timeout} s of {signal.Signals(signum).name}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    @classmethod
    @contextmanager
    def running(cls, directory: Path, config: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[RouterProcess]:
        """Write `config` (default: one listener on 127.0.0.1:0) and run a router on it."""
        config = dict(config) if config is not None else {"listeners": [{"name": "amqp", "port": 0}]}
        config.setdefault("router", {"id": "test-router"})
        path = directory / "router.yaml"
        path.write_text(yaml.safe_dump(config))
        process = cls(path, listeners=len(config.get("listeners", [{}])), **kwargs)
        process.start()
        try:
            yield process
        finally:
            if process.proc is not None and process.proc.poll() is None:
                code = process.stop()
                assert code == 0, f"router exited with {code}:\n{process.output}"
            process.kill()
