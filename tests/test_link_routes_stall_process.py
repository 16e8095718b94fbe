"""A link-routed consumer that stops reading stops only the routed links between router
processes (docs/mesh.md, "Link routes", *A slow reader between routers*): `router run` A - B on
loopback, the Proton C example broker behind A with a link route, python-qpid-proton clients.
The consumer on B is a Proton BlockingConnection that attaches to the broker's queue through the
route and then never reads its socket again, while an 8 MiB message streams to it from the
broker through A: B holds the frames its socket does not take, shuts the routed links' session
window at A and keeps reading A, so a message to a mobile address crosses from A to B meanwhile
(before, B stopped reading A altogether past its byte bound and that message waited as long as
the consumer did). Once the consumer goes, B holds nothing and its windows are open again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Message
from proton import Timeout
from proton.utils import BlockingConnection

from router.testing.meshprocs import MeshProcesses

from .support.brokers import CBroker
from .support.interop import run_in_thread
from .test_link_routes import c_broker, c_broker_program  # noqa: F401 (fixtures)
from .test_mesh_process import Scenario, run_handler

pytestmark = [pytest.mark.interop, pytest.mark.process]

BIG = bytes(8 * 1024 * 1024)
CONNECTION = "org.apache.qpid.dispatch.connection"
ROUTER = "org.apache.qpid.dispatch.router"
TIMEOUT_S = 20.0


class Meanwhile(Scenario):
    """A receiver on B and a sender on A of the mobile address `meanwhile`: one message, accepted."""

    def __init__(self, mesh: MeshProcesses) -> None:
        super().__init__(mesh)
        self.received: list[str] = []
        self.sent = self.accepted = False

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container, "B"), "meanwhile")
        event.container.create_sender(self.connect(event.container, "A"), "meanwhile")

    def on_sendable(self, event: Any) -> None:  # (credit once A knows the consumer on B)
        if not self.sent:
            self.sent = True
            event.sender.send(Message(body="crossed"))

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.accepted = True
        self.finish()


def routed_at(port: int) -> None:
    """Until the router at `port` has learnt the route from the mesh: a sender to the route gets
    the broker's credit (to a mobile address with no consumer it would get none)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
        try:
            probe = conn.create_sender("q.probe")
            try:
                conn.wait(lambda: probe.link.credit > 0, timeout=0.5)
                return
            except Timeout:
                if time.monotonic() > deadline:
                    raise
        finally:
            conn.close()


async def test_a_stalled_routed_consumer_stops_the_routed_links_not_the_connection(
    tmp_path: Path, c_broker: CBroker
) -> None:  # fmt: skip
    # B's client listener: small buffers, no stall or idle time-out (the stalled consumer sends
    # nothing); between the routers a byte bound of 1 MiB and bounded socket buffers (a LAN
    # mesh's setting: a write mark of 1 MiB), so that the connection would be paused past 5 MiB
    # held, below the message.
    small = {"socket_buffer_bytes": 65536, "write_high_water_bytes": 65536, "stalled_stream_timeout_s": 0,
             "idle_timeout_s": 0}
    extra = {
        "A": {"connectors": [{"name": "broker", "host": "127.0.0.1", "port": c_broker.port, "role": "route-container",
                              "reconnect_initial_s": 0.05, "reconnect_max_s": 0.2}],
              "link_routes": [{"prefix": "q", "direction": "in", "connection": "broker"},
                              {"prefix": "q", "direction": "out", "connection": "broker"}]},
        "B": {"listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0, **small}]},
    }  # fmt: skip
    inter_router = {"read_high_water_bytes": 1 << 20, "socket_buffer_bytes": 1 << 19}
    with MeshProcesses(tmp_path, "A-B", extra=extra, inter_router=inter_router) as mesh:
        await mesh.wait_converged()
        await run_in_thread(routed_at, mesh.port("B"))
        stalled = await run_in_thread(BlockingConnection, f"127.0.0.1:{mesh.port('B')}", TIMEOUT_S)
        await run_in_thread(stalled.create_receiver, "q.big", 10)  # then never read again
        try:
            producer = await run_in_thread(BlockingConnection, f"127.0.0.1:{mesh.port('A')}", TIMEOUT_S)
            sender = await run_in_thread(producer.create_sender, "q.big")
            await run_in_thread(sender.send, Message(body=BIG))  # into the broker's queue
            with trio.fail_after(TIMEOUT_S):  # until B stops taking the stream from A
                while not any(c["shutWindows"] for c in await mesh.ask("B", "B", CONNECTION)):
                    router = (await mesh.ask("B", "B", ROUTER))[0]
                    assert router["pausedConnectionCount"] == 0, "B paused the connection from A"
                    await trio.sleep(0.1)

            crossing = Meanwhile(mesh)  # a message to a mobile address crosses from A to B
            await run_handler(crossing)
            assert not crossing.errors and crossing.received == ["crossed"] and crossing.accepted
            inter = [c for c in await mesh.ask("B", "B", CONNECTION) if c["role"] == "inter-router"]
            assert [c["shutWindows"] for c in inter] == [1]
            assert (await mesh.ask("B", "B", ROUTER))[0]["pausedConnectionCount"] == 0
            await run_in_thread(producer.close)
        finally:
            await run_in_thread(stalled.close)
        with trio.fail_after(TIMEOUT_S):
            while any(c["shutWindows"] or c["heldFrameBytes"] for c in await mesh.ask("B", "B", CONNECTION)):
                await trio.sleep(0.1)
