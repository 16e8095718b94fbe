"""The mesh as users run it: `router run` processes linked by inter-router connectors on
loopback, driven by python-qpid-proton clients (Container + MessagingHandler on a thread).

Scenarios from the mesh issue: three routers in a line with every outcome back at the sender; a
4-router ring where a router is killed mid-stream (traffic moves to the other path, every
delivery is accounted for); multicast on a redundant mesh without duplicates; request/reply
across the mesh with a dynamic reply-to; a router restarting with the same id; edge routers
failing over; an edge producer waiting for a consumer somewhere in the mesh.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from router.amqp.message import Message as RouterMessage
from router.net.client import connect
from router.net.management_client import management_session

from .support.interop import run_container, run_in_thread
from router.testing.meshprocs import MeshProcesses

pytestmark = [pytest.mark.interop, pytest.mark.process]

TIMEOUT_S = 20.0


async def run_handler(handler: MessagingHandler, timeout_s: float = TIMEOUT_S) -> None:
    """A Proton Container for `handler` on its own thread (Proton objects are thread-affine)."""
    stop = threading.Event()
    container = Container(handler)

    def close_all() -> None:
        for conn in getattr(handler, "connections", []):
            conn.close()

    await run_in_thread(
        lambda: run_container(container, timeout_s=timeout_s, stop=stop, on_stop=close_all),
        timeout_s=timeout_s + 3, stop=stop,
    )


class Scenario(MessagingHandler):
    def __init__(self, mesh: MeshProcesses, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mesh = mesh
        self.connections: list[Any] = []
        self.errors: list[str] = []

    def connect(self, container: Any, router: str) -> Any:
        conn = container.connect(f"amqp://127.0.0.1:{self.mesh.port(router)}", reconnect=False)
        self.connections.append(conn)
        return conn

    def finish(self) -> None:
        for conn in self.connections:
            conn.close()
        self.connections = []

    def on_link_error(self, event: Any) -> None:
        self.errors.append(f"link {event.link.remote_condition}")
        self.finish()

    def on_connection_error(self, event: Any) -> None:
        self.errors.append(f"connection {event.connection.remote_condition}")
        self.finish()


OUTCOMES = ("accept", "reject", "release", "modify")


class EveryOutcome(Scenario):
    """Receiver on the last router answers each message with the outcome its body names; the
    sender on the first router records the outcome it learns."""

    def __init__(self, mesh: MeshProcesses, source: str, target: str, per_outcome: int) -> None:
        super().__init__(mesh, auto_accept=False, auto_settle=True)
        self.source, self.target, self.per_outcome = source, target, per_outcome
        self.plan = [OUTCOMES[i % 4] for i in range(4 * per_outcome)]
        self.sent = 0
        self.learned: dict[int, str] = {}
        self.sender: Any = None

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container, self.target), "line")
        # The sender gets credit once the receiver's address has reached the source router.
        self.sender = event.container.create_sender(self.connect(event.container, self.source), "line")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < len(self.plan):
            delivery = event.sender.send(Message(body=self.plan[self.sent], id=self.sent))
            delivery.index = self.sent  # type: ignore[attr-defined]
            self.sent += 1

    def on_message(self, event: Any) -> None:
        outcome = event.message.body
        if outcome == "accept":
            self.accept(event.delivery)
        elif outcome == "reject":
            self.reject(event.delivery)
        else:
            self.release(event.delivery, delivered=outcome == "modify")

    def _learn(self, event: Any, name: str) -> None:
        self.learned[event.delivery.index] = name
        if len(self.learned) == len(self.plan):
            self.finish()

    def on_accepted(self, event: Any) -> None:
        self._learn(event, "accept")

    def on_rejected(self, event: Any) -> None:
        self._learn(event, "reject")

    def on_released(self, event: Any) -> None:
        self._learn(event, "modify" if event.delivery.remote_state == Delivery.MODIFIED else "release")


async def test_three_in_a_line_every_outcome_reaches_the_sender(tmp_path: Path) -> None:
    with MeshProcesses(tmp_path, "A-B B-C") as mesh:
        await mesh.wait_converged()
        scenario = EveryOutcome(mesh, "A", "C", per_outcome=25)
        await run_handler(scenario)
        assert not scenario.errors
        assert [scenario.learned[i] for i in range(len(scenario.plan))] == scenario.plan
        # The middle router forwarded them: its counters say so (management across the mesh).
        (general,) = await mesh.ask("A", "B", "org.apache.qpid.dispatch.router")
        assert general["deliveriesTransit"] >= 100


class KillMidStream(Scenario):
    """Unsettled traffic A -> C over a ring; `kill` runs once `kill_after` messages are accepted.
    Released or modified messages are sent again; the scenario ends when every message id has
    been accepted."""

    def __init__(self, mesh: MeshProcesses, total: int, kill_after: int, kill: Callable[[], None], *,
                 source: str = "A", target: str = "C", address: str = "ring") -> None:  # fmt: skip
        super().__init__(mesh, auto_accept=True)
        self.total, self.kill_after, self.kill = total, kill_after, kill
        self.source, self.target, self.address = source, target, address
        self.pending: list[int] = list(range(total))
        self.accepted: set[int] = set()
        self.outcomes: Counter[str] = Counter()
        self.received: Counter[int] = Counter()
        self.killed_at: float | None = None
        self.first_accept_after_kill: float | None = None
        self.in_flight = 0

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container, self.target), self.address)
        event.container.create_sender(self.connect(event.container, self.source), self.address)

    def on_sendable(self, event: Any) -> None:
        # A bounded window keeps deliveries in flight on the path when the router dies.
        while event.sender.credit and self.pending and self.in_flight < 50:
            index = self.pending.pop(0)
            delivery = event.sender.send(Message(body=index))
            delivery.index = index  # type: ignore[attr-defined]
            self.in_flight += 1

    def on_message(self, event: Any) -> None:
        self.received[event.message.body] += 1

    def on_accepted(self, event: Any) -> None:
        self.in_flight -= 1
        self.outcomes["accepted"] += 1
        self.accepted.add(event.delivery.index)
        if self.killed_at is not None and self.first_accept_after_kill is None:
            self.first_accept_after_kill = time.monotonic()
        if len(self.accepted) >= self.kill_after and self.killed_at is None:
            self.kill()
            self.killed_at = time.monotonic()
        if len(self.accepted) == self.total:
            self.finish()
        else:
            self.on_sendable(event)

    def on_released(self, event: Any) -> None:
        # Released (never sent on) or modified (sent, fate unknown): the producer resends.
        self.in_flight -= 1
        self.outcomes["modified" if event.delivery.remote_state == Delivery.MODIFIED else "released"] += 1
        self.pending.append(event.delivery.index)
        self.on_sendable(event)

    def on_rejected(self, event: Any) -> None:
        self.in_flight -= 1
        self.outcomes["rejected"] += 1
        self.errors.append(f"rejected {event.delivery.index}")


async def test_ring_survives_a_router_killed_mid_stream(tmp_path: Path) -> None:
    with MeshProcesses(tmp_path, "A-B B-C C-D D-A") as mesh:
        await mesh.wait_converged()
        # A reaches C over B or D at equal cost; the tie goes to the smaller id: B.
        (c_from_a,) = [n for n in await mesh.nodes("A") if n["id"] == "C"]
        assert c_from_a["nextHop"] == "B"
        scenario = KillMidStream(mesh, total=2000, kill_after=300, kill=lambda: mesh.kill("B"))
        await run_handler(scenario, timeout_s=30)
        assert not scenario.errors
        assert scenario.accepted == set(range(2000)), "every message was accepted in the end"
        assert set(scenario.received) == set(range(2000))
        # Duplicates only for messages whose fate was unknown (modified) when B died.
        duplicates = sum(n - 1 for n in scenario.received.values())
        assert duplicates <= scenario.outcomes["modified"]
        assert scenario.killed_at is not None and scenario.first_accept_after_kill is not None
        assert scenario.first_accept_after_kill - scenario.killed_at < 5.0
        (c_now,) = [n for n in await mesh.nodes("A") if n["id"] == "C"]
        assert c_now["nextHop"] == "D"


class Fanout(Scenario):
    def __init__(self, mesh: MeshProcesses, source: str, receivers: list[str], count: int) -> None:
        super().__init__(mesh)
        self.source, self.receivers, self.count = source, receivers, count
        self.got: dict[str, Counter[int]] = {}
        self.sent = 0
        self.settled = 0
        # Set by the test once the source router knows every router with a receiver: a
        # multicast sender has credit as soon as one destination exists anywhere.
        self.ready = threading.Event()

    def on_start(self, event: Any) -> None:
        for i, router in enumerate(self.receivers):
            receiver = event.container.create_receiver(self.connect(event.container, router), "mc.news", name=f"r{i}")
            self.got[receiver.name] = Counter()
        event.container.schedule(0.02, self)

    def on_timer_task(self, event: Any) -> None:
        if not self.ready.is_set():
            event.container.schedule(0.02, self)
            return
        event.container.create_sender(self.connect(event.container, self.source), "mc.news")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < self.count:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.got[event.link.name][event.message.body] += 1

    def on_settled(self, event: Any) -> None:
        self.settled += 1
        if self.settled == self.count:
            self.finish()


async def test_multicast_on_a_redundant_mesh_has_no_duplicates(tmp_path: Path) -> None:
    extra = {name: {"addresses": [{"prefix": "mc", "distribution": "multicast"}]} for name in "ABCD"}
    with MeshProcesses(tmp_path, "A-B A-C A-D B-C B-D C-D", extra=extra) as mesh:
        await mesh.wait_converged()
        scenario = Fanout(mesh, "A", ["B", "C", "C", "D"], count=200)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_handler, scenario)
            with trio.fail_after(10):
                async with connect("127.0.0.1", mesh.port("A")) as client, management_session(client) as mgmt:
                    while True:  # the address has reached A from B, C and D
                        rows = await mgmt.query_dicts("org.apache.qpid.dispatch.router.address")
                        if any(r["address"] == "mc.news" and set(r["remoteHostRouters"]) == {"B", "C", "D"} for r in rows):
                            break
                        await trio.sleep(0.05)  # polling management: no event crosses the process boundary
            scenario.ready.set()
        assert not scenario.errors
        for name, counts in scenario.got.items():
            assert set(counts) == set(range(200)), name
            assert max(counts.values()) == 1, f"{name} got duplicates"


class RequestReply(Scenario):
    """A service on C answers requests to `service` at their reply-to; a client on A sends from a
    dynamic reply address that must be reachable from C."""

    def __init__(self, mesh: MeshProcesses, count: int) -> None:
        super().__init__(mesh)
        self.count = count
        self.reply_to: str | None = None
        self.replies: list[str] = []
        self.requests: Any = None
        self.service_replies: Any = None
        self.sent = 0

    def on_start(self, event: Any) -> None:
        service = self.connect(event.container, "C")
        event.container.create_receiver(service, "service", name="service-in")
        self.service_replies = event.container.create_sender(service, None)  # anonymous: to per message
        client = self.connect(event.container, "A")
        event.container.create_receiver(client, None, dynamic=True)
        self.requests = event.container.create_sender(client, "service")

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None and event.receiver.remote_source.dynamic:
            self.reply_to = event.receiver.remote_source.address
            self.on_sendable(event)

    def on_sendable(self, event: Any) -> None:
        if self.reply_to is None or self.requests is None:
            return
        while self.requests.credit and self.sent < self.count:
            self.requests.send(Message(body=f"q{self.sent}", reply_to=self.reply_to, correlation_id=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        message = event.message
        if event.link.name == "service-in":
            self.service_replies.send(Message(address=message.reply_to, body=message.body.upper(),
                                              correlation_id=message.correlation_id))  # fmt: skip
        else:
            self.replies.append(message.body)
            if len(self.replies) == self.count:
                self.finish()


async def test_request_reply_across_the_mesh_with_a_dynamic_reply_to(tmp_path: Path) -> None:
    with MeshProcesses(tmp_path, "A-B B-C") as mesh:
        await mesh.wait_converged()
        scenario = RequestReply(mesh, count=20)
        await run_handler(scenario)
        assert not scenario.errors
        assert scenario.reply_to is not None and scenario.reply_to.startswith("_topo/0/A/")
        assert sorted(scenario.replies) == sorted(f"Q{i}" for i in range(20))


async def test_a_router_restarting_with_the_same_id_rejoins(tmp_path: Path) -> None:
    with MeshProcesses(tmp_path, "A-B B-C") as mesh:
        await mesh.wait_converged()
        (before,) = [n for n in await mesh.nodes("A") if n["id"] == "C"]
        assert mesh.stop("C") == 0
        mesh.restart("C")
        with trio.fail_after(15):
            while True:  # across processes there is no event to await: poll A's view of C
                seen = [n for n in await mesh.nodes("A") if n["id"] == "C" and n.get("nextHop")]
                if seen and seen[0]["instance"] != before["instance"]:
                    break
                await trio.sleep(0.1)
        scenario = EveryOutcome(mesh, "A", "C", per_outcome=5)
        await run_handler(scenario)
        assert not scenario.errors and len(scenario.learned) == 20


async def test_edge_routers_on_two_interiors_fail_over(tmp_path: Path) -> None:
    """E1 (producer) hangs off X, E2 (consumer) off Y. E1 is given a second uplink, to Y, at run
    time through management; when X dies mid-stream E1 fails over to Y and every message is
    accepted in the end (released or modified ones are sent again)."""
    with MeshProcesses(tmp_path, "X-Y", edge_routers={"E1": ["X"], "E2": ["Y"]}) as mesh:
        await mesh.wait_converged()
        async with connect("127.0.0.1", mesh.port("E1")) as client, management_session(client) as mgmt:
            created = await mgmt.create(
                "connector", {"host": "127.0.0.1", "port": mesh.ports["Y"]["edge"], "role": "edge"}, name="up-Y"
            )
            assert created["role"] == "edge"
            with trio.fail_after(10):
                while True:  # both uplinks up: X first (the active one), Y standing by
                    rows = await mgmt.query_dicts("org.apache.qpid.dispatch.connection")
                    if sorted(r["connector"] for r in rows if r.get("role") == "edge" and r.get("opened")) == ["up-X", "up-Y"]:
                        break
                    await trio.sleep(0.05)
        scenario = KillMidStream(mesh, total=1000, kill_after=200, kill=lambda: mesh.kill("X"), source="E1", target="E2",
                                 address="work")  # fmt: skip
        await run_handler(scenario, timeout_s=30)
        assert not scenario.errors
        assert scenario.accepted == set(range(1000))
        assert set(scenario.received) == set(range(1000))
        assert sum(n - 1 for n in scenario.received.values()) <= scenario.outcomes["modified"]
        assert scenario.first_accept_after_kill is not None and scenario.killed_at is not None
        assert scenario.first_accept_after_kill - scenario.killed_at < 5.0
        async with connect("127.0.0.1", mesh.port("E1")) as client, management_session(client) as mgmt:
            rows = await mgmt.query_dicts("org.apache.qpid.dispatch.connection")
            assert [r["connector"] for r in rows if r.get("role") == "edge" and r.get("opened")] == ["up-Y"]
            status = {r["name"]: r["connectionStatus"] for r in await mgmt.query_dicts("org.apache.qpid.dispatch.connector")}
            assert status == {"up-X": "FAILED", "up-Y": "SUCCESS"} or status["up-X"] == "CONNECTING", status


async def test_an_edge_producer_waits_for_a_consumer_somewhere_in_the_mesh(tmp_path: Path) -> None:
    """Credit on an edge follows destinations, as on an interior: a producer on edge E1 (uplink
    X) gets none until a consumer attaches on Y, then sends."""
    with MeshProcesses(tmp_path, "X-Y", edge_routers={"E1": ["X"]}) as mesh:
        await mesh.wait_converged()
        async with connect("127.0.0.1", mesh.port("E1")) as producer:
            async with management_session(producer) as mgmt:
                with trio.fail_after(10):
                    while True:  # until the uplink is up (else there would be no credit anyway)
                        rows = await mgmt.query_dicts("org.apache.qpid.dispatch.connection")
                        if any(r.get("role") == "edge" and r.get("opened") for r in rows):
                            break
                        await trio.sleep(0.05)
            sender = await producer.open_sender("edge-credit")
            await producer.open_sender("edge-credit-2")  # a round trip: any flow for the first is here
            assert sender.link.credit == 0
            async with connect("127.0.0.1", mesh.port("Y")) as consumer:
                receiver = await consumer.open_receiver("edge-credit")
                with trio.fail_after(10):
                    tracker = await sender.start_send(RouterMessage.value("hello"))  # waits for credit
                    delivery = await receiver.receive()
                    receiver.accept(delivery)
                    outcome = await tracker.wait()
                assert type(outcome).__name__ == "Accepted"
                assert delivery.message.body_value == "hello"
