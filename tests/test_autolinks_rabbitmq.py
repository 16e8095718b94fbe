"""Auto-links to RabbitMQ from Debian, with python-qpid-proton clients and `router run`
processes: a two-router mesh in front of the broker (producer on one router, the queue behind
the other, consumer back out through the queue); the broker restarted mid-stream with every
delivery getting an outcome; a queue sharded over two RabbitMQ nodes; management's view of the
auto-links throughout; an address with fallback destinations in a queue."""

from __future__ import annotations

import functools
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from router.net.client import connect
from router.net.management_client import management_session

from .support.external_brokers import RabbitMQ, rabbitmq, rabbitmq2, rabbitmq_private  # noqa: F401
from .support.interop import run_container, run_in_thread
from router.testing.meshprocs import MeshProcesses

pytestmark = [pytest.mark.broker, pytest.mark.process]

AUTO_LINK = "org.apache.qpid.dispatch.router.config.autoLink"
BROKER_TIMEOUT_S = 60.0  # a RabbitMQ node's start is a few seconds; CI machines are slower


def _connector(name: str, broker: RabbitMQ) -> dict[str, Any]:
    return {"name": name, "host": "127.0.0.1", "port": broker.port, "role": "route-container",
            "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0}  # fmt: skip


def _auto_link(address: str, direction: str, connection: str, queue: str) -> dict[str, Any]:
    return {"address": address, "direction": direction, "connection": connection, "external_address": f"/queue/{queue}",
            "retry_initial_s": 0.2, "retry_max_s": 1.0}  # fmt: skip


async def _auto_links(mesh: MeshProcesses, router: str) -> dict[str, dict[str, Any]]:
    async with connect("127.0.0.1", mesh.port(router)) as client, management_session(client) as mgmt:
        return {row["name"]: row for row in await mgmt.query_dicts(AUTO_LINK)}


async def _until_active(mesh: MeshProcesses, router: str, timeout_s: float = BROKER_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    with trio.fail_after(timeout_s):
        while True:
            rows = await _auto_links(mesh, router)
            if rows and all(row["operStatus"] == "active" for row in rows.values()):
                return rows
            await trio.sleep(0.1)  # polling management across the process boundary


def _send(port: int, address: str, bodies: list[str]) -> None:
    """Send each message and wait for it to be accepted (BlockingSender raises otherwise)."""
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=30)
    try:
        sender = conn.create_sender(address)
        for body in bodies:
            sender.send(Message(body=body, durable=True))
    finally:
        conn.close()


def _receive(port: int, address: str, count: int) -> list[Any]:
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS", timeout=30)
    try:
        receiver = conn.create_receiver(address, credit=count)
        got = []
        for _ in range(count):
            got.append(receiver.receive(timeout=30).body)
            receiver.accept()
        return got
    finally:
        conn.close()


async def test_out_and_in_through_rabbitmq_behind_a_two_router_mesh(tmp_path: Path, rabbitmq: RabbitMQ) -> None:
    queue = f"orders-{uuid.uuid4().hex[:8]}"
    extra = {"A": {"connectors": [_connector("rabbit", rabbitmq)],
                   "auto_links": [_auto_link("orders", "out", "rabbit", queue),
                                  _auto_link("orders-done", "in", "rabbit", queue)]}}  # fmt: skip
    with MeshProcesses(tmp_path, "A-B", extra=extra) as mesh:
        await mesh.wait_converged()
        rows = await _until_active(mesh, "A")
        assert {row["direction"] for row in rows.values()} == {"in", "out"}
        assert all(row["linkRef"] and row["lastError"] is None for row in rows.values())
        # A producer on B reaches the queue behind A; nobody consumes orders-done yet, so the
        # auto-link in has no credit and the messages stay in the queue.
        bodies = [f"order {i}" for i in range(10)]
        await run_in_thread(_send, mesh.port("B"), "orders", bodies, timeout_s=BROKER_TIMEOUT_S)
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 10
        # A consumer on B receives them out of the queue, through the auto-link in.
        got = await run_in_thread(_receive, mesh.port("B"), "orders-done", 10, timeout_s=BROKER_TIMEOUT_S)
        assert got == bodies
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 0


class Producer(MessagingHandler):  # type: ignore[misc]
    """Sends `total` unsettled messages as credit comes, and records every outcome; sets
    `halfway` once `restart_after` are accepted; ends when every message sent is settled."""

    def __init__(self, url: str, address: str, total: int, restart_after: int) -> None:
        super().__init__()
        self.url, self.address, self.total, self.restart_after = url, address, total, restart_after
        self.sent = 0
        self.outcomes: Counter[str] = Counter()
        self.halfway = threading.Event()
        self.connection: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(self.url, allowed_mechs="ANONYMOUS")
        event.container.create_sender(self.connection, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.total:
            event.sender.send(Message(body=self.sent, durable=True))
            self.sent += 1

    def on_settled(self, event: Any) -> None:
        state = event.delivery.remote_state
        name = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected", Delivery.RELEASED: "released",
                Delivery.MODIFIED: "modified"}.get(state, f"other {state}")  # fmt: skip
        self.outcomes[name] += 1
        if self.outcomes["accepted"] >= self.restart_after:
            self.halfway.set()
        if sum(self.outcomes.values()) == self.total:
            self.connection.close()


async def test_broker_restarted_mid_stream(tmp_path: Path, rabbitmq_private: RabbitMQ) -> None:
    broker = rabbitmq_private
    queue = f"restart-{uuid.uuid4().hex[:8]}"
    extra = {"A": {"connectors": [_connector("rabbit", broker)], "auto_links": [_auto_link("jobs", "out", "rabbit", queue)]}}
    with MeshProcesses(tmp_path, "A-B", extra=extra) as mesh:
        await mesh.wait_converged()
        await _until_active(mesh, "A")
        producer = Producer(f"amqp://127.0.0.1:{mesh.port('B')}", "jobs", total=400, restart_after=100)
        container = Container(producer)
        seen: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(
                run_in_thread, functools.partial(run_container, container, timeout_s=3 * BROKER_TIMEOUT_S),
                timeout_s=3 * BROKER_TIMEOUT_S + 5,
            ))  # fmt: skip
            await trio.to_thread.run_sync(producer.halfway.wait, 2 * BROKER_TIMEOUT_S)
            assert producer.halfway.is_set()
            await run_in_thread(broker.stop, timeout_s=BROKER_TIMEOUT_S)
            with trio.fail_after(BROKER_TIMEOUT_S):
                while True:  # management sees the auto-link go (polling across processes)
                    (row,) = (await _auto_links(mesh, "A")).values()
                    seen.append(row["operStatus"])
                    if row["operStatus"] != "active":
                        break
                    await trio.sleep(0.05)
            assert row["lastError"]
            await run_in_thread(broker.start, timeout_s=BROKER_TIMEOUT_S)
            (row,) = (await _until_active(mesh, "A")).values()
            assert row["attachCount"] >= 2
        print("outcomes", dict(producer.outcomes), "states seen", seen[-3:], "broker starts", broker.start_seconds)
        # Every delivery the producer sent has an outcome: none was silently lost.
        assert producer.sent == 400
        assert sum(producer.outcomes.values()) == 400, producer.outcomes
        assert set(producer.outcomes) <= {"accepted", "released", "modified"}, producer.outcomes
        assert producer.outcomes["accepted"] >= 100
        assert seen[-1] in ("inactive", "attaching", "failed")


