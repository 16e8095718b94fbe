"""The single router with Proton clients (tests/support/router_proton.py): graceful shutdown
(SIGTERM closes Proton clients with amqp:connection:forced; the process exits 0)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio
from proton import Message
from proton.utils import BlockingConnection, ConnectionClosed

from router.amqp import errors as E

from .support.interop import run_in_thread
from .support.router_process import RouterProcess, logged_problems
from .support.router_proton import (
    Clients,
    TIMEOUT_S,
    condition,
    own_router,
    router,
    run_clients,
    shared_router,
    url,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


# --- graceful shutdown ---------------------------------------------------------------------------------


class ForcedClose(Clients):
    """A consumer and a producer (its message waiting for credit in the router) on a Container;
    records the condition of the router's close on each connection."""

    expected_errors = True

    def __init__(self, router: RouterProcess) -> None:
        super().__init__(router, prefetch=0)
        self.ready = threading.Event()
        self.closed_with: list[str | None] = []
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.receiver = event.container.create_receiver(self.connect(event.container), "shutdown.q")

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, "shutdown.q")
        elif event.link.name == "ready":
            self.ready.set()

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="in flight"))
            self.probe(event.container, self.producer, "ready")

    def on_connection_remote_close(self, event: Any) -> None:
        self.closed_with.append(condition(event.connection)[0])
        event.connection.close()  # Proton leaves a connection closed with "forced" open
        if len(self.closed_with) == len(self.connections):
            self.done = True


async def test_sigterm_closes_proton_clients_with_connection_forced_and_exits_0(
    own_router: Callable[[dict[str, Any]], RouterProcess],
) -> None:
    router = own_router({"listeners": [{"name": "amqp", "port": 0}]})
    blocking_ready = threading.Event()

    def blocking() -> str | None:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver("shutdown.blocking", credit=1)
            blocking_ready.set()
            try:
                receiver.receive(timeout=TIMEOUT_S)
            except ConnectionClosed as exc:
                return condition(exc.connection)[0]
            return "not closed"
        finally:
            conn.close()

    clients = ForcedClose(router)
    results: dict[str, Any] = {}

    async def run_blocking() -> None:
        results["blocking"] = await run_in_thread(blocking)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_blocking)
        nursery.start_soon(run_clients, clients)
        for ready in (blocking_ready, clients.ready):
            assert await trio.to_thread.run_sync(ready.wait, TIMEOUT_S)
        router.send_signal(signal.SIGTERM)
    code = await trio.to_thread.run_sync(router.wait, TIMEOUT_S)
    assert code == 0, router.output
    assert not logged_problems(router.stderr), router.output
    assert results["blocking"] == E.CONNECTION_FORCED
    clients.check()
    assert clients.closed_with == [E.CONNECTION_FORCED, E.CONNECTION_FORCED]
