"""The Proton C example broker (libqpid-proton11-dev-examples: broker.c), built once per test
session with pkg-config and run as a process on a free 127.0.0.1 port: a route container for
link-route tests that we did not write.

    broker = build_c_broker(tmp_path)            # skips the test when the packages are missing
    with CBroker.running(broker) as b:           # b.port; b.kill() to lose it mid-stream
        ...

What the broker does (read broker.c): one queue per address, created on first use; it answers
every attach, gives a sender 5 credits at a time, accepts and settles each message, and sends
queued messages presettled to receivers with credit. It knows no dynamic nodes, filters or
transactions: TxnCoordinator below (a Proton Python container) is the route container of the
transaction tests.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Described, Endpoint, Terminus, symbol, ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container

from .interop import THREAD_PREFIX, run_container
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


class TxnCoordinator(MessagingHandler):
    """A Proton Python container that is a transaction coordinator (transactions spec §4.4) and a
    sink: a `$coordinator` link declares transactions (Declared with a new txn-id) and discharges
    them (accepted; committed or rolled back as the discharge says); messages sent under a
    transaction are kept with its id and answered with a transactional state holding accepted
    (§4.5.2). What it saw is recorded under `lock`; `wait_for` waits for a condition on it.

        with TxnCoordinator.running() as coordinator:   # coordinator.port
    """

    def __init__(self) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.port = 0
        self.lock = threading.Condition()
        self.declared: list[bytes] = []
        self.committed: list[bytes] = []
        self.rolled_back: list[bytes] = []
        self.messages: list[tuple[bytes | None, Any]] = []  # (txn-id or None, body)
        self.coordinator_capabilities: list[str] = []
        self.acceptor: Any = None
        self.connections: list[Any] = []
        self._ids = itertools.count(1)

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[TxnCoordinator]:
        coordinator = cls()
        container = Container(coordinator)
        coordinator.acceptor = container.listen("127.0.0.1:0")
        coordinator.port = coordinator.acceptor._selectable.getsockname()[1]
        stop = threading.Event()
        thread = threading.Thread(target=run_container, args=(container,),
                                  kwargs={"timeout_s": 60.0, "stop": stop, "on_stop": coordinator._shutdown},
                                  name=f"{THREAD_PREFIX}-txn", daemon=True)  # fmt: skip
        thread.start()
        try:
            yield coordinator
        finally:
            stop.set()
            thread.join(timeout=5.0)

    def _shutdown(self) -> None:
        self.acceptor.close()
        for conn in self.connections:
            if conn.state & Endpoint.LOCAL_ACTIVE:
                conn.close()

    def wait_for(self, predicate: Callable[[TxnCoordinator], bool], timeout_s: float = 10.0) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: predicate(self), timeout=timeout_s):
                raise TimeoutError("the coordinator never reached the expected state")

    def on_connection_opening(self, event: Any) -> None:
        self.connections.append(event.connection)

    def on_link_opening(self, event: Any) -> None:
        link = event.link
        if link.is_receiver and link.remote_target.type == Terminus.COORDINATOR:
            link.target.type = Terminus.COORDINATOR
            link.target.copy(link.remote_target)
            capabilities = link.remote_target.capabilities
            capabilities.rewind()
            found = capabilities.get_object() if capabilities.next() is not None else None
            found = [found] if isinstance(found, str) else list(found or [])
            with self.lock:
                self.coordinator_capabilities = [str(c) for c in found]
        elif link.is_receiver:
            link.target.address = link.remote_target.address
        link.open()
        if link.is_receiver:
            link.flow(10)

    def on_message(self, event: Any) -> None:
        delivery, link, body = event.delivery, event.link, event.message.body
        if link.target.type == Terminus.COORDINATOR:
            if isinstance(body, Described) and body.descriptor == symbol("amqp:declare:list"):
                txn = f"txn-{next(self._ids)}".encode()
                self._record(lambda: self.declared.append(txn))
                delivery.local.data = [txn]
                delivery.update(0x33)  # declared (transactions §4.5.3)
            elif isinstance(body, Described) and body.descriptor == symbol("amqp:discharge:list"):
                txn, failed = body.value[0], bool(body.value[1])
                self._record(lambda: (self.rolled_back if failed else self.committed).append(bytes(txn)))
                delivery.update(Delivery.ACCEPTED)
            else:
                delivery.update(Delivery.REJECTED)
        else:
            txn = None
            if delivery.remote_state == 0x34 and delivery.remote.data:  # transactional-state
                txn = bytes(delivery.remote.data[0])
                delivery.local.data = [txn, Described(ulong(0x24), [])]  # accepted, in the transaction
                delivery.update(0x34)
            else:
                delivery.update(Delivery.ACCEPTED)
            self._record(lambda: self.messages.append((txn, body)))
        delivery.settle()
        link.flow(1)

    def _record(self, update: Callable[[], Any]) -> None:
        with self.lock:
            update()
            self.lock.notify_all()