async def test_a_queue_sharded_over_two_rabbitmq_nodes(tmp_path: Path, rabbitmq: RabbitMQ, rabbitmq2: RabbitMQ) -> None:
    queue = f"shard-{uuid.uuid4().hex[:8]}"
    extra = {"A": {"connectors": [_connector("rabbit1", rabbitmq), _connector("rabbit2", rabbitmq2)],
                   "auto_links": [_auto_link("sharded", "out", "rabbit1", queue),
                                  _auto_link("sharded", "out", "rabbit2", queue)]}}  # fmt: skip
    with MeshProcesses(tmp_path, "A-B", extra=extra) as mesh:
        await mesh.wait_converged()
        rows = await _until_active(mesh, "A")
        assert len(rows) == 2
        await run_in_thread(_send, mesh.port("B"), "sharded", [f"m{i}" for i in range(40)], timeout_s=BROKER_TIMEOUT_S)
        one = await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S)
        two = await run_in_thread(rabbitmq2.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S)
        assert one + two == 40
        assert one > 0 and two > 0, (one, two)


async def test_a_waypoint_address_through_rabbitmq(tmp_path: Path, rabbitmq: RabbitMQ) -> None:
    """One address both ways: producers send to `jobs` (phase 0, into the queue), receivers of
    `jobs` get what comes out of the queue (phase 1), on the other router."""
    queue = f"waypoint-{uuid.uuid4().hex[:8]}"
    waypoint = [{"prefix": "jobs", "waypoint": True}]
    extra = {"A": {"connectors": [_connector("rabbit", rabbitmq)], "addresses": waypoint,
                   "auto_links": [_auto_link("jobs", "out", "rabbit", queue), _auto_link("jobs", "in", "rabbit", queue)]},
             "B": {"addresses": waypoint}}  # fmt: skip
    with MeshProcesses(tmp_path, "A-B", extra=extra) as mesh:
        await mesh.wait_converged()
        await _until_active(mesh, "A")
        bodies = [f"job {i}" for i in range(10)]
        await run_in_thread(_send, mesh.port("B"), "jobs", bodies, timeout_s=BROKER_TIMEOUT_S)
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 10
        got = await run_in_thread(_receive, mesh.port("B"), "jobs", 10, timeout_s=BROKER_TIMEOUT_S)
        assert got == bodies
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 0


async def test_fallback_destinations_through_rabbitmq(tmp_path: Path, rabbitmq: RabbitMQ) -> None:
    """docs/brokers.md, "Fallback destinations": with no consumer of `tasks` anywhere, a
    producer's messages are stored in the fallback queue (accepted there); a consumer that
    attaches later, on the other router, receives the stored ones through the in fallback
    auto-link, and the queue is empty again."""
    queue = f"fallback-{uuid.uuid4().hex[:8]}"
    rule = [{"prefix": "tasks", "enable_fallback": True}]
    links = [{**_auto_link("tasks", direction, "rabbit", queue), "fallback": True} for direction in ("out", "in")]
    extra = {"A": {"connectors": [_connector("rabbit", rabbitmq)], "addresses": rule, "auto_links": links},
             "B": {"addresses": rule}}  # fmt: skip
    with MeshProcesses(tmp_path, "A-B", extra=extra) as mesh:
        await mesh.wait_converged()
        await _until_active(mesh, "A")
        bodies = [f"task {i}" for i in range(10)]
        await run_in_thread(_send, mesh.port("B"), "tasks", bodies, timeout_s=BROKER_TIMEOUT_S)  # each accepted
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 10
        got = await run_in_thread(_receive, mesh.port("B"), "tasks", 10, timeout_s=BROKER_TIMEOUT_S)
        assert got == bodies
        assert await run_in_thread(rabbitmq.queue_depth, queue, timeout_s=BROKER_TIMEOUT_S) == 0
